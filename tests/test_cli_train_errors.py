"""train.py's error boundary: each expected failure is one line, `Error:
...`, naming the file, line, flag or field, with exit status 2 (usage) or 1
(the rest), no traceback, and nothing written."""

import contextlib
import io
import re
import sys

import pytest
import tensorflow as tf
from absl import flags

import train
from tests.test_cli_train import saved_flags  # noqa: F401 (autouse)
from tfattn.training import checkpoints
from tfattn.decoding import evaluation
from tfattn import export
from tfattn import losses
from tfattn.training import run_dir
from tfattn import training

FLAGS = flags.FLAGS


def _main(*args):
    """train.main with these flags; returns (status, the one error line).
    A training mode runs without samples (--samples=0)."""
    FLAGS.unparse_flags()
    training_mode = not any(a in ("--mode=eval", "--mode=export")
                            for a in args)
    quiet = ["--samples=0"] if training_mode else []
    FLAGS(["train.py", *quiet, "--progress_bar=false", *args])
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            train.main(["train.py"])
    except SystemExit as exit_:
        code = exit_.code
        if isinstance(code, str):
            return 1, code
        # A usage error (2) prints its line to standard error.
        lines = [x for x in err.getvalue().splitlines()
                 if x.startswith("Error: ")]
        return code, (lines[-1] if lines else None)
    finally:
        sys.stderr.write(err.getvalue())
    return 0, None


def _corpus(prefix, source, target):
    for lang, data in (("en", source), ("de", target)):
        mode = "wb" if isinstance(data, bytes) else "w"
        with open(f"{prefix}.train.{lang}", mode) as f:
            f.write(data)


@pytest.mark.parametrize(
    "source, target, message",
    [
        (
            "a b\nc d\ne f\n",
            "x\ny\n",
            r"corpus.train.en has 3 lines but .*corpus.train.de has 2 lines",
        ),
        ("a b\n\nc d\n", "x\ny\nz\n", r"corpus.train.en:2: empty line"),
        (
            b"a \xff b\nc\n",
            "x\ny\n",
            r"corpus.train.en:1: invalid UTF-8 at byte 3",
        ),
    ],
)
def test_bad_text_files_name_the_file_and_line(
    tmp_path, source, target, message
):
    _corpus(tmp_path / "corpus", source, target)
    model_dir = tmp_path / "run"
    status, line = _main(
        "--hparams=tiny",
        f"--model_dir={model_dir}",
        f"--dataset=textfiles:{tmp_path / 'corpus'}",
        "--source_language=en",
        "--target_language=de",
    )
    assert status == 1
    assert line.startswith("Error: ") and "\n" not in line
    assert re.search(message, line), line
    assert not model_dir.exists()


def test_a_directory_where_a_file_should_be(tmp_path):
    (tmp_path / "corpus.train.en").mkdir()
    (tmp_path / "corpus.train.de").write_text("x\n")
    status, line = _main(
        "--hparams=tiny",
        f"--model_dir={tmp_path / 'run'}",
        f"--dataset=textfiles:{tmp_path / 'corpus'}",
        "--source_language=en",
        "--target_language=de",
    )
    assert status == 1
    assert line == (
        f"Error: {tmp_path / 'corpus.train.en'}: is a directory, "
        "expected a text file"
    )


def test_missing_eval_split_is_found_before_training(tmp_path):
    """--mode=all scores the test split: its absence is an error before
    training, not after it."""
    _corpus(tmp_path / "corpus", "a b\nc d\n", "x y\nz w\n")
    model_dir = tmp_path / "run"
    status, line = _main(
        "--hparams=tiny",
        f"--model_dir={model_dir}",
        f"--dataset=textfiles:{tmp_path / 'corpus'}",
        "--source_language=en",
        "--target_language=de",
        "--mode=all",
    )
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
    status, line = _main(
        "--hparams=tiny",
        f"--model_dir={tmp_path / 'run'}",
        "--dataset=multi30k",
        f"--manual_dir={manual}",
        f"--data_dir={tmp_path / 'tfds'}",
    )
    assert status == 1
    assert re.search(
        rf"{manual}/\w+\.(en|de)\.gz: is not a whole gzip "
        "file",
        line,
    ), line
    assert not (tmp_path / "run").exists()


def test_a_vocabulary_the_corpus_cannot_support_writes_nothing(tmp_path):
    letters = "".join(chr(c) for c in range(ord("a"), ord("z") + 1))
    _corpus(
        tmp_path / "corpus",
        f"{letters}\n{letters.upper()}\n",
        f"{letters}\n{letters}\n",
    )
    model_dir = tmp_path / "run"
    status, line = _main(
        "--hparams=tiny",
        f"--model_dir={model_dir}",
        "--hparams_overrides=vocab_size=10",
        f"--dataset=textfiles:{tmp_path / 'corpus'}",
        "--source_language=en",
        "--target_language=de",
    )
    assert status == 1
    # Named as the command line sets it (issue 42), not as an argument.
    assert ("the hparams field `vocab_size` (set it with "
            "--hparams_overrides=vocab_size=...), expected at least") in line
    assert not model_dir.exists()


def test_hparams_that_cannot_fit_in_memory_are_refused(tmp_path):
    model_dir = tmp_path / "run"
    status, line = _main(
        "--hparams=tiny",
        f"--model_dir={model_dir}",
        "--hparams_overrides=num_layers=1000000000",
    )
    assert status == 1
    assert line.startswith("Error: Training these hparams needs about ")
    assert "GiB" in line and "Lower tokens_per_batch" in line
    assert not model_dir.exists()


def test_the_model_dir_is_a_file(tmp_path):
    path = tmp_path / "run"
    path.write_text("x")
    status, line = _main(
        "--hparams=tiny", f"--model_dir={path}", "--train_steps=1"
    )
    assert status == 1
    assert line == (
        f"Error: {path}: is a file, expected a model directory "
        "(choose another --model_dir)"
    )


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
        train._parse_flags(
            [
                "train.py",
                "--hparams=tiny",
                "--hparams_overrides=num_layers=" + "9" * 5000,
            ]
        )
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and len(err) < 1000
    assert "`num_layers`" in err and "at most 18 digits" in err
    assert "(5,000 characters)" in err


def test_an_unexpected_error_is_one_line_unless_debug(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("something internal")

    monkeypatch.setattr(training, "train_prepared", broken)
    status, line = _main("--hparams=tiny", f"--model_dir={tmp_path}")
    assert status == 1
    assert line == (
        "Error: unexpected RuntimeError: something internal "
        "(rerun with --debug for the traceback)"
    )
    FLAGS.unparse_flags()
    FLAGS(["train.py", "--hparams=tiny", f"--model_dir={tmp_path}", "--debug"])
    with pytest.raises(RuntimeError, match="something internal"):
        train.main(["train.py"])


def test_a_bad_flag_prints_one_line_not_the_help(tmp_path, capsys):
    """A value absl itself refuses (not a validator): one line on standard
    error, status 2, not the help, and nothing written. In this process,
    through `train._parse_flags` (what `train.run` parses with); train.py
    as a program ends a bad flag the same way in
    test_cli_train.py::test_bad_input_exits_non_zero_with_a_clear_message.
    """
    with pytest.raises(SystemExit) as exit_info:
        train._parse_flags(
            [
                "train.py",
                "--hparams=tiny",
                "--mode=dance",
                f"--model_dir={tmp_path / 'run'}",
            ]
        )
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "Error: flag --mode=dance: value should be one of "
        "<train|eval|export|all> (python train.py --helpfull lists the "
        "flags)"
    ]
    assert not (tmp_path / "run").exists()


def _oversized_from_the_sixth_step(loss):
    """`loss` whose graph, from its sixth run on, allocates a 4 TiB
    tensor: a real out-of-memory error from inside the training step."""
    runs = tf.Variable(0, dtype=tf.int64, trainable=False)

    def wasteful(*args, **kwargs):
        sums = loss(*args, **kwargs)
        runs.assign_add(1)
        size = tf.where(
            runs > 5, tf.constant(2**40, tf.int64), tf.constant(1, tf.int64)
        )
        waste = tf.reduce_sum(tf.zeros(tf.reshape(size, [1]), sums.loss.dtype))
        return sums._replace(loss=sums.loss + 0.0 * waste)

    return wasteful


@pytest.mark.slow
def test_out_of_memory_is_one_line_and_keeps_the_last_checkpoint(
    tmp_path, monkeypatch
):
    model_dir = tmp_path / "run"
    tiny = (
        "--hparams=tiny",
        f"--model_dir={model_dir}",
        "--hparams_overrides=num_layers=1,checkpoint_every_steps=2",
    )
    loss = losses.smoothed_cross_entropy_sums
    monkeypatch.setattr(
        losses,
        "smoothed_cross_entropy_sums",
        _oversized_from_the_sixth_step(loss),
    )
    status, line = _main(*tiny, "--train_steps=8")
    assert status == 1 and "\n" not in line
    assert line.startswith(
        "Error: out of memory while training (a tensor of shape "
        "[1099511627776] did not fit): lower batch_size (now 64), e.g. "
        "--hparams_overrides=batch_size=32, or max_train_length (now "
    )
    assert (
        "run the same command again (it resumes from ckpt-4, which is "
        "kept)" in line
    )
    # Step 5 ran, step 6 did not fit: nothing was saved after ckpt-4, which
    # still restores whole.
    assert checkpoints.step_of(checkpoints.latest(str(model_dir))) == 4
    model, _, _ = run_dir.restore_model(str(model_dir))
    assert model.count_params() > 0
    # As the message says: a smaller batch resumes from there.
    monkeypatch.setattr(losses, "smoothed_cross_entropy_sums", loss)
    status, _ = _main(
        *tiny[:2],
        "--hparams_overrides=num_layers=1,"
        "checkpoint_every_steps=2,batch_size=32",
        "--train_steps=6",
    )
    assert status == 0
    assert checkpoints.step_of(checkpoints.latest(str(model_dir))) == 6
    assert run_dir.load_saved_hparams(str(model_dir)).batch_size == 32
    # Out of memory while evaluating or exporting: one line, nothing
    # replaced.
    for patched, name, mode, what in (
        (evaluation, "evaluate", "eval", "translating the test split"),
        (export, "export_translator", "export", "exporting"),
    ):
        monkeypatch.setattr(patched, name, _raises_out_of_memory)
        status, line = _main(f"--model_dir={model_dir}", f"--mode={mode}")
        assert status == 1 and "\n" not in line
        assert line.startswith(
            f"Error: out of memory while {what} (a "
            "tensor of shape [64, 4, 70, 8000] did not "
            "fit): "
        ), line
    assert not (model_dir / "export").exists()


def _raises_out_of_memory(*args, **kwargs):
    raise tf.errors.ResourceExhaustedError(
        None,
        None,
        "Graph execution error:\n\nOOM when allocating tensor "
        "with shape[64,4,70,8000] and type float",
    )


# Issue 57, item 3: every refusal before work, the flag and the reason
# first, in one line.
