"""`TextEncoder`: token ids to bidirectional contextual vectors, the body
that `MaskedLM` pretrains and `SequenceClassifier` fine-tunes."""


import keras
import numpy as np
from keras import ops

from tfattn.layers.block_base import resolved_epsilon
from tfattn.layers.dropout import Dropout
from tfattn.layers.encoder import Encoder
from tfattn.layers.initializers import fresh_initializer
from tfattn.layers.initializers import initializer_arguments
from tfattn.layers.layer_normalization import LayerNormalization
from tfattn.layers.positional_encoding import KINDS
from tfattn.layers.positional_encoding import PositionalEncoding
from tfattn.layers.token_embedding import TokenEmbedding
from tfattn.models import _ids
from tfattn.models.layout import checked_activation
from tfattn.models.layout import checked_layout
from tfattn.models.layout import serialized_activation
from tfattn.ops import masking
from tfattn.utils import validation
from tfattn.utils.seeds import sublayer_seed

__all__ = ["TextEncoder"]

_CONTEXT = "TextEncoder"
# The constructor arguments, in order: `MaskedLM` and `SequenceClassifier`
# take the same ones and pass them on.
ENCODER_ARGUMENTS = (
    "vocab_size", "num_layers", "num_units", "num_heads", "ffn_units",
    "dropout_rate", "attention_dropout_rate", "flavor", "normalize_first",
    "max_length", "positional_encoding", "embeddings_initializer",
    "activation", "seed", "kernel_initializer", "normalize_embeddings",
    "scale_embeddings", "positions_initializer", "type_vocab_size",
    "encoder_layer_norm_epsilon",
)


@keras.saving.register_keras_serializable(package="tfattn")
class TextEncoder(keras.layers.Layer):
    """BERT-style body: ids [B, T] -> contextual vectors [B, T, C].

    Token embedding (× sqrt(C) unless `scale_embeddings=False`), positions,
    (segment embeddings,) (a layer norm,) dropout, then an `Encoder`:
    every real token attends to every real token in both directions (BERT's
    bidirectional self-attention; id 0 is padding and is never attended
    to). Blocks are post-norm by default, as in BERT and the paper.

    Args:
        vocab_size: int V. Id 0 is padding.
        num_layers: int. Defaults to `6`.
        num_units: int C. Defaults to `512`.
        num_heads: int. Defaults to `8`.
        ffn_units: int. Defaults to `2048`.
        dropout_rate: float. Defaults to `0.1`.
        attention_dropout_rate: float or None (= `dropout_rate`).
        flavor: `"paper"`, `"reference_2017"` or `"reference_2019"`: the
            blocks of `tfattn.layers.Encoder`. Defaults to `"paper"`.
        normalize_first: bool or None. Pre-norm blocks (None: False, BERT's
            post-norm; only the paper flavour may set True).
        max_length: int. Positions the model holds. Defaults to `256`.
        positional_encoding: `"sinusoid"`, `"sinusoid_2017"`, `"learned"`
            (BERT's) or None (the flavour's).
        embeddings_initializer: a Keras initializer of the token table.
            Defaults to `"glorot_uniform"`.
        activation: the feed-forward activation. Defaults to `"relu"`;
            `"gelu"` is BERT's (the reference flavours fix ReLU).
        seed: int or None. Dropout seed (an int, not a bool nor a float).
        kernel_initializer: a Keras initializer of every Dense kernel (the
            blocks' projections and feed-forward layers, and the heads of
            the models that own this encoder). Defaults to
            `"glorot_uniform"` (Keras's); BERT's is
            `keras.initializers.TruncatedNormal(stddev=0.02)`.
        normalize_embeddings: bool. A layer norm over the sum of token
            and position embeddings, before the dropout (BERT's and
            keras-hub's `BertBackbone`'s; paper flavour only). Defaults
            to `False`.
        scale_embeddings: bool. Multiply the looked-up rows by sqrt(C)
            (the paper's §3.4). Defaults to `True`; BERT does not (False,
            with a table from truncated N(0, 0.02); paper flavour only).
        positions_initializer: a Keras initializer of the learned
            position table (`positional_encoding="learned"`; the
            sinusoids have none). Defaults to `"glorot_uniform"`; BERT's
            is `keras.initializers.TruncatedNormal(stddev=0.02)`.
        type_vocab_size: int >= 0. The rows of a segment (token type)
            table whose row `segment_ids[b, t]` is added to the token and
            position embeddings (BERT's `token_type_embeddings`, 2 in
            its checkpoints; initialised like the positions). Defaults to
            `0`: no table, and no `segment_ids`.
        encoder_layer_norm_epsilon: float > 0 or None. The epsilon of
            every layer norm of the blocks and of the embedding norm
            (BERT's `layer_norm_eps`, 1e-12). Defaults to `None`, the
            flavour's.

    Call arguments:
        - ids: int [B, T], 0 = padding.
        - segment_ids: int [B, T] in [0, type_vocab_size), or None (all
          zeros). Only with `type_vocab_size > 0`.
        - training: bool.
        - return_attention_scores: bool. Also return the self-attention
          weights, a list (block 0 first) of float32 [B, H, T, T].

    Returns:
        [B, T, C] in the compute dtype, or `(vectors, weights)`.
    """

    def __init__(self, vocab_size, num_layers=6, num_units=512, num_heads=8,
                 ffn_units=2048, dropout_rate=0.1, attention_dropout_rate=None,
                 flavor="paper", normalize_first=None, max_length=256,
                 positional_encoding=None,
                 embeddings_initializer="glorot_uniform", activation="relu",
                 seed=None, kernel_initializer="glorot_uniform",
                 normalize_embeddings=False, scale_embeddings=True,
                 positions_initializer="glorot_uniform", type_vocab_size=0,
                 encoder_layer_norm_epsilon=None, context=_CONTEXT,
                 **kwargs):
        """Checks the arguments (messages prefixed with `context`, the
        model that owns the encoder); sublayers are created when built."""
        validation.check_positive_int("vocab_size", vocab_size, context)
        validation.check_seed(seed, context)
        if positional_encoding is not None:
            validation.check_choice("positional_encoding",
                                    positional_encoding, KINDS, context)
        if normalize_first is not None:
            validation.check_bool("normalize_first", normalize_first, context)
        if encoder_layer_norm_epsilon is not None and not (
                isinstance(encoder_layer_norm_epsilon, float)
                and 0 < encoder_layer_norm_epsilon < float("inf")):
            raise validation.invalid_argument(
                "encoder_layer_norm_epsilon", "a finite float > 0 or None",
                encoder_layer_norm_epsilon, context)
        block_args, defaults, positional, _, _, initializer = checked_layout(
            vocab_size, None, num_layers, num_units, num_heads, ffn_units,
            dropout_rate, attention_dropout_rate, flavor,
            bool(normalize_first), max_length, positional_encoding, None,
            None, embeddings_initializer, context=context,
            layer_norm_epsilon=encoder_layer_norm_epsilon)
        block_args["activation"] = checked_activation(
            activation, flavor, context)
        block_args.update(initializer_arguments(
            context, kernel_initializer=kernel_initializer))
        positions_initializer = initializer_arguments(
            context, positions_initializer=positions_initializer)[
                "positions_initializer"]
        validation.check_bool("normalize_embeddings", normalize_embeddings,
                              context)
        validation.check_bool("scale_embeddings", scale_embeddings, context)
        if (isinstance(type_vocab_size, bool)
                or not isinstance(type_vocab_size, int)
                or type_vocab_size < 0):
            raise validation.invalid_argument(
                "type_vocab_size", "an int >= 0", type_vocab_size, context)
        if flavor != "paper" and not scale_embeddings:
            raise validation.invalid_argument(
                "scale_embeddings", f"True in flavor {flavor!r}, which the "
                "reference fixes", scale_embeddings, context)
        if normalize_embeddings and flavor != "paper":
            # The references have no such norm, and the 2017 one finds
            # padding from zero rows, which a norm's beta would fill.
            raise validation.invalid_argument(
                "normalize_embeddings", "False in flavor "
                f"{flavor!r} (only the paper flavour may set True)",
                normalize_embeddings, context)
        super().__init__(**kwargs)
        self.vocab_size = vocab_size
        self.num_layers = num_layers
        self.num_units = num_units
        self.num_heads = num_heads
        self.ffn_units = ffn_units
        self.dropout_rate = dropout_rate
        self.attention_dropout_rate = attention_dropout_rate
        self.flavor = flavor
        self.normalize_first = normalize_first
        self.max_length = max_length
        self.positional_encoding = positional_encoding
        self.embeddings_initializer = initializer
        self.activation = activation
        self.seed = seed
        self.kernel_initializer = block_args["kernel_initializer"]
        self.normalize_embeddings = normalize_embeddings
        self.scale_embeddings = scale_embeddings
        self.positions_initializer = positions_initializer
        self.type_vocab_size = type_vocab_size
        self.encoder_layer_norm_epsilon = encoder_layer_norm_epsilon
        self._context = context
        self._block_args = block_args
        self._padding_mode = defaults["padding_mode"]
        self._positional_kind = positional

    def build(self, ids_shape):
        self.token_embedding = TokenEmbedding(
            self.vocab_size, self.num_units, dtype=self.dtype_policy,
            embeddings_initializer=self.embeddings_initializer,
            scale=self.scale_embeddings, name="token_embedding")
        self.positions = PositionalEncoding(
            kind=self._positional_kind, max_length=self.max_length,
            padding_mode=self._padding_mode, dtype=self.dtype_policy,
            embeddings_initializer=fresh_initializer(
                self.positions_initializer), name="positions")
        if self.type_vocab_size:
            self.segment_embedding = keras.layers.Embedding(
                self.type_vocab_size, self.num_units,
                embeddings_initializer=fresh_initializer(
                    self.positions_initializer),
                dtype=self.dtype_policy, name="segment_embedding")
        if self.normalize_embeddings:
            self.embedding_layer_norm = LayerNormalization(
                epsilon=resolved_epsilon(self.flavor,
                                         self.encoder_layer_norm_epsilon),
                dtype=self.dtype_policy, name="embedding_layer_norm")
        self.embedding_dropout = Dropout(
            self.dropout_rate, seed=sublayer_seed(self.seed,
                                                  "embedding_dropout"),
            dtype=self.dtype_policy, name="embedding_dropout")
        self.encoder = Encoder(num_layers=self.num_layers,
                               seed=sublayer_seed(self.seed, "encoder"),
                               dtype=self.dtype_policy, name="encoder",
                               **self._block_args)
        x_shape = tuple(ids_shape) + (self.num_units,)
        self.token_embedding.build(ids_shape)
        self.positions.build(x_shape)
        self.encoder.build(x_shape)
        if self.type_vocab_size:
            self.segment_embedding.build(ids_shape)
        if self.normalize_embeddings:
            self.embedding_layer_norm.build(x_shape)
        self.built = True

    def call(self, ids, segment_ids=None, training=None,
             return_attention_scores=False):
        check_call_flags(training, return_attention_scores, self._context)
        ids = self.check_ids(ids)
        x = self.positions(self.token_embedding(ids))
        segment_ids = self._check_segments(segment_ids, ids)
        if segment_ids is not None:
            x = x + self.segment_embedding(segment_ids)
        if self.normalize_embeddings:
            x = self.embedding_layer_norm(x)
        x = self.embedding_dropout(x, training=training)
        # The 2017 reference finds padding from zero rows, not from ids.
        keep = (None if self.flavor == "reference_2017"
                else masking.padding_mask(ids))
        return self.encoder(x, padding_mask=keep, training=training,
                            return_attention_scores=return_attention_scores)

    def check_ids(self, ids, values=True):
        """Checks token ids: int, [B, T], T <= max_length, ids < vocab_size.

        Args:
            ids: int tensor, array or nested list [B, T].
            values: bool. Check the values too (where they are known).

        Returns:
            `ids` as a tensor.

        Raises:
            ValueError: naming `ids` and the value received.
        """
        return _ids.check_ids("ids", ids, self.vocab_size, self.max_length,
                              values, context=self._context)

    def _check_segments(self, segment_ids, ids):
        """`segment_ids` as int32 [B, T] (zeros when None and the encoder
        has a segment table), or None when it has none."""
        if not self.type_vocab_size:
            if segment_ids is not None:
                raise validation.invalid_argument(
                    "segment_ids", "None (this encoder has "
                    "type_vocab_size=0)", "<segment ids>", self._context)
            return None
        if segment_ids is None:
            return ops.zeros_like(ids, dtype="int32")
        segment_ids = ops.convert_to_tensor(segment_ids)
        dtype = keras.backend.standardize_dtype(segment_ids.dtype)
        shape, ids_shape = (validation.shape_of(segment_ids),
                            validation.shape_of(ids))
        if "int" not in dtype or len(shape) != 2 or any(
                a is not None and b is not None and a != b
                for a, b in zip(shape, ids_shape)):
            raise validation.invalid_argument(
                "segment_ids", f"int ids of the shape of ids {ids_shape}",
                f"<tensor of dtype {dtype} and shape {shape}>",
                self._context)
        concrete = (None if isinstance(segment_ids, keras.KerasTensor)
                    else _ids.concrete(segment_ids))
        if concrete is not None and concrete.size and (
                concrete.min() < 0 or concrete.max() >= self.type_vocab_size):
            raise validation.invalid_argument(
                "segment_ids", f"ids in [0, type_vocab_size="
                f"{self.type_vocab_size})", f"<ids from {concrete.min()} to "
                f"{concrete.max()}>", self._context)
        return ops.cast(segment_ids, "int32")

    def compute_output_shape(self, ids_shape):
        return tuple(ids_shape) + (self.num_units,)

    def get_config(self):
        config = super().get_config()
        config.update(encoder_config(self))
        config["context"] = self._context
        return config


def encoder_config(owner):
    """The `TextEncoder` arguments `owner` holds (a `TextEncoder`, or a
    model that passes them on), serialized for `get_config`.

    Args:
        owner: an object with an attribute per `ENCODER_ARGUMENTS`.

    Returns:
        dict.
    """
    config = {name: getattr(owner, name) for name in ENCODER_ARGUMENTS}
    for name in ("embeddings_initializer", "kernel_initializer",
                 "positions_initializer"):
        config[name] = keras.initializers.serialize(getattr(owner, name))
    config["activation"] = serialized_activation(owner.activation)
    return config


def check_call_flags(training, return_attention_scores, context):
    """Checks the call flags of the models on this encoder.

    Args:
        training: None or a bool.
        return_attention_scores: a Python bool.
        context: str. The model that checks; prefixes the message.

    Raises:
        ValueError: naming the flag.
    """
    if training is not None and not isinstance(training, (bool, np.bool_)):
        raise validation.invalid_argument(
            "training", "None or a bool", training, context)
    validation.check_bool("return_attention_scores", return_attention_scores,
                          context)


def encoder_arguments(kwargs):
    """Splits `kwargs` into `TextEncoder`'s arguments and the rest.

    Args:
        kwargs: dict of keyword arguments.

    Returns:
        `(encoder arguments, other arguments)`, two dicts.
    """
    encoder = {k: v for k, v in kwargs.items() if k in ENCODER_ARGUMENTS}
    rest = {k: v for k, v in kwargs.items() if k not in ENCODER_ARGUMENTS}
    return encoder, rest


def mean_over_tokens(vectors, ids):
    """Mean of `vectors` [B, T, C] over the real tokens (id != 0) of each
    row: [B, C] (a row of padding only gives zeros)."""
    keep = ops.cast(ops.expand_dims(ops.not_equal(ids, 0), -1),
                    vectors.dtype)
    total = ops.sum(vectors * keep, axis=1)
    count = ops.maximum(ops.sum(keep, axis=1), 1.0)
    return total / count
