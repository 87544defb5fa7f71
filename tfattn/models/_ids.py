"""The `Transformer`'s checks of its inputs (private): token ids at the
model's door, the (source, target_in) pair and their batch sizes.

An id out of the vocabulary must never reach a gather: TensorFlow's CPU
gather raises on it but its GPU and XLA gathers return zeros, and JAX's
clamp or fill, so a bad id would silently give wrong logits. Where the ids
hold values (eager TensorFlow, concrete JAX or torch arrays, NumPy) they are
checked in Python and a ValueError names the argument and the id. In a
TensorFlow graph (`tf.function`, serving) in-graph assertions carry the
same message; XLA drops assertions (and warns), so none are built for it
(`generate` checks its ids before the compiled call). Under JAX tracing
(`jax.jit`, `fit`'s compiled step, `compute_output_spec`) values are
unknown and there is no in-graph assertion that stops a compiled JAX
program, so they are not checked there: check ids
before the traced call (the data pipelines produce ids in range).
"""

import keras
import numpy as np
from keras import ops

from tfattn.ops import _backend
from tfattn.utils import validation

__all__ = ["check_ids", "concrete", "is_symbolic_length", "pair",
           "check_same_batch"]

_CONTEXT = "Transformer"


def check_ids(name, ids, vocab, max_length, values=True, context=_CONTEXT):
    """Checks token ids: int, [B, T], T within the positional table and,
    with `values`, 0 <= id < `vocab`.

    Args:
        name: str. The argument's name, for the error message.
        ids: int tensor, array or nested list [B, T].
        vocab: int. The vocabulary size the ids index.
        max_length: int. The positional table's length.
        values: bool. Check the values too (else dtype and shape only).
        context: str. The model that checks; prefixes the messages.

    Returns:
        `ids` as a tensor; in a TensorFlow graph, one that depends on the
        in-graph assertions.

    Raises:
        ValueError: naming `name`, for a wrong dtype, rank or length, or an
            id out of range where the values are known.
    """
    if not hasattr(ids, "dtype"):
        ids = ops.convert_to_tensor(ids)
    shape = validation.shape_of(ids)
    try:
        dtype = keras.backend.standardize_dtype(ids.dtype)
    except ValueError:  # NumPy strings: not a Keras dtype at all.
        dtype = str(ids.dtype)
    received = f"<tensor of dtype {dtype} and shape {shape}>"
    if "int" not in dtype:
        raise validation.invalid_argument(
            name, "int token ids of shape [B, T]", received, context)
    if len(shape) != 2:
        raise validation.invalid_argument(
            name, "int token ids of shape [B, T] (rank 2)", received,
            context)
    if shape[1] is not None and shape[1] > max_length:
        raise validation.invalid_argument(
            name,
            f"at most the positional table's max_length={max_length} "
            "positions (build the model with a larger max_length)",
            f"<tensor of shape {shape}>", context,
        )
    if not values or isinstance(ids, keras.KerasTensor):
        return ids
    expected = f"token ids in [0, {vocab}) (the vocabulary)"
    values = concrete(ids)
    if values is not None:
        bad = values[(values < 0) | (values >= vocab)]
        if bad.size:
            raise validation.invalid_argument(
                name, expected, f"<ids holding {int(bad[0])}>", context)
        return ids
    if keras.config.backend() != "tensorflow" or not _backend.asserts_run():
        return ids  # Traced: unchecked (module docstring).
    import tensorflow as tf

    message = (f"{context}: Received an invalid value for argument "
               f"`{name}`, expected {expected}.")
    checks = [tf.debugging.assert_non_negative(ids, message=message),
              tf.debugging.assert_less(ids, tf.cast(vocab, ids.dtype),
                                       message=message)]
    with tf.control_dependencies(checks):
        return tf.identity(ids)


def concrete(x):
    """`x` as a NumPy array if it holds values now, else None (traced)."""
    backend = keras.config.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        return np.asarray(x) if tf.executing_eagerly() else None
    if backend == "jax":
        import jax

        if isinstance(x, jax.core.Tracer):
            return None
    return np.asarray(ops.convert_to_numpy(x))


def is_symbolic_length(length):
    """Whether a decode length is a tensor (a buffer sized in the graph,
    `Transformer.search`) rather than a Python int."""
    return not isinstance(length, (int, np.integer)) and ops.is_tensor(length)


def pair(inputs, name):
    """Splits the model's inputs into `(source, target_in)`.

    Args:
        inputs: `{"source": ..., "target_in": ...}` or a pair.
        name: str. The argument's name, for the error message.

    Returns:
        Tuple `(source, target_in)`.

    Raises:
        ValueError: `inputs` is neither.
    """
    if isinstance(inputs, dict):
        if set(inputs) != {"source", "target_in"}:
            raise validation.invalid_argument(
                name, "a dict with keys 'source' and 'target_in'",
                sorted(inputs), _CONTEXT,
            )
        return inputs["source"], inputs["target_in"]
    if isinstance(inputs, (list, tuple)) and len(inputs) == 2:
        return inputs[0], inputs[1]
    raise validation.invalid_argument(
        name, "(source, target_in) or {'source': ..., 'target_in': ...}",
        type(inputs).__name__, _CONTEXT,
    )


def check_same_batch(source, target_in):
    """Checks that the static batch sizes agree.

    Args:
        source: tensor [B, S].
        target_in: tensor [B, T].

    Raises:
        ValueError: naming `target_in`, when both are static and differ.
    """
    b_s, b_t = validation.shape_of(source)[0], validation.shape_of(target_in)[0]
    if None not in (b_s, b_t) and b_s != b_t:
        raise validation.invalid_argument(
            "target_in", f"the same batch size as `source` ({b_s})",
            f"<tensor of shape {validation.shape_of(target_in)}>", _CONTEXT,
        )
