"""Tests for the tf.data translation input pipeline."""

import collections

import numpy as np
import pytest
import tensorflow as tf

from tfattn.data import BOS_ID
from tfattn.data import EOS_ID
from tfattn.data import PAD_ID
from tfattn.data import default_bucket_boundaries
from tfattn.data import encode_sources
from tfattn.data import load_numbers
from tfattn.data import make_batches
from tfattn.data import pairs_to_dataset
from tfattn.data import train_tokenizer

PAIRS = load_numbers(
    "train",
    seed=0,
    num_train=400,
    num_validation=10,
    num_test=10,
    balance_lengths=False,
)
# A few longer, made-up pairs so that length filtering has work to do.
PAIRS += [
    (" ".join([src] * k), " ".join([tgt] * k))
    for k, (src, tgt) in zip((2, 3, 4, 5), PAIRS[:4])
]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    texts = [s for pair in PAIRS for s in pair]
    return train_tokenizer(
        texts, tmp_path_factory.mktemp("spm"), vocab_size=48, split_digits=True
    )


@pytest.fixture(scope="module")
def dataset():
    return pairs_to_dataset(PAIRS)


def _batches(ds):
    return [
        (x["source"].numpy(), x["target_in"].numpy(), y.numpy()) for x, y in ds
    ]


def _unpad(row):
    row = list(row)
    while row and row[-1] == PAD_ID:
        row.pop()
    return row


def test_structure_and_dtypes(dataset, tokenizer):
    ds = make_batches(dataset, tokenizer, batch_size=8)
    features, labels = ds.element_spec
    assert set(features) == {"source", "target_in"}
    for spec in (features["source"], features["target_in"], labels):
        assert spec.dtype == tf.int32
        assert spec.shape.as_list() == [None, None]
    for src, tin, lab in _batches(ds):
        assert src.shape[0] == tin.shape[0] == lab.shape[0] <= 8
        assert tin.shape == lab.shape


def test_bos_eos_and_padding(dataset, tokenizer):
    ds = make_batches(dataset, tokenizer, batch_size=16)
    seen = 0
    for src, tin, lab in _batches(ds):
        for s, ti, la in zip(src, tin, lab):
            s, ti, la = _unpad(s), _unpad(ti), _unpad(la)
            assert s[-1] == EOS_ID and EOS_ID not in s[:-1]
            assert BOS_ID not in s
            assert ti[0] == BOS_ID and BOS_ID not in ti[1:] and EOS_ID not in ti
            assert (
                la[-1] == EOS_ID and EOS_ID not in la[:-1] and BOS_ID not in la
            )
            assert len(ti) == len(la)
            assert ti[1:] == la[:-1]  # Labels are the inputs shifted by one.
            assert PAD_ID not in s + ti + la  # Padding only at the end.
            seen += 1
    assert seen == len(PAIRS)


def test_every_pair_once_and_text_round_trips(dataset, tokenizer):
    ds = make_batches(
        dataset, tokenizer, batch_size=32, shuffle_buffer_size=64, seed=3
    )
    got = collections.Counter()
    for x, y in ds:
        sources = tokenizer.detokenize(x["source"]).numpy()
        targets = tokenizer.detokenize(y).numpy()
        got.update(
            zip((s.decode() for s in sources), (t.decode() for t in targets))
        )
    assert got == collections.Counter(PAIRS)


def test_length_filter(dataset, tokenizer):
    max_length = 12
    src_len = tokenizer.tokenize([s for s, _ in PAIRS]).row_lengths().numpy()
    tgt_len = tokenizer.tokenize([t for _, t in PAIRS]).row_lengths().numpy()
    expected = int(
        np.sum((src_len + 1 <= max_length) & (tgt_len + 1 <= max_length))
    )
    assert 0 < expected < len(PAIRS)
    ds = make_batches(dataset, tokenizer, max_length=max_length, batch_size=16)
    count = 0
    for src, tin, lab in _batches(ds):
        assert src.shape[1] <= max_length and tin.shape[1] <= max_length
        count += src.shape[0]
    assert count == expected


def test_deterministic_with_seed(dataset, tokenizer):
    def run(seed, cache=False):
        ds = make_batches(
            dataset,
            tokenizer,
            tokens_per_batch=128,
            max_length=40,
            shuffle_buffer_size=100,
            seed=seed,
            cache=cache,
        )
        return _batches(ds)

    first, second, other = run(7), run(7, cache=True), run(8)
    assert len(first) == len(second)
    for a, b in zip(first, second):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)
    assert any(
        a[0].shape != b[0].shape or not np.array_equal(a[0], b[0])
        for a, b in zip(first, other)
    )


def test_epochs_reshuffle_reproducibly(dataset, tokenizer):
    def two_epochs():
        ds = make_batches(
            dataset,
            tokenizer,
            batch_size=400,
            bucket_by_length=False,
            shuffle_buffer_size=500,
            seed=1,
            cache=True,
        ).repeat(2)
        return [x["source"].numpy() for x, _ in ds]

    run1, run2 = two_epochs(), two_epochs()
    assert len(run1) == 4
    for a, b in zip(run1, run2):
        np.testing.assert_array_equal(a, b)
    assert run1[0].shape != run1[2].shape or not np.array_equal(
        run1[0], run1[2]
    )


def test_tokens_per_batch(dataset, tokenizer):
    ds = make_batches(dataset, tokenizer, tokens_per_batch=96, max_length=48)
    sizes = set()
    for src, tin, lab in _batches(ds):
        assert src.shape[0] * max(src.shape[1], tin.shape[1]) <= 96
        sizes.add(src.shape[0])
    assert len(sizes) > 1  # Short sequences come in bigger batches.


def test_bucketing_groups_lengths(dataset, tokenizer):
    boundaries = [6, 8, 10]
    ds = make_batches(
        dataset, tokenizer, batch_size=16, bucket_boundaries=boundaries
    )
    edges = [0] + boundaries + [10**6]
    for src, tin, _ in _batches(ds):
        lengths = [
            max(len(_unpad(s)), len(_unpad(t))) for s, t in zip(src, tin)
        ]
        buckets = {
            next(
                i for i in range(len(edges) - 1) if edges[i] <= n < edges[i + 1]
            )
            for n in lengths
        }
        assert len(buckets) == 1


def test_drop_remainder_and_static_shapes(dataset, tokenizer):
    ds = make_batches(
        dataset,
        tokenizer,
        max_length=16,
        batch_size=8,
        pad_to_max_length=True,
        drop_remainder=True,
    )
    features, labels = ds.element_spec
    assert features["source"].shape.as_list() == [8, 16]
    assert features["target_in"].shape.as_list() == [8, 16]
    assert labels.shape.as_list() == [8, 16]
    batches = _batches(ds)
    assert batches and all(b[0].shape == (8, 16) for b in batches)


def test_a_token_budget_padded_to_max_length_keeps_its_budget(
    dataset, tokenizer
):
    """Padded to max_length, every bucket fills the budget with rows of
    max_length: short pairs must not make a batch of budget // 7 rows."""
    ds = make_batches(
        dataset,
        tokenizer,
        max_length=16,
        tokens_per_batch=64,
        pad_to_max_length=True,
        drop_remainder=True,
    )
    assert ds.element_spec[0]["source"].shape.as_list() == [4, 16]
    batches = _batches(ds)
    assert batches and all(b[0].shape == (4, 16) for b in batches)


def test_without_bucketing_keeps_order(dataset, tokenizer):
    ds = make_batches(dataset, tokenizer, batch_size=5, bucket_by_length=False)
    first = next(iter(ds))[0]["source"]
    text = [t.decode() for t in tokenizer.detokenize(first).numpy()]
    assert text == [src for src, _ in PAIRS[:5]]
    fixed = make_batches(
        dataset,
        tokenizer,
        tokens_per_batch=64,
        max_length=16,
        bucket_by_length=False,
        drop_remainder=True,
    )
    assert all(x["source"].shape[0] == 4 for x, _ in fixed)


def test_tuple_dataset_and_custom_keys(tokenizer):
    pairs = PAIRS[:10]
    as_tuples = tf.data.Dataset.from_tensor_slices(
        ([s for s, _ in pairs], [t for _, t in pairs])
    )
    as_dicts = pairs_to_dataset(pairs, source_key="en", target_key="de")
    a = _batches(
        make_batches(as_tuples, tokenizer, batch_size=4, bucket_by_length=False)
    )
    b = _batches(
        make_batches(
            as_dicts,
            tokenizer,
            source_key="en",
            target_key="de",
            batch_size=4,
            bucket_by_length=False,
        )
    )
    for x, y in zip(a, b):
        for u, v in zip(x, y):
            np.testing.assert_array_equal(u, v)


def test_encode_sources(tokenizer):
    ids = encode_sources(tokenizer, ["12", "4072"]).numpy()
    assert ids.dtype == np.int32
    rows = [_unpad(r) for r in ids]
    assert all(r[-1] == EOS_ID for r in rows)
    assert len(rows[1]) > len(rows[0]) and ids.shape[1] == len(rows[1])


def test_default_bucket_boundaries():
    b = default_bucket_boundaries(64)
    assert b[0] == 8 and b[-1] <= 64 and b == sorted(set(b))
    assert default_bucket_boundaries(5) == []


def test_invalid_arguments(dataset, tokenizer):
    with pytest.raises(ValueError, match="exactly one of them"):
        make_batches(dataset, tokenizer)
    with pytest.raises(ValueError, match="exactly one of them"):
        make_batches(dataset, tokenizer, batch_size=4, tokens_per_batch=100)
    with pytest.raises(ValueError, match="argument `max_length`"):
        make_batches(dataset, tokenizer, tokens_per_batch=100)
    with pytest.raises(ValueError, match="argument `max_length`"):
        make_batches(dataset, tokenizer, batch_size=4, pad_to_max_length=True)
    with pytest.raises(ValueError, match="argument `source_key`"):
        make_batches(dataset, tokenizer, batch_size=4, source_key="en")
    with pytest.raises(ValueError, match="argument `batch_size`"):
        make_batches(dataset, tokenizer, batch_size=0)
    with pytest.raises(ValueError, match="argument `bucket_boundaries`"):
        make_batches(dataset, tokenizer, batch_size=4, bucket_boundaries=[8, 4])
    with pytest.raises(ValueError, match="argument `dataset`"):
        make_batches(PAIRS, tokenizer, batch_size=4)
    with pytest.raises(ValueError, match="argument `pairs`"):
        pairs_to_dataset([("a", "b", "c")])
