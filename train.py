r"""Trains, evaluates and exports a tfattn Transformer.

  python train.py --hparams=tiny --dataset=numbers --mode=all
  python train.py --hparams=base          # the paper's base model (see below)

Modes: train (default), eval (BLEU on --eval_split, test by default), export (a
string-to-string SavedModel), all (the three in turn). A run restarted with
the same --model_dir resumes from its latest checkpoint with its saved
hparams; --model_dir defaults to runs/HPARAMS_DATASET. See `python train.py
--helpfull` for every flag.

Exit status: 0 when done (and for --help); 143 (128 + SIGTERM) when SIGTERM
stopped training after saving a checkpoint (run the same command to resume);
2 for flags that cannot work; 1 for any other failure (a non-finite loss,
bad data, a missing or unwritable file, a model dir in use). Each failure is
one line, `Error: ...`, naming the flag, field or file; --debug shows the
traceback instead.
"""

import dataclasses
import os
import re
import sys


def _import_tensorflow_quietly():
    """Imports TensorFlow with its start-up banner held back.

    TensorFlow's C++ logging prints its banner (oneDNN notice, CUDA stub and
    CPU feature lines) before it reads TF_CPP_MIN_LOG_LEVEL, twice (two
    shared libraries), and a `failed call to cuInit` error line on machines
    without a GPU when it first looks for devices (the CUDA lines are kept
    where an NVIDIA driver is installed). Standard error is
    captured while TensorFlow loads and lists its devices; every line that
    is not one of those is written back, and everything is when that fails.
    TFATTN_VERBOSE_IMPORT=1 keeps the banner.
    """
    if os.environ.get("TFATTN_VERBOSE_IMPORT") == "1":
        return
    import tempfile

    banner = (
        r"All log messages before absl::InitializeLog|oneDNN custom "
        r"operations|cpu_feature_guard|rebuild TensorFlow with the "
        r"appropriate compiler flags"
    )
    if not os.path.exists("/dev/nvidiactl"):
        # No NVIDIA driver: the CUDA lines say only that there is no GPU.
        # With one, they may be the reason a GPU is missing: kept.
        banner += (
            r"|cudart_stub|cuda drivers|cuInit|Unable to register "
            r"cu(DNN|FFT|BLAS) factory|computation placer"
        )
    banner = re.compile(banner)
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as captured:
        os.dup2(captured.fileno(), 2)
        failed = True
        try:
            import tensorflow

            # Finding the devices is where a machine without a GPU logs
            # `failed call to cuInit`; it does not start the runtime, so
            # strategies can still be configured afterwards.
            tensorflow.config.list_physical_devices()
            failed = False
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            lines = captured.read().decode("utf-8", "replace").splitlines()
            kept = (
                lines
                if failed
                else [line for line in lines if not banner.search(line)]
            )
            if kept:
                print("\n".join(kept), file=sys.stderr)


os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
# train.py is a TensorFlow program (tf.distribute, tf.data, SavedModel):
# it takes the TensorFlow backend over ~/.keras/keras.json, and refuses
# another named in the environment rather than overriding the user's choice.
if os.environ.setdefault("KERAS_BACKEND", "tensorflow") != "tensorflow":
    print(
        "train.py: error: train.py runs on Keras's TensorFlow backend, and "
        f"KERAS_BACKEND is {os.environ['KERAS_BACKEND']!r}: unset it or set "
        "KERAS_BACKEND=tensorflow",
        file=sys.stderr,
    )
    sys.exit(2)
_import_tensorflow_quietly()

import tensorflow  # noqa: E402

from absl import app  # noqa: E402
from absl import flags  # noqa: E402
from absl import logging  # noqa: E402

import hparams as hparams_sets  # noqa: E402
from tfattn.cli import checks  # noqa: E402
from tfattn.cli import commands  # noqa: E402
from tfattn import config  # noqa: E402
from tfattn.training import distribute  # noqa: E402
from tfattn.cli import errors  # noqa: E402
from tfattn.training import run_dir  # noqa: E402
from tfattn import training  # noqa: E402
from tfattn.data import sources  # noqa: E402


def _drop_tensorflow_info(record):
    """TensorFlow's own INFO lines (a save's sharding time, a 1,000-character
    list of a traced function's inputs at export) say nothing to a user."""
    return (
        record.levelno > logging.converter.STANDARD_INFO
        or not record.pathname.startswith(_TENSORFLOW_DIR)
    )


_TENSORFLOW_DIR = os.path.dirname(tensorflow.__file__)
logging.get_absl_handler().addFilter(_drop_tensorflow_info)
tensorflow.get_logger().setLevel("WARNING")

MODES = commands.MODES
MIXED_PRECISION = ("off", "auto", "mixed_float16", "mixed_bfloat16")
DEFAULT_RUNS_DIR = "runs"

# Hyperparameters.
flags.DEFINE_string(
    "hparams",
    None,
    "Hparams set: " + ", ".join(hparams_sets.names()) + ". Omit it to use "
    "the set saved in --model_dir; given there, it must match it.",
)
flags.DEFINE_string(
    "hparams_overrides",
    "",
    'Comma-separated field=value overrides, e.g. "num_heads=4,'
    "dropout_rate=0.2\". Values are parsed by the field's type, never run. "
    "With --mode=eval or export only the decoding fields ("
    + ", ".join(config.DECODING_FIELDS)
    + ") may be overridden.",
)
# Data.
flags.DEFINE_string(
    "dataset",
    "numbers",
    "numbers (generated, offline), multi30k (with --manual_dir), tfds:NAME "
    "or textfiles:PREFIX (files PREFIX[.train].LANG).",
)
flags.DEFINE_string(
    "data_dir",
    None,
    "TFDS data directory (TFDS creates it; default ~/tensorflow_datasets).",
)
flags.DEFINE_string(
    "manual_dir",
    None,
    "TFDS manual directory: Multi30k's six *.gz files (or a TFDS dataset's "
    "manual files).",
)
flags.DEFINE_string(
    "source_language", None, "Source feature (TFDS, Multi30k) or file suffix."
)
flags.DEFINE_string(
    "target_language", None, "Target feature (TFDS, Multi30k) or file suffix."
)
# Run.
flags.DEFINE_string(
    "model_dir",
    None,
    "Checkpoints, vocabulary, hparams.json, logs. Default: "
    f"{DEFAULT_RUNS_DIR}/HPARAMS_DATASET (e.g. {DEFAULT_RUNS_DIR}/"
    "tiny_numbers).",
)
flags.DEFINE_enum("mode", "train", MODES, "What to do.")
flags.DEFINE_enum(
    "strategy",
    "default",
    distribute.STRATEGIES,
    "tf.distribute strategy (multi_worker_mirrored reads TF_CONFIG).",
)
flags.DEFINE_string(
    "tpu",
    None,
    'TPU address or name ("local" on a TPU VM); only with --strategy=tpu.',
)
flags.DEFINE_enum(
    "mixed_precision",
    "auto",
    MIXED_PRECISION,
    "Compute precision: auto (bfloat16 where this machine "
    "runs the set's training step faster that way: a TPU, an "
    "Ampere or later GPU, a CPU with bfloat16 dot products "
    "where the step, measured once, gains 1.1x; float16 on "
    "7.x GPUs; float32 otherwise; printed), off (float32), "
    "mixed_float16 (with loss scaling) or mixed_bfloat16.",
)
flags.DEFINE_bool(
    "jit_compile",
    False,
    "Compile the training step with XLA (batches padded to max_train_length).",
)
flags.DEFINE_integer(
    "train_steps",
    None,
    "Train to this step (overrides the hparams' length).",
    lower_bound=1,
)
flags.DEFINE_integer(
    "train_epochs",
    None,
    "Train for this many epochs (overrides the hparams' length).",
    lower_bound=1,
)
flags.DEFINE_string(
    "export_dir",
    None,
    "Export directory (export and all modes; default "
    "MODEL_DIR/export, or MODEL_DIR/ctranslate2 with "
    "--export_format=ctranslate2, which each export replaces).",
)
flags.DEFINE_bool(
    "overwrite_export",
    False,
    "Replace an existing --export_dir (the default export "
    "directory is always replaced).",
)
flags.DEFINE_enum(
    "export_format",
    commands.SAVED_MODEL,
    commands.EXPORT_FORMATS,
    "What export and all write: a string-to-string TensorFlow SavedModel, "
    "or a CTranslate2 model directory (needs the `serve` extra).",
)
flags.DEFINE_enum(
    "ctranslate2_quantization",
    None,
    ("float32", "int8", "int16"),
    "Weight type of --export_format=ctranslate2 (default float32).",
)
flags.DEFINE_integer(
    "average_checkpoints",
    None,
    "Eval and export the average of the last this many "
    "checkpoints (see the hparams' keep_checkpoints); "
    "default: the hparams' average_checkpoints.",
    lower_bound=1,
)
flags.DEFINE_enum(
    "eval_split",
    "test",
    ("test", "validation"),
    "The split `eval`/`all` translates and scores: choose "
    "settings on `validation`, report `test`.",
)
flags.DEFINE_integer("seed", 0, "Initialisation, dropout and data seed.",
                     lower_bound=0, upper_bound=2**32 - 1)
flags.DEFINE_integer(
    "samples",
    100,
    "After training, translate this many validation pairs "
    "and log the exact-match rate (0: skip).",
    lower_bound=0,
)
flags.DEFINE_bool(
    "progress_bar", True, "Show a progress bar (on a terminal; logs otherwise)."
)
flags.DEFINE_bool(
    "debug",
    False,
    "On an error, show the Python traceback instead of one "
    "line (also with --verbosity=1).",
)

FLAGS = flags.FLAGS


@flags.validator(
    "hparams",
    message=(
        "Unknown hparams set. Known sets: " + ", ".join(hparams_sets.names())
    ),
)
def _check_hparams_name(name):
    return name is None or name in hparams_sets.names()


@flags.multi_flags_validator(["hparams", "hparams_overrides"])
def _check_overrides(values):
    # Keys and types are the same for every set: check against any.
    name = (
        values["hparams"]
        if values["hparams"] in hparams_sets.names()
        else "base"
    )
    try:
        config.parse_overrides(
            hparams_sets.get(name), values["hparams_overrides"]
        )
    except ValueError as error:
        raise flags.ValidationError(checks.flag_shown(
            "hparams_overrides", values["hparams_overrides"]) + f": {error}")
    return True


@flags.multi_flags_validator(
    ["dataset", "source_language", "target_language", "data_dir",
     "manual_dir", "hparams", "hparams_overrides", "model_dir", "mode"]
)
def _check_dataset(values):
    try:
        checks.check_dataset_flags(sources.parse_dataset_spec, values,
                                   _task_of(values) != "translation")
    except errors.UsageError as error:
        raise flags.ValidationError(str(error))
    return True


def _task_of(values):
    """The run's task (`checks.run_hparams`: a training mode's --hparams
    set, eval's and export's saved one), else translation."""
    requested = saved = None
    try:
        if values["hparams"] in hparams_sets.names():
            requested = config.parse_overrides(
                hparams_sets.get(values["hparams"]),
                values["hparams_overrides"])
        if values["model_dir"]:
            saved = run_dir.load_saved_hparams(values["model_dir"])
    except ValueError:
        pass  # The overrides' or the saved file's own check reports it.
    hp = checks.run_hparams(values["mode"], requested, saved)
    return hp.task if hp else "translation"


@flags.multi_flags_validator(checks.COMBINED_FLAGS)
def _check_combination(values):
    try:
        commands.check_flag_combination(
            values, {name for name in values if FLAGS[name].present})
    except errors.UsageError as error:
        raise flags.ValidationError(str(error))
    return True


def model_dir():
    """--model_dir, or runs/HPARAMS_DATASET when it is not given."""
    if FLAGS.model_dir:
        return FLAGS.model_dir
    if not FLAGS.hparams:
        raise errors.UsageError(
            "Give --hparams for a new run, or --model_dir to resume one (it "
            "holds its hparams.json)."
        )
    dataset = re.sub(r"[^A-Za-z0-9.-]+", "_", FLAGS.dataset).strip("_")
    return os.path.join(DEFAULT_RUNS_DIR, f"{FLAGS.hparams}_{dataset}")


def requested_hparams(directory):
    """The --hparams set with --hparams_overrides applied, or None.

    Without --hparams, the overrides (if any) apply to the set saved in
    `directory`, and None is returned when there are none.
    """
    if FLAGS.hparams:
        base = hparams_sets.get(FLAGS.hparams)
    elif FLAGS.hparams_overrides.strip():
        base = run_dir.load_saved_hparams(directory)
        if base is None:
            raise ValueError(
                "--hparams_overrides needs --hparams for a new run (no "
                f"hparams.json in {directory})."
            )
    else:
        return None
    return config.parse_overrides(base, FLAGS.hparams_overrides)


def _fail(line, status):
    """Ends the program with the one line naming what went wrong."""
    if status == 1:
        sys.exit(line)
    print(line, file=sys.stderr)
    sys.exit(status)


def main(argv):
    """The error boundary: every failure ends as one line (see the module
    docstring), SIGTERM as status 143."""
    try:
        if len(argv) > 1:
            raise errors.UsageError(
                f"unexpected arguments: {' '.join(argv[1:])}"
            )
        _run(argv)
    except training.TrainingPreempted as error:
        # 128 + SIGTERM, the status of a process that SIGTERM ended: a
        # scheduler sees the job as interrupted, not finished.
        logging.warning("%s", error)
        sys.exit(128 + 15)
    except Exception as error:  # noqa: BLE001 (the boundary)
        if FLAGS.debug or FLAGS.verbosity >= 1:
            raise
        line, status = errors.command_line_failure(
            error,
            f"running --mode={FLAGS.mode}",
            "lower the hparams' tokens_per_batch or max_train_length, "
            "or free memory",
            expected=(training.NonFiniteLossError, run_dir.ModelDirInUse),
        )
        fields = {f.name for f in dataclasses.fields(config.HParams)}
        _fail(errors.name_hparams_fields(line, fields), status)


# Command fields that are not one flag's value as it is.
_DERIVED_FIELDS = ("model_dir", "dataset", "hparams", "hparams_name",
                   "mixed_precision")


def _command(directory):
    """The `commands.Command` of the flags: each field is the flag of its
    name, except `_DERIVED_FIELDS`."""
    values = {
        field.name: FLAGS[field.name].value
        for field in dataclasses.fields(commands.Command)
        if field.name not in _DERIVED_FIELDS
    }
    requested = (requested_hparams(directory) if FLAGS.hparams
                 or FLAGS.mode in commands.TRAINING_MODES else None)
    known = checks.run_hparams(FLAGS.mode, requested,
                               run_dir.load_saved_hparams(directory))
    return commands.Command(
        **values,
        model_dir=directory,
        dataset=checks.check_dataset_flags(
            sources.parse_dataset_spec, FLAGS.flag_values_dict(),
            known is not None and known.task != "translation"),
        hparams=requested,
        hparams_name=FLAGS.hparams,
        mixed_precision=(
            None if FLAGS.mixed_precision == "off" else FLAGS.mixed_precision
        ),
    )


def _run(argv):
    directory = model_dir()
    if not FLAGS.model_dir:
        print(f"Model directory: {directory}")
    commands.run(_command(directory), report=print)


def _parse_flags(argv):
    """absl's flag parsing, where a bad flag is one line and status 2."""
    try:
        return FLAGS(argv)
    except flags.Error as error:
        print(
            f"Error: {errors.describe_flag_error(error, FLAGS)} (python "
            "train.py --helpfull lists the flags)",
            file=sys.stderr,
        )
        sys.exit(2)


HELP_FLAGS = ("-h", "-?", "--help", "--helpshort", "--helpfull", "--helpxml")


def run():
    """`app.run(main)`, where a request for help exits 0 (absl exits 1) and
    a preempted run leaves at once after its checkpoint (143)."""
    try:
        app.run(main, flags_parser=_parse_flags)
    except SystemExit as exit_:
        if exit_.code == 1 and any(a in HELP_FLAGS for a in sys.argv[1:]):
            sys.exit(0)
        if exit_.code == 128 + 15:
            # The checkpoint is written; interpreter shutdown can wait
            # minutes on the input pipeline's threads, past a preemption's
            # grace period. Flush and leave now.
            logging.flush()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(exit_.code)
        raise


if __name__ == "__main__":
    run()
