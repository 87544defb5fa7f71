"""The model directory of a run: its lock, its hparams file and the paths
of what it holds::

    model_dir/hparams.json          the resolved hparams (reused on resume)
    model_dir/precision.json        the precision chosen at the first start
                                    (`tfattn.training.precision`, reused on
                                    resume)
    model_dir/spm.model, spm.vocab  the joint SentencePiece vocabulary
    model_dir/pretrained/           instead, a run started from a pretrained
                                    checkpoint (`train.py --init_from`):
                                    its tokenizer and architecture
                                    (`tfattn.interop.pretrained`)
    model_dir/ckpt-<step>.*         checkpoints (model, optimizer, step)
    model_dir/.lock                 who is using it (`hold`)

- `hold`: one process at a time writes into a model directory.
- `hparams_path` / `load_saved_hparams`: the saved hparams.
- `resolve_hparams`: the hparams a run uses, checked against the saved ones.

The model the directory holds (`build_model`, `model_weights`,
`restore_model`: the latest checkpoint's weights, or the average of the
last N's) lives in `tfattn.training.model_io`, which reads the directory
through this module; the three names are still reachable here
(`run_dir.restore_model(...)`), loaded on first use.
"""

import contextlib
import dataclasses
import fcntl
import importlib
import json
import os
import socket
import sys

import tensorflow as tf
from absl import logging

from tfattn import config
from tfattn.training import checkpoints

__all__ = [
    "HPARAMS_FILENAME",
    "CHECKPOINT_NAME",
    "LOCK_FILENAME",
    "ModelDirInUse",
    "hold",
    "hparams_path",
    "load_saved_hparams",
    "resolve_hparams",
]

HPARAMS_FILENAME = "hparams.json"
CHECKPOINT_NAME = checkpoints.CHECKPOINT_NAME
LOCK_FILENAME = ".lock"
_held = {}  # real path -> lock file descriptor, for re-entry
# Names that moved to `model_io`, handed on when first asked for: `model_io`
# imports this module, so importing it here at load would be a circle.
_MOVED = ("build_model", "model_weights", "restore_model")


def __getattr__(name):
    """`model_io`'s `build_model`, `model_weights`, `restore_model`."""
    if name in _MOVED:
        return getattr(importlib.import_module("tfattn.training.model_io"),
                       name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class ModelDirInUse(RuntimeError):
    """Another process holds the model directory."""


def _holder(fd):
    os.lseek(fd, 0, os.SEEK_SET)
    text = os.read(fd, 4096).decode("utf-8", "replace").strip()
    try:
        info = json.loads(text)
        return (f"process {info['pid']} on {info['host']} "
                f"({info['command'][:100]})")
    except (ValueError, KeyError, TypeError):
        return text[:100] or None


@contextlib.contextmanager
def hold(model_dir, chief=True):
    """Holds `model_dir` for this process while the block runs.

    A lock (`flock`) on `model_dir/.lock`, which names the holder: a second
    process that would write into the same directory (train, eval, export)
    is refused at once, naming the first. The kernel drops the lock when its
    process dies, so a killed run's lock is taken over (with a warning
    naming it). The lock file is removed on release, and a directory that
    this call created is removed too if nothing was written into it, so a
    refused command leaves nothing behind. Re-entrant in one process; only
    the chief of a multi-worker job holds it; not taken on remote
    filesystems (gs://...).

    Args:
        model_dir: str or path-like. The model directory; created if
            missing.
        chief: bool. Whether this process is the chief (only the chief
            holds the directory). Defaults to `True`.

    Yields:
        None. The block runs while the directory is held.

    Raises:
        ModelDirInUse: another process holds it.
        OSError: the directory cannot be created or written (e.g. a file is
            in the way, or no permission).
    """
    model_dir = str(model_dir)
    if not chief or "://" in model_dir:
        yield
        return
    path = os.path.realpath(model_dir)
    if path in _held:
        yield
        return
    if os.path.exists(path) and not os.path.isdir(path):
        raise NotADirectoryError(
            f"{model_dir}: is a file, expected a model directory (choose "
            "another --model_dir)")
    created = not os.path.exists(path)
    os.makedirs(path, exist_ok=True)
    lock_path = os.path.join(path, LOCK_FILENAME)
    try:
        fd = _lock(model_dir, lock_path)
    except BaseException:
        _remove_if_empty(path, created)
        raise
    previous = _holder(fd)
    if previous and not previous.startswith(f"process {os.getpid()} "):
        logging.warning("Took over the lock of %s, left by %s, which is no "
                        "longer running.", model_dir, previous)
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps({
        "pid": os.getpid(), "host": socket.gethostname(),
        "command": " ".join(sys.argv)}).encode(), 0)
    _held[path] = fd
    try:
        yield
    finally:
        del _held[path]
        # Removed while still locked, so no other process holds this file.
        with contextlib.suppress(FileNotFoundError):
            os.remove(lock_path)
        os.close(fd)
        _remove_if_empty(path, created)


def _lock(model_dir, lock_path):
    """An open descriptor of `lock_path`, locked by this process."""
    while True:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise ModelDirInUse(
                f"{model_dir} is in use by {holder or 'another process'}: "
                "wait for it to finish (or stop it), or use another "
                "--model_dir.") from None
        except OSError as error:  # A filesystem without locks: go on.
            logging.warning("%s: cannot lock (%s); not guarding against a "
                            "second run.", model_dir, error)
            return fd
        # The holder before us removes the file on release: a lock taken on
        # the removed file guards nothing, so take the new file's.
        try:
            if os.fstat(fd).st_ino == os.stat(lock_path).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)


def _remove_if_empty(path, created):
    if created:
        with contextlib.suppress(OSError):
            os.rmdir(path)


def hparams_path(model_dir):
    """The path of the hparams file of a model directory.

    Args:
        model_dir: str or path-like.

    Returns:
        str. `model_dir/hparams.json`.
    """
    return os.path.join(str(model_dir), HPARAMS_FILENAME)


def load_saved_hparams(model_dir):
    """The hparams saved in `model_dir`, or None when there are none.

    Args:
        model_dir: str or path-like.

    Returns:
        HParams or None.

    Raises:
        ValueError: the saved file does not parse (named in the message).
    """
    path = hparams_path(model_dir)
    if not tf.io.gfile.exists(path):
        return None
    with tf.io.gfile.GFile(path, "r") as f:
        try:
            return config.from_json(f.read())
        except ValueError as error:
            raise ValueError(f"{path}: {error}") from None


def resolve_hparams(model_dir, requested=None):
    """The hparams a run in `model_dir` uses.

    - No checkpoint yet (nothing trained, nothing to lose): `requested`, or
      the saved ones when `requested` is None.
    - A checkpoint: the saved ones. `requested`, when given, must agree with
      them in every field outside `config.RESUMABLE_FIELDS`; the requested
      resumable fields (e.g. a longer `train_steps`) are taken.

    Args:
        model_dir: str or path-like.
        requested: HParams or None. The hparams asked for; None takes the
            saved ones.

    Returns:
        HParams.

    Raises:
        ValueError: no hparams at all, a checkpoint without saved hparams,
            or fields that differ (listed with both values).
    """
    model_dir = str(model_dir)
    saved = load_saved_hparams(model_dir)
    if not checkpoints.exist(model_dir):
        if requested is None and saved is None:
            raise ValueError(
                f"{hparams_path(model_dir)} does not exist: name a hparams "
                "set for a new run (--hparams=NAME).")
        return requested or saved
    if saved is None:
        raise ValueError(
            f"{model_dir} holds checkpoints but no {HPARAMS_FILENAME}: its "
            "hparams are unknown, so it cannot be resumed. Train in a new "
            "--model_dir.")
    if requested is None:
        return saved
    differing = config.differences(
        saved, requested, ignore=config.RESUMABLE_FIELDS)
    if differing:
        listed = "; ".join(
            f"{n}: saved {getattr(saved, n)!r}, requested "
            f"{getattr(requested, n)!r}" for n in differing)
        raise ValueError(
            f"The hparams requested for {model_dir} differ from those it was "
            f"trained with ({hparams_path(model_dir)}) in: {listed}. Resume "
            "with the saved hparams (omit --hparams, or pass the same set and "
            "overrides), or train in a new --model_dir.")
    changes = {n: getattr(requested, n) for n in config.RESUMABLE_FIELDS}
    return dataclasses.replace(saved, **changes)
