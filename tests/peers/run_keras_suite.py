"""Runs Keras's own MultiHeadAttention unit tests against tfattn.

    python tests/peers/run_keras_suite.py [PYTEST ARGS, e.g. -k high_dim]

Copies the installed Keras's multi_head_attention_test.py into a temporary
directory with a conftest.py that installs tests/peers/keras_mha_adapter.py,
runs pytest there and prints its summary (passed, failed and why).
"""

import os
import shutil
import subprocess
import sys
import tempfile

import keras

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SUITE = os.path.join(
    os.path.dirname(keras.__file__),
    "src",
    "layers",
    "attention",
    "multi_head_attention_test.py",
)


def main(pytest_args=()):
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(SUITE, os.path.join(tmp, "test_keras_mha.py"))
        with open(os.path.join(tmp, "conftest.py"), "w") as f:
            f.write(
                f"import sys\nsys.path[:0] = [{ROOT!r}, {HERE!r}]\n"
                "import keras_mha_adapter\nkeras_mha_adapter.install()\n"
            )
        return subprocess.call(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                "-W",
                "ignore",
                "-rf",
                "test_keras_mha.py",
                *pytest_args,
            ],
            cwd=tmp,
        )


if __name__ == "__main__":
    print(f"Keras {keras.__version__}: {SUITE}")
    sys.exit(main(sys.argv[1:]))
