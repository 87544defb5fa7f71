"""A TensorFlow program's start: its environment, TensorFlow imported with
its start-up banner held back, and TensorFlow's own INFO lines kept out of
the log.

- `set_environment(program)`: `TF_CPP_MIN_LOG_LEVEL=1` and
  `KERAS_BACKEND=tensorflow` unless set; the refusal when `KERAS_BACKEND`
  names another backend.
- `import_tensorflow_quietly(write)`: imports TensorFlow and lists its
  devices with the banner (oneDNN notice, CUDA stub and CPU feature lines,
  `failed call to cuInit` where no NVIDIA driver is installed) held back.
- `quiet_tensorflow_logging()`: TensorFlow's INFO lines out of absl's log,
  its Python logger at WARNING.
- `start_quietly()`: what `import tfattn` runs first, in a user's own
  Python: the banner held back and `TF_CPP_MIN_LOG_LEVEL=1` unless set,
  when Keras will run on TensorFlow and TensorFlow is not imported yet.

What TensorFlow's C++ log levels hide (TensorFlow 2.21): the banner comes
before TensorFlow reads `TF_CPP_MIN_LOG_LEVEL`, so no level hides it (it is
captured instead); after it, 1 hides INFO lines (`Compiled cluster using
XLA!`, `XLA service ... initialized`), 2 also warnings, 3 also errors
(`failed call to cuInit`, `oneDNN supports DT_INT64 only on platforms with
AVX-512`, but with them a real error such as a failed allocation). Only 1
is set here: warnings and errors stay visible, and Python exceptions are
not C++ log lines, so no level hides them.

To see every line: `TFATTN_VERBOSE_IMPORT=1` (nothing held back, nothing
set), or `TF_CPP_MIN_LOG_LEVEL=0` (the banner kept, and TensorFlow's INFO
lines). A `TF_CPP_MIN_LOG_LEVEL` the user set is never changed.

Nothing here prints: the lines TensorFlow wrote besides its banner go to
the caller's `write` (`start_quietly`: to standard error, as TensorFlow
wrote them). `train.py` runs this file before it imports `tfattn`
(importing `tfattn` imports Keras, and Keras imports TensorFlow, whose
banner would come first), so it imports only the standard library at the
top, and TensorFlow and absl where they are used.
"""

import importlib.util
import json
import os
import re
import sys
import tempfile

__all__ = [
    "BANNER",
    "CUDA_BANNER",
    "set_environment",
    "import_tensorflow_quietly",
    "quiet_tensorflow_logging",
    "keras_backend",
    "start_quietly",
]

# TensorFlow's start-up lines that say nothing to a user.
BANNER = (r"All log messages before absl::InitializeLog|oneDNN custom "
          r"operations|cpu_feature_guard|rebuild TensorFlow with the "
          r"appropriate compiler flags")
# Its CUDA lines: they say only that there is no GPU where no NVIDIA driver
# is installed; with one, they may be the reason a GPU is missing (kept).
CUDA_BANNER = (r"cudart_stub|cuda drivers|cuInit|Unable to register "
               r"cu(DNN|FFT|BLAS) factory|computation placer")


def set_environment(program):
    """Sets what a TensorFlow program needs in the environment, unless set.

    TensorFlow's C++ INFO lines are hidden (`TF_CPP_MIN_LOG_LEVEL=1`), and
    Keras is set to TensorFlow (`KERAS_BACKEND=tensorflow`), over
    `~/.keras/keras.json`; another backend named in the environment is the
    user's choice, refused rather than overridden.

    Args:
        program: str. The program's name, e.g. `"train.py"`, for the
            refusal.

    Returns:
        str or None. The refusal line (`PROGRAM: error: ...`) when
        `KERAS_BACKEND` names another backend, else None.
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    backend = os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    if backend == "tensorflow":
        return None
    return (f"{program}: error: {program} runs on Keras's TensorFlow "
            f"backend, and KERAS_BACKEND is {backend!r}: unset it or set "
            "KERAS_BACKEND=tensorflow")


def import_tensorflow_quietly(write):
    """Imports TensorFlow with its start-up banner held back.

    TensorFlow's C++ logging prints its banner (oneDNN notice, CUDA stub and
    CPU feature lines) before it reads TF_CPP_MIN_LOG_LEVEL, twice (two
    shared libraries), and a `failed call to cuInit` error line on machines
    without a GPU when it first looks for devices (the CUDA lines are kept
    where an NVIDIA driver is installed). Standard error is captured while
    TensorFlow loads and lists its devices; every line that is not one of
    those goes to `write`, and every line does when that fails.
    TFATTN_VERBOSE_IMPORT=1 or TF_CPP_MIN_LOG_LEVEL=0 keeps the banner
    (nothing is imported here); so does a standard error that cannot be
    duplicated (no file descriptor 2).

    Args:
        write: callable(str). Gets the lines kept, joined by newlines
            (called only when there are any), e.g. a function that prints
            them to standard error.
    """
    if verbose():
        return
    banner = BANNER
    if not os.path.exists("/dev/nvidiactl"):
        banner += "|" + CUDA_BANNER
    banner = re.compile(banner)
    sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:
        return
    with tempfile.TemporaryFile(mode="w+b") as captured:
        os.dup2(captured.fileno(), 2)
        failed = True
        try:
            import tensorflow

            # Finding the devices is where a machine without a GPU logs
            # `failed call to cuInit`; it does not start the runtime, so
            # strategies can still be configured afterwards.
            tensorflow.config.list_physical_devices()
            failed = False
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            lines = captured.read().decode("utf-8", "replace").splitlines()
            kept = (
                lines
                if failed
                else [line for line in lines if not banner.search(line)]
            )
            if kept:
                write("\n".join(kept))


def quiet_tensorflow_logging():
    """Keeps TensorFlow's own INFO lines out of absl's log, and sets
    TensorFlow's Python logger to WARNING.

    Those lines (a save's sharding time, a 1,000-character list of a traced
    function's inputs at export) say nothing to a user; absl's handler
    drops INFO records from TensorFlow's files and keeps every other one.
    """
    import tensorflow
    from absl import logging

    directory = os.path.dirname(tensorflow.__file__)

    def keep(record):
        return (record.levelno > logging.converter.STANDARD_INFO
                or not record.pathname.startswith(directory))

    logging.get_absl_handler().addFilter(keep)
    tensorflow.get_logger().setLevel("WARNING")


def verbose():
    """Whether the user asked for TensorFlow's every line:
    `TFATTN_VERBOSE_IMPORT=1`, or `TF_CPP_MIN_LOG_LEVEL=0`.

    Returns:
        bool.
    """
    return (os.environ.get("TFATTN_VERBOSE_IMPORT") == "1"
            or os.environ.get("TF_CPP_MIN_LOG_LEVEL") == "0")


def keras_backend():
    """The backend Keras will run on, read as Keras reads it, without
    importing Keras (which imports the backend): `KERAS_BACKEND`, else
    `keras.json`'s `backend` in `KERAS_HOME` (or `~/.keras`, `/tmp/.keras`
    where the home directory is not writable), else TensorFlow.

    Returns:
        str, e.g. `"tensorflow"` or `"jax"`.
    """
    name = os.environ.get("KERAS_BACKEND")
    if name:
        return name
    home = os.environ.get("KERAS_HOME")
    if home is None:
        base = os.path.expanduser("~")
        if not os.access(base, os.W_OK):
            base = "/tmp"
        home = os.path.join(base, ".keras")
    try:
        with open(os.path.join(home, "keras.json")) as f:
            name = json.load(f).get("backend")
    except (OSError, ValueError, AttributeError):
        name = None
    return name if isinstance(name, str) and name else "tensorflow"


def _to_stderr(text):
    """Passes TensorFlow's kept start-up lines on to standard error."""
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def start_quietly():
    """What `import tfattn` runs first: TensorFlow imported with its
    banner held back, and its C++ INFO lines hidden
    (`TF_CPP_MIN_LOG_LEVEL=1` unless set).

    Only where it can and should: when Keras will run on TensorFlow
    (`keras_backend`), TensorFlow is installed and not yet imported (once
    it is, its banner has been written), and the user did not ask for
    every line (`verbose`: then nothing is set). The banner's other
    lines, and every line when the import fails, go to standard error as
    TensorFlow wrote them; the import's exception is raised unchanged.

    Returns:
        bool. Whether it imported TensorFlow (False: nothing done).
    """
    if verbose() or "tensorflow" in sys.modules:
        return False
    if (keras_backend() != "tensorflow"
            or importlib.util.find_spec("tensorflow") is None):
        return False
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    import_tensorflow_quietly(_to_stderr)
    return True
