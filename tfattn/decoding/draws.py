"""Stateless draws of the samplers: generation seeds as two int32 words,
one seed per generated token, and one categorical draw per row.

A generation seed is an int in [-2**63, 2**63). It travels as two int32
words (high, low: its 64 bits, two's complement), the same words from a
Python int (`CausalLM.generate`) and from an int64 tensor (the
language-model export's `seed` input), so both give the same draws. The
draw for generated token i uses `step_seed(words, i)`.

The arithmetic of the samplers' distributions lives here too: the
temperature applied without overflow (`inverse_temperature`, `tempered`),
masked tokens kept out (`MASKED_THRESHOLD`), and the nucleus of top-p
(`nucleus`, `top_p_choice`); `tfattn.decoding.samplers` says why.
"""

import numbers

import keras
import numpy as np
from keras import ops

from tfattn.decoding._loop import _batch_gather
from tfattn.utils.validation import invalid_argument

__all__ = ["seed_words", "step_seed", "draw", "inverse_temperature",
           "tempered", "top_p_choice", "nucleus", "MASKED_LOGIT",
           "MASKED_THRESHOLD"]

_SEED_RANGE = (-2 ** 63, 2 ** 63)
_BISECTIONS = 24
MASKED_LOGIT = -1e9
MASKED_THRESHOLD = -1e8
# 1 / T is capped here (float32's largest is 3.4e38), and scaled
# log-probabilities floored: exp(-1e30) is 0, and no NaN can arise.
_MAX_INVERSE_TEMPERATURE = 1e30
_FLOOR = -1e30
# Below the floor: masked tokens rank under every unmasked one in top-k.
_MASKED_SCALED = -1e38


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


def inverse_temperature(temperature):
    """1 / T, capped at 1e30 (a float32 holds no larger).

    Args:
        temperature: a Python float > 0, or a float32 scalar tensor > 0
            (a signature's input; a float32 subnormal may be flushed to 0,
            which the cap turns into 1e30 too).

    Returns:
        The same kind: a Python float or a float32 scalar tensor.
    """
    if isinstance(temperature, numbers.Real):
        return min(1.0 / temperature, _MAX_INVERSE_TEMPERATURE)
    return ops.minimum(1.0 / ops.cast(temperature, "float32"),
                       _MAX_INVERSE_TEMPERATURE)


def tempered(log_probs, inverse):
    """Logits to draw from at temperature 1 / `inverse`, masked tokens
    kept out (module docstring).

    Args:
        log_probs: float32 [B, V].
        inverse: float or float32 scalar tensor in [0, 1e30]. 1 / T.

    Returns:
        float32 [B, V]: (log_probs - the row's best unmasked) * inverse,
        floored at -1e30; -1e38 at masked tokens.
    """
    log_probs = ops.cast(log_probs, "float32")
    unmasked = log_probs > MASKED_THRESHOLD
    best = ops.max(ops.where(unmasked, log_probs, MASKED_THRESHOLD),
                   axis=-1, keepdims=True)
    scaled = ops.maximum((log_probs - best) * inverse, _FLOOR)
    return ops.where(unmasked, scaled, _MASKED_SCALED)


def top_p_choice(log_probs, seed, p, inverse, k=None):
    """`TopPSampler`'s draw, its settings Python numbers or scalar tensors
    (the language-model export's `sample` signature feeds tensors).

    Args:
        log_probs: float32 [B, V].
        seed: int32 tensor [2]. The step's seed.
        p: float or float32 scalar tensor in (0, 1].
        inverse: float or float32 scalar tensor. 1 / T
            (`inverse_temperature`).
        k: int or None. Keep the k most likely tokens first.

    Returns:
        int32 [B].
    """
    indices = None
    if k is not None:  # Before the temperature, as `TopKSampler`.
        log_probs, indices = ops.top_k(log_probs, k)
    scaled = tempered(log_probs, inverse)
    keep = nucleus(ops.softmax(scaled, axis=-1), p)
    choice = draw(ops.where(keep, scaled, _MASKED_SCALED), seed)
    if indices is None:
        return choice
    return _batch_gather(indices, choice[:, None])[:, 0]


def nucleus(probs, p):
    """The nucleus of each row: bool [B, V], True for the tokens whose
    probability is at least the largest threshold keeping a mass >= p.

    Args:
        probs: float32 [B, V]. Probabilities (rows sum to 1).
        p: float or float32 scalar tensor in (0, 1].

    Returns:
        bool [B, V]. Always True at each row's most likely token.
    """
    high = ops.max(probs, axis=-1, keepdims=True)
    low = ops.zeros_like(high)

    def halve(_, bounds):
        low, high = bounds
        middle = (low + high) * 0.5
        mass = ops.sum(ops.where(probs >= middle, probs, 0.0), axis=-1,
                       keepdims=True)
        enough = mass >= p
        return ops.where(enough, middle, low), ops.where(enough, high, middle)

    low, _ = ops.fori_loop(0, _BISECTIONS, halve, (low, high))
    return probs >= low
