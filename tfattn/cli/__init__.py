"""The command lines' shared parts: `commands` (what `train.py`'s
modes do, as functions), `checks` (the refusals of a whole command, made
before any work) and `errors` (how a command line says an expected failure
in one line)."""

__all__ = []
