"""Layer normalisation over the last axis, with its gradient written out.

    y = (x - mean(x)) / sqrt(var(x) + ε) · γ + β     (per row, over C)

the formula of `keras.layers.LayerNormalization` (and of both references'
`ln`, docs/reference.md §1.1, §2.1: ε inside the square root), computed in
float32 whatever the input's dtype, as Keras does.

Why not differentiate Keras's version: TensorFlow builds its backward pass
op by op from the forward one (the moments, rsqrt, the broadcasts and the
casts), about twice the ops written out here, on tensors as large as the
activations. With the gradient in closed form,

    n  = (x - mean) · r,   r = 1 / sqrt(var + ε)
    dγ = Σ_rows dy · n,    dβ = Σ_rows dy
    dx = r · (g - mean(g) - n · mean(g · n)),   g = dy · γ

the forward and backward pass run about half the ops of the differentiated
forward pass (`bench/layer_norm.py` times them against Keras's layer); a
model's step holds 2 or 3 of them per block.

Backends: TensorFlow runs the gradient above through `tf.custom_gradient`;
JAX and PyTorch run the same closed form through `keras.ops.
custom_gradient`; any other backend differentiates the forward pass.

Shapes: x [..., C]; gamma and beta [C].
"""

import keras
from keras import ops

from tfattn.ops import _backend

__all__ = ["layer_normalization"]

_CUSTOM_GRADIENT_BACKENDS = ("jax", "torch")


def layer_normalization(x, gamma, beta, epsilon, output_dtype=None):
    """Normalises `x` over its last axis, then scales by `gamma` and shifts
    by `beta` (module docstring).

    Args:
        x: float tensor [..., C], any float dtype.
        gamma: float tensor [C] (cast to float32).
        beta: float tensor [C] (cast to float32).
        epsilon: Python float > 0, added to the variance.
        output_dtype: the result's dtype; defaults to `x`'s.

    Returns:
        A tensor of `x`'s shape in `output_dtype`. The gradients with
        respect to `x`, `gamma` and `beta` come in their own dtypes.
    """
    if not _backend.is_tensorflow():
        return _keras_layer_normalization(x, gamma, beta, float(epsilon),
                                          output_dtype)
    tf = _backend.tensorflow()
    x = tf.convert_to_tensor(x)
    output_dtype = tf.as_dtype(output_dtype or x.dtype)
    gamma = tf.cast(gamma, tf.float32)
    beta = tf.cast(beta, tf.float32)
    return _normalize(x, gamma, beta, float(epsilon), output_dtype)


def _normalize(x, gamma, beta, epsilon, output_dtype):
    tf = _backend.tensorflow()
    input_dtype = x.dtype
    batch_axes = list(range(x.shape.rank - 1))

    @tf.custom_gradient
    def normalize(x, gamma, beta):
        x = tf.cast(x, tf.float32)
        centered = x - tf.reduce_mean(x, -1, keepdims=True)
        variance = tf.reduce_mean(tf.square(centered), -1, keepdims=True)
        inv_std = tf.math.rsqrt(variance + epsilon)  # [..., 1]
        normalized = centered * inv_std
        y = tf.cast(normalized * gamma + beta, output_dtype)

        def gradient(dy):
            dy = tf.cast(dy, tf.float32)
            d_gamma = tf.reduce_sum(dy * normalized, batch_axes)
            d_beta = tf.reduce_sum(dy, batch_axes)
            g = dy * gamma
            dx = inv_std * (
                g
                - tf.reduce_mean(g, -1, keepdims=True)
                - normalized * tf.reduce_mean(g * normalized, -1,
                                              keepdims=True)
            )
            return tf.cast(dx, input_dtype), d_gamma, d_beta

        return y, gradient

    return normalize(x, gamma, beta)


def _keras_layer_normalization(x, gamma, beta, epsilon, output_dtype):
    """`layer_normalization` in `keras.ops`, for the other backends."""
    x = ops.convert_to_tensor(x)
    input_dtype = keras.backend.standardize_dtype(x.dtype)
    output_dtype = keras.backend.standardize_dtype(output_dtype or x.dtype)
    gamma = ops.cast(gamma, "float32")
    beta = ops.cast(beta, "float32")
    batch_axes = tuple(range(len(x.shape) - 1))

    def forward(x, gamma, beta):
        x = ops.cast(x, "float32")
        centered = x - ops.mean(x, -1, keepdims=True)
        variance = ops.mean(ops.square(centered), -1, keepdims=True)
        inv_std = ops.rsqrt(variance + epsilon)  # [..., 1]
        normalized = centered * inv_std
        return ops.cast(normalized * gamma + beta, output_dtype), (
            normalized, inv_std)

    if keras.config.backend() not in _CUSTOM_GRADIENT_BACKENDS:
        return forward(x, gamma, beta)[0]

    @ops.custom_gradient
    def normalize(x, gamma, beta):
        y, (normalized, inv_std) = forward(x, gamma, beta)

        # PyTorch passes the inputs, then `upstream=`; JAX the upstream.
        def gradient(*args, upstream=None):
            dy = ops.cast(args[0] if upstream is None else upstream,
                          "float32")
            d_gamma = ops.sum(dy * normalized, batch_axes)
            d_beta = ops.sum(dy, batch_axes)
            g = dy * gamma
            dx = inv_std * (
                g
                - ops.mean(g, -1, keepdims=True)
                - normalized * ops.mean(g * normalized, -1, keepdims=True)
            )
            return ops.cast(dx, input_dtype), d_gamma, d_beta

        return y, gradient

    return normalize(x, gamma, beta)
