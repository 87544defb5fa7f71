"""The inputs of `tfattn.training.train`, from a `DatasetSpec`.

- `distributed_batches`: repeated, bucketed training batches, one pipeline
  per worker, each replica's share of the global batch;
- `steps_per_epoch`: global batches in one pass over the training split;
- `validation_pairs`: the validation subset that training scores every
  `eval_every_steps`;
- `sample_lengths`: the rows' lengths in a sample of the training split
  (what the memory estimate and the precision probe size batches by);
- `training_tokenizer`: the tokenizer as the training batches use it
  (sampling segmentations where the hparams ask).
"""

from typing import NamedTuple

import numpy as np

from tfattn.data.masking import masked_lm_batch
from tfattn.data.masking import masker_for
from tfattn.data.pipeline import make_batches
from tfattn.data.sources import load_pairs
from tfattn.data.sources import load_split

__all__ = [
    "LENGTH_SAMPLE_PAIRS",
    "LengthSample",
    "distributed_batches",
    "per_replica_batch",
    "sample_lengths",
    "steps_per_epoch",
    "training_tokenizer",
    "validation_pairs",
]

# Training pairs whose lengths `sample_lengths` reads (the split's first).
LENGTH_SAMPLE_PAIRS = 4096


def distributed_batches(strategy, hp, tokenizer, spec, seed, static_shapes):
    """Repeated, per-replica bucketed batches of the training split.

    Sharding policy: each input pipeline (one per worker) reads every
    `num_input_pipelines`-th pair from its `input_pipeline_id` on (a
    `Dataset.shard` of the records, so workers never share a pair), and
    each replica gets its `per_replica_batch` of the global batch. With
    `hp.tokenizer_sampling_alpha` above 0, every pass over the split
    tokenizes each pair anew with a sampled segmentation (subword
    regularisation; `SubwordTokenizer.sampling`).

    Args:
        strategy: tf.distribute.Strategy. Runs the pipelines and spreads
            the batches over its replicas.
        hp: HParams. Reads `batch_size` or `tokens_per_batch`,
            `max_train_length`, `shuffle_buffer_size` and
            `tokenizer_sampling_alpha`.
        tokenizer: SubwordTokenizer. The run's vocabulary.
        spec: DatasetSpec. The dataset whose training split is read.
        seed: int. Shuffle seed; pipeline i shuffles with
            `seed + 1009 * i`.
        static_shapes: bool. Pad every batch to `hp.max_train_length` and
            drop each bucket's last, smaller batch (static shapes, for XLA).

    Returns:
        A `tf.distribute.DistributedDataset` of
        `({'source', 'target_in'}, labels)` int32 batches (`make_batches`),
        repeated without end; for task "masked_lm", the sentences with
        BERT's blanks (`tfattn.data.masking.masked_lm_batch`).

    Raises:
        ValueError: `hp.batch_size` is not a multiple of the replicas
            (`per_replica_batch`).
    """
    batch_size, tokens = per_replica_batch(hp, strategy.num_replicas_in_sync)
    tokenizer = training_tokenizer(tokenizer, hp)

    def dataset_fn(context):
        pairs = load_split(spec, "train")
        if context.num_input_pipelines > 1:
            pairs = pairs.shard(context.num_input_pipelines,
                                context.input_pipeline_id)
        pipeline_seed = seed + 1009 * context.input_pipeline_id
        batches = make_batches(
            pairs.repeat(), tokenizer, max_length=hp.max_train_length,
            batch_size=batch_size, tokens_per_batch=tokens,
            shuffle_buffer_size=hp.shuffle_buffer_size, seed=pipeline_seed,
            pad_to_max_length=static_shapes, drop_remainder=static_shapes)
        if hp.task != "masked_lm":
            return batches
        masker = masker_for(hp, tokenizer, pipeline_seed, static_shapes)
        return batches.map(
            lambda inputs, labels: masked_lm_batch(inputs, labels, masker))

    return strategy.distribute_datasets_from_function(dataset_fn)


def training_tokenizer(tokenizer, hp):
    """How the training batches tokenize: with `hp.tokenizer_sampling_alpha`
    (`SubwordTokenizer.sampling`) when it is above 0, else `tokenizer`.

    Args:
        tokenizer: SubwordTokenizer. The run's vocabulary.
        hp: HParams. Reads `tokenizer_sampling_alpha`.

    Returns:
        A `SubwordTokenizer`: `tokenizer` itself, or one that samples.
    """
    if hp.tokenizer_sampling_alpha:
        return tokenizer.sampling(hp.tokenizer_sampling_alpha)
    return tokenizer


def validation_pairs(spec, hp):
    """The first `eval_sentences` validation pairs, or a clear error.

    Args:
        spec: DatasetSpec. The dataset whose validation split is read.
        hp: HParams. Reads `eval_sentences` (and `eval_every_steps`, which
            the error messages name).

    Returns:
        A non-empty list of (source, target) str tuples.

    Raises:
        FileNotFoundError: the validation split is missing.
        ValueError: the validation split is malformed or empty.
    """
    try:
        pairs = load_pairs(spec, "validation", limit=hp.eval_sentences)
    except (FileNotFoundError, ValueError) as error:
        raise type(error)(
            f"eval_every_steps={hp.eval_every_steps} scores the validation "
            f"split, which {spec} lacks ({error}); add it, or set "
            "eval_every_steps=0.") from None
    if not pairs:
        raise ValueError(f"eval_every_steps={hp.eval_every_steps} scores the "
                         f"validation split, which is empty in {spec}; set "
                         "eval_every_steps=0.")
    return pairs


def steps_per_epoch(hp, tokenizer, spec):
    """Batches in one pass over the training split (global batches; one
    sample of them where segmentations are sampled).

    Args:
        hp: HParams. Reads `batch_size` or `tokens_per_batch`,
            `max_train_length` and `tokenizer_sampling_alpha`.
        tokenizer: SubwordTokenizer. The run's vocabulary.
        spec: DatasetSpec. The dataset whose training split is counted.

    Returns:
        int, the number of batches.
    """
    batches = make_batches(
        load_split(spec, "train"), training_tokenizer(tokenizer, hp),
        max_length=hp.max_train_length,
        batch_size=hp.batch_size, tokens_per_batch=hp.tokens_per_batch)
    return int(batches.reduce(np.int64(0), lambda n, _: n + 1))


class LengthSample(NamedTuple):
    """Row lengths (max of the source and target ids, eos or bos included)
    of the training pairs that fit `max_train_length`, in a sample.

    Attributes:
        longest: int. The longest row kept.
        mean: float. The rows' mean length.
        pairs: int. The number of pairs kept.
    """

    longest: int
    mean: float
    pairs: int


def sample_lengths(pairs, tokenizer, max_length,
                   count=LENGTH_SAMPLE_PAIRS):
    """The `LengthSample` of the first `count` pairs of `pairs`, tokenized
    as training tokenizes them (`pipeline.encode_pair`: one more id than
    the pieces).

    Pairs longer than `max_length` are left out, as training filters them.

    Args:
        pairs: tf.data.Dataset. Dicts of `"inputs"` and `"targets"`
            `tf.string` scalars (`load_split`).
        tokenizer: SubwordTokenizer. As the batches use it
            (`training_tokenizer`).
        max_length: int. The longest row training keeps.
        count: int. Pairs read from the start of `pairs`. Defaults to
            `LENGTH_SAMPLE_PAIRS`.

    Returns:
        A `LengthSample`; with no pair kept, `longest` and `mean` are
        `max_length` and `pairs` is 0.
    """
    lengths = []
    for batch in pairs.take(count).batch(1024).as_numpy_iterator():
        source = tokenizer.tokenize(batch["inputs"]).row_lengths().numpy()
        target = tokenizer.tokenize(batch["targets"]).row_lengths().numpy()
        lengths.append(np.maximum(source, target) + 1)
    lengths = np.concatenate(lengths) if lengths else np.zeros([0], int)
    kept = lengths[lengths <= max_length]
    if not kept.size:
        return LengthSample(int(max_length), float(max_length), 0)
    return LengthSample(int(kept.max()), float(kept.mean()), int(kept.size))


def per_replica_batch(hp, replicas):
    """Each replica's share of the hparams' global batch.

    Args:
        hp: HParams with `batch_size` (sentences) or `tokens_per_batch`.
        replicas: int. `strategy.num_replicas_in_sync`.

    Returns:
        (batch_size, tokens_per_batch) for one replica; one of them is None.
        A token budget is divided and rounded down, but never below one
        sentence of `max_train_length` tokens.

    Raises:
        ValueError: `batch_size` is not a multiple of `replicas` (the
            replicas would not add up to the global batch).
    """
    if hp.batch_size:
        if hp.batch_size % replicas:
            raise ValueError(
                f"The global batch_size={hp.batch_size} is not divisible by "
                f"the strategy's {replicas} replicas. Choose a multiple of "
                f"{replicas}, e.g. --hparams_overrides=batch_size="
                f"{max(replicas, hp.batch_size // replicas * replicas)}.")
        return hp.batch_size // replicas, None
    return None, max(hp.max_train_length, hp.tokens_per_batch // replicas)
