"""Pytest setup shared by every test module."""

import gc
import os

import pytest

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# Under pytest-xdist (`-n 2`, one worker per core), one intra-op thread per
# worker keeps the two workers' TensorFlow thread pools from competing for
# the same cores.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")


@pytest.fixture(autouse=True, scope="module")
def _frozen_heap():
    """Moves what earlier modules left alive out of the garbage collector's
    reach: Keras calls `gc.collect()` itself (in `quantize` and saving), and
    a full collection over a worker's grown heap took 0.4 s each, 7 of the
    8 s of an int8 test run late in a worker. Objects freed by reference
    counting are freed as ever."""
    gc.collect()
    gc.freeze()
    yield
