"""Batched greedy and beam search, each one `keras.ops.while_loop`.

Both searches are model-agnostic: the model is a `step_fn` that maps the
previous token of every row, the position and a cache to next-token logits
and the updated cache. The whole search runs inside a single
`keras.ops.while_loop` whose loop variables all keep one fixed shape, and the
position is a scalar int32 tensor, never a Python int, so one compilation
covers the whole decode (see docs/traps.md item 2: calling a compiled step
per position from Python recompiles at every position). The searches run on
every Keras backend and return tensors of the running backend:

- TensorFlow: one `tf.while_loop`, eagerly, inside `tf.function`, and
  inside `tf.function(jit_compile=True)` with one XLA compilation.
- JAX: one `jax.lax.while_loop`, eagerly or under `jax.jit` (the batch size
  and the Python-int arguments are static there; the ids, the cache and
  `max_lengths` may be traced).

Shape letters: B = batch, K = beam size, V = vocabulary, L = `max_length`
(the static number of generated tokens the output buffer holds).

Output conventions (both searches):

- ids hold generated tokens only (not the start token), EOS included where
  emitted, and 0 (pad) after EOS or after a row's length limit.
- A row that reaches its limit (`max_length`, or its entry of `max_lengths`)
  without emitting EOS simply stops: no EOS is forced, the row is treated as
  finished and its output holds exactly `limit` tokens.
- The loop stops early once every row has finished (greedy) or once no alive
  beam of any row can still beat that row's finished beams (beam search).

`step_fn(ids, position, cache) -> (logits, new_cache)`:

- ids: int32 [b], the previous token of each row (b = B for greedy, B*K for
  beam search); `initial_ids` at position 0.
- position: scalar int32 tensor, the index of the token being predicted.
- cache: nested structure (dict, list, tuple) of tensors whose leading axis
  is the row axis b. `new_cache` must have the same structure, dtypes and
  shapes.
- logits: [b, V], any float dtype (log-softmax is computed in float32).
"""

from tfattn.decoding._loop import checked_stop_ids
from tfattn.decoding.beam import BeamState
from tfattn.decoding.beam import beam_init
from tfattn.decoding.beam import beam_search
from tfattn.decoding.beam import beam_search_continues
from tfattn.decoding.beam import gather_beams
from tfattn.decoding.beam import gather_topk_beams
from tfattn.decoding.beam import grow_alive
from tfattn.decoding.beam import grow_finished
from tfattn.decoding.beam import grow_topk
from tfattn.decoding.sampling import greedy_search
from tfattn.decoding.sampling import sample_search

__all__ = [
    "greedy_search", "sample_search", "checked_stop_ids", "BeamState",
    "beam_search", "beam_init", "gather_beams",
    "gather_topk_beams", "grow_topk", "grow_alive", "grow_finished",
    "beam_search_continues",
]
