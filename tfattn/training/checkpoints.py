"""The checkpoints of a model directory, found so that none is lost.

TensorFlow finds checkpoints through the `checkpoint` index file. When that
file is missing or unreadable, `tf.train.latest_checkpoint` says there are
none, and a run resumed in the same directory starts at step 0 and
overwrites `ckpt-200`, `ckpt-400`, ... with new weights. Here the index is
rebuilt from the `ckpt-N.index` files instead. A checkpoint that does not
read back whole (a truncated data file) is reported by name and skipped in
favour of the newest one that does.

- `exist(model_dir)`: whether any checkpoint is there, index or not.
- `all_checkpoints(model_dir)`: their prefixes, oldest first.
- `latest(model_dir)`: the newest that reads back whole (warns about the
  newer ones that do not), or None.
- `write_index(model_dir, upto)`: the `checkpoint` index rewritten to list
  the checkpoints up to `upto`, as `tf.train.CheckpointManager` reads it.
"""

import os
import re

import tensorflow as tf
from absl import logging

from tfattn.utils.files import write_text_atomically
from tfattn.utils.messages import describe

__all__ = [
    "CHECKPOINT_NAME",
    "step_of",
    "all_checkpoints",
    "exist",
    "unreadable",
    "latest",
    "write_index",
]

CHECKPOINT_NAME = "ckpt"
_STEP = re.compile(rf"{CHECKPOINT_NAME}-(\d+)$")
_warned = set()  # Directories whose missing index was reported.


def step_of(prefix):
    """The step of a checkpoint prefix `.../ckpt-N` (-1 for another name).

    Args:
        prefix: str. A checkpoint prefix (path without `.index`).

    Returns:
        int.
    """
    match = _STEP.search(prefix)
    return int(match.group(1)) if match else -1


def _listed(model_dir):
    """The prefixes the index lists, or None when it is missing or
    unreadable."""
    try:
        state = tf.train.get_checkpoint_state(model_dir)
    except (tf.errors.OpError, ValueError, UnicodeDecodeError) as error:
        logging.warning("%s: the checkpoint index does not parse (%s).",
                        os.path.join(model_dir, "checkpoint"),
                        describe(error))
        return None
    if state is None:
        return None
    paths = list(state.all_model_checkpoint_paths) or (
        [state.model_checkpoint_path] if state.model_checkpoint_path else [])
    return [p if os.path.isabs(p) or "://" in p else os.path.join(model_dir, p)
            for p in paths]


def _on_disk(model_dir):
    pattern = os.path.join(model_dir, f"{CHECKPOINT_NAME}-*.index")
    return [path[: -len(".index")] for path in tf.io.gfile.glob(pattern)
            if step_of(path[: -len(".index")]) >= 0]


def all_checkpoints(model_dir):
    """Every checkpoint of `model_dir` (listed or on disk), oldest first.

    A missing or unreadable index is not an empty directory: the files
    count, with a warning.

    Args:
        model_dir: str or path-like.

    Returns:
        list of str. The checkpoint prefixes whose `.index` file exists,
        sorted by step.
    """
    model_dir = str(model_dir)
    on_disk = _on_disk(model_dir)
    listed = _listed(model_dir)
    if listed is None and on_disk and model_dir not in _warned:
        _warned.add(model_dir)
        logging.warning(
            "%s has checkpoint files (%s) but no readable `checkpoint` index: "
            "using the files.", model_dir,
            ", ".join(os.path.basename(p)
                      for p in sorted(on_disk, key=step_of)))
    present = set(on_disk) | {p for p in listed or []
                              if tf.io.gfile.exists(p + ".index")}
    return sorted(present, key=step_of)


def exist(model_dir):
    """Whether `model_dir` holds any checkpoint, index or not.

    Args:
        model_dir: str or path-like.

    Returns:
        bool.
    """
    return bool(all_checkpoints(model_dir))


def unreadable(prefix):
    """None when the checkpoint at `prefix` reads back whole, else why not.

    Every tensor of the checkpoint is read.

    Args:
        prefix: str. A checkpoint prefix.

    Returns:
        str or None. The read error, as one line
        (`tfattn.utils.messages.describe`).
    """
    try:
        reader = tf.train.load_checkpoint(prefix)
        for name in reader.get_variable_to_shape_map():
            reader.get_tensor(name)
    except Exception as error:  # noqa: BLE001 (any failure to read)
        return describe(error)
    return None


def latest(model_dir):
    """The newest checkpoint of `model_dir` that reads back whole, or None
    when there is none at all.

    Newer checkpoints that do not read back are skipped, with a warning
    naming them.

    Args:
        model_dir: str or path-like.

    Returns:
        str or None. The checkpoint prefix.

    Raises:
        ValueError: there are checkpoints, and none reads back (each named
            with its error).
    """
    found = all_checkpoints(model_dir)
    problems = []
    for prefix in reversed(found):
        problem = unreadable(prefix)
        if problem is None:
            if problems:
                logging.warning(
                    "Using %s: the newer %s do not read back (%s).", prefix,
                    ", ".join(p for p, _ in problems),
                    "; ".join(why for _, why in problems))
            return prefix
        problems.append((prefix, problem))
    if problems:
        raise ValueError(
            f"{model_dir}: no checkpoint reads back whole: " + "; ".join(
                f"{p}: {why}" for p, why in problems) + ". Move them away to "
            "start again, or restore them from a copy.")
    return None


def write_index(model_dir, upto):
    """Rewrites `model_dir`'s `checkpoint` index to list the checkpoints up
    to `upto` (the newest that reads), when it lists anything else.

    The index is written atomically, with the files' times, so that the
    resumed run's `tf.train.CheckpointManager` keeps rotating them.

    Args:
        model_dir: str or path-like.
        upto: str. The checkpoint prefix the index names as the latest.
    """
    model_dir = str(model_dir)
    keep = [p for p in all_checkpoints(model_dir)
            if step_of(p) <= step_of(upto)]
    if _listed(model_dir) == keep:
        return
    # The CheckpointState text format, with the files' times, so that the
    # CheckpointManager of the resumed run keeps managing (and rotating)
    # these checkpoints as if it had written them.
    times = [tf.io.gfile.stat(p + ".index").mtime_nsec / 1e9 for p in keep]
    lines = [f'model_checkpoint_path: "{os.path.basename(upto)}"']
    lines += [f'all_model_checkpoint_paths: "{os.path.basename(p)}"'
              for p in keep]
    lines += [f"all_model_checkpoint_timestamps: {t:.6f}" for t in times]
    lines.append(f"last_preserved_timestamp: {min(times) - 1:.6f}")
    write_text_atomically(os.path.join(model_dir, "checkpoint"),
                          "\n".join(lines) + "\n")
    logging.warning("Rewrote the checkpoint index of %s: %s.", model_dir,
                    ", ".join(os.path.basename(p) for p in keep))
