"""The training step against its matmul floor, at a set's shapes, one process.

- `tfattn step`: `train.py`'s step (`training.build_trainer`: the set's
  model, Adam, the label-smoothed loss; no XLA, as `train.py` runs it by
  default) on a random [rows, length] batch, in the given policy.
- `matmul floor`: only the matmuls of that step, forward and backward (each
  forward X·W has the two backward products dY·Wᵀ and Xᵀ·dY), at the same
  shapes and compute dtype, in one `tf.function`: per encoder block Q, K, V,
  output and the two FFN layers over B·S rows, the heads' scores Q·Kᵀ and
  weights·V; per decoder block the same over B·T rows plus cross-attention
  (Q and output over B·T rows, K and V over B·S, its scores and values);
  the output projection [B·T, C]·[C, V]. No softmax, norms, embeddings,
  dropout, loss or optimizer: no implementation of this model can train
  faster with these matmuls, so `share` = floor time / step time bounds it.
- `square matmul`: one [N, N]·[N, N] product in the same dtype, for what the
  machine's matmuls reach at a friendly size.

`--policies` takes `float32`, `mixed_bfloat16` and `bfloat16_matmuls`, a
prototype measured here only (`matmul_layers_in_bfloat16`): a float32 model
whose projections alone compute in bfloat16, to see what keeping the
element-wise work in float32 would buy on a CPU without AMX. Its floor is
the bfloat16 one.

The three are timed round by round in turn (best of `--rounds` each), so
that the share compares them under the same load. `--hparams_overrides`
changes the set as train.py's flag does; with `rdrop_alpha` > 0 the step
runs every row twice (R-Drop), and so does its floor.

    python bench/training_floor.py                         # multi30k, 128 x 32
    python bench/training_floor.py --hparams=base --rows=64 --length=32
    python bench/training_floor.py --hparams=multi30k_reference --rows=256 \
        --policies=float32,mixed_bfloat16,bfloat16_matmuls
    python bench/training_floor.py --hparams=multi30k_reference --rows=128 \
        --hparams_overrides=rdrop_alpha=1.0
"""

import argparse
import contextlib
import os

import _repo  # noqa: F401  (puts the repository root on sys.path)

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import hparams  # noqa: E402
import keras  # noqa: E402
from tfattn import config  # noqa: E402
from tfattn import training  # noqa: E402
from tfattn.layers import token_embedding  # noqa: E402
from _timing import best_times  # noqa: E402


def step_matmuls(hp, rows, length, vocab):
    """The forward matmuls of one step: (batch, M, K, N) per product."""
    c, f, h, n = hp.num_units, hp.ffn_units, hp.num_heads, hp.num_layers
    d, tokens = c // h, rows * length
    heads = rows * h
    block = [(1, tokens, c, c)] * 4 + [(1, tokens, c, f), (1, tokens, f, c)]
    attention = [(heads, length, d, length), (heads, length, length, d)]
    encoder = block + attention
    decoder = block + attention + [(1, tokens, c, c)] * 4 + attention
    return encoder * n + decoder * n + [(1, tokens, c, vocab)]


def with_backward(products):
    """Each forward (b, M, K, N) with its dX (b, M, N, K) and dW
    (b, K, M, N)."""
    out = []
    for b, m, k, n in products:
        out += [(b, m, k, n), (b, m, n, k), (b, k, m, n)]
    return out


def floor_function(products, dtype):
    rng = np.random.default_rng(0)
    operands = [
        (
            tf.constant(rng.normal(size=(b, m, k)), dtype),
            tf.constant(rng.normal(size=(b, k, n)), dtype),
        )
        for b, m, k, n in products
    ]

    @tf.function
    def floor():
        total = tf.constant(0.0, tf.float32)
        for a, b in operands:
            # A scalar of each product, so that none is pruned.
            total += tf.cast(tf.matmul(a, b)[0, 0, 0], tf.float32)
        return total

    return floor


@contextlib.contextmanager
def matmul_layers_in_bfloat16():
    """A prototype, not a tfattn policy: every `keras.layers.Dense` and the
    token embedding (lookup and tied output projection) built inside runs
    under `mixed_bfloat16`, everything else under float32. Keras casts each
    layer's inputs to its own compute dtype, so the layer norms, softmax,
    dropout, residuals and loss stay float32 and only the projections'
    matmuls (and their bias adds) run in bfloat16. The heads' score and
    value products stay float32."""
    patched = (keras.layers.Dense, token_embedding.TokenEmbedding)
    originals = [cls.__init__ for cls in patched]

    def forcing(original):
        def init(self, *args, **kwargs):
            kwargs["dtype"] = "mixed_bfloat16"
            original(self, *args, **kwargs)
        return init

    for cls, original in zip(patched, originals):
        cls.__init__ = forcing(original)
    try:
        yield
    finally:
        for cls, original in zip(patched, originals):
            cls.__init__ = original


def tfattn_step(hp, rows, length, policy):
    rng = np.random.default_rng(0)
    ids = rng.integers(4, hp.vocab_size, (3, rows, length)).astype("int32")
    ids[1, :, 0] = 2
    batch = ({"source": ids[0], "target_in": ids[1]}, ids[2])
    prototype = policy == "bfloat16_matmuls"
    scope = (matmul_layers_in_bfloat16() if prototype
             else contextlib.nullcontext())
    keras_policy = None if policy == "float32" or prototype else policy
    with scope:
        step = training.build_trainer(
            tf.distribute.get_strategy(),
            hp,
            hp.vocab_size,
            seed=0,
            mixed_precision=keras_policy,
        ).train_step
    iterator = iter(tf.data.Dataset.from_tensors(batch).repeat())
    return lambda: step(iterator)[0]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hparams", default="multi30k")
    parser.add_argument("--rows", type=int, default=128)
    parser.add_argument("--length", type=int, default=32)
    parser.add_argument("--policies", default="float32,mixed_bfloat16")
    parser.add_argument("--square", type=int, default=2048)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--hparams_overrides", default="")
    args = parser.parse_args()
    hp = config.parse_overrides(hparams.get(args.hparams),
                                args.hparams_overrides)
    copies = 2 if hp.rdrop_alpha else 1  # R-Drop: the batch stacked twice.
    products = with_backward(
        step_matmuls(hp, copies * args.rows, args.length, hp.vocab_size)
    )
    flops = sum(2 * b * m * k * n for b, m, k, n in products)
    print(
        f"{args.hparams}: {hp.num_layers}+{hp.num_layers} layers, width "
        f"{hp.num_units}, FFN {hp.ffn_units}, vocabulary {hp.vocab_size}; "
        f"batch {args.rows} x {args.length}"
        f"{' run twice (R-Drop)' if copies == 2 else ''}; "
        f"{len(products)} matmuls, "
        f"{flops / 1e9:.1f} GFLOP per step; best of {args.rounds}"
    )
    print(
        f"{'policy':15} {'tfattn step':>12} {'matmul floor':>13} "
        f"{'share':>6} {'step GFLOP/s':>13} {'square GFLOP/s':>15}"
    )
    for policy in args.policies.split(","):
        dtype = tf.float32 if policy == "float32" else tf.bfloat16
        square = floor_function(
            [(1, args.square, args.square, args.square)], dtype
        )
        timings = best_times(
            {
                "step": tfattn_step(hp, args.rows, args.length, policy),
                "floor": floor_function(products, dtype),
                "square": square,
            },
            args.rounds,
            warmup=2,
        )
        step_s, floor_s, square_s = (t.seconds for t in timings.values())
        print(
            f"{policy:15} {step_s * 1e3:10.1f}ms {floor_s * 1e3:11.1f}ms "
            f"{floor_s / step_s:6.0%} {flops / step_s / 1e9:13.0f} "
            f"{2 * args.square**3 / square_s / 1e9:15.0f}"
        )


if __name__ == "__main__":
    main()
