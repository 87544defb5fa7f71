"""`train.py`'s flags: their definitions, the validators that refuse flags
that cannot work (run as the flags are parsed), and what parsed flags ask
for.

absl defines a flag once per process: `train.py` calls `define_flags(sets)`
when it is imported, with the application's hparams sets (the library
never imports them), and tests that import `train` parse `flags.FLAGS`.

- `define_flags(sets)`: every flag and validator, on `flags.FLAGS`.
- `model_dir(flag_values)`: `--model_dir`, or runs/HPARAMS_DATASET.
- `requested_hparams(flag_values, sets, directory)`: the set asked for,
  with its overrides.
- `command(flag_values, sets, directory)`: the `commands.Command` of the
  flags.
"""

import dataclasses
import os
import re

from absl import flags

from tfattn import config
from tfattn.cli import checks
from tfattn.cli import commands
from tfattn.cli import errors
from tfattn.data import sources
from tfattn.training import distribute
from tfattn.training import run_dir

__all__ = [
    "MODES",
    "MIXED_PRECISION",
    "DEFAULT_RUNS_DIR",
    "define_flags",
    "model_dir",
    "requested_hparams",
    "command",
]

MODES = commands.MODES
MIXED_PRECISION = ("off", "auto", "mixed_float16", "mixed_bfloat16")
DEFAULT_RUNS_DIR = "runs"
# Command fields that are not one flag's value as it is.
_DERIVED_FIELDS = ("model_dir", "dataset", "hparams", "hparams_name",
                   "mixed_precision")


def define_flags(sets):
    """Defines `train.py`'s flags and their validators on `flags.FLAGS`.

    Call it once per process: absl refuses a flag defined twice.

    Args:
        sets: the application's hparams sets: an object with `names()`
            (the set names, a list of str) and `get(name)` (that set's
            `HParams`), such as the repository's `hparams` package.
    """
    _define_hparams_flags(sets)
    _define_init_flags()
    _define_data_flags()
    _define_run_flags()
    _define_output_flags()
    _define_misc_flags()
    _define_validators(sets)


def _define_hparams_flags(sets):
    flags.DEFINE_string(
        "hparams",
        None,
        "Hparams set: " + ", ".join(sets.names()) + ". Omit it to use "
        "the set saved in --model_dir; given there, it must match it.",
    )
    flags.DEFINE_string(
        "hparams_overrides",
        "",
        'Comma-separated field=value overrides, e.g. "num_heads=4,'
        "dropout_rate=0.2\". Values are parsed by the field's type, never "
        "run. With --mode=eval or export only the decoding fields ("
        + ", ".join(config.DECODING_FIELDS)
        + ") may be overridden.",
    )


def _define_init_flags():
    flags.DEFINE_string(
        "init_from",
        None,
        "Start training from a pretrained checkpoint directory: a Hugging "
        "Face GPT-2 directory or keras-hub GPT-2 preset (a language model "
        "set), a Hugging Face Marian/OPUS-MT directory (a translation set), "
        "or a Hugging Face BertForMaskedLM/BertForPreTraining directory or "
        "keras-hub BertMaskedLM preset (a masked language model set such as "
        "bert_tiny; BERT classifiers are fine-tuned in Python with "
        "tfattn.interop.bert). The model and its tokenizer come from the "
        "checkpoint (no "
        "vocabulary is learnt), and so do the set's architecture fields "
        "(num_layers, num_units, num_heads, ffn_units, dropout rates, "
        "max_length, vocab_size; an explicit different value in "
        "--hparams_overrides is refused); the set gives the training "
        "fields. Training modes only; the run resumes without it.",
    )


def _define_data_flags():
    flags.DEFINE_string(
        "dataset",
        "numbers",
        "numbers (generated, offline), multi30k (with --manual_dir), "
        "tfds:NAME or textfiles:PREFIX (files PREFIX[.train].LANG).",
    )
    flags.DEFINE_string(
        "data_dir",
        None,
        "TFDS data directory (TFDS creates it; default "
        "~/tensorflow_datasets).",
    )
    flags.DEFINE_string(
        "manual_dir",
        None,
        "TFDS manual directory: Multi30k's six *.gz files (or a TFDS "
        "dataset's manual files).",
    )
    flags.DEFINE_string(
        "source_language",
        None,
        "Source feature (TFDS, Multi30k) or file suffix (translation "
        "only).",
    )
    flags.DEFINE_string(
        "target_language",
        None,
        "Target feature (TFDS, Multi30k) or file suffix; a language "
        "model's text (default: en for Multi30k, text for TFDS, txt for "
        "text files).",
    )


def _define_run_flags():
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
        'TPU address or name ("local" on a TPU VM); only with '
        "--strategy=tpu.",
    )
    flags.DEFINE_enum(
        "mixed_precision",
        "auto",
        MIXED_PRECISION,
        "Compute precision: auto (bfloat16 where this machine "
        "runs the set's training step faster that way: a TPU, an "
        "Ampere or later GPU, a CPU with bfloat16 dot products "
        "where the step, timed once, is at least 1.1x faster (the "
        "threshold); float16 on "
        "7.x GPUs; float32 otherwise; printed), off (float32), "
        "mixed_float16 (with loss scaling) or mixed_bfloat16.",
    )
    flags.DEFINE_bool(
        "jit_compile",
        False,
        "Compile the training step with XLA (batches padded to "
        "max_train_length).",
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


def _define_output_flags():
    """The flags of eval and export."""
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
        "What export and all write: a TensorFlow SavedModel (a translator, "
        "a language model's continuations, a masked LM's fill_mask), or "
        "a CTranslate2 model directory of a translation or language model "
        "(needs the `serve` extra).",
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
        "The split `eval`/`all` scores (translation: BLEU; language "
        "model: perplexity; masked LM: masked-token accuracy): choose "
        "settings on `validation`, report `test`.",
    )


def _define_misc_flags():
    """The seed, the samples after training and how much is shown."""
    flags.DEFINE_integer("seed", 0, "Initialisation, dropout and data seed.",
                         lower_bound=0, upper_bound=2**32 - 1)
    flags.DEFINE_integer(
        "samples",
        100,
        "After training, translate this many validation pairs and log the "
        "exact-match rate (a language model continues, a masked LM fills a "
        "blank in, at most 5 of this many validation texts); 0: skip.",
        lower_bound=0,
    )
    flags.DEFINE_bool(
        "progress_bar", True,
        "Show a progress bar (on a terminal; logs otherwise).",
    )
    flags.DEFINE_bool(
        "debug",
        False,
        "On an error, show the Python traceback instead of one "
        "line (also with --verbosity=1).",
    )


def _define_validators(sets):
    """The validators of the flags' values and combinations."""
    flag_values = flags.FLAGS

    @flags.validator(
        "hparams",
        message=("Unknown hparams set. Known sets: "
                 + ", ".join(sets.names())),
    )
    def _check_hparams_name(name):
        return name is None or name in sets.names()

    @flags.multi_flags_validator(["hparams", "hparams_overrides"])
    def _check_overrides(values):
        # Keys and types are the same for every set: check against any.
        name = (values["hparams"] if values["hparams"] in sets.names()
                else "base")
        try:
            config.parse_overrides(sets.get(name),
                                   values["hparams_overrides"])
        except ValueError as error:
            raise flags.ValidationError(checks.flag_shown(
                "hparams_overrides", values["hparams_overrides"])
                + f": {error}")
        return True

    @flags.multi_flags_validator(
        ["dataset", "source_language", "target_language", "data_dir",
         "manual_dir", "hparams", "hparams_overrides", "model_dir", "mode"]
    )
    def _check_dataset(values):
        try:
            checks.check_dataset_flags(
                sources.parse_dataset_spec, values,
                _task_of(values, sets) != "translation")
        except errors.UsageError as error:
            raise flags.ValidationError(str(error))
        return True

    @flags.multi_flags_validator(checks.COMBINED_FLAGS)
    def _check_combination(values):
        try:
            commands.check_flag_combination(
                values, {name for name in values
                         if flag_values[name].present})
        except errors.UsageError as error:
            raise flags.ValidationError(str(error))
        return True


def _task_of(values, sets):
    """The run's task (`checks.run_hparams`: a training mode's --hparams
    set, eval's and export's saved one), else translation."""
    requested = saved = None
    try:
        if values["hparams"] in sets.names():
            requested = config.parse_overrides(
                sets.get(values["hparams"]), values["hparams_overrides"])
        if values["model_dir"]:
            saved = run_dir.load_saved_hparams(values["model_dir"])
    except ValueError:
        pass  # The overrides' or the saved file's own check reports it.
    hp = checks.run_hparams(values["mode"], requested, saved)
    return hp.task if hp else "translation"


def model_dir(flag_values):
    """--model_dir, or runs/HPARAMS_DATASET when it is not given.

    Args:
        flag_values: absl.flags.FlagValues. The parsed flags.

    Returns:
        str. The model directory.

    Raises:
        errors.UsageError: neither --model_dir nor --hparams.
    """
    if flag_values.model_dir:
        return flag_values.model_dir
    if not flag_values.hparams:
        raise errors.UsageError(
            "Give --hparams for a new run, or --model_dir to resume one (it "
            "holds its hparams.json)."
        )
    dataset = re.sub(r"[^A-Za-z0-9.-]+", "_", flag_values.dataset).strip("_")
    return os.path.join(DEFAULT_RUNS_DIR, f"{flag_values.hparams}_{dataset}")


def requested_hparams(flag_values, sets, directory):
    """The --hparams set with --hparams_overrides applied, or None.

    Without --hparams, the overrides (if any) apply to the set saved in
    `directory`, and None is returned when there are none.

    Args:
        flag_values: absl.flags.FlagValues. The parsed flags.
        sets: the hparams sets (as in `define_flags`).
        directory: str. The model directory.

    Returns:
        HParams or None.

    Raises:
        ValueError: overrides without --hparams for a new run, or
            overrides that do not parse.
    """
    if flag_values.hparams:
        base = sets.get(flag_values.hparams)
    elif flag_values.hparams_overrides.strip():
        base = run_dir.load_saved_hparams(directory)
        if base is None:
            raise ValueError(
                "--hparams_overrides needs --hparams for a new run (no "
                f"hparams.json in {directory})."
            )
    else:
        return None
    return config.parse_overrides(base, flag_values.hparams_overrides)


def command(flag_values, sets, directory):
    """The `commands.Command` of the flags: each field is the flag of its
    name, except the model directory, the dataset, the hparams and the
    precision, which are derived.

    Args:
        flag_values: absl.flags.FlagValues. The parsed flags.
        sets: the hparams sets (as in `define_flags`).
        directory: str. The model directory (`model_dir`).

    Returns:
        commands.Command.

    Raises:
        ValueError: hparams or a dataset that cannot work
            (`errors.UsageError` for the dataset flags).
    """
    values = {
        field.name: flag_values[field.name].value
        for field in dataclasses.fields(commands.Command)
        if field.name not in _DERIVED_FIELDS
    }
    requested = (
        requested_hparams(flag_values, sets, directory)
        if flag_values.hparams or flag_values.mode in commands.TRAINING_MODES
        else None)
    known = checks.run_hparams(flag_values.mode, requested,
                               run_dir.load_saved_hparams(directory))
    precision = flag_values.mixed_precision
    return commands.Command(
        **values,
        model_dir=directory,
        dataset=checks.check_dataset_flags(
            sources.parse_dataset_spec, flag_values.flag_values_dict(),
            known is not None and known.task != "translation"),
        hparams=requested,
        hparams_name=flag_values.hparams,
        mixed_precision=None if precision == "off" else precision,
    )
