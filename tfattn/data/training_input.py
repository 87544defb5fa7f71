"""The inputs of `tfattn.training.train`, from a `DatasetSpec`.

- `distributed_batches`: repeated, bucketed training batches, one pipeline
  per worker, each replica's share of the global batch;
- `steps_per_epoch`: global batches in one pass over the training split;
- `validation_pairs`: the validation subset that training scores every
  `eval_every_steps`.
"""

import numpy as np

from tfattn.data.pipeline import make_batches
from tfattn.data.sources import load_pairs
from tfattn.data.sources import load_split
from tfattn.distribute import per_replica_batch



def distributed_batches(strategy, hp, tokenizer, spec, seed, static_shapes):
    """Repeated, per-replica bucketed batches of the training split.

    Sharding policy: each input pipeline (one per worker) reads every
    `num_input_pipelines`-th pair from its `input_pipeline_id` on (a
    `Dataset.shard` of the records, so workers never share a pair), and
    each replica gets its `per_replica_batch` of the global batch.
    """
    batch_size, tokens = per_replica_batch(hp, strategy.num_replicas_in_sync)

    def dataset_fn(context):
        pairs = load_split(spec, "train")
        if context.num_input_pipelines > 1:
            pairs = pairs.shard(context.num_input_pipelines,
                                context.input_pipeline_id)
        return make_batches(
            pairs.repeat(), tokenizer, max_length=hp.max_train_length,
            batch_size=batch_size, tokens_per_batch=tokens,
            shuffle_buffer_size=hp.shuffle_buffer_size,
            seed=seed + 1009 * context.input_pipeline_id,
            pad_to_max_length=static_shapes, drop_remainder=static_shapes)

    return strategy.distribute_datasets_from_function(dataset_fn)


def validation_pairs(spec, hp):
    """The first `eval_sentences` validation pairs, or a clear error."""
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
    """Batches in one pass over the training split (global batches)."""
    batches = make_batches(
        load_split(spec, "train"), tokenizer, max_length=hp.max_train_length,
        batch_size=hp.batch_size, tokens_per_batch=hp.tokens_per_batch)
    return int(batches.reduce(np.int64(0), lambda n, _: n + 1))
