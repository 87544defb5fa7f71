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
