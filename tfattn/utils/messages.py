"""An error as one line of text, for logs and command lines.

`describe(error)` names what it can: a TensorFlow op's message without its
graph and stack lines, the file of an `OSError`; terminal escapes are
removed and overlong text is cut, with its length said. The training
library reports unreadable checkpoints with it
(`tfattn.training.checkpoints`), and the command lines end every expected
failure with it (`tfattn.cli.errors`).
"""

import re

import tensorflow as tf

__all__ = ["describe"]

# The longest message line printed, and the longest unbroken run of
# characters (a value echoed whole, such as a 1 MB override) kept in it.
_MAX_MESSAGE = 2000
_MAX_RUN = 120
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def _cut(match):
    run = match.group(0)
    return f"{run[:_MAX_RUN]}... ({len(run):,} characters)"


def describe(error):
    """`error` as one line that names what it can (file, op message).

    Args:
        error: BaseException. The error to describe.

    Returns:
        str. One line without terminal escapes. A TensorFlow op's message
        (without its graph and stack lines), `FILE: STRERROR` for an
        `OSError` naming a file, else `str(error)` (or the type's name);
        long unbroken runs and lines over 2000 characters are cut, with
        their length said.
    """
    if isinstance(error, tf.errors.OpError):
        # The op's message, without the graph and stack lines that follow.
        text = error.message.strip().split("\n\n")[0]
    elif isinstance(error, OSError) and error.filename and error.strerror:
        # An OSError holds a filename only beside an errno and its strerror.
        text = f"{error.filename}: {error.strerror}"
    else:
        text = str(error) or type(error).__name__
    # Keras formats some messages with terminal bold; a log gets plain text.
    text = _ANSI.sub("", text)
    text = re.sub(r"\s*\n\s*", " ", text).strip()
    text = re.sub(rf"\S{{{_MAX_RUN + 1},}}", _cut, text)
    if len(text) > _MAX_MESSAGE:
        text = text[:_MAX_MESSAGE] + f"... ({len(text):,} characters)"
    return text
