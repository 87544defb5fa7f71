"""The `tf.while_loop` plumbing of the searches of `tfattn.decoding`
(private): the checks of their common arguments and of what `step_fn`
returns, the per-row length limits, and the loop variables' static shapes.
"""

import numbers

import tensorflow as tf

from tfattn.utils.validation import check_positive_int
from tfattn.utils.validation import invalid_argument


def _validate(
    context, step_fn, initial_ids, initial_cache, max_length, eos_id, lengths
):
    """Checks the common arguments; returns them as tensors / ints."""
    if not callable(step_fn):
        raise invalid_argument("step_fn", "a callable", step_fn, context)
    max_length = check_positive_int("max_length", max_length, context)
    if (isinstance(eos_id, bool) or not isinstance(eos_id, numbers.Integral)
            or eos_id < 0):
        raise invalid_argument(
            "eos_id", "a non-negative integer", eos_id, context)
    initial_ids = _int_vector("initial_ids", initial_ids, context)
    if lengths is not None:
        lengths = _int_vector("max_lengths", lengths, context)
        if not initial_ids.shape.is_compatible_with(lengths.shape):
            raise invalid_argument(
                "max_lengths",
                f"one limit per row, shape {tuple(initial_ids.shape)}",
                f"<tensor of shape {tuple(lengths.shape)}>",
                context,
            )
    if initial_cache is None:
        initial_cache = {}
    cache = tf.nest.map_structure(tf.convert_to_tensor, initial_cache)
    batch = initial_ids.shape[0]
    for t in tf.nest.flatten(cache):
        if t.shape.rank is None or t.shape.rank < 1 or (
            batch is not None
            and t.shape[0] is not None
            and t.shape[0] != batch
        ):
            raise invalid_argument(
                "initial_cache",
                f"tensors whose leading axis is the batch axis ({batch})",
                f"<tensor of shape {t.shape}>",
                context,
            )
    return initial_ids, cache, int(max_length), int(eos_id), lengths


def _int_vector(name, x, context):
    """Converts `x` to an int32 tensor [B], raising if it is not one."""
    try:
        t = tf.convert_to_tensor(x)
    except (TypeError, ValueError):
        raise invalid_argument(name, "a rank-1 integer tensor", x, context)
    if t.shape.rank != 1 or not t.dtype.is_integer:
        raise invalid_argument(
            name,
            "a rank-1 integer tensor of shape (B,)",
            f"<tensor of shape {t.shape} and dtype {t.dtype.name}>",
            context,
        )
    return tf.cast(t, tf.int32)


def _row_limits(max_lengths, batch_size, max_length):
    """Per-row length limits, int32 [B], clipped to [1, max_length]."""
    if max_lengths is None:
        return tf.fill([batch_size], max_length)
    return tf.clip_by_value(max_lengths, 1, max_length)


def _dim(x, axis):
    """Static size of `x` along `axis` if known, else a scalar tensor."""
    size = x.shape[axis]
    return size if size is not None else tf.shape(x)[axis]


def _keep_shapes(body):
    """Wraps a loop body so every output keeps its input's static shape.

    Ops such as `tf.reshape(x, [batch_size, -1])` with a dynamic batch size
    lose static dims that `tf.while_loop` requires to stay fixed.
    """

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
    logits = tf.convert_to_tensor(logits)
    if logits.shape.rank != 2 or not logits.dtype.is_floating:
        raise ValueError(
            "`step_fn` must return float logits of shape [rows, V]. "
            f"Received: logits with shape {logits.shape} and dtype "
            f"{logits.dtype.name}"
        )
    try:
        tf.nest.assert_same_structure(cache, new_cache)
    except (TypeError, ValueError) as e:
        raise ValueError(
            "`step_fn` must return a cache with the structure of the cache "
            f"it received. {e}"
        ) from None

    def keep_shape(old, new):
        if new is old:
            return old  # Passed through: see `_reorder_cache`.
        new = tf.convert_to_tensor(new)
        if new.dtype != old.dtype or not new.shape.is_compatible_with(
            old.shape
        ):
            raise ValueError(
                "`step_fn` must return cache tensors with the dtype and "
                f"shape they had. Received: {new.dtype.name}{new.shape} for "
                f"a cache tensor of {old.dtype.name}{old.shape}"
            )
        # Loop variables must keep their static shape across iterations.
        return tf.ensure_shape(new, old.shape)

    new_cache = tf.nest.map_structure(keep_shape, cache, new_cache)
    return logits, new_cache
