"""Marian's vocabulary and tokenizer in tfattn ids (private module of
`tfattn.interop.marian`).

`MarianVocabulary` is the permutation between Marian's ids and tfattn's;
`MarianTokenizer` follows transformers' `MarianTokenizer`
(models/marian/tokenization_marian.py): SentencePiece pieces of
`source.spm` (source text) or `target.spm` (target text), a leading
language code such as `>>fra<<` kept as one token, special tokens in the
text kept whole, pieces looked up in `vocab.json` (absent ones read as
`<unk>`), `</s>` appended; decoding maps ids to pieces and joins them with
the target SentencePiece model.

`MarianTokenizer` also tokenizes in TensorFlow ops (`tokenize_ids`,
`detokenize`, `id_to_string`: tensorflow-text's SentencePiece on
`source.spm`, then a piece -> tfattn id table), for `tf.data`, training and
the SavedModel exports; `tokenize_target` does the same with
`target.spm`, for training labels. The graph path keeps a leading
`>>xx<<` language code whole, as the Python path does; special tokens
written in the text (`</s>`, `<unk>`, `<pad>`) it leaves to SentencePiece,
which cuts them into pieces.
"""

import json
import os
import re

import numpy as np
import tensorflow as tf

from tfattn.interop._marian_files import read_bytes
from tfattn.interop._marian_files import read_json
from tfattn.interop._marian_files import refuse
from tfattn.utils.ids import BOS_ID
from tfattn.utils.ids import EOS_ID
from tfattn.utils.ids import PAD_ID
from tfattn.utils.ids import UNK_ID

__all__ = ["MarianTokenizer", "MarianVocabulary", "TOKENIZER_FILES"]

TOKENIZER_FILES = ("source.spm", "target.spm", "vocab.json",
                   "tokenizer_config.json")
_SPIECE_UNDERLINE = "\u2581"
# transformers' `remove_language_code`: ">>" at the start, up to the first
# "<<" (RE2 syntax, `s`: a code may not hold a newline in practice, but the
# Python path's `find` crosses one).
_LANGUAGE_CODE = r"(?s)^(>>.*?<<)"


class MarianVocabulary:
    """The permutation between Marian ids [0, V) and tfattn ids [0, V].

    tfattn 0 (PAD) and 2 (BOS) both read Marian's padding row (the
    decoder's start), 1 (UNK) its unk, 3 (EOS) its eos, and 4, 5, ... the
    other Marian ids in increasing order.

    Args:
        marian_size: int V. Marian's vocabulary size.
        pad, eos, unk: int. Marian's special ids.
        suppress_pad: bool. Marian's generation never emits padding
            (`bad_words_ids`).

    Attributes:
        marian_of_tfattn: int array [V + 1]: the Marian id of each tfattn
            id (the row an embedding takes).
        tfattn_of_marian: int array [V]: the tfattn id of each Marian id
            (padding -> BOS_ID, the id whose logit is Marian's padding
            logit).
        tfattn_size: int, V + 1.
    """

    def __init__(self, marian_size, pad, eos, unk, suppress_pad):
        if len({pad, eos, unk}) != 3:
            refuse(f"the padding, eos and unk ids ({pad}, {eos}, {unk}) "
                   "must differ")
        others = [i for i in range(marian_size) if i not in (pad, eos, unk)]
        order = [None] * 4
        order[PAD_ID], order[UNK_ID], order[BOS_ID], order[EOS_ID] = (
            pad, unk, pad, eos)
        self.marian_of_tfattn = np.array(order + others, np.int64)
        self.tfattn_of_marian = np.empty(marian_size, np.int64)
        self.tfattn_of_marian[self.marian_of_tfattn[1:]] = np.arange(
            1, marian_size + 1)
        self.tfattn_of_marian[pad] = BOS_ID
        self.marian_size = marian_size
        self.tfattn_size = marian_size + 1
        self.pad, self.eos, self.unk = pad, eos, unk
        self.suppress_pad = suppress_pad

    def to_tfattn(self, ids):
        """Marian ids (any shape) -> tfattn ids, int32."""
        return self.tfattn_of_marian[np.asarray(ids)].astype(np.int32)

    def to_marian(self, ids):
        """tfattn ids (any shape) -> Marian ids, int32 (PAD and BOS ->
        Marian's padding)."""
        return self.marian_of_tfattn[np.asarray(ids)].astype(np.int32)


def _checked_vocab(vocab, config, tokenizer_config):
    """(ids of unk, eos, pad, suppress_pad) after the vocab.json checks."""
    names = {key: tokenizer_config.get(f"{key}_token", default)
             for key, default in (("unk", "<unk>"), ("eos", "</s>"),
                                  ("pad", "<pad>"))}
    for key, piece in names.items():
        if not isinstance(piece, str) or piece not in vocab:
            refuse(f"vocab.json has no {key} token {piece!r}")
    size = config.get("vocab_size")
    if sorted(vocab.values()) != list(range(len(vocab))) or size != len(
            vocab):
        refuse(f"vocab.json's ids must be 0..{len(vocab) - 1} once each, "
               f"and config.json's 'vocab_size' ({size!r}) its size "
               f"({len(vocab)})")
    ids = {key: vocab[piece] for key, piece in names.items()}
    for option, key in (("pad_token_id", "pad"),
                        ("decoder_start_token_id", "pad"),
                        ("eos_token_id", "eos")):
        if config.get(option) != ids[key]:
            refuse(f"config.json option {option!r} is "
                   f"{config.get(option)!r}; vocab.json's "
                   f"{names[key]!r} is {ids[key]}")
    for option in ("decoder_vocab_size",):
        if config.get(option) not in (None, size):
            refuse(f"config.json option {option!r} is {config[option]!r}; "
                   f"tfattn implements one vocabulary ({size})")
    bad = config.get("bad_words_ids")
    if bad not in (None, [], [[ids["pad"]]]):
        refuse(f"config.json option 'bad_words_ids' is {bad!r}; tfattn "
               f"implements only [[{ids['pad']}]] (the padding id) or none")
    return ids, bad == [[ids["pad"]]], names


def _processor(model_proto, name):
    import sentencepiece  # the `pretrained` extra installs it

    processor = sentencepiece.SentencePieceProcessor()
    try:
        processor.LoadFromSerializedProto(model_proto)
    except (RuntimeError, OSError) as error:
        refuse(f"{name!r} is not a SentencePiece model ({error})")
    return processor


class MarianTokenizer(tf.Module):
    """Text <-> tfattn ids for a Marian checkpoint.

    Args:
        files: dict: the bytes of `source.spm`, `target.spm`, `vocab.json`
            and `tokenizer_config.json` (written back unchanged by `save`).
        config: dict. The checkpoint's `config.json` (kept for
            `to_huggingface`, which writes its other options back).

    Attributes:
        vocabulary: `MarianVocabulary`.
        config: dict, `config.json` as read.
        vocab_size: int. tfattn's vocabulary size (Marian's + 1).
        pad_id, unk_id, bos_id, eos_id: int. 0, 1, 2 and 3.
    """

    def __init__(self, files, config):
        super().__init__(name="marian_tokenizer")
        # Plain Python attributes (not wrapped, tracked or saved by
        # tf.Module); `_build_graph_ops` turns tracking back on.
        self._self_setattr_tracking = False
        for name in TOKENIZER_FILES:
            if name not in files:
                refuse(f"the tokenizer has no {name!r}")
        self.files = dict(files)
        self.config = dict(config)
        options = json.loads(files["tokenizer_config.json"].decode("utf-8"))
        if options.get("separate_vocabs"):
            refuse("tokenizer_config.json option 'separate_vocabs' is "
                   "true; tfattn implements one shared vocabulary")
        vocab = json.loads(files["vocab.json"].decode("utf-8"))
        ids, suppress, names = _checked_vocab(vocab, config, options)
        self.vocabulary = MarianVocabulary(
            len(vocab), ids["pad"], ids["eos"], ids["unk"], suppress)
        self._vocab = vocab
        # By Marian id.
        self._pieces = [piece for piece, _ in sorted(
            vocab.items(), key=lambda item: item[1])]
        self._specials = set(names.values())
        self._split = re.compile(
            "(" + "|".join(re.escape(s) for s in sorted(
                self._specials, key=len, reverse=True)) + ")")
        self.clean_up_tokenization_spaces = bool(
            options.get("clean_up_tokenization_spaces", False))
        self._source = _processor(files["source.spm"], "source.spm")
        self._target = _processor(files["target.spm"], "target.spm")
        self.vocab_size = self.vocabulary.tfattn_size
        self.pad_id, self.unk_id, self.bos_id, self.eos_id = (
            PAD_ID, UNK_ID, BOS_ID, EOS_ID)
        self._build_graph_ops()

    def rebuild_graph_ops(self):
        """Makes the TensorFlow ops anew: `tf.random.set_seed` (and
        `keras.utils.set_random_seed`) clears the eager kernel cache, which
        deletes tensorflow-text's SentencePiece resource."""
        self._build_graph_ops()

    def _build_graph_ops(self):
        """The TensorFlow side: SentencePiece pieces, piece -> id table."""
        import tensorflow_text

        self._self_setattr_tracking = True
        self._graph_spm = tensorflow_text.SentencepieceTokenizer(
            model=self.files["source.spm"], out_type=tf.string)
        self._graph_target_spm = tensorflow_text.SentencepieceTokenizer(
            model=self.files["target.spm"], out_type=tf.string)
        self._id_of_piece = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                tf.constant(self._pieces),
                tf.constant(self.vocabulary.tfattn_of_marian, tf.int32)),
            default_value=UNK_ID)
        self._piece_of_id = tf.constant(
            [self._pieces[i] for i in self.vocabulary.marian_of_tfattn])

    def tokenize_ids(self, text, target=False):
        """Strings to tfattn ids in TensorFlow ops (no `</s>`: training
        and the exports append EOS): a leading `>>xx<<` language code as
        one id, the rest cut by the side's SentencePiece model.

        Args:
            text: a `tf.string` scalar or 1-D tensor (or str, list of str).
            target: bool. Cut with `target.spm` (labels) instead of
                `source.spm`.

        Returns:
            int32 ids: 1-D for a scalar, else a `tf.RaggedTensor` [B, None].

        Raises:
            ValueError: naming `text`, for a tensor of rank above 1.
        """
        text = tf.convert_to_tensor(text, tf.string)
        if text.shape.rank not in (0, 1):
            raise ValueError(
                "MarianTokenizer.tokenize_ids: `text` must be a string or "
                f"a 1-D batch of strings, got a tensor of shape {text.shape}")
        code = tf.strings.regex_replace(text, _LANGUAGE_CODE + "?.*", r"\1",
                                        replace_global=False)
        rest = tf.strings.regex_replace(text, _LANGUAGE_CODE, "")
        processor = self._graph_target_spm if target else self._graph_spm
        pieces = processor.tokenize(rest)
        has_code = tf.not_equal(code, "")
        if text.shape.rank == 0:
            pieces = tf.concat([tf.boolean_mask(code[tf.newaxis],
                                                has_code[tf.newaxis]),
                                pieces], 0)
            return self._id_of_piece.lookup(pieces)
        codes = tf.ragged.boolean_mask(code[:, tf.newaxis],
                                       has_code[:, tf.newaxis])
        pieces = tf.concat([codes, pieces], axis=1)
        return tf.ragged.map_flat_values(self._id_of_piece.lookup, pieces)

    def tokenize_target(self, text):
        """`tokenize_ids(text, target=True)`: a training pair's target side
        (`tfattn.data.pipeline.encode_pair` asks for it by this name).

        Args:
            text: a `tf.string` scalar or 1-D tensor.

        Returns:
            int32 ids, as `tokenize_ids`.
        """
        return self.tokenize_ids(text, target=True)

    def id_to_piece(self, token_id):
        """The piece of one tfattn id (Python, not in-graph).

        Args:
            token_id: int.

        Returns:
            str.
        """
        return self._pieces[int(self.vocabulary.marian_of_tfattn[
            int(token_id)])]

    def id_to_string(self, ids):
        """The piece of each tfattn id (any shape), in TensorFlow ops."""
        return tf.gather(self._piece_of_id, ids)

    def detokenize(self, ids, stop_at_eos=True):
        """tfattn ids to text in TensorFlow ops (`decode`'s text for
        ordinary pieces): special ids dropped, pieces joined.

        Args:
            ids: int [T] or [B, T] (0 = padding), or ragged [B, None].
            stop_at_eos: bool. Drop every id after a row's first EOS.

        Returns:
            A `tf.string` scalar for 1-D ids, else a [B] tensor.
        """
        if isinstance(ids, tf.RaggedTensor):
            ids = ids.to_tensor(default_value=PAD_ID)
        ids = tf.cast(tf.convert_to_tensor(ids), tf.int32)
        if ids.shape.rank == 1:
            return self.detokenize(ids[tf.newaxis], stop_at_eos)[0]
        is_eos = tf.cast(tf.equal(ids, EOS_ID), tf.int32)
        after = (tf.cumsum(is_eos, axis=-1) - is_eos) > 0
        keep = (ids > EOS_ID) & ~(after & stop_at_eos)
        pieces = tf.gather(self._piece_of_id, tf.ragged.boolean_mask(ids,
                                                                     keep))
        text = tf.strings.reduce_join(pieces, axis=-1)
        text = tf.strings.strip(tf.strings.regex_replace(
            text, _SPIECE_UNDERLINE, " "))
        if self.clean_up_tokenization_spaces:
            for old, new in _CLEAN_UP:
                text = tf.strings.regex_replace(text, re.escape(old), new)
        return text

    @classmethod
    def from_directory(cls, directory, config):
        """Reads the four tokenizer files of `directory` (refusing a
        missing one by name)."""
        read_json(directory, "tokenizer_config.json")
        return cls({name: read_bytes(directory, name)
                    for name in TOKENIZER_FILES}, config)

    def save(self, directory):
        """Writes the four tokenizer files, byte for byte as read."""
        for name in TOKENIZER_FILES:
            with open(os.path.join(directory, name), "wb") as handle:
                handle.write(self.files[name])

    def tokenize(self, text, target=False):
        """The pieces of a str `text` (transformers' `tokenize`): special
        tokens kept whole, then per chunk a leading `>>xx<<` language code
        kept whole and the rest cut by the SentencePiece model of the side.
        Anything else (a list of str, an array, a tensor) gives tfattn ids
        in TensorFlow ops (`tokenize_ids`), as training and the exports
        tokenize."""
        if not isinstance(text, str):
            return self.tokenize_ids(text, target)
        processor = self._target if target else self._source
        pieces = []
        for chunk in self._split.split(text):
            if chunk in self._specials:
                pieces.append(chunk)
                continue
            if chunk.startswith(">>") and chunk.find("<<") != -1:
                end = chunk.find("<<") + 2
                pieces.append(chunk[:end])
                chunk = chunk[end:]
            if chunk:
                pieces += processor.encode(chunk, out_type=str)
        return pieces

    def encode(self, text, target=False):
        """`text` -> tfattn ids (a list), `</s>` (EOS_ID) appended, as
        transformers' `tokenizer(text)["input_ids"]` (or `text_target=`
        with `target=True`) gives in Marian ids.

        Args:
            text: str.
            target: bool. Use `target.spm` (labels) instead of
                `source.spm`.

        Returns:
            list of int: tfattn ids.
        """
        unk = self.vocabulary.unk
        marian = [self._vocab.get(piece, unk)
                  for piece in self.tokenize(text, target)]
        return self.vocabulary.to_tfattn(
            marian + [self.vocabulary.eos]).tolist()

    def decode(self, ids, skip_special_tokens=True):
        """tfattn ids [T] -> text (transformers' `decode` of the Marian
        ids), with the target SentencePiece model.

        Args:
            ids: int sequence of tfattn ids (a `generate` row: EOS, then
                PAD).
            skip_special_tokens: bool. Drop eos, unk and padding.

        Returns:
            str.
        """
        marian = self.vocabulary.to_marian(np.asarray(ids, np.int64))
        tokens = [self._pieces[i] for i in marian.tolist()]
        if skip_special_tokens:
            tokens = [t for t in tokens if t not in self._specials]
        text, run = "", []
        for token in tokens:
            if token in self._specials:
                text += self._target.decode_pieces(run) + token + " "
                run = []
            else:
                run.append(token)
        text += self._target.decode_pieces(run)
        text = text.replace(_SPIECE_UNDERLINE, " ").strip()
        return _clean_up(text) if self.clean_up_tokenization_spaces else text


_CLEAN_UP = ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","),
             (" ' ", "'"), (" n't", "n't"), (" 'm", "'m"), (" 's", "'s"),
             (" 've", "'ve"), (" 're", "'re"))


def _clean_up(text):
    """transformers' `clean_up_tokenization`."""
    for old, new in _CLEAN_UP:
        text = text.replace(old, new)
    return text
