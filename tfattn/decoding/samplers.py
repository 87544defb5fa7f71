"""Samplers: how `sample_search` and `CausalLM.generate` choose each token.

A sampler maps the log-probabilities of the next token, float32 [B, V], and
a seed (an int32 tensor [2]) to one token per row, int32 [B]. Shapes: B =
rows, V = vocabulary, k = candidates kept.

- `GreedySampler`: the most likely token (ties: the lowest id).
- `RandomSampler(temperature)`: a draw from softmax(log_probs / T).
- `TopKSampler(k, temperature)`: a draw among the k most likely tokens.
- `TopPSampler(p, temperature, k=None)`: a draw from the nucleus, the
  smallest set of most likely tokens whose probability reaches p. The
  nucleus is found by bisecting on its probability threshold, 24 halvings
  of [0, top probability], so the vocabulary is never sorted (keras-hub
  #963); `k` optionally restricts it to the k most likely tokens first.
- `BeamSampler(beam_size, alpha)`: not a per-token choice: `generate`
  hands it to `beam_search`.

The draws are stateless: the draw for generated token i uses the seed
(seed, i), so one seed gives the same tokens on every call with the same
prompts, batch and settings. Draws use TensorFlow's
`stateless_categorical` under TensorFlow and `jax.random.categorical`
under JAX (their streams differ: a seed gives other text per backend).
Under other backends only `GreedySampler` and `BeamSampler` run.
"""

import numbers

import keras
from keras import ops

from tfattn.decoding._loop import _argmax
from tfattn.decoding._loop import _batch_gather
from tfattn.utils.validation import check_non_negative_float
from tfattn.utils.validation import check_positive_int
from tfattn.utils.validation import invalid_argument

__all__ = [
    "Sampler", "GreedySampler", "RandomSampler", "TopKSampler",
    "TopPSampler", "BeamSampler", "get", "nucleus", "draw",
]

_CONTEXT = "sampler"
_BISECTIONS = 24


class Sampler:
    """Base class: `choose(log_probs, seed)` picks one token per row.

    Subclasses override `_choose` (and `get_config` for their arguments).
    `draws` says whether the sampler uses its seed.
    """

    draws = False

    def choose(self, log_probs, seed):
        """Picks the next token of every row.

        Args:
            log_probs: float32 [B, V]. Log-probabilities (or logits: any
                per-row constant shift gives the same choice).
            seed: int32 tensor [2]. The draw's seed (the user's seed and
                the position).

        Returns:
            int32 [B]. The chosen tokens.
        """
        return self._choose(log_probs, seed)

    def _choose(self, log_probs, seed):
        raise NotImplementedError

    def get_config(self):
        """The constructor's arguments, by name.

        Returns:
            dict.
        """
        return {}

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items())
        return f"{type(self).__name__}({args})"

    def __eq__(self, other):
        return (type(self) is type(other)
                and self.get_config() == other.get_config())

    def __hash__(self):
        return hash((type(self).__name__,
                     tuple(sorted(self.get_config().items()))))


class GreedySampler(Sampler):
    """The most likely token; ties go to the lowest id."""

    def _choose(self, log_probs, seed):
        return _argmax(log_probs)


class RandomSampler(Sampler):
    """A draw from softmax(log_probs / temperature).

    Args:
        temperature: float > 0. Below 1 sharpens, above 1 flattens the
            distribution. Defaults to `1.0`.
    """

    draws = True

    def __init__(self, temperature=1.0):
        """Checks the arguments."""
        check_non_negative_float("temperature", temperature, _CONTEXT)
        if not temperature > 0:
            raise invalid_argument(
                "temperature", "a number > 0", temperature, _CONTEXT)
        self.temperature = float(temperature)

    def _choose(self, log_probs, seed):
        return draw(self._scaled(log_probs), seed)

    def _scaled(self, log_probs):
        if self.temperature == 1.0:
            return log_probs
        return log_probs / self.temperature

    def get_config(self):
        return {"temperature": self.temperature}


class TopKSampler(RandomSampler):
    """A draw among the k most likely tokens (after the temperature).

    Args:
        k: int >= 1. Tokens kept; at most the vocabulary (checked when
            generating).
        temperature: float > 0. Defaults to `1.0`.
    """

    def __init__(self, k, temperature=1.0):
        """Checks the arguments."""
        super().__init__(temperature)
        self.k = check_positive_int("k", k, _CONTEXT)

    def _choose(self, log_probs, seed):
        _check_k(self.k, log_probs)
        values, indices = ops.top_k(self._scaled(log_probs), self.k)
        choice = draw(values, seed)
        return _batch_gather(indices, choice[:, None])[:, 0]

    def get_config(self):
        return {"k": self.k, "temperature": self.temperature}


class TopPSampler(RandomSampler):
    """A draw from the nucleus: the fewest most likely tokens whose
    probabilities (after the temperature) sum to at least p.

    The nucleus is {tokens with probability >= t}, t the largest threshold
    that keeps a mass >= p, found by 24 bisections of [0, top probability]
    (no sort). It equals the sorted-cumulative-sum nucleus (Holtzman et
    al., 2020; Hugging Face's `TopPLogitsWarper`) except for tokens whose
    probability lies within 2^-24 of the top probability below t, which
    may be added; tokens tied at t are all kept. The most likely token is
    always kept.

    Args:
        p: float in (0, 1]. The mass kept; 1 keeps every token.
        temperature: float > 0. Defaults to `1.0`.
        k: int >= 1 or None. Restrict to the k most likely tokens first
            (keras-hub's `TopPSampler(k=...)`). Defaults to `None`.
    """

    def __init__(self, p, temperature=1.0, k=None):
        """Checks the arguments."""
        super().__init__(temperature)
        if (isinstance(p, bool) or not isinstance(p, numbers.Real)
                or not 0 < p <= 1):
            raise invalid_argument("p", "a number in (0, 1]", p, _CONTEXT)
        self.p = float(p)
        self.k = None if k is None else check_positive_int("k", k, _CONTEXT)

    def _choose(self, log_probs, seed):
        scaled = self._scaled(log_probs)
        indices = None
        if self.k is not None:
            _check_k(self.k, log_probs)
            scaled, indices = ops.top_k(scaled, self.k)
        keep = nucleus(ops.softmax(scaled, axis=-1), self.p)
        choice = draw(ops.where(keep, scaled, -1e9), seed)
        if indices is None:
            return choice
        return _batch_gather(indices, choice[:, None])[:, 0]

    def get_config(self):
        return {"p": self.p, "temperature": self.temperature, "k": self.k}


class BeamSampler(Sampler):
    """Beam search (`tfattn.decoding.beam_search`) instead of a per-token
    choice; the best beam of each row is returned.

    Args:
        beam_size: int >= 1. Beams per row. Defaults to `4`.
        alpha: float >= 0. The GNMT length-penalty exponent. Defaults to
            `0.6`.
    """

    def __init__(self, beam_size=4, alpha=0.6):
        """Checks the arguments."""
        self.beam_size = check_positive_int("beam_size", beam_size, _CONTEXT)
        self.alpha = check_non_negative_float("alpha", alpha, _CONTEXT)

    def _choose(self, log_probs, seed):
        raise TypeError("BeamSampler does not choose tokens one at a time: "
                        "pass it to `generate`, which runs `beam_search`.")

    def get_config(self):
        return {"beam_size": self.beam_size, "alpha": self.alpha}


_NAMES = {
    "greedy": GreedySampler,
    "random": RandomSampler,
    "top_k": TopKSampler,
    "top_p": TopPSampler,
    "beam": BeamSampler,
}


def get(identifier, **kwargs):
    """A sampler from a `Sampler` or its name.

    Args:
        identifier: a `Sampler`, or one of `"greedy"`, `"random"`,
            `"top_k"`, `"top_p"`, `"beam"`.
        **kwargs: the named sampler's arguments (e.g. `k=40` for
            `"top_k"`); not allowed with a `Sampler`.

    Returns:
        Sampler.

    Raises:
        ValueError: an unknown name, or arguments the sampler lacks.
    """
    if isinstance(identifier, Sampler):
        if kwargs:
            raise invalid_argument(
                "sampler", "a name when sampler arguments are given "
                f"({', '.join(sorted(kwargs))})", identifier, _CONTEXT)
        return identifier
    if not isinstance(identifier, str) or identifier not in _NAMES:
        raise invalid_argument(
            "sampler", "a Sampler or one of " + ", ".join(
                repr(n) for n in _NAMES), identifier, _CONTEXT)
    cls = _NAMES[identifier]
    try:
        return cls(**kwargs)
    except TypeError:
        import inspect

        allowed = [n for n in inspect.signature(cls).parameters]
        unknown = sorted(set(kwargs) - set(allowed))
        raise invalid_argument(
            unknown[0] if unknown else "sampler",
            f"an argument of the {identifier!r} sampler ("
            + (", ".join(allowed) or "none") + ")",
            kwargs.get(unknown[0]) if unknown else kwargs, _CONTEXT,
        ) from None


def nucleus(probs, p):
    """The nucleus of each row: bool [B, V], True for the tokens whose
    probability is at least the largest threshold keeping a mass >= p.

    Args:
        probs: float32 [B, V]. Probabilities (rows sum to 1).
        p: float in (0, 1].

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


def _check_k(k, log_probs):
    vocab = log_probs.shape[-1]
    if isinstance(vocab, int) and k > vocab:
        raise invalid_argument(
            "k", f"at most the vocabulary's {vocab} tokens", k, _CONTEXT)


def draw(logits, seed):
    """One stateless draw per row from softmax(logits).

    Args:
        logits: float32 [B, V].
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
