"""Nothing lost in a model directory: one process at a time (`run_dir.hold`),
checkpoints found without their index and past a truncated one
(`tfattn.training.checkpoints`), and no restart from step 0 over trained
checkpoints."""

import json
import logging
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from tests.test_training_loop import TEST_HPARAMS
from tests.test_training_loop import checkpoint_steps
from tests.test_training_loop import checkpoint_value
from tfattn.training import checkpoints
from tfattn.training import run_dir
from tfattn import training

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _write_checkpoints(model_dir, steps=(1, 2, 3)):
    """ckpt-N files of one variable holding N, with their index."""
    value = tf.Variable(0.0)
    step = tf.Variable(0, dtype=tf.int64)
    manager = tf.train.CheckpointManager(
        tf.train.Checkpoint(value=value),
        str(model_dir),
        max_to_keep=None,
        checkpoint_name="ckpt",
        step_counter=step,
    )
    for n in steps:
        value.assign(float(n))
        manager.save(checkpoint_number=n)
    return [str(model_dir / f"ckpt-{n}") for n in steps]


def _truncate(prefix):
    (data,) = tf.io.gfile.glob(prefix + ".data-*")
    with open(data, "r+b") as f:
        f.truncate(2)


def test_checkpoints_are_found_without_their_index(tmp_path, caplog):
    paths = _write_checkpoints(tmp_path)
    os.remove(tmp_path / "checkpoint")
    assert tf.train.latest_checkpoint(str(tmp_path)) is None  # TF's view
    with caplog.at_level(logging.WARNING):
        assert checkpoints.all_checkpoints(tmp_path) == paths
    assert "no readable `checkpoint` index" in caplog.text
    assert checkpoints.latest(str(tmp_path)) == paths[-1]
    checkpoints.write_index(str(tmp_path), paths[-1])
    assert tf.train.latest_checkpoint(str(tmp_path)) == paths[-1]
    assert (
        list(
            tf.train.get_checkpoint_state(
                str(tmp_path)
            ).all_model_checkpoint_paths
        )
        == paths
    )


def test_an_unreadable_index_counts_as_missing(tmp_path):
    paths = _write_checkpoints(tmp_path)
    (tmp_path / "checkpoint").write_bytes(b"\xff\xfe not a proto {{{")
    assert checkpoints.latest(str(tmp_path)) == paths[-1]


def test_a_truncated_latest_checkpoint_falls_back_by_name(tmp_path, caplog):
    paths = _write_checkpoints(tmp_path)
    _truncate(paths[-1])
    assert checkpoints.unreadable(paths[-1])
    with caplog.at_level(logging.WARNING):
        assert checkpoints.latest(str(tmp_path)) == paths[1]
    assert f"Using {paths[1]}: the newer {paths[2]} do not read back" in (
        caplog.text
    )
    checkpoints.write_index(str(tmp_path), paths[1])
    assert tf.train.latest_checkpoint(str(tmp_path)) == paths[1]


def test_no_readable_checkpoint_is_an_error_naming_them(tmp_path):
    paths = _write_checkpoints(tmp_path, steps=(4, 8))
    for path in paths:
        _truncate(path)
    with pytest.raises(
        ValueError,
        match=r"no checkpoint reads back whole: "
        f".*{paths[1]}: .*{paths[0]}: ",
    ):
        checkpoints.latest(str(tmp_path))
    assert checkpoints.latest(str(tmp_path / "empty")) is None


def _hold_in_another_process(model_dir):
    """`run_dir.hold(model_dir)` in a forked child, which starts with no
    directory held (`run_dir._held` empty, as in a fresh interpreter) and
    opens the lock file anew. Returns (its exit status, what it printed):
    3 and the `ModelDirInUse` message when refused. (A fork, not a fresh
    Python: the child needs no TensorFlow start of its own. A fresh
    train.py refused is test_train_py_on_a_model_dir_in_use_is_refused.)"""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # The child: never returns into pytest.
        status = 4
        try:
            os.close(read)
            run_dir._held.clear()
            try:
                with run_dir.hold(model_dir):
                    status = 0
            except run_dir.ModelDirInUse as error:
                os.write(write, str(error).encode())
                status = 3
        finally:
            os._exit(status)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        printed = pipe.read().decode()
    _, wait_status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(wait_status), printed


def test_the_lock_is_reentrant_and_refuses_another_process(tmp_path):
    model_dir = tmp_path / "run"
    with run_dir.hold(model_dir):
        with run_dir.hold(model_dir):  # the same process: fine
            pass
        status, printed = _hold_in_another_process(model_dir)
    assert status == 3, (status, printed)
    assert f"is in use by process {os.getpid()} on " in printed
    assert "use another --model_dir" in printed
    # Released: the lock can be taken again, and its file is gone, as is
    # the directory that holding it created.
    with run_dir.hold(model_dir):
        assert (model_dir / ".lock").exists()
    assert not model_dir.exists()
    model_dir.mkdir()
    (model_dir / "kept.txt").write_text("a run's file")
    with run_dir.hold(model_dir):
        pass
    assert os.listdir(model_dir) == ["kept.txt"]


def test_a_dead_process_lock_is_taken_over_with_a_warning(tmp_path, caplog):
    model_dir = tmp_path / "run"
    model_dir.mkdir()
    (model_dir / ".lock").write_text(
        json.dumps(
            {"pid": 4194303, "host": "gone", "command": "train.py --old"}
        )
    )
    with caplog.at_level(logging.WARNING):
        with run_dir.hold(model_dir):
            holder = json.loads((model_dir / ".lock").read_text())
    assert holder["pid"] == os.getpid()
    assert "Took over the lock" in caplog.text
    assert "process 4194303 on gone" in caplog.text


def test_the_model_dir_cannot_be_a_file(tmp_path):
    path = tmp_path / "run"
    path.write_text("not a directory")
    with pytest.raises(
        NotADirectoryError,
        match=f"{path}: is a file, expected a model directory",
    ):
        with run_dir.hold(path):
            pass


@pytest.mark.slow
def test_interrupted_run_resumes_without_the_index_and_past_a_truncated_one(
        tmp_path):
    """An interrupted run resumes at its last checkpoint, with the
    optimizer's state; and the deleted-index case that used to restart at
    step 0 and overwrite the trained checkpoints resumes at the newest
    readable one (here the interrupted run's), as does a run whose newest
    checkpoint is truncated. (One run serves both: the interrupt is
    test_training_loop.py's case, the index this module's.)"""
    def interrupt(step, logs):
        if step == 12:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        training.train(
            TEST_HPARAMS,
            "numbers",
            tmp_path,
            steps=15,
            verbose=0,
            on_step_end=interrupt,
        )
    assert checkpoint_steps(tmp_path) == [5, 10], "interrupted at step 12"
    trained = checkpoint_value(
        str(tmp_path / "ckpt-10"), "model/source_embedding"
    )

    os.remove(tmp_path / "checkpoint")
    seen = []
    result = training.train(
        None,
        "numbers",
        tmp_path,
        steps=15,
        verbose=0,
        on_step_end=lambda step, logs: seen.append(step),
    )
    assert (result.start_step, result.step) == (10, 15), (
        "resumed without the index")
    assert seen == list(range(11, 16))
    assert checkpoint_steps(tmp_path) == [5, 10, 15]
    np.testing.assert_array_equal(
        checkpoint_value(str(tmp_path / "ckpt-10"), "model/source_embedding"),
        trained,
        err_msg="the resumed run overwrote the trained checkpoint",
    )
    last = str(tmp_path / "ckpt-15")
    assert checkpoint_value(last, "step/") == 15
    # The optimizer's state was restored too: 10 + 5 updates.
    assert checkpoint_value(last, "optimizer/_iterations") == 15
    assert not np.array_equal(
        trained, checkpoint_value(last, "model/source_embedding")
    )

    _truncate(last)
    result = training.train(None, "numbers", tmp_path, steps=15, verbose=0)
    assert (result.start_step, result.step) == (10, 15), (
        "resumed past the truncated ckpt-15")
    assert checkpoints.unreadable(last) is None
    # Finished: a further call does nothing.
    again = training.train(None, "numbers", tmp_path, steps=15, verbose=0)
    assert (again.start_step, again.step, again.loss) == (15, 15, None)
    model, _, _ = run_dir.restore_model(str(tmp_path))
    assert model.built


@pytest.mark.slow
def test_train_py_on_a_model_dir_in_use_is_refused(tmp_path):
    """This process holds the lock, as a training train.py does (the SIGKILL
    test in test_cli_train.py reads a running train.py's lock); train.py on
    the same directory stops with one line naming the holder."""
    model_dir = tmp_path / "run"
    command = [
        sys.executable,
        "train.py",
        "--hparams=tiny",
        "--dataset=numbers",
        f"--model_dir={model_dir}",
        "--samples=0",
        "--progress_bar=false",
        "--train_steps=4",
    ]
    with run_dir.hold(model_dir):
        refused = subprocess.run(
            command, cwd=REPO, capture_output=True, text=True, timeout=300
        )
    assert not list(model_dir.glob("ckpt-*"))
    assert refused.returncode == 1
    line = refused.stderr.strip().splitlines()[-1]
    assert line.startswith("Error: ")
    assert f"is in use by process {os.getpid()} on " in line
    assert "Traceback" not in refused.stderr


def test_run_dir_hands_on_the_model_functions_of_model_io():
    from tfattn.training import model_io
    from tfattn.training.run_dir import build_model

    assert build_model is model_io.build_model
    assert run_dir.restore_model is model_io.restore_model
    assert run_dir.model_weights is model_io.model_weights
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        _ = run_dir.nothing
