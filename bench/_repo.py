"""Puts the repository root on `sys.path`, so the bench scripts import this
checkout.

`python bench/NAME.py` puts bench/ on `sys.path`, not the repository root,
so `hparams` (the application's sets, not installed) would not import, and
`tfattn` would come from wherever it is installed. Each script imports this
module first (`import _repo  # noqa: F401`); the root goes right after
bench/, so bench's own modules (`import training` in step_profile.py) still win.
"""

import os
import sys

BENCH = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH)

if ROOT not in (os.path.abspath(p) for p in sys.path):
    after_bench = bool(sys.path) and os.path.abspath(sys.path[0]) == BENCH
    sys.path.insert(1 if after_bench else 0, ROOT)
