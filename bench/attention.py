"""Attention forward+backward time: tfattn against
keras.layers.MultiHeadAttention.

Everything runs in one process on the same inputs, interleaved round by round
so that drift in the machine's speed hits both sides alike. It also measures
a plain matmul of the same FLOP count as a ceiling. Both layers run on the
process's Keras backend; `--backends=tensorflow,jax` runs the comparison
once per backend (a process each).

    python bench/attention.py                  # float32 and bfloat16, T=256
    python bench/attention.py --length 512 --rounds 5
    python bench/attention.py --backends=tensorflow,jax
"""

import argparse
import os

import _repo  # noqa: F401  (puts the repository root on sys.path)

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

import _backend  # noqa: E402
import tfattn  # noqa: E402
from _timing import best_times  # noqa: E402


def attention_flops(batch, length, width):
    """Forward FLOPs of self-attention (projections + scores + A·V + output)."""
    projections = 4 * 2 * batch * length * width * width
    core = 2 * 2 * batch * length * length * width
    return projections + core


def run(batch, length, width, heads, dtype, causal, repeats, rounds):
    keras.config.set_dtype_policy(
        "float32" if dtype == "float32" else "mixed_bfloat16"
    )
    rng = np.random.default_rng(0)
    x = _backend.variable(
        rng.normal(size=(batch, length, width)).astype("float32"))
    ours = tfattn.MultiHeadAttention(num_heads=heads, causality=causal)
    theirs = keras.layers.MultiHeadAttention(
        num_heads=heads, key_dim=width // heads
    )
    ours(x), theirs(x, x)
    steps = {
        "tfattn": _backend.loss_and_grad_step(
            ours, lambda layer, v: layer(v), x),
        "keras": _backend.loss_and_grad_step(
            theirs, lambda layer, v: layer(v, v, use_causal_mask=causal), x),
    }
    matmul = _backend.matmul_step(
        width * 4, "float32" if dtype == "float32" else "bfloat16")
    # The steps return their gradients too (or the graph would prune
    # them); only the loss is fetched.
    losses = {
        name: (lambda step=step: step()[0]) for name, step in steps.items()
    }
    timings = best_times(
        {**losses, "matmul": matmul}, rounds, repeats=repeats, warmup=2
    )
    keras.config.set_dtype_policy("float32")
    best = {name: timings[name].seconds for name in steps}
    flops = 3 * attention_flops(batch, length, width)  # forward + backward
    peak = 2 * (width * 4) ** 3 / timings["matmul"].seconds
    return best, flops, peak


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument(
        "--backends", default="",
        help="comma list of Keras backends to run the bench under, a "
        "process each (default: this process's, KERAS_BACKEND)")
    args = parser.parse_args()
    if _backend.run_per_backend(args.backends):
        return
    print(
        f"backend {_backend.backend()}; batch {args.batch}, "
        f"length {args.length}, width {args.width}, "
        f"heads {args.heads}; best of {args.rounds} rounds x {args.repeats} "
        f"calls"
    )
    print(
        f"{'dtype':9} {'mask':7} {'tfattn ms':>10} {'keras ms':>9} "
        f"{'keras/tfattn':>12} {'tfattn % of matmul':>19} {'keras %':>8}"
    )
    for dtype in args.dtypes.split(","):
        for causal in (False, True):
            best, flops, peak = run(
                args.batch,
                args.length,
                args.width,
                args.heads,
                dtype,
                causal,
                args.repeats,
                args.rounds,
            )
            ours, theirs = best["tfattn"], best["keras"]
            print(
                f"{dtype:9} {'causal' if causal else 'none':7} "
                f"{ours * 1e3:10.1f} "
                f"{theirs * 1e3:9.1f} {theirs / ours:12.2f} "
                f"{100 * flops / ours / peak:18.0f}% "
                f"{100 * flops / theirs / peak:7.0f}%"
            )


if __name__ == "__main__":
    main()
