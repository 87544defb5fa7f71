"""Tests for reading a user's own parallel text files."""

import re

import pytest
import tensorflow as tf

from tfattn.data import ParallelDataError
from tfattn.data import load_parallel
from tfattn.data import load_parallel_splits
from tfattn.data import parallel_dataset
from tfattn.data import read_lines
from tfattn.data import read_parallel_files


def _write(path, data):
    path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
    return path


def test_reads_aligned_pairs(tmp_path):
    _write(tmp_path / "train.en", "A dog runs.\nTwo  cats sleep .\n")
    _write(tmp_path / "train.de", "Ein Hund läuft.\nZwei Katzen schlafen.\n")
    pairs = load_parallel(tmp_path / "train", "en", "de")
    assert pairs == [
        ("A dog runs.", "Ein Hund läuft."),
        ("Two  cats sleep .", "Zwei Katzen schlafen."),
    ]


def test_line_endings_bom_and_whitespace(tmp_path):
    # CRLF endings, a byte-order mark, surrounding spaces, no final newline.
    src = _write(tmp_path / "a.en", b"\xef\xbb\xbf one \r\ntwo\r\n three")
    # U+2028 and U+0085 are not line breaks in this format.
    tgt = _write(tmp_path / "a.de", "eins\u2028x\nzwei\u0085y\ndrei\n")
    assert read_parallel_files(src, tgt) == [
        ("one", "eins\u2028x"),
        ("two", "zwei\u0085y"),
        ("three", "drei"),
    ]


def test_missing_file(tmp_path):
    _write(tmp_path / "train.en", "a\n")
    missing = tmp_path / "train.de"
    with pytest.raises(ParallelDataError) as info:
        load_parallel(tmp_path / "train", "en", "de")
    assert str(info.value) == f"{missing}: file not found"
    assert info.value.path == str(missing) and info.value.line is None
    assert isinstance(info.value, ValueError)
    with pytest.raises(ParallelDataError, match="train.fr: file not found"):
        load_parallel(tmp_path / "train", "fr", "en")


def test_directory_instead_of_file(tmp_path):
    (tmp_path / "x.en").mkdir()
    with pytest.raises(ParallelDataError, match="x.en: is a directory"):
        read_lines(tmp_path / "x.en")


def test_line_counts_differ(tmp_path):
    src = _write(tmp_path / "d.en", "a\nb\nc\n")
    tgt = _write(tmp_path / "d.de", "a\nb\n")
    with pytest.raises(ParallelDataError) as info:
        read_parallel_files(src, tgt)
    message = str(info.value)
    assert "line counts differ" in message
    assert f"{src} has 3 lines" in message
    assert f"{tgt} has 2 lines" in message


@pytest.mark.parametrize(
    "content, line",
    [
        ("a\n\nb\n", 2),
        ("a\nb\n   \t\n", 3),
        ("\na\n", 1),
        ("a\r\n\r\nb\r\n", 2),
        ("a\nb\n\n", 3),  # A blank line at the end is a line too.
    ],
)
def test_empty_line(tmp_path, content, line):
    path = _write(tmp_path / "e.en", content)
    with pytest.raises(ParallelDataError) as info:
        read_lines(path)
    assert str(info.value) == f"{path}:{line}: empty line"
    assert info.value.line == line


def test_empty_line_is_found_before_the_count_check(tmp_path):
    src = _write(tmp_path / "f.en", "a\n\nb\n")
    tgt = _write(tmp_path / "f.de", "a\nb\n")
    with pytest.raises(
        ParallelDataError, match=re.escape(f"{src}:2: empty line")
    ):
        read_parallel_files(src, tgt)


def test_invalid_utf8(tmp_path):
    path = _write(tmp_path / "g.de", b"gut\nschl\xe4ft\nok\n")  # Latin-1 byte.
    with pytest.raises(ParallelDataError) as info:
        read_lines(path)
    message = str(info.value)
    assert message.startswith(f"{path}:2: invalid UTF-8 at byte 5 of the line")
    assert "\\xe4" in message
    assert info.value.line == 2


def test_invalid_utf8_in_target_is_reported(tmp_path):
    src = _write(tmp_path / "h.en", "a\nb\n")
    tgt = _write(tmp_path / "h.de", b"a\n\xff\n")
    with pytest.raises(
        ParallelDataError, match=re.escape(f"{tgt}:2: invalid UTF-8")
    ):
        read_parallel_files(src, tgt)


def test_empty_file(tmp_path):
    path = _write(tmp_path / "i.en", "")
    with pytest.raises(
        ParallelDataError, match=re.escape(f"{path}: the file is empty")
    ):
        read_lines(path)


def test_splits_layout(tmp_path):
    for split, n in (("train", 3), ("validation", 1), ("test", 2)):
        _write(
            tmp_path / f"corpus.{split}.en",
            "".join(f"e{i}\n" for i in range(n)),
        )
        _write(
            tmp_path / f"corpus.{split}.de",
            "".join(f"d{i}\n" for i in range(n)),
        )
    splits = load_parallel_splits(tmp_path / "corpus", "en", "de")
    assert {k: len(v) for k, v in splits.items()} == {
        "train": 3,
        "validation": 1,
        "test": 2,
    }
    assert splits["test"] == [("e0", "d0"), ("e1", "d1")]
    only = load_parallel_splits(
        tmp_path / "corpus", "de", "en", splits=["train"]
    )
    assert only == {"train": [("d0", "e0"), ("d1", "e1"), ("d2", "e2")]}


def test_missing_split_is_an_error(tmp_path):
    _write(tmp_path / "c.train.en", "a\n")
    _write(tmp_path / "c.train.de", "b\n")
    with pytest.raises(
        ParallelDataError, match=r"c\.validation\.en: file not found"
    ):
        load_parallel_splits(tmp_path / "c", "en", "de")


def test_invalid_arguments(tmp_path):
    with pytest.raises(ValueError, match="argument `splits`"):
        load_parallel_splits(tmp_path / "c", "en", "de", splits="train")
    with pytest.raises(ValueError, match="argument `source_lang`"):
        load_parallel(tmp_path / "c", "", "de")
    with pytest.raises(ValueError, match="argument `split`"):
        parallel_dataset(tmp_path / "c", "en", "de", split=3)


def test_parallel_dataset(tmp_path):
    _write(tmp_path / "p.train.en", "one\ntwo\n")
    _write(tmp_path / "p.train.de", "eins\nzwei\n")
    ds = parallel_dataset(tmp_path / "p", "en", "de", split="train")
    assert ds.element_spec == {
        "inputs": tf.TensorSpec([], tf.string),
        "targets": tf.TensorSpec([], tf.string),
    }
    got = [
        (x["inputs"].decode(), x["targets"].decode())
        for x in ds.as_numpy_iterator()
    ]
    assert got == [("one", "eins"), ("two", "zwei")]


def test_the_training_dataset_streams_and_keeps_the_checks(tmp_path,
                                                           monkeypatch):
    """`parallel_dataset` (what training reads) never reads a file whole:
    `GFile.read` is forbidden, and the pairs and the line-level checks are
    those of the whole-file reader."""
    src = "\ufeff  one \r\ntwo\u2028half\nthree\n"
    tgt = "eins\nzwei\r\ndrei"
    _write(tmp_path / "c.en", src)
    _write(tmp_path / "c.de", tgt)
    whole = read_parallel_files(tmp_path / "c.en", tmp_path / "c.de")

    def refused(*args, **kwargs):
        raise AssertionError("a whole-file read")

    monkeypatch.setattr(tf.io.gfile.GFile, "read", refused)
    streamed = [(r["inputs"].decode(), r["targets"].decode()) for r in
                parallel_dataset(tmp_path / "c", "en", "de")
                .as_numpy_iterator()]
    assert streamed == whole
    _write(tmp_path / "d.en", "a\nb\n")
    _write(tmp_path / "d.de", "x\n\nz\n")
    with pytest.raises(ParallelDataError, match=r"d\.de:2: empty line"):
        parallel_dataset(tmp_path / "d", "en", "de")
    _write(tmp_path / "d.de", "x\n")
    with pytest.raises(ParallelDataError, match="has 2 lines but .* has 1"):
        parallel_dataset(tmp_path / "d", "en", "de")
