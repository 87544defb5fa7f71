"""GPT-2's byte-level BPE in tfattn's ids, tokenizing inside the TF graph.

tfattn's models read id 0 as padding, start prompts from `BOS_ID` (2) and
stop at `EOS_ID` (3) (`tfattn.utils.ids`); GPT-2's n tokens (50,257) have
no padding, and one special token, `<|endoftext|>` (id e = 50256), starts
and ends its texts. The two vocabularies map one to one, except for the
rows tfattn adds:

    tfattn id   GPT-2 id
    0           none (padding)
    1           none (unknown: byte-level BPE has no unknown token)
    2           e (BOS, read as 3 by `CausalLM(bos_is_eos=True)`)
    3           e (EOS: `<|endoftext|>`)
    g + 4       g, for g < e
    g + 3       g, for g > e (none in GPT-2, whose e is its last id)

so tfattn's vocabulary has n + 3 ids, and text -> GPT-2 ids -> tfattn ids
is a shift by 4 of every ordinary token. `tfattn.interop.gpt2` builds the
model to match: rows 0-2 of the embedding are zero and never read, their
logits masked (`masked_output_ids=(0, 1, 2)`), so the model's softmax over
tfattn's ids is GPT-2's over its own. `to_tfattn_ids` / `to_gpt2_ids` map
ids either way, in NumPy or in the graph.

`GPT2Tokenizer` wraps keras-hub's `GPT2Tokenizer` (keras_hub 0.32,
`keras_hub/src/tokenizers/byte_pair_tokenizer.py`: GPT-2's pre-tokenizing
regex and byte-to-unicode table, the BPE merges by rank, in TensorFlow and
tensorflow-text ops) and always runs its graph path, so that it works in
`tf.data`, `tf.function` and SavedModels, eagerly as well.
"""

import json

import numpy as np
import tensorflow as tf

from tfattn.utils.ids import BOS_ID
from tfattn.utils.ids import EOS_ID
from tfattn.utils.ids import PAD_ID
from tfattn.utils.ids import UNK_ID
from tfattn.utils.validation import invalid_argument

__all__ = ["END_OF_TEXT", "ADDED_IDS", "GPT2Tokenizer", "to_tfattn_ids",
           "to_gpt2_ids"]

END_OF_TEXT = "<|endoftext|>"
# The tfattn ids that GPT-2 lacks: the model masks their logits.
ADDED_IDS = (PAD_ID, UNK_ID, BOS_ID)
_FIRST = 4  # tfattn's id of GPT-2's id 0.
_CONTEXT = "GPT2Tokenizer"


def _ops(ids):
    return np if isinstance(ids, (np.ndarray, list, int, np.integer)) else tf


def to_tfattn_ids(gpt2_ids, end_of_text_id):
    """GPT-2 ids -> tfattn ids (the module docstring's table).

    Args:
        gpt2_ids: int array or tensor, any shape (NumPy in, NumPy out; a
            tensor in, a tensor out). Ids in [0, n).
        end_of_text_id: int e. GPT-2's id of `<|endoftext|>`.

    Returns:
        The tfattn ids, same shape: e -> 3, g -> g + 4 (g < e) or g + 3.
    """
    xp = _ops(gpt2_ids)
    ids = xp.asarray(gpt2_ids) if xp is np else gpt2_ids
    shifted = xp.where(ids < end_of_text_id, ids + _FIRST, ids + _FIRST - 1)
    return xp.where(ids == end_of_text_id, EOS_ID, shifted)


def to_gpt2_ids(ids, end_of_text_id):
    """tfattn ids -> GPT-2 ids, the inverse of `to_tfattn_ids`.

    Args:
        ids: int array or tensor, any shape, ids >= 2 (BOS and EOS both
            give e; 0 and 1 have no GPT-2 id and give -1).
        end_of_text_id: int e. GPT-2's id of `<|endoftext|>`.

    Returns:
        The GPT-2 ids, same shape and kind as `ids`.
    """
    xp = _ops(ids)
    ids = xp.asarray(ids) if xp is np else ids
    back = xp.where(ids < end_of_text_id + _FIRST, ids - _FIRST,
                    ids - _FIRST + 1)
    back = xp.where((ids == BOS_ID) | (ids == EOS_ID), end_of_text_id, back)
    return xp.where(ids < BOS_ID, -1, back)


class GPT2Tokenizer(tf.Module):
    """GPT-2's byte-level BPE: text <-> tfattn ids (the module docstring's
    mapping), in-graph.

    Args:
        vocabulary: dict. Token string -> GPT-2 id (`vocab.json`), holding
            `<|endoftext|>`, ids 0..n-1 each once.
        merges: list of str. The merge rules by rank (`merges.txt`, a
            `#version` line allowed), "a b" each.
        name: str or None. The module name.

    Attributes:
        vocab_size: int. tfattn's vocabulary size, n + 3.
        gpt2_vocab_size: int n.
        end_of_text_id: int e, GPT-2's id of `<|endoftext|>`.
        pad_id, unk_id, bos_id, eos_id: int. 0, 1, 2 and 3.
        vocabulary, merges: as given (what `to_huggingface` writes back).
        keras_hub_tokenizer: the wrapped keras-hub `GPT2Tokenizer`.

    Raises:
        ValueError: naming `vocabulary` (no `<|endoftext|>`, ids that are
            not 0..n-1) or `merges` (a rule keras-hub refuses).
        ImportError: keras-hub is not installed.

    Example::

        tokenizer = GPT2Tokenizer.from_files("gpt2/vocab.json",
                                             "gpt2/merges.txt")
        ids = tokenizer.tokenize(["Hello world"])  # int32 ragged [1, None]
        text = tokenizer.detokenize(ids)            # tf.string [1]
    """

    def __init__(self, vocabulary, merges, name=None):
        """Checks the vocabulary; see the class docstring."""
        super().__init__(name=name)
        if not isinstance(vocabulary, dict) or END_OF_TEXT not in vocabulary:
            raise invalid_argument(
                "vocabulary", f"a dict of GPT-2 tokens holding {END_OF_TEXT}",
                f"<{type(vocabulary).__name__} of {len(vocabulary)} items>"
                if hasattr(vocabulary, "__len__") else vocabulary, _CONTEXT)
        ids = sorted(vocabulary.values())
        if ids != list(range(len(ids))):
            raise invalid_argument(
                "vocabulary", "ids 0..n-1, each once",
                f"<{len(ids)} ids from {ids[0]} to {ids[-1]}>", _CONTEXT)
        merges = [m for m in merges if not m.lstrip().startswith("#version")]
        try:
            from keras_hub.models import GPT2Tokenizer as HubTokenizer
        except ImportError:
            raise ImportError("GPT-2's tokenizer needs keras-hub: pip install "
                              "keras-hub") from None
        try:
            self.keras_hub_tokenizer = HubTokenizer(vocabulary=vocabulary,
                                                    merges=merges)
        except ValueError as error:
            raise invalid_argument("merges", f"merge rules ({error})",
                                   f"<{len(merges)} rules>",
                                   _CONTEXT) from None
        # JSON text: a tf.Module would wrap a dict or list attribute.
        self._files = json.dumps([vocabulary, merges], ensure_ascii=False)
        self.gpt2_vocab_size = len(ids)
        self.vocab_size = self.gpt2_vocab_size + _FIRST - 1
        self.end_of_text_id = vocabulary[END_OF_TEXT]
        self.pad_id, self.unk_id, self.bos_id, self.eos_id = (
            PAD_ID, UNK_ID, BOS_ID, EOS_ID)
        self._tokenize = tf.function(
            self._tokenize_batch,
            input_signature=[tf.TensorSpec([None], tf.string)])
        self._detokenize = tf.function(
            self._detokenize_batch,
            input_signature=[tf.TensorSpec([None, None], tf.int32),
                             tf.TensorSpec([], tf.bool)])

    @property
    def vocabulary(self):
        """dict. Token string -> GPT-2 id (a copy)."""
        return json.loads(self._files)[0]

    @property
    def merges(self):
        """list of str. The merge rules by rank (a copy)."""
        return json.loads(self._files)[1]

    @classmethod
    def from_files(cls, vocab_path, merges_path, name=None):
        """The tokenizer of a `vocab.json` and a `merges.txt`.

        Args:
            vocab_path: str. The JSON vocabulary (token -> id).
            merges_path: str. The merge rules, one "a b" a line.
            name: str or None. The module name.

        Returns:
            GPT2Tokenizer.
        """
        with open(vocab_path, encoding="utf-8") as f:
            vocabulary = json.load(f)
        with open(merges_path, encoding="utf-8") as f:
            merges = [line.rstrip("\n") for line in f if line.strip()]
        return cls(vocabulary, merges, name=name)

    def _tokenize_batch(self, texts):
        gpt2 = self.keras_hub_tokenizer.tokenize(texts)  # ragged [B, None]
        if isinstance(gpt2, (list, tuple)):  # Eager keras-hub: Python lists.
            gpt2 = tf.RaggedTensor.from_row_lengths(
                tf.constant([i for row in gpt2 for i in row], tf.int32),
                tf.constant([len(row) for row in gpt2], tf.int64))
        elif not isinstance(gpt2, tf.RaggedTensor):
            gpt2 = tf.RaggedTensor.from_tensor(gpt2)
        return tf.ragged.map_flat_values(
            lambda ids: tf.cast(to_tfattn_ids(tf.cast(ids, tf.int32),
                                              self.end_of_text_id), tf.int32),
            gpt2)

    def tokenize(self, text):
        """Strings to tfattn ids (no BOS or EOS added; `<|endoftext|>` in
        the text gives EOS).

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
        # Eagerly, keras-hub tokenizes op by op in milliseconds, where
        # tracing its BPE graph takes seconds (3.6 s for GPT-2's, once per
        # tokenizer): the traced function serves graphs only.
        tokenize = (self._tokenize_batch if tf.executing_eagerly()
                    else self._tokenize)
        if text.shape.rank == 0:
            return tokenize(text[tf.newaxis])[0]
        return tokenize(text)

    def _detokenize_batch(self, ids, stop_at_eos):
        is_eos = tf.cast(tf.equal(ids, EOS_ID), tf.int32)
        after = (tf.cumsum(is_eos, axis=-1) - is_eos) > 0
        keep = (ids > EOS_ID) & ~(after & stop_at_eos)
        kept = tf.ragged.boolean_mask(ids, keep)
        gpt2 = tf.ragged.map_flat_values(
            lambda x: to_gpt2_ids(x, self.end_of_text_id), kept)
        # Bytes that are not UTF-8 (a token sequence may cut a character)
        # read as U+FFFD, as transformers' `errors="replace"` decodes.
        return tf.strings.unicode_transcode(
            self.keras_hub_tokenizer.detokenize(gpt2), "UTF-8", "UTF-8",
            errors="replace")

    def detokenize(self, ids, stop_at_eos=True):
        """tfattn ids to strings.

        Padding, UNK, BOS and EOS decode to nothing; with `stop_at_eos`,
        every id after a row's first EOS is dropped. Bytes that are not
        UTF-8 decode to U+FFFD (as transformers' `errors="replace"`).

        Args:
            ids: int tensor or array [T] or [B, T] (0 = padding), or a
                `tf.RaggedTensor` [B, None].
            stop_at_eos: bool. Defaults to `True`.

        Returns:
            A `tf.string` scalar for 1-D ids, else a [B] tensor.
        """
        if isinstance(ids, tf.RaggedTensor):
            ids = ids.to_tensor(default_value=PAD_ID)
        ids = tf.cast(tf.convert_to_tensor(ids), tf.int32)
        if ids.shape.rank not in (1, 2):
            raise invalid_argument("ids", "a rank-1 or rank-2 tensor of ids",
                                   f"<tensor of shape {ids.shape}>", _CONTEXT)
        detokenize = (self._detokenize_batch if tf.executing_eagerly()
                      else self._detokenize)
        if ids.shape.rank == 2 and ids.shape[0] == 0:  # (keras-hub: a scalar)
            return tf.zeros([0], tf.string)
        if ids.shape.rank == 1:
            return detokenize(ids[tf.newaxis], tf.constant(stop_at_eos))[0]
        return detokenize(ids, tf.constant(stop_at_eos))
