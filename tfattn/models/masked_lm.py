"""`MaskedLM`: a BERT-style masked language model."""

import math

import keras
from keras import ops

from tfattn.layers.initializers import fresh_initializer
from tfattn.models._ids import concrete as concrete_values
from tfattn.models.layout import serialized_activation
from tfattn.models.text_encoder import ENCODER_ARGUMENTS
from tfattn.models.text_encoder import TextEncoder
from tfattn.models.text_encoder import check_call_flags
from tfattn.models.text_encoder import encoder_arguments
from tfattn.models.text_encoder import encoder_config
from tfattn.utils import validation

__all__ = ["MaskedLM", "MASK_ID"]

_CONTEXT = "MaskedLM"
# tfattn's vocabularies: pad 0, unk 1, bos 2, eos 3; a masked-LM vocabulary
# adds the mask piece "[MASK]" as id 4 (`train_tokenizer(...,
# mask_piece=True)`).
MASK_ID = 4


@keras.saving.register_keras_serializable(package="tfattn")
class MaskedLM(keras.Model):
    """BERT-style masked language model: a `TextEncoder` and BERT's head.

    The head (Devlin et al. 2019, as in keras-hub's `BertMaskedLM` and
    Model Garden's `MaskedLM`): Dense(C) with `head_activation` (its kernel
    drawn from `kernel_initializer`), a layer
    norm, then the projection tied to the token embedding (`x · tableᵀ`)
    plus a bias of its own. Given `mask_positions`, the head runs at those
    positions only (the encoder still sees the whole sentence), which is
    what pretraining needs and costs a fraction of the full projection.

    Args:
        vocab_size ... seed: `TextEncoder`'s arguments (`vocab_size` first;
            `activation` is the blocks' feed-forward activation).
        head_activation: the head's activation. Defaults to `"gelu"`
            (BERT's).
        layer_norm_epsilon: float > 0, finite. The head's layer norm.
            Defaults to `1e-6`.
        mask_token_id: int. The id that stands for a blank (`fill_mask`
            fills those). Defaults to `4`, tfattn's mask piece.
        **kwargs: base `keras.Model` arguments (`name`, `dtype`).

    Call arguments:
        - inputs: int ids [B, T] (0 = padding), or a dict with
          `"token_ids"` [B, T] and optionally `"mask_positions"` int
          [B, P] (the output of `tfattn.data.MaskGenerator`; its other
          keys are ignored): positions in [0, T), B the ids' batch (a
          padded slot may repeat position 0). Checked in Python where the
          values are known and by in-graph assertions with the same
          message in a TensorFlow graph (`tf.function`, `fit`, serving);
          unchecked under JAX tracing (see `tfattn.models._ids`).
        - training: bool.
        - return_attention_scores: bool. Also return the self-attention
          weights, `{"encoder": [[B, H, T, T] per layer]}`.

    Returns:
        float32 logits [B, P, V] at `mask_positions`, or [B, T, V] at every
        position.

    Example::

        mlm = tfattn.models.MaskedLM(vocab_size=1000, num_layers=2,
                                     num_units=64, num_heads=4,
                                     ffn_units=128)
        masker = tfattn.data.MaskGenerator(vocab_size=1000,
                                           mask_selection_length=8)
        batch = masker(ids)
        mlm.compile("adam", keras.losses.SparseCategoricalCrossentropy(
            from_logits=True), weighted_metrics=["accuracy"])
        mlm.fit(batch, batch["mask_ids"], sample_weight=batch["mask_weights"])
    """

    def __init__(self, vocab_size, head_activation="gelu",
                 layer_norm_epsilon=1e-6, mask_token_id=MASK_ID, **kwargs):
        """Checks the arguments; the sublayers are created when built."""
        encoder_kwargs, kwargs = encoder_arguments(kwargs)
        self._encoder_kwargs = dict(vocab_size=vocab_size, **encoder_kwargs)
        # Checks every encoder argument now, with this model's name.
        probe = TextEncoder(context=_CONTEXT, **self._encoder_kwargs)
        try:
            keras.activations.get(head_activation)
        except (ValueError, TypeError) as error:
            raise validation.invalid_argument(
                "head_activation", "a Keras activation name or a callable",
                head_activation, _CONTEXT) from error
        if (isinstance(layer_norm_epsilon, bool)
                or not isinstance(layer_norm_epsilon, (int, float))
                or not 0 < layer_norm_epsilon < math.inf):
            raise validation.invalid_argument(
                "layer_norm_epsilon", "a finite number > 0",
                layer_norm_epsilon, _CONTEXT)
        if (isinstance(mask_token_id, bool) or not isinstance(
                mask_token_id, int) or not 0 < mask_token_id < vocab_size):
            raise validation.invalid_argument(
                "mask_token_id",
                f"an int id in [1, vocab_size={vocab_size})",
                mask_token_id, _CONTEXT)
        super().__init__(**kwargs)
        for name in ENCODER_ARGUMENTS:
            setattr(self, name, getattr(probe, name))
        self.head_activation = head_activation
        self.layer_norm_epsilon = layer_norm_epsilon
        self.mask_token_id = mask_token_id

    def build(self, inputs_shape):
        ids_shape = _ids_shape(inputs_shape)
        self.text_encoder = TextEncoder(
            context=_CONTEXT, dtype=self.dtype_policy, name="text_encoder",
            **self._encoder_kwargs)
        self.head_dense = keras.layers.Dense(
            self.num_units, activation=self.head_activation,
            kernel_initializer=fresh_initializer(self.kernel_initializer),
            dtype=self.dtype_policy, name="head_dense")
        self.head_norm = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy,
            name="head_norm")
        x_shape = tuple(ids_shape) + (self.num_units,)
        self.text_encoder.build(ids_shape)
        self.head_dense.build(x_shape)
        self.head_norm.build(x_shape)
        self.head_bias = self.add_weight(
            name="head_bias", shape=(self.vocab_size,), initializer="zeros")
        self.built = True

    @property
    def token_embedding(self):
        """The token table's layer, shared by the encoder and the head."""
        return self.text_encoder.token_embedding

    def call(self, inputs, training=None, return_attention_scores=False):
        check_call_flags(training, return_attention_scores, _CONTEXT)
        ids, positions, segments = _split_inputs(inputs)
        if positions is not None:
            ids = self.text_encoder.check_ids(ids)
        x = self.text_encoder(ids, segment_ids=segments, training=training,
                              return_attention_scores=return_attention_scores)
        if return_attention_scores:
            x, scores = x
        if positions is not None:
            positions = self._check_positions(positions, ids)
            x = ops.take_along_axis(
                x, ops.expand_dims(positions, -1), axis=1)  # [B, P, C]
        logits = self._head(x)
        if return_attention_scores:
            return logits, {"encoder": scores}
        return logits

    def _head(self, x):
        x = self.head_norm(self.head_dense(x))
        logits = self.token_embedding.logits(x)
        return ops.cast(logits, "float32") + ops.cast(self.head_bias,
                                                      "float32")

    def _check_positions(self, positions, ids):
        """`positions` as int32 [B, P] after checking them against `ids`
        [B, T]: same batch, every value in [0, T)."""
        positions = ops.convert_to_tensor(positions)
        dtype = keras.backend.standardize_dtype(positions.dtype)
        shape = validation.shape_of(positions)
        ids_shape = validation.shape_of(ids)
        received = f"<tensor of dtype {dtype} and shape {shape}>"
        if "int" not in dtype or len(shape) != 2:
            raise validation.invalid_argument(
                "mask_positions", "int positions of shape [B, P]", received,
                _CONTEXT)
        if None not in (shape[0], ids_shape[0]) and shape[0] != ids_shape[0]:
            raise validation.invalid_argument(
                "mask_positions", "the batch size of token_ids "
                f"({ids_shape[0]})", received, _CONTEXT)
        positions = ops.cast(positions, "int32")
        if isinstance(positions, keras.KerasTensor):
            return positions
        expected = "positions in [0, T) of token_ids"
        concrete, length = concrete_values(positions), ids_shape[1]
        if concrete is not None and length is not None:
            bad = concrete[(concrete < 0) | (concrete >= length)]
            if bad.size:
                raise validation.invalid_argument(
                    "mask_positions", f"{expected} (T={length})",
                    f"<positions holding {int(bad[0])}>", _CONTEXT)
            return positions
        if keras.config.backend() != "tensorflow":
            return positions  # Traced: unchecked (`tfattn.models._ids`).
        return _asserted_positions(positions, ids, expected)

    def get_config(self):
        config = super().get_config()
        config.update(encoder_config(self))
        config.update(
            head_activation=serialized_activation(self.head_activation),
            layer_norm_epsilon=self.layer_norm_epsilon,
            mask_token_id=self.mask_token_id,
        )
        return config


def _split_inputs(inputs):
    """(ids, mask positions or None, segment ids or None) from ids or a
    MaskGenerator dict."""
    if isinstance(inputs, dict):
        if "token_ids" not in inputs:
            raise validation.invalid_argument(
                "inputs", "ids [B, T] or a dict with 'token_ids'",
                f"<dict with keys {sorted(inputs)}>", _CONTEXT)
        return (inputs["token_ids"], inputs.get("mask_positions"),
                inputs.get("segment_ids"))
    return inputs, None, None


def _ids_shape(inputs_shape):
    if isinstance(inputs_shape, dict):
        return tuple(inputs_shape["token_ids"])
    return tuple(inputs_shape)


def _asserted_positions(positions, ids, expected):
    """`positions` after in-graph checks (TensorFlow graphs): the batch of
    `ids` and values in [0, T), with `_check_positions`' message."""
    import tensorflow as tf

    message = (f"{_CONTEXT}: Received an invalid value for argument "
               f"`mask_positions`, expected {{}}.")
    ids_shape = tf.shape(ids)
    checks = [
        tf.debugging.assert_equal(
            tf.shape(positions)[0], ids_shape[0],
            message=message.format("the batch size of token_ids")),
        tf.debugging.assert_non_negative(
            positions, message=message.format(expected)),
        tf.debugging.assert_less(
            positions, ids_shape[1], message=message.format(expected)),
    ]
    with tf.control_dependencies(checks):
        return tf.identity(positions)
