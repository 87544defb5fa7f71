"""The command lines' shared parts: `commands` (what `train.py`'s
modes do, as functions) and `errors` (how a command line says an expected
failure in one line)."""

__all__ = []
