"""A joint SentencePiece subword vocabulary, usable inside the TF graph.

`train_tokenizer` learns one vocabulary from the sentences of both languages
(through the sentencepiece Python API, from memory: no temporary files) and
writes `spm.model` and `spm.vocab` into a model directory, each written to a
temporary name first and then renamed, so a reader never sees half a file.
`load_tokenizer` returns a `SubwordTokenizer`: a `tf.Module` around
`tensorflow_text.SentencepieceTokenizer(model=<serialized model bytes>)`,
which tokenizes and detokenizes inside `tf.data` and `tf.function` graphs and
can be saved in a SavedModel (the model bytes are a graph constant).

Special ids are fixed: pad=0, unk=1, bos=2, eos=3. The vocabulary size is read
from the trained model (`SubwordTokenizer.vocab_size`), never assumed: a
small corpus may support fewer pieces than requested, and training then
retries with the largest size the corpus allows.
"""

import io
import os
import re

import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2
import tensorflow as tf
import tensorflow_text as tf_text
from absl import logging

from tfattn.utils.files import write_files_atomically
from tfattn.utils.validation import check_choice
from tfattn.utils.validation import check_positive_int
from tfattn.utils.validation import check_rate
from tfattn.utils.validation import invalid_argument
from tfattn.utils.ids import BOS_ID  # noqa: F401 (handed on)
from tfattn.utils.ids import EOS_ID  # noqa: F401
from tfattn.utils.ids import MASK_ID  # noqa: F401
from tfattn.utils.ids import PAD_ID  # noqa: F401
from tfattn.utils.ids import UNK_ID  # noqa: F401

__all__ = [
    "BOS_ID",
    "EOS_ID",
    "MASK_ID",
    "MASK_PIECE",
    "MODEL_FILENAME",
    "MODEL_TYPES",
    "NORMALIZATIONS",
    "PAD_ID",
    "UNK_ID",
    "VOCAB_FILENAME",
    "SubwordTokenizer",
    "load_tokenizer",
    "save_tokenizer",
    "train_tokenizer",
]

# A masked language model's blank: a user-defined piece, so "[MASK]" in a
# text is always the one id MASK_ID (`train_tokenizer(..., mask_piece=True)`).
MASK_PIECE = "[MASK]"
MODEL_FILENAME = "spm.model"
VOCAB_FILENAME = "spm.vocab"
MODEL_TYPES = ("unigram", "bpe", "char", "word")
# SentencePiece's built-in normalisation rules; the `_cf` ones also fold
# case, so a model of such a vocabulary reads and writes lowercased text.
NORMALIZATIONS = ("nmt_nfkc", "nfkc", "nmt_nfkc_cf", "nfkc_cf", "identity")

_TOO_HIGH = re.compile(r"Vocabulary size too high \((\d+)\).*<= (\d+)")
_TOO_LOW = re.compile(
    r"Vocabulary size is smaller than required_chars\. "
    r"(\d+) vs (\d+)"
)


class SubwordTokenizer(tf.Module):
    """A SentencePiece model wrapped for use in TF graphs.

    Args:
        model_proto: bytes. A serialized SentencePiece model whose special
            ids are pad=0, unk=1, bos=2, eos=3.
        name: str or None. The module name. Defaults to `None`.
        sampling_alpha: float in [0, 1). Above 0, `tokenize` samples a
            segmentation per call (subword regularisation, SentencePiece's
            `enable_sampling` with `nbest_size=-1`): for a BPE model each
            merge is skipped with this probability (BPE-dropout, Provilkov
            et al. 2020, who train with 0.1); for a unigram model it is the
            smoothing `alpha` of Kudo (2018). The samples are not seeded:
            tensorflow-text's op draws them from its own random device.
            Meant for training batches only (`sampling`). Defaults to 0:
            the one best segmentation, deterministic.

    Attributes:
        vocab_size: int. The number of pieces, special ones included.
        normalization: str. The model's normalisation rule (one of
            `NORMALIZATIONS`, or another name a model was trained with).
        folds_case: bool. Whether that rule lowercases the text, so that
            detokenised output is lowercase.
        pad_id, unk_id, bos_id, eos_id: int. 0, 1, 2 and 3.
        model_proto: bytes. The serialized model.
        sampling_alpha: float. As given.

    Example::

        tokenizer = load_tokenizer("model_dir")
        ids = tokenizer.tokenize(["A dog runs."])  # int32 ragged [1, None]
        text = tokenizer.detokenize(ids)           # tf.string [1]
    """

    def __init__(self, model_proto, name=None, sampling_alpha=0.0):
        """Checks and loads the model; see the class docstring."""
        super().__init__(name=name)
        if not isinstance(model_proto, bytes) or not model_proto:
            raise invalid_argument(
                "model_proto",
                "the bytes of a serialized SentencePiece model",
                type(model_proto).__name__,
            )
        processor = spm.SentencePieceProcessor()
        try:
            processor.LoadFromSerializedProto(model_proto)
        except (RuntimeError, OSError) as error:
            raise invalid_argument(
                "model_proto",
                f"a serialized SentencePiece model ({error})",
                f"<{len(model_proto)} bytes>",
            ) from None
        got = (
            processor.pad_id(),
            processor.unk_id(),
            processor.bos_id(),
            processor.eos_id(),
        )
        if got != (PAD_ID, UNK_ID, BOS_ID, EOS_ID):
            raise invalid_argument(
                "model_proto",
                "a model with pad=0, unk=1, bos=2, eos=3 (train it with "
                "`train_tokenizer`)",
                f"<model with pad, unk, bos, eos = {got}>",
            )
        self._processor = processor
        self._model_proto = model_proto
        self.vocab_size = processor.get_piece_size()
        self.normalization = _normalization_name(model_proto)
        self.folds_case = self.normalization.endswith("_cf")
        self.pad_id, self.unk_id, self.bos_id, self.eos_id = got
        self.sampling_alpha = _checked_sampling_alpha(
            sampling_alpha, model_proto)
        sampling = (dict(nbest_size=-1, alpha=self.sampling_alpha)
                    if self.sampling_alpha else {})
        self._sp = tf_text.SentencepieceTokenizer(
            model=model_proto, out_type=tf.int32, **sampling
        )

    def sampling(self, alpha):
        """This vocabulary, tokenizing with `sampling_alpha=alpha`.

        Args:
            alpha: float in [0, 1). The new `sampling_alpha`.

        Returns:
            `self` when `alpha` is its own `sampling_alpha`, else a new
            `SubwordTokenizer` of the same model.

        Raises:
            ValueError: `alpha` is not in [0, 1), or is above 0 for a
                vocabulary that is neither `bpe` nor `unigram`.
        """
        if alpha == self.sampling_alpha:
            return self
        return SubwordTokenizer(self._model_proto, sampling_alpha=alpha)

    @property
    def model_proto(self):
        """bytes. The serialized SentencePiece model."""
        return self._model_proto

    def tokenize(self, text):
        """Strings to piece ids (no bos/eos added).

        Args:
            text: a `tf.string` scalar or tensor of any rank (or Python str
                or list of str).

        Returns:
            int32 ids: a 1-D `tf.Tensor` for a scalar, otherwise a
            `tf.RaggedTensor` with one more (ragged) axis than `text`.
        """
        return self._sp.tokenize(text)

    def detokenize(self, ids, stop_at_eos=True):
        """Piece ids to strings.

        Padding (id 0), bos and eos decode to nothing. With `stop_at_eos`,
        every id after the first eos of a row is dropped, which is what a
        decoder that keeps writing after eos needs.

        Args:
            ids: int `tf.Tensor` of shape `[T]` or `[B, T]`, or a
                `tf.RaggedTensor` of shape `[B, None]`.
            stop_at_eos: bool. Defaults to `True`.

        Returns:
            A `tf.string` scalar for 1-D ids, otherwise a `[B]` tensor.
        """
        if isinstance(ids, tf.RaggedTensor):
            ids = ids.to_tensor(default_value=PAD_ID)
        ids = tf.cast(tf.convert_to_tensor(ids), tf.int32)
        if ids.shape.rank not in (1, 2):
            raise invalid_argument(
                "ids",
                "a rank-1 or rank-2 tensor of ids",
                f"<tensor of shape {ids.shape}>",
            )
        single = ids.shape.rank == 1
        if single:
            ids = ids[tf.newaxis]
        if stop_at_eos:
            seen_eos = tf.cumsum(
                tf.cast(tf.equal(ids, EOS_ID), tf.int32), axis=-1
            )
            # Keep the first eos itself (it decodes to nothing anyway).
            after = seen_eos - tf.cast(tf.equal(ids, EOS_ID), tf.int32) > 0
            ids = tf.where(after, tf.zeros_like(ids), ids)
        ragged = tf.RaggedTensor.from_tensor(ids, padding=PAD_ID)
        text = self._sp.detokenize(ragged)
        return text[0] if single else text

    def id_to_string(self, ids):
        """Piece ids to their piece strings, in-graph (any shape).

        Args:
            ids: int tensor of any shape (or a `tf.RaggedTensor`).

        Returns:
            A `tf.string` tensor of the same shape: each id's piece.
        """
        return self._sp.id_to_string(ids)

    def id_to_piece(self, token_id):
        """The piece string of one id (Python, not in-graph).

        Args:
            token_id: int. The id.

        Returns:
            str, its piece.
        """
        return self._processor.id_to_piece(int(token_id))

    def piece_to_id(self, piece):
        """The id of one piece string (Python, not in-graph).

        Args:
            piece: str. The piece.

        Returns:
            int, its id; `UNK_ID` where the vocabulary lacks the piece.
        """
        return self._processor.piece_to_id(piece)

    @property
    def mask_id(self):
        """The id of `MASK_PIECE` (4), or None when the vocabulary was
        learnt without it."""
        found = self._processor.piece_to_id(MASK_PIECE)
        return found if found != UNK_ID else None


def _model_spec(model_proto):
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(model_proto)
    return proto


def _normalization_name(model_proto):
    return _model_spec(model_proto).normalizer_spec.name


def _checked_sampling_alpha(alpha, model_proto):
    """`alpha` as a float in [0, 1), for a model that can sample."""
    alpha = check_rate("sampling_alpha", alpha, "SubwordTokenizer")
    if alpha:
        trainer = _model_spec(model_proto).trainer_spec
        model_type = sentencepiece_model_pb2.TrainerSpec.ModelType.Name(
            trainer.model_type).lower()
        if model_type not in ("bpe", "unigram"):
            raise invalid_argument(
                "sampling_alpha",
                "0 for a vocabulary of type "
                f"{model_type!r} (only 'bpe' and 'unigram' ones sample "
                "segmentations)",
                alpha,
                "SubwordTokenizer",
            )
    return alpha


def _vocab_text(processor):
    lines = [
        f"{processor.id_to_piece(i)}\t{processor.get_score(i):g}\n"
        for i in range(processor.get_piece_size())
    ]
    return "".join(lines).encode("utf-8")


def _train(sentences, vocab_size, options):
    writer = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences),
        model_writer=writer,
        vocab_size=vocab_size,
        **options,
    )
    return writer.getvalue()


def train_tokenizer(
    sentences,
    model_dir,
    vocab_size=8000,
    model_type="unigram",
    character_coverage=1.0,
    split_digits=False,
    normalization="nmt_nfkc",
    num_threads=1,
    seed=0,
    mask_piece=False,
):
    """Learns a joint SentencePiece vocabulary and writes it to `model_dir`.

    Training is deterministic for the same sentences, options and
    `num_threads` (the learnt pieces depend on the thread count, so it
    defaults to 1). The files `model_dir/spm.model` and `model_dir/spm.vocab`
    (one `piece<TAB>score` line per id) are replaced atomically.

    Args:
        sentences: iterable of str or bytes. Training text of both languages,
            e.g. every source and every target sentence of the training
            split. Read once into memory.
        model_dir: str, path-like or None. Directory to write into (created
            if needed; `gs://` works); None writes nothing (`save_tokenizer`
            writes later).
        vocab_size: int. Requested number of pieces, special ones included.
            If the corpus supports fewer, training is repeated with the
            largest size it supports and a warning is logged. Defaults to
            `8000`.
        model_type: str. One of `'unigram'`, `'bpe'`, `'char'`, `'word'`.
            Defaults to `'unigram'`.
        character_coverage: float in (0, 1]. Share of characters covered by
            the vocabulary; the rest map to unk. Defaults to `1.0`.
        split_digits: bool. Make every digit its own piece (use it for the
            numbers task). Defaults to `False`.
        normalization: str. SentencePiece's normalisation rule, one of
            `NORMALIZATIONS`: `'nmt_nfkc'` (NFKC plus NMT's whitespace and
            control-character clean-up, SentencePiece's default),
            `'nfkc'`, their case-folding `'nmt_nfkc_cf'` and `'nfkc_cf'`,
            or `'identity'`. The rule is stored in the model and applied
            whenever it tokenises. Defaults to `'nmt_nfkc'`.
        num_threads: int. Trainer threads. Defaults to `1`.
        seed: int. Seed of sentencepiece's random generator. Defaults to `0`.
        mask_piece: bool. Reserve `MASK_PIECE` ("[MASK]") as id 4, a piece
            that tokenising text containing it always yields whole (the
            blank of a masked language model). Defaults to `False`.

    Returns:
        The `SubwordTokenizer` of the trained model.
    """
    vocab_size = check_positive_int("vocab_size", vocab_size)
    check_choice("model_type", model_type, MODEL_TYPES)
    if (
        isinstance(character_coverage, bool)
        or not isinstance(character_coverage, (int, float))
        or not 0 < character_coverage <= 1
    ):
        raise invalid_argument(
            "character_coverage", "a float in (0, 1]", character_coverage
        )
    if not isinstance(split_digits, bool):
        raise invalid_argument("split_digits", "a Python bool", split_digits)
    check_choice("normalization", normalization, NORMALIZATIONS)
    num_threads = check_positive_int("num_threads", num_threads)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise invalid_argument("seed", "a non-negative integer", seed)
    if not isinstance(mask_piece, bool):
        raise invalid_argument("mask_piece", "a Python bool", mask_piece)

    texts = []
    for i, sentence in enumerate(sentences):
        if isinstance(sentence, bytes):
            sentence = sentence.decode("utf-8")
        if not isinstance(sentence, str):
            raise invalid_argument(
                "sentences",
                f"an iterable of str or bytes (item {i} is "
                f"{type(sentence).__name__})",
                sentence,
            )
        if sentence.strip():
            texts.append(sentence)
    if not texts:
        raise invalid_argument(
            "sentences", "at least one non-empty sentence", "<no text>"
        )

    options = dict(
        model_type=model_type,
        character_coverage=float(character_coverage),
        split_digits=split_digits,
        normalization_rule_name=normalization,
        num_threads=num_threads,
        pad_id=PAD_ID,
        unk_id=UNK_ID,
        bos_id=BOS_ID,
        eos_id=EOS_ID,
        minloglevel=2,
    )
    if mask_piece:
        options["user_defined_symbols"] = [MASK_PIECE]
    spm.set_random_generator_seed(seed)
    requested = vocab_size
    try:
        model = _train(texts, vocab_size, options)
    except RuntimeError as error:
        too_high = _TOO_HIGH.search(str(error))
        too_low = _TOO_LOW.search(str(error))
        if too_low:
            raise invalid_argument(
                "vocab_size",
                f"at least {too_low.group(2)} (the special pieces and the "
                "characters of the corpus; or lower `character_coverage`)",
                vocab_size,
            ) from None
        if not too_high:
            raise
        vocab_size = int(too_high.group(2))
        logging.warning(
            "The corpus supports at most %d pieces; training with "
            "vocab_size=%d instead of the requested %d.",
            vocab_size,
            vocab_size,
            requested,
        )
        spm.set_random_generator_seed(seed)
        model = _train(texts, vocab_size, options)

    tokenizer = SubwordTokenizer(model)
    if model_dir is not None:
        save_tokenizer(tokenizer, model_dir)
    return tokenizer


def save_tokenizer(tokenizer, model_dir):
    """Writes `model_dir/spm.model` and `spm.vocab` of a `SubwordTokenizer`
    (atomically, both or neither).

    Args:
        tokenizer: SubwordTokenizer. The vocabulary to write.
        model_dir: str or path-like. The directory (created if needed;
            `gs://` works).
    """
    model_dir = str(model_dir)
    tf.io.gfile.makedirs(model_dir)
    processor = tokenizer._processor
    write_files_atomically(
        {
            os.path.join(model_dir, MODEL_FILENAME):
                processor.serialized_model_proto(),
            os.path.join(model_dir, VOCAB_FILENAME): _vocab_text(processor),
        }
    )


def load_tokenizer(model_dir):
    """Loads `model_dir/spm.model` as a `SubwordTokenizer`.

    Args:
        model_dir: str or path-like. The directory `train_tokenizer` wrote.

    Returns:
        A `SubwordTokenizer`.

    Raises:
        FileNotFoundError: `model_dir/spm.model` does not exist.
        ValueError: the file is not a SentencePiece model with pad=0,
            unk=1, bos=2, eos=3 (the message names it).
    """
    path = os.path.join(str(model_dir), MODEL_FILENAME)
    if not tf.io.gfile.exists(path):
        raise FileNotFoundError(
            f"{path}: file not found (train a vocabulary first with "
            "`tfattn.data.train_tokenizer(sentences, model_dir)`)"
        )
    with tf.io.gfile.GFile(path, "rb") as f:
        model = f.read()
    try:
        return SubwordTokenizer(model)
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None
