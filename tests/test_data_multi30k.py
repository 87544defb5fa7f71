"""Tests for the Multi30k TFDS builder, built offline from the shared files."""

import gzip
import os
import socket
import time
from pathlib import Path

import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from tfattn.data import Multi30k
from tfattn.data import Multi30kDownloadError
from tfattn.data import ParallelDataError
from tfattn.data import load_multi30k
from tfattn.data import load_tokenized_references
from tfattn.data import multi30k

# The real corpus lives beside the repository, never inside it.
MULTI30K = Path(__file__).resolve().parents[1].parent / "shared/data/multi30k"
RAW = MULTI30K / "raw"

needs_corpus = pytest.mark.skipif(
    not (RAW / "train.en.gz").exists(),
    reason=f"Multi30k files not found under {MULTI30K}",
)


def _gz_lines(path):
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [line.strip() for line in f]


def _count(dataset):
    batches = dataset.batch(8192)
    return int(batches.reduce(0, lambda n, b: n + tf.shape(b["en"])[0]))


def _unused_local_url():
    """An http URL on 127.0.0.1 where nothing listens (refused at once)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/multi30k/"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The dataset prepared once for this module from the shared raw files."""
    if not (RAW / "train.en.gz").exists():
        pytest.skip(f"Multi30k files not found under {MULTI30K}")
    data_dir = tmp_path_factory.mktemp("tfds")
    builder = Multi30k(data_dir=str(data_dir))
    start = time.perf_counter()
    builder.download_and_prepare(
        download_config=tfds.download.DownloadConfig(manual_dir=str(RAW))
    )
    seconds = time.perf_counter() - start
    print(f"Multi30k prepared in {seconds:.1f} s")
    return builder, data_dir


@needs_corpus
def test_split_sizes(built):
    builder, _ = built
    splits = builder.info.splits
    assert splits["train"].num_examples == 29_000
    assert splits["validation"].num_examples == 1_014
    assert splits["test"].num_examples == 1_000
    # TFDS counted the records it wrote; read the small splits back in full.
    for split in ("validation", "test"):
        assert (
            _count(builder.as_dataset(split=split))
            == splits[split].num_examples
        )


@needs_corpus
def test_examples_keep_file_order(built):
    builder, _ = built
    for split, stem in (("train", "train"), ("test", "test_2016_flickr")):
        en = _gz_lines(RAW / f"{stem}.en.gz")
        de = _gz_lines(RAW / f"{stem}.de.gz")
        first = next(iter(builder.as_dataset(split=f"{split}[:1]")))
        assert first["en"].numpy().decode("utf-8") == en[0]
        assert first["de"].numpy().decode("utf-8") == de[0]
        last = next(iter(builder.as_dataset(split=f"{split}[-1:]")))
        assert last["en"].numpy().decode("utf-8") == en[-1]
        assert last["de"].numpy().decode("utf-8") == de[-1]
    assert en[0] == "A man in an orange hat starring at something."


@needs_corpus
def test_load_multi30k_reuses_prepared_data(built):
    _, data_dir = built
    # No manual_dir and no network: only the prepared data can serve this.
    ds = load_multi30k("validation", data_dir=str(data_dir))
    assert set(ds.element_spec) == {"en", "de"}
    assert ds.element_spec["en"].dtype == tf.string
    assert _count(ds) == 1_014
    assert _count(load_multi30k("train[:100]", data_dir=str(data_dir))) == 100


def test_invalid_split_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="argument `split`"):
        load_multi30k("val", data_dir=str(tmp_path))


def test_download_failure_says_how_to_use_manual_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(Multi30k, "url_base", _unused_local_url())
    start = time.perf_counter()
    with pytest.raises(Multi30kDownloadError) as info:
        load_multi30k("test", data_dir=str(tmp_path / "data"))
    assert time.perf_counter() - start < 10
    message = str(info.value)
    assert "Downloading the Multi30k files" in message
    assert "failed" in message
    assert "--manual_dir=" in message
    assert "train.en.gz" in message and "test_2016_flickr.de.gz" in message
    assert "another dataset" in message
    # Nothing half-built is left behind.
    assert not list((tmp_path / "data").glob("multi30k/*"))


def test_download_manager_failure_is_reported(tmp_path, monkeypatch):
    # The host answers, but the download itself fails.
    monkeypatch.setattr(multi30k, "_check_reachable", lambda url, timeout: None)

    def fail(self, urls):
        raise ConnectionError("connection reset by peer")

    monkeypatch.setattr(tfds.download.DownloadManager, "download", fail)
    manual = tmp_path / "manual"
    manual.mkdir()
    (manual / "train.en.gz").write_bytes(gzip.compress(b"x\n"))
    with pytest.raises(Multi30kDownloadError) as info:
        load_multi30k(
            "test", data_dir=str(tmp_path / "data"), manual_dir=str(manual)
        )
    message = str(info.value)
    assert "connection reset by peer" in message
    assert f"manual directory {manual} lacks train.de.gz" in message
    assert "train.en.gz," not in message.split("lacks")[1].split(".\n")[0]


def test_manual_files_are_checked(tmp_path, monkeypatch):
    monkeypatch.setattr(Multi30k, "url_base", _unused_local_url())
    manual = tmp_path / "manual"
    manual.mkdir()
    for name in multi30k.FILENAMES:
        (manual / name).write_bytes(gzip.compress(b"a line\n"))
    with pytest.raises(ParallelDataError, match="SHA-256"):
        load_multi30k(
            "test", data_dir=str(tmp_path / "data"), manual_dir=str(manual)
        )


@needs_corpus
def test_checksums_match_shared_sums():
    sums = {}
    for line in (MULTI30K / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split()
        sums[name] = digest
    for name, digest in multi30k._SHA256.items():
        assert sums["raw/" + name[: -len(".gz")]] == digest


@needs_corpus
def test_tokenized_references():
    refs = load_tokenized_references("test", "de", MULTI30K)
    assert len(refs) == 1_000
    # The README's check on the German test reference length.
    assert sum(len(r.split()) for r in refs) == 12_103
    assert refs == load_tokenized_references("test", "de", MULTI30K / "tok")
    assert refs[0] == refs[0].lower()
    assert len(load_tokenized_references("validation", "en", MULTI30K)) == 1_014


def test_tokenized_references_errors(tmp_path):
    with pytest.raises(
        FileNotFoundError, match="test_2016_flickr.lc.norm.tok.en"
    ):
        load_tokenized_references("test", "en", tmp_path)
    with pytest.raises(ValueError, match="argument `language`"):
        load_tokenized_references("test", "fr", tmp_path)
    (tmp_path / "val.lc.norm.tok.en").write_text("a b\n\nc\n")
    with pytest.raises(
        ParallelDataError, match=r"val.lc.norm.tok.en:2: empty line"
    ):
        load_tokenized_references("validation", "en", tmp_path)
    assert os.listdir(tmp_path) == ["val.lc.norm.tok.en"]
