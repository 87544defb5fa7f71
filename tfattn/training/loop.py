"""The training loop: one custom loop that serves every `tf.distribute`
strategy.

`train(hparams, dataset, model_dir, strategy, ...)` trains a
`tfattn.Transformer` with the hparams' Adam and learning-rate schedule on a
label-smoothed loss, and keeps everything a run needs in `model_dir` (see
`tfattn.training.run_dir`), with TensorBoard scalars (loss, token accuracy,
tokens per second, learning rate) and the hparams as text in
`model_dir/train/`. `tfattn.training` hands these names on.

Why a custom loop: Keras 3 `fit` fails under `MultiWorkerMirroredStrategy`
(docs/traps.md item 1), and one loop for every strategy is simpler than two.
The model and optimizer are built in `strategy.scope()`, each replica gets its
own bucketed batches (`strategy.distribute_datasets_from_function`), and a
`tf.function` runs the step with `strategy.run`. Every replica divides its
summed loss by the *global* number of non-padding target tokens (an
all-reduce of the label counts), and the optimizer sums the replicas'
gradients, so N replicas compute exactly the gradient of one device holding
the whole batch.

Resume: a run restarted with the same `model_dir` restores the latest
checkpoint and continues at its step; the saved hparams must match the
requested ones except in `config.RESUMABLE_FIELDS` (length, save and log
intervals, the batch, decoding). The data order restarts from a seed
derived from the step, so a resumed run does not replay the same batches;
it does not continue the interrupted run's exact order.

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

from tfattn.utils.backend import require_tensorflow_backend

require_tensorflow_backend("tfattn.training")

import contextlib  # noqa: E402
import dataclasses  # noqa: E402
import os  # noqa: E402
import time  # noqa: E402

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from absl import logging  # noqa: E402

from tfattn.training import checkpoints  # noqa: E402
from tfattn import config  # noqa: E402
from tfattn.decoding import evaluation  # noqa: E402
from tfattn.training import precision  # noqa: E402
from tfattn.training.optimization import current_learning_rate  # noqa: E402
from tfattn.data import training_input  # noqa: E402
from tfattn.data.tokenizer import save_tokenizer  # noqa: E402
from tfattn.utils.files import write_text_atomically  # noqa: E402
from tfattn.training.distribute import is_chief  # noqa: E402
from tfattn.training.distribute import num_workers  # noqa: E402
from tfattn.training.distribute import remove_worker_dir  # noqa: E402
from tfattn.training.distribute import worker_dir  # noqa: E402
from tfattn.training.preemption import NonFiniteLossError  # noqa: E402
from tfattn.training.preemption import StopRequest  # noqa: E402
from tfattn.training.preemption import TrainingPreempted  # noqa: E402
from tfattn.training.preparation import prepare_training  # noqa: E402
from tfattn.training.model_io import model_weights  # noqa: E402
from tfattn.training.run_dir import CHECKPOINT_NAME  # noqa: E402
from tfattn.training.run_dir import hold  # noqa: E402
from tfattn.training.run_dir import hparams_path  # noqa: E402
from tfattn.training.step import build_trainer  # noqa: E402

__all__ = [
    "TIMED_STEPS",
    "TIMING_SECONDS",
    "LARGE_FOR_NUMBERS",
    "SUMMARY_DIRNAME",
    "TrainResult",
    "train",
    "train_prepared",
]

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
            `"mixed_bfloat16"`, or `"auto"`
            (`tfattn.training.precision.resolve`: the choice recorded in
            `model_dir`, else measured).
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
    """Trains the `preparation.PreparedRun` `run` (see `train`).

    The model directory is held (`run_dir.hold`) from the first write on.

    Args:
        run: preparation.PreparedRun. What `prepare_training` returned.
        jit_compile: bool. As in `train`. Defaults to `False`.
        verbose: int. 1 shows a progress bar; 0 logs only. Defaults to `1`.
        on_step_end: callable(step, logs) or None. As in `train`.

    Returns:
        A `TrainResult`.

    Raises:
        NonFiniteLossError: the loss (or the weights) became NaN or
            infinite.
        TrainingPreempted: SIGTERM arrived; a checkpoint was saved at the
            step it stopped at.
    """
    # The model directory is held (`run_dir.hold`) from the first write on.
    with contextlib.ExitStack() as held:
        return _train(held, run, jit_compile, verbose, on_step_end)


def _train(held, run, jit_compile, verbose, on_step_end):
    started = time.time()
    hp, model_dir, strategy = run.hparams, run.model_dir, run.strategy
    chief = is_chief(strategy)
    held.enter_context(hold(model_dir, chief))
    latest = checkpoints.latest(model_dir)
    write_dir = model_dir if chief else worker_dir(model_dir, strategy)
    _write_run_files(run, chief, write_dir, latest)
    total_steps = hp.train_steps or (
        hp.train_epochs * training_input.steps_per_epoch(
            hp, run.tokenizer, run.dataset))
    trainer = build_trainer(strategy, hp, run.tokenizer.vocab_size, run.seed,
                            run.precision.policy, jit_compile, total_steps)
    checkpoint = tf.train.Checkpoint(model=model_weights(trainer.model),
                                     optimizer=trainer.optimizer,
                                     step=trainer.step)
    manager = tf.train.CheckpointManager(
        checkpoint, write_dir, max_to_keep=hp.keep_checkpoints,
        checkpoint_name=CHECKPOINT_NAME, step_counter=trainer.step)
    if latest:
        checkpoint.restore(latest).assert_existing_objects_matched()
        logging.info("Restored %s: resuming at step %d.", latest,
                     int(trainer.step.numpy()))
    start_step = int(trainer.step.numpy())
    if start_step >= total_steps:
        logging.info("Already trained to step %d (target %d): nothing to do.",
                     start_step, total_steps)
        return TrainResult(start_step, start_step, None, None, None, None,
                           latest, hp, trainer.model, run.tokenizer,
                           time.time() - started)
    _log_start(run, trainer.model, start_step, total_steps)
    loop = _TrainLoop(run, trainer, manager, start_step, total_steps,
                      latest, verbose)
    at = loop.run(jit_compile, on_step_end)
    if not chief:
        remove_worker_dir(write_dir)
    seconds = time.time() - started
    logging.info("Trained to step %d in %.1f s; last checkpoint %s.", at,
                 seconds, loop.saved)
    last = loop.last
    return TrainResult(at, start_step, last.loss, last.accuracy,
                       last.tokens_per_second, last.validation_bleu,
                       loop.saved, hp, trainer.model, run.tokenizer, seconds)


def _write_run_files(run, chief, write_dir, latest):
    """The vocabulary (a new run), hparams.json and the precision record
    (the chief), and the checkpoint index of the latest checkpoint."""
    hp, model_dir, vocab_size = (run.hparams, run.model_dir,
                                 run.tokenizer.vocab_size)
    if latest and chief:
        checkpoints.write_index(model_dir, latest)
    tf.io.gfile.makedirs(write_dir)
    if not run.resume:
        save_tokenizer(run.tokenizer, write_dir)
    if chief:
        write_text_atomically(hparams_path(model_dir), config.to_json(hp))
        if precision.read_record(model_dir, hp, vocab_size) is None:
            precision.write_record(model_dir, run.precision, hp, vocab_size)


def _log_start(run, model, start_step, total_steps):
    hp, strategy = run.hparams, run.strategy
    parameters = model.count_params()
    kind, layers = {
        "language_model": ("CausalLM", str(hp.num_layers)),
        "masked_lm": ("MaskedLM", str(hp.num_layers)),
    }.get(hp.task, ("Transformer", f"{hp.num_layers}+{hp.num_layers}"))
    logging.info(
        "Training a %s %s (%s parameters, %s layers of width %d, "
        "vocabulary %d) on %s from step %d to %d in %s (%d replica(s), %s).",
        hp.flavor, kind, f"{parameters:,}", layers,
        hp.num_units, run.tokenizer.vocab_size, run.dataset, start_step,
        total_steps, run.model_dir, strategy.num_replicas_in_sync,
        run.precision.name)
    if run.dataset.kind == "numbers" and parameters > LARGE_FOR_NUMBERS:
        logging.warning(
            "These hparams are sized for a large corpus, but the dataset is "
            "the generated numbers task (its vocabulary has %d pieces). Point "
            "them at real data, e.g. --dataset=tfds:wmt14_translate/de-en "
            "--source_language=en --target_language=de, --dataset=multi30k "
            "--manual_dir=DIR, or --dataset=textfiles:PREFIX; or use "
            "--hparams=tiny for the numbers task.", run.tokenizer.vocab_size)


@dataclasses.dataclass
class _Figures:
    """The last logging interval's figures, and the last validation BLEU."""

    loss: float | None = None
    accuracy: float | None = None
    tokens_per_second: float | None = None
    validation_bleu: float | None = None


@dataclasses.dataclass
class _Interval:
    """Sums over the current logging interval."""

    start: float
    loss: float = 0.0
    tokens: float = 0.0
    correct: float = 0.0


class _StepTimer:
    """Projects the run's length from the steps after the first (which
    compiles): `TIMED_STEPS` of them, or fewer past `TIMING_SECONDS`."""

    def __init__(self, start_step, total_steps):
        self.start_step, self.total_steps = start_step, total_steps
        self.steps = min(TIMED_STEPS, total_steps - start_step - 1)
        self.start = None

    def after(self, at, flush):
        """Called after step `at`; `flush` waits for the pending steps."""
        if self.steps <= 0:
            return
        if at == self.start_step + 1:
            flush()  # Waits for the compiling step.
            self.start = time.time()
        elif self.start is not None:
            flush()
            timed, seconds = at - self.start_step - 1, time.time() - self.start
            if timed == self.steps or seconds >= TIMING_SECONDS:
                _log_projection(seconds, timed, at, self.total_steps)
                self.start = None


class _TrainLoop:
    """The loop over steps, with its periodic work as methods: `log` (the
    interval's figures to TensorBoard and the log or progress bar), `score`
    (validation BLEU), `save` (a checkpoint). Step results are read
    (`flush`) only when one of these needs them, so the host does not wait
    for every step."""

    def __init__(self, run, trainer, manager, start_step, total_steps,
                 saved, verbose):
        """`run` is the `PreparedRun`, `trainer` its `Trainer`, `saved` the
        checkpoint it resumes from (or None)."""
        self.prepared, self.trainer, self.manager = run, trainer, manager
        self.start_step, self.total_steps = start_step, total_steps
        self.saved = saved  # The last checkpoint (the chief's).
        self.chief = is_chief(run.strategy)
        self.pending = []  # (step, loss, tokens, correct) tensors not read.
        self.interval = _Interval(start=time.time())
        self.last = _Figures()
        self.writer = (tf.summary.create_file_writer(
            os.path.join(run.model_dir, SUMMARY_DIRNAME)) if self.chief
            else tf.summary.create_noop_writer())
        # Counts the steps of this session (a resumed run starts at 0).
        self.progbar = (keras.utils.Progbar(
            total_steps - start_step, stateful_metrics=["loss", "accuracy"])
            if verbose and self.chief else None)

    def run(self, jit_compile, on_step_end):
        """Trains from `start_step` to `total_steps`; returns the last."""
        hp, strategy = self.prepared.hparams, self.prepared.strategy
        iterator = iter(training_input.distributed_batches(
            strategy, hp, self.prepared.tokenizer, self.prepared.dataset,
            self.prepared.seed + self.start_step, self.prepared.static_shapes))
        timer = _StepTimer(self.start_step, self.total_steps)
        with self.writer.as_default(step=self.start_step):
            tf.summary.text("hparams", config.to_json(hp))
        # Workers must agree on the step they stop at: they read the
        # all-reduced request (a host sync per step); one process reads its
        # own flag.
        shared_stop = num_workers(strategy) > 1
        at = self.start_step
        with StopRequest() as stop_request:
            while at < self.total_steps:
                loss, tokens, correct, stop = self.trainer.train_step(
                    iterator, tf.constant(float(stop_request.requested)))
                at += 1
                self.pending.append((at, loss, tokens, correct))
                stopping = (bool(stop > 0) if shared_stop
                            else stop_request.requested)
                timer.after(at, self.flush)
                self.periodic(at, stopping)
                if stopping:
                    logging.warning("Stopped on SIGTERM at step %d; saved "
                                    "%s.", at, self.saved)
                    raise TrainingPreempted(
                        at, self.saved if self.chief else None)
                if on_step_end is not None:
                    on_step_end(at, {"loss": loss})
        self.flush()
        return at

    def periodic(self, at, stopping):
        """The logging, scoring and saving due after step `at`."""
        hp, last_step = self.prepared.hparams, at == self.total_steps
        if at % hp.log_every_steps == 0 or last_step or stopping:
            self.log(at)
        if self.prepared.validation_pairs and not stopping and (
                at % hp.eval_every_steps == 0 or last_step):
            self.score(at)
        if at % hp.checkpoint_every_steps == 0 or last_step or stopping:
            self.save(at)

    def flush(self):
        """Reads pending results; raises on the first non-finite loss."""
        for at, loss, tokens, correct in self.pending:
            loss, tokens = float(loss), float(tokens)
            if not np.isfinite(loss):
                raise NonFiniteLossError(at, "loss", self.saved)
            self.interval.loss += loss * tokens
            self.interval.tokens += tokens
            self.interval.correct += float(correct)
        self.pending.clear()

    def log(self, at):
        self.flush()
        interval, last = self.interval, self.last
        seconds = max(time.time() - interval.start, 1e-9)
        tokens = max(interval.tokens, 1.0)
        last.loss = interval.loss / tokens
        last.accuracy = interval.correct / tokens
        last.tokens_per_second = interval.tokens / seconds
        rate = current_learning_rate(self.trainer.optimizer)
        with self.writer.as_default(step=at):
            for tag in ("loss", "accuracy", "tokens_per_second"):
                tf.summary.scalar(tag, getattr(last, tag))
            tf.summary.scalar("learning_rate", rate)
        self.writer.flush()
        if self.progbar is not None:
            self.progbar.update(at - self.start_step, [
                ("loss", last.loss), ("accuracy", last.accuracy)])
        else:
            logging.info("step %d: loss %.4f, accuracy %.4f, %.0f tokens/s, "
                         "learning rate %.3g", at, last.loss, last.accuracy,
                         last.tokens_per_second, rate)
        self.interval = _Interval(start=time.time())

    def score(self, at):
        """Greedy BLEU on the validation subset, to the log and TensorBoard."""
        self.flush()
        begin = time.time()
        pairs = self.prepared.validation_pairs
        bleu = evaluation.greedy_bleu(
            self.trainer.model, self.prepared.tokenizer, pairs)
        self.last.validation_bleu = bleu
        with self.writer.as_default(step=at):
            tf.summary.scalar("validation_bleu", bleu)
        self.writer.flush()
        logging.info("step %d: validation BLEU %.2f (greedy, first %d "
                     "validation pairs, %.1f s)", at, bleu, len(pairs),
                     time.time() - begin)
        self.interval.start += time.time() - begin  # Not training time.

    def save(self, at):
        self.flush()
        if not _weights_finite(self.trainer.model):
            raise NonFiniteLossError(at, "weights", self.saved)
        path = self.manager.save(checkpoint_number=at)
        if self.chief:
            self.saved = path


def _log_projection(seconds, steps, at, total_steps):
    per_step = seconds / steps
    remaining = per_step * (total_steps - at)
    hours, rest = divmod(int(remaining), 3600)
    logging.info("%.3f s/step (measured over steps %d-%d): about %dh%02dm to "
                 "step %d.", per_step, at - steps + 1, at, hours, rest // 60,
                 total_steps)
