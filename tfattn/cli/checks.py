"""The refusals of a `train.py` command, made before any work.

Every message names the flag first, with the value given, then says why:
`--FLAG=VALUE: reason`, one line (`errors.UsageError`, exit status 2).

- `check_flag_combination(values, given)`: flags that cannot work together
  or do nothing in the chosen mode (`MODE_FLAGS`), and empty values; run
  when the flags are parsed.
- `check_dataset_flags(...)`: the dataset flags (`sources.
  parse_dataset_spec`), its refusal named by the flag at fault.
- `run_hparams(mode, requested, saved)`: which hparams a mode runs with.
- `check_init_from(...)`: a run started from a pretrained checkpoint
  (`--init_from`, `tfattn.cli.init_from`).
- `check_command(command, saved)`: what needs the model directory and the
  hparams: an explicit `--hparams` (or `--hparams_overrides`) that
  disagrees with the set saved in `--model_dir`, the export format and
  directory, the checkpoints to average, decoding overrides that the
  task does not use.

What `--hparams` means with an existing `--model_dir`: left out, the set
saved there (`hparams.json`) is used, in every mode (a resumed run may
still change the resumable fields with `--hparams_overrides`). Given, it
must agree with the saved set in every field outside
`config.RESUMABLE_FIELDS` once the directory holds a checkpoint (training
resumes it; eval and export always use the saved set); before the first
checkpoint a training mode starts over with the set given.
"""

import importlib.util
import os

from tfattn import config
from tfattn.cli import errors
from tfattn.training import checkpoints
from tfattn.utils.validation import echo
from tfattn.export.ctranslate2_spec import EXPORTABLE_FLAVORS

__all__ = [
    "TRAIN",
    "EVAL",
    "EXPORT",
    "ALL",
    "MODES",
    "TRAINING_MODES",
    "EVAL_MODES",
    "EXPORT_MODES",
    "AVERAGING_MODES",
    "SAVED_MODEL",
    "CTRANSLATE2",
    "EXPORT_FORMATS",
    "MODE_FLAGS",
    "NON_EMPTY_FLAGS",
    "COMBINED_FLAGS",
    "flag_shown",
    "check_flag_combination",
    "check_dataset_flags",
    "run_hparams",
    "check_command",
    "check_decoding_overrides",
    "check_init_from",
]

TRAIN, EVAL, EXPORT, ALL = "train", "eval", "export", "all"
MODES = (TRAIN, EVAL, EXPORT, ALL)
# The modes that run each step.
TRAINING_MODES = (TRAIN, ALL)
EVAL_MODES = (EVAL, ALL)
EXPORT_MODES = (EXPORT, ALL)
# The modes that restore a model (and may average checkpoints).
AVERAGING_MODES = (EVAL, EXPORT, ALL)
# What the export writes (`tfattn.export`).
SAVED_MODEL, CTRANSLATE2 = "saved_model", "ctranslate2"
EXPORT_FORMATS = (SAVED_MODEL, CTRANSLATE2)
# The flags that do something in some modes only: given in another mode,
# they would be ignored, so they are refused. --strategy, --tpu (worker
# roles), --progress_bar and --debug apply in every mode.
MODE_FLAGS = {
    "init_from": TRAINING_MODES,
    "train_steps": TRAINING_MODES,
    "train_epochs": TRAINING_MODES,
    "jit_compile": TRAINING_MODES,
    "mixed_precision": TRAINING_MODES,
    "seed": TRAINING_MODES,
    "samples": TRAINING_MODES,
    "eval_split": EVAL_MODES,
    "average_checkpoints": AVERAGING_MODES,
    "export_dir": EXPORT_MODES,
    "overwrite_export": EXPORT_MODES,
    "export_format": EXPORT_MODES,
    "ctranslate2_quantization": EXPORT_MODES,
}
# Flags whose empty value would silently mean "not given".
NON_EMPTY_FLAGS = ("init_from", "model_dir", "export_dir", "data_dir",
                   "manual_dir", "tpu", "source_language", "target_language")
# The flags `check_flag_combination` reads.
COMBINED_FLAGS = tuple(dict.fromkeys(
    ("mode", "strategy") + tuple(MODE_FLAGS) + NON_EMPTY_FLAGS))
# CTranslate2 maps these flavours and this feed-forward activation
# (`tfattn.export.ctranslate2_spec`).
_CTRANSLATE2_ACTIVATION = "relu"
# What each task's model is called in a message.
_MODEL_OF = {"translation": "translation model",
             "language_model": "language model",
             "masked_lm": "masked language model"}
# The decoding fields each task's eval and export read.
_DECODING_USED = {"language_model": ("average_checkpoints",
                                     "decode_extra_length"),
                  "masked_lm": ("average_checkpoints",)}


def flag_shown(name, value):
    """`--name=value` as a user types it (a long value cut, its length
    said).

    Args:
        name: str. The flag's name.
        value: any. Its value.

    Returns:
        str.
    """
    if isinstance(value, bool):
        value = str(value).lower()
    return f"--{name}={echo(value, as_repr=False)}"


_shown = flag_shown


def _modes(modes):
    return " or ".join(f"--mode={mode}" for mode in modes)


def check_flag_combination(values, given):
    """Raises `errors.UsageError` for flags that cannot work together.

    Args:
        values: dict of `train.py`'s flag values by name (`COMBINED_FLAGS`;
            a flag missing from it is not checked).
        given: set of str. The flags given on the command line.

    Raises:
        errors.UsageError: an empty value, `--tpu` without `--strategy=tpu`
            (or the reverse), float16 on TPUs, both `--train_steps` and
            `--train_epochs`, a flag that does nothing in
            the mode (`MODE_FLAGS`), `--overwrite_export` without
            `--export_dir`, or `--ctranslate2_quantization` without the
            CTranslate2 format.
    """
    for name in NON_EMPTY_FLAGS:
        if name in given and not str(values.get(name) or "").strip():
            raise errors.UsageError(
                f"--{name}: given an empty value; give one, or leave the "
                "flag out for its default.")
    strategy, tpu = values.get("strategy"), values.get("tpu")
    if strategy == "tpu" and not tpu:
        raise errors.UsageError(
            "--strategy=tpu: needs --tpu (the TPU's address or name, "
            "\"local\" on a TPU VM); --tpu is required with --strategy=tpu "
            "and only there.")
    if tpu and strategy != "tpu":
        raise errors.UsageError(
            f"--tpu={tpu}: only applies with --strategy=tpu (given "
            f"--strategy={strategy}); --tpu is required with --strategy=tpu "
            "and only there.")
    if strategy == "tpu" and values.get("mixed_precision") == "mixed_float16":
        raise errors.UsageError(
            "--mixed_precision=mixed_float16: TPUs do not compute in "
            "float16; use --mixed_precision=mixed_bfloat16 with "
            "--strategy=tpu.")
    if (values.get("train_steps") is not None
            and values.get("train_epochs") is not None):
        raise errors.UsageError(
            f"--train_epochs={values['train_epochs']}: give --train_steps "
            "or --train_epochs, not both (each sets the run's length).")
    mode = values.get("mode", TRAIN)
    for name, modes in MODE_FLAGS.items():
        if name in given and name in values and mode not in modes:
            raise errors.UsageError(
                f"{_shown(name, values[name])}: only applies with "
                f"{_modes(modes)}, not --mode={mode}; leave it out.")
    if values.get("overwrite_export") and not values.get("export_dir"):
        raise errors.UsageError(
            "--overwrite_export: only applies with --export_dir (the "
            "default export directory, MODEL_DIR/export, is always "
            "replaced).")
    quantization = values.get("ctranslate2_quantization")
    if quantization and values.get("export_format") != CTRANSLATE2:
        raise errors.UsageError(
            f"--ctranslate2_quantization={quantization}: only applies with "
            "--export_format=ctranslate2.")


def check_dataset_flags(parse, values, monolingual):
    """`parse(...)` of the dataset flags, its refusal named by the flag.

    Args:
        parse: `sources.parse_dataset_spec`.
        values: dict of the flag values `dataset`, `source_language`,
            `target_language`, `data_dir` and `manual_dir`.
        monolingual: bool. The run's task reads one language.

    Returns:
        The `DatasetSpec`.

    Raises:
        errors.UsageError: `--FLAG=VALUE: reason`, the flag the parser's
            `DatasetSpecError` names.
    """
    names = ("dataset", "source_language", "target_language", "data_dir",
             "manual_dir")
    try:
        return parse(*[values[n] for n in names], monolingual=monolingual)
    except ValueError as error:
        name = getattr(error, "argument", None)
        reason = getattr(error, "reason", None) or str(error)
        if name is None:
            raise errors.UsageError(str(error)) from None
        flag = "dataset" if name == "text" else name
        raise errors.UsageError(
            f"{_shown(flag, values[flag])}: {reason}") from None


def run_hparams(mode, requested, saved):
    """The hparams whose task a mode runs.

    Args:
        mode: str. One of `MODES`.
        requested: HParams or None. The set the command names.
        saved: HParams or None. The set saved in `--model_dir`.

    Returns:
        HParams or None: a training mode's requested set (else the saved
        one), the saved set for eval and export (else the requested one);
        None when neither is known.
    """
    if mode in TRAINING_MODES:
        return requested or saved
    return saved or requested


def _asked(command):
    """How the command asked for hparams: `--hparams=NAME` (with its
    overrides) or `--hparams_overrides=...`."""
    if command.hparams_name:
        shown = f"--hparams={command.hparams_name}"
        if command.hparams_overrides.strip():
            shown += f" --hparams_overrides={command.hparams_overrides}"
        return shown
    return f"--hparams_overrides={command.hparams_overrides}"


def _check_against_saved(command, saved):
    """Refuses requested hparams that disagree with the saved set."""
    requested, directory = command.hparams, command.model_dir
    differing = config.differences(saved, requested,
                                   ignore=config.RESUMABLE_FIELDS)
    if not differing:
        return
    where = os.path.join(directory, "hparams.json")
    if command.mode in TRAINING_MODES:
        advice = ("leave --hparams out to resume with the saved set, or "
                  "train in a new --model_dir")
    else:
        advice = (f"--mode={command.mode} uses the saved set: leave "
                  "--hparams out, or name the --model_dir of that set's run")
    if saved.task != requested.task:
        raise errors.UsageError(
            f"{_asked(command)}: asks for a {_MODEL_OF[requested.task]}, "
            f"but {directory} holds a {_MODEL_OF[saved.task]} (task "
            f"{saved.task!r} in {where}); {advice}.")
    listed = "; ".join(f"{n}: saved {getattr(saved, n)!r}, requested "
                       f"{getattr(requested, n)!r}" for n in differing)
    raise errors.UsageError(
        f"{_asked(command)}: differs from the hparams {directory} was "
        f"trained with ({where}) in {listed}; {advice}.")


def check_decoding_overrides(saved, overrides, mode, export_format):
    """The saved hparams with the eval/export overrides applied.

    Args:
        saved: HParams. The run's saved hparams.
        overrides: str. `--hparams_overrides`.
        mode: str. The mode (eval or export read the overrides this way).
        export_format: str. What export writes.

    Returns:
        HParams. `saved` with the overrides.

    Raises:
        errors.UsageError: an override of a field other than the decoding
            ones, or of a decoding field the task's eval and export do not
            read (a language model reads only `decode_extra_length` and
            `average_checkpoints`, its SavedModel export the first; a
            masked LM only `average_checkpoints`).
        ValueError: the overrides do not parse.
    """
    hp = config.parse_overrides(saved, overrides)
    changed = config.differences(saved, hp)
    shown = f"--hparams_overrides={overrides}"
    fixed = [n for n in changed if n not in config.DECODING_FIELDS]
    if fixed:
        raise errors.UsageError(
            f"{shown}: with --mode=eval or export only the decoding fields "
            f"({', '.join(config.DECODING_FIELDS)}) may change (the model "
            f"is the trained one); received changes to {', '.join(fixed)}.")
    used = _DECODING_USED.get(saved.task, config.DECODING_FIELDS)
    if (saved.task == "language_model"
            and (mode not in EXPORT_MODES or export_format != SAVED_MODEL)):
        used = ("average_checkpoints",)
    unused = [n for n in changed if n not in used]
    if unused:
        raise errors.UsageError(
            f"{shown}: a {_MODEL_OF[saved.task]}'s --mode={mode} does not use "
            f"{', '.join(unused)} (it reads {', '.join(used)}); leave "
            "the override out.")
    return hp


def check_command(command, saved):
    """Refuses what the hparams and the model directory make impossible.

    Args:
        command: commands.Command. The invocation; `hparams` is the
            requested set (None: the saved one), `hparams_name` the
            `--hparams` given.
        saved: HParams or None. The hparams saved in `command.model_dir`.

    Raises:
        errors.UsageError: see the module docstring.
        NotADirectoryError: `command.model_dir` is a file.
        FileExistsError: an explicit `export_dir` exists and
            `overwrite_export` is not set.
    """
    directory = str(command.model_dir)
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise NotADirectoryError(
            f"{directory}: is a file, expected a model directory (choose "
            "another --model_dir)")
    training = command.mode in TRAINING_MODES
    hp = None
    if saved is not None and command.hparams is not None and (
            not training or checkpoints.exist(directory)):
        _check_against_saved(command, saved)
    if training:
        hp = command.hparams or saved
    elif saved is not None:
        hp = check_decoding_overrides(saved, command.hparams_overrides,
                                      command.mode, command.export_format)
    if hp is not None:
        _check_average(command, hp, directory)
    if command.mode in EXPORT_MODES:
        _check_export(command, hp, directory)


def _check_average(command, hp, directory):
    """`--average_checkpoints` against the checkpoints there will be: a
    training mode's keep_checkpoints, else those on disk (when any)."""
    average = command.average_checkpoints
    if average is None:
        return
    if command.mode in TRAINING_MODES:
        if average > hp.keep_checkpoints:
            raise errors.UsageError(
                f"--average_checkpoints={average}: more than the "
                f"{hp.keep_checkpoints} checkpoints the run keeps (the "
                "hparams' keep_checkpoints); lower it, or raise "
                "keep_checkpoints (--hparams_overrides=keep_checkpoints="
                f"{average}).")
        return
    kept = checkpoints.all_checkpoints(directory)
    if 0 < len(kept) < average:
        raise errors.UsageError(
            f"--average_checkpoints={average}: {directory} keeps "
            f"{len(kept)} checkpoint(s) ("
            + ", ".join(os.path.basename(p) for p in kept) + ").")


def _check_export(command, hp, directory):
    """The export format against the task and model, and the export
    directory, before training."""
    default_dir = {SAVED_MODEL: "export", CTRANSLATE2: "ctranslate2"}
    export_dir = command.export_dir or os.path.join(
        directory, default_dir[command.export_format])
    if "://" in export_dir:
        flag = (_shown("export_dir", command.export_dir)
                if command.export_dir else _shown("model_dir", directory))
        raise errors.UsageError(
            f"{flag}: exports are written on the local filesystem (made "
            f"atomic by renames), not {export_dir}; pass a local "
            "--export_dir and copy the export afterwards.")
    if (command.export_dir and os.path.lexists(export_dir)
            and not command.overwrite_export):
        raise FileExistsError(
            f"{_shown('export_dir', export_dir)}: already exists; pass "
            "--overwrite_export to replace it, or choose another "
            "--export_dir.")
    if command.export_format != CTRANSLATE2:
        return
    shown = _shown("export_format", CTRANSLATE2)
    if hp is not None and hp.task == "masked_lm":
        raise errors.UsageError(
            f"{shown}: CTranslate2 serves translators and generators, not "
            "masked language models (task 'masked_lm'); export the "
            "SavedModel (--export_format=saved_model).")
    if hp is not None and hp.flavor not in EXPORTABLE_FLAVORS:
        raise errors.UsageError(
            f"{shown}: flavor {hp.flavor!r} has no CTranslate2 mapping "
            f"(exportable: {', '.join(EXPORTABLE_FLAVORS)}); export the "
            "SavedModel (--export_format=saved_model).")
    if hp is not None and hp.activation != _CTRANSLATE2_ACTIVATION:
        raise errors.UsageError(
            f"{shown}: the feed-forward activation {hp.activation!r} is not "
            f"{_CTRANSLATE2_ACTIVATION!r}, the one CTranslate2's mapping "
            "takes; export the SavedModel (--export_format=saved_model).")
    if importlib.util.find_spec("ctranslate2") is None:
        raise errors.UsageError(
            f"{shown}: needs the `ctranslate2` package: pip install "
            "'tfattn[serve]' (or pip install ctranslate2).")


def check_init_from(command, kind_and_task, fields, started_from):
    """Refuses a `--init_from` run that cannot start (`tfattn.cli.
    init_from`): the checkpoint's task against the set's, an explicit
    `--hparams_overrides` value that the checkpoint fixes otherwise,
    sampled tokenization, and a model directory trained without it.

    Args:
        command: commands.Command. Its `init_from`, `hparams` (the set with
            its overrides), `hparams_overrides` and `model_dir` are read.
        kind_and_task: `tfattn.interop.pretrained.Description`, or the
            str why the directory cannot start a run.
        fields: dict. The HParams fields the checkpoint fixes (empty when
            the directory was refused).
        started_from: str or None. The kind recorded in the model
            directory (None: no run started from a checkpoint there).

    Raises:
        errors.UsageError: `--init_from=DIR: reason` (or
            `--hparams_overrides=...` for a conflicting field).
    """
    shown = _shown("init_from", command.init_from)
    if isinstance(kind_and_task, str):
        raise errors.UsageError(f"{shown}: {kind_and_task}.")
    task, hp = kind_and_task.task, command.hparams
    if hp is not None and hp.task != task:
        raise errors.UsageError(
            f"{shown}: the checkpoint is a {_MODEL_OF[task]} (task "
            f"{task!r}), but --hparams={command.hparams_name} is task "
            f"{hp.task!r}; name a set of task {task!r}.")
    if hp is not None and hp.tokenizer_sampling_alpha:
        raise errors.UsageError(
            f"{shown}: the checkpoint's tokenizer does not sample, but the "
            f"set's tokenizer_sampling_alpha is "
            f"{hp.tokenizer_sampling_alpha}; set it to 0 "
            "(--hparams_overrides=tokenizer_sampling_alpha=0).")
    explicit = dict(item.split("=", 1) for item in
                    command.hparams_overrides.split(",") if "=" in item)
    for name, value in fields.items():
        if hp is not None and name in {k.strip() for k in explicit} and (
                getattr(hp, name) != value):
            raise errors.UsageError(
                f"{_shown('hparams_overrides', command.hparams_overrides)}"
                f": {name} is {getattr(hp, name)!r} here, but the "
                f"checkpoint {command.init_from} has {name}={value!r}; "
                f"leave {name} out (the checkpoint fixes it).")
    if started_from is None and checkpoints.exist(command.model_dir):
        raise errors.UsageError(
            f"{shown}: {command.model_dir} holds a run that did not start "
            "from a checkpoint; train in a new --model_dir.")
