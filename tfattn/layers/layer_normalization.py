"""`keras.layers.LayerNormalization` with its gradient written out."""

import keras

from tfattn.ops import normalization

__all__ = ["LayerNormalization"]


@keras.saving.register_keras_serializable(package="tfattn")
class LayerNormalization(keras.layers.LayerNormalization):
    """`keras.layers.LayerNormalization` whose backward pass is closed-form.

    Same arguments, weights (`gamma`, `beta`), config and forward values as
    Keras's layer (to float32 rounding: the variance is taken as the mean
    of squared deviations, where Keras subtracts the squared mean). Over
    the last axis with both `scale` and `center`, the common case and every
    norm of tfattn's blocks, it runs `tfattn.ops.normalization`, whose
    gradient is written out (`bench/layer_norm.py` times it); any
    other configuration (several axes, `scale=False` or `center=False`,
    `rms_scaling`) runs Keras's own code.

    Shapes: inputs [..., C] -> [..., C], in the layer's compute dtype
    (float32 inside, as Keras's).
    """

    def call(self, inputs):
        if not self._closed_form_applies(inputs):
            return super().call(inputs)
        return normalization.layer_normalization(
            inputs,
            self.gamma,
            self.beta,
            self.epsilon,
            output_dtype=self.compute_dtype,
        )

    def _closed_form_applies(self, inputs):
        rank = len(inputs.shape)
        return (
            self.scale
            and self.center
            and not self.rms_scaling
            and len(self.axis) == 1
            and self.axis[0] in (-1, rank - 1)
        )
