"""Padding share and training speed of two Multi30k settings, in one process.

For each setting (an hparams set with overrides) this reads the real
Multi30k training batches that `train.py` feeds (`tfattn.data.make_batches`
with the set's `tokens_per_batch`, bucketing and length filter, the
vocabulary `spm.model` of a trained `--model_dir`), and reports:

- pairs, target tokens and padded target slots per batch, and the share of
  padding in the source and target tensors, over `--batches` batches;
- the training step's target tokens per second (`training.build_trainer`,
  the step `train.py` runs) over the same batches, round by round,
  interleaving the settings and keeping each one's best round.

    python bench/multi30k_batches.py --model_dir=runs/m30k \\
        --manual_dir=../shared/data/multi30k/raw --data_dir=runs/tfds \\
        --before="tokens_per_batch=4096" --after=""
"""

import argparse
import collections
import functools
import os

import _repo  # noqa: F401  (puts the repository root on sys.path)

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import hparams  # noqa: E402
from tfattn import config  # noqa: E402
from tfattn import training  # noqa: E402
from tfattn.data import SubwordTokenizer  # noqa: E402
from tfattn.data import make_batches  # noqa: E402
from tfattn.data import sources  # noqa: E402
from _timing import best_times  # noqa: E402
from _timing import run_train_steps  # noqa: E402


def batches_of(hp, tokenizer, spec, count):
    dataset = make_batches(
        sources.load_split(spec, "train").repeat(),
        tokenizer,
        max_length=hp.max_train_length,
        batch_size=hp.batch_size,
        tokens_per_batch=hp.tokens_per_batch,
        shuffle_buffer_size=hp.shuffle_buffer_size,
        seed=0,
    )
    return [batch for batch in dataset.take(count).as_numpy_iterator()]


def padding(batches):
    stats = dict(
        pairs=[],
        target_tokens=[],
        target_slots=[],
        source_tokens=[],
        source_slots=[],
    )
    for features, labels in batches:
        stats["pairs"].append(labels.shape[0])
        stats["target_tokens"].append(int((labels != 0).sum()))
        stats["target_slots"].append(labels.size)
        stats["source_tokens"].append(int((features["source"] != 0).sum()))
        stats["source_slots"].append(features["source"].size)
    return {k: float(np.mean(v)) for k, v in stats.items()}


# One setting, traced and ready to time: its overrides string, padding()
# of its batches, its trainer and the endless iterator its steps read.
Setting = collections.namedtuple(
    "Setting", ["overrides", "stats", "trainer", "iterator"]
)


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model_dir",
        required=True,
        help="a trained run's folder (its spm.model)",
    )
    parser.add_argument("--manual_dir", required=True)
    parser.add_argument("--data_dir", default=None)
    parser.add_argument("--hparams", default="multi30k")
    parser.add_argument(
        "--before",
        default="tokens_per_batch=4096",
        help="overrides of the first setting",
    )
    parser.add_argument(
        "--after", default="", help="overrides of the second setting"
    )
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    return parser.parse_args()


def repeating_iterator(batches):
    """An endless iterator over `batches`, NumPy (features, labels) pairs,
    through tf.data, as `train_step` reads its batches."""
    return iter(
        tf.data.Dataset.from_generator(
            lambda b=batches: iter(b),
            output_signature=tf.nest.map_structure(
                lambda x: tf.TensorSpec([None] * x.ndim, tf.as_dtype(x.dtype)),
                batches[0],
            ),
        ).repeat()
    )


def traced_setting(overrides, hp, batches, vocab_size, steps):
    """The Setting of `hp` (parsed from `overrides`): a trainer (seed 0)
    whose step is traced on the first `steps` of `batches`, which its
    iterator repeats."""
    keras.utils.set_random_seed(0)
    trainer = training.build_trainer(
        tf.distribute.get_strategy(), hp, vocab_size, seed=0
    )
    iterator = repeating_iterator(batches[:steps])
    for _ in range(2):  # Trace first.
        trainer.train_step(iterator)
    return Setting(overrides, padding(batches), trainer, iterator)


def prepare_settings(args):
    """{"before": Setting, "after": Setting}, each over `--batches` real
    Multi30k training batches."""
    spec = sources.parse_dataset_spec(
        "multi30k", data_dir=args.data_dir, manual_dir=args.manual_dir
    )
    with open(os.path.join(args.model_dir, "spm.model"), "rb") as f:
        tokenizer = SubwordTokenizer(f.read())
    base = hparams.get(args.hparams)
    setups = [
        (name, overrides, config.parse_overrides(base, overrides))
        for name, overrides in (("before", args.before), ("after", args.after))
    ]
    # Every batch first: reseeding (below) clears the eager kernel cache,
    # which deletes the tokenizer's SentencePiece resource (docs/traps.md item
    # 10).
    read = {
        name: batches_of(hp, tokenizer, spec, args.batches)
        for name, _, hp in setups
    }
    return {
        name: traced_setting(
            overrides, hp, read[name], tokenizer.vocab_size, args.steps
        )
        for name, overrides, hp in setups
    }


def report(args, settings, timings):
    """Prints each setting's padding and training speed from `timings`
    ({name: Timing(seconds, (target tokens, loss))}) and the speed ratio."""
    best = {name: t.seconds for name, t in timings.items()}
    tokens = {name: t.output[0] for name, t in timings.items()}
    print(
        f"{args.batches} batches; best of {args.rounds} rounds x "
        f"{args.steps} steps"
    )
    print(
        f"{'setting':8} {'overrides':28} {'pairs':>6} {'tgt tok':>8} "
        f"{'src pad':>8} {'tgt pad':>8} {'ms/step':>8} {'tok/s':>7}"
    )
    for name, setting in settings.items():
        stats = setting.stats
        speed = tokens[name] / best[name]
        print(
            f"{name:8} {setting.overrides or '(the set)':28} "
            f"{stats['pairs']:6.0f} "
            f"{stats['target_tokens']:8.0f} "
            f"{1 - stats['source_tokens'] / stats['source_slots']:8.1%} "
            f"{1 - stats['target_tokens'] / stats['target_slots']:8.1%} "
            f"{1000 * best[name] / args.steps:8.0f} {speed:7.0f}"
        )
    ratio = (tokens["after"] / best["after"]) / (
        tokens["before"] / best["before"]
    )
    print(f"after / before tokens/s: {ratio:.2f}")


def main():
    args = parse_args()
    settings = prepare_settings(args)
    timings = best_times(
        {
            name: functools.partial(
                run_train_steps,
                setting.trainer.train_step,
                setting.iterator,
                args.steps,
            )
            for name, setting in settings.items()
        },
        args.rounds,
        warmup=0,  # traced in traced_setting
    )
    report(args, settings, timings)


if __name__ == "__main__":
    main()
