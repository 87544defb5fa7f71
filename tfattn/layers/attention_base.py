"""What `Attention` and `HardAttention` share: the four scoring functions,
their weights, the argument checks and the masks.

Shapes: B = batch, T_q = query length (absent for a single query per row),
T_k = key length, H = heads, D_q / D_k / D_v = query / key / value widths,
d_q = D_q / H, d_k = D_k / H (per head).

Scoring functions s(k, q), per head (score: formula; weights):

- `"dot"`: kᵀq (d_k = d_q); none.
- `"scaled_dot"`: kᵀq / sqrt(d_k) (d_k = d_q); none.
- `"additive"`: vᵀ tanh(W k + U q); W, U, v (below).
- `"bilinear"`: kᵀ W q; `bilinear_kernel` [d_k, d_q].

The additive weights, without biases: `key_dense` (W: d_k -> units),
`query_dense` (U: d_q -> units), `score_dense` (v: units -> 1).

With `num_heads > 1` the query, key and value widths are split into heads
(head i takes channels [i·d, (i+1)·d), as in `MultiHeadAttention`) and the
same scoring function, with the same weights, scores each head.
"""

import keras
from keras import ops

from tfattn.utils import validation
from tfattn.ops import masking

__all__ = ["SCORES", "ScoredAttentionBase"]

SCORES = ("dot", "scaled_dot", "additive", "bilinear")


class ScoredAttentionBase(keras.layers.Layer):
    """Base of the attention-family layers (not public): scoring weights,
    input checks, head split and the combined keep-mask.

    Args:
        score: one of `SCORES`. Defaults to `"scaled_dot"`.
        units: int or None. Hidden width of the additive score; None is the
            per-head key width d_k.
        num_heads: int. Heads the widths are split into. Defaults to `1`.
        causality: bool. Query i may only see keys 0..i. Defaults to
            `False`.
        seed: int or None. Seed of the subclass's randomness.
        **kwargs: base `keras.layers.Layer` arguments (`name`, `dtype`,
            ...).
    """

    context = "Attention"

    def __init__(self, score="scaled_dot", units=None, num_heads=1,
                 causality=False, seed=None, **kwargs):
        """Checks the arguments (see the class docstring)."""
        super().__init__(**kwargs)
        self.score = validation.check_choice("score", score, SCORES,
                                             self.context)
        if units is not None:
            units = validation.check_positive_int("units", units,
                                                  self.context)
        self.units = units
        self.num_heads = validation.check_positive_int(
            "num_heads", num_heads, self.context)
        self.causality = validation.check_bool("causality", causality,
                                               self.context)
        self.seed = seed
        self.supports_masking = True

    # ------------------------------------------------------------------
    # Weights.

    def build(self, query_shape, keys_shape, values_shape=None):
        query_shape, keys_shape = tuple(query_shape), tuple(keys_shape)
        if len(query_shape) not in (2, 3):
            raise validation.invalid_argument(
                "query", "a tensor of rank 2 [B, D_q] or 3 [B, T_q, D_q]",
                f"<tensor of shape {query_shape}>", self.context)
        if len(keys_shape) != 3:
            raise validation.invalid_argument(
                "keys", "a tensor of rank 3 [B, T_k, D_k]",
                f"<tensor of shape {keys_shape}>", self.context)
        values_shape = keys_shape if values_shape is None else tuple(
            values_shape)
        if len(values_shape) != 3:
            raise validation.invalid_argument(
                "values", "a tensor of rank 3 [B, T_k, D_v]",
                f"<tensor of shape {values_shape}>", self.context)
        widths = {"query": query_shape[-1], "keys": keys_shape[-1],
                  "values": values_shape[-1]}
        for name, width in widths.items():
            if width is None or width % self.num_heads:
                raise validation.invalid_argument(
                    "num_heads", f"a divisor of the {name} width ({width})",
                    self.num_heads, self.context)
        d_q = widths["query"] // self.num_heads
        d_k = widths["keys"] // self.num_heads
        if self.score in ("dot", "scaled_dot") and d_q != d_k:
            raise validation.invalid_argument(
                "score", f"'additive' or 'bilinear' for a query width "
                f"({widths['query']}) other than the key width "
                f"({widths['keys']}): {self.score!r} needs kᵀq",
                self.score, self.context)
        if self.score == "additive":
            units = self.units or d_k
            self.key_dense = keras.layers.Dense(
                units, use_bias=False, name="key_dense",
                dtype=self.dtype_policy)
            self.key_dense.build((None, d_k))
            self.query_dense = keras.layers.Dense(
                units, use_bias=False, name="query_dense",
                dtype=self.dtype_policy)
            self.query_dense.build((None, d_q))
            self.score_dense = keras.layers.Dense(
                1, use_bias=False, name="score_dense", dtype=self.dtype_policy)
            self.score_dense.build((None, units))
        elif self.score == "bilinear":
            self.bilinear_kernel = self.add_weight(
                name="bilinear_kernel", shape=(d_k, d_q),
                initializer="glorot_uniform")

    # ------------------------------------------------------------------
    # Inputs, heads, masks.

    def _check_call(self, query, keys, values, mask):
        values = keys if values is None else values
        if len(query.shape) not in (2, 3):
            raise validation.invalid_argument(
                "query", "a tensor of rank 2 [B, D_q] or 3 [B, T_q, D_q]",
                f"<tensor of shape {tuple(query.shape)}>", self.context)
        for name, x in (("keys", keys), ("values", values)):
            if len(x.shape) != 3:
                raise validation.invalid_argument(
                    name, "a tensor of rank 3 [B, T_k, D]",
                    f"<tensor of shape {tuple(x.shape)}>", self.context)
        t_k, t_v = keys.shape[1], values.shape[1]
        if t_k is not None and t_v is not None and t_k != t_v:
            raise validation.invalid_argument(
                "values", f"as many positions as keys ({t_k})",
                f"<tensor of shape {tuple(values.shape)}>", self.context)
        if mask is not None:
            if keras.backend.standardize_dtype(mask.dtype) != "bool":
                raise validation.invalid_argument(
                    "mask", "a bool tensor (True = may attend)",
                    f"<{keras.backend.standardize_dtype(mask.dtype)} tensor "
                    f"of shape {tuple(mask.shape)}>", self.context)
            self._check_mask_shape(mask, query, keys)
        return values

    def _check_mask_shape(self, mask, query, keys):
        single = len(query.shape) == 2
        t_q = 1 if single else query.shape[1]
        want = (query.shape[0], t_q, keys.shape[1])
        shape = tuple(mask.shape)
        if len(shape) == 2:
            shape = (shape[0], 1, shape[1])
        ok = len(shape) == 3 and all(
            s is None or w is None or s in (1, w) for s, w in zip(shape, want))
        if not ok:
            raise validation.invalid_argument(
                "mask", f"a bool [B, T_k] mask or one broadcastable to "
                f"[B, T_q, T_k] = {want}", f"<tensor of shape "
                f"{tuple(mask.shape)}>", self.context)

    def _keep_mask(self, query, keys, mask):
        """The keep-mask [B, 1|T_q, T_k] (or [T_q, T_k]) of the scores, from
        `mask`, the keys' Keras mask and causality; None when nothing is
        masked."""
        if mask is not None and len(mask.shape) == 2:
            mask = mask[:, None, :]
        key_mask = masking.implicit_mask(keys)
        if key_mask is not None:
            key_mask = ops.cast(key_mask, "bool")[:, None, :]
        causal = None
        if self.causality and len(query.shape) == 3:  # A lone query has no
            # position of its own among the keys.
            causal = masking.causal_mask(ops.shape(query)[1],
                                         ops.shape(keys)[1])
        return masking.combine_masks(mask, key_mask, causal)

    def _split(self, x):
        """[B, T, H·d] -> [B, H, T, d]."""
        batch, length = ops.shape(x)[0], ops.shape(x)[1]
        x = ops.reshape(x, (batch, length, self.num_heads,
                            x.shape[-1] // self.num_heads))
        return ops.transpose(x, (0, 2, 1, 3))

    # ------------------------------------------------------------------
    # Scores.

    def _scores(self, query, keys):
        """Scores [B, H, T_q, T_k] of head-split query [B, H, T_q, d_q] and
        keys [B, H, T_k, d_k], in the compute dtype."""
        if self.score in ("dot", "scaled_dot"):
            if self.score == "scaled_dot":
                query = query * ops.cast(keys.shape[-1] ** -0.5, query.dtype)
            return ops.matmul(query, ops.swapaxes(keys, -1, -2))
        if self.score == "bilinear":
            # kᵀ W q = (W q)ᵀ k: project the queries once, then one matmul.
            projected = ops.matmul(
                query, ops.transpose(ops.cast(self.bilinear_kernel,
                                              query.dtype)))
            return ops.matmul(projected, ops.swapaxes(keys, -1, -2))
        # Additive: vᵀ tanh(W k + U q) over every (query, key) pair.
        hidden = ops.tanh(self.key_dense(keys)[:, :, None, :, :]
                          + self.query_dense(query)[:, :, :, None, :])
        return ops.squeeze(self.score_dense(hidden), -1)

    def compute_mask(self, query, previous_mask=None):
        if len(query.shape) == 2:
            return None
        return masking.implicit_mask(query)

    def get_config(self):
        config = super().get_config()
        config.update(score=self.score, units=self.units,
                      num_heads=self.num_heads, causality=self.causality,
                      seed=self.seed)
        return config
