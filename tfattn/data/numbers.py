"""A generated translation task: numbers in digits to English words.

The source is a whole number written in digits (`"4072"`) and the target is
the number in English words (`"four thousand seventy two"`): lower case, no
"and", no hyphens, no commas. It needs no download, every example is short
(at most 5 source characters and 8 target words for the default range), and
the mapping is exact, so a tiny Transformer should reach near-perfect output
within about a minute of CPU training. That makes it a quick end-to-end check
of a model, its training loop and its decoding.

Splits. The numbers `0..max_value` are shuffled once with `seed`; the first
`num_test` numbers form the test split, the next `num_validation` the
validation split, and the rest (optionally cut to `num_train`) the training
split, so the splits never overlap. The numbers below 100 always belong to
the training split (the first 100 kept when `num_train` cuts it), so that
each of the 30 words occurs in training. The same
seed and sizes give the same splits on every machine.

Tokenising. Sentencepiece merges digit runs into multi-digit pieces unless it
is told not to; train the vocabulary with `split_digits=True`
(`tfattn.data.train_tokenizer`) so that each digit is one piece.
"""

import functools

import numpy as np

from tfattn.data.pipeline import pairs_to_dataset
from tfattn.utils.validation import check_choice
from tfattn.utils.validation import invalid_argument

__all__ = [
    "SPLITS",
    "load_numbers",
    "number_to_words",
    "numbers_dataset",
    "numbers_splits",
]

SPLITS = ("train", "validation", "test")

_ONES = (
    "zero one two three four five six seven eight nine ten eleven twelve "
    "thirteen fourteen fifteen sixteen seventeen eighteen nineteen"
).split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
# Numbers below this always go to the training split (all word forms).
_ALWAYS_TRAIN = 100
_MAX_SUPPORTED = 999_999


# Copies in the training split of each number with 1, 2 or 3 digits (index =
# digit count; 4 or more digits: one copy).
_SHORT_REPEATS = (1, 500, 55, 6, 1)


def _below_thousand(n):
    words = []
    hundreds, rest = divmod(n, 100)
    if hundreds:
        words += [_ONES[hundreds], "hundred"]
    if rest >= 20:
        tens, ones = divmod(rest, 10)
        words.append(_TENS[tens])
        if ones:
            words.append(_ONES[ones])
    elif rest or not words:
        words.append(_ONES[rest])
    return words


def number_to_words(n):
    """English words for a whole number in `[0, 999999]`.

    Args:
        n: int. The number.

    Returns:
        str, e.g. `number_to_words(4072) == "four thousand seventy two"`.

    Raises:
        ValueError: `n` is not an integer in `[0, 999999]`.
    """
    if (
        isinstance(n, bool)
        or not isinstance(n, (int, np.integer))
        or not 0 <= n <= _MAX_SUPPORTED
    ):
        raise invalid_argument("n", f"an integer in [0, {_MAX_SUPPORTED}]", n)
    thousands, rest = divmod(int(n), 1000)
    words = []
    if thousands:
        words += _below_thousand(thousands) + ["thousand"]
        if rest:
            words += _below_thousand(rest)
    else:
        words = _below_thousand(rest)
    return " ".join(words)


def _check_count(name, value, allow_none=False):
    if value is None and allow_none:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, np.integer))
        or value < 1
    ):
        expected = "a positive integer" + (" or None" if allow_none else "")
        raise invalid_argument(name, expected, value)
    return int(value)


def numbers_splits(
    seed=0,
    max_value=99_999,
    num_train=None,
    num_validation=500,
    num_test=500,
    balance_lengths=True,
):
    """Generates the three disjoint splits of the numbers task.

    Args:
        seed: int. Seed of the one shuffle that assigns numbers to splits.
            Defaults to `0`.
        max_value: int. Largest number used, at most 999999 and at least
            `99 + num_validation + num_test + 1`. Defaults to `99999`.
        num_train: int or None. Distinct numbers in the training split;
            `None` keeps every number not in validation or test. Defaults
            to `None`.
        num_validation: int. Size of the validation split. Defaults to `500`.
        num_test: int. Size of the test split. Defaults to `500`.
        balance_lengths: bool. Repeat the training split's numbers of 1, 2
            and 3 digits (500, 55 and 6 copies) so that short inputs are not
            drowned by the five-digit ones. Defaults to `True`.

    Returns:
        A dict with keys `'train'`, `'validation'` and `'test'`, each a list
        of (digits, words) str tuples in a seeded random order.

    Raises:
        ValueError: an argument of the wrong type or out of range (the
            message names it).
    """
    if not isinstance(balance_lengths, bool):
        raise invalid_argument(
            "balance_lengths", "a Python bool", balance_lengths
        )
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise invalid_argument("seed", "an integer", seed)
    num_validation = _check_count("num_validation", num_validation)
    num_test = _check_count("num_test", num_test)
    num_train = _check_count("num_train", num_train, allow_none=True)
    held_out = num_validation + num_test
    min_value = _ALWAYS_TRAIN + held_out
    if (
        isinstance(max_value, bool)
        or not isinstance(max_value, (int, np.integer))
        or not min_value <= max_value <= _MAX_SUPPORTED
    ):
        raise invalid_argument(
            "max_value",
            f"an integer in [{min_value}, {_MAX_SUPPORTED}] (room for "
            f"{_ALWAYS_TRAIN} always-train numbers, num_validation="
            f"{num_validation} and num_test={num_test})",
            max_value,
        )
    splits = _generated_splits(
        int(seed), int(max_value), num_train, num_validation, num_test,
        balance_lengths,
    )
    # Fresh lists: the cached tuples stay as generated whatever callers do.
    return {name: list(pairs) for name, pairs in splits.items()}


# train.py loads each split separately and every load would generate all
# three (about a second for the default 100,000 numbers): generate once.
@functools.lru_cache(maxsize=4)
def _generated_splits(
    seed, max_value, num_train, num_validation, num_test, balance_lengths
):
    """`numbers_splits` for checked arguments, as tuples."""
    held_out = num_validation + num_test
    rng = np.random.default_rng(seed)
    pool = rng.permutation(np.arange(_ALWAYS_TRAIN, max_value + 1))
    test = pool[:num_test]
    validation = pool[num_test:held_out]
    # The always-train numbers come first so that a cut keeps them.
    train = np.concatenate([np.arange(_ALWAYS_TRAIN), pool[held_out:]])
    if num_train is not None:
        if num_train > len(train):
            raise invalid_argument(
                "num_train",
                f"at most {len(train)} for max_value={max_value}",
                num_train,
            )
        train = train[:num_train]
    # Numbers are uniform over 0..max_value, so nine in ten have five digits
    # and a model trained on them keeps writing after "7". Repeating the
    # short ones gives each length at least ~4% of the split.
    if balance_lengths:
        digits = np.char.str_len(train.astype(str))
        train = np.repeat(
            train, np.asarray(_SHORT_REPEATS)[np.minimum(digits, 4)]
        )
    train = rng.permutation(train)

    def pairs(values):
        return tuple((str(int(v)), number_to_words(int(v))) for v in values)

    return {
        "train": pairs(train),
        "validation": pairs(validation),
        "test": pairs(test),
    }


def load_numbers(split, **kwargs):
    """One split of `numbers_splits` as a list of (digits, words) tuples.

    Args:
        split: str. One of `'train'`, `'validation'`, `'test'`.
        **kwargs: passed to `numbers_splits` (`seed`, `max_value`,
            `num_train`, `num_validation`, `num_test`, `balance_lengths`).

    Returns:
        A list of (digits, words) str tuples.
    """
    check_choice("split", split, SPLITS)
    return numbers_splits(**kwargs)[split]


def numbers_dataset(split, **kwargs):
    """One split as a `tf.data.Dataset` of `{'inputs', 'targets'}` strings.

    Args:
        split: str. One of `'train'`, `'validation'`, `'test'`.
        **kwargs: passed to `numbers_splits`.

    Returns:
        A `tf.data.Dataset` of dicts with `'inputs'` (digits) and `'targets'`
        (words) `tf.string` scalars.
    """
    return pairs_to_dataset(load_numbers(split, **kwargs))
