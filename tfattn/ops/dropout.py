"""Inverted dropout from 16 random bits per element.

`keras.layers.Dropout` (TensorFlow's `stateless_dropout`) draws one uniform
float per element in the input's dtype and keeps the element where the draw
is >= rate. Two things follow on CPU:

- the Philox draw is most of dropout's time, and each element takes a whole
  32-bit word of it;
- in bfloat16 a uniform draw has only 7 random bits (128 levels), so a
  rate of 0.3 keeps 89/128 = 0.695 of the elements while scaling by 1/0.7:
  the layer's output is 0.6% low on average, at every dropout site.

Here one 32-bit Philox word gives two 16-bit draws u in [0, 65536), an
element is dropped where u < t with t = round(rate · 2^16), and kept
elements are scaled by 2^16 / (2^16 - t). The rate applied is t / 2^16,
within 2^-17 (7.6e-6) of the one asked for, whatever the input's dtype, and
the expected output equals the input up to the scale's rounding to that
dtype. A rate under 2^-17 rounds to no dropout.

Shapes: any input shape; `noise_shape` broadcasts against it as in
`keras.layers.Dropout` (None entries take the input's size), e.g.
[B, 1, C] drops the same channels at every position.

Backends: on TensorFlow the draws are the Philox words above, so a seed
keeps the masks it gave. Elsewhere each element's 16-bit draw is
`keras.random.randint(0, 2^16)` from the same seed: the same threshold,
scale and expected output, other masks.
"""

import keras
from keras import ops
from keras.src import backend as keras_backend

from tfattn.ops import _backend

__all__ = ["LEVELS", "drop_threshold", "dropout", "keep_mask",
           "stateless_seed"]

LEVELS = 1 << 16  # Values of one 16-bit draw.


def drop_threshold(rate):
    """t in [0, 2^16]: an element whose 16-bit draw is < t is dropped.

    Args:
        rate: float in [0, 1]. The fraction of elements to drop.

    Returns:
        int. round(rate · 2^16), clipped to [0, 2^16].
    """
    return min(LEVELS, max(0, int(round(float(rate) * LEVELS))))


def stateless_seed(seed):
    """A [2] int32 seed for ``tf.random.stateless_*`` from a Keras seed
    state (Keras keeps it as int64 on TensorFlow; wrapped as Keras does).
    On other backends, the seed as their `keras.random` functions take it.

    Args:
        seed: int tensor [2], e.g. `SeedGenerator.next()`.

    Returns:
        int32 tensor [2] on TensorFlow: `seed` itself if int32, else modulo
        2^31 - 2. Elsewhere the seed in Keras's random-seed dtype (JAX),
        or a Python int (PyTorch, whose `keras.random` takes no tensors).
    """
    if not _backend.is_tensorflow():
        return _keras_seed(seed)
    tf = _backend.tensorflow()
    seed = tf.convert_to_tensor(seed)
    if seed.dtype == tf.int32:
        return seed
    return tf.cast(tf.math.floormod(seed, tf.int32.max - 1), tf.int32)


def dropout(inputs, rate, seed, noise_shape=None):
    """Inverted dropout with a 16-bit draw per element (module docstring).

    Args:
        inputs: float tensor of any shape.
        rate: Python float in [0, 1]: the fraction of elements to drop.
        seed: int tensor [2], a stateless seed (`stateless_seed`); the same
            seed gives the same mask.
        noise_shape: optional list, the mask's shape, broadcast against the
            input's; None entries take the input's size.

    Returns:
        A tensor of the input's shape and dtype: 0 where dropped, the input
        times 2^16 / (2^16 - t) where kept.
    """
    if not _backend.is_tensorflow():
        return _keras_dropout(inputs, rate, seed, noise_shape)
    tf = _backend.tensorflow()
    inputs = tf.convert_to_tensor(inputs)
    threshold = drop_threshold(rate)
    if threshold == 0:
        return inputs
    if threshold == LEVELS:
        return tf.zeros_like(inputs)
    keep = keep_mask(_mask_shape(inputs, noise_shape), threshold, seed)
    scale = tf.constant(LEVELS / (LEVELS - threshold), inputs.dtype)
    # A multiply by the scaled mask, as `tf.nn.dropout` does, so that the
    # gradient is one multiply; selecting between the scaled input and
    # zeros built a zero tensor and selected again in the gradient. (A
    # dropped inf or NaN so gives NaN, as TensorFlow's and Keras's do.)
    return inputs * tf.where(keep, scale, tf.zeros([], inputs.dtype))


def keep_mask(shape, threshold, seed):
    """bool [shape], True where an element's 16-bit draw is >= threshold.

    Args:
        shape: int32 tensor [rank] (or list). The mask's shape; static
            (a list or tuple of ints) on backends other than TensorFlow.
        threshold: int in [0, 2^16] (`drop_threshold`).
        seed: int tensor [2], a stateless seed (`stateless_seed`).

    Returns:
        bool tensor of shape `shape`.
    """
    if not _backend.is_tensorflow():
        draws = keras.random.randint(tuple(shape), 0, LEVELS, dtype="int32",
                                     seed=_keras_seed(seed))
        return draws >= threshold
    tf = _backend.tensorflow()
    count = tf.reduce_prod(shape)
    words = tf.random.stateless_uniform(
        [(count + 1) // 2],
        seed=stateless_seed(seed),
        minval=None,
        maxval=None,
        dtype=tf.uint32,
    )
    draws = tf.reshape(tf.bitcast(words, tf.uint16), [-1])[:count]
    return tf.reshape(draws >= tf.constant(threshold, tf.uint16), shape)


def _keras_dropout(inputs, rate, seed, noise_shape):
    """`dropout` in `keras.ops`, for the backends other than TensorFlow."""
    inputs = ops.convert_to_tensor(inputs)
    threshold = drop_threshold(rate)
    if threshold == 0:
        return inputs
    if threshold == LEVELS:
        return ops.zeros_like(inputs)
    shape = tuple(ops.shape(inputs))
    if noise_shape is not None:
        _check_noise_rank(noise_shape, shape)
        shape = tuple(s if n is None else n for s, n in zip(shape, noise_shape))
    keep = keep_mask(shape, threshold, seed)
    scale = ops.cast(LEVELS / (LEVELS - threshold), inputs.dtype)
    return inputs * ops.where(keep, scale, ops.zeros((), inputs.dtype))


def _keras_seed(seed):
    """`seed` as `keras.random` takes it on this backend: an int or a
    `SeedGenerator` as is; a tensor as the backend's seed dtype (JAX), or
    folded to an int as Keras folds its own seeds (PyTorch)."""
    if isinstance(seed, (int, keras.random.SeedGenerator)):
        return seed
    if keras.config.backend() == "torch":
        first, second = (int(v) for v in ops.convert_to_numpy(seed))
        return (first + second) & 0xFFFFFFFF
    return ops.cast(seed, keras_backend.random_seed_dtype())


def _check_noise_rank(noise_shape, shape):
    if len(noise_shape) != len(shape):
        raise ValueError(
            f"dropout: noise_shape {tuple(noise_shape)} must have the "
            f"input's rank {len(shape)}; received an input of shape "
            f"{tuple(shape)}."
        )


def _mask_shape(inputs, noise_shape):
    """int32 [rank]: `noise_shape` with its None entries filled in."""
    tf = _backend.tensorflow()
    shape = tf.shape(inputs)
    if noise_shape is None:
        return shape
    _check_noise_rank(noise_shape, tuple(inputs.shape))
    sizes = [shape[i] if n is None else n for i, n in enumerate(noise_shape)]
    return tf.stack(sizes)
