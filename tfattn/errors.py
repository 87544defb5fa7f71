"""What the command lines count as an expected failure, and how they say it.

`train.py` and `python -m tfattn.visualize` end every expected failure with
one line, `Error: ...`, naming the file, flag or field (exit status 1; 2
for a command line that cannot work as given, `UsageError`), and show a
traceback only when asked (`--debug`). Expected failures are bad input and
an unusable environment: `ValueError` (bad values, undecodable text),
`OSError` (missing, unreadable or unwritable files and directories, bad
gzip files), `EOFError` (truncated archives) and TensorFlow's `OpError`
(unreadable checkpoints, data the input pipeline cannot parse).
"""

import re

import tensorflow as tf

# The longest message line printed, and the longest unbroken run of
# characters (a value echoed whole, such as a 1 MB override) kept in it.
_MAX_MESSAGE = 2000
_MAX_RUN = 120


class UsageError(ValueError):
    """A command line that cannot work as given (exit status 2)."""


EXPECTED = (ValueError, OSError, EOFError, tf.errors.OpError)


def _cut(match):
    run = match.group(0)
    return f"{run[:_MAX_RUN]}... ({len(run):,} characters)"


def describe(error):
    """`error` as one line that names what it can (file, op message)."""
    if isinstance(error, tf.errors.OpError):
        # The op's message, without the graph and stack lines that follow.
        text = error.message.strip().split("\n\n")[0]
    elif isinstance(error, OSError) and error.filename and error.strerror:
        # An OSError holds a filename only beside an errno and its strerror.
        text = f"{error.filename}: {error.strerror}"
    else:
        text = str(error) or type(error).__name__
    text = re.sub(r"\s*\n\s*", " ", text).strip()
    text = re.sub(rf"\S{{{_MAX_RUN + 1},}}", _cut, text)
    if len(text) > _MAX_MESSAGE:
        text = text[:_MAX_MESSAGE] + f"... ({len(text):,} characters)"
    return text
