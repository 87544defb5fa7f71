"""Peak memory of attention forward+backward at long lengths.

TensorFlow's CPU allocator keeps no peak counter (`get_memory_info` is GPU
only), so each configuration runs in a child process of this script and its
peak resident set size (`ru_maxrss`) is read; the same child first measures
its baseline after building the layer, and the figure reported is the
increase over that baseline. All configurations run from this one command.

    python bench/attention_memory.py                       # 8,192 tokens
    python bench/attention_memory.py --lengths 4096,8192
"""

import argparse
import json
import os
import resource
import subprocess
import sys

import _repo  # noqa: F401  (puts the repository root on sys.path)

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def child(which, length, width, heads, causal):
    import keras
    import numpy as np
    import tensorflow as tf

    import tfattn

    x = tf.Variable(
        np.random.default_rng(0)
        .normal(size=(1, length, width))
        .astype("float32")
    )
    if which == "keras":
        layer = keras.layers.MultiHeadAttention(
            num_heads=heads, key_dim=width // heads
        )
        call = lambda: layer(x, x, use_causal_mask=causal)  # noqa: E731
    else:
        chunk = None if which == "tfattn-unchunked" else "auto"
        layer = tfattn.MultiHeadAttention(
            num_heads=heads, causality=causal, query_chunk_size=chunk
        )
        call = lambda: layer(x)  # noqa: E731
    small = tf.Variable(tf.zeros((1, 8, width)))
    layer(small) if which != "keras" else layer(small, small)
    baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(call() ** 2)
    grads = tape.gradient(loss, layer.trainable_variables + [x])
    _ = [g.numpy() for g in grads]
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"peak_mib": (peak - baseline) / 1024}))


def measure(which, length, width, heads, causal):
    out = subprocess.run(
        [
            sys.executable,
            __file__,
            "--child",
            which,
            "--lengths",
            str(length),
            "--width",
            str(width),
            "--heads",
            str(heads),
        ]
        + (["--causal"] if causal else []),
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])["peak_mib"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="8192")
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--child")
    parser.add_argument("--causal", action="store_true")
    args = parser.parse_args()
    if args.child:
        child(
            args.child, int(args.lengths), args.width, args.heads, args.causal
        )
        return
    print(
        f"batch 1, width {args.width}, heads {args.heads}; peak RSS increase "
        "during one forward+backward, MiB"
    )
    print(
        f"{'length':>7} {'mask':7} {'keras':>8} {'tfattn unchunked':>17} "
        f"{'tfattn (auto chunks)':>21} {'keras/tfattn':>13}"
    )
    for length in (int(v) for v in args.lengths.split(",")):
        for causal in (False, True):
            figures = {
                w: measure(w, length, args.width, args.heads, causal)
                for w in ("keras", "tfattn-unchunked", "tfattn")
            }
            print(
                f"{length:7} {'causal' if causal else 'none':7} "
                f"{figures['keras']:8.0f} {figures['tfattn-unchunked']:17.0f} "
                f"{figures['tfattn']:21.0f} "
                f"{figures['keras'] / figures['tfattn']:13.1f}"
            )


if __name__ == "__main__":
    main()
