"""train.py's error boundary: each expected failure is one line, `Error:
...`, naming the file, line, flag or field, with exit status 2 (usage) or 1
(the rest), no traceback, and nothing written."""

import re
import subprocess
import sys

import pytest
from absl import flags

import train
from tests.test_train_cli import REPO
from tests.test_train_cli import saved_flags  # noqa: F401 (autouse)
from tfattn import training

FLAGS = flags.FLAGS


def _main(*args):
    """train.main with these flags; returns (status, the one error line)."""
    FLAGS.unparse_flags()
    FLAGS(["train.py", "--samples=0", "--progress_bar=false", *args])
    with pytest.raises(SystemExit) as exit_info:
        train.main(["train.py"])
    code = exit_info.value.code
    return (1, code) if isinstance(code, str) else (code, None)


def _corpus(prefix, source, target):
    for lang, data in (("en", source), ("de", target)):
        mode = "wb" if isinstance(data, bytes) else "w"
        with open(f"{prefix}.train.{lang}", mode) as f:
            f.write(data)


@pytest.mark.parametrize("source, target, message", [
    ("a b\nc d\ne f\n", "x\ny\n",
     r"corpus.train.en has 3 lines but .*corpus.train.de has 2 lines"),
    ("a b\n\nc d\n", "x\ny\nz\n", r"corpus.train.en:2: empty line"),
    (b"a \xff b\nc\n", "x\ny\n", r"corpus.train.en:1: invalid UTF-8 at byte 3"),
])
def test_bad_text_files_name_the_file_and_line(tmp_path, source, target,
                                               message):
    _corpus(tmp_path / "corpus", source, target)
    model_dir = tmp_path / "run"
    status, line = _main("--hparams=tiny", f"--model_dir={model_dir}",
                         f"--dataset=textfiles:{tmp_path / 'corpus'}",
                         "--source_language=en", "--target_language=de")
    assert status == 1
    assert line.startswith("Error: ") and "\n" not in line
    assert re.search(message, line), line
    assert not model_dir.exists()


def test_a_directory_where_a_file_should_be(tmp_path):
    (tmp_path / "corpus.train.en").mkdir()
    (tmp_path / "corpus.train.de").write_text("x\n")
    status, line = _main("--hparams=tiny", f"--model_dir={tmp_path / 'run'}",
                         f"--dataset=textfiles:{tmp_path / 'corpus'}",
                         "--source_language=en", "--target_language=de")
    assert status == 1
    assert line == (f"Error: {tmp_path / 'corpus.train.en'}: is a directory, "
                    "expected a text file")


def test_missing_eval_split_is_found_before_training(tmp_path):
    """--mode=all scores the test split: its absence is an error before
    training, not after it."""
    _corpus(tmp_path / "corpus", "a b\nc d\n", "x y\nz w\n")
    model_dir = tmp_path / "run"
    status, line = _main("--hparams=tiny", f"--model_dir={model_dir}",
                         f"--dataset=textfiles:{tmp_path / 'corpus'}",
                         "--source_language=en", "--target_language=de",
                         "--mode=all")
    assert status == 1
    assert "No parallel text files for split 'test'" in line
    assert "--eval_split=validation" in line
    assert not model_dir.exists()


def test_multi30k_files_that_are_not_gzip_are_named(tmp_path):
    manual = tmp_path / "raw"
    manual.mkdir()
    for split in ("train", "val", "test_2016_flickr"):
        for lang in ("en", "de"):
            (manual / f"{split}.{lang}.gz").write_bytes(b"not gzip\n")
    status, line = _main("--hparams=tiny", f"--model_dir={tmp_path / 'run'}",
                         "--dataset=multi30k", f"--manual_dir={manual}",
                         f"--data_dir={tmp_path / 'tfds'}")
    assert status == 1
    assert re.search(rf"{manual}/\w+\.(en|de)\.gz: is not a whole gzip "
                     "file", line), line
    assert not (tmp_path / "run").exists()


def test_a_vocabulary_the_corpus_cannot_support_writes_nothing(tmp_path):
    letters = "".join(chr(c) for c in range(ord("a"), ord("z") + 1))
    _corpus(tmp_path / "corpus", f"{letters}\n{letters.upper()}\n",
            f"{letters}\n{letters}\n")
    model_dir = tmp_path / "run"
    status, line = _main("--hparams=tiny", f"--model_dir={model_dir}",
                         "--hparams_overrides=vocab_size=10",
                         f"--dataset=textfiles:{tmp_path / 'corpus'}",
                         "--source_language=en", "--target_language=de")
    assert status == 1
    assert "`vocab_size`, expected at least" in line
    assert not model_dir.exists()


def test_hparams_that_cannot_fit_in_memory_are_refused(tmp_path):
    model_dir = tmp_path / "run"
    status, line = _main("--hparams=tiny", f"--model_dir={model_dir}",
                         "--hparams_overrides=num_layers=1000000000")
    assert status == 1
    assert "These hparams need at least" in line and "GiB to train" in line
    assert not model_dir.exists()


def test_the_model_dir_is_a_file(tmp_path):
    path = tmp_path / "run"
    path.write_text("x")
    status, line = _main("--hparams=tiny", f"--model_dir={path}",
                         "--train_steps=1")
    assert status == 1
    assert line == (f"Error: {path}: is a file, expected a model directory "
                    "(choose another --model_dir)")


def test_usage_errors_exit_2_with_one_line(tmp_path, capsys):
    status, _ = _main(f"--model_dir={tmp_path}")  # neither --hparams ...
    assert status == 1  # ... nor hparams.json: a missing file, not usage
    FLAGS.unparse_flags()
    FLAGS(["train.py"])
    with pytest.raises(SystemExit) as exit_info:
        train.main(["train.py", "stray"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == "Error: unexpected arguments: stray\n"


def test_a_huge_override_is_cut_in_the_message(capsys):
    with pytest.raises(SystemExit) as exit_info:
        train._parse_flags(["train.py", "--hparams=tiny",
                            "--hparams_overrides=num_layers=" + "9" * 5000])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and len(err) < 1000
    assert "`num_layers`" in err and "at most 18 digits" in err
    assert "(5,000 characters)" in err


def test_an_unexpected_error_is_one_line_unless_debug(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("something internal")

    monkeypatch.setattr(training, "train", broken)
    status, line = _main("--hparams=tiny", f"--model_dir={tmp_path}")
    assert status == 1
    assert line == ("Error: unexpected RuntimeError: something internal "
                    "(rerun with --debug for the traceback)")
    FLAGS.unparse_flags()
    FLAGS(["train.py", "--hparams=tiny", f"--model_dir={tmp_path}",
           "--debug"])
    with pytest.raises(RuntimeError, match="something internal"):
        train.main(["train.py"])


@pytest.mark.slow
def test_a_bad_flag_prints_one_line_not_the_help(tmp_path):
    out = subprocess.run(
        [sys.executable, "train.py", "--hparams=tiny", "--mode=dance",
         f"--model_dir={tmp_path / 'run'}"],
        cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "Error: flag --mode=dance: value should be one of "
        "<train|eval|export|all> (python train.py --helpfull lists the "
        "flags)"]
    assert not (tmp_path / "run").exists()
