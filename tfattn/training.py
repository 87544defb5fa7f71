"""Training: one custom loop that serves every `tf.distribute` strategy.

`train(hparams, dataset, model_dir, strategy, ...)` trains a
`tfattn.Transformer` with the hparams' Adam and learning-rate schedule on a
label-smoothed loss, and keeps everything a run needs in `model_dir` (see
`tfattn.run_dir`), with TensorBoard scalars (loss, token accuracy, tokens
per second, learning rate) and the hparams as text in `model_dir/train/`.

Why a custom loop: Keras 3 `fit` fails under `MultiWorkerMirroredStrategy`
(TRAPS.md item 1), and one loop for every strategy is simpler than two. The
model and optimizer are built in `strategy.scope()`, each replica gets its
own bucketed batches (`strategy.distribute_datasets_from_function`), and a
`tf.function` runs the step with `strategy.run`. Every replica divides its
summed loss by the *global* number of non-padding target tokens (an
all-reduce of the label counts), and the optimizer sums the replicas'
gradients, so N replicas compute exactly the gradient of one device holding
the whole batch.

Resume: a run restarted with the same `model_dir` restores the latest
checkpoint and continues at its step; the saved hparams must match the
requested ones except in `config.RESUMABLE_FIELDS` (length, save and log
intervals, the batch, decoding). The data order restarts from a seed derived from the
step, so a resumed run does not replay the same batches; it does not
continue the interrupted run's exact order.

A non-finite loss stops training with `NonFiniteLossError` naming the step,
and nothing is saved after it, so the last checkpoint stays the last good
one. Weights are also checked before every save.

Preemption: SIGTERM (what schedulers and cloud VMs send before they kill a
job) makes the loop finish its current step, save a checkpoint there and
raise `TrainingPreempted`; `train.py` then exits with status 143 (128 +
SIGTERM). Under `MultiWorkerMirroredStrategy` the stop request travels in
the step's all-reduce, so every worker stops after the same step and they
save together. A SIGKILL cannot be caught: the run resumes from the last
periodic checkpoint, which TensorFlow writes atomically (the `checkpoint`
index file is replaced only after a save's files are complete).

Bad input (unknown strategy, malformed TF_CONFIG, missing data, differing
hparams on resume) raises before anything is written.
"""

import contextlib
import dataclasses
import os
import time
from typing import NamedTuple

import keras
import numpy as np
import tensorflow as tf
from absl import logging

from tfattn import checkpoints
from tfattn import config
from tfattn import evaluation
from tfattn import losses
from tfattn import precision
from tfattn.optimization import build_optimizer
from tfattn.optimization import current_learning_rate
from tfattn.data import training_input
from tfattn.data.tokenizer import PAD_ID
from tfattn.data.tokenizer import save_tokenizer
from tfattn.files import write_text_atomically
from tfattn.distribute import is_chief
from tfattn.distribute import num_workers
from tfattn.distribute import worker_dir
from tfattn.models import Transformer
from tfattn.preemption import NonFiniteLossError
from tfattn.preemption import StopRequest
from tfattn.preemption import TrainingPreempted
from tfattn.preparation import prepare_training
from tfattn.run_dir import CHECKPOINT_NAME
from tfattn.run_dir import build_model
from tfattn.run_dir import hold
from tfattn.run_dir import hparams_path
from tfattn.run_dir import model_weights

# Steps timed after the first (compiling) one to project the run's length,
# or fewer when they take more than TIMING_SECONDS.
TIMED_STEPS = 10
TIMING_SECONDS = 20.0
# A model this large on the numbers task is a set meant for real data.
LARGE_FOR_NUMBERS = 5_000_000
SUMMARY_DIRNAME = "train"


# ----------------------------------------------------------------------
# Model and optimizer.

def _weights_finite(model):
    return all(bool(tf.reduce_all(tf.math.is_finite(
        tf.convert_to_tensor(v)))) for v in model.trainable_variables)


# ----------------------------------------------------------------------
# The loop.

@dataclasses.dataclass
class TrainResult:
    """What `train` returns.

    Attributes:
        step: int. The step training ended at.
        start_step: int. The step it started (or resumed) from.
        loss: float or None. Mean loss over the last logging interval.
        accuracy: float or None. Token accuracy over that interval.
        tokens_per_second: float or None. Target tokens per second.
        validation_bleu: float or None. The last `greedy_bleu` on the first
            `eval_sentences` validation pairs (None without
            `eval_every_steps`).
        checkpoint: str or None. The last checkpoint saved.
        hparams: HParams. The hparams used.
        model: Transformer. The trained model.
        tokenizer: SubwordTokenizer.
        seconds: float. Wall time of the training loop.
    """

    step: int
    start_step: int
    loss: float | None
    accuracy: float | None
    tokens_per_second: float | None
    validation_bleu: float | None
    checkpoint: str | None
    hparams: object
    model: object
    tokenizer: object
    seconds: float


def train(hparams, dataset, model_dir, strategy=None, steps=None,
          epochs=None, mixed_precision=None, jit_compile=False, seed=0,
          verbose=1, on_step_end=None):
    """Trains (or resumes training of) a Transformer in `model_dir`.

    Args:
        hparams: HParams or None. None resumes with `model_dir`'s saved
            hparams; otherwise they must agree with the saved ones (see
            `resolve_hparams`).
        dataset: DatasetSpec or spec string (`parse_dataset_spec`).
        model_dir: str. Checkpoints, vocabulary, hparams and logs.
        strategy: a `tf.distribute.Strategy` or None (the default one).
        steps: int or None. Train until this step; overrides the hparams'
            `train_steps` / `train_epochs`.
        epochs: int or None. Train for this many passes over the training
            split (counted in global batches); not with `steps`.
        mixed_precision: None, `"mixed_float16"` (with loss scaling),
            `"mixed_bfloat16"`, or `"auto"` (`tfattn.precision.resolve`:
            the choice recorded in `model_dir`, else measured).
        jit_compile: bool. Compile the forward and backward pass with XLA;
            batches are then padded to `max_train_length` so shapes are
            static (also done on TPUs).
        seed: int. Weight initialisation, dropout and data order.
        verbose: int. 1 shows a progress bar; 0 logs only.
        on_step_end: callable(step, logs) or None. Called after every step
            (and after its checkpoint, if one is due); `logs` holds the
            step's `loss` tensor. Raising from it interrupts training.

    Returns:
        A `TrainResult`.

    Raises:
        ValueError, FileNotFoundError: bad arguments or missing data, before
            anything is written (`preparation.prepare_training`).
        memory.InsufficientMemory: the step cannot fit in this machine.
        NonFiniteLossError: the loss became NaN or infinite.
        TrainingPreempted: SIGTERM arrived; a checkpoint was saved at the
            step it stopped at.
    """
    run = prepare_training(hparams, dataset, model_dir, strategy, steps,
                           epochs, mixed_precision, jit_compile, seed)
    return train_prepared(run, jit_compile, verbose, on_step_end)


def train_prepared(run, jit_compile=False, verbose=1, on_step_end=None):
    """Trains the `preparation.PreparedRun` `run` (see `train`)."""
    # The model directory is held (`run_dir.hold`) from the first write on.
    with contextlib.ExitStack() as held:
        return _train(held, run, jit_compile, verbose, on_step_end)


def _train(held, run, jit_compile, verbose, on_step_end):
    started = time.time()
    hp, dataset, model_dir = run.hparams, run.dataset, run.model_dir
    strategy, tokenizer, seed = run.strategy, run.tokenizer, run.seed
    mixed_precision = run.precision.policy
    validation_pairs = run.validation_pairs
    chief = is_chief(strategy)
    held.enter_context(hold(model_dir, chief))
    latest = checkpoints.latest(model_dir)
    write_dir = model_dir if chief else worker_dir(model_dir, strategy)
    if latest and chief:
        checkpoints.write_index(model_dir, latest)
    tf.io.gfile.makedirs(write_dir)
    if not run.resume:
        save_tokenizer(tokenizer, write_dir)
    if chief:
        write_text_atomically(hparams_path(model_dir), config.to_json(hp))
        if precision.read_record(model_dir, hp, tokenizer.vocab_size) is None:
            precision.write_record(model_dir, run.precision, hp,
                                   tokenizer.vocab_size)
    total_steps = hp.train_steps or (
        hp.train_epochs * training_input.steps_per_epoch(hp, tokenizer,
                                                         dataset))

    model, optimizer, step, train_step = build_trainer(
        strategy, hp, tokenizer.vocab_size, seed, mixed_precision,
        jit_compile, total_steps)
    checkpoint = tf.train.Checkpoint(model=model_weights(model),
                                     optimizer=optimizer, step=step)
    manager = tf.train.CheckpointManager(
        checkpoint, write_dir, max_to_keep=hp.keep_checkpoints,
        checkpoint_name=CHECKPOINT_NAME, step_counter=step)
    if latest:
        checkpoint.restore(latest).assert_existing_objects_matched()
        logging.info("Restored %s: resuming at step %d.", latest,
                     int(step.numpy()))
    start_step = int(step.numpy())
    if start_step >= total_steps:
        logging.info("Already trained to step %d (target %d): nothing to do.",
                     start_step, total_steps)
        return TrainResult(start_step, start_step, None, None, None, None,
                           latest, hp, model, tokenizer,
                           time.time() - started)

    iterator = iter(training_input.distributed_batches(
        strategy, hp, tokenizer, dataset, seed + start_step,
        run.static_shapes))
    writer = (tf.summary.create_file_writer(
        os.path.join(model_dir, SUMMARY_DIRNAME)) if chief
        else tf.summary.create_noop_writer())
    # Counts the steps of this session (a resumed run starts at 0).
    progbar = (keras.utils.Progbar(total_steps - start_step,
                                   stateful_metrics=["loss", "accuracy"])
               if verbose and chief else None)
    parameters = model.count_params()
    logging.info(
        "Training a %s Transformer (%s parameters, %d+%d layers of width %d, "
        "vocabulary %d) on %s from step %d to %d in %s (%d replica(s), %s).",
        hp.flavor, f"{parameters:,}", hp.num_layers, hp.num_layers,
        hp.num_units, tokenizer.vocab_size, dataset, start_step, total_steps,
        model_dir, strategy.num_replicas_in_sync, mixed_precision or "float32")
    if dataset.kind == "numbers" and parameters > LARGE_FOR_NUMBERS:
        logging.warning(
            "These hparams are sized for a large corpus, but the dataset is "
            "the generated numbers task (its vocabulary has %d pieces). Point "
            "them at real data, e.g. --dataset=tfds:wmt14_translate/de-en "
            "--source_language=en --target_language=de, --dataset=multi30k "
            "--manual_dir=DIR, or --dataset=textfiles:PREFIX; or use "
            "--hparams=tiny for the numbers task.", tokenizer.vocab_size)
    # The first step compiles; the next few give the speed of the rest.
    timed_steps = min(TIMED_STEPS, total_steps - start_step - 1)
    timing_start = None

    saved = latest
    pending = []  # (step, loss, tokens, correct) tensors not yet read.
    interval = dict(loss=0.0, tokens=0.0, correct=0.0, start=time.time())
    last = dict(loss=None, accuracy=None, tokens_per_second=None,
                validation_bleu=None)

    def flush():
        """Reads pending results; raises on the first non-finite loss."""
        for at, loss, tokens, correct in pending:
            loss, tokens = float(loss), float(tokens)
            if not np.isfinite(loss):
                raise NonFiniteLossError(at, "loss", saved)
            interval["loss"] += loss * tokens
            interval["tokens"] += tokens
            interval["correct"] += float(correct)
        pending.clear()

    def log(at):
        flush()
        seconds = max(time.time() - interval["start"], 1e-9)
        tokens = max(interval["tokens"], 1.0)
        last.update(loss=interval["loss"] / tokens,
                    accuracy=interval["correct"] / tokens,
                    tokens_per_second=interval["tokens"] / seconds)
        rate = current_learning_rate(optimizer)
        with writer.as_default(step=at):
            for tag in ("loss", "accuracy", "tokens_per_second"):
                tf.summary.scalar(tag, last[tag])
            tf.summary.scalar("learning_rate", rate)
        writer.flush()
        if progbar is not None:
            progbar.update(at - start_step, [
                ("loss", last["loss"]),
                ("accuracy", last["accuracy"])])
        else:
            logging.info("step %d: loss %.4f, accuracy %.4f, %.0f tokens/s, "
                         "learning rate %.3g", at, last["loss"],
                         last["accuracy"], last["tokens_per_second"], rate)
        interval.update(loss=0.0, tokens=0.0, correct=0.0, start=time.time())

    def score(at):
        """Greedy BLEU on the validation subset, to the log and TensorBoard."""
        flush()
        begin = time.time()
        last["validation_bleu"] = evaluation.greedy_bleu(
            model, tokenizer, validation_pairs)
        with writer.as_default(step=at):
            tf.summary.scalar("validation_bleu", last["validation_bleu"])
        writer.flush()
        logging.info("step %d: validation BLEU %.2f (greedy, first %d "
                     "validation pairs, %.1f s)", at, last["validation_bleu"],
                     len(validation_pairs), time.time() - begin)
        interval["start"] += time.time() - begin  # Not training time.

    def save(at):
        nonlocal saved
        flush()
        if not _weights_finite(model):
            raise NonFiniteLossError(at, "weights", saved)
        path = manager.save(checkpoint_number=at)
        if chief:
            saved = path

    with writer.as_default(step=start_step):
        tf.summary.text("hparams", config.to_json(hp))
    # Workers must agree on the step they stop at: they read the all-reduced
    # request (a host sync per step); one process reads its own flag.
    shared_stop = num_workers(strategy) > 1
    at = start_step
    with StopRequest() as stop_request:
        while at < total_steps:
            loss, tokens, correct, stop = train_step(
                iterator, tf.constant(float(stop_request.requested)))
            at += 1
            pending.append((at, loss, tokens, correct))
            stopping = (bool(stop > 0) if shared_stop
                        else stop_request.requested)
            if timed_steps > 0 and at == start_step + 1:
                flush()  # Waits for the compiling step.
                timing_start = time.time()
            elif timed_steps > 0 and timing_start is not None:
                flush()
                timed, seconds = at - start_step - 1, time.time() - timing_start
                if timed == timed_steps or seconds >= TIMING_SECONDS:
                    _log_projection(seconds, timed, at, total_steps)
                    timing_start = None
            if (at % hp.log_every_steps == 0 or at == total_steps
                    or stopping):
                log(at)
            if validation_pairs and not stopping and (
                    at % hp.eval_every_steps == 0 or at == total_steps):
                score(at)
            if (at % hp.checkpoint_every_steps == 0 or at == total_steps
                    or stopping):
                save(at)
            if stopping:
                logging.warning("Stopped on SIGTERM at step %d; saved %s.",
                                at, saved)
                raise TrainingPreempted(at, saved if chief else None)
            if on_step_end is not None:
                on_step_end(at, {"loss": loss})
    flush()
    if not chief:
        tf.io.gfile.rmtree(write_dir)
        parent = os.path.dirname(write_dir)
        try:  # The last worker out removes the shared parent.
            if not tf.io.gfile.listdir(parent):
                tf.io.gfile.rmtree(parent)
        except tf.errors.OpError:
            pass  # Another worker removed it first.
    seconds = time.time() - started
    logging.info("Trained to step %d in %.1f s; last checkpoint %s.", at,
                 seconds, saved)
    return TrainResult(at, start_step, last["loss"], last["accuracy"],
                       last["tokens_per_second"], last["validation_bleu"],
                       saved, hp, model, tokenizer, seconds)


def _log_projection(seconds, steps, at, total_steps):
    per_step = seconds / steps
    remaining = per_step * (total_steps - at)
    hours, rest = divmod(int(remaining), 3600)
    logging.info("%.3f s/step (measured over steps %d-%d): about %dh%02dm to "
                 "step %d.", per_step, at - steps + 1, at, hours, rest // 60,
                 total_steps)


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
    the number of them predicted correctly (argmax) and the sum of the
    workers' `stop` values, as scalars: one all-reduce of the four.
    """
    loss_scaling = mixed_precision == "mixed_float16"
    variables = model.trainable_variables

    def forward_backward(inputs, labels, global_tokens):
        with tf.GradientTape() as tape:
            logits = model(inputs, training=True)
            total, _ = losses.smoothed_cross_entropy_sum(
                labels, logits, epsilon=hp.label_smoothing)
            # This replica's share of the global mean: replicas' gradients
            # are summed, giving the gradient of the mean over all tokens.
            loss = total / (global_tokens + hp.loss_denominator_epsilon)
            scaled = optimizer.scale_loss(loss) if loss_scaling else loss
        grads = tape.gradient(scaled, variables)
        hits = tf.logical_and(
            tf.equal(tf.argmax(logits, -1, output_type=tf.int32), labels),
            tf.not_equal(labels, PAD_ID))
        return loss, grads, tf.reduce_sum(tf.cast(hits, tf.float32))

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


