"""Monolingual text files for language models, streamed.

One text per line, UTF-8 (a leading byte-order mark is dropped), lines
ending in `\\n` or `\\r\\n`; leading and trailing whitespace is removed.
`check_text_file` reads a file once, line by line, and raises
`textfiles.ParallelDataError` (a `ValueError` whose message starts with
`path:line:`) at the first empty line or invalid UTF-8; `text_dataset`
then streams the file with `tf.data.TextLineDataset`. Neither holds the
file in memory, so memory stays bounded whatever the corpus's size.
"""

import tensorflow as tf

from tfattn.data.textfiles import ParallelDataError

__all__ = ["check_text_file", "text_dataset"]

_BOM = b"\xef\xbb\xbf"


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
    path = str(path)
    if not tf.io.gfile.exists(path):
        raise ParallelDataError(path, "file not found")
    if tf.io.gfile.isdir(path):
        raise ParallelDataError(path, "is a directory, expected a text file")
    count = 0
    with tf.io.gfile.GFile(path, "rb") as f:
        for count, raw in enumerate(f, start=1):
            if count == 1 and raw.startswith(_BOM):
                raw = raw[len(_BOM):]
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise ParallelDataError(
                    path, f"invalid UTF-8 at byte {error.start + 1} of the "
                    f"line ({raw[error.start:error.end]!r}: {error.reason})",
                    line=count) from None
            if not text.strip():
                raise ParallelDataError(path, "empty line", line=count)
    if not count:
        raise ParallelDataError(path, "empty file")
    return count


def text_dataset(path):
    """The lines of a (checked) text file as `{'inputs': '', 'targets':
    line}` string scalars, streamed: the records of a language model's
    split (`tfattn.data.sources.load_split`).

    Args:
        path: str. A file that passed `check_text_file`.

    Returns:
        A `tf.data.Dataset` of dicts of `tf.string` scalars, in file order.
    """
    lines = tf.data.TextLineDataset(str(path))

    def record(line):
        line = tf.strings.regex_replace(line, "^\ufeff", "")
        return {"inputs": tf.constant(""), "targets": tf.strings.strip(line)}

    return lines.map(record, num_parallel_calls=tf.data.AUTOTUNE)
