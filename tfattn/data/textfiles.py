"""A user's own parallel text files, checked line by line.

Layout. One split is a pair of files that share a prefix and differ only in
the language suffix: `PREFIX.SRC` and `PREFIX.TGT`, e.g. `corpus/train.en` and
`corpus/train.de` for the prefix `corpus/train`. Several splits share one
prefix and put the split name before the language: `PREFIX.{split}.{lang}`,
e.g. `corpus/data.train.en`, `corpus/data.validation.en` and
`corpus/data.test.en` for the prefix `corpus/data`. Line i of the source
file is the translation of line i of the target file. Files are UTF-8 (a
leading byte-order mark is dropped), one sentence per line, lines end in
`\\n` or `\\r\\n`, and the last line may or may not end in a newline. Leading
and trailing whitespace of each line is removed. Paths may be anything that
`tf.io.gfile` reads (local paths, `gs://...`).

Checks. Both files are checked completely before anything is returned
(`read_parallel_files` reads them whole; `parallel_dataset`, what training
reads, checks them in one streaming pass and then streams them with
`tf.data`, so its memory does not grow with the corpus), and every problem
raises `ParallelDataError` (a `ValueError`) whose message starts with
`path:line:` where a line is at fault:

- a missing file (or a directory where a file was expected);
- an empty file;
- an empty (or whitespace-only) line;
- bytes that are not valid UTF-8;
- source and target files with different line counts (both paths, both
  counts).
"""

import tensorflow as tf

from tfattn.utils.validation import invalid_argument

__all__ = [
    "DEFAULT_SPLITS",
    "ParallelDataError",
    "checked_line",
    "check_parallel_files",
    "decode_lines",
    "load_parallel",
    "load_parallel_splits",
    "parallel_dataset",
    "read_lines",
    "read_parallel_files",
    "stream_lines",
    "strip_line",
    "split_prefix",
]

DEFAULT_SPLITS = ("train", "validation", "test")


class ParallelDataError(ValueError):
    """A parallel corpus file is missing or malformed.

    The message reads `path: message`, or `path:line: message` with a line.

    Args:
        path: str or path-like. The file at fault.
        message: str. What is wrong with it.
        line: int or None. The 1-based line number at fault, if any.
            Defaults to `None`.

    Attributes:
        path: str. The file at fault.
        line: int or None. The 1-based line number at fault, if any.
    """

    def __init__(self, path, message, line=None):
        """Builds the message from the path, the line and `message`."""
        self.path = str(path)
        self.line = line
        where = self.path if line is None else f"{self.path}:{line}"
        super().__init__(f"{where}: {message}")


def decode_lines(data, path):
    """Splits raw file bytes into stripped, validated text lines.

    Args:
        data: bytes. The whole content of one file.
        path: str. The file's name, used in error messages only.

    Returns:
        A list of str, one per line, with surrounding whitespace removed.

    Raises:
        ParallelDataError: the file is empty, a line is empty, or a line is
            not valid UTF-8.
    """
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    # Split on "\n" only: str.splitlines() would also split inside a line at
    # U+2028, U+0085, form feeds and so on, shifting every later line number.
    raw_lines = data.split(b"\n")
    if raw_lines and raw_lines[-1] == b"":
        raw_lines.pop()  # The newline that ends the last line.
    if not raw_lines:
        raise ParallelDataError(path, "the file is empty")
    return [checked_line(raw, path, number)
            for number, raw in enumerate(raw_lines, start=1)]


def checked_line(raw, path, number):
    """One line's bytes (without its newline) as stripped text.

    Args:
        raw: bytes. The line (a trailing `\\r` is whitespace).
        path: str. The file, for error messages.
        number: int. The 1-based line number, for error messages.

    Returns:
        str. The decoded line, surrounding whitespace removed.

    Raises:
        ParallelDataError: the line is not UTF-8, or is empty.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ParallelDataError(
            path,
            f"invalid UTF-8 at byte {error.start + 1} of the line "
            f"({raw[error.start : error.end]!r}: {error.reason})",
            line=number,
        ) from None
    text = text.strip()
    if not text:
        raise ParallelDataError(path, "empty line", line=number)
    return text


def stream_lines(path):
    """Yields the checked lines of a file one at a time (as
    `decode_lines`, without holding the file): memory stays bounded.

    Args:
        path: str. Any path `tf.io.gfile` reads.

    Yields:
        str, each line stripped.

    Raises:
        ParallelDataError: missing, a directory, empty, or a bad line.
    """
    path = str(path)
    if not tf.io.gfile.exists(path):
        raise ParallelDataError(path, "file not found")
    if tf.io.gfile.isdir(path):
        raise ParallelDataError(path, "is a directory, expected a text file")
    number = 0
    with tf.io.gfile.GFile(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            if number == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
            yield checked_line(raw.rstrip(b"\n"), path, number)
    if not number:
        raise ParallelDataError(path, "the file is empty")


def check_parallel_files(source_path, target_path):
    """Checks two line-aligned files in one streaming pass (each line as
    `decode_lines` checks it, then equal line counts), holding one line of
    each at a time.

    Args:
        source_path, target_path: str. The two files.

    Returns:
        int. The number of line pairs.

    Raises:
        ParallelDataError: as `read_parallel_files`.
    """
    source_path, target_path = str(source_path), str(target_path)
    for path in (source_path, target_path):
        if not tf.io.gfile.exists(path):
            raise ParallelDataError(path, "file not found")
    counts = [0, 0]
    sources, targets = stream_lines(source_path), stream_lines(target_path)
    done = [False, False]
    while not all(done):
        for side, lines in ((0, sources), (1, targets)):
            if not done[side]:
                try:
                    next(lines)
                    counts[side] += 1
                except StopIteration:
                    done[side] = True
    if counts[0] != counts[1]:
        raise ParallelDataError(
            source_path,
            f"line counts differ: {source_path} has {counts[0]} lines "
            f"but {target_path} has {counts[1]} lines (line i of one "
            "file must translate line i of the other)",
        )
    return counts[0]


def read_lines(path):
    """Reads one text file with `decode_lines`' checks.

    Args:
        path: str or path-like. The file to read.

    Returns:
        A list of str, one per line.

    Raises:
        ParallelDataError: the file is missing, is a directory, or fails a
            check of `decode_lines`.
    """
    path = str(path)
    if not tf.io.gfile.exists(path):
        raise ParallelDataError(path, "file not found")
    if tf.io.gfile.isdir(path):
        raise ParallelDataError(path, "is a directory, expected a text file")
    with tf.io.gfile.GFile(path, "rb") as f:
        data = f.read()
    return decode_lines(data, path)


def read_parallel_files(source_path, target_path):
    """Reads two line-aligned files into (source, target) pairs.

    Both files are read and checked completely before anything is returned.

    Args:
        source_path: str or path-like. The source-language file.
        target_path: str or path-like. The target-language file.

    Returns:
        A list of (source, target) str tuples.

    Raises:
        ParallelDataError: a file is missing or malformed, or the line counts
            differ.
    """
    source_path, target_path = str(source_path), str(target_path)
    # Check both files exist before reading either, so that a missing target
    # is reported without first reading a large source.
    for path in (source_path, target_path):
        if not tf.io.gfile.exists(path):
            raise ParallelDataError(path, "file not found")
    sources = read_lines(source_path)
    targets = read_lines(target_path)
    if len(sources) != len(targets):
        raise ParallelDataError(
            source_path,
            f"line counts differ: {source_path} has {len(sources)} lines "
            f"but {target_path} has {len(targets)} lines (line i of one "
            "file must translate line i of the other)",
        )
    return list(zip(sources, targets))


def _check_lang(name, value):
    if not isinstance(value, str) or not value or "/" in value:
        raise invalid_argument(
            name, "a non-empty file suffix such as 'en'", value
        )
    return value.lstrip(".")


def load_parallel(prefix, source_lang, target_lang):
    """Reads one split from `PREFIX.SRC` and `PREFIX.TGT`.

    Args:
        prefix: str or path-like. The path without the language suffix,
            e.g. `"corpus/train"` for `corpus/train.en`.
        source_lang: str. The source suffix, e.g. `"en"`.
        target_lang: str. The target suffix, e.g. `"de"`.

    Returns:
        A list of (source, target) str tuples.

    Raises:
        ParallelDataError: see `read_parallel_files`.
    """
    source_lang = _check_lang("source_lang", source_lang)
    target_lang = _check_lang("target_lang", target_lang)
    prefix = str(prefix)
    return read_parallel_files(
        f"{prefix}.{source_lang}", f"{prefix}.{target_lang}"
    )


def split_prefix(prefix, split):
    """The prefix of one split's files `PREFIX.{split}.{lang}`.

    Args:
        prefix: str. The common prefix of the splits' files.
        split: str. The split name, e.g. `"train"`.

    Returns:
        str, `PREFIX.{split}`.
    """
    return f"{prefix}.{split}"


def load_parallel_splits(
    prefix, source_lang, target_lang, splits=DEFAULT_SPLITS
):
    """Reads several splits laid out as `PREFIX.{split}.{lang}`.

    Every requested split must exist; none is skipped silently.

    Args:
        prefix: str or path-like. The common prefix, e.g. `"corpus/data"` for
            `corpus/data.train.en`.
        source_lang: str. The source suffix, e.g. `"en"`.
        target_lang: str. The target suffix, e.g. `"de"`.
        splits: sequence of str. The split names to read. Defaults to
            `("train", "validation", "test")`.

    Returns:
        A dict from split name to a list of (source, target) str tuples.

    Raises:
        ValueError: `splits` is not a non-empty sequence of split names.
        ParallelDataError: see `read_parallel_files`.
    """
    if (
        isinstance(splits, str)
        or not splits
        or not all(isinstance(s, str) and s for s in splits)
    ):
        raise invalid_argument(
            "splits", "a non-empty sequence of split names", splits
        )
    return {
        split: load_parallel(
            split_prefix(str(prefix), split), source_lang, target_lang
        )
        for split in splits
    }


def parallel_dataset(prefix, source_lang, target_lang, split=None):
    """A `tf.data.Dataset` of `{'inputs', 'targets'}` string scalars.

    Args:
        prefix: str or path-like. See `load_parallel` (with `split=None`) and
            `load_parallel_splits` (with a split name).
        source_lang: str. The source suffix, e.g. `"en"`.
        target_lang: str. The target suffix, e.g. `"de"`.
        split: str or None. When given, reads `PREFIX.{split}.{lang}`;
            otherwise `PREFIX.{lang}`. Defaults to `None`.

    Returns:
        A `tf.data.Dataset` whose elements are dicts with `'inputs'` (source)
        and `'targets'` (target) `tf.string` scalars, in file order. The
        files are checked in one streaming pass first
        (`check_parallel_files`), then streamed by `tf.data`: memory does
        not grow with the corpus.

    Raises:
        ParallelDataError: see `read_parallel_files`.
    """
    if split is not None:
        if not isinstance(split, str) or not split:
            raise invalid_argument("split", "a split name or None", split)
        prefix = split_prefix(str(prefix), split)
    source_lang = _check_lang("source_lang", source_lang)
    target_lang = _check_lang("target_lang", target_lang)
    paths = [f"{prefix}.{source_lang}", f"{prefix}.{target_lang}"]
    check_parallel_files(*paths)
    lines = [tf.data.TextLineDataset(path) for path in paths]

    def record(source, target):
        return {"inputs": strip_line(source), "targets": strip_line(target)}

    return tf.data.Dataset.zip(tuple(lines)).map(
        record, num_parallel_calls=tf.data.AUTOTUNE)


def strip_line(line):
    """A `tf.string` line as `checked_line` reads it: a byte-order mark
    dropped, surrounding whitespace removed.

    Args:
        line: `tf.string` tensor. A line of a checked file.

    Returns:
        `tf.string` tensor of the same shape.
    """
    return tf.strings.strip(tf.strings.regex_replace(line, "^\ufeff", ""))
