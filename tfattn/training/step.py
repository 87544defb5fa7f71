"""The training step: the model and optimizer in a strategy's scope, and
the distributed `train_step` over them (what `training.train` runs, what
`tfattn.training.precision` times and what the bench scripts measure).

Every replica divides its summed loss by the *global* number of non-padding
target tokens (an all-reduce of the label counts), and the optimizer sums
the replicas' gradients, so N replicas compute exactly the gradient of one
device holding the whole batch.

What a step minimises is an objective object (`objective_for(hp)`): the
label-smoothed cross-entropy of one forward pass, or, with
`hp.rdrop_alpha > 0`, R-Drop's (two passes of the batch under independent
dropout, their cross-entropies and the symmetric KL between them).
"""

from typing import NamedTuple

import keras
import tensorflow as tf

from tfattn import losses
from tfattn.data.tokenizer import PAD_ID
from tfattn.models import Transformer
from tfattn.training.optimization import build_optimizer
from tfattn.training.model_io import build_model

__all__ = [
    "CrossEntropyObjective",
    "RDropObjective",
    "objective_for",
    "Trainer",
    "build_trainer",
    "make_train_step",
]


class CrossEntropyObjective:
    """The label-smoothed cross-entropy of one training forward pass.

    `objective(model, inputs, labels)` returns `losses.LossSums` over this
    replica's batch: the summed loss, the counted targets and the top-1
    hits (inputs `{'source': [B, S], 'target_in': [B, T]}`, labels [B, T]).

    Args:
        hp: HParams. Its `label_smoothing` is read.
    """

    def __init__(self, hp):
        """Keeps `hp.label_smoothing`."""
        self.label_smoothing = hp.label_smoothing

    def __call__(self, model, inputs, labels):
        logits = model(inputs, training=True)  # [B, T, V]
        return self.cross_entropy(labels, logits)

    def cross_entropy(self, labels, logits):
        """The label-smoothed cross-entropy sums of `logits`.

        Args:
            labels: int tensor [B, T]. The target ids; padding (0) is not
                counted.
            logits: float tensor [B, T, V].

        Returns:
            losses.LossSums. The summed loss, the counted targets and the
            top-1 hits.
        """
        return losses.smoothed_cross_entropy_sums(
            labels, logits, epsilon=self.label_smoothing, pad_id=PAD_ID)


class RDropObjective(CrossEntropyObjective):
    """R-Drop (Liang et al. 2021; the authors' fairseq code): the batch
    goes through the model twice in one call (stacked on the batch axis,
    so the two copies draw independent dropout masks), and per target token

        loss = ½·(CE_a + CE_b) + (α/2)·½·[KL(p_a ‖ p_b) + KL(p_b ‖ p_a)],

    half the paper's CE_a + CE_b + α·½·[KL + KL] (what their R-Drop
    criterion, `--reg-alpha α`, sums and divides by the batch's tokens):
    the same minimiser, and the same Adam steps up to Adam's ε. The hits
    are the first copy's. A step costs about twice the compute and the
    activation memory of the batch alone.

    Args:
        hp: HParams. Its `label_smoothing` and `rdrop_alpha` (α) are read.
    """

    def __init__(self, hp):
        """Keeps `hp.label_smoothing` and `hp.rdrop_alpha`."""
        super().__init__(hp)
        self.alpha = hp.rdrop_alpha

    def __call__(self, model, inputs, labels):
        doubled = tf.nest.map_structure(
            lambda x: tf.concat([x, x], axis=0), inputs)
        logits_a, logits_b = tf.split(
            model(doubled, training=True), 2, axis=0)  # 2 x [B, T, V]
        first = self.cross_entropy(labels, logits_a)
        second = self.cross_entropy(labels, logits_b)
        consistency = losses.symmetric_kl_sum(labels, logits_a, logits_b,
                                              pad_id=PAD_ID)
        return losses.LossSums(
            0.5 * (first.loss + second.loss) + 0.5 * self.alpha * consistency,
            first.tokens, first.correct)


def objective_for(hp):
    """The training objective `hp` names: R-Drop's where
    `hp.rdrop_alpha > 0`, else the plain cross-entropy.

    Args:
        hp: HParams.

    Returns:
        RDropObjective or CrossEntropyObjective.
    """
    if hp.rdrop_alpha > 0:
        return RDropObjective(hp)
    return CrossEntropyObjective(hp)


class Trainer(NamedTuple):
    """What `build_trainer` returns.

    Attributes:
        model: Transformer. The built model.
        optimizer: keras.optimizers.Optimizer. Built for its variables.
        step: tf.Variable. The int64 step counter.
        train_step: the `tf.function` of `make_train_step`.
    """

    model: Transformer
    optimizer: keras.optimizers.Optimizer
    step: tf.Variable
    train_step: object


def build_trainer(strategy, hp, vocab_size, seed=None, mixed_precision=None,
                  jit_compile=False, total_steps=None):
    """The model, optimizer and step counter in `strategy`'s scope, and the
    distributed `train_step` over them (`make_train_step`). `total_steps`
    ends the cosine schedule (default `hp.train_steps`).

    Args:
        strategy: tf.distribute.Strategy. The scope everything is built in.
        hp: HParams.
        vocab_size: int. The trained tokenizer's size.
        seed: int or None. Weight initialisation and dropout.
        mixed_precision: str or None. A Keras dtype policy name, e.g.
            `"mixed_float16"` (with loss scaling); None is float32.
        jit_compile: bool. Compile the forward and backward pass with XLA.
        total_steps: int or None. Where the cosine schedule ends.

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

    Args:
        strategy: tf.distribute.Strategy. Runs the step on its replicas.
        model: Transformer. Built in `strategy`'s scope.
        optimizer: keras.optimizers.Optimizer. Built for the model.
        step: tf.Variable. The step counter, incremented by each step.
        hp: HParams. The objective (`objective_for`) and the loss
            denominator's epsilon.
        mixed_precision: str or None. `"mixed_float16"` scales the loss.
        jit_compile: bool. Compile the forward and backward pass with XLA.

    Returns:
        The `tf.function` `train_step(iterator, stop=None)`, which reads
        one batch from `iterator`.
    """
    loss_scaling = mixed_precision == "mixed_float16"
    variables = model.trainable_variables
    objective = objective_for(hp)

    def forward_backward(inputs, labels, global_tokens):
        with tf.GradientTape() as tape:
            sums = objective(model, inputs, labels)
            # This replica's share of the global mean: replicas' gradients
            # are summed, giving the gradient of the mean over all tokens.
            loss = sums.loss / (global_tokens + hp.loss_denominator_epsilon)
            scaled = optimizer.scale_loss(loss) if loss_scaling else loss
        grads = tape.gradient(scaled, variables)
        return loss, grads, sums.correct

    if jit_compile:
        forward_backward = tf.function(
            forward_backward, jit_compile=True, autograph=False)

    def replica_step(inputs, labels, stop):
        context = tf.distribute.get_replica_context()
        tokens = tf.reduce_sum(tf.cast(
            tf.not_equal(labels, PAD_ID), tf.float32))
        global_tokens = tf.maximum(
            context.all_reduce(tf.distribute.ReduceOp.SUM, tokens), 1.0)
        loss, grads, correct = forward_backward(inputs, labels, global_tokens)
        optimizer.apply_gradients(zip(grads, variables))
        return tf.stack([tf.cast(loss, tf.float32), tokens, correct, stop])

    # autograph=False: the step has no Python control flow on tensors
    # (Keras's layers are written for backends without AutoGraph), and
    # converting it took 3 of the 8 s a tiny run's first step costs.
    @tf.function(autograph=False)
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


