"""Samplers: the search strategies of `generate` for every model.

Each sampler owns its search (`Sampler.search`): the per-token samplers
(`TokenSampler`) pick one token per row and step in one while-loop, and
`BeamSampler` runs beam search. A per-token sampler maps the
log-probabilities of the next token, float32 [B, V], and a step seed (an
int32 tensor [2]) to one token per row, int32 [B]. Shapes: B = rows, V =
vocabulary, k = candidates kept.

- `GreedySampler`: the most likely token (ties: the lowest id).
- `RandomSampler(temperature)`: a draw from softmax(log_probs / T).
- `TopKSampler(k, temperature)`: a draw among the k most likely tokens.
- `TopPSampler(p, temperature, k=None)`: a draw from the nucleus, the
  smallest set of most likely tokens whose probability reaches p. The
  nucleus is found by bisecting on its probability threshold, 24 halvings
  of [0, top probability], so the vocabulary is never sorted (keras-hub
  #963); `k` optionally restricts it to the k most likely tokens first.
- `BeamSampler(beam_size, alpha)`: K beams per row (`beam_search`).

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
from tfattn.decoding._loop import _call_step_fn
from tfattn.decoding._loop import _dim
from tfattn.decoding._loop import _is_stop
from tfattn.decoding._loop import _keep_shapes
from tfattn.decoding._loop import _row_limits
from tfattn.decoding._loop import _validate
from tfattn.decoding.beam import beam_search
from tfattn.decoding.draws import MASKED_LOGIT
from tfattn.decoding.draws import MASKED_THRESHOLD
from tfattn.decoding.draws import draw
from tfattn.decoding.draws import inverse_temperature
from tfattn.decoding.draws import nucleus
from tfattn.decoding.draws import seed_words
from tfattn.decoding.draws import step_seed
from tfattn.decoding.draws import tempered
from tfattn.decoding.draws import top_p_choice
from tfattn.utils.validation import check_non_negative_float
from tfattn.utils.validation import check_positive_int
from tfattn.utils.validation import invalid_argument

__all__ = [
    "Sampler", "TokenSampler", "GreedySampler", "RandomSampler",
    "TopKSampler", "TopPSampler", "BeamSampler", "for_beam_size", "get",
    "nucleus", "draw", "tempered", "top_p_choice", "inverse_temperature",
    "seed_words", "step_seed", "MASKED_LOGIT", "MASKED_THRESHOLD",
]

_CONTEXT = "sampler"


class Sampler(abc.ABC):
    """Base class: a search strategy. `search` runs a whole decode; the
    per-token samplers (`TokenSampler`) choose one token per row and step,
    `BeamSampler` keeps K beams per row.

    `draws` says whether the sampler uses its seed. Subclasses override
    `get_config` for their arguments.
    """

    draws = False

    @abc.abstractmethod
    def search(self, step_fn, initial_ids, initial_cache, max_length,
               stop_ids, seed=0, max_lengths=None):
        """Decodes every row with this strategy, in one
        `keras.ops.while_loop` (see `tfattn.decoding` for `step_fn` and
        the output conventions).

        Args:
            step_fn: callable `(ids [b] int32, position, cache) ->
                (logits [b, V], new_cache)`.
            initial_ids: int tensor [B]. The token each row starts from.
            initial_cache: nested tensors with leading axis B, or None.
            max_length: Python int L. Tokens the output holds.
            stop_ids: int or tuple of ints. Tokens that end a row.
            seed: int in [-2**63, 2**63), a scalar int tensor or int32
                words [2] (`seed_words`). The draws' seed.
            max_lengths: int tensor [B] or None. Per-row limits.

        Returns:
            `(ids int32 [B, L], scores float32 [B])`.
        """

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


class TokenSampler(Sampler):
    """A sampler that picks one token per row at each step: `choose`.

    Its `search` is the greedy and sampling loop: at position i every
    unfinished row emits `choose` of its next-token log-probabilities (the
    draw seeded by `step_seed(words, i)`); a row finishes when it emits a
    stop token or reaches its limit, then emits 0 and adds nothing to its
    score; the loop stops once every row has finished. Scores are the sum
    of the model's log-probabilities of the emitted tokens (before any
    temperature). Subclasses implement `_choose`.
    """

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

    def search(self, step_fn, initial_ids, initial_cache, max_length,
               stop_ids, seed=0, max_lengths=None):
        """The per-token loop (the class docstring); `Sampler.search`'s
        arguments.

        Args:
            step_fn: callable `(ids [B] int32, position, cache) ->
                (logits [B, V], new_cache)`.
            initial_ids: int tensor [B].
            initial_cache: nested tensors with leading axis B, or None.
            max_length: Python int L.
            stop_ids: int or tuple of ints.
            seed: int, scalar int tensor or int32 words [2].
            max_lengths: int tensor [B] or None.

        Returns:
            `(ids int32 [B, L], scores float32 [B])`.
        """
        initial_ids, cache, max_length, stop_ids, max_lengths = _validate(
            "sample_search", step_fn, initial_ids, initial_cache, max_length,
            stop_ids, max_lengths)
        words = ops.convert_to_tensor(seed_words(seed, "sample_search"),
                                      "int32")
        batch_size = _dim(initial_ids, 0)
        limits = _row_limits(max_lengths, batch_size, max_length)
        positions = ops.arange(max_length, dtype="int32")

        def cond(i, ids, cache, seq, scores, finished):
            return ops.logical_and(i < max_length,
                                   ops.logical_not(ops.all(finished)))

        def body(i, ids, cache, seq, scores, finished):
            logits, new_cache = _call_step_fn(step_fn, ids, i, cache)
            log_probs = ops.log_softmax(ops.cast(logits, "float32"), axis=-1)
            step = step_seed(words, i) if self.draws else words
            tokens = self.choose(log_probs, step)
            token_log_probs = _batch_gather(log_probs, tokens[:, None])
            tokens = ops.where(finished, 0, tokens)
            scores = scores + ops.where(finished, 0.0,
                                        token_log_probs[:, 0])
            # One-hot write at column i: no position-dependent slice.
            seq = ops.where(ops.equal(positions[None, :], i),
                            tokens[:, None], seq)
            # Finished rows keep being fed their last token (ignored).
            ids = ops.where(finished, ids, tokens)
            finished = (finished | _is_stop(tokens, stop_ids)
                        | (i + 1 >= limits))
            return i + 1, ids, new_cache, seq, scores, finished

        loop_vars = (ops.convert_to_tensor(0, "int32"), initial_ids, cache,
                     ops.zeros((batch_size, max_length), "int32"),
                     ops.zeros((batch_size,), "float32"),
                     ops.zeros((batch_size,), "bool"))
        _, _, _, seq, scores, _ = ops.while_loop(cond, _keep_shapes(body),
                                                 loop_vars)
        return seq, scores


class GreedySampler(TokenSampler):
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


class RandomSampler(TokenSampler):
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
    """Beam search (`tfattn.decoding.beam_search`): K beams per row, the
    best finished beam of each row returned with its length-penalised
    score.

    Args:
        beam_size: int >= 1. Beams per row. Defaults to `4` (the paper).
        alpha: finite float >= 0. The GNMT length-penalty exponent.
            Defaults to `0.6` (the paper).
    """

    def __init__(self, beam_size=4, alpha=0.6):
        """Checks the arguments."""
        self.beam_size = check_positive_int("beam_size", beam_size, _CONTEXT)
        self.alpha = check_non_negative_float("alpha", alpha, _CONTEXT)
        if not math.isfinite(self.alpha):
            raise invalid_argument("alpha", "a finite number >= 0", alpha,
                                   _CONTEXT)

    def search(self, step_fn, initial_ids, initial_cache, max_length,
               stop_ids, seed=0, max_lengths=None):
        """`beam_search` with this sampler's beams and length penalty
        (`Sampler.search`'s arguments; `seed` is not used).

        Args:
            step_fn: callable `(ids [B*K] int32, position, cache) ->
                (logits [B*K, V], new_cache)`.
            initial_ids: int tensor [B].
            initial_cache: nested tensors with leading axis B, or None.
            max_length: Python int L.
            stop_ids: int or tuple of ints.
            seed: unused (beam search draws nothing).
            max_lengths: int tensor [B] or None.

        Returns:
            `(ids int32 [B, L], scores float32 [B])`: each row's best beam
            and its length-penalised score.
        """
        return beam_search(step_fn, initial_ids, initial_cache, max_length,
                           stop_ids, beam_size=self.beam_size,
                           alpha=self.alpha, max_lengths=max_lengths)

    def get_config(self):
        return {"beam_size": self.beam_size, "alpha": self.alpha}


_NAMES = {
    "greedy": GreedySampler,
    "random": RandomSampler,
    "top_k": TopKSampler,
    "top_p": TopPSampler,
    "beam": BeamSampler,
}


def for_beam_size(beam_size, alpha=0.6):
    """The sampler of a `beam_size` setting (hparams' `beam_size`,
    `translate_texts`, the exports): greedy for 1, else beam search.

    Args:
        beam_size: int >= 1.
        alpha: float >= 0. The length penalty (beam search only).

    Returns:
        `GreedySampler` or `BeamSampler(beam_size, alpha)`.
    """
    check_positive_int("beam_size", beam_size, _CONTEXT)
    if beam_size == 1:
        return GreedySampler()
    return BeamSampler(beam_size, alpha)


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


def _check_k(k, log_probs):
    vocab = log_probs.shape[-1]
    if isinstance(vocab, int) and k > vocab:
        raise invalid_argument(
            "k", f"at most the vocabulary's {vocab} tokens", k, _CONTEXT)
