"""Training-step speed under mixed precision and XLA, against float32.

Times the step `train.py` runs (`tfattn.training.build_trainer`: Adam, the
Noam schedule, the label-smoothed loss over the global token count, loss
scaling under mixed_float16), for one model per mode: float32,
mixed_bfloat16, mixed_float16, and each of float32 and mixed_bfloat16 with
`jit_compile=True`. All modes live in one
process and run round by round on the same batches; the best round of each
is reported as target tokens per second and as a ratio to float32.

    python bench/training_modes.py                 # 3+3 layers, width 256
    python bench/training_modes.py --rounds 5 --steps 10
"""

import argparse
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
from _timing import best_times  # noqa: E402
from _timing import run_train_steps  # noqa: E402

MODES = {
    "float32": (None, False),
    "mixed_bfloat16": ("mixed_bfloat16", False),
    "mixed_float16": ("mixed_float16", False),
    "float32 + XLA": (None, True),
    "mixed_bfloat16 + XLA": ("mixed_bfloat16", True),
}


def make_batches(args, count):
    """`count` batches of random ids with padded tails (real lengths)."""
    rng = np.random.default_rng(0)
    batches = []
    for _ in range(count):
        ids = rng.integers(4, args.vocab, (3, args.batch, args.length))
        lengths = rng.integers(
            args.length // 2, args.length + 1, (2, args.batch, 1)
        )
        positions = np.arange(args.length)
        source = np.where(positions < lengths[0], ids[0], 0)
        target = np.where(positions < lengths[1], ids[1], 0)
        target[:, 0] = 2  # BOS
        labels = np.where(positions < lengths[1], ids[2], 0)
        batches.append(
            (
                {
                    "source": source.astype("int32"),
                    "target_in": target.astype("int32"),
                },
                labels.astype("int32"),
            )
        )
    return batches


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--length", type=int, default=32)
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--units", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--modes", default=",".join(MODES))
    args = parser.parse_args()

    hp = config.parse_overrides(
        hparams.get("base"),
        f"num_layers={args.layers},num_units={args.units},"
        f"num_heads={args.heads},ffn_units={4 * args.units},"
        f"max_length={max(args.length, 64)},max_train_length={args.length},"
        f"vocab_size={args.vocab}",
    )
    batches = make_batches(args, args.steps)
    strategy = tf.distribute.get_strategy()
    steps = {}
    params = None
    for name in args.modes.split(","):
        mixed_precision, jit = MODES[name]
        keras.utils.set_random_seed(0)
        model, _, _, step = training.build_trainer(
            strategy,
            hp,
            args.vocab,
            seed=0,
            mixed_precision=mixed_precision,
            jit_compile=jit,
        )
        params = params or model.count_params()
        iterator = iter(
            tf.data.Dataset.from_tensor_slices(
                tf.nest.map_structure(lambda *x: np.stack(x), *batches)
            ).repeat()
        )
        for _ in range(2):  # Trace (and compile) first.
            step(iterator)
        steps[name] = (step, iterator)

    print(
        f"{params / 1e6:.1f}M parameters, {args.layers}+{args.layers} "
        f"layers, width {args.units}, batch {args.batch} x {args.length}, "
        f"vocabulary {args.vocab}; best of {args.rounds} rounds x "
        f"{args.steps} steps"
    )
    timings = best_times(
        {
            name: functools.partial(run_train_steps, step, iterator, args.steps)
            for name, (step, iterator) in steps.items()
        },
        args.rounds,
        warmup=0,  # traced above
    )
    best = {name: t.seconds for name, t in timings.items()}
    tokens = {name: t.output[0] for name, t in timings.items()}
    for name, t in timings.items():
        if not np.isfinite(t.output[1]):
            raise RuntimeError(f"{name}: non-finite loss {t.output[1]}")
    base = tokens["float32"] / best["float32"] if "float32" in best else None
    print(f"{'mode':22} {'ms/step':>8} {'tokens/s':>9} {'vs float32':>10}")
    for name, seconds in best.items():
        speed = tokens[name] / seconds
        ratio = f"{speed / base:.2f}x" if base else "-"
        print(
            f"{name:22} {1000 * seconds / args.steps:8.0f} {speed:9.0f} "
            f"{ratio:>10}"
        )


if __name__ == "__main__":
    main()
