"""`sample_search` and `greedy_search`: the per-token decoding loop of the
`TokenSampler`s (`tfattn.decoding.samplers`), as functions (see
`tfattn.decoding` for `step_fn` and the output conventions; shapes: B =
batch, V = vocabulary, L = `max_length`)."""

from tfattn.decoding import samplers as samplers_lib
from tfattn.utils.validation import invalid_argument

__all__ = ["sample_search", "greedy_search"]


def sample_search(step_fn, initial_ids, initial_cache, max_length, eos_id,
                  sampler="greedy", seed=0, max_lengths=None):
    """Batched decoding that picks each token with a per-token sampler, in
    one `keras.ops.while_loop` (`TokenSampler.search`).

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
        sampler: a `TokenSampler` or its name (not `"beam"`). Defaults to
            `"greedy"`.
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
    sampler = samplers_lib.get(sampler)
    if not isinstance(sampler, samplers_lib.TokenSampler):
        raise invalid_argument("sampler", "a per-token sampler (use "
                               "`beam_search` for beams)", sampler,
                               "sample_search")
    return sampler.search(step_fn, initial_ids, initial_cache, max_length,
                          eos_id, seed=seed, max_lengths=max_lengths)


def greedy_search(
    step_fn, initial_ids, initial_cache, max_length, eos_id, max_lengths=None
):
    """Batched greedy decoding in one `keras.ops.while_loop`.

    At each position every unfinished row emits the argmax of its next-token
    distribution (ties go to the lowest id). A row finishes when it emits
    `eos_id` or reaches its length limit; finished rows emit 0 (pad) and add
    nothing to their score, and the loop stops once all rows have finished.

    Args:
        step_fn: callable `(ids [B] int32, position scalar int32, cache) ->
            (logits [B, V], new_cache)`. See the module docstring.
        initial_ids: int tensor [B]. The start token of each row.
        initial_cache: nested structure of tensors with leading axis B, or
            `None` for no cache.
        max_length: positive Python int L, the number of tokens the output
            holds (the maximum number of `step_fn` calls).
        eos_id: non-negative Python int, or a tuple of them. The token(s)
            that end a row.
        max_lengths: optional int tensor [B] of per-row limits; values are
            clipped to [1, L]. A row that reaches its limit without EOS
            stops there (no EOS is forced). Defaults to `None` (L for all).

    Returns:
        Tuple `(ids, scores)`: ids int32 [B, L], the emitted tokens, EOS
        included, 0 after EOS or after the row's limit; scores float32 [B],
        the sum of the log-probabilities of the emitted tokens (EOS included).
    """
    return sample_search(step_fn, initial_ids, initial_cache, max_length,
                         eos_id, sampler="greedy", max_lengths=max_lengths)
