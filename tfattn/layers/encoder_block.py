"""`EncoderBlock`: self-attention and a feed-forward sublayer."""

import keras

from tfattn.layers.block_base import BlockBase
from tfattn.ops import masking

__all__ = ["EncoderBlock"]


@keras.saving.register_keras_serializable(package="tfattn")
class EncoderBlock(BlockBase):
    """One encoder block: bidirectional self-attention, then feed-forward.

    Shapes: B = batch, T = length, C = width (taken from the input).

    Wiring by flavour (see `BlockBase`): the paper's post-norm
    `LN(x + dropout(sublayer(x)))` for both sublayers, or pre-norm with
    `normalize_first=True`; the references' `MultiHeadAttention` (residual
    and norm inside) followed by `LN(x + FF(x))`, without residual dropout
    (docs/reference.md §1.7 steps 6, §2.9 step 5).

    Args:
        num_heads: int. Defaults to `8`.
        ffn_units: int. Inner width of the feed-forward sublayer. Defaults
            to `2048`.
        dropout_rate: float in [0, 1). Residual dropout (paper flavour only)
            and the default attention dropout. Defaults to `0.1`.
        attention_dropout_rate: float or None. Dropout on the attention
            weights. Defaults to `None`, meaning `dropout_rate`.
        flavor: `"paper"`, `"reference_2017"` or `"reference_2019"`.
        normalize_first: bool. Pre-norm (paper flavour only). Defaults to
            `False`, the paper's post-norm.
        layer_norm_epsilon: float or None. Defaults to 1e-8 in the reference
            flavours (as the references) and 1e-6 in the paper flavour.
        activation: the feed-forward activation. Defaults to `"relu"`.
        seed: int or None. Dropout seed.
        kernel_initializer, bias_initializer: Keras initializers (names,
            configs or objects) of every Dense of the block (attention
            projections and feed-forward), keras-hub's names. Defaults to
            `"glorot_uniform"` and `"zeros"`.
        **kwargs: base `keras.layers.Layer` arguments (`name`, `dtype`,
            ...).

    Call arguments:
        - x: [B, T, C].
        - padding_mask: bool [B, T], True = real token (Keras polarity), or
          None for the input's Keras mask. `reference_2017` finds padding
          from zero rows instead, as the reference does; pass None there.
        - training: bool.
        - return_attention_scores: bool. Also return the self-attention
          weights, float32 [B, H, T, T].
        - attention_mask: bool, True = may attend, [T, T], [B or 1, T, T] or
          [B or 1, H or 1, T, T] (keras-hub's argument), combined with the
          padding mask; or None.

    Returns:
        [B, T, C], or `(output, weights)`.
    """

    _context = "EncoderBlock"

    def build(self, x_shape):
        self.self_attention = self._attention("self_attention", causality=False)
        self.self_attention.build(x_shape)
        self._build_paper_wiring("self_attention", x_shape)
        self._build_feed_forward(x_shape)
        self.built = True

    def call(self, x, padding_mask=None, training=None,
             return_attention_scores=False, attention_mask=None):
        if padding_mask is None:
            padding_mask = masking.implicit_mask(x)
        x, scores, _ = self._attention_sublayer(
            "self_attention", x, training,
            return_scores=return_attention_scores, padding_mask=padding_mask,
            attention_mask=attention_mask,
        )
        x = self._feed_forward_sublayer(x, training)
        return (x, scores) if return_attention_scores else x

    def compute_output_shape(self, x_shape):
        return x_shape
