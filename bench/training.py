"""Training throughput: tfattn.Transformer against the same model from
keras-hub layers.

Both models: the same sizes (layers, width, heads, FFN, vocabulary), separate
source/target embeddings and an untied output layer, post-norm, dropout 0.1,
Adam, the same label-smoothed loss, the same batches, each step a
`tf.function` (optionally XLA). keras-hub's model is built from
`TokenAndPositionEmbedding`, `TransformerEncoder` and `TransformerDecoder`
(its positions are learned, ours the sinusoid). Rounds are interleaved in one
process; the best round of each is reported, in target tokens per second.

    python bench/training.py                         # float32, batch 64 x 32
    python bench/training.py --policies float32,mixed_bfloat16 --jit
    python bench/training.py --tfattn_policy same    # both in --policies

`--tfattn_policy` (default `auto`) gives tfattn the dtype policy that
`train.py --mixed_precision=auto` picks for this model on this machine
(`tfattn.training.precision.choose`, printed with its reason) while keras-hub
keeps
`--policies`: the speed a user of each gets without choosing. `same` runs
tfattn in keras-hub's policy, the like-for-like comparison.
"""

import dataclasses

import argparse
import functools
import os

import _repo  # noqa: F401  (puts the repository root on sys.path)

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
if os.environ["KERAS_BACKEND"] != "tensorflow":
    # train.py's step is a tf.function; `fit` under JAX: bench/gpu.py.
    raise SystemExit(
        "bench/training.py times train.py's TensorFlow step and runs under "
        f"KERAS_BACKEND=tensorflow only (got "
        f"{os.environ['KERAS_BACKEND']!r}); bench/gpu.py times `fit` "
        "against keras-hub under JAX"
    )

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import tfattn  # noqa: E402
from tfattn import losses  # noqa: E402
from _peers import keras_hub_seq2seq  # noqa: E402
from _timing import best_times  # noqa: E402


def keras_hub_model(args):
    return keras_hub_seq2seq(args.vocab, args.length, args.layers,
                             args.units, args.heads)


def tfattn_model(args):
    return tfattn.Transformer(
        args.vocab,
        target_vocab_size=args.vocab,
        num_layers=args.layers,
        num_units=args.units,
        num_heads=args.heads,
        ffn_units=4 * args.units,
        dropout_rate=0.1,
        share_embeddings=False,
        tie_output=False,
        max_length=args.length,
    )


def make_step(model, optimizer, jit):
    @tf.function(jit_compile=jit)
    def step(inputs, labels):
        with tf.GradientTape() as tape:
            logits = model(inputs, training=True)
            loss = losses.smoothed_cross_entropy(labels, logits)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    return step


def batches(args, count):
    rng = np.random.default_rng(0)
    out = []
    for _ in range(count):
        ids = rng.integers(
            4, args.vocab, size=(3, args.batch, args.length)
        ).astype("int32")
        out.append(({"source": ids[0], "target_in": ids[1]}, ids[2]))
    return out


def auto_policy(args):
    """(policy, reason) that `train.py --mixed_precision=auto` takes here."""
    from hparams import base

    from tfattn.training import precision

    hp = dataclasses.replace(
        base.HPARAMS,
        num_layers=args.layers,
        num_units=args.units,
        num_heads=args.heads,
        ffn_units=4 * args.units,
        vocab_size=args.vocab,
        max_length=args.length,
        max_train_length=args.length,
        share_embeddings=False,
        tie_output=False,
        batch_size=args.batch,
        tokens_per_batch=None,
    )
    choice = precision.choose(hp, args.vocab, args.length)
    return choice.name, choice.reason


def run(args, policy):
    data = batches(args, args.steps)
    steps = {}
    params = {}
    for name, build in (
        ("tfattn", tfattn_model),
        ("keras-hub", keras_hub_model),
    ):
        keras.config.set_dtype_policy(
            args.tfattn_policy
            if name == "tfattn" and args.tfattn_policy
            else policy
        )
        model = build(args)
        model(data[0][0])
        params[name] = model.count_params()
        steps[name] = make_step(model, keras.optimizers.Adam(1e-4), args.jit)
        steps[name](*data[0])  # compile
    timings = best_times(
        {
            name: functools.partial(run_steps, step, data)
            for name, step in steps.items()
        },
        args.rounds,
        warmup=0,  # compiled above
    )
    keras.config.set_dtype_policy("float32")
    tokens = args.steps * args.batch * args.length
    return {name: tokens / t.seconds for name, t in timings.items()}, params


def run_steps(step, data):
    """`step` over every batch of `data`; the last loss."""
    for inputs, labels in data:
        loss = step(inputs, labels)
    return loss


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--length", type=int, default=32)
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--units", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--policies", default="float32")
    parser.add_argument(
        "--tfattn_policy",
        default="auto",
        help="tfattn's dtype policy: auto (train.py's "
        "choice here), same (keras-hub's) or a policy name",
    )
    parser.add_argument("--jit", action="store_true")
    args = parser.parse_args()
    print(
        f"batch {args.batch} x {args.length}, {args.layers}+{args.layers} "
        f"layers, width "
        f"{args.units}, vocab {args.vocab}; XLA {args.jit}; best of "
        f"{args.rounds} "
        f"rounds x {args.steps} steps"
    )
    if args.tfattn_policy == "same":
        args.tfattn_policy = None
    elif args.tfattn_policy == "auto":
        args.tfattn_policy, reason = auto_policy(args)
        print(f"tfattn policy: {args.tfattn_policy} (auto: {reason})")
    for policy in args.policies.split(","):
        speed, params = run(args, policy)
        label = (
            policy
            if args.tfattn_policy in (None, policy)
            else f"{args.tfattn_policy} vs {policy}"
        )
        print(
            f"{label:15} tfattn {speed['tfattn']:7.0f} tok/s "
            f"({params['tfattn'] / 1e6:.1f}M)"
            f"  keras-hub {speed['keras-hub']:7.0f} tok/s "
            f"({params['keras-hub'] / 1e6:.1f}M)"
            f"  ratio {speed['tfattn'] / speed['keras-hub']:.2f}"
        )


if __name__ == "__main__":
    main()
