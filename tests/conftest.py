"""Pytest setup shared by every test module."""

import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# Under pytest-xdist (`-n 2`, one worker per core), one intra-op thread per
# worker keeps the two workers' TensorFlow thread pools from competing for
# the same cores.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")
