"""Which parts of tfattn run under which Keras backend, and the refusals.

The layers, models, losses, schedules and searches import under every
backend without TensorFlow (the GPU machines this project is lent have JAX
and no TensorFlow); the TensorFlow programs refuse another backend in one
line. Each case runs in a child process, since Keras fixes its backend at
import (one child serves the import, run and refusals under jax).
"""

import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

pytest.importorskip("jax")

# A child that cannot import TensorFlow: `import tensorflow` raises, as on
# a machine without it.
_NO_TENSORFLOW = """
import sys
sys.modules["tensorflow"] = None
"""


_REFUSED_MODULES = ("tfattn.training", "tfattn.export")

# The child of the first two tests: no KERAS_BACKEND, a keras.json that
# says jax, no TensorFlow. A tfattn layer runs (RAN: the backend, the
# output's array library, whether TensorFlow was imported), then each
# TensorFlow program is imported (REFUSED: the exception's line, the last
# line a user would see; each module refuses as it is imported, whatever
# was imported before it).
_JAX_CHILD = _NO_TENSORFLOW + f"""
import importlib, traceback
import keras, numpy as np, tfattn
layer = tfattn.MultiHeadAttention(num_heads=2)
y = layer(np.ones((1, 3, 4), 'float32'))
print('RAN', keras.config.backend(), type(y).__module__.split('.')[0],
      'tensorflow' in sys.modules and sys.modules['tensorflow'] is not None,
      flush=True)
for module in {_REFUSED_MODULES!r}:
    try:
        importlib.import_module(module)
    except BaseException as error:
        line = traceback.format_exception_only(error)[-1]
        print('REFUSED', module, '|', line.strip(), flush=True)
    else:
        print('REFUSED', module, '| imported', flush=True)
"""


@pytest.fixture(scope="module")
def jax_child(tmp_path_factory):
    """`_JAX_CHILD`'s run: (its exit status and standard error, its lines
    by their first word)."""
    keras_home = tmp_path_factory.mktemp("keras_home")
    (keras_home / "keras.json").write_text('{"backend": "jax"}')
    env = {k: v for k, v in os.environ.items() if k != "KERAS_BACKEND"}
    env.update(KERAS_HOME=str(keras_home), PYTHONPATH=REPO,
               TF_CPP_MIN_LOG_LEVEL="3")
    done = subprocess.run([sys.executable, "-c", _JAX_CHILD], cwd=REPO,
                          capture_output=True, text=True, timeout=300,
                          env=env)
    lines = {}
    for line in done.stdout.splitlines():
        word, _, rest = line.partition(" ")
        lines.setdefault(word, []).append(rest)
    return done, lines


def test_tfattn_imports_and_runs_under_jax_without_tensorflow(jax_child):
    """Under jax without TensorFlow, the layers import and run; and with
    no KERAS_BACKEND and a keras.json that says jax, tfattn keeps jax (it
    used to set KERAS_BACKEND=tensorflow when none was set, which here,
    with TensorFlow blocked, would fail the import). (KERAS_BACKEND=jax is
    train.py's case below; `startup.keras_backend` reading it over
    keras.json is test_utils_startup.py's.)"""
    done, lines = jax_child
    assert done.returncode == 0, done.stderr[-3000:]
    assert lines.get("RAN") == ["jax jaxlib False"], done.stdout


def test_tensorflow_programs_refuse_another_backend(jax_child):
    done, lines = jax_child
    assert done.returncode == 0, done.stderr[-3000:]
    refused = dict(line.split(" | ", 1) for line in lines.get("REFUSED", []))
    assert set(refused) == set(_REFUSED_MODULES), done.stdout
    for module, last in refused.items():
        assert last.startswith("RuntimeError: "), (module, last)
        assert "runs on Keras's TensorFlow backend only" in last, module
        assert "'jax'" in last and "KERAS_BACKEND=tensorflow" in last, module


def test_train_py_refuses_another_backend_in_one_line():
    env = dict(os.environ, KERAS_BACKEND="jax")
    done = subprocess.run(
        [sys.executable, "train.py", "--hparams=tiny"], cwd=REPO,
        capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "train.py: error: train.py runs on Keras's TensorFlow backend, and "
        "KERAS_BACKEND is 'jax': unset it or set KERAS_BACKEND=tensorflow"
    ]
