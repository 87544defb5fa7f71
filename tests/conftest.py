"""Pytest setup shared by every test module."""

import gc
import os

import pytest

from tests import cpu_limits

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


def pytest_configure(config):
    for marker, reason in cpu_limits.EXCLUDED.items():
        config.addinivalue_line(
            "markers", f"{marker}: left out under the AVX2 limits of "
            f"tests/cpu_limits.py on some CPUs: {reason}")


def _is_half_precision(item):
    return item.get_closest_marker("half_precision") is not None or any(
        name in item.name for name in cpu_limits.HALF_PRECISION_NAMES)


def pytest_collection_modifyitems(config, items):
    """Under the AVX2 limits, leaves out what tests/cpu_limits.EXCLUDED
    names (and only there): pytest counts them as deselected."""
    for item in items:
        if _is_half_precision(item):
            item.add_marker("half_precision")
    excluded = cpu_limits.excluded_here()
    if not excluded:
        return
    left_out = [item for item in items
                if any(item.get_closest_marker(m) for m in excluded)]
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        dropped = {id(item) for item in left_out}
        items[:] = [item for item in items if id(item) not in dropped]


def pytest_report_header(config):
    excluded = cpu_limits.excluded_here()
    if cpu_limits.limits_in_effect():
        return [f"AVX2 limits in effect ({cpu_limits.__name__}); left out: "
                + (", ".join(f"{m} ({cpu_limits.EXCLUDED[m]})"
                             for m in excluded) or "nothing")]
    return []
