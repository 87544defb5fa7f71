"""The edges, tried from outside (issue 42): nothing left behind by a killed
or refused command, and errors that name what the caller passed. (The
serving engines' shared contract is `tests/test_export_contract.py`.)"""

import os
import signal
import subprocess
import sys
import textwrap
import time

import keras
import numpy as np
import pytest
import tensorflow as tf

import hparams
import tfattn
from tests import bounds
from tests.harness import copy_to_keras_attention
from tests.test_cli_train import REPO
from tests.test_cli_train import saved_flags  # noqa: F401 (autouse)
from tests.test_cli_train_errors import _main
from tfattn import config
from tfattn.cli import errors
from tfattn.utils import files
from tfattn.data import sources

HEX = "0123456789abcdef" * 2


def _dead_pid():
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


# ---------------------------------------------------------------------------
# Nothing left behind.


@pytest.mark.slow
def test_an_export_killed_mid_write_is_cleared_by_the_next(tmp_path):
    target = tmp_path / "out"
    script = textwrap.dedent(f"""
        import os, sys, time
        sys.path.insert(0, {REPO!r})
        from tfattn.utils import files
        with files.directory_written_atomically({str(target)!r}, False) as d:
            open(os.path.join(d, "half"), "w").write("half an export")
            print("WRITING", flush=True)
            time.sleep(120)
    """)
    writer = subprocess.Popen([sys.executable, "-c", script],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline().strip() == "WRITING"
        writer.send_signal(signal.SIGKILL)
        writer.wait(timeout=30)
    finally:
        writer.kill()
    left = [n for n in os.listdir(tmp_path) if n.startswith(".out.tmp-")]
    assert len(left) == 1 and not target.exists()
    with files.directory_written_atomically(str(target), False) as d:
        open(os.path.join(d, "whole"), "w").write("a whole export")
    assert sorted(os.listdir(tmp_path)) == ["out"]
    assert os.listdir(target) == ["whole"]


def test_only_stale_siblings_of_the_target_are_cleared(tmp_path):
    dead, live = _dead_pid(), os.getppid()
    names = {
        f".out.tmp-{dead}-{HEX}": False,  # a killed writer's: removed
        f".out.tmp-{live}-{HEX}": True,  # a running writer's: kept
        f".other.tmp-{dead}-{HEX}": True,  # another target's: kept
        f".out.tmp-{HEX}": True,  # an earlier version's, recent: kept
        f".out.tmp-{HEX[::-1]}": False,  # ... and an old one: removed
        ".out.notes": True,  # not a temporary name: kept
    }
    for name in names:
        (tmp_path / name).mkdir()
    old = time.time() - 3600
    os.utime(tmp_path / f".out.tmp-{HEX[::-1]}", (old, old))
    files.remove_stale_siblings(str(tmp_path / "out"))
    assert {n: (tmp_path / n).exists() for n in names} == names


def test_an_overwrite_killed_between_its_renames_is_undone(tmp_path):
    """Killed after the old export was moved aside and before the new one
    took its place: the next write puts the old one back first."""
    aside = tmp_path / f".out.old-{_dead_pid()}-{HEX}"
    aside.mkdir()
    (aside / "model").write_text("the old export")
    files.remove_stale_siblings(str(tmp_path / "out"))
    assert os.listdir(tmp_path) == ["out"]
    assert (tmp_path / "out" / "model").read_text() == "the old export"
    # Killed after both renames: the old one is only removed.
    aside.mkdir()
    files.remove_stale_siblings(str(tmp_path / "out"))
    assert os.listdir(tmp_path) == ["out"]


def test_an_unwritable_parent_is_named_by_the_callers_path(tmp_path,
                                                           monkeypatch):
    # Root ignores permission bits, so the refusal is made here.
    makedirs = os.makedirs

    def refuse(name, *args, **kwargs):
        if ".tmp-" in os.path.basename(name):
            raise PermissionError(13, "Permission denied", name)
        return makedirs(name, *args, **kwargs)

    monkeypatch.setattr(os, "makedirs", refuse)
    target = str(tmp_path / "out")
    with pytest.raises(PermissionError) as raised:
        with files.directory_written_atomically(target, False):
            pass
    assert raised.value.filename == target
    assert errors.describe(raised.value) == (
        f"{target}: Permission denied (cannot write beside it in "
        f"{tmp_path})")
    assert os.listdir(tmp_path) == []


@pytest.mark.slow
def test_a_refused_export_leaves_no_lock(tmp_path):
    model_dir = tmp_path / "run"
    model_dir.mkdir()
    (model_dir / "hparams.json").write_text(
        config.to_json(hparams.get("tiny")))
    status, line = _main("--hparams=tiny", "--dataset=numbers",
                         f"--model_dir={model_dir}", "--mode=export")
    assert status == 1 and "holds no trained model" in line
    assert os.listdir(model_dir) == ["hparams.json"]
    missing = tmp_path / "missing"
    status, _ = _main("--hparams=tiny", "--dataset=numbers",
                      f"--model_dir={missing}", "--mode=export")
    assert status == 1 and not missing.exists()


# ---------------------------------------------------------------------------
# Errors that name the caller's argument.


@pytest.fixture
def transformer():
    return tfattn.Transformer(20, num_layers=1, num_units=8, num_heads=2,
                              ffn_units=16, max_length=16)


@pytest.mark.parametrize(
    "source, target_in, match",
    [
        (np.ones((1, 4, 2), "int32"), None, r"`source`.*rank 2.*\(1, 4, 2\)"),
        (np.ones((4,), "int32"), None, r"`source`.*rank 2.*\(4,\)"),
        (None, np.ones((1, 3, 1), "int32"), r"`target_in`.*rank 2"),
        # dtype before rank:
        (tf.constant([[["a", "b"]]]), None, r"`source`.*dtype string"),
        (np.array([["a", "b"]]), None, r"`source`.*dtype <U1"),
        (np.ones((1, 4), "float32"), None, r"`source`.*dtype float32"),
    ],
)
def test_the_transformer_names_source_or_target_in(transformer, source,
                                                   target_in, match):
    good_source, good_target = np.ones((1, 4), "int32"), np.ones((1, 3),
                                                                 "int32")
    pair = (good_source if source is None else source,
            good_target if target_in is None else target_in)
    with pytest.raises(ValueError, match=match):
        transformer(pair)
    # Refused before it was built: the model still works.
    assert transformer((good_source, good_target)).shape == (1, 3, 20)


@pytest.mark.parametrize("argument", ["queries", "keys", "values"])
def test_attention_refuses_strings_naming_the_argument(argument):
    layer = tfattn.MultiHeadAttention(num_heads=2, key_dim=4)
    x = np.ones((1, 3, 4), "float32")
    inputs = dict(queries=x, keys=x, values=x)
    inputs[argument] = tf.constant([["a"] * 4] * 3)  # rank 2: dtype first
    with pytest.raises(ValueError, match=rf"`{argument}`.*dtype string"):
        layer(**inputs)


def test_a_subclass_with_keras_call_names_is_called_by_keyword():
    # Keras's own tests call the layer as layer(query=..., value=...):
    # the dtype check must not need a positional first input.
    from tests.peers.keras_mha_adapter import KerasAPIMultiHeadAttention

    x = np.ones((1, 3, 4), "float32")
    layer = KerasAPIMultiHeadAttention(num_heads=2, key_dim=2)
    assert tuple(layer(query=x, value=x).shape) == (1, 3, 4)
    fresh = KerasAPIMultiHeadAttention(num_heads=2, key_dim=2)
    with pytest.raises(ValueError, match=r"`value`.*dtype string"):
        fresh(query=x, value=tf.constant([["a"] * 4] * 3))


@pytest.mark.parametrize("dtype", ["bool", "int32"])
def test_attention_casts_bools_and_ints_as_keras_does(dtype):
    x = (np.arange(24).reshape(1, 6, 4) % 3 == 0).astype(dtype)
    ours = tfattn.MultiHeadAttention(num_heads=2, key_dim=2)
    ours(x.astype("float32"))
    theirs = keras.layers.MultiHeadAttention(num_heads=2, key_dim=2)
    theirs(x.astype("float32"), x.astype("float32"))
    copy_to_keras_attention(theirs, ours)
    (_, length, width), heads, key_dim = x.shape, 2, 2
    # The query/key/value projections (C), the scores (d), the softmax
    # over the keys and the weighted sum (2·T), the output projection
    # over the heads (H·d).
    bounds.assert_close(ours(x), theirs(x, x),
                        terms=width + key_dim + 2 * length + heads * key_dim)


def test_an_unknown_tfds_name_lists_the_closest_few():
    known = ["wmt14_translate", "wmt19_translate", "mnist", "imdb_reviews"]
    line = sources._tfds_name_error("wmt14_translat", ValueError("x"), known)
    assert line == (
        "Unknown TFDS dataset 'wmt14_translat' (no dataset of that name "
        "among the 4 of tensorflow-datasets; the closest: wmt14_translate, "
        "wmt19_translate)")
    line = sources._tfds_name_error("qqqqzzz", ValueError("x"), known)
    assert line.endswith("tfds.list_builders() lists them)")
    line = sources._tfds_name_error(
        "mnist/nope", ValueError("BuilderConfig nope not found. Here are "
                                 + "x" * 2000), known)
    assert line == ("TFDS dataset 'mnist/nope' does not load: "
                    "BuilderConfig nope not found")


@pytest.mark.slow
def test_the_cli_names_a_bad_tfds_dataset_in_a_short_line(tmp_path):
    status, line = _main("--hparams=tiny", "--dataset=tfds:wmt14_translat",
                         "--source_language=en", "--target_language=de",
                         f"--model_dir={tmp_path / 'run'}", "--mode=train")
    assert status == 1 and len(line) < 300, line
    assert "the closest: wmt14_translate" in line


def test_hparams_fields_are_named_as_overrides():
    line = ("Error: Received an invalid value for argument `vocab_size`, "
            "expected at least 104. Received: vocab_size=50")
    assert errors.name_hparams_fields(line, {"vocab_size"}) == (
        "Error: Received an invalid value for the hparams field "
        "`vocab_size` (set it with --hparams_overrides=vocab_size=...), "
        "expected at least 104. Received: vocab_size=50")
    assert errors.name_hparams_fields(line, {"num_units"}) == line


def test_command_line_errors_carry_no_terminal_codes():
    keras_style = ValueError(
        "Exception encountered when calling Dense.call().\n\n\x1b[1mdtype="
        "'string' is not a valid dtype.\x1b[0m\n\nArguments received")
    line, status = errors.command_line_failure(keras_style, "running", "")
    assert "\x1b" not in line and status == 1
    assert "\x1b[1m" not in errors.describe(keras_style)
    assert "dtype='string' is not a valid dtype." in line


def test_the_library_and_the_command_lines_describe_errors_alike():
    from tfattn.training import checkpoints
    from tfattn.utils import messages

    # One home (tfattn.utils.messages); the training library no longer
    # reaches up into tfattn.cli for it.
    assert errors.describe is messages.describe
    assert checkpoints.describe is messages.describe
    missing = FileNotFoundError(2, "No such file or directory", "/x/y")
    assert messages.describe(missing) == "/x/y: No such file or directory"


# TensorFlow's start-up banner, held back by default
# (tests/test_readme.py), is kept by TF_CPP_MIN_LOG_LEVEL=0 and by
# TFATTN_VERBOSE_IMPORT=1: test_cli_train.py's end-to-end test runs
# train.py under each (two of its runs), where this file ran
# `train.py --help` twice, a process each.
