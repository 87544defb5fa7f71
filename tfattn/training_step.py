"""The training step: the model and optimizer in a strategy's scope, and
the distributed `train_step` over them (what `training.train` runs, what
`tfattn.precision` times and what the bench scripts measure).

Every replica divides its summed loss by the *global* number of non-padding
target tokens (an all-reduce of the label counts), and the optimizer sums
the replicas' gradients, so N replicas compute exactly the gradient of one
device holding the whole batch.
"""

from typing import NamedTuple

import keras
import tensorflow as tf

from tfattn import losses
from tfattn.data.tokenizer import PAD_ID
from tfattn.models import Transformer
from tfattn.optimization import build_optimizer
from tfattn.run_dir import build_model


class Trainer(NamedTuple):
    """What `build_trainer` returns."""

    model: Transformer
    optimizer: keras.optimizers.Optimizer
    step: tf.Variable
    train_step: object


def build_trainer(strategy, hp, vocab_size, seed=None, mixed_precision=None,
                  jit_compile=False, total_steps=None):
    """The model, optimizer and step counter in `strategy`'s scope, and the
    distributed `train_step` over them (`make_train_step`). `total_steps`
    ends the cosine schedule (default `hp.train_steps`).

    Returns:
        A `Trainer(model, optimizer, step, train_step)`.
    """
    with strategy.scope():
        model = build_model(hp, vocab_size, seed, mixed_precision)
        optimizer = build_optimizer(hp, model, mixed_precision, total_steps)
        step = tf.Variable(
            0, dtype=tf.int64, trainable=False, name="step",
            aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
    return Trainer(model, optimizer, step, make_train_step(
        strategy, model, optimizer, step, hp, mixed_precision, jit_compile))


def make_train_step(strategy, model, optimizer, step, hp, mixed_precision,
                     jit_compile):
    """The distributed training step: `train_step(iterator, stop=None)`.

    `stop` is a float scalar tensor, > 0 where this worker was asked to
    stop. Returns the global mean loss, the global number of target tokens,
    the number of them predicted correctly (the label's logit the largest:
    `losses.smoothed_cross_entropy_sums`) and the sum of the
    workers' `stop` values, as scalars: one all-reduce of the four.
    """
    loss_scaling = mixed_precision == "mixed_float16"
    variables = model.trainable_variables

    def forward_backward(inputs, labels, global_tokens):
        with tf.GradientTape() as tape:
            logits = model(inputs, training=True)
            sums = losses.smoothed_cross_entropy_sums(
                labels, logits, epsilon=hp.label_smoothing, pad_id=PAD_ID)
            # This replica's share of the global mean: replicas' gradients
            # are summed, giving the gradient of the mean over all tokens.
            loss = sums.loss / (global_tokens + hp.loss_denominator_epsilon)
            scaled = optimizer.scale_loss(loss) if loss_scaling else loss
        grads = tape.gradient(scaled, variables)
        return loss, grads, sums.correct

    if jit_compile:
        forward_backward = tf.function(forward_backward, jit_compile=True)

    def replica_step(inputs, labels, stop):
        context = tf.distribute.get_replica_context()
        tokens = tf.reduce_sum(tf.cast(
            tf.not_equal(labels, PAD_ID), tf.float32))
        global_tokens = tf.maximum(
            context.all_reduce(tf.distribute.ReduceOp.SUM, tokens), 1.0)
        loss, grads, correct = forward_backward(inputs, labels, global_tokens)
        optimizer.apply_gradients(zip(grads, variables))
        return tf.stack([tf.cast(loss, tf.float32), tokens, correct, stop])

    @tf.function
    def train_step(iterator, stop=None):
        if stop is None:
            stop = tf.constant(0.0)
        inputs, labels = next(iterator)
        results = strategy.run(replica_step, args=(inputs, labels, stop))
        totals = strategy.reduce(tf.distribute.ReduceOp.SUM, results,
                                 axis=None)
        step.assign_add(1)
        return totals[0], totals[1], totals[2], totals[3]

    return train_step


