"""`tfattn.data.MaskGenerator` against BERT's masking rule, written out in
Python and NumPy here (Devlin et al. 2019, appendix A.1, and Google BERT's
`create_pretraining_data.py`): round(rate × n) tokens chosen per row, at
least one; never a special id nor padding; of the chosen, 80% become the
mask id, 10% a random id, 10% stay. Frequencies are checked with 5-sigma
binomial bounds over a few thousand draws.
"""

import numpy as np
import pytest
import tensorflow as tf

from tfattn.data.masking import MaskGenerator
from tfattn.data.masking import word_starts

VOCAB = 50
MASK = 4
SPECIAL = {0, 1, 2, 3, MASK}


def _batch(rows=300, length=24, seed=0):
    """<s> random ids </s> rows of random lengths, right-padded."""
    rng = np.random.default_rng(seed)
    ids = np.zeros((rows, length), np.int32)
    for row in range(rows):
        n = int(rng.integers(1, length - 1))
        ids[row, 0], ids[row, n + 1] = 2, 3
        ids[row, 1:n + 1] = rng.integers(5, VOCAB, n)
    return ids


def _np(out):
    return {key: value.numpy() for key, value in out.items()}


def _bert_count(n, rate, width):
    return min(width, max(1, round(rate * n))) if n else 0


def _check_bounds(count, total, p):
    sigma = np.sqrt(total * p * (1 - p))
    assert abs(count - total * p) <= 5 * sigma + 1, (count, total, p)


def test_counts_positions_and_ids_follow_the_rule():
    ids = _batch()
    masker = MaskGenerator(VOCAB, mask_token_id=MASK,
                           mask_selection_length=6)
    out = _np(masker(ids, seed=[1, 2]))
    assert out["mask_positions"].shape == (len(ids), 6)
    for row in range(len(ids)):
        n = int(np.sum(~np.isin(ids[row], list(SPECIAL))))
        used = out["mask_weights"][row] == 1.0
        assert used.sum() == _bert_count(n, 0.15, 6)
        positions = out["mask_positions"][row][used]
        assert list(positions) == sorted(set(positions))
        assert not np.isin(ids[row, positions], list(SPECIAL)).any()
        np.testing.assert_array_equal(out["mask_ids"][row][used],
                                      ids[row, positions])
        assert not out["mask_ids"][row][~used].any()
        unchanged = np.ones(ids.shape[1], bool)
        unchanged[positions] = False
        np.testing.assert_array_equal(out["token_ids"][row][unchanged],
                                      ids[row][unchanged])


def test_replacements_are_80_10_10_and_random_ids_are_never_special():
    ids = _batch(rows=400, seed=1)
    masker = MaskGenerator(VOCAB, mask_token_id=MASK,
                           mask_selection_rate=0.5)
    out = _np(masker(ids, seed=[3, 4]))
    used = out["mask_weights"] == 1.0
    rows = np.nonzero(used)[0]
    new = out["token_ids"][rows, out["mask_positions"][used]]
    old = out["mask_ids"][used]
    total = len(new)
    assert total > 2000
    _check_bounds(np.sum(new == MASK), total, 0.8)
    # A random id equals the original one time in the 45 choosable ids.
    p_kept = 0.1 + 0.1 / (VOCAB - len(SPECIAL))
    _check_bounds(np.sum(new == old), total, p_kept)
    assert not np.isin(new[new != MASK], list(SPECIAL)).any()


def test_random_replacements_are_uniform_over_the_choosable_ids():
    # Every chosen token replaced by a random id: each of the 45 choosable
    # ids is Binomial(total, 1/45); 5-sigma bounds on each count (about
    # 55 +- 36 here) fail an id stuck on one value (count = total) or one
    # never drawn (count 0), which the 80-10-10 shares alone would miss.
    ids = _batch(rows=400, seed=4)
    masker = MaskGenerator(VOCAB, mask_token_id=MASK, mask_selection_rate=0.5,
                           mask_token_rate=0.0, random_token_rate=1.0)
    out = _np(masker(ids, seed=[9, 10]))
    used = out["mask_weights"] == 1.0
    new = out["token_ids"][np.nonzero(used)[0], out["mask_positions"][used]]
    total = len(new)
    assert total > 2000
    choosable = [i for i in range(VOCAB) if i not in SPECIAL]
    counts = np.bincount(new, minlength=VOCAB)
    assert not counts[list(SPECIAL)].any()
    for count in counts[choosable]:
        _check_bounds(count, total, 1 / len(choosable))


def test_every_choosable_position_is_equally_likely():
    ids = np.tile(np.array([[2] + list(range(10, 30)) + [3]], np.int32),
                  (3000, 1))
    out = _np(MaskGenerator(VOCAB, mask_token_id=MASK)(ids, seed=[5, 6]))
    counts = np.bincount(out["mask_positions"][out["mask_weights"] == 1],
                         minlength=22)
    assert counts[0] == 0 and counts[21] == 0
    # round(0.15 * 20) = 3 of 20 positions per row.
    for count in counts[1:21]:
        _check_bounds(count, 3000, 3 / 20)


def test_seeds_repeat_and_differ():
    ids = _batch(rows=20)
    masker = MaskGenerator(VOCAB, mask_token_id=MASK)
    a, b = _np(masker(ids, seed=[7, 8])), _np(masker(ids, seed=[7, 8]))
    c = _np(masker(ids, seed=[7, 9]))
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])
    assert not np.array_equal(a["token_ids"], c["token_ids"])
    first = _np(MaskGenerator(VOCAB, seed=11)(ids))
    again = _np(MaskGenerator(VOCAB, seed=11)(ids))
    np.testing.assert_array_equal(first["mask_positions"],
                                  again["mask_positions"])


def test_whole_words_are_chosen_whole():
    starts = np.zeros(VOCAB, bool)
    starts[5:30] = True  # ids 30.. continue the word before them
    rng = np.random.default_rng(2)
    ids = np.zeros((300, 20), np.int32)
    for row in range(300):
        pieces = [2]
        while len(pieces) < 17:
            pieces += [int(rng.integers(5, 30))] + list(
                rng.integers(30, VOCAB, int(rng.integers(0, 3))))
        ids[row, :18] = pieces[:17] + [3]
    masker = MaskGenerator(VOCAB, mask_token_id=MASK, mask_selection_rate=0.3,
                           word_start_ids=starts)
    out = _np(masker(ids, seed=[1, 1]))
    for row in range(len(ids)):
        chosen = np.zeros(20, bool)
        chosen[out["mask_positions"][row][out["mask_weights"][row] == 1]] = 1
        word = np.cumsum(starts[ids[row]] | np.isin(ids[row],
                                                    list(SPECIAL)))
        for w in np.unique(word[chosen]):
            members = (word == w) & ~np.isin(ids[row], list(SPECIAL))
            assert chosen[members].all()
        n = int(np.sum(~np.isin(ids[row], list(SPECIAL))))
        budget = max(1, round(0.3 * n))
        first_word = np.bincount(word[chosen]).max() if chosen.any() else 0
        assert 1 <= chosen.sum() <= max(budget, first_word)
        # Words are taken in key order while they fit: the word that stops
        # the choice is at most 3 pieces (1 start + at most 2 others), so a
        # row gets at least budget - 2 tokens (a deterministic bound, not a
        # statistical one: a rule that picks too few fails every row).
        assert chosen.sum() >= min(budget - 2, n)
    # Over the batch the shortfall is small: under a third of a word on
    # average (the mean of budget - chosen, each in [0, 2]).
    counts = [((out["mask_weights"][r] == 1).sum(),
               max(1, round(0.3 * int(np.sum(~np.isin(ids[r],
                                                     list(SPECIAL)))))))
              for r in range(len(ids))]
    shortfall = np.mean([max(b - c, 0) for c, b in counts])
    assert shortfall < 1.0, shortfall


def test_a_tf_data_pipeline_and_one_sentence():
    masker = MaskGenerator(VOCAB, mask_token_id=MASK,
                           mask_selection_length=4, seed=0)
    dataset = tf.data.Dataset.from_tensor_slices(_batch(rows=8)).batch(
        4).map(masker)
    shapes = [tuple(b["mask_positions"].shape) for b in dataset]
    assert shapes == [(4, 4), (4, 4)]
    one = _np(masker(np.array([2, 10, 11, 12, 3, 0], np.int32), seed=[1, 2]))
    assert one["token_ids"].shape == (6,) and one["mask_ids"].shape == (4,)


def test_word_starts_reads_the_pieces():
    class Pieces:
        vocab_size = 4

        def id_to_piece(self, i):
            return ["<pad>", "\u2581a", "b", "\u2581c"][i]

    assert word_starts(Pieces()).tolist() == [False, True, False, True]


@pytest.mark.parametrize("kwargs, match", [
    (dict(mask_selection_rate=1.5), "mask_selection_rate=1.5"),
    (dict(mask_selection_rate=-0.1), "mask_selection_rate=-0.1"),
    (dict(mask_token_rate=0.8, random_token_rate=0.3),
     "mask_token_rate=0.8 is at most 1.*random_token_rate=0.3"),
    (dict(mask_token_id=VOCAB), f"mask_token_id={VOCAB}"),
    (dict(mask_selection_length=0), "mask_selection_length=0"),
    (dict(unselectable_token_ids=[0, 99]), "unselectable_token_ids"),
    (dict(word_start_ids=np.ones(3, bool)), "word_start_ids"),
])
def test_bad_arguments_are_refused_by_name(kwargs, match):
    with pytest.raises(ValueError, match=match):
        MaskGenerator(VOCAB, **kwargs)


def test_ids_that_are_not_int_rows_are_refused():
    with pytest.raises(ValueError, match="ids.*float"):
        MaskGenerator(VOCAB)(np.ones((2, 3), np.float32))


@pytest.mark.parametrize("ids", [[[2, VOCAB, 3]], [[2, -5, 3]]])
def test_ids_out_of_the_vocabulary_are_refused_eagerly_and_in_a_pipeline(
        ids):
    # Before: a GatherV2 error on CPU (and silent zeros on GPU/XLA).
    masker = MaskGenerator(VOCAB, seed=0)
    match = r"argument `ids`, expected token ids in \[0, vocab_size=50\)"
    with pytest.raises(ValueError, match=match):
        masker(np.array(ids, np.int32))
    dataset = tf.data.Dataset.from_tensor_slices(np.array(ids * 2, np.int32))
    with pytest.raises(tf.errors.InvalidArgumentError, match=match):
        list(dataset.batch(2).map(masker))


@pytest.mark.parametrize("seed", [True, 2.5, "a", [1], [1, 2, 3],
                                  np.array([1.0, 2.0], np.float32),
                                  [2**40, 1], [True, 1],
                                  tf.constant([1.0, 2.0])])
def test_bad_call_seeds_are_refused_by_name(seed):
    with pytest.raises(ValueError, match="argument `seed`"):
        MaskGenerator(VOCAB)(_batch(rows=2), seed=seed)


def test_good_call_seeds_agree():
    masker, ids = MaskGenerator(VOCAB), _batch(rows=4)
    outs = [_np(masker(ids, seed=s))["mask_positions"] for s in (
        [1, 2], (1, 2), np.array([1, 2], np.int64), tf.constant([1, 2]))]
    for out in outs[1:]:
        np.testing.assert_array_equal(out, outs[0])


@pytest.mark.parametrize("kwargs, match", [
    (dict(seed=True), "seed=True"),
    (dict(seed=1.5), "seed=1.5"),
    (dict(seed="0"), "seed='0'"),
    (dict(vocab_size=True), "vocab_size=True"),
    (dict(vocab_size=5), "unselectable_token_ids"),
    (dict(mask_token_id=True), "mask_token_id=True"),
    (dict(mask_token_id=-1), "mask_token_id=-1"),
    (dict(mask_selection_rate=float("nan")), "mask_selection_rate=nan"),
    (dict(mask_token_rate=float("inf")), "mask_token_rate=inf"),
    (dict(random_token_rate="0.1"), "random_token_rate='0.1'"),
    (dict(mask_selection_length=True), "mask_selection_length=True"),
    (dict(mask_selection_length=2.0), "mask_selection_length=2.0"),
    (dict(unselectable_token_ids=[0, True]), "unselectable_token_ids"),
    (dict(unselectable_token_ids=[0, 1.5]), "unselectable_token_ids"),
    (dict(unselectable_token_ids="0123"), "unselectable_token_ids"),
    (dict(unselectable_token_ids=5), "unselectable_token_ids"),
    (dict(word_start_ids=[1] * VOCAB), "word_start_ids"),
    (dict(word_start_ids=np.ones((VOCAB, 1), bool)), "word_start_ids"),
])
def test_every_constructor_argument_is_refused_by_name(kwargs, match):
    args = dict(vocab_size=VOCAB)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        MaskGenerator(**args)
