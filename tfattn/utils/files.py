"""The one way tfattn writes files: whole, or not at all.

Every file is first written in full under a temporary name beside its
target, then renamed over it, so a reader never sees half a file, a crash
or an error leaves the old file as it was, and no temporary file survives.
Paths may be local or any `tf.io.gfile` filesystem; directories (the
exports) are local, built under a temporary name and renamed into place.
"""

import contextlib
import os
import re
import shutil
import time
import uuid

import tensorflow as tf

from tfattn.utils.validation import invalid_argument

__all__ = [
    "checked_path",
    "write_files_atomically",
    "write_text_atomically",
    "local_directory",
    "refuse_existing",
    "temporary_sibling",
    "remove_stale_siblings",
    "directory_written_atomically",
    "rename_into_place",
]


def write_files_atomically(files):
    """Writes `{path: bytes or str}`; every file is complete before the
    first rename, so an error while writing changes none of them.

    Args:
        files: dict. Maps each path (local or `tf.io.gfile`) to its
            content: `str` is written as text, `bytes` as binary.
    """
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
    """Writes `text` to `path` whole (see the module docstring).

    Args:
        path: str or path-like. The file to write.
        text: str. Its whole content.
    """
    write_files_atomically({str(path): text})


# Directories (exports) are local only: their atomicity rests on renames.


def local_directory(name, path, context):
    """`path` as an absolute local path; refuses URLs and empty values,
    naming the argument `name` of `context`.

    Args:
        name: str. The argument's name, for the error message.
        path: str or path-like. The directory path to check.
        context: str or None. Who checks (prefixes the error message).

    Returns:
        str. `path`, made absolute.

    Raises:
        ValueError: `path` is not a non-empty string or path-like, or is a
            URL (contains `://`).
    """
    path = os.fspath(path) if isinstance(path, (str, os.PathLike)) else path
    if not isinstance(path, str) or not path:
        raise invalid_argument(name, "a local directory path", path, context)
    if "://" in path:
        raise invalid_argument(
            name,
            "a local path (the export is made atomic by renames on the local "
            "filesystem; export locally, then copy)",
            path,
            context,
        )
    path = os.path.abspath(path)
    ancestor = os.path.dirname(path)
    while ancestor and not os.path.lexists(ancestor):
        ancestor = os.path.dirname(ancestor)
    if ancestor and not os.path.isdir(ancestor):
        raise invalid_argument(
            name, f"a path below a directory ({ancestor} is a file)", path,
            context)
    return path


def checked_path(name, path, context):
    """`path` as a str, or a ValueError naming the argument.

    Args:
        name: str. The argument's name, for the error message.
        path: what the caller passed: a non-empty str or path-like.
        context: str or None. Who checks (prefixes the error message).

    Returns:
        str.

    Raises:
        ValueError: `path` is not a non-empty str or path-like.
    """
    path = os.fspath(path) if isinstance(path, (str, os.PathLike)) else path
    if not isinstance(path, str) or not path:
        raise invalid_argument(name, "a directory path", path, context)
    return path


def refuse_existing(path, overwrite):
    """FileExistsError when `path` exists and `overwrite` is False.

    Args:
        path: str. The target path.
        overwrite: bool. Whether an existing `path` may be replaced.

    Raises:
        FileExistsError: `path` exists (even as a broken link) and
            `overwrite` is False.
    """
    if os.path.lexists(path) and not overwrite:
        raise FileExistsError(
            f"{path}: already exists; refusing to overwrite it (pass "
            "overwrite=True to replace it, or choose another path)"
        )


def temporary_sibling(path, kind="tmp"):
    """A fresh hidden name beside `path`: `.NAME.KIND-PID-HEX`, the PID of
    the process that made it (`remove_stale_siblings` reads it).

    Args:
        path: str. The target path.
        kind: str. `"tmp"` (a directory being written) or `"old"` (an old
            `path` moved aside). Defaults to `"tmp"`.

    Returns:
        str. The sibling's path (nothing is created).
    """
    parent, name = os.path.split(path)
    return os.path.join(parent,
                        f".{name}.{kind}-{os.getpid()}-{uuid.uuid4().hex}")


# Names of earlier tfattn versions carried no PID: `.NAME.KIND-HEX`.
_SIBLING = re.compile(r"\.(?P<name>.+)\.(?P<kind>tmp|old)-"
                      r"(?:(?P<pid>\d+)-)?[0-9a-f]{32}")
# A sibling without a PID is taken as stale once this old (seconds).
_UNKNOWN_OWNER_AGE = 600


def _owner_running(pid):
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # Another user's process.
        return True
    return True


def _stale(entry, match):
    if match.group("pid") is not None:
        return not _owner_running(int(match.group("pid")))
    try:
        age = time.time() - os.lstat(entry).st_mtime
    except FileNotFoundError:
        return False
    return age > _UNKNOWN_OWNER_AGE


def remove_stale_siblings(path):
    """Clears what killed writes of the directory `path` left beside it.

    A `.NAME.tmp-*` directory whose writer is no longer running is removed.
    A `.NAME.old-*` one (an old `path` moved aside by an overwrite) is
    removed if `path` exists, and renamed back to `path` if the kill came
    between the two renames. Other names, and other targets' siblings, are
    left alone.

    Args:
        path: str. The target directory whose siblings are cleared.
    """
    parent, name = os.path.split(path)
    try:
        entries = os.listdir(parent)
    except OSError:
        return
    for entry in sorted(entries):
        match = _SIBLING.fullmatch(entry)
        full = os.path.join(parent, entry)
        if (not match or match.group("name") != name
                or not os.path.isdir(full) or os.path.islink(full)
                or not _stale(full, match)):
            continue
        if match.group("kind") == "old" and not os.path.lexists(path):
            with contextlib.suppress(OSError):
                os.rename(full, path)
            continue
        shutil.rmtree(full, ignore_errors=True)


@contextlib.contextmanager
def directory_written_atomically(path, overwrite):
    """Yields a temporary sibling directory to fill; on success renames it
    to `path` (replacing an old one when `overwrite`), on any error removes
    it, so `path` never holds half a directory. What killed writes of
    `path` left beside it is cleared first (`remove_stale_siblings`).

    Args:
        path: str. The local directory to write.
        overwrite: bool. Whether an existing `path` may be replaced.

    Yields:
        str. The temporary directory to fill.

    Raises:
        FileExistsError: `path` exists and `overwrite` is False.
        OSError: the temporary directory cannot be made beside `path`.
    """
    remove_stale_siblings(path)
    refuse_existing(path, overwrite)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp_dir = temporary_sibling(path)
    try:
        os.makedirs(tmp_dir)
    except OSError as error:
        # Named after the caller's path, not the temporary one.
        raise type(error)(
            error.errno, f"{error.strerror} (cannot write beside it in "
            f"{os.path.dirname(path)})", path) from None
    try:
        yield tmp_dir
        rename_into_place(tmp_dir, path, overwrite)
    except BaseException:
        shutil.rmtree(tmp_dir, ignore_errors=True)
        raise


def rename_into_place(tmp_dir, path, overwrite):
    """Renames the finished directory `tmp_dir` to `path`; an old `path` is
    moved aside first and deleted only once the new one is in place
    (restored if that rename fails).

    Args:
        tmp_dir: str. The finished directory.
        path: str. Its final name.
        overwrite: bool. Whether an existing `path` may be replaced.

    Raises:
        FileExistsError: `path` exists and `overwrite` is False.
    """
    if not os.path.lexists(path):
        # os.rename would silently replace an empty directory created since
        # the first check; a non-empty one makes it fail.
        os.rename(tmp_dir, path)
        return
    refuse_existing(path, overwrite)
    old = temporary_sibling(path, "old")
    os.rename(path, old)
    try:
        os.rename(tmp_dir, path)
    except BaseException:
        os.rename(old, path)
        raise
    if os.path.isdir(old) and not os.path.islink(old):
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.remove(old)
