"""`keras.layers.Dropout` with a 16-bit draw per element."""

import keras

from tfattn.ops import dropout as dropout_ops

__all__ = ["Dropout"]


@keras.saving.register_keras_serializable(package="tfattn")
class Dropout(keras.layers.Dropout):
    """`keras.layers.Dropout` whose mask comes from 16 random bits an element.

    Same arguments, config and behaviour as Keras's layer (inverted dropout
    when `training`, the identity otherwise, masks passed through), with
    two differences (`tfattn.ops.dropout`):

    - the rate is applied within 2^-17 of `rate` in every dtype, where
      Keras's bfloat16 draw rounds it to 1/128 and so scales its output by
      up to 1.6% too little or too much (0.6% too little at 0.3);
    - half the random bits are drawn, which makes dropout's forward and
      backward pass faster on CPU, where the draw is most of its time
      (`bench/dropout.py` times it against Keras's).

    The masks differ from Keras's for the same seed, so this is used where
    tfattn owns the randomness (the blocks' residual and feed-forward
    dropout, the embeddings'); attention-weight dropout stays Keras's, as
    `keras.layers.MultiHeadAttention` has it.

    Args:
        rate: float in [0, 1], the fraction of the inputs to drop.
        noise_shape: optional tuple, the mask's shape (None entries take
            the input's size), e.g. (batch, 1, features) for a mask shared
            over time.
        seed: optional int, the seed of the layer's `SeedGenerator`.
    """

    def call(self, inputs, training=False):
        if training and self.rate > 0:
            return dropout_ops.dropout(
                inputs,
                self.rate,
                seed=self.seed_generator.next(),
                noise_shape=self.noise_shape,
            )
        return inputs
