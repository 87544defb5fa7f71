"""The loop plumbing of the searches of `tfattn.decoding` (private): the
checks of their common arguments and of what `step_fn` returns, the per-row
length limits, the gathers and the loop variables' static shapes.

Everything runs on `keras.ops`, so the searches run on every Keras backend.
Three helpers take a TensorFlow branch, importing TensorFlow lazily (it need
not be installed under another backend): `_argmax` and the gathers keep the
single TensorFlow op the searches were written with, because the `keras.ops`
equivalents add per-step work there (a negative-zero fix before `argmax`, a
negative-index fix before `take`, broadcast index tensors in
`take_along_axis`), and `_keep_shapes` pins static shapes, which
`tf.while_loop` needs and which other backends always have.
"""

import numbers

import keras
import numpy as np
from keras import ops

from tfattn.utils.validation import check_positive_int
from tfattn.utils.validation import invalid_argument


def _on_tensorflow():
    return keras.config.backend() == "tensorflow"


def _validate(
    context, step_fn, initial_ids, initial_cache, max_length, eos_id, lengths
):
    """Checks the common arguments; returns them as tensors / ints."""
    if not callable(step_fn):
        raise invalid_argument("step_fn", "a callable", step_fn, context)
    max_length = _buffer_length(max_length, context)
    eos_id = checked_stop_ids(eos_id, context)
    initial_ids = _int_vector("initial_ids", initial_ids, context)
    if lengths is not None:
        lengths = _int_vector("max_lengths", lengths, context)
        if not _compatible(_shape(initial_ids), _shape(lengths)):
            raise invalid_argument(
                "max_lengths",
                f"one limit per row, shape {_shape(initial_ids)}",
                f"<tensor of shape {_shape(lengths)}>",
                context,
            )
    if initial_cache is None:
        initial_cache = {}
    cache = keras.tree.map_structure(ops.convert_to_tensor, initial_cache)
    batch = _shape(initial_ids)[0]
    for t in keras.tree.flatten(cache):
        shape = _shape(t)
        if not shape or not _compatible(shape[:1], (batch,)):
            raise invalid_argument(
                "initial_cache",
                f"tensors whose leading axis is the batch axis ({batch})",
                f"<tensor of shape {shape}>",
                context,
            )
    return initial_ids, cache, max_length, eos_id, lengths


def _buffer_length(max_length, context):
    """`max_length` as a Python int >= 1, or a scalar int tensor of a
    TensorFlow graph (a buffer sized per call: `Transformer.search`)."""
    if _on_tensorflow() and not isinstance(max_length, numbers.Integral):
        import tensorflow as tf

        if tf.is_symbolic_tensor(max_length):
            if max_length.dtype.is_integer and max_length.shape.rank == 0:
                return ops.cast(max_length, "int32")
            raise invalid_argument(
                "max_length", "a positive integer, or a scalar int tensor "
                "inside a TensorFlow graph",
                f"<tensor of shape {max_length.shape} and dtype "
                f"{max_length.dtype.name}>", context)
    return check_positive_int("max_length", max_length, context)


def checked_stop_ids(eos_id, context, name="eos_id", allow_none=False):
    """`eos_id` checked: a non-negative int, or a tuple of them (any ends a
    row; an empty tuple, or None with `allow_none`: no token ends a row);
    returned as an int or a tuple of ints."""
    if eos_id is None and allow_none:
        return ()
    ids = eos_id if isinstance(eos_id, (tuple, list)) else (eos_id,)
    if any(isinstance(i, bool) or not isinstance(i, numbers.Integral)
           or i < 0 for i in ids):
        raise invalid_argument(
            name, "a non-negative integer or a tuple of them", eos_id,
            context)
    ids = tuple(int(i) for i in ids)
    return ids[0] if len(ids) == 1 else ids


def _is_stop(tokens, eos_id):
    """bool, the shape of `tokens`: True where a token ends its row."""
    if isinstance(eos_id, int):
        return ops.equal(tokens, eos_id)
    if not eos_id:
        return ops.zeros_like(tokens, "bool")
    stop = ops.equal(tokens, eos_id[0])
    for other in eos_id[1:]:
        stop = stop | ops.equal(tokens, other)
    return stop


def _shape(t):
    """The static shape of `t` as a tuple (None for unknown dims), or None
    when even the rank is unknown (a TensorFlow graph tensor)."""
    try:
        return tuple(t.shape)
    except (TypeError, ValueError):
        return None


def _compatible(a, b):
    """Whether two static shapes can describe the same tensor."""
    if a is None or b is None:
        return True
    return len(a) == len(b) and all(
        x is None or y is None or x == y for x, y in zip(a, b))


def _dtype_name(t):
    try:
        return keras.backend.standardize_dtype(t.dtype)
    except (TypeError, ValueError):  # Strings: not a Keras dtype everywhere.
        return str(t.dtype)


def _int_vector(name, x, context):
    """Converts `x` to an int32 tensor [B], raising if it is not one."""
    try:
        if not hasattr(x, "dtype"):
            # NumPy first: string lists are refused by dtype below, not by
            # a backend-specific conversion error.
            x = np.asarray(x)
        dtype = _dtype_name(x)
        if "int" in dtype:
            x = ops.convert_to_tensor(x)
    except (TypeError, ValueError):
        raise invalid_argument(name, "a rank-1 integer tensor", x, context)
    shape = _shape(x)
    if shape is None or len(shape) != 1 or "int" not in dtype:
        raise invalid_argument(
            name,
            "a rank-1 integer tensor of shape (B,)",
            f"<tensor of shape {shape} and dtype {dtype}>",
            context,
        )
    return ops.cast(x, "int32")


def _row_limits(max_lengths, batch_size, max_length):
    """Per-row length limits, int32 [B], clipped to [1, max_length]."""
    if max_lengths is None:
        return ops.full((batch_size,), max_length, "int32")
    return ops.clip(max_lengths, 1, max_length)


def _dim(x, axis):
    """Static size of `x` along `axis` if known, else a scalar tensor."""
    return ops.shape(x)[axis]


def _argmax(x):
    """int32 argmax over the last axis; ties go to the lowest index."""
    if _on_tensorflow():
        import tensorflow as tf

        return tf.argmax(x, axis=-1, output_type=tf.int32)
    return ops.cast(ops.argmax(x, axis=-1), "int32")


def _take_rows(x, indices):
    """`x[indices]` along axis 0 (indices in range)."""
    if _on_tensorflow():
        import tensorflow as tf

        return tf.gather(x, indices)
    return ops.take(x, indices, axis=0)


def _batch_gather(x, indices):
    """x [B, N, ...] gathered along axis 1 by indices int32 [B, M]:
    [B, M, ...] (indices in range)."""
    if _on_tensorflow():
        import tensorflow as tf

        return tf.gather(x, indices, batch_dims=1)
    trailing = len(x.shape) - 2
    indices = ops.reshape(indices, tuple(indices.shape) + (1,) * trailing)
    return ops.take_along_axis(x, indices, axis=1)


def _keep_shapes(body):
    """Wraps a loop body so every output keeps its input's static shape.

    Under TensorFlow, ops such as `reshape(x, [batch_size, -1])` with a
    dynamic batch size lose static dims that `tf.while_loop` requires to
    stay fixed. Other backends trace with every shape static.
    """
    if not _on_tensorflow():
        return body
    import tensorflow as tf

    def wrapped(*loop_vars):
        outputs = body(*loop_vars)
        return tf.nest.map_structure(
            lambda new, old: tf.ensure_shape(new, old.shape),
            outputs,
            loop_vars,
        )

    return wrapped


def _call_step_fn(step_fn, ids, position, cache):
    """Calls `step_fn` and checks that the cache keeps its structure/shape."""
    outputs = step_fn(ids, position, cache)
    if not isinstance(outputs, (tuple, list)) or len(outputs) != 2:
        raise ValueError(
            "`step_fn` must return a tuple `(logits, new_cache)`. "
            f"Received: {outputs!r}"
        )
    logits, new_cache = outputs
    logits = ops.convert_to_tensor(logits)
    shape = _shape(logits)
    if shape is None or len(shape) != 2 or "float" not in _dtype_name(logits):
        raise ValueError(
            "`step_fn` must return float logits of shape [rows, V]. "
            f"Received: logits with shape {shape} and dtype "
            f"{_dtype_name(logits)}"
        )
    try:
        keras.tree.assert_same_structure(cache, new_cache)
    except (TypeError, ValueError) as e:
        raise ValueError(
            "`step_fn` must return a cache with the structure of the cache "
            f"it received. {e}"
        ) from None
    new_cache = keras.tree.map_structure(_same_shape, cache, new_cache)
    return logits, new_cache


def _same_shape(old, new):
    """`new` checked against the cache tensor `old` it replaces."""
    if new is old:
        return old  # Passed through: see `_reorder_cache`.
    new = ops.convert_to_tensor(new)
    if _dtype_name(new) != _dtype_name(old) or not _compatible(
        _shape(new), _shape(old)
    ):
        raise ValueError(
            "`step_fn` must return cache tensors with the dtype and "
            f"shape they had. Received: {_dtype_name(new)}{_shape(new)} for "
            f"a cache tensor of {_dtype_name(old)}{_shape(old)}"
        )
    if _on_tensorflow():
        import tensorflow as tf

        # Loop variables must keep their static shape across iterations.
        return tf.ensure_shape(new, old.shape)
    return new
