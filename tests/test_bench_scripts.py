"""Every bench script starts as bench/README.md says: `python bench/NAME.py
--help` from the repository root exits 0 and prints its usage.

Each script runs as `python bench/NAME.py` would run it, in this process
(TensorFlow is already imported, so a run takes milliseconds, not the
seconds of a new interpreter): `runpy` runs it as `__main__` with bench/
first on `sys.path` and neither the repository root nor the current
directory on it, and without the modules it could find only through them
(`hparams`, bench's own), so a missing `bench/_repo.py` import fails here
as it fails for a user.
"""

import contextlib
import glob
import os
import runpy
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(REPO, "bench")
SCRIPTS = sorted(
    os.path.basename(path)
    for path in glob.glob(os.path.join(BENCH, "*.py"))
    if not os.path.basename(path).startswith("_")
)


def _from_the_checkout(module):
    path = getattr(module, "__file__", None) or ""
    return path.startswith(BENCH) or path.startswith(
        os.path.join(REPO, "hparams")
    )


@contextlib.contextmanager
def _as_a_script(script):
    """sys.argv, sys.path and sys.modules as `python bench/SCRIPT --help`
    from the root has them, restored afterwards."""
    saved_argv, saved_path = sys.argv, sys.path
    hidden = {
        name: module
        for name, module in sys.modules.items()
        if _from_the_checkout(module)
    }
    for name in hidden:
        del sys.modules[name]
    before = set(sys.modules)
    sys.argv = [os.path.join("bench", script), "--help"]
    sys.path = [BENCH] + [
        p
        for p in saved_path
        if p not in ("", ".")
        and os.path.abspath(p) not in (REPO, os.getcwd(), BENCH)
    ]
    try:
        yield
    finally:
        sys.argv, sys.path = saved_argv, saved_path
        for name in set(sys.modules) - before:
            if _from_the_checkout(sys.modules[name]):
                del sys.modules[name]
        sys.modules.update(hidden)


def test_scripts_found():
    assert len(SCRIPTS) >= 11, SCRIPTS


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_exits_zero(script, capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    with _as_a_script(script), pytest.raises(SystemExit) as exit_info:
        runpy.run_path(os.path.join(BENCH, script), run_name="__main__")
    assert exit_info.value.code in (0, None)
    assert "usage" in capsys.readouterr().out


def test_best_times_interleaves_rounds_and_fetches_outputs(monkeypatch):
    """bench/_timing.py: warm-up calls first, then one call of each
    function per round in turn; the best sample per name, the last output
    as NumPy; bad counts named."""
    monkeypatch.syspath_prepend(BENCH)
    import numpy as np
    import tensorflow as tf
    from _timing import best_times

    calls = []
    clock = iter(range(1000))
    # Each sample spans a known number of ticks: 'a' 3 then 1, 'b' 2 then 2.
    durations = {"a": [3, 1], "b": [2, 2]}
    now = [0.0]

    def perf_counter():
        return now[0]

    def function(name):
        def call():
            calls.append(name)
            if len(calls) > 2:  # past the warm-up
                now[0] += durations[name].pop(0)
            return tf.constant([next(clock)])

        return call

    monkeypatch.setattr("_timing.time.perf_counter", perf_counter)
    timings = best_times({"a": function("a"), "b": function("b")}, rounds=2)
    assert calls == ["a", "b", "a", "b", "a", "b"]
    assert (timings["a"].seconds, timings["b"].seconds) == (1.0, 2.0)
    assert isinstance(timings["b"].output, np.ndarray)
    assert timings["b"].output.tolist() == [5]

    counted = []
    timings = best_times(
        {"c": lambda: counted.append(1) or 7}, rounds=2, repeats=3, warmup=0
    )
    assert len(counted) == 6 and timings["c"].output == 7
    with pytest.raises(ValueError, match="got 0 and 1"):
        best_times({"c": lambda: 0}, rounds=0)


def test_training_floor_prototype_puts_only_the_projections_in_bfloat16(
        monkeypatch):
    """bench/training_floor.py's `bfloat16_matmuls` row: inside the scope
    Dense and the token embedding compute in bfloat16 with float32 weights,
    a layer norm stays float32, and Dense is itself again afterwards."""
    monkeypatch.syspath_prepend(REPO)
    monkeypatch.syspath_prepend(BENCH)
    import keras
    from training_floor import matmul_layers_in_bfloat16

    from tfattn.layers import LayerNormalization
    from tfattn.layers import TokenEmbedding

    with matmul_layers_in_bfloat16():
        dense = keras.layers.Dense(4)
        embedding = TokenEmbedding(vocab_size=8, num_units=4)
        norm = LayerNormalization()
    for layer in (dense, embedding):
        assert (layer.compute_dtype, layer.variable_dtype) == (
            "bfloat16", "float32")
    assert norm.compute_dtype == "float32"
    assert keras.layers.Dense(4).compute_dtype == "float32"
    output = dense(keras.ops.ones((2, 3)))
    assert output.dtype == "bfloat16"


def test_no_bench_module_shadows_the_standard_library():
    """`python bench/NAME.py` puts bench/ first on sys.path, so a bench
    module named like a standard one (`profile`, `timeit`, ...) replaces it
    for every import in the process: Keras imports IPython where it is
    installed, IPython imports cProfile, cProfile imports `profile`, and a
    bench/profile.py then broke every bench script on such a machine."""
    modules = {
        os.path.splitext(os.path.basename(path))[0]
        for path in glob.glob(os.path.join(BENCH, "*.py"))
    }
    assert not modules & set(sys.stdlib_module_names)
