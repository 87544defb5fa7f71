"""BERT's WordPiece in tfattn's ids, tokenizing inside the TF graph.

tfattn's models read id 0 as padding, 1 as unknown, 2 as BOS, 3 as EOS
and 4 as the mask (`tfattn.utils.ids`); a BERT `vocab.txt` puts its
special tokens elsewhere (bert-base-uncased: `[PAD]` 0, `[UNK]` 100,
`[CLS]` 101, `[SEP]` 102, `[MASK]` 103). The two vocabularies have the
same n tokens, in another order:

    tfattn id   BERT token
    0           [PAD]
    1           [UNK]
    2           [CLS]   (BOS: a classifier pools the first token)
    3           [SEP]   (EOS)
    4           [MASK]
    5 ...       every other token, in vocab.txt's order

`WordPieceTokenizer.order` holds BERT's id of every tfattn id
(`id_to_piece` gives a tfattn id's token);
`tfattn.interop.bert` permutes the token table's rows (and the masked-LM
output bias) by it, so a tfattn model's logit at tfattn id t is BERT's at
BERT id `order[t]`, and tfattn's masking, `fill_mask` and classifiers
work unchanged. `to_tfattn_ids` / `to_bert_ids` map ids either way.

The tokenization is BERT's (`BertTokenizer` of Google's
`tokenization.py`, Hugging Face's `BertNormalizer` and
`BertPreTokenizer`), in TensorFlow ops so that it runs in `tf.data`,
`tf.function` and SavedModels: control characters removed and
whitespace read as spaces; with `lowercase`, Unicode lowercasing (as
Python's `str.lower`, which keeps "ß"), NFD and the removal of
combining marks (accents); then `tensorflow_text.BertTokenizer` without
its own case folding: splits on whitespace, punctuation and around CJK
ideographs, and greedy longest-match-first WordPiece with `##`
continuations and `[UNK]` for a word it cannot cover. Special tokens
written in the text (`"[MASK]"`) are split like any text by `tokenize`;
`tokenize_with_blanks` (fill-mask's reading) reads each `"[MASK]"` as the
mask id, as BERT's tokenizers split special tokens off first.

A piece beginning with `continuation_prefix` ("##") continues the word
before it; any other piece but the special tokens begins a word (what
`tfattn.data.word_starts` reads for whole-word masking, and
`tfattn.decoding.mlm_evaluation.filling_words` for fill-mask's words).

keras-hub's `BertTokenizer` differs on uncased text: it keeps accents
(its `strip_accents` is False) and folds case with `case_fold_utf8`
("ß" -> "ss"), where BERT's own tokenizer strips accents and keeps "ß".
"""

import numpy as np
import tensorflow as tf

from tfattn.utils.validation import invalid_argument

__all__ = ["SPECIAL_TOKENS", "WordPieceTokenizer", "to_tfattn_ids",
           "to_bert_ids"]

# BERT's tokens of tfattn ids 0..4.
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
_CONTEXT = "WordPieceTokenizer"


def _ops(ids):
    return np if isinstance(ids, (np.ndarray, list, int, np.integer)) else tf


def to_tfattn_ids(bert_ids, order):
    """BERT ids to tfattn ids (NumPy in, NumPy out; tensors in the graph).

    Args:
        bert_ids: int array or tensor, any shape, in [0, n).
        order: int array [n]. BERT's id of every tfattn id
            (`WordPieceTokenizer.order`).

    Returns:
        tfattn ids, same shape.
    """
    inverse = np.argsort(np.asarray(order))
    if _ops(bert_ids) is np:
        return inverse[np.asarray(bert_ids)]
    return tf.gather(tf.constant(inverse, bert_ids.dtype), bert_ids)


def to_bert_ids(ids, order):
    """tfattn ids to BERT ids: the inverse of `to_tfattn_ids`.

    Args:
        ids: int array or tensor, any shape, in [0, n).
        order: int array [n]. BERT's id of every tfattn id.

    Returns:
        BERT ids, same shape.
    """
    order = np.asarray(order)
    if _ops(ids) is np:
        return order[np.asarray(ids)]
    return tf.gather(tf.constant(order, ids.dtype), ids)


class WordPieceTokenizer(tf.Module):
    """BERT's WordPiece: text <-> tfattn ids (the module docstring's
    mapping), in-graph.

    Args:
        vocabulary: list of str. BERT's tokens by id (`vocab.txt`'s lines),
            each once, holding the five `SPECIAL_TOKENS`.
        lowercase: bool. BERT's `do_lower_case`: fold case and strip
            accents before splitting (uncased checkpoints). Defaults to
            `True`.
        name: str or None. The module name.

    Attributes:
        vocab_size: int n, the same in both id spaces.
        order: int64 array [n]. BERT's id of every tfattn id.
        continuation_prefix: str. "##": the prefix of the pieces that
            continue a word.
        pad_id, unk_id, bos_id, eos_id, mask_id: int. 0 ... 4.
        vocabulary, lowercase: as given.

    Raises:
        ValueError: naming `vocabulary` (a special token missing, a token
            repeated) or `lowercase` (not a bool).

    Example::

        tokenizer = WordPieceTokenizer.from_file("bert/vocab.txt")
        ids = tokenizer.tokenize(["Hello world!"])  # int32 ragged [1, None]
        text = tokenizer.detokenize(ids)             # tf.string [1]
    """

    continuation_prefix = "##"

    def __init__(self, vocabulary, lowercase=True, name=None):
        """Checks the vocabulary; see the class docstring."""
        super().__init__(name=name)
        if not isinstance(lowercase, bool):
            raise invalid_argument("lowercase", "a bool", lowercase,
                                   _CONTEXT)
        vocabulary = list(vocabulary) if isinstance(
            vocabulary, (list, tuple)) else vocabulary
        if not isinstance(vocabulary, list) or not all(
                isinstance(t, str) for t in vocabulary):
            raise invalid_argument("vocabulary", "a list of token strings",
                                   vocabulary, _CONTEXT)
        missing = [t for t in SPECIAL_TOKENS if t not in vocabulary]
        if missing:
            raise invalid_argument(
                "vocabulary", f"BERT's special tokens {list(SPECIAL_TOKENS)}",
                f"<{len(vocabulary)} tokens without {missing}>", _CONTEXT)
        if len(set(vocabulary)) != len(vocabulary):
            seen, repeated = set(), None
            for token in vocabulary:
                if token in seen:
                    repeated = token
                    break
                seen.add(token)
            raise invalid_argument(
                "vocabulary", "each token once",
                f"<{len(vocabulary)} tokens repeating {repeated!r}>",
                _CONTEXT)
        import tensorflow_text as text

        self._tokens = tf.constant(vocabulary)
        self._lowercase = lowercase
        self.vocab_size = len(vocabulary)
        first = [vocabulary.index(t) for t in SPECIAL_TOKENS]
        rest = [i for i in range(self.vocab_size) if i not in set(first)]
        self.order = np.array(first + rest, np.int64)
        # Tokens by tfattn id (an object array: not tracked by tf.Module).
        self._pieces = np.array(vocabulary, object)[self.order]
        self.pad_id, self.unk_id, self.bos_id, self.eos_id, self.mask_id = (
            range(5))
        table = tf.lookup.StaticVocabularyTable(
            tf.lookup.KeyValueTensorInitializer(
                self._tokens, tf.range(self.vocab_size, dtype=tf.int64)),
            num_oov_buckets=1)
        self._bert = text.BertTokenizer(
            table, lower_case=False, token_out_type=tf.int64,
            unknown_token="[UNK]")
        self._normalize_utf8 = text.normalize_utf8
        self._tokenize = tf.function(
            self._tokenize_batch,
            input_signature=[tf.TensorSpec([None], tf.string)])
        self._detokenize = tf.function(
            self._detokenize_batch,
            input_signature=[tf.TensorSpec([None, None], tf.int32)])

    @property
    def vocabulary(self):
        """list of str. BERT's tokens by BERT id (a copy)."""
        return [t.decode("utf-8") for t in self._tokens.numpy()]

    @property
    def lowercase(self):
        """bool. Whether text is case-folded and accent-stripped."""
        return self._lowercase

    @classmethod
    def from_file(cls, vocab_path, lowercase=True, name=None):
        """The tokenizer of a `vocab.txt` (one token a line, BERT id =
        line number).

        Args:
            vocab_path: str. The vocabulary file.
            lowercase: bool. As in the constructor.
            name: str or None. The module name.

        Returns:
            WordPieceTokenizer.
        """
        with open(vocab_path, encoding="utf-8") as f:
            vocabulary = [line.rstrip("\n").rstrip("\r") for line in f]
        while vocabulary and not vocabulary[-1]:
            vocabulary.pop()
        return cls(vocabulary, lowercase=lowercase, name=name)

    def id_to_piece(self, token_id):
        """The token of a tfattn id.

        Args:
            token_id: int in [0, vocab_size).

        Returns:
            str. Such as "[CLS]" for 2, "##ing" for a continuation.

        Raises:
            ValueError: naming `token_id`, outside the vocabulary.
        """
        if isinstance(token_id, bool) or not isinstance(
                token_id, (int, np.integer)) or not (
                    0 <= token_id < self.vocab_size):
            raise invalid_argument(
                "token_id", f"an int id in [0, vocab_size={self.vocab_size})",
                token_id, _CONTEXT)
        return str(self._pieces[int(token_id)])

    def piece_to_id(self, piece):
        """The tfattn id of a token, `unk_id` for one not in the vocabulary.

        Args:
            piece: str. A token of `vocab.txt`.

        Returns:
            int.
        """
        found = np.flatnonzero(self._pieces == piece)
        return int(found[0]) if found.size else self.unk_id

    def bert_ids(self, text):
        """Strings to BERT's own ids (no [CLS] or [SEP] added).

        Args:
            text: a `tf.string` 1-D tensor (or a list of str).

        Returns:
            int32 `tf.RaggedTensor` [B, None].
        """
        text = tf.convert_to_tensor(text, tf.string)
        text = tf.strings.regex_replace(text, r"[\t\n\r]", " ")
        text = tf.strings.regex_replace(text, r"[\p{Cc}\p{Cf}\x{fffd}]", "")
        if self._lowercase:
            text = self._normalize_utf8(
                tf.strings.lower(text, encoding="utf-8"), "NFD")
            text = tf.strings.regex_replace(text, r"\p{Mn}", "")
        pieces = self._bert.tokenize(text)
        return tf.cast(pieces.merge_dims(-2, -1), tf.int32)

    def _tokenize_batch(self, texts):
        return tf.ragged.map_flat_values(
            lambda ids: to_tfattn_ids(ids, self.order), self.bert_ids(texts))

    def tokenize(self, text):
        """Strings to tfattn ids (no BOS or EOS added).

        Args:
            text: a `tf.string` scalar or 1-D tensor (or Python str or list
                of str).

        Returns:
            int32 ids: a 1-D `tf.Tensor` for a scalar, else a
            `tf.RaggedTensor` [B, None].
        """
        text = tf.convert_to_tensor(text, tf.string)
        if text.shape.rank not in (0, 1):
            raise invalid_argument("text", "a string or a 1-D batch of "
                                   "strings", f"<tensor of shape "
                                   f"{text.shape}>", _CONTEXT)
        if text.shape.rank == 0:
            return self._tokenize(text[tf.newaxis])[0]
        return self._tokenize(text)

    def tokenize_with_blanks(self, texts):
        """`tokenize`, reading each `[MASK]` written in a text as the mask
        id (4): fill-mask's reading ("jump[MASK] over" gives "jump",
        [MASK], "over"). Matched as written, before case folding.

        Args:
            texts: a `tf.string` 1-D tensor (or a list of str).

        Returns:
            int32 `tf.RaggedTensor` [B, None].
        """
        texts = tf.convert_to_tensor(texts, tf.string)
        if texts.shape.rank != 1:
            raise invalid_argument("texts", "a 1-D batch of strings",
                                   f"<tensor of shape {texts.shape}>",
                                   _CONTEXT)
        parts = tf.strings.split(texts, sep=SPECIAL_TOKENS[4])  # [B, (P)]
        pieces = self._tokenize(parts.flat_values)  # [N, (L)]
        # A mask after every part but the last of its text.
        count = tf.shape(parts.flat_values, out_type=tf.int64)[0]
        last = tf.equal(tf.range(count) + 1,
                        tf.gather(parts.row_limits(), parts.value_rowids()))
        masks = tf.RaggedTensor.from_row_lengths(
            tf.fill([tf.reduce_sum(tf.cast(~last, tf.int64))],
                    tf.constant(self.mask_id, tf.int32)),
            tf.cast(~last, tf.int64))
        joined = tf.concat([pieces, masks], axis=1)
        return parts.with_flat_values(joined).merge_dims(1, 2)

    def _detokenize_batch(self, ids):
        kept = tf.ragged.boolean_mask(ids, ids > self.eos_id)
        bert = tf.ragged.map_flat_values(
            lambda x: tf.cast(to_bert_ids(x, self.order), tf.int64), kept)
        words = self._bert.detokenize(bert)  # ragged [B, words]
        return tf.strings.reduce_join(words, axis=-1, separator=" ")

    def detokenize(self, ids):
        """tfattn ids to strings: `##` pieces joined to their word, words
        joined by spaces; padding, [UNK], [CLS] and [SEP] decode to
        nothing ([MASK] to "[MASK]").

        Args:
            ids: int tensor or array [T] or [B, T] (0 = padding), or a
                `tf.RaggedTensor` [B, None].

        Returns:
            A `tf.string` scalar for 1-D ids, else a [B] tensor.
        """
        if isinstance(ids, tf.RaggedTensor):
            ids = ids.to_tensor(default_value=0)
        ids = tf.cast(tf.convert_to_tensor(ids), tf.int32)
        if ids.shape.rank not in (1, 2):
            raise invalid_argument("ids", "a rank-1 or rank-2 tensor of ids",
                                   f"<tensor of shape {ids.shape}>", _CONTEXT)
        if ids.shape.rank == 1:
            return self._detokenize(ids[tf.newaxis])[0]
        return self._detokenize(ids)
