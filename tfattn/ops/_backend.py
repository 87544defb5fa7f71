"""Backend switches shared by tfattn's ops and layers (private).

The ops and layers run on every Keras backend. Where TensorFlow has a
faster or stricter path of its own (fused gradients, graph assertions,
values known while a graph is traced) they take it on TensorFlow only, and
import TensorFlow there, lazily: the layers must import where TensorFlow is
not installed.
"""

import keras
import numpy as np

from tfattn.utils.backend import is_tensorflow

__all__ = ["asserts_run", "is_tensorflow", "static_value", "tensorflow"]


def tensorflow():
    """The `tensorflow` module, imported on first use.

    Returns:
        module. `tensorflow`.
    """
    import tensorflow as tf

    return tf


def static_value(x):
    """The value of `x` when it is known while tracing, else None.

    Args:
        x: a Python or NumPy number, or a tensor of any backend.

    Returns:
        A NumPy value (or `x` itself for Python and NumPy values), or None
        for a value known only when the compiled function runs (a graph
        tensor TensorFlow cannot fold, a JAX tracer, a symbolic tensor).
    """
    if is_tensorflow():
        return tensorflow().get_static_value(x)
    if x is None or isinstance(x, (int, float, np.ndarray, np.generic)):
        return x
    if isinstance(x, keras.KerasTensor):
        return None
    if keras.config.backend() == "jax":
        import jax

        if isinstance(x, jax.core.Tracer):
            return None
    return keras.ops.convert_to_numpy(x)


def asserts_run():
    """Whether a TensorFlow assertion built now would run.

    Inside a function XLA compiles (`jit_compile=True`) XLA drops assertion
    ops and logs an "Ignoring Assert operator" warning for each, which a
    user can do nothing about; the callers skip building them there (the
    inputs of tfattn's compiled searches are checked before the call).

    Returns:
        bool. False while TensorFlow traces a function for XLA, else True
        (also when TensorFlow's private XLA-context query is unavailable).
    """
    tf = tensorflow()
    try:
        from tensorflow.python.ops import control_flow_util
    except ImportError:  # pragma: no cover - a TensorFlow without it.
        return True
    graph = tf.compat.v1.get_default_graph()
    return not control_flow_util.GraphOrParentsInXlaContext(graph)
