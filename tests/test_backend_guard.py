"""Which parts of tfattn run under which Keras backend, and the refusals.

The layers, models, losses, schedules and searches import under every
backend without TensorFlow (the GPU machines this project is lent have JAX
and no TensorFlow); the TensorFlow programs refuse another backend in one
line. Each case runs in a child process, since Keras fixes its backend at
import.
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


def _child(code, backend="jax", block_tensorflow=True):
    env = dict(os.environ, KERAS_BACKEND=backend, PYTHONPATH=REPO,
               TF_CPP_MIN_LOG_LEVEL="3")
    source = (_NO_TENSORFLOW if block_tensorflow else "") + code
    return subprocess.run([sys.executable, "-c", source], cwd=REPO,
                          capture_output=True, text=True, timeout=300,
                          env=env)


def test_tfattn_imports_and_runs_under_jax_without_tensorflow():
    done = _child(
        "import keras, numpy as np, tfattn\n"
        "layer = tfattn.MultiHeadAttention(num_heads=2)\n"
        "y = layer(np.ones((1, 3, 4), 'float32'))\n"
        "print(keras.config.backend(), type(y).__module__.split('.')[0],\n"
        "      'tensorflow' in sys.modules and sys.modules['tensorflow']"
        " is not None)\n"
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["jax", "jaxlib", "False"]


@pytest.mark.parametrize("module", ["tfattn.training", "tfattn.export"])
def test_tensorflow_programs_refuse_another_backend(module):
    done = _child(f"import {module}", block_tensorflow=False)
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert "runs on Keras's TensorFlow backend only" in last
    assert "'jax'" in last and "KERAS_BACKEND=tensorflow" in last


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


def test_importing_tfattn_keeps_the_backend_keras_is_set_to(tmp_path):
    """No KERAS_BACKEND, a keras.json that says jax: tfattn keeps jax (it
    used to set KERAS_BACKEND=tensorflow when none was set)."""
    (tmp_path / ".keras").mkdir()
    (tmp_path / ".keras" / "keras.json").write_text('{"backend": "jax"}')
    env = {k: v for k, v in os.environ.items() if k != "KERAS_BACKEND"}
    env.update(KERAS_HOME=str(tmp_path / ".keras"), PYTHONPATH=REPO)
    done = subprocess.run(
        [sys.executable, "-c",
         "import tfattn, keras; print(keras.config.backend())"],
        cwd=REPO, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "jax"
