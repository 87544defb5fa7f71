"""`Encoder`: N encoder blocks (a BERT-style bidirectional stack on its own)."""

import keras

from tfattn.utils import validation
from tfattn.layers.block_base import BlockBase
from tfattn.layers.encoder_block import EncoderBlock
from tfattn.utils.seeds import sublayer_seed

__all__ = ["Encoder"]


@keras.saving.register_keras_serializable(package="tfattn")
class Encoder(BlockBase):
    """`num_layers` blocks (`EncoderBlock`); pre-norm stacks end with a
    layer norm.

    On its own this is a BERT-style encoder: every position attends to every
    real position in both directions (feed it `TokenEmbedding` +
    `PositionalEncoding` output and a padding mask).

    Args:
        num_layers: int. Number of blocks N. Defaults to `6`.
        **kwargs: the other arguments of `EncoderBlock` (shared by every
            block) and base `keras.layers.Layer` arguments.

    Call arguments:
        - x: [B, T, C].
        - padding_mask: bool [B, T], True = real token, or None.
        - training: bool.

    With `return_attention_scores=True` the call also returns the
    self-attention weights of every block: a list (block 0 first) of float32
    [B, H, T, T].

    Returns:
        [B, T, C], or `(output, weights)`.
    """

    _context = "Encoder"

    def __init__(self, num_layers=6, **kwargs):
        """Checks `num_layers`; the blocks are created when built."""
        validation.check_positive_int("num_layers", num_layers, self._context)
        super().__init__(**kwargs)
        self.num_layers = num_layers

    def _block_config(self, name):
        """The arguments of block `name`: the stack's, with a seed of its
        own (`tfattn.utils.seeds`)."""
        config = BlockBase.get_config(self)
        for key in ("name", "trainable", "dtype"):
            config.pop(key, None)
        config["seed"] = sublayer_seed(self.seed, name)
        return config

    def build(self, x_shape):
        self.blocks = [
            EncoderBlock(**self._block_config(f"block_{i}"),
                         dtype=self.dtype_policy, name=f"block_{i}")
            for i in range(self.num_layers)
        ]
        for block in self.blocks:
            block.build(x_shape)
        if self.normalize_first:
            self.final_layer_norm = self._norm("final_layer_norm")
            self.final_layer_norm.build(x_shape)
        self.built = True

    def call(self, x, padding_mask=None, training=None,
             return_attention_scores=False):
        scores = []
        for block in self.blocks:
            x = block(x, padding_mask=padding_mask, training=training,
                      return_attention_scores=return_attention_scores)
            if return_attention_scores:
                x, block_scores = x
                scores.append(block_scores)
        if self.normalize_first:
            x = self.final_layer_norm(x)
        return (x, scores) if return_attention_scores else x

    def compute_output_shape(self, x_shape):
        return x_shape

    def get_config(self):
        config = super().get_config()
        config.update(num_layers=self.num_layers)
        return config
