"""tf.data input for translation: tokenize, filter, bucket, batch, prefetch.

Each (source, target) string pair becomes three int32 id sequences, built
with an in-graph tokenizer (`tfattn.data.SubwordTokenizer`):

- `source`    = pieces(source) + [eos]
- `target_in` = [bos] + pieces(target)   (the decoder's input)
- `labels`    = pieces(target) + [eos]   (the next token at each position)

so `target_in` and `labels` have the same length, and `labels[t]` is the
token that follows `target_in[:t + 1]`. Batches are padded with 0 and come
out as `({'source': [B, S], 'target_in': [B, T]}, labels [B, T])`, the
structure `keras.Model.fit` and a custom training step both take.

Lengths count the added bos/eos. Pairs whose `source` or `target_in` is
longer than `max_length` are dropped. Pairs are grouped by length
(`tf.data.Dataset.bucket_by_sequence_length`) so that a batch holds
similar lengths and little padding, either `batch_size` pairs per batch or
about `tokens_per_batch` tokens (batch size times padded length) per batch.
With a seed, the output is the same on every run.
"""

import tensorflow as tf

from tfattn.data.tokenizer import BOS_ID
from tfattn.data.tokenizer import EOS_ID
from tfattn.data.tokenizer import PAD_ID
from tfattn.utils.validation import check_positive_int
from tfattn.utils.validation import invalid_argument

__all__ = [
    "default_bucket_boundaries",
    "encode_pair",
    "encode_sources",
    "make_batches",
    "pairs_to_dataset",
]


def pairs_to_dataset(pairs, source_key="inputs", target_key="targets"):
    """A `tf.data.Dataset` of string dicts from (source, target) pairs.

    Args:
        pairs: sequence of (str, str). The sentence pairs.
        source_key: str. Key of the source string. Defaults to `'inputs'`.
        target_key: str. Key of the target string. Defaults to `'targets'`.

    Returns:
        A `tf.data.Dataset` of `{source_key: tf.string, target_key:
        tf.string}` scalars, in the order of `pairs`.
    """
    sources, targets = [], []
    for i, pair in enumerate(pairs):
        if (
            not isinstance(pair, (tuple, list))
            or len(pair) != 2
            or not all(isinstance(s, (str, bytes)) for s in pair)
        ):
            raise invalid_argument(
                "pairs",
                f"a sequence of (source, target) string pairs (item {i} is "
                "not)",
                pair,
            )
        sources.append(pair[0])
        targets.append(pair[1])
    return tf.data.Dataset.from_tensor_slices(
        {
            source_key: tf.constant(sources, tf.string, shape=[len(sources)]),
            target_key: tf.constant(targets, tf.string, shape=[len(targets)]),
        }
    )


def default_bucket_boundaries(max_length, min_length=8, growth=1.1):
    """Length-bucket boundaries growing by about `growth` per bucket.

    Args:
        max_length: int. Longest sequence to expect.
        min_length: int. First boundary. Defaults to `8`.
        growth: float > 1. Ratio between neighbouring boundaries (at least
            +1). Defaults to `1.1`.

    Returns:
        A list of increasing ints, all at most `max_length`. In
        `bucket_by_sequence_length`, bucket i holds lengths in
        `[b[i-1], b[i])` and the last bucket holds lengths `>= b[-1]`.
    """
    max_length = check_positive_int("max_length", max_length)
    min_length = check_positive_int("min_length", min_length)
    if not growth > 1:
        raise invalid_argument("growth", "a number > 1", growth)
    boundaries = []
    x = min_length
    while x <= max_length:
        boundaries.append(x)
        x = max(x + 1, int(x * growth))
    return boundaries


def encode_pair(tokenizer, source, target):
    """Ids of one pair (scalar strings), for use inside `tf.data.map`.

    Args:
        tokenizer: a `SubwordTokenizer` (anything with `tokenize`; one
            with `tokenize_target` too cuts the target with it).
        source: `tf.string` scalar.
        target: `tf.string` scalar.

    Returns:
        A tuple `(source_ids, target_in, labels)` of 1-D int32 tensors:
        `pieces + [eos]`, `[bos] + pieces` and `pieces + [eos]`.
    """
    src = _tokenize_one(tokenizer.tokenize, source)
    # A tokenizer with a model per side (a Marian checkpoint's) names its
    # target side `tokenize_target`.
    tgt = _tokenize_one(getattr(tokenizer, "tokenize_target",
                                tokenizer.tokenize), target)
    eos = tf.constant([EOS_ID], tf.int32)
    bos = tf.constant([BOS_ID], tf.int32)
    return (
        tf.concat([src, eos], 0),
        tf.concat([bos, tgt], 0),
        tf.concat([tgt, eos], 0),
    )


def encode_sources(tokenizer, texts):
    """A padded int32 `[B, S]` batch of `pieces + [eos]`, for inference.

    Args:
        tokenizer: a `SubwordTokenizer`.
        texts: a `[B]` `tf.string` tensor or a list of str.

    Returns:
        An int32 `tf.Tensor` of shape `[B, S]`, padded with 0.
    """
    ids = tokenizer.tokenize(tf.convert_to_tensor(texts, tf.string))
    if not isinstance(ids, tf.RaggedTensor):
        raise invalid_argument(
            "texts",
            "a 1-D batch of strings",
            f"<tensor of rank {ids.shape.rank - 1}>",
        )
    eos = tf.fill([ids.nrows(), 1], tf.constant(EOS_ID, tf.int32))
    ids = tf.concat([tf.cast(ids, tf.int32), eos], axis=1)
    return ids.to_tensor(default_value=PAD_ID)


def _tokenize_one(tokenize, text):
    ids = tokenize(text)
    if isinstance(ids, tf.RaggedTensor):
        ids = ids.flat_values
    return tf.reshape(tf.cast(ids, tf.int32), [-1])


def _check_optional_positive(name, value):
    return None if value is None else check_positive_int(name, value)


def _pick_fields(dataset, source_key, target_key):
    spec = dataset.element_spec
    if isinstance(spec, dict):
        missing = [k for k in (source_key, target_key) if k not in spec]
        if missing:
            name = "source_key" if source_key in missing else "target_key"
            value = source_key if name == "source_key" else target_key
            raise invalid_argument(
                name, f"a key of the dataset's elements {sorted(spec)}", value
            )
        return lambda ex: (ex[source_key], ex[target_key])
    if isinstance(spec, tuple) and len(spec) == 2:
        return lambda src, tgt: (src, tgt)
    raise invalid_argument(
        "dataset",
        "a dataset of dicts (with `source_key`/`target_key`) or of "
        "(source, target) tuples of string scalars",
        f"<dataset with element_spec {spec}>",
    )


def _checked_arguments(dataset, tokenizer, max_length, batch_size,
                       tokens_per_batch, bucket_by_length, bucket_boundaries,
                       pad_to_max_length, shuffle_buffer_size, seed,
                       drop_remainder, cache):
    """`make_batches`' arguments checked (a ValueError naming the first bad
    one); returns (max_length, batch_size, tokens_per_batch,
    shuffle_buffer_size, bucket_boundaries) normalised."""
    if not isinstance(dataset, tf.data.Dataset):
        raise invalid_argument(
            "dataset", "a tf.data.Dataset", type(dataset).__name__
        )
    if not callable(getattr(tokenizer, "tokenize", None)):
        raise invalid_argument(
            "tokenizer",
            "a tokenizer with a `tokenize` method (SubwordTokenizer)",
            type(tokenizer).__name__,
        )
    max_length = _check_optional_positive("max_length", max_length)
    batch_size = _check_optional_positive("batch_size", batch_size)
    tokens_per_batch = _check_optional_positive(
        "tokens_per_batch", tokens_per_batch
    )
    shuffle_buffer_size = _check_optional_positive(
        "shuffle_buffer_size", shuffle_buffer_size
    )
    for name, value in (
        ("bucket_by_length", bucket_by_length),
        ("pad_to_max_length", pad_to_max_length),
        ("drop_remainder", drop_remainder),
        ("cache", cache),
    ):
        if not isinstance(value, bool):
            raise invalid_argument(name, "a Python bool", value)
    if (batch_size is None) == (tokens_per_batch is None):
        raise ValueError(
            "Received an invalid value for arguments `batch_size` and "
            "`tokens_per_batch`, expected exactly one of them to be set. "
            f"Received: batch_size={batch_size}, "
            f"tokens_per_batch={tokens_per_batch}"
        )
    if max_length is None and (tokens_per_batch or pad_to_max_length):
        wanted = "tokens_per_batch" if tokens_per_batch else "pad_to_max_length"
        raise invalid_argument(
            "max_length",
            f"a positive integer when `{wanted}` is set",
            max_length,
        )
    if seed is not None and (
        isinstance(seed, bool) or not isinstance(seed, int)
    ):
        raise invalid_argument("seed", "an integer or None", seed)
    if bucket_boundaries is not None:
        if (
            not isinstance(bucket_boundaries, (list, tuple))
            or not bucket_boundaries
            or not all(
                isinstance(b, int) and not isinstance(b, bool) and b > 0
                for b in bucket_boundaries
            )
            or any(
                a >= b for a, b in zip(bucket_boundaries, bucket_boundaries[1:])
            )
        ):
            raise invalid_argument(
                "bucket_boundaries",
                "a non-empty, strictly increasing list of positive ints",
                bucket_boundaries,
            )
        if max_length is not None and bucket_boundaries[-1] > max_length:
            raise invalid_argument(
                "bucket_boundaries",
                f"boundaries at most max_length={max_length}",
                bucket_boundaries,
            )
        bucket_boundaries = list(bucket_boundaries)
    return (max_length, batch_size, tokens_per_batch, shuffle_buffer_size,
            bucket_boundaries)


def _batched(dataset, max_length, batch_size, tokens_per_batch,
             bucket_by_length, bucket_boundaries, pad_to_max_length,
             drop_remainder):
    """Encoded pairs -> padded batches (bucketed by length unless
    `bucket_by_length` is False); see `make_batches`."""
    length = max_length if pad_to_max_length else None
    padded_shapes = ([length], [length], [length])
    padding_values = (PAD_ID, PAD_ID, PAD_ID)
    if bucket_by_length:
        boundaries = bucket_boundaries or default_bucket_boundaries(
            max_length or 256
        )
        # The longest length each bucket can hold (the last one is open
        # ended without max_length; it only matters for tokens_per_batch).
        longest = [max(1, b - 1) for b in boundaries]
        longest.append(max_length or boundaries[-1])
        if tokens_per_batch and pad_to_max_length:
            # Every batch is padded to max_length: the budget fills the
            # same number of rows in every bucket.
            sizes = [max(1, tokens_per_batch // longest[-1])] * len(longest)
        elif tokens_per_batch:
            sizes = [max(1, tokens_per_batch // n) for n in longest]
        else:
            sizes = [batch_size] * len(longest)
        dataset = dataset.bucket_by_sequence_length(
            element_length_func=lambda src, tin, lab: tf.maximum(
                tf.size(src), tf.size(tin)
            ),
            bucket_boundaries=boundaries,
            bucket_batch_sizes=sizes,
            padded_shapes=padded_shapes,
            padding_values=padding_values,
            drop_remainder=drop_remainder,
        )
    else:
        size = batch_size or max(1, tokens_per_batch // max_length)
        dataset = dataset.padded_batch(
            size,
            padded_shapes=padded_shapes,
            padding_values=padding_values,
            drop_remainder=drop_remainder,
        )
    if drop_remainder and pad_to_max_length:
        # Every batch is [rows, max_length]; say so in the static shape
        # (bucketing alone leaves the batch dimension unknown).
        shape = [batch_size or max(1, tokens_per_batch // max_length),
                 max_length]
        dataset = dataset.map(
            lambda *xs: tuple(tf.ensure_shape(x, shape) for x in xs)
        )

    return dataset


def make_batches(
    dataset,
    tokenizer,
    source_key="inputs",
    target_key="targets",
    max_length=None,
    batch_size=None,
    tokens_per_batch=None,
    bucket_by_length=True,
    bucket_boundaries=None,
    pad_to_max_length=False,
    shuffle_buffer_size=None,
    seed=None,
    drop_remainder=False,
    cache=False,
):
    """Tokenized, length-filtered, bucketed and padded training batches.

    Args:
        dataset: `tf.data.Dataset` of dicts of `tf.string` scalars (e.g.
            Multi30k's `{'en', 'de'}` or `{'inputs', 'targets'}`) or of
            `(source, target)` string tuples.
        tokenizer: a `SubwordTokenizer`.
        source_key: str. Source field of dict elements. Defaults to
            `'inputs'`.
        target_key: str. Target field of dict elements. Defaults to
            `'targets'`.
        max_length: int or None. Drop pairs whose `source` or `target_in`
            (with eos/bos) is longer. `None` keeps everything. Required for
            `tokens_per_batch` and `pad_to_max_length`. Defaults to `None`.
        batch_size: int or None. Pairs per batch. Give exactly one of
            `batch_size` and `tokens_per_batch`. Defaults to `None`.
        tokens_per_batch: int or None. About this many tokens (batch size x
            padded length, counting the longer of source and target) per
            batch: each bucket's batch size is `tokens_per_batch //` its
            longest length (`// max_length` with `pad_to_max_length`, where
            every batch has that length). Defaults to `None`.
        bucket_by_length: bool. Group similar lengths into batches. Without
            it, batches keep the input order and `tokens_per_batch` gives a
            fixed batch size of `tokens_per_batch // max_length`. Defaults
            to `True`.
        bucket_boundaries: list of int or None. Bucket boundaries (bucket i
            holds lengths in `[b[i-1], b[i])`); `None` uses
            `default_bucket_boundaries(max_length or 256)`. Defaults to
            `None`.
        pad_to_max_length: bool. Pad every batch to `max_length` so all
            batches have the same sequence length (static shapes for XLA
            and TPUs; add `drop_remainder=True` for a static batch size
            too). Defaults to `False`.
        shuffle_buffer_size: int or None. Shuffle tokenized pairs through a
            buffer of this size before bucketing; `None` keeps the input order.
            Defaults to `None`.
        seed: int or None. Shuffle seed; with a seed the order is the same
            on every run (and different, but reproducible, per epoch when
            the result is repeated). Defaults to `None`.
        drop_remainder: bool. Drop a bucket's last, smaller batch. With
            `pad_to_max_length`, the batches then have the static shape
            `[batch_size, max_length]` (`tokens_per_batch // max_length`
            rows for a token budget). Defaults to `False`.
        cache: bool. Keep the tokenized, filtered pairs in memory after the
            first pass, so later epochs (when the result is repeated) skip
            tokenizing; shuffling and batching still run every epoch.
            Defaults to `False`.

    Returns:
        A prefetched `tf.data.Dataset` of `({'source': int32 [B, S],
        'target_in': int32 [B, T]}, labels int32 [B, T])`, padded with 0.

    Raises:
        ValueError: an invalid argument (the message names it), e.g. both or
            neither of `batch_size` and `tokens_per_batch`.
    """
    (max_length, batch_size, tokens_per_batch, shuffle_buffer_size,
     bucket_boundaries) = _checked_arguments(
        dataset, tokenizer, max_length, batch_size, tokens_per_batch,
        bucket_by_length, bucket_boundaries, pad_to_max_length,
        shuffle_buffer_size, seed, drop_remainder, cache)

    pick = _pick_fields(dataset, source_key, target_key)

    def encode(*element):
        source, target = pick(*element)
        return encode_pair(tokenizer, source, target)

    dataset = dataset.map(encode, num_parallel_calls=tf.data.AUTOTUNE)
    if max_length is not None:
        dataset = dataset.filter(
            lambda src, tin, lab: tf.logical_and(
                tf.size(src) <= max_length, tf.size(tin) <= max_length
            )
        )
    if cache:
        dataset = dataset.cache()
    if shuffle_buffer_size:
        dataset = dataset.shuffle(
            shuffle_buffer_size, seed=seed, reshuffle_each_iteration=True
        )

    dataset = _batched(dataset, max_length, batch_size, tokens_per_batch,
                       bucket_by_length, bucket_boundaries,
                       pad_to_max_length, drop_remainder)

    def to_features(src, tin, lab):
        return {"source": src, "target_in": tin}, lab

    dataset = dataset.map(to_features, num_parallel_calls=tf.data.AUTOTUNE)
    return dataset.prefetch(tf.data.AUTOTUNE)
