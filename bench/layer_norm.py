"""Layer norm, forward + backward: tfattn's written-out gradient against
Keras's layer.

Both layers in one process on the same [rows, units] input (the multi30k
set's 4,096 tokens x 128 by default) with the same gamma and beta, in
float32 and bfloat16 (`mixed_bfloat16`: bfloat16 in and out, float32
inside), inside one `tf.function` each; best of `--rounds` rounds of
`--repeats` calls. Checks first that the two agree.

    python bench/layer_norm.py
    python bench/layer_norm.py --rows 8192 --units 512
"""

import argparse
import os

import _repo  # noqa: F401  (puts the repository root on sys.path)

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from tfattn.layers import LayerNormalization  # noqa: E402
from _timing import best_times  # noqa: E402


def step_of(layer, x, upstream):
    @tf.function
    def step():
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x)
        grads = tape.gradient(y, [x] + layer.trainable_weights, upstream)
        return [tf.cast(t, tf.float32) for t in [y] + grads]

    return step


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--units", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    print(
        f"layer norm on [{args.rows}, {args.units}], forward + backward; "
        f"best of {args.rounds} rounds x {args.repeats}"
    )
    print(f"{'dtype':9} {'layer':7} {'ms':>7} {'x tfattn':>9}")
    rng = np.random.default_rng(0)
    shape = (args.rows, args.units)
    for policy in ("float32", "mixed_bfloat16"):
        dtype = keras.mixed_precision.DTypePolicy(policy).compute_dtype
        x = tf.constant(rng.normal(size=shape) * 2 + 1, dtype)
        upstream = tf.constant(rng.normal(size=shape), dtype)
        layers = {
            "tfattn": LayerNormalization(dtype=policy),
            "keras": keras.layers.LayerNormalization(dtype=policy),
        }
        gamma = rng.normal(size=args.units) + 1
        beta = rng.normal(size=args.units)
        for layer in layers.values():
            layer.build(shape)
            layer.gamma.assign(gamma)
            layer.beta.assign(beta)
        steps = {
            name: step_of(layer, x, upstream)
            for name, layer in layers.items()
        }
        ours, theirs = steps["tfattn"](), steps["keras"]()
        for a, b in zip(ours, theirs):
            scale = float(tf.reduce_max(tf.abs(b)))
            # bfloat16: 8 significant bits.
            atol = (1e-4 if dtype == "float32" else 2**-7) * scale
            np.testing.assert_allclose(a.numpy(), b.numpy(), atol=atol)
        timings = best_times(
            {
                name: (lambda step=step: step()[1][0, 0])
                for name, step in steps.items()
            },
            args.rounds,
            repeats=args.repeats,
            warmup=0,  # the check above traced them
        )
        best = {name: t.seconds for name, t in timings.items()}
        for name in steps:
            print(
                f"{dtype:9} {name:7} {best[name] * 1e3:7.2f} "
                f"{best[name] / best['tfattn']:9.2f}"
            )


if __name__ == "__main__":
    main()
