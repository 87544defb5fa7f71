"""The one way tfattn writes files: whole, or not at all.

Every file is first written in full under a temporary name beside its
target, then renamed over it, so a reader never sees half a file, a crash
or an error leaves the old file as it was, and no temporary file survives.
Paths may be local or any `tf.io.gfile` filesystem.
"""

import uuid

import tensorflow as tf


def write_files_atomically(files):
    """Writes `{path: bytes or str}`; every file is complete before the
    first rename, so an error while writing changes none of them."""
    temps = {path: f"{path}.tmp-{uuid.uuid4().hex}" for path in files}
    try:
        for path, data in files.items():
            mode = "w" if isinstance(data, str) else "wb"
            with tf.io.gfile.GFile(temps[path], mode) as f:
                f.write(data)
        for path, tmp in temps.items():
            tf.io.gfile.rename(tmp, path, overwrite=True)
    finally:
        for tmp in temps.values():
            if tf.io.gfile.exists(tmp):
                tf.io.gfile.remove(tmp)


def write_text_atomically(path, text):
    """Writes `text` to `path` whole (see the module docstring)."""
    write_files_atomically({str(path): text})
