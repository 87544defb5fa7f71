"""Internal utilities: `files` (atomic writes) and `validation` (one
error format for argument checks)."""

__all__ = []
