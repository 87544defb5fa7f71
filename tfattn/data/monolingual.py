"""Monolingual text files for language models, streamed.

One text per line, with the checks of `tfattn.data.textfiles` (UTF-8, a
leading byte-order mark dropped, lines ending in `\\n` or `\\r\\n`,
surrounding whitespace removed, no empty line or file).
`check_text_file` reads a file once, line by line, and raises
`textfiles.ParallelDataError` (a `ValueError` whose message starts with
`path:line:`) at the first problem; `text_dataset` then streams the file
with `tf.data.TextLineDataset`. Neither holds the file in memory.
"""

import tensorflow as tf

from tfattn.data.textfiles import stream_lines
from tfattn.data.textfiles import strip_line

__all__ = ["check_text_file", "text_dataset"]


def check_text_file(path):
    """Checks a text file in one streaming pass.

    Args:
        path: str. Any path `tf.io.gfile` reads.

    Returns:
        int. The number of lines.

    Raises:
        ParallelDataError: the file is missing, a directory or empty, or a
            line is empty or not UTF-8 (the message names the line).
    """
    return sum(1 for _ in stream_lines(path))


def text_dataset(path):
    """The lines of a (checked) text file as `{'inputs': '', 'targets':
    line}` string scalars, streamed: the records of a language model's
    split (`tfattn.data.sources.load_split`).

    Args:
        path: str. A file that passed `check_text_file`.

    Returns:
        A `tf.data.Dataset` of dicts of `tf.string` scalars, in file order.
    """
    def record(line):
        return {"inputs": tf.constant(""), "targets": strip_line(line)}

    return tf.data.TextLineDataset(str(path)).map(
        record, num_parallel_calls=tf.data.AUTOTUNE)
