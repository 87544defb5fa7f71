"""`FeedForward`: the position-wise feed-forward sublayer."""

import keras

from tfattn.utils import validation
from tfattn.layers.dropout import Dropout
from tfattn.layers.initializers import fresh_initializers
from tfattn.layers.initializers import initializer_arguments
from tfattn.layers.quantization import with_sublayer_policies

__all__ = ["FeedForward"]

_CONTEXT = "FeedForward"


@keras.saving.register_keras_serializable(package="tfattn")
class FeedForward(keras.layers.Layer):
    """Position-wise feed-forward network: Dense, activation, Dense.

    Shapes: B = batch, T = length, C = input width, F = `ffn_units`,
    C_out = `num_units` (defaults to C).

    `outer_dense(inner_dropout(inner_dense(x)))`:

    - `inner_dense`: Dense(F) with bias and `activation` (ReLU by default);
    - `inner_dropout`: dropout at `dropout_rate`, active only when training;
    - `outer_dense`: Dense(C_out) with bias and no activation.

    Kernels are Glorot-uniform and biases zero, as in both references: the
    2017 `feedforward` (conv1d with kernel size 1, docs/reference.md §1.5) and
    the 2019 `ff` (§2.6). Neither reference has dropout here (the default
    `dropout_rate=0.0` reproduces them); the paper's T2T code does. There is
    no residual and no layer norm inside: the encoder and decoder blocks add
    them. Keras masks pass through unchanged (the layer is position-wise).

    Args:
        ffn_units: int. Width F of the inner layer (d_ff; 2048 in the paper).
        num_units: int or None. Output width. Defaults to `None`, the input
            width C.
        activation: activation of the inner layer, a name or callable.
            Defaults to `"relu"`.
        dropout_rate: float in [0, 1). Dropout on the inner activations.
            Defaults to `0.0`.
        seed: int or None. Seed of the dropout. Defaults to `None`.
        kernel_initializer, bias_initializer: Keras initializers (or names or
            configs) of both Dense layers. Defaults to `"glorot_uniform"`,
            `"zeros"`.
        **kwargs: base `keras.layers.Layer` arguments (`name`, `dtype`, ...).

    Call arguments:
        - x: [B, T, C] (any rank >= 2 works; the layer acts on the last axis).
        - training: bool. Dropout is active only when True.

    Returns:
        [B, T, C_out].

    Example::

        ffn = tfattn.layers.FeedForward(ffn_units=2048)
        y = ffn(x)   # x [B, T, 512] -> y [B, T, 512]
    """

    def __init__(
        self,
        ffn_units,
        num_units=None,
        activation="relu",
        dropout_rate=0.0,
        seed=None,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        **kwargs,
    ):
        """Checks the arguments; the Dense layers are created when built."""
        ffn_units = validation.check_positive_int(
            "ffn_units", ffn_units, _CONTEXT)
        initializers = initializer_arguments(
            _CONTEXT, kernel_initializer=kernel_initializer,
            bias_initializer=bias_initializer)
        if num_units is not None:
            num_units = validation.check_positive_int(
                "num_units", num_units, _CONTEXT
            )
        try:
            activation_fn = keras.activations.get(activation)
        except (ValueError, TypeError) as error:
            raise validation.invalid_argument(
                "activation",
                "a Keras activation name or a callable",
                activation,
                _CONTEXT,
            ) from error
        dropout_rate = validation.check_rate(
            "dropout_rate", dropout_rate, _CONTEXT)
        if seed is not None and (
            isinstance(seed, bool) or not isinstance(seed, int)
        ):
            raise validation.invalid_argument(
                "seed", "an integer or None", seed, _CONTEXT
            )
        super().__init__(**kwargs)
        self.ffn_units = ffn_units
        self.num_units = num_units
        self.activation = activation_fn
        self.dropout_rate = dropout_rate
        self.seed = seed
        self.kernel_initializer = initializers["kernel_initializer"]
        self.bias_initializer = initializers["bias_initializer"]
        self.supports_masking = True

    def build(self, x_shape):
        shape = validation.shape_of(x_shape)
        if shape is None or len(shape) < 2 or shape[-1] is None:
            raise validation.invalid_argument(
                "x",
                "a tensor of rank >= 2 ([B, T, C]) with a known width C",
                f"<tensor of shape {shape}>",
                _CONTEXT,
            )
        def dense_kwargs():
            # A fresh initializer per Dense (see `fresh_initializers`).
            return dict(use_bias=True, dtype=self.dtype_policy,
                        **fresh_initializers(dict(
                            kernel_initializer=self.kernel_initializer,
                            bias_initializer=self.bias_initializer)))

        self.inner_dense = keras.layers.Dense(
            self.ffn_units,
            activation=self.activation,
            name="inner_dense",
            **dense_kwargs(),
        )
        self.inner_dense.build(shape)
        self.inner_dropout = Dropout(
            self.dropout_rate,
            seed=self.seed,
            dtype=self.dtype_policy,
            name="inner_dropout",
        )
        self.outer_dense = keras.layers.Dense(
            self.num_units or shape[-1],
            activation=None,
            name="outer_dense",
            **dense_kwargs(),
        )
        self.outer_dense.build(shape[:-1] + (self.ffn_units,))
        self.built = True

    def call(self, x, training=None):
        h = self.inner_dense(x)  # [B, T, F]
        h = self.inner_dropout(h, training=training)
        return self.outer_dense(h)  # [B, T, C_out]

    def compute_output_shape(self, x_shape):
        return tuple(x_shape[:-1]) + (self.num_units or x_shape[-1],)

    def get_config(self):
        config = super().get_config()
        config.update(
            ffn_units=self.ffn_units,
            num_units=self.num_units,
            activation=keras.activations.serialize(self.activation),
            dropout_rate=self.dropout_rate,
            seed=self.seed,
            kernel_initializer=keras.initializers.serialize(self.kernel_initializer),
            bias_initializer=keras.initializers.serialize(self.bias_initializer),
        )
        return with_sublayer_policies(self, config)
