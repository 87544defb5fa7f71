"""Internal utilities: `files` (atomic writes), `validation` (one error
format for argument checks), `texts` (the serving paths' text checks),
`ids` (the token ids every model shares), `seeds` (per-sublayer seeds),
`messages` (values shown in messages), `startup` (TensorFlow's start-up
lines held back) and `backend` (which Keras backend runs)."""

__all__ = []
