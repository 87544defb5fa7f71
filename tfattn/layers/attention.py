"""`Attention`: soft attention with a choice of scoring function, the
"normal" (key = value) and key-value modes, and a query from outside."""

import keras
from keras import ops

from tfattn.utils import validation
from tfattn.layers.attention_base import ScoredAttentionBase
from tfattn.ops.attention import masked_softmax

__all__ = ["Attention"]


@keras.saving.register_keras_serializable(package="tfattn")
class Attention(ScoredAttentionBase):
    """Soft attention: α = softmax(s(k_j, q)) over the keys, output Σ_j α_j v_j.

    The attention family in three steps: the inputs (keys, and values that
    default to the keys: the "normal" mode; distinct values: the key-value
    mode), an attention distribution α over them for each query from a
    scoring function s, and the α-weighted average of the values. The query
    may be a transform of the same sequence (self-attention: pass the same
    tensor as query and keys) or come from outside, e.g. a decoder's state
    attending over an encoder's states (Bahdanau-style attention, with
    `score="additive"`).

    Scoring functions (see `tfattn.layers.attention_base` for the table):
    `"dot"` kᵀq (equal to `keras.layers.Attention(score_mode="dot",
    use_scale=False)`), `"scaled_dot"` kᵀq / sqrt(d_k) (the default),
    `"additive"` vᵀ tanh(W k + U q) with the public sublayers `key_dense` (W),
    `query_dense` (U) and `score_dense` (v), and `"bilinear"` kᵀ W q with the
    weight `bilinear_kernel` [d_k, d_q].

    Masks follow Keras (True = may attend). A masked key gets weight 0; a
    query with every key masked gets all-zero weights and a zero output,
    never NaN (tfattn's convention: Keras 3.15's `keras.layers.Attention`
    gives it uniform weights 1/T_k and the mean of the values; its output is
    zero only where its query mask is False). The softmax runs in float32
    under every dtype policy.

    Args:
        score: `"dot"`, `"scaled_dot"`, `"additive"` or `"bilinear"`.
        units: int or None. Hidden width of the additive score; defaults to
            the per-head key width d_k. Only used by `"additive"`.
        num_heads: int. Split the query, key and value widths into this many
            heads (each must divide) and score each head with the same
            function and weights. Defaults to `1`.
        dropout_rate: float in [0, 1). Dropout on the attention weights in
            training.
        causality: bool. Query i may only see keys 0..i.
        seed: int or None. Seed of the dropout.
        **kwargs: base `keras.layers.Layer` arguments (`name`, `dtype`,
            ...).

    Call arguments:
        - query: [B, T_q, D_q], or [B, D_q] for one query per row.
        - keys: [B, T_k, D_k]. Its Keras mask, if any, is read.
        - values: [B, T_k, D_v] or None (= keys).
        - mask: bool [B, T_k] or broadcastable to [B, T_q, T_k], True = may
          attend; or None.
        - training: bool or None (dropout).
        - return_attention_scores: bool. Also return the weights.

    Returns:
        The output [B, T_q, D_v] ([B, D_v] for a single query), and with
        `return_attention_scores` the float32 weights [B, T_q, T_k] ([B, T_k]
        for a single query; with `num_heads > 1` a head axis after the
        batch: [B, H, T_q, T_k] or [B, H, T_k]).
    """

    context = "Attention"

    def __init__(self, score="scaled_dot", units=None, num_heads=1,
                 dropout_rate=0.0, causality=False, seed=None, **kwargs):
        """Checks the arguments (see the class docstring)."""
        super().__init__(score=score, units=units, num_heads=num_heads,
                         causality=causality, seed=seed, **kwargs)
        self.dropout_rate = validation.check_rate(
            "dropout_rate", dropout_rate, self.context)

    def build(self, query_shape, keys_shape, values_shape=None):
        super().build(query_shape, keys_shape, values_shape)
        self.dropout = keras.layers.Dropout(self.dropout_rate, seed=self.seed,
                                            name="dropout")

    def call(self, query, keys, values=None, mask=None, training=None,
             return_attention_scores=False):
        values = self._check_call(query, keys, values, mask)
        keep = self._keep_mask(query, keys, mask)
        single = len(query.shape) == 2
        if single:
            query = query[:, None, :]
        if keep is not None:
            keep = keep[..., None, :, :]  # The head axis.
        width = values.shape[-1]
        query, keys, values = (self._split(x) for x in (query, keys, values))
        weights = masked_softmax(self._scores(query, keys), keep,
                                 fully_masked="zero")
        probs = self.dropout(weights, training=training)
        output = ops.matmul(ops.cast(probs, values.dtype), values)
        # [B, H, T_q, d_v] -> [B, T_q, H·d_v].
        output = ops.transpose(output, (0, 2, 1, 3))
        output = ops.reshape(output, (ops.shape(output)[0],
                                      ops.shape(output)[1], width))
        if self.num_heads == 1:
            weights = weights[:, 0]
        if single:
            output, weights = output[:, 0], weights[..., 0, :]
        if return_attention_scores:
            return output, weights
        return output

    def get_config(self):
        config = super().get_config()
        config.update(dropout_rate=self.dropout_rate)
        return config
