"""Stateless draws of the samplers: generation seeds as two int32 words,
one seed per generated token, and one categorical draw per row.

A generation seed is an int in [-2**63, 2**63). It travels as two int32
words (high, low: its 64 bits, two's complement), the same words from a
Python int (`CausalLM.generate`) and from an int64 tensor (the
language-model export's `seed` input), so both give the same draws. The
draw for generated token i uses `step_seed(words, i)`.
"""

import numbers

import keras
import numpy as np
from keras import ops

from tfattn.utils.validation import invalid_argument

__all__ = ["seed_words", "step_seed", "draw"]

_SEED_RANGE = (-2 ** 63, 2 ** 63)


def seed_words(seed, context, name="seed"):
    """A generation seed as two int32 words (high, low), two's complement.

    Args:
        seed: a Python or NumPy int in [-2**63, 2**63), or a scalar int
            tensor (a signature's int64 input), or an int tensor [2] (the
            words already).
        context: str. Who checks; prefixes the message.
        name: str. The argument's name in the message.

    Returns:
        int32 [2]: a NumPy array for an int, else a tensor.

    Raises:
        ValueError: naming `name`: not an int, or out of the int64 range.
    """
    if isinstance(seed, (bool, np.bool_)):
        raise invalid_argument(name, "an int in [-2**63, 2**63)", seed,
                               context)
    if isinstance(seed, (numbers.Integral, np.integer)):
        seed = int(seed)
        if not _SEED_RANGE[0] <= seed < _SEED_RANGE[1]:
            raise invalid_argument(name, "an int in [-2**63, 2**63)", seed,
                                   context)
        unsigned = seed % 2 ** 64
        return np.array([unsigned >> 32, unsigned & 0xFFFFFFFF],
                        np.uint32).view(np.int32)
    if not hasattr(seed, "dtype") or "int" not in str(seed.dtype):
        raise invalid_argument(name, "an int in [-2**63, 2**63)", seed,
                               context)
    seed = ops.convert_to_tensor(seed)
    if tuple(seed.shape) == (2,):
        return ops.cast(seed, "int32")
    if tuple(seed.shape) != ():
        raise invalid_argument(name, "a scalar int or int32 words [2]",
                               f"<tensor of shape {tuple(seed.shape)}>",
                               context)
    return _tensor_words(seed)


def _tensor_words(seed):
    """`seed_words` of a scalar int tensor, in the graph."""
    seed = ops.cast(seed, "int64")
    high = ops.right_shift(seed, 32)
    low = ops.bitwise_and(seed, 0xFFFFFFFF)
    low = ops.where(low >= 2 ** 31, low - 2 ** 32, low)
    return ops.cast(ops.stack([high, low]), "int32")


def step_seed(words, step):
    """The seed of generated token `step`: `step` folded into the words.

    Args:
        words: int32 tensor [2] (`seed_words`).
        step: int32 scalar tensor.

    Returns:
        int32 tensor [2] (TensorFlow, JAX); `words` unchanged under other
        backends, which draw nothing.
    """
    backend = keras.config.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.random.experimental.stateless_fold_in(
            ops.cast(words, "int32"), ops.cast(step, "int32"))
    if backend == "jax":
        import jax

        key = ops.cast(words, "uint32")
        return ops.cast(jax.random.fold_in(key, step), "int32")
    return words


def draw(logits, seed):
    """One stateless draw per row from softmax(logits).

    Args:
        logits: float32 [B, V]. Finite (`tempered` makes them so).
        seed: int32 tensor [2].

    Returns:
        int32 [B]. TensorFlow's `stateless_categorical` or JAX's
        `random.categorical`; other backends raise `NotImplementedError`.
    """
    backend = keras.config.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.random.stateless_categorical(
            logits, 1, seed=ops.cast(seed, "int32"), dtype=tf.int32)[:, 0]
    if backend == "jax":
        import jax

        key = ops.cast(seed, "uint32")
        return ops.cast(jax.random.categorical(key, logits, axis=-1), "int32")
    raise NotImplementedError(
        f"Drawing tokens runs under the TensorFlow and JAX backends; this "
        f"is {backend!r}: use sampler='greedy' or 'beam'.")
