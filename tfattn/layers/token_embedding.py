"""`TokenEmbedding`: the referenced token embedding, with its tied output."""

import math

import keras
from keras import ops

from tfattn.utils import validation

__all__ = ["TokenEmbedding"]

_CONTEXT = "TokenEmbedding"


@keras.saving.register_keras_serializable(package="tfattn")
class TokenEmbedding(keras.layers.Layer):
    """Token embedding of both referenced versions, with the tied projection.

    Shapes: B = batch, T = length, C = `num_units`, V = `vocab_size`.

    Looks token ids up in one table of shape [V, C] and multiplies the rows by
    sqrt(C) (`scale=True`). This is `embedding(..., zero_pad=True,
    scale=True)` of the 2017 code (docs/reference.md §1.2) and
    `get_token_embeddings` followed by the `* sqrt(d_model)` of the 2019 code
    (§2.2), which is also the paper's scaling.

    - The table is Glorot-uniform by default, as in both references; the
      Keras `Embedding` default (uniform ±0.05) differs.
    - `zero_pad=True`: id 0 always reads as a zero row and table row 0 never
      receives a gradient. The references replace row 0 by constant zeros in
      the graph; here the lookup is masked instead, so the variable keeps its
      V rows (row 0 keeps its initial value and is never used).
    - `logits(x)` is the 2019 reference's tied output projection
      `x · tableᵀ` (§2.9): no bias, no scaling. With `zero_pad=True` the
      logit of id 0 is exactly 0, as the reference's zero row gives.

    Masking: with `mask_zero=True` the layer emits the Keras implicit mask
    `ids != 0` (True = real token, the Keras polarity), which downstream
    Keras layers and `tfattn.MultiHeadAttention` read.

    Args:
        vocab_size: int. Number of rows V of the table.
        num_units: int. Width C of each embedding.
        zero_pad: bool. Id 0 embeds to zeros and row 0 gets no gradient.
            Defaults to `True`.
        scale: bool. Multiply the looked-up rows by sqrt(C). Defaults to
            `True`.
        embeddings_initializer: initializer of the [V, C] table. Defaults to
            `"glorot_uniform"`.
        mask_zero: bool. Emit the Keras mask `ids != 0`. Defaults to `False`.
        **kwargs: base `keras.layers.Layer` arguments (`name`, `dtype`, ...).

    Call arguments:
        - ids: integer tensor [B, T].

    Returns:
        [B, T, C] in the layer's compute dtype.

    Example::

        embed = tfattn.layers.TokenEmbedding(vocab_size=100, num_units=16)
        x = embed(np.array([[5, 7, 0]]))   # [1, 3, 16]; x[0, 2] == 0
        logits = embed.logits(x)           # [1, 3, 100]; logits[..., 0] == 0
    """

    def __init__(
        self,
        vocab_size,
        num_units,
        zero_pad=True,
        scale=True,
        embeddings_initializer="glorot_uniform",
        mask_zero=False,
        **kwargs,
    ):
        """Checks the arguments; the table is created when built."""
        vocab_size = validation.check_positive_int(
            "vocab_size", vocab_size, _CONTEXT
        )
        num_units = validation.check_positive_int(
            "num_units", num_units, _CONTEXT
        )
        zero_pad = validation.check_bool("zero_pad", zero_pad, _CONTEXT)
        scale = validation.check_bool("scale", scale, _CONTEXT)
        mask_zero = validation.check_bool("mask_zero", mask_zero, _CONTEXT)
        try:
            initializer = keras.initializers.get(embeddings_initializer)
        except (ValueError, TypeError) as error:
            raise validation.invalid_argument(
                "embeddings_initializer",
                "a Keras initializer or its name",
                embeddings_initializer,
                _CONTEXT,
            ) from error
        super().__init__(**kwargs)
        self.vocab_size = vocab_size
        self.num_units = num_units
        self.zero_pad = zero_pad
        self.scale = scale
        self.embeddings_initializer = initializer
        self.mask_zero = mask_zero
        self.supports_masking = mask_zero

    def build(self, ids_shape=None):
        # `call` checks the ids (dtype and rank) with one message.
        self.embeddings = self.add_weight(
            name="embeddings",
            shape=(self.vocab_size, self.num_units),
            initializer=self.embeddings_initializer,
            trainable=True,
        )
        self.built = True

    def call(self, ids):
        if _check_ids(ids) not in ("int32", "int64"):
            ids = ops.cast(ids, "int32")  # e.g. uint8 ids
        outputs = ops.take(self.embeddings, ids, axis=0)  # [B, T, C]
        outputs = ops.cast(outputs, self.compute_dtype)
        if self.zero_pad:
            # `where` passes no gradient to the rows it drops, so row 0 never
            # learns, exactly like the reference's constant zero row.
            outputs = ops.where(
                ops.expand_dims(ops.not_equal(ids, 0), -1),
                outputs,
                ops.zeros((), self.compute_dtype),
            )
        if self.scale:
            outputs = outputs * ops.cast(math.sqrt(self.num_units),
                                         outputs.dtype)
        return outputs

    def logits(self, x):
        """Tied output projection `x · tableᵀ` (docs/reference.md §2.9).

        No bias and no scaling; with `zero_pad=True` the column of id 0 is
        exactly 0. Call it inside a layer's or a subclassed model's `call`
        (it is a method, not a Keras layer call, so a functional model does
        not record it as a node).

        Args:
            x: float tensor [B, T, C].

        Returns:
            [B, T, V] in the layer's compute dtype.
        """
        if not self.built:
            self.build()
        x_shape = validation.shape_of(x)
        if not x_shape or x_shape[-1] not in (None, self.num_units):
            raise validation.invalid_argument(
                "x",
                f"a tensor whose last dimension is num_units={self.num_units}",
                f"<tensor of shape {x_shape}>",
                _CONTEXT,
            )
        table = ops.cast(self.embeddings, self.compute_dtype)  # [V, C]
        x = ops.cast(x, self.compute_dtype)
        logits = ops.matmul(x, ops.transpose(table))
        if self.zero_pad:
            # Logit 0 set to 0 after the product rather than row 0 of the
            # table before it: the same logits (each column is its own dot
            # product) and no gradient to row 0 either way, but masking the
            # table copies all V x C of it at every call (every decoding
            # step) where XLA does not fuse the select, and the select
            # after the product keeps XLA's CPU backend from fusing a
            # following bias add (Marian's) into the product, a fused loop
            # 8x slower than its matrix-vector kernel at a vocabulary of
            # 58k (docs/traps.md item 38).
            keep = ops.arange(self.vocab_size) != 0
            logits = ops.where(keep, logits, ops.zeros((), logits.dtype))
        return logits

    def compute_mask(self, ids, mask=None):
        if not self.mask_zero:
            return None
        return ops.not_equal(ids, 0)

    def compute_output_shape(self, ids_shape):
        return tuple(ids_shape) + (self.num_units,)

    def get_config(self):
        config = super().get_config()
        config.update(
            vocab_size=self.vocab_size,
            num_units=self.num_units,
            zero_pad=self.zero_pad,
            scale=self.scale,
            embeddings_initializer=keras.initializers.serialize(
                self.embeddings_initializer
            ),
            mask_zero=self.mask_zero,
        )
        return config


def _check_ids(ids):
    shape = validation.shape_of(ids)
    dtype = keras.backend.standardize_dtype(ids.dtype)
    if "int" not in dtype or shape is None or len(shape) != 2:
        raise validation.invalid_argument(
            "ids",
            "an integer tensor of shape [B, T]",
            f"<tensor of dtype {dtype} and shape {shape}>",
            _CONTEXT,
        )
    return dtype
