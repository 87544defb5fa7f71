"""`sample_search`: the greedy and sampling decoding loop, one
`keras.ops.while_loop` (see `tfattn.decoding` for `step_fn` and the output
conventions; shapes: B = batch, V = vocabulary, L = `max_length`)."""

from keras import ops

from tfattn.decoding import samplers as samplers_lib
from tfattn.decoding._loop import _batch_gather
from tfattn.decoding._loop import _call_step_fn
from tfattn.decoding._loop import _dim
from tfattn.decoding._loop import _is_stop
from tfattn.decoding._loop import _keep_shapes
from tfattn.decoding._loop import _row_limits
from tfattn.decoding._loop import _validate
from tfattn.utils.validation import invalid_argument

__all__ = ["sample_search"]


def sample_search(step_fn, initial_ids, initial_cache, max_length, eos_id,
                  sampler="greedy", seed=0, max_lengths=None):
    """Batched decoding that picks each token with a sampler, in one
    `keras.ops.while_loop`.

    At each position every unfinished row emits `sampler.choose` of its
    next-token log-probabilities; the draw for position i uses
    `samplers.step_seed(seed_words(seed), i)`. A row finishes when it
    emits a token of `eos_id` or reaches its length limit; finished rows
    emit 0 (pad) and add nothing to their score, and the loop stops once
    all rows have finished. With the greedy sampler this is
    `greedy_search`.

    Args:
        step_fn: callable `(ids [B] int32, position scalar int32, cache) ->
            (logits [B, V], new_cache)`. See `tfattn.decoding`.
        initial_ids: int tensor [B]. The token each row starts from.
        initial_cache: nested structure of tensors with leading axis B, or
            `None`.
        max_length: positive Python int L, the tokens the output holds.
        eos_id: non-negative int, or a tuple of them: the tokens that end a
            row (each row stops at its own).
        sampler: a `tfattn.decoding.samplers.Sampler` or its name (not
            `"beam"`). Defaults to `"greedy"`.
        seed: int in [-2**63, 2**63), a scalar int tensor, or int32
            words [2] (`samplers.seed_words`). The draws' seed. Defaults
            to `0`.
        max_lengths: optional int tensor [B] of per-row limits, clipped to
            [1, L]. Defaults to `None` (L for all).

    Returns:
        Tuple `(ids, scores)`: ids int32 [B, L], the emitted tokens (a stop
        token included), 0 after it or after the row's limit; scores
        float32 [B], the sum of the model's log-probabilities of the emitted
        tokens (before any temperature).
    """
    initial_ids, cache, max_length, eos_id, max_lengths = _validate(
        "sample_search", step_fn, initial_ids, initial_cache, max_length,
        eos_id, max_lengths)
    sampler = samplers_lib.get(sampler)
    if isinstance(sampler, samplers_lib.BeamSampler):
        raise invalid_argument("sampler", "a per-token sampler (use "
                               "`beam_search` for beams)", sampler,
                               "sample_search")
    words = ops.convert_to_tensor(samplers_lib.seed_words(
        seed, "sample_search"), "int32")
    batch_size = _dim(initial_ids, 0)
    limits = _row_limits(max_lengths, batch_size, max_length)
    positions = ops.arange(max_length, dtype="int32")

    def cond(i, ids, cache, seq, scores, finished):
        return ops.logical_and(
            i < max_length, ops.logical_not(ops.all(finished))
        )

    def body(i, ids, cache, seq, scores, finished):
        logits, new_cache = _call_step_fn(step_fn, ids, i, cache)
        log_probs = ops.log_softmax(ops.cast(logits, "float32"), axis=-1)
        step = (samplers_lib.step_seed(words, i) if sampler.draws
                else words)
        tokens = sampler.choose(log_probs, step)
        token_log_probs = _batch_gather(log_probs, tokens[:, None])
        tokens = ops.where(finished, 0, tokens)
        scores = scores + ops.where(finished, 0.0, token_log_probs[:, 0])
        # One-hot write at column i: no position-dependent slice or shape.
        seq = ops.where(
            ops.equal(positions[None, :], i), tokens[:, None], seq)
        # Finished rows keep being fed their last token; outputs are ignored.
        ids = ops.where(finished, ids, tokens)
        finished = finished | _is_stop(tokens, eos_id) | (i + 1 >= limits)
        return i + 1, ids, new_cache, seq, scores, finished

    loop_vars = (
        ops.convert_to_tensor(0, "int32"),
        initial_ids,
        cache,
        ops.zeros((batch_size, max_length), "int32"),
        ops.zeros((batch_size,), "float32"),
        ops.zeros((batch_size,), "bool"),
    )
    _, _, _, seq, scores, _ = ops.while_loop(
        cond, _keep_shapes(body), loop_vars
    )
    return seq, scores
