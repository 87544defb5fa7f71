"""Samplers: how `sample_search` and `CausalLM.generate` choose each token.

A sampler maps the log-probabilities of the next token, float32 [B, V], and
a step seed (an int32 tensor [2]) to one token per row, int32 [B]. Shapes:
B = rows, V = vocabulary, k = candidates kept.

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

Masked tokens. A token whose log-probability is at or below
`MASKED_THRESHOLD` (-1e8) is masked: the models give padding the logit
`MASKED_LOGIT` (-1e9) before the log-softmax, and no sampler ever draws a
masked token, whatever its temperature, k or p. The temperature is applied
to the log-probabilities less the row's best (so the best token scales to
0 and nothing overflows to NaN), with 1 / T capped at 1e30 (float32 holds
no larger) and the scaled values floored at -1e30; masked tokens are then
set below that floor. Everything stays finite, also under XLA, and any
finite T > 0 is legal: T -> 0 is greedy (a uniform draw among tied best
tokens), T -> inf is uniform over the unmasked vocabulary.

Seeds. A generation seed is an int in [-2**63, 2**63), carried as two
int32 words (`seed_words`); the draw for generated token i uses
`step_seed(words, i)`, a fold of i into the words
(`tf.random.experimental.stateless_fold_in` under TensorFlow,
`jax.random.fold_in` under JAX). One seed gives the same tokens on every
call with the same prompts, batch and settings. Draws use TensorFlow's
`stateless_categorical` and JAX's `random.categorical` (their streams
differ: a seed gives other text per backend). Under other backends only
`GreedySampler` and `BeamSampler` run.
"""

import abc
import inspect
import math
import numbers

from keras import ops

from tfattn.decoding._loop import _argmax
from tfattn.decoding._loop import _batch_gather
from tfattn.decoding.draws import draw
from tfattn.decoding.draws import seed_words
from tfattn.decoding.draws import step_seed
from tfattn.utils.validation import check_non_negative_float
from tfattn.utils.validation import check_positive_int
from tfattn.utils.validation import invalid_argument

__all__ = [
    "Sampler", "GreedySampler", "RandomSampler", "TopKSampler",
    "TopPSampler", "BeamSampler", "get", "nucleus", "draw", "tempered",
    "top_p_choice", "inverse_temperature", "seed_words", "step_seed",
    "MASKED_LOGIT", "MASKED_THRESHOLD",
]

_CONTEXT = "sampler"
_BISECTIONS = 24
MASKED_LOGIT = -1e9
MASKED_THRESHOLD = -1e8
# 1 / T is capped here (float32's largest is 3.4e38), and scaled
# log-probabilities floored: exp(-1e30) is 0, and no NaN can arise.
_MAX_INVERSE_TEMPERATURE = 1e30
_FLOOR = -1e30
# Below the floor: masked tokens rank under every unmasked one in top-k.
_MASKED_SCALED = -1e38


class Sampler(abc.ABC):
    """Base class: `choose(log_probs, seed)` picks one token per row.

    Subclasses implement `_choose` (and `get_config` for their arguments).
    `draws` says whether the sampler uses its seed.
    """

    draws = False

    def choose(self, log_probs, seed):
        """Picks the next token of every row.

        Args:
            log_probs: float32 [B, V]. Log-probabilities (or logits: any
                per-row constant shift gives the same choice); entries at
                or below `MASKED_THRESHOLD` are never chosen.
            seed: int32 tensor [2]. The step's seed (`step_seed`).

        Returns:
            int32 [B]. The chosen tokens.
        """
        return self._choose(log_probs, seed)

    @abc.abstractmethod
    def _choose(self, log_probs, seed):
        """The subclass's choice (see `choose`)."""

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


def _checked_temperature(temperature):
    if (isinstance(temperature, bool)
            or not isinstance(temperature, numbers.Real)
            or not 0 < temperature < math.inf):
        raise invalid_argument(
            "temperature", "a finite number > 0", temperature, _CONTEXT)
    return float(temperature)


class RandomSampler(Sampler):
    """A draw from softmax(log_probs / temperature).

    Args:
        temperature: finite float > 0. Below 1 sharpens, above 1 flattens
            the distribution; the extremes are greedy and uniform (module
            docstring). Defaults to `1.0`.
    """

    draws = True

    def __init__(self, temperature=1.0):
        """Checks the arguments."""
        self.temperature = _checked_temperature(temperature)

    def _choose(self, log_probs, seed):
        return draw(self._scaled(log_probs), seed)

    def _scaled(self, log_probs):
        return tempered(log_probs, inverse_temperature(self.temperature))

    def get_config(self):
        return {"temperature": self.temperature}


class TopKSampler(RandomSampler):
    """A draw among the k most likely tokens (after the temperature).

    Args:
        k: int >= 1. Tokens kept; at most the vocabulary (checked when
            generating). Defaults to `5` (keras-hub's default).
        temperature: finite float > 0. Defaults to `1.0`.
    """

    def __init__(self, k=5, temperature=1.0):
        """Checks the arguments."""
        super().__init__(temperature)
        self.k = check_positive_int("k", k, _CONTEXT)

    def _choose(self, log_probs, seed):
        _check_k(self.k, log_probs)
        # The k best before the temperature: the order is the same, and
        # float32 cannot resolve it after a huge T.
        values, indices = ops.top_k(log_probs, self.k)
        choice = draw(self._scaled(values), seed)
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
        p: float in (0, 1]. The mass kept; 1 keeps every token. Defaults
            to `0.9` (Holtzman et al.'s recommended range, 0.9-0.95).
        temperature: finite float > 0. Defaults to `1.0`.
        k: int >= 1 or None. Restrict to the k most likely tokens first
            (keras-hub's `TopPSampler(k=...)`). Defaults to `None`.
    """

    def __init__(self, p=0.9, temperature=1.0, k=None):
        """Checks the arguments."""
        super().__init__(temperature)
        if (isinstance(p, bool) or not isinstance(p, numbers.Real)
                or not 0 < p <= 1):
            raise invalid_argument("p", "a number in (0, 1]", p, _CONTEXT)
        self.p = float(p)
        self.k = None if k is None else check_positive_int("k", k, _CONTEXT)

    def _choose(self, log_probs, seed):
        if self.k is not None:
            _check_k(self.k, log_probs)
        return top_p_choice(log_probs, seed, self.p,
                            inverse_temperature(self.temperature), self.k)

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
        if not math.isfinite(self.alpha):
            raise invalid_argument("alpha", "a finite number >= 0", alpha,
                                   _CONTEXT)

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
            `"top_k"` (k=5), `"top_p"` (p=0.9), `"beam"` (4 beams), each
            with its class's default arguments.
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
    allowed = list(inspect.signature(cls).parameters)
    unknown = sorted(set(kwargs) - set(allowed))
    if unknown:
        raise invalid_argument(
            unknown[0], f"an argument of the {identifier!r} sampler ("
            + (", ".join(allowed) or "none") + ")", kwargs[unknown[0]],
            _CONTEXT)
    return cls(**kwargs)


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


def _check_k(k, log_probs):
    vocab = log_probs.shape[-1]
    if isinstance(vocab, int) and k > vocab:
        raise invalid_argument(
            "k", f"at most the vocabulary's {vocab} tokens", k, _CONTEXT)
