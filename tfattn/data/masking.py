"""`MaskGenerator`: BERT's masking of token ids, on the `tf.data` side.

Devlin et al. (2019) §3.1 and appendix A.1: of the tokens that may be
chosen (not padding, not a special id), `mask_selection_rate` are chosen;
of those, `mask_token_rate` become the mask id, `random_token_rate` a
random id and the rest stay as they are. The model is scored on the chosen
positions only (`mask_weights`). keras-hub's `MaskedLMMaskGenerator` takes
the same arguments under the same names and returns the same four tensors;
this one works on dense batches with dense ops (no ragged tensors), draws
from a seed, and can choose whole words.
"""

import numbers

import numpy as np
import tensorflow as tf

from tfattn.utils import validation
from tfattn.utils.ids import MASK_ID

__all__ = ["MaskGenerator", "word_starts", "masker_for",
           "masked_lm_batch"]

_CONTEXT = "MaskGenerator"
_UNCHOSEN = 2.0  # A key above every uniform draw in [0, 1).


class MaskGenerator:
    """Chooses and replaces tokens for masked-LM training.

    Args:
        vocab_size: int V (`vocabulary_size` in keras-hub).
        mask_token_id: int. The mask id. Defaults to `4` (tfattn's mask
            piece, `tfattn.models.MaskedLM`'s default).
        mask_selection_rate: float in [0, 1]. The share of the choosable
            tokens of a row that are chosen: round(rate × n), at least one
            when the row has any (BERT's `create_pretraining_data` rule).
            Defaults to `0.15`.
        mask_selection_length: int or None. P, the most positions chosen in
            a row and the width of the outputs; None: the widest row of the
            batch.
        unselectable_token_ids: ids never chosen nor drawn as random
            replacements. Defaults to tfattn's specials, `(0, 1, 2, 3)`
            (pad, unk, bos, eos), with `mask_token_id` added.
        mask_token_rate: float in [0, 1]. Defaults to `0.8`.
        random_token_rate: float in [0, 1]; with `mask_token_rate` at most
            1. Defaults to `0.1`.
        word_start_ids: None, or a bool array [V] that is True for the
            pieces that begin a word (`word_starts(tokenizer)`): whole-word
            masking (Google's BERT `--do_whole_word_mask`). Words are chosen
            in random order while their tokens fit the row's budget; each
            token of a chosen word is then replaced by the 80-10-10 rule.
        seed: int or None. Seeds the draws of calls made without a `seed`.

    Call arguments:
        - ids: int [B, T] or [T] (a dense batch, 0 = padding), each id in
          [0, vocab_size): checked in Python where the values are known,
          by in-graph assertions with the same message in a `tf.data` map
          or a `tf.function` (a GPU gather would not fail on a bad id).
        - seed: None, or an int32 [2] stateless seed (two ints in
          [-2^31, 2^31)): the same seed gives the same masks (validation
          sets).

    Returns:
        dict: `"token_ids"` (ids with the replacements, as `ids`),
        `"mask_positions"` int32 [B, P] (ascending, 0 where unused),
        `"mask_ids"` int32 [B, P] (the original ids, 0 where unused) and
        `"mask_weights"` float32 [B, P] (1 at a chosen position, else 0).
    """

    def __init__(self, vocab_size, mask_token_id=4, mask_selection_rate=0.15,
                 mask_selection_length=None, unselectable_token_ids=(0, 1, 2,
                                                                      3),
                 mask_token_rate=0.8, random_token_rate=0.1,
                 word_start_ids=None, seed=None):
        """Checks the arguments by name."""
        validation.check_positive_int("vocab_size", vocab_size, _CONTEXT)
        if (isinstance(mask_token_id, bool) or not isinstance(
                mask_token_id, (int, np.integer))
                or not 0 <= mask_token_id < vocab_size):
            raise validation.invalid_argument(
                "mask_token_id", f"an int id in [0, vocab_size={vocab_size})",
                mask_token_id, _CONTEXT)
        for name, rate in (("mask_selection_rate", mask_selection_rate),
                           ("mask_token_rate", mask_token_rate),
                           ("random_token_rate", random_token_rate)):
            _check_unit_interval(name, rate)
        if mask_token_rate + random_token_rate > 1.0:
            raise validation.invalid_argument(
                "random_token_rate", "a rate whose sum with mask_token_rate="
                f"{mask_token_rate} is at most 1", random_token_rate,
                _CONTEXT)
        if mask_selection_length is not None:
            validation.check_positive_int(
                "mask_selection_length", mask_selection_length, _CONTEXT)
        if seed is not None and (isinstance(seed, (bool, np.bool_))
                                 or not isinstance(seed, numbers.Integral)):
            raise validation.invalid_argument("seed", "None or an int", seed,
                                              _CONTEXT)
        special = sorted({int(i) for i in _ids_list(
            "unselectable_token_ids", unselectable_token_ids, vocab_size)}
            | {int(mask_token_id)})
        if len(special) >= vocab_size:
            raise validation.invalid_argument(
                "unselectable_token_ids", "ids that leave some of the "
                f"{vocab_size} choosable", unselectable_token_ids, _CONTEXT)
        self.vocab_size = vocab_size
        self.mask_token_id = int(mask_token_id)
        self.mask_selection_rate = float(mask_selection_rate)
        self.mask_selection_length = mask_selection_length
        self.unselectable_token_ids = tuple(unselectable_token_ids)
        self.mask_token_rate = float(mask_token_rate)
        self.random_token_rate = float(random_token_rate)
        self.word_start_ids = _word_table(word_start_ids, vocab_size)
        self.seed = seed
        choosable = np.ones(vocab_size, bool)
        choosable[special] = False
        self._choosable = tf.constant(choosable)
        self._replacements = tf.constant(np.flatnonzero(choosable), tf.int32)
        self._draws = (None if seed is None
                       else tf.random.Generator.from_seed(seed))
        self._word_starts = (None if self.word_start_ids is None
                             else tf.constant(self.word_start_ids))

    def __call__(self, ids, seed=None):
        ids = tf.convert_to_tensor(ids)
        if not ids.dtype.is_integer or ids.shape.rank not in (1, 2):
            raise validation.invalid_argument(
                "ids", "int token ids of shape [B, T] or [T]",
                f"<tensor of dtype {ids.dtype.name} and shape "
                f"{ids.shape.as_list() if ids.shape.rank is not None else None}"
                ">", _CONTEXT)
        ids = self._checked_ids(ids)
        unbatched = ids.shape.rank == 1
        batch = ids[None] if unbatched else ids
        seeds = self._seeds(seed)
        out = self._mask(tf.cast(batch, tf.int32), seeds)
        out["token_ids"] = tf.cast(out["token_ids"], ids.dtype)
        if unbatched:
            out = {key: value[0] for key, value in out.items()}
        return out

    def _checked_ids(self, ids):
        """`ids` after checking 0 <= id < vocab_size (eagerly, or by
        in-graph assertions)."""
        expected = f"token ids in [0, vocab_size={self.vocab_size})"
        if tf.executing_eagerly():
            values = ids.numpy()
            bad = values[(values < 0) | (values >= self.vocab_size)]
            if bad.size:
                raise validation.invalid_argument(
                    "ids", expected, f"<ids holding {int(bad[0])}>", _CONTEXT)
            return ids
        message = (f"{_CONTEXT}: Received an invalid value for argument "
                   f"`ids`, expected {expected}.")
        checks = [tf.debugging.assert_non_negative(ids, message=message),
                  tf.debugging.assert_less(
                      ids, tf.cast(self.vocab_size, ids.dtype),
                      message=message)]
        with tf.control_dependencies(checks):
            return tf.identity(ids)

    def _seeds(self, seed):
        """Three stateless seeds [3, 2]: choice, rule, random ids."""
        if seed is None:
            if self._draws is not None:
                return self._draws.uniform_full_int([3, 2], tf.int32)
            return tf.random.uniform([3, 2], maxval=tf.int32.max,
                                     dtype=tf.int32)
        return tf.random.experimental.stateless_split(_checked_seed(seed), 3)

    def _mask(self, ids, seeds):
        choosable = tf.gather(self._choosable, ids)  # [B, T]
        count = tf.reduce_sum(tf.cast(choosable, tf.int32), axis=1)  # [B]
        budget = tf.cast(tf.round(self.mask_selection_rate * tf.cast(
            count, tf.float32)), tf.int32)
        budget = tf.where(count > 0, tf.maximum(budget, 1), 0)
        if self.mask_selection_rate == 0.0:
            budget = tf.zeros_like(budget)
        if self.mask_selection_length is not None:
            budget = tf.minimum(budget, self.mask_selection_length)
        keys = tf.random.stateless_uniform(tf.shape(ids), seeds[0])
        if self.word_start_ids is None:
            chosen = _chosen_tokens(keys, choosable, budget)
        else:
            starts = tf.gather(self._word_starts, ids)
            chosen = _chosen_words(keys, choosable, starts, budget)
        positions, weights = _positions(chosen, self.mask_selection_length)
        original = tf.gather(ids, positions, batch_dims=1)
        replaced = self._replace(original, seeds[1:])
        scatter = tf.cast(weights, tf.bool)
        rows = tf.broadcast_to(tf.range(tf.shape(ids)[0])[:, None],
                               tf.shape(positions))
        where = tf.stack([tf.boolean_mask(rows, scatter),
                          tf.boolean_mask(positions, scatter)], axis=1)
        token_ids = tf.tensor_scatter_nd_update(
            ids, where, tf.boolean_mask(replaced, scatter))
        return {"token_ids": token_ids, "mask_positions": positions,
                "mask_ids": original * tf.cast(scatter, tf.int32),
                "mask_weights": weights}

    def _replace(self, original, seeds):
        """The 80-10-10 rule on the chosen ids [B, P]."""
        rule = tf.random.stateless_uniform(tf.shape(original), seeds[0])
        random_ids = tf.gather(self._replacements, tf.random.stateless_uniform(
            tf.shape(original), seeds[1], maxval=tf.shape(
                self._replacements)[0], dtype=tf.int32))
        return tf.where(
            rule < self.mask_token_rate, self.mask_token_id,
            tf.where(rule < self.mask_token_rate + self.random_token_rate,
                     random_ids, original))

    def get_config(self):
        """The constructor's arguments (`word_start_ids` as a list)."""
        return dict(
            vocab_size=self.vocab_size, mask_token_id=self.mask_token_id,
            mask_selection_rate=self.mask_selection_rate,
            mask_selection_length=self.mask_selection_length,
            unselectable_token_ids=list(self.unselectable_token_ids),
            mask_token_rate=self.mask_token_rate,
            random_token_rate=self.random_token_rate,
            word_start_ids=(None if self.word_start_ids is None
                            else self.word_start_ids.tolist()),
            seed=self.seed)


def _chosen_tokens(keys, choosable, budget):
    """bool [B, T]: each row's `budget` choosable tokens of lowest key."""
    keys = tf.where(choosable, keys, _UNCHOSEN)
    rank = tf.argsort(tf.argsort(keys, axis=1, stable=True), axis=1)
    return tf.logical_and(rank < budget[:, None], choosable)


def _chosen_words(keys, choosable, starts, budget):
    """bool [B, T]: whole words, in the order of their first token's key,
    while the tokens chosen so far and the word's fit the budget (the first
    word is always taken, so a row with a long word still gets a blank)."""
    # A word: a word-start piece and the non-start pieces after it; a
    # special token is a word of its own and is never chosen.
    begins = tf.logical_or(starts, tf.logical_not(choosable))
    word = tf.cumsum(tf.cast(begins, tf.int32), axis=1)  # [B, T]
    first = tf.where(begins, keys, _UNCHOSEN)
    # Each token takes its word's key: the key of the word's first token.
    word_key = tf.math.unsorted_segment_min(
        tf.reshape(first, [-1]),
        tf.reshape(word + tf.range(tf.shape(word)[0])[:, None] * (
            tf.shape(word)[1] + 1), [-1]),
        tf.shape(word)[0] * (tf.shape(word)[1] + 1))
    token_key = tf.gather(tf.reshape(word_key, [tf.shape(word)[0], -1]),
                          word, batch_dims=1)
    token_key = tf.where(choosable, token_key, _UNCHOSEN)
    weight = tf.cast(choosable, tf.int32)
    # Tokens of words that come before (lower key) and of the same word.
    lower = tf.cast(token_key[:, None, :] < token_key[:, :, None], tf.int32)
    same = tf.cast(tf.equal(word[:, None, :], word[:, :, None]), tf.int32)
    before = tf.reduce_sum(lower * weight[:, None, :], axis=2)
    size = tf.reduce_sum(same * weight[:, None, :], axis=2)
    fits = tf.logical_or(before + size <= budget[:, None], before == 0)
    return tf.logical_and(tf.logical_and(fits, choosable),
                          budget[:, None] > 0)


def _positions(chosen, width):
    """Chosen positions, ascending, [B, P] int32, and their weights."""
    length = tf.shape(chosen)[1]
    index = tf.where(chosen, tf.range(length)[None, :], length)
    index = tf.sort(index, axis=1)
    most = tf.reduce_max(tf.reduce_sum(tf.cast(chosen, tf.int32), axis=1))
    if width is None:
        width = most
    else:
        index = tf.pad(index, [[0, 0], [0, tf.maximum(width - length, 0)]],
                       constant_values=length)
    index = index[:, :width]
    used = index < length
    return tf.where(used, index, 0), tf.cast(used, tf.float32)


def _checked_seed(seed):
    """A call's stateless seed as int32 [2], or a ValueError naming
    `seed`."""
    expected = "None or two int32 ints [2] (a stateless seed)"
    if isinstance(seed, (tf.Tensor, tf.Variable)):
        if not seed.dtype.is_integer or seed.shape.as_list() != [2]:
            raise validation.invalid_argument(
                "seed", expected, f"<tensor of dtype {seed.dtype.name} and "
                f"shape {seed.shape}>", _CONTEXT)
        if not tf.executing_eagerly():
            return tf.cast(seed, tf.int32)
        seed = seed.numpy().tolist()
    values = np.asarray(seed, dtype=object) if not isinstance(
        seed, (str, bytes)) else np.asarray(None)
    if (values.shape != (2,) or not all(
            isinstance(v, (numbers.Integral, np.integer))
            and not isinstance(v, (bool, np.bool_))
            and -2**31 <= v < 2**31 for v in values.tolist())):
        raise validation.invalid_argument("seed", expected, seed, _CONTEXT)
    return tf.constant(values.tolist(), tf.int32)


def _check_unit_interval(name, rate):
    if (isinstance(rate, bool) or not isinstance(rate, (int, float))
            or not 0.0 <= rate <= 1.0):
        raise validation.invalid_argument(
            name, "a rate in [0, 1]", rate, _CONTEXT)


def _ids_list(name, ids, vocab_size):
    try:
        values = list(ids)
    except TypeError as error:
        raise validation.invalid_argument(
            name, "a list of int ids", ids, _CONTEXT) from error
    if isinstance(ids, (str, bytes)) or not all(
            isinstance(i, numbers.Integral)
            and not isinstance(i, (bool, np.bool_)) for i in values):
        raise validation.invalid_argument(
            name, "a list of int ids", ids, _CONTEXT)
    values = [int(i) for i in values]
    bad = [i for i in values if not 0 <= i < vocab_size]
    if bad:
        raise validation.invalid_argument(
            name, f"ids in [0, vocab_size={vocab_size})", ids, _CONTEXT)
    return values


def _word_table(word_start_ids, vocab_size):
    if word_start_ids is None:
        return None
    table = np.asarray(word_start_ids)
    if table.dtype != bool or table.shape != (vocab_size,):
        raise validation.invalid_argument(
            "word_start_ids", f"a bool array of shape ({vocab_size},)",
            f"<array of dtype {table.dtype} and shape {table.shape}>",
            _CONTEXT)
    return table


def word_starts(tokenizer):
    """bool [V]: True for the pieces of `tokenizer` that begin a word, for
    whole-word masking.

    - SentencePiece (`tfattn.data.SubwordTokenizer`): a piece beginning
      with "▁".
    - WordPiece (a tokenizer with a `continuation_prefix`, BERT's
      `tfattn.interop.wordpiece_tokenizer.WordPieceTokenizer`): a piece not
      beginning with it ("jump" begins a word, "##ing" continues one).

    SentencePiece's special pieces ("<s>", "[MASK]"...) begin no word as
    they lack "▁"; WordPiece's special ids (0 to 4: [PAD], [UNK], [CLS],
    [SEP], [MASK]) begin none either.

    Args:
        tokenizer: a tokenizer with `vocab_size` and `id_to_piece`.

    Returns:
        NumPy bool array [V].
    """
    prefix = getattr(tokenizer, "continuation_prefix", None)
    pieces = [tokenizer.id_to_piece(i) for i in range(tokenizer.vocab_size)]
    if not prefix:
        return np.array([p.startswith("\u2581") for p in pieces], bool)
    starts = np.array([not p.startswith(prefix) for p in pieces], bool)
    starts[:MASK_ID + 1] = False  # [PAD], [UNK], [CLS], [SEP], [MASK].
    return starts


def masker_for(hp, tokenizer, seed=None, static_shapes=False):
    """The `MaskGenerator` of a `train.py` run's hparams.

    Args:
        hp: HParams. Reads `mask_selection_rate`, `mask_token_rate`,
            `random_token_rate`, `whole_word_masking` and, with
            `static_shapes`, `max_train_length`.
        tokenizer: the run's `SubwordTokenizer` (learnt with the mask
            piece) or a BERT checkpoint's `WordPieceTokenizer`, whose
            special ids are tfattn's (0 to 4: [PAD], [UNK], [CLS], [SEP],
            [MASK]), never chosen.
        seed: int or None. The generator's seed.
        static_shapes: bool. A fixed width P (for XLA): the blanks of the
            longest row `max_train_length` allows.

    Returns:
        MaskGenerator.

    Raises:
        ValueError: naming `tokenizer`, when its vocabulary has no mask
            piece.
    """
    if tokenizer.mask_id is None:
        raise validation.invalid_argument(
            "tokenizer", "a vocabulary learnt with the mask piece [MASK] "
            "(train_tokenizer(..., mask_piece=True))", "<no [MASK] piece>",
            _CONTEXT)
    width = None
    if static_shapes:
        width = max(1, int(np.ceil(hp.mask_selection_rate
                                   * hp.max_train_length)))
    return MaskGenerator(
        tokenizer.vocab_size, mask_token_id=tokenizer.mask_id,
        mask_selection_rate=hp.mask_selection_rate,
        mask_selection_length=width,
        mask_token_rate=hp.mask_token_rate,
        random_token_rate=hp.random_token_rate,
        word_start_ids=(word_starts(tokenizer) if hp.whole_word_masking
                        else None),
        seed=seed)


def masked_lm_batch(inputs, labels, masker, seed=None):
    """A language-model batch of the pipeline, masked: the sentences
    `<s> pieces </s>` rebuilt from `target_in` and the labels, then
    `masker`'s blanks.

    Args:
        inputs: dict with `"target_in"` int32 [B, T] (`<s>` first).
        labels: int32 [B, T] (`</s>` last).
        masker: MaskGenerator.
        seed: None or a [2] stateless seed (fixed masks: evaluation).

    Returns:
        `(masked, mask_ids)`: `masked` the MaskGenerator dict
        (`token_ids` [B, T + 1], `mask_positions`, `mask_weights`), and the
        original ids at the blanks [B, P] (0 where unused, which the loss
        skips as padding).
    """
    ids = tf.concat([inputs["target_in"][:, :1], labels], axis=1)
    out = masker(ids, seed=seed)
    mask_ids = out.pop("mask_ids")
    return out, mask_ids
