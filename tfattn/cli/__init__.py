"""The command lines' shared parts: `commands` (what `train.py`'s
modes do, as functions), `checks` (the refusals of a whole command, made
before any work), `errors` (how a command line says an expected failure
in one line), and `train.py`'s own `flags` (definitions, validators, the
command they ask for) and `exits` (its exit statuses and error
boundaries)."""

__all__ = []
