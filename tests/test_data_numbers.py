"""Tests for the generated digits-to-words translation task."""

import numpy as np
import pytest
import tensorflow as tf

from tfattn.data import load_numbers
from tfattn.data import numbers
from tfattn.data import number_to_words
from tfattn.data import numbers_dataset
from tfattn.data import numbers_splits


@pytest.mark.parametrize(
    "n, words",
    [
        (0, "zero"),
        (7, "seven"),
        (13, "thirteen"),
        (20, "twenty"),
        (21, "twenty one"),
        (100, "one hundred"),
        (101, "one hundred one"),
        (110, "one hundred ten"),
        (999, "nine hundred ninety nine"),
        (1000, "one thousand"),
        (1001, "one thousand one"),
        (4072, "four thousand seventy two"),
        (10000, "ten thousand"),
        (20015, "twenty thousand fifteen"),
        (99999, "ninety nine thousand nine hundred ninety nine"),
        (100000, "one hundred thousand"),
        (999999, "nine hundred ninety nine thousand nine hundred ninety nine"),
    ],
)
def test_number_to_words(n, words):
    assert number_to_words(n) == words


@pytest.mark.parametrize("n", [-1, 1_000_000, 2.0, "12", True])
def test_number_to_words_rejects(n):
    with pytest.raises(ValueError, match="argument `n`"):
        number_to_words(n)


@pytest.fixture(scope="module")
def splits():
    return numbers_splits(seed=0)


def test_split_sizes_and_disjointness(splits):
    assert len(splits["validation"]) == 500
    assert len(splits["test"]) == 500
    sets = {k: {src for src, _ in v} for k, v in splits.items()}
    assert len(sets["train"]) == 100_000 - 1000  # distinct numbers
    assert sets["train"].isdisjoint(sets["validation"])
    assert sets["train"].isdisjoint(sets["test"])
    assert sets["validation"].isdisjoint(sets["test"])
    # Only numbers below 1,000 repeat.
    assert len(splits["validation"]) == len(sets["validation"])
    repeated = {src for src in sets["train"] if len(src) <= 3}
    assert len(splits["train"]) - len(sets["train"]) == sum(
        (500, 55, 6)[len(src) - 1] - 1 for src in repeated
    )


def test_every_input_length_gets_a_share_of_training(splits):
    lengths = np.bincount([len(src) for src, _ in splits["train"]], minlength=6)
    share = lengths[1:] / lengths.sum()
    assert np.all(share >= 0.04), share


def test_pairs_are_short_and_correct(splits):
    for src, tgt in splits["test"] + splits["train"][:1000]:
        assert src.isdigit() and len(src) <= 5
        assert str(int(src)) == src  # No leading zeros.
        assert tgt == number_to_words(int(src))
        assert 1 <= len(tgt.split()) <= 8


def test_every_word_is_in_training(splits):
    train_words = {w for _, tgt in splits["train"] for w in tgt.split()}
    held_out = {
        w
        for k in ("validation", "test")
        for _, t in splits[k]
        for w in t.split()
    }
    assert held_out <= train_words
    assert len(train_words) == 30
    train_numbers = {int(src) for src, _ in splits["train"]}
    assert set(range(100)) <= train_numbers


def test_deterministic_given_seed(splits):
    numbers._generated_splits.cache_clear()  # generate anew, not recall
    again = numbers_splits(seed=0)
    assert again == splits
    other = numbers_splits(seed=1)
    assert other["test"] != splits["test"]
    assert load_numbers("test", seed=0) == splits["test"]


def test_splits_are_generated_once_and_returned_as_fresh_lists():
    """Repeated calls (train.py loads each split separately) reuse one
    generation, and what a caller does to its lists reaches no other."""
    first = numbers_splits(max_value=1200, num_validation=20, num_test=20)
    first["train"].clear()
    first["test"].append(("x", "y"))
    again = numbers_splits(max_value=1200, num_validation=20, num_test=20)
    assert len(again["train"]) > 1000 and len(again["test"]) == 20
    assert again["test"][-1] != ("x", "y")
    assert (
        load_numbers("test", max_value=1200, num_validation=20, num_test=20)
        == again["test"]
    )
    # Arguments are checked before the cache: a bad one is named each time.
    for _ in range(2):
        with pytest.raises(ValueError, match="num_train"):
            numbers_splits(max_value=1200, num_train=10**6)


def test_balance_lengths_must_be_a_bool():
    with pytest.raises(
        ValueError, match=r"argument `balance_lengths`.*balance_lengths='yes'"
    ):
        numbers_splits(balance_lengths="yes")


def test_unbalanced_split_has_exactly_num_train_pairs():
    plain = numbers_splits(
        seed=3,
        num_train=300,
        num_validation=50,
        num_test=50,
        balance_lengths=False,
    )
    assert len(plain["train"]) == len({s for s, _ in plain["train"]}) == 300


def test_small_train_keeps_every_word():
    small = numbers_splits(
        seed=3, num_train=300, num_validation=50, num_test=50
    )
    assert len({s for s, _ in small["train"]}) == 300
    assert {int(s) for s, _ in small["train"]} >= set(range(100))
    assert len({w for _, t in small["train"] for w in t.split()}) == 30


def test_invalid_arguments():
    with pytest.raises(ValueError, match="argument `max_value`"):
        numbers_splits(max_value=500, num_validation=300, num_test=300)
    with pytest.raises(ValueError, match="argument `num_train`"):
        numbers_splits(max_value=2000, num_train=5000)
    with pytest.raises(ValueError, match="argument `num_test`"):
        numbers_splits(num_test=0)
    with pytest.raises(ValueError, match="argument `split`"):
        load_numbers("dev")


def test_numbers_dataset():
    ds = numbers_dataset("validation", seed=0, num_validation=20)
    assert ds.element_spec == {
        "inputs": tf.TensorSpec([], tf.string),
        "targets": tf.TensorSpec([], tf.string),
    }
    got = [
        (x["inputs"].decode(), x["targets"].decode())
        for x in ds.as_numpy_iterator()
    ]
    assert got == load_numbers("validation", seed=0, num_validation=20)
