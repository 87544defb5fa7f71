"""Dropout, forward + backward: tfattn's 16-bit draw against Keras's layer.

Both layers in one process on the same [rows, units] input (the multi30k
set's 4,096 tokens x 128 by default), in float32 and bfloat16, training
mode, inside one `tf.function` each; best of `--rounds` rounds of
`--repeats` calls. Also prints the rate each layer applied (the kept
fraction), which for Keras's bfloat16 layer is 89/128 at rate 0.3.

    python bench/dropout.py
    python bench/dropout.py --rate 0.1 --rows 8192
"""

import argparse
import os

import _repo  # noqa: F401  (puts the repository root on sys.path)

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from tfattn.layers import Dropout  # noqa: E402
from _timing import best_times  # noqa: E402


def step_of(layer, x):
    @tf.function
    def step():
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x, training=True)
            loss = tf.reduce_sum(tf.cast(y, tf.float32))
        grad = tape.gradient(loss, x)
        kept = tf.reduce_mean(tf.cast(y != 0, tf.float32))
        return kept, grad[0, 0]

    return step


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--units", type=int, default=128)
    parser.add_argument("--rate", type=float, default=0.3)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    print(
        f"dropout at rate {args.rate} on [{args.rows}, {args.units}], forward "
        f"+ backward; best of {args.rounds} rounds x {args.repeats}"
    )
    print(f"{'dtype':9} {'layer':7} {'ms':>7} {'x tfattn':>9} {'kept':>8}")
    for dtype in ("float32", "bfloat16"):
        x = tf.random.normal([args.rows, args.units], dtype=dtype)
        steps = {
            "tfattn": step_of(Dropout(args.rate, seed=1, dtype=dtype), x),
            "keras": step_of(
                keras.layers.Dropout(args.rate, seed=1, dtype=dtype), x
            ),
        }
        kept = {name: float(step()[0]) for name, step in steps.items()}
        timings = best_times(
            {
                name: (lambda step=step: step()[1])
                for name, step in steps.items()
            },
            args.rounds,
            repeats=args.repeats,
            warmup=0,  # `kept` traced them
        )
        best = {name: t.seconds for name, t in timings.items()}
        for name in steps:
            print(
                f"{dtype:9} {name:7} {best[name] * 1e3:7.2f} "
                f"{best[name] / best['tfattn']:9.2f} {kept[name]:8.4f}"
            )


if __name__ == "__main__":
    main()
