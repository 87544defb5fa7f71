"""How `train.py` ends: its exit statuses, and the boundaries that turn
every failure into one line.

- `OK` (0): done, and for `--help`.
- `FAILURE` (1): a non-finite loss, bad data, a missing or unwritable
  file, a model directory in use, or any other failure.
- `USAGE` (2): flags that cannot work (`errors.UsageError`, a flag absl
  refuses).
- `PREEMPTED` (143, 128 + SIGTERM, the status of a process that SIGTERM
  ended): SIGTERM stopped training after it saved a checkpoint; a
  scheduler sees the job as interrupted, not finished, and the same
  command resumes it.

Each failure is one line, `Error: ...` (`errors.command_line_failure`),
on standard error; `--debug` (or `--verbosity=1`) shows the traceback
instead. Nothing here prints: a line goes to the caller's `write`, or to
Python as the message of the exit (status 1).

- `parse_flags(argv, flag_values, write)`: absl's parsing, a bad flag as
  one line and status 2.
- `run_main(work, argv, flag_values, write)`: `main`'s boundary.
- `run_app(main, flags_parser)`: `app.run`, where a request for help exits
  0 and a preempted run leaves at once.
"""

import dataclasses
import os
import sys

from absl import app
from absl import flags
from absl import logging

from tfattn import config
from tfattn import training
from tfattn.cli import errors
from tfattn.training import run_dir

__all__ = [
    "OK",
    "FAILURE",
    "USAGE",
    "PREEMPTED",
    "HELP_FLAGS",
    "MEMORY_ADVICE",
    "fail",
    "parse_flags",
    "run_main",
    "run_app",
]

OK, FAILURE, USAGE = 0, 1, 2
PREEMPTED = 128 + 15  # 128 + SIGTERM
HELP_FLAGS = ("-h", "-?", "--help", "--helpshort", "--helpfull", "--helpxml")
# What to lower when a command runs out of memory outside training and
# decoding (which say their own).
MEMORY_ADVICE = ("lower the hparams' tokens_per_batch or max_train_length, "
                 "or free memory")


def fail(line, status, write):
    """Ends the program with the one line naming what went wrong.

    Args:
        line: str. The `Error: ...` line.
        status: int. The exit status (`FAILURE` or `USAGE`).
        write: callable(str). Writes a line to standard error; a
            `FAILURE` leaves the line to Python instead, as the exit
            message.

    Raises:
        SystemExit: always, with `status`.
    """
    if status == FAILURE:
        sys.exit(line)
    write(line)
    sys.exit(status)


def parse_flags(argv, flag_values, write):
    """absl's flag parsing, where a bad flag is one line and status 2.

    Args:
        argv: list of str. The command line, the program's name first.
        flag_values: absl.flags.FlagValues. The flags (`flags.FLAGS`).
        write: callable(str). Writes a line to standard error.

    Returns:
        list of str. The arguments that are not flags, the program's name
        first (what `flag_values(argv)` returns).

    Raises:
        SystemExit: a flag absl or a validator refuses (status `USAGE`,
            after its one line).
    """
    try:
        return flag_values(argv)
    except flags.Error as error:
        write(f"Error: {errors.describe_flag_error(error, flag_values)} "
              "(python train.py --helpfull lists the flags)")
        sys.exit(USAGE)


def run_main(work, argv, flag_values, write):
    """Runs `work()`, the error boundary of `train.py`'s `main`: every
    failure ends as one line, SIGTERM as status 143.

    Args:
        work: callable(). What the command does.
        argv: list of str. The arguments absl left; any after the
            program's name are refused (status `USAGE`).
        flag_values: absl.flags.FlagValues. The parsed flags (`debug`,
            `verbosity` and `mode` are read).
        write: callable(str). Writes a line to standard error.

    Raises:
        SystemExit: a failure (`FAILURE` or `USAGE`, after its one line)
            or a preempted run (`PREEMPTED`).
        Exception: any failure, re-raised with `--debug` or
            `--verbosity=1`.
    """
    try:
        if len(argv) > 1:
            raise errors.UsageError(
                f"unexpected arguments: {' '.join(argv[1:])}"
            )
        work()
    except training.TrainingPreempted as error:
        logging.warning("%s", error)
        sys.exit(PREEMPTED)
    except Exception as error:  # noqa: BLE001 (the boundary)
        if flag_values.debug or flag_values.verbosity >= 1:
            raise
        line, status = errors.command_line_failure(
            error,
            f"running --mode={flag_values.mode}",
            MEMORY_ADVICE,
            expected=(training.NonFiniteLossError, run_dir.ModelDirInUse),
        )
        fields = {f.name for f in dataclasses.fields(config.HParams)}
        fail(errors.name_hparams_fields(line, fields), status, write)


def run_app(main, flags_parser):
    """`app.run(main)`, where a request for help exits 0 (absl exits 1) and
    a preempted run leaves at once after its checkpoint (143).

    Args:
        main: callable(argv). The program's `main`.
        flags_parser: callable(argv). Parses the flags (`parse_flags`).

    Raises:
        SystemExit: the program's exit status.
    """
    try:
        app.run(main, flags_parser=flags_parser)
    except SystemExit as exit_:
        if exit_.code == FAILURE and any(
                a in HELP_FLAGS for a in sys.argv[1:]):
            sys.exit(OK)
        if exit_.code == PREEMPTED:
            # The checkpoint is written; interpreter shutdown can wait
            # minutes on the input pipeline's threads, past a preemption's
            # grace period. Flush and leave now.
            logging.flush()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(exit_.code)
        raise
