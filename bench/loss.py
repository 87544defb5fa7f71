"""Label-smoothed cross-entropy, forward + backward: tfattn against Keras
and a gather.

Four ways to the same number and gradient, in one process on the same
logits [batch, length, vocabulary] and labels (with padding):

- `tfattn`: `tfattn.losses.smoothed_cross_entropy_sum`, whose gradient,
  softmax(z) - y_s, is written out (`tf.custom_gradient`);
- `logsumexp`: the same written-out gradient from `reduce_logsumexp`, with
  the softmax recomputed in the backward pass, as tfattn did before issue 23;
- `gather`: the same closed form differentiated by TensorFlow, as tfattn did
  before issue 16 (the label gather's gradient scatters into a dense
  [B, T, V] zero tensor: `UnsortedSegmentSum`);
- `keras`: `keras.losses.CategoricalCrossentropy(from_logits=True,
  label_smoothing=ε)` on one-hot labels with the pads weighted out, what a
  Keras user writes.

    python bench/loss.py                       # [64, 32, 8000]
    python bench/loss.py --vocab 32000 --batch 16
    python bench/loss.py --jit                 # each under XLA
    python bench/loss.py --batch 128 --dtype bfloat16   # multi30k's step
"""

import argparse
import os

import _repo  # noqa: F401  (puts the repository root on sys.path)

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from tfattn import losses  # noqa: E402
from _timing import best_times  # noqa: E402

EPSILON = 0.1


def gather_loss(labels, logits):
    logits = tf.cast(logits, tf.float32)  # as tfattn's loss computes
    keep = tf.cast(labels != 0, tf.float32)
    label_logit = tf.gather(logits, labels, batch_dims=2)
    ce = (
        tf.reduce_logsumexp(logits, -1)
        - (1 - EPSILON) * label_logit
        - EPSILON * tf.reduce_mean(logits, -1)
    )
    return tf.reduce_sum(ce * keep), tf.reduce_sum(keep)


def logsumexp_loss(labels, logits):
    logits = tf.cast(logits, tf.float32)
    keep = tf.cast(labels != 0, tf.float32)
    vocab = logits.shape[-1]
    off_value = EPSILON / vocab
    on_value = 1.0 - EPSILON + off_value

    @tf.custom_gradient
    def per_token(logits):
        log_z = tf.reduce_logsumexp(logits, axis=-1)
        label_logit = tf.gather(logits, labels, batch_dims=2)
        ce = (
            log_z
            - (1.0 - EPSILON) * label_logit
            - EPSILON * tf.reduce_mean(logits, axis=-1)
        )

        def gradient(upstream):
            smoothed = tf.one_hot(labels, vocab, on_value, off_value)
            softmax = tf.exp(logits - log_z[..., None])
            return upstream[..., None] * (softmax - smoothed)

        return ce, gradient

    return tf.reduce_sum(per_token(logits) * keep), tf.reduce_sum(keep)


def keras_loss(labels, logits):
    logits = tf.cast(logits, tf.float32)
    keep = tf.cast(labels != 0, tf.float32)
    loss = keras.losses.CategoricalCrossentropy(
        from_logits=True, label_smoothing=EPSILON, reduction="sum"
    )
    one_hot = tf.one_hot(labels, logits.shape[-1])
    return loss(one_hot, logits, sample_weight=keep), tf.reduce_sum(keep)


def tfattn_loss(labels, logits):
    return losses.smoothed_cross_entropy_sum(labels, logits, epsilon=EPSILON)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--length", type=int, default=32)
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--jit", action="store_true")
    parser.add_argument(
        "--dtype",
        default="float32",
        choices=["float32", "bfloat16"],
        help="the logits' dtype (bfloat16: a mixed_bfloat16 model's)",
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    logits = tf.constant(
        rng.normal(size=(args.batch, args.length, args.vocab)), args.dtype
    )
    labels = rng.integers(4, args.vocab, size=(args.batch, args.length))
    labels[:, -args.length // 4 :] = 0  # a quarter padding
    labels = tf.constant(labels, tf.int32)

    def step_of(loss_fn):
        @tf.function(jit_compile=args.jit)
        def step():
            with tf.GradientTape() as tape:
                tape.watch(logits)
                total, count = loss_fn(labels, logits)
                loss = total / count
            return loss, tape.gradient(loss, logits)

        return step

    steps = {
        "tfattn": step_of(tfattn_loss),
        "logsumexp": step_of(logsumexp_loss),
        "gather": step_of(gather_loss),
        "keras": step_of(keras_loss),
    }
    want_loss, want_grad = steps["gather"]()
    want_grad = np.asarray(tf.cast(want_grad, tf.float32))
    # bfloat16 gradients carry 8 significant bits.
    atol = 1e-6 if args.dtype == "float32" else 1e-2 * np.abs(want_grad).max()
    for name, step in steps.items():
        loss, grad = step()
        np.testing.assert_allclose(float(loss), float(want_loss), rtol=1e-5)
        np.testing.assert_allclose(
            np.asarray(tf.cast(grad, tf.float32)), want_grad, atol=atol
        )
    timings = best_times(
        {name: (lambda step=step: step()[0]) for name, step in steps.items()},
        args.rounds,
        repeats=args.repeats,
        warmup=0,  # the checks above traced them
    )
    best = {name: t.seconds for name, t in timings.items()}
    print(
        f"logits [{args.batch}, {args.length}, {args.vocab}] {args.dtype}, "
        f"forward "
        f"+ "
        f"backward, XLA {args.jit}; best of {args.rounds} rounds x "
        f"{args.repeats}; all four "
        f"agree (loss 1e-5, gradient {atol:.0e})"
    )
    for name, seconds in best.items():
        print(
            f"{name:9} {seconds * 1e3:7.1f} ms   "
            f"{best[name] / best['tfattn']:.2f}x tfattn's time"
        )


if __name__ == "__main__":
    main()
