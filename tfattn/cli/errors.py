"""What the command lines count as an expected failure, and how they say it.

`train.py` and `python -m tfattn.visualize` end every expected failure with
one line, `Error: ...`, naming the file, flag or field (exit status 1; 2
for a command line that cannot work as given, `UsageError`), and show a
traceback only when asked (`--debug`). Expected failures are bad input and
an unusable environment: `ValueError` (bad values, undecodable text),
`OSError` (missing, unreadable or unwritable files and directories, bad
gzip files), `EOFError` (truncated archives) and TensorFlow's `OpError`
(unreadable checkpoints, data the input pipeline cannot parse). The line
is the error as `describe` (from `tfattn.utils.messages`) says it.

Out of memory (`tf.errors.ResourceExhaustedError`, or Python's
`MemoryError`) inside `guard_memory(what, advice)` becomes `OutOfMemory`:
one line with what was running, the tensor that did not fit and what to
lower.
"""

import contextlib
import os
import re

import tensorflow as tf

from tfattn.training import checkpoints
from tfattn.utils.messages import describe

__all__ = [
    "UsageError",
    "OutOfMemory",
    "EXPECTED",
    "name_hparams_fields",
    "out_of_memory",
    "guard_memory",
    "describe_flag_error",
    "command_line_failure",
    "training_advice",
    "decoding_advice",
    # Re-exported from tfattn.utils.messages.
    "describe",
]


class UsageError(ValueError):
    """A command line that cannot work as given (exit status 2)."""


class OutOfMemory(RuntimeError):
    """The machine ran out of memory while a command was running."""


EXPECTED = (ValueError, OSError, EOFError, ImportError, tf.errors.OpError,
            OutOfMemory)
_SHAPE = re.compile(r"shape\s*\[([0-9,\s]*)\]")
_ARGUMENT = re.compile(r"for argument `(\w+)`")


def name_hparams_fields(line, fields):
    """`line` with an argument that is an hparams field named as the
    command line sets it (`--hparams_overrides=NAME=...`).

    Args:
        line: str. An error line.
        fields: the names of the hparams fields (a container of str).

    Returns:
        str. `line`, each "for argument `NAME`" whose NAME is in `fields`
        replaced by how to set that field.
    """
    def named(match):
        name = match.group(1)
        if name not in fields:
            return match.group(0)
        return (f"for the hparams field `{name}` (set it with "
                f"--hparams_overrides={name}=...)")

    return _ARGUMENT.sub(named, line)


def out_of_memory(error, what, advice):
    """The `OutOfMemory` for `error` (a `ResourceExhaustedError` or a
    `MemoryError`): `out of memory while <what> (a tensor of shape [...]
    did not fit): <advice>`.

    Args:
        error: the `ResourceExhaustedError` or `MemoryError`; the tensor's
            shape is read from its message, when it names one.
        what: str. What was running, e.g. "training".
        advice: str. What to lower.

    Returns:
        OutOfMemory. The error to raise.
    """
    found = _SHAPE.search(getattr(error, "message", None) or str(error))
    tensor = ""
    if found:
        dims = [d.strip() for d in found.group(1).split(",") if d.strip()]
        tensor = f" (a tensor of shape [{', '.join(dims)}] did not fit)"
    return OutOfMemory(f"out of memory while {what}{tensor}: {advice}")


@contextlib.contextmanager
def guard_memory(what, advice):
    """Turns running out of memory in the block into `OutOfMemory`.

    Args:
        what: str. What the block does, e.g. "training".
        advice: str, or a callable returning it (called only on failure):
            what to lower.

    Yields:
        None. The block runs inside the guard.

    Raises:
        OutOfMemory: the block raised `tf.errors.ResourceExhaustedError`
            or `MemoryError` (chained from it).
    """
    try:
        yield
    except (tf.errors.ResourceExhaustedError, MemoryError) as error:
        text = advice() if callable(advice) else advice
        raise out_of_memory(error, what, text) from error


def describe_flag_error(error, flag_values):
    """An absl flag error as one line that names the flag first.

    absl prefixes a failed multi-flag validator's message with every flag
    it reads and its value (`flags a=1, b=2, ...: message`). A validator
    whose message names its flag first (`--b=2: reason`) is shown without
    that list; other messages (absl's own, `flag --mode=dance: ...`) are
    kept whole.

    Args:
        error: absl.flags.Error. The parse or validation error.
        flag_values: absl.flags.FlagValues. The parsed flags (their
            validators' prefixes are rebuilt from them).

    Returns:
        str. One line, as `describe`.
    """
    text = str(error)
    prefixes = set()
    for name in list(flag_values):
        for validator in getattr(flag_values[name], "validators", ()):
            if len(validator.get_flags_names()) > 1:
                try:
                    prefixes.add(
                        validator.print_flags_with_values(flag_values))
                except Exception:  # noqa: BLE001 (a message, not a check)
                    continue
    for prefix in sorted(prefixes, key=len, reverse=True):
        text = text.replace(f"{prefix}: --", "--")
    return describe(ValueError(text))


def command_line_failure(error, doing, memory_advice, expected=()):
    """How a command line ends on `error`: (the `Error: ...` line, status).

    The one boundary of `train.py` and `python -m tfattn.visualize`: running
    out of memory becomes `OutOfMemory` (what was running, the tensor, what
    to lower); a `UsageError` exits 2; the expected failures (`EXPECTED`,
    and the command's own `expected` types) exit 1 with their line; any
    other exception is a bug, named as such, with how to see its traceback.

    Args:
        error: the exception that reached the boundary.
        doing: str. What was running, e.g. "running --mode=train".
        memory_advice: str. What to lower when memory ran out.
        expected: tuple of further exception types that are bad input.

    Returns:
        tuple. `(line, status)`, the `Error: ...` line (str) and the exit
        status (int), 2 for a `UsageError`, else 1.
    """
    if isinstance(error, (tf.errors.ResourceExhaustedError, MemoryError)):
        error = out_of_memory(error, doing, memory_advice)
    if isinstance(error, UsageError):
        return f"Error: {describe(error)}", 2
    if isinstance(error, EXPECTED + tuple(expected)):
        return f"Error: {describe(error)}", 1
    return (f"Error: unexpected {type(error).__name__}: {describe(error)} "
            "(rerun with --debug for the traceback)", 1)


def training_advice(hp, model_dir):
    """What to lower when a training step runs out of memory.

    Args:
        hp: HParams. The run's hparams (their batch and length fields are
            named with their values).
        model_dir: str. The run's directory (its latest checkpoint is
            named, as the one a rerun resumes from).

    Returns:
        str. The advice, for `errors.guard_memory`.
    """
    latest = checkpoints.latest(model_dir)
    kept = (f"it resumes from {os.path.basename(latest)}, which is kept"
            if latest else "no checkpoint was written yet")
    if hp.batch_size:
        batch = (f"batch_size (now {hp.batch_size}), e.g. --hparams_overrides"
                 f"=batch_size={max(1, hp.batch_size // 2)}")
    else:
        batch = (f"tokens_per_batch (now {hp.tokens_per_batch}), e.g. "
                 f"--hparams_overrides=tokens_per_batch="
                 f"{max(hp.max_train_length, hp.tokens_per_batch // 2)}")
    return (f"lower {batch}, or max_train_length (now "
            f"{hp.max_train_length}), and run the same command again ({kept}"
            "); or lower vocab_size, num_layers or num_units in a new "
            "--model_dir")


def decoding_advice(decoding):
    """What to lower when decoding runs out of memory.

    Args:
        decoding: dict. The decoding keyword arguments (their `beam_size`
            and `extra_length` are named with their values).

    Returns:
        str. The advice, for `errors.guard_memory`.
    """
    return (f"lower beam_size (now {decoding['beam_size']}) or "
            f"decode_extra_length (now {decoding['extra_length']}) with "
            "--hparams_overrides, or free memory used by other processes")
