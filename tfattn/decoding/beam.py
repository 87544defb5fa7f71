"""Beam search in one `keras.ops.while_loop` (see `tfattn.decoding` for
`step_fn` and the output conventions; shapes: B batch, K beam size, V
vocabulary, L = `max_length`)."""

from typing import Any
from typing import NamedTuple

import keras
from keras import ops

from tfattn.decoding._loop import _batch_gather
from tfattn.decoding._loop import _dim
from tfattn.decoding._loop import _is_stop
from tfattn.decoding._loop import _keep_shapes
from tfattn.decoding._loop import _row_limits
from tfattn.decoding._loop import _call_step_fn
from tfattn.decoding._loop import _take_rows
from tfattn.decoding._loop import _validate
from tfattn.utils.validation import check_non_negative_float
from tfattn.utils.validation import check_positive_int

__all__ = [
    "BeamState", "beam_search", "beam_init", "gather_beams",
    "gather_topk_beams", "grow_topk", "grow_alive", "grow_finished",
    "beam_search_continues",
]

# Score of an empty or dead slot. Finite (not -inf) so that sums and
# comparisons never give NaN; any log-prob at or below _DEAD_THRESHOLD is
# treated as a dead candidate (it descends from a dead slot or from a token
# the model masked with a huge negative logit).
_NEG_INF = -1e9
_DEAD_THRESHOLD = -1e8


class BeamState(NamedTuple):
    """The loop state of `beam_search`, carried whole by the while loop.

    Shapes: B batch, K beam size, L = `max_length`.

    Attributes:
        step: scalar int32, the position being predicted.
        alive_ids: int32 [B, K], the last token of each alive beam.
        alive_seq: int32 [B, K, L], the alive beams (no EOS yet).
        alive_log_probs: float32 [B, K], their log-probs, best first.
        finished_seq: int32 [B, K, L], the K best finished beams.
        finished_scores: float32 [B, K], their length-penalised scores,
            best first; `_NEG_INF` in empty slots.
        finished_flags: bool [B, K], whether a finished slot holds a beam.
        cache: the `step_fn` cache, tensors with leading axis B*K (row
            `b * K + k` is beam k of batch row b).
    """

    step: Any
    alive_ids: Any
    alive_seq: Any
    alive_log_probs: Any
    finished_seq: Any
    finished_scores: Any
    finished_flags: Any
    cache: Any


def beam_search(step_fn, initial_ids, initial_cache, max_length, eos_id,
                beam_size=4, alpha=0.6, max_lengths=None):
    """Batched beam search in one `keras.ops.while_loop`.

    The algorithm of tensor2tensor / Model Garden `sequence_beam_search`:
    each row keeps K alive beams (no EOS yet) and the K best finished
    beams. Each step extends the alive beams by every token, keeps the top
    2K of the K*V candidates by log-probability (so that candidates ending
    in EOS cannot starve the alive set), moves the EOS candidates to the
    finished set scored by the GNMT length penalty
    `log_prob / ((5 + len) / 6) ** alpha` (len counts generated tokens, EOS
    included) and keeps the K best non-EOS candidates alive. The search
    stops when no row's best alive beam, divided by the largest penalty it
    can still reach, can beat that row's worst finished beam, or at L.

    Two deliberate differences from Model Garden, both documented here:

    - As in Hugging Face's `BeamSearchScorer`, an EOS candidate enters the
      finished set only if it ranks among the top K of the step's 2K
      candidates. With `beam_size=1, alpha=0` the search is then exactly
      greedy search.
    - A beam that reaches its row's limit without EOS is moved to the
      finished set with its length-penalised score (len = limit), instead of
      being returned only when the row has no finished beam at all.

    The cache is tiled to B*K rows (row `b * K + k` is beam k of batch row
    b) and reordered by the chosen parent beams with a gather each step.
    The loop carries a `BeamState`; one step is `grow_topk`, then
    `grow_alive` and `grow_finished` on its 2K candidates.

    Args:
        step_fn: callable `(ids [B*K] int32, position scalar int32, cache) ->
            (logits [B*K, V], new_cache)`. See the module docstring.
        initial_ids: int tensor [B]. The start token of each row.
        initial_cache: nested structure of tensors with leading axis B, or
            `None` for no cache. Tiled to B*K rows here.
        max_length: positive Python int L, the number of tokens the output
            holds (the maximum number of `step_fn` calls).
        eos_id: non-negative Python int, or a tuple of them. The token(s)
            that end a row.
        beam_size: positive Python int K. Defaults to `4` (the paper).
        alpha: Python float >= 0, the length-penalty exponent; 0 ranks by
            plain log-probability. Defaults to `0.6` (the paper).
        max_lengths: optional int tensor [B] of per-row limits; values are
            clipped to [1, L]. Defaults to `None` (L for all rows).

    Returns:
        Tuple `(ids, scores)`: ids int32 [B, L], the best beam of each row
        (EOS included where emitted, 0 after it or after the row's limit);
        scores float32 [B], its length-penalised score
        `sum(log_probs) / ((5 + len) / 6) ** alpha`.
    """
    initial_ids, cache, max_length, eos_id, max_lengths = _validate(
        "beam_search", step_fn, initial_ids, initial_cache, max_length,
        eos_id, max_lengths)
    k = check_positive_int("beam_size", beam_size, "beam_search")
    alpha = check_non_negative_float("alpha", alpha, "beam_search")
    batch_size = _dim(initial_ids, 0)
    if isinstance(batch_size, int) and batch_size == 0:
        # Nothing to search (and reshapes by -1 of 0 rows fail under JAX).
        return (ops.zeros((0, max_length), "int32"),
                ops.zeros((0,), "float32"))
    limits = _row_limits(max_lengths, batch_size, max_length)
    positions = ops.arange(max_length, dtype="int32")
    # The best score any alive beam of row b can still reach: log-probs only
    # decrease and the penalty only grows (alpha >= 0) up to len = limit.
    max_penalty = _length_penalty(limits, alpha)  # [B]
    row_offsets = ops.arange(batch_size, dtype="int32")[:, None] * k  # [B, 1]

    def cond(state):
        return beam_search_continues(state, max_length, max_penalty)

    def body(state):
        i = state.step
        top_log_probs, top_beams, top_ids, top_seq, new_cache = grow_topk(
            step_fn, state, batch_size, k, positions)
        ended = _is_stop(top_ids, eos_id) | (i + 1 >= limits)[:, None]
        alive_log_probs, alive_ids, alive_seq, parents = grow_alive(
            top_log_probs, top_beams, top_ids, top_seq, ended, k)
        flat_parents = ops.reshape(parents + row_offsets, [-1])
        finished_seq, finished_scores, finished_flags = grow_finished(
            state, top_log_probs, top_seq, ended,
            _length_penalty(i + 1, alpha), k)
        return (BeamState(
            step=i + 1,
            alive_ids=alive_ids,
            alive_seq=alive_seq,
            alive_log_probs=alive_log_probs,
            finished_seq=finished_seq,
            finished_scores=finished_scores,
            finished_flags=finished_flags,
            cache=_reorder_cache(state.cache, new_cache, flat_parents)),)

    state = beam_init(initial_ids, cache, k, max_length)
    (state,) = ops.while_loop(cond, _keep_shapes(body), (state,))
    return _best_beams(state, max_penalty)


def beam_init(initial_ids, cache, beam_size, max_length):
    """The start `BeamState`: K copies of each row's start token, no
    finished beam, the cache (leading axis B) tiled to B*K rows.

    Args:
        initial_ids: int32 tensor [B]. The start token of each row.
        cache: nested structure of tensors with leading axis B.
        beam_size: int K.
        max_length: int L.

    Returns:
        BeamState at step 0; only beam 0 of each row is live (the others
        score `_NEG_INF`).
    """
    k = beam_size
    batch_size = _dim(initial_ids, 0)
    # Only beam 0 is live at the start, so the K copies of the start token
    # do not yield K identical beams.
    initial_log_probs = ops.broadcast_to(ops.convert_to_tensor(
        [[0.0] + [_NEG_INF] * (k - 1)], "float32"), (batch_size, k))
    return BeamState(
        step=ops.convert_to_tensor(0, "int32"),
        alive_ids=ops.repeat(initial_ids[:, None], k, axis=1),
        alive_seq=ops.zeros((batch_size, k, max_length), "int32"),
        alive_log_probs=initial_log_probs,
        cache=keras.tree.map_structure(
            lambda t: ops.repeat(t, k, axis=0), cache),
        finished_seq=ops.zeros((batch_size, k, max_length), "int32"),
        finished_scores=ops.full((batch_size, k), _NEG_INF, "float32"),
        finished_flags=ops.zeros((batch_size, k), "bool"),
    )


def gather_beams(nested, beam_indices):
    """Reorders each tensor [B, K', ...] of a nested structure by
    `beam_indices` int32 [B, K] (indices into K'): tensors [B, K, ...].

    Args:
        nested: nested structure of tensors [B, K', ...].
        beam_indices: int32 tensor [B, K]. Indices into K'.

    Returns:
        The structure of `nested`, with tensors [B, K, ...].
    """
    return keras.tree.map_structure(
        lambda t: _batch_gather(t, beam_indices), nested)


def gather_topk_beams(scores, nested, k):
    """The k best beams by `scores` float32 [B, K']: `(top_scores [B, k],
    best first, nested gathered by them)`. Ties keep the lower index.

    Args:
        scores: float32 tensor [B, K'].
        nested: nested structure of tensors [B, K', ...].
        k: int. Beams kept.

    Returns:
        Tuple `(top_scores, gathered)`, top_scores [B, k] best first and
        `nested` gathered by them (tensors [B, k, ...]).
    """
    top_scores, indices = ops.top_k(scores, k)
    return top_scores, gather_beams(nested, indices)


def grow_topk(step_fn, state, batch_size, k, positions):
    """Runs `step_fn` once and extends every alive beam by every token:
    the best 2K of the K*V candidates (K*V if less and V is static), by
    log-prob.

    Args:
        step_fn: callable. See the module docstring.
        state: BeamState. The loop state.
        batch_size: int or scalar int32 tensor B.
        k: int. The beam size K.
        positions: int32 tensor [L], `ops.arange(L)`.

    Returns:
        Tuple `(top_log_probs [B, 2K], top_beams [B, 2K] (parent beam),
        top_ids [B, 2K] (new token), top_seq [B, 2K, L], new_cache)`, the
        cache not yet reordered.
    """
    i = state.step
    logits, new_cache = _call_step_fn(
        step_fn, ops.reshape(state.alive_ids, [-1]), i, state.cache)
    log_probs = ops.log_softmax(ops.cast(logits, "float32"), axis=-1)
    vocab_size = _dim(log_probs, 1)
    # `log_probs` = [B, K, V]; candidates = [B, K * V].
    log_probs = ops.reshape(log_probs, [batch_size, k, vocab_size])
    candidates = ops.reshape(
        state.alive_log_probs[:, :, None] + log_probs, [batch_size, -1])
    num_candidates = 2 * k
    if isinstance(vocab_size, int):
        num_candidates = min(num_candidates, k * vocab_size)
    top_log_probs, top_indices = ops.top_k(candidates, num_candidates)
    top_beams = top_indices // vocab_size
    top_ids = top_indices % vocab_size
    top_seq = gather_beams(state.alive_seq, top_beams)
    top_seq = ops.where(
        ops.equal(positions[None, None, :], i), top_ids[:, :, None], top_seq)
    return top_log_probs, top_beams, top_ids, top_seq, new_cache


def grow_alive(top_log_probs, top_beams, top_ids, top_seq, ended, k):
    """The new alive set: the K best candidates that neither end in EOS nor
    hit the limit (`ended` bool, broadcastable to [B, 2K]); at least K of
    the 2K do not end in EOS.

    Args:
        top_log_probs: float32 tensor [B, 2K]. The candidates' log-probs.
        top_beams: int32 tensor [B, 2K]. Their parent beams.
        top_ids: int32 tensor [B, 2K]. Their new tokens.
        top_seq: int32 tensor [B, 2K, L]. Their sequences.
        ended: bool tensor, broadcastable to [B, 2K].
        k: int. The beam size K.

    Returns:
        Tuple `(alive_log_probs [B, K], alive_ids [B, K], alive_seq
        [B, K, L], parents [B, K])`.
    """
    alive_log_probs, (alive_ids, alive_seq, parents) = gather_topk_beams(
        ops.where(ended, _NEG_INF, top_log_probs),
        (top_ids, top_seq, top_beams), k)
    return alive_log_probs, alive_ids, alive_seq, parents


def grow_finished(state, top_log_probs, top_seq, ended, penalty, k):
    """Merges the step's ended candidates, scored `log_prob / penalty`, into
    the K best finished beams of `state`. A candidate enters only if it is
    live and among the top K of the 2K (see `beam_search`).

    Args:
        state: BeamState. Holds the finished beams so far.
        top_log_probs: float32 tensor [B, 2K]. The candidates' log-probs.
        top_seq: int32 tensor [B, 2K, L]. Their sequences.
        ended: bool tensor, broadcastable to [B, 2K]. Candidates that end
            (EOS or the row's limit).
        penalty: scalar float32 tensor. The length penalty of this step.
        k: int. The beam size K.

    Returns:
        Tuple `(finished_seq [B, K, L], finished_scores [B, K],
        finished_flags [B, K])`.
    """
    in_top_k = ops.arange(_dim(top_log_probs, 1), dtype="int32")[None, :] < k
    new_flags = (top_log_probs > _DEAD_THRESHOLD) & in_top_k & ended
    new_scores = ops.where(new_flags, top_log_probs / penalty, _NEG_INF)
    # Old ones first, so ties keep the earlier, shorter beam.
    merged_scores = ops.concatenate(
        [state.finished_scores, new_scores], axis=1)
    merged_flags = ops.concatenate([state.finished_flags, new_flags], axis=1)
    merged_seq = ops.concatenate([state.finished_seq, top_seq], axis=1)
    scores, (flags, seq) = gather_topk_beams(
        merged_scores, (merged_flags, merged_seq), k)
    return seq, scores, flags


def beam_search_continues(state, max_length, max_penalty):
    """Whether to run another step: `state.step < max_length` and some row
    has no finished beam or a best alive beam that, at its largest reachable
    penalty `max_penalty` [B], could still beat its worst finished beam.

    Args:
        state: BeamState. The loop state.
        max_length: int L.
        max_penalty: float32 tensor [B]. Each row's largest penalty.

    Returns:
        Scalar bool tensor.
    """
    best_alive = state.alive_log_probs[:, 0] / max_penalty  # [B]
    # `initial`: a traced batch may hold 0 rows (Keras's TensorFlow `min`
    # refuses an empty tensor without it).
    worst_finished = ops.min(ops.where(
        state.finished_flags, state.finished_scores, -_NEG_INF), axis=1,
        initial=-_NEG_INF)
    row_done = ops.any(state.finished_flags, axis=1) & (
        worst_finished > best_alive)
    return ops.logical_and(
        state.step < max_length, ops.logical_not(ops.all(row_done)))


def _best_beams(state, max_penalty):
    """The search's output from the final state: `(ids [B, L], scores [B])`,
    each row's best finished beam, else its best alive beam."""
    has_finished = ops.any(state.finished_flags, axis=1)
    # Every row normally ends with a finished beam (EOS or limit); the
    # fallback covers a model whose every candidate was masked.
    ids = ops.where(
        has_finished[:, None], state.finished_seq[:, 0], state.alive_seq[:, 0])
    scores = ops.where(has_finished, state.finished_scores[:, 0],
                      state.alive_log_probs[:, 0] / max_penalty)
    return ids, scores


def _length_penalty(length, alpha):
    """The GNMT length penalty `((5 + length) / 6) ** alpha`, float32."""
    return ops.power((5.0 + ops.cast(length, "float32")) / 6.0, alpha)


def _reorder_cache(cache, new_cache, flat_parents):
    """Gathers each beam's cache from its parent beam, except the tensors
    that `step_fn` passed through unchanged (the same tensor object, e.g. a
    Transformer's projected encoder keys and values): those still hold the
    start cache tiled over the beams, identical for all K beams of a row, so
    gathering them by parent (always a beam of the same row) would copy
    equal values onto themselves at every step."""
    return keras.tree.map_structure(
        lambda old, new: new if new is old else _take_rows(new, flat_parents),
        cache, new_cache)
