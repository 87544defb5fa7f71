"""What `train.py`'s modes do, from plain arguments: check, train, evaluate,
export.

`train.py` turns its flags into a `Command` and calls `run(command,
report=print)`; the library never reads flags, never prints (what a user
reads goes to `report`, `logging.info` by default) and never imports the
application's hparams sets (the requested set arrives as an `HParams`).

- `check(command)`: everything that bad input can break, before anything
  is written; returns the prepared training run (`preparation`) and the
  strategy.
- `run(command)`: the modes in turn (train, then eval and export while
  holding the model directory, `run_dir.hold`).
"""

import dataclasses
import os
import sys
import time
from typing import Optional

import tensorflow as tf
from absl import logging

from tfattn import config
from tfattn.training import distribute
from tfattn.cli import checks
from tfattn.cli import errors
from tfattn.cli import init_from
from tfattn.cli import language_model
from tfattn.cli import masked_lm
from tfattn.cli.errors import decoding_advice
from tfattn.cli.errors import training_advice
from tfattn.training import memory
from tfattn.training import precision
from tfattn.training import preparation
from tfattn.training import model_io
from tfattn.training import run_dir
from tfattn import training
from tfattn.data import sources

__all__ = [
    "TRAIN",
    "EVAL",
    "EXPORT",
    "ALL",
    "MODES",
    "TRAINING_MODES",
    "EVAL_MODES",
    "EXPORT_MODES",
    "SAVED_MODEL",
    "CTRANSLATE2",
    "EXPORT_FORMATS",
    "DEFAULT_EXPORT_DIRS",
    "ATTENTION_SENTENCES",
    "Command",
    "check_flag_combination",
    "decoding_settings",
    "check",
    "training_advice",
    "decoding_advice",
    "run_train",
    "run_eval",
    "attention_images",
    "run_export",
    "run",
]

# The modes and export formats (`checks`, where the refusals live).
TRAIN, EVAL, EXPORT, ALL = checks.TRAIN, checks.EVAL, checks.EXPORT, checks.ALL
MODES = checks.MODES
TRAINING_MODES = checks.TRAINING_MODES
EVAL_MODES = checks.EVAL_MODES
EXPORT_MODES = checks.EXPORT_MODES
SAVED_MODEL, CTRANSLATE2 = checks.SAVED_MODEL, checks.CTRANSLATE2
EXPORT_FORMATS = checks.EXPORT_FORMATS
# Under MODEL_DIR, when --export_dir is not given.
DEFAULT_EXPORT_DIRS = {SAVED_MODEL: "export", CTRANSLATE2: "ctranslate2"}
# Validation sentences whose attention eval draws into TensorBoard.
ATTENTION_SENTENCES = 2


@dataclasses.dataclass(frozen=True)
class Command:
    """One invocation of `train.py` (see its flags for each field)."""

    mode: str
    model_dir: str
    dataset: sources.DatasetSpec
    # The requested set with its overrides; None resumes with the saved one.
    hparams: Optional[config.HParams] = None
    hparams_overrides: str = ""
    # The --hparams given (its name, for messages), or None.
    hparams_name: Optional[str] = None
    # None (float32), a Keras policy name, or "auto"
    # (`tfattn.training.precision`).
    strategy: str = "default"
    tpu: Optional[str] = None
    mixed_precision: Optional[str] = None
    jit_compile: bool = False
    train_steps: Optional[int] = None
    train_epochs: Optional[int] = None
    export_dir: Optional[str] = None
    overwrite_export: bool = False
    export_format: str = SAVED_MODEL
    # None (float32) or a CTranslate2 weight type.
    ctranslate2_quantization: Optional[str] = None
    average_checkpoints: Optional[int] = None
    eval_split: str = "test"
    seed: int = 0
    samples: int = 100
    progress_bar: bool = True
    # A pretrained checkpoint directory the run starts from (`init_from`).
    init_from: Optional[str] = None


def check_flag_combination(values, given=None):
    """Raises `errors.UsageError` for flags that cannot work together
    (`checks.check_flag_combination`).

    Args:
        values: dict of `train.py`'s flag values by name
            (`checks.COMBINED_FLAGS`).
        given: set of str or None. The flags given on the command line;
            None counts those whose value is not `Command`'s default.

    Raises:
        errors.UsageError: see `checks.check_flag_combination`.
    """
    if given is None:
        defaults = {f.name: f.default for f in dataclasses.fields(Command)}
        given = {n for n, v in values.items()
                 if v != defaults.get(n, None) and v is not False}
    checks.check_flag_combination(values, given)


def decoding_settings(command):
    """(decoding keyword arguments, checkpoints to average) of eval and
    export: the saved hparams' with the overrides applied (decoding fields
    only), and `average_checkpoints` over the hparams' value.

    Args:
        command: Command. Its `model_dir`, `hparams_overrides` and
            `average_checkpoints` are read.

    Returns:
        tuple. `(decoding, average)`, the keyword arguments of
        `config.decoding_kwargs` (dict) and the number of checkpoints to
        average (the command's, else the saved hparams').

    Raises:
        FileNotFoundError: `model_dir` holds no `hparams.json`.
        errors.UsageError: the overrides change a field other than the
            decoding ones (`config.DECODING_FIELDS`), or one the task does
            not read (`checks.check_decoding_overrides`).
        ValueError: the overrides do not parse.
    """
    directory = command.model_dir
    saved = run_dir.load_saved_hparams(directory)
    if saved is None:
        raise FileNotFoundError(
            f"{directory} holds no trained model (no hparams.json); train one "
            "first (--mode=train).")
    hp = checks.check_decoding_overrides(
        saved, command.hparams_overrides, command.mode, command.export_format)
    return config.decoding_kwargs(hp), (command.average_checkpoints
                                        or hp.average_checkpoints)


def check(command, report=logging.info):
    """Checks everything that bad input can break; nothing is written.

    Args:
        command: Command. The invocation to check.
        report: callable(str). Gets the precision chosen for training.
            Defaults to `logging.info`.

    Returns:
        (the `preparation.PreparedRun` of a training mode or None, the
        strategy).

    Raises:
        errors.UsageError: flags the hparams or the model directory make
            impossible (`checks.check_command`), first.
        ValueError, OSError: bad data, hparams or directories.
    """
    # The flags against the hparams and the model directory, first.
    if command.mode in TRAINING_MODES:
        command = init_from.checkpoint_hparams(command)
    checks.check_command(command,
                         run_dir.load_saved_hparams(command.model_dir))
    spec = command.dataset
    # The splits this command will read, checked before training starts.
    training_mode = command.mode in TRAINING_MODES
    splits = ["train"] if training_mode else []
    if training_mode and command.samples:
        splits.append("validation")
    if command.mode in EVAL_MODES:
        splits.append(command.eval_split)
    sources.check_dataset(spec, splits)
    if spec.kind in ("multi30k", "tfds") and not sys.stderr.isatty():
        # TFDS's progress bars write cursor-control codes into log files.
        import tensorflow_datasets as tfds
        tfds.disable_progress_bar()
    if not training_mode:
        decoding_settings(command)
    # MultiWorkerMirroredStrategy must exist before other TensorFlow work.
    strategy = distribute.make_strategy(command.strategy, command.tpu)
    if not training_mode:
        return None, strategy
    start = init_from.start_of(command)
    if start is not None:
        prepared = init_from.prepare(command, strategy, start)
    else:
        prepared = preparation.prepare_training(
            command.hparams, spec, command.model_dir, strategy,
            steps=command.train_steps, epochs=command.train_epochs,
            mixed_precision=command.mixed_precision,
            jit_compile=command.jit_compile, seed=command.seed)
    logging.info("Memory: about %s of this machine's %.1f GiB (the "
                 "largest batch; estimated within %.2fx).",
                 prepared.memory.describe(),
                 memory.physical_memory() / 2**30, memory.STATED_FACTOR)
    report(precision.describe(prepared.precision))
    return prepared, strategy


def run_train(command, prepared, report=logging.info):
    """Trains `prepared`, then reports sample translations (the chief).

    Args:
        command: Command. Its `jit_compile`, `progress_bar`, `samples`,
            `dataset` and `model_dir` are read.
        prepared: preparation.PreparedRun. What `check` returned.
        report: callable(str). Gets the sample translations and their
            exact-match rate. Defaults to `logging.info`.

    Returns:
        training.TrainResult. What training returned.

    Raises:
        errors.OutOfMemory: training or the samples ran out of memory.
    """
    from tfattn.decoding import translate
    with errors.guard_memory("training", lambda: training_advice(
            prepared.hparams, command.model_dir)), init_from.training(
            command, init_from.start_of(command),
            distribute.is_chief(prepared.strategy)):
        result = training.train_prepared(
            prepared, jit_compile=command.jit_compile,
            verbose=int(command.progress_bar and sys.stdout.isatty()))
    if result.loss is not None:
        logging.info("Step %d: loss %.4f, token accuracy %.4f, %.0f "
                     "tokens/s, %.1f s.", result.step, result.loss,
                     result.accuracy, result.tokens_per_second,
                     result.seconds)
    decoding = config.decoding_kwargs(result.hparams)
    if result.hparams.task != "translation":
        if command.samples and distribute.is_chief(prepared.strategy):
            report_samples = (
                language_model.report_continuations
                if result.hparams.task == "language_model"
                else masked_lm.report_fillings)
            report_samples(result.model, result.tokenizer, command.dataset,
                           command.samples, report)
        return result
    if command.samples and distribute.is_chief(prepared.strategy):
        with errors.guard_memory("translating the validation samples",
                                 lambda: decoding_advice(decoding)):
            exact, rows = translate.sample_translations(
                result.model, result.tokenizer, decoding, command.dataset,
                count=command.samples)
        for source, reference, hypothesis in rows[:5]:
            report(f"  {source}\n    -> {hypothesis}\n    (reference: "
                   f"{reference})")
        report(f"Exact match on {len(rows)} validation pairs: {exact:.1%}")
    return result


def run_eval(command, report=logging.info):
    """Scores the model of `command.model_dir` on `command.eval_split`.

    The model is restored (averaging checkpoints as `decoding_settings`
    says), the split translated and scored with BLEU (and tokenised,
    lowercased BLEU when Multi30k's tokenised references are found), and
    attention images written for TensorBoard (`attention_images`).

    Args:
        command: Command. The invocation.
        report: callable(str). Gets the BLEU lines. Defaults to
            `logging.info`.

    Returns:
        dict. The metrics of `evaluation.evaluate` (for a language model,
        of `lm_evaluation.evaluate_language_model`: perplexities and
        samples).

    Raises:
        errors.OutOfMemory: decoding ran out of memory.
    """
    from tfattn import data
    from tfattn.decoding import evaluation
    if command.dataset.monolingual:
        return _monolingual_module(command).run_eval(
            command, report, decoding_settings(command)[1])
    spec, directory = command.dataset, command.model_dir
    decoding, average = decoding_settings(command)
    model, tokenizer, _ = model_io.restore_model(directory,
                                                 average_last=average)
    split = command.eval_split
    pairs = sources.load_pairs(spec, split)
    references = None
    if spec.kind == "multi30k" and spec.manual_dir:
        tok_dir = os.path.join(spec.manual_dir, os.pardir, "tok")
        try:
            references = data.load_tokenized_references(
                split, spec.target_language, tok_dir)
        except FileNotFoundError:
            logging.info("No tokenised references in %s.", tok_dir)
    with errors.guard_memory(f"translating the {split} split",
                             lambda: decoding_advice(decoding)):
        metrics = evaluation.evaluate(
            model, tokenizer, pairs, directory, split, **decoding,
            tokenized_references=references,
            target_language=spec.target_language if references else None)
    report(f"BLEU on the {split} split: {metrics['bleu']:.2f} "
          f"({metrics['bleu_signature']})")
    if "bleu_tokenized_lowercased" in metrics:
        report("Tokenised, lowercased BLEU: "
               f"{metrics['bleu_tokenized_lowercased']:.2f}")
    attention_images(model, tokenizer, spec, directory, decoding, pairs)
    return metrics


def attention_images(model, tokenizer, spec, directory, decoding, pairs):
    """TensorBoard images (MODEL_DIR/eval) of the attention of the first
    validation sentences (test ones when there is no validation split).

    Args:
        model: Transformer. The restored model.
        tokenizer: SubwordTokenizer. Its tokenizer.
        spec: DatasetSpec. The dataset the sentences come from.
        directory: str. The model directory.
        decoding: dict. The decoding keyword arguments.
        pairs: list of (source, target) str pairs. The evaluated pairs,
            drawn from when there is no validation split.

    Returns:
        int. The number of images written (0 without matplotlib).
    """
    from tfattn import visualize
    try:
        visualize.plot.require_matplotlib()
    except ImportError as error:
        logging.info("No attention images for TensorBoard: %s", error)
        return 0
    try:
        shown = sources.load_pairs(spec, "validation",
                                   limit=ATTENTION_SENTENCES)
    except (FileNotFoundError, ValueError):
        shown = pairs[:ATTENTION_SENTENCES]
    checkpoint = tf.train.latest_checkpoint(directory)
    step = int(checkpoint.rsplit("-", 1)[1]) if checkpoint else 0
    started = time.time()
    with errors.guard_memory("drawing attention images",
                             lambda: decoding_advice(decoding)):
        count = visualize.write_attention_summaries(
            model, tokenizer,
            [source for source, _ in shown if source.strip()],
            os.path.join(directory, "eval"), step, decoding)
    logging.info("Wrote %d attention images to TensorBoard (%s) in %.1f s.",
                 count, os.path.join(directory, "eval"),
                 time.time() - started)
    return count


def run_export(command, report=logging.info):
    """Exports the model of `command.model_dir` as `command.export_format`.

    Args:
        command: Command. The invocation; without `export_dir` the export
            goes under the model directory (`DEFAULT_EXPORT_DIRS`) and
            replaces an earlier one there.
        report: callable(str). Gets the line naming the export. Defaults
            to `logging.info`.

    Returns:
        str. The path of the export.

    Raises:
        FileExistsError: `export_dir` exists and `overwrite_export` is
            not set.
        errors.OutOfMemory: the export ran out of memory.
    """
    from tfattn import export
    directory = command.model_dir
    decoding, average = decoding_settings(command)
    export_dir = command.export_dir or os.path.join(
        directory, DEFAULT_EXPORT_DIRS[command.export_format])
    overwrite = command.overwrite_export or not command.export_dir
    if os.path.lexists(export_dir) and not overwrite:
        raise FileExistsError(
            f"--export_dir={export_dir}: already exists; pass "
            "--overwrite_export to replace it, or choose another "
            "--export_dir.")
    if command.dataset.monolingual:
        return _monolingual_module(command).run_export(
            command, export_dir, overwrite, report, average)
    model, tokenizer, _ = model_io.restore_model(directory,
                                                 average_last=average)
    with errors.guard_memory("exporting", lambda: (
            "free memory used by other processes, or export on a machine "
            "with more memory; nothing was replaced in " + export_dir)):
        if command.export_format == CTRANSLATE2:
            path = export.to_ctranslate2(
                model, tokenizer, export_dir, overwrite=overwrite,
                quantization=command.ctranslate2_quantization, **decoding)
            weights = command.ctranslate2_quantization or "float32"
            kind = f"CTranslate2 translator ({weights} weights)"
        else:
            path = export.export_translator(model, tokenizer, export_dir,
                                            **decoding, overwrite=overwrite)
            kind = "string-to-string translator (SavedModel)"
    report(f"Exported a {kind} to {path}")
    return path


def run(command, report=logging.info):
    """Checks `command`, then runs its modes in turn; `report(text)` gets
    what a user reads (the precision, samples, BLEU, the export).

    Args:
        command: Command. The invocation.
        report: callable(str). Defaults to `logging.info`.
    """
    prepared, strategy = check(command, report)
    if command.mode in TRAINING_MODES:
        # Holds the directory itself (`run_dir.hold`) once its input is
        # checked, so that bad input leaves nothing behind.
        run_train(command, prepared, report)
    if command.mode == TRAIN:
        return
    with run_dir.hold(command.model_dir,
                      chief=distribute.is_chief(strategy)):
        if command.mode in EVAL_MODES:
            run_eval(command, report)
        if command.mode in EXPORT_MODES:
            run_export(command, report)


def _monolingual_module(command):
    """The modes of the run's one-language task: `cli.masked_lm` for task
    "masked_lm" (read from the run's saved hparams), else
    `cli.language_model`."""
    saved = run_dir.load_saved_hparams(command.model_dir)
    if saved is not None and saved.task == "masked_lm":
        return masked_lm
    return language_model
