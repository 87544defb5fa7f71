"""Internal utilities: `files` (atomic writes), `validation` (one error
format for argument checks) and `backend` (which Keras backend runs)."""

__all__ = []
