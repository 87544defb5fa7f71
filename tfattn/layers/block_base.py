"""What the encoder and decoder blocks share: arguments, config, wiring."""

import keras

from tfattn.utils import validation
from tfattn.layers.attention_flavors import FLAVORS
from tfattn.layers.attention_flavors import REFERENCE_EPSILON
from tfattn.layers.dropout import Dropout
from tfattn.layers.feed_forward import FeedForward
from tfattn.layers.initializers import fresh_initializers
from tfattn.layers.initializers import initializer_arguments
from tfattn.layers.layer_normalization import LayerNormalization
from tfattn.layers.quantization import with_sublayer_policies
from tfattn.utils.seeds import sublayer_seed
from tfattn.layers.multi_head_attention import MultiHeadAttention

__all__ = ["PAPER_EPSILON", "REFERENCE_EPSILON", "BlockBase",
           "block_arguments", "resolved_attention_dropout",
           "resolved_epsilon"]

# Layer-norm epsilon when none is given: the references' REFERENCE_EPSILON
# (1e-8, inside the square root; defined with their attention in
# `attention_flavors`); the paper names none, and 1e-6 is what tensor2tensor
# and the Model Garden use.
PAPER_EPSILON = 1e-6


def block_arguments(
    context,
    num_heads,
    ffn_units,
    dropout_rate,
    attention_dropout_rate,
    flavor,
    normalize_first,
    layer_norm_epsilon,
):
    """Validates the shared block arguments; returns them as a dict.

    `attention_dropout_rate=None` resolves to `dropout_rate`, and
    `layer_norm_epsilon=None` to the flavour's epsilon; the stored values keep
    `None` so that `get_config` round-trips what the user passed.

    Args:
        context: str. Who checks; prefixes the error messages.
        num_heads: int >= 1.
        ffn_units: int >= 1.
        dropout_rate: float in [0, 1).
        attention_dropout_rate: float in [0, 1), or None.
        flavor: one of `"paper"`, `"reference_2017"`, `"reference_2019"`.
        normalize_first: bool. True only in the paper flavour.
        layer_norm_epsilon: float > 0, or None.

    Returns:
        dict. The seven arguments by name, as given.

    Raises:
        ValueError: the first invalid argument, by name.
    """
    validation.check_positive_int("num_heads", num_heads, context)
    validation.check_positive_int("ffn_units", ffn_units, context)
    validation.check_rate("dropout_rate", dropout_rate, context)
    if attention_dropout_rate is not None:
        validation.check_rate(
            "attention_dropout_rate", attention_dropout_rate, context)
    validation.check_choice("flavor", flavor, FLAVORS, context)
    validation.check_bool("normalize_first", normalize_first, context)
    if normalize_first and flavor != "paper":
        raise validation.invalid_argument(
            "normalize_first",
            f"False in flavor '{flavor}': the reference normalises after each "
            "residual (post-norm), inside its attention",
            normalize_first,
            context,
        )
    if layer_norm_epsilon is not None:
        if not (isinstance(layer_norm_epsilon, float)
                and layer_norm_epsilon > 0):
            raise validation.invalid_argument(
                "layer_norm_epsilon", "a float > 0 or None",
                layer_norm_epsilon, context,
            )
    return dict(
        num_heads=num_heads,
        ffn_units=ffn_units,
        dropout_rate=dropout_rate,
        attention_dropout_rate=attention_dropout_rate,
        flavor=flavor,
        normalize_first=normalize_first,
        layer_norm_epsilon=layer_norm_epsilon,
    )


def resolved_epsilon(flavor, layer_norm_epsilon):
    """The layer-norm epsilon a block uses.

    Args:
        flavor: str. The block's flavour.
        layer_norm_epsilon: float or None. The block's argument.

    Returns:
        float. `layer_norm_epsilon`, or when it is None `PAPER_EPSILON`
        (paper flavour) or `REFERENCE_EPSILON` (reference flavours).
    """
    if layer_norm_epsilon is not None:
        return layer_norm_epsilon
    return PAPER_EPSILON if flavor == "paper" else REFERENCE_EPSILON


def resolved_attention_dropout(dropout_rate, attention_dropout_rate):
    """The dropout rate of the attention weights.

    Args:
        dropout_rate: float. The block's `dropout_rate`.
        attention_dropout_rate: float or None. The block's argument.

    Returns:
        float. `attention_dropout_rate`, or `dropout_rate` when it is None.
    """
    return (dropout_rate if attention_dropout_rate is None
            else attention_dropout_rate)


class BlockBase(keras.layers.Layer):
    """Shared constructor, config and residual wiring of the two blocks.

    Paper flavour, post-norm (the paper): x = LN(x + dropout(sublayer(x))).
    Paper flavour, pre-norm (`normalize_first=True`):
    x = x + dropout(sublayer(LN(x))). Reference flavours: the attention
    sublayer adds its own residual and norm (docs/reference.md §1.4 steps
    13-14), the feed-forward sublayer is x = LN(x + FF(x)) (§1.5, §2.6), and
    there is no residual dropout (§1.7 "Dropout sites").

    The arguments are those of `EncoderBlock`, which describes them.

    Args:
        num_heads: int. Defaults to `8`.
        ffn_units: int. Defaults to `2048`.
        dropout_rate: float in [0, 1). Defaults to `0.1`.
        attention_dropout_rate: float or None (`dropout_rate`).
        flavor: `"paper"` (default), `"reference_2017"`, `"reference_2019"`.
        normalize_first: bool. Pre-norm. Defaults to `False`.
        layer_norm_epsilon: float or None (the flavour's epsilon).
        activation: the feed-forward activation. Defaults to `"relu"`.
        seed: int or None. Dropout seed.
        kernel_initializer: Defaults to `"glorot_uniform"`.
        bias_initializer: Defaults to `"zeros"`.
        **kwargs: base `keras.layers.Layer` arguments (`name`, `dtype`,
            ...).
    """

    _context = "Block"

    def __init__(
        self,
        num_heads=8,
        ffn_units=2048,
        dropout_rate=0.1,
        attention_dropout_rate=None,
        flavor="paper",
        normalize_first=False,
        layer_norm_epsilon=None,
        activation="relu",
        seed=None,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        **kwargs,
    ):
        """Checks the arguments (`block_arguments`) and stores them."""
        args = block_arguments(
            self._context, num_heads, ffn_units, dropout_rate,
            attention_dropout_rate, flavor, normalize_first, layer_norm_epsilon,
        )
        initializers = initializer_arguments(
            self._context, kernel_initializer=kernel_initializer,
            bias_initializer=bias_initializer)
        super().__init__(**kwargs)
        for name, value in args.items():
            setattr(self, name, value)
        self.activation = activation
        self.seed = seed
        self.kernel_initializer = initializers["kernel_initializer"]
        self.bias_initializer = initializers["bias_initializer"]
        self.supports_masking = True

    def _attention(self, name, causality):
        return MultiHeadAttention(
            num_heads=self.num_heads,
            dropout_rate=resolved_attention_dropout(
                self.dropout_rate, self.attention_dropout_rate
            ),
            causality=causality,
            flavor=self.flavor,
            seed=sublayer_seed(self.seed, name),
            dtype=self.dtype_policy,
            name=name,
            **self._initializers(),
        )

    def _initializers(self):
        return fresh_initializers(dict(
            kernel_initializer=self.kernel_initializer,
            bias_initializer=self.bias_initializer))

    def _norm(self, name):
        return LayerNormalization(
            epsilon=resolved_epsilon(self.flavor, self.layer_norm_epsilon),
            dtype=self.dtype_policy,
            name=name,
        )

    def _dropout(self, name):
        return Dropout(
            self.dropout_rate, seed=sublayer_seed(self.seed, name),
            dtype=self.dtype_policy, name=name,
        )

    def _build_feed_forward(self, input_shape):
        self.feed_forward = FeedForward(
            ffn_units=self.ffn_units,
            activation=self.activation,
            dtype=self.dtype_policy,
            name="feed_forward",
            **self._initializers(),
        )
        self.feed_forward.build(input_shape)
        self.feed_forward_layer_norm = self._norm("feed_forward_layer_norm")
        self.feed_forward_layer_norm.build(input_shape)
        if self.flavor == "paper":
            self.feed_forward_dropout = self._dropout("feed_forward_dropout")

    def _build_paper_wiring(self, prefix, input_shape):
        """The norm and residual dropout around a paper-flavour attention."""
        if self.flavor != "paper":
            return
        norm = self._norm(f"{prefix}_layer_norm")
        norm.build(input_shape)
        setattr(self, f"{prefix}_layer_norm", norm)
        setattr(self, f"{prefix}_dropout", self._dropout(f"{prefix}_dropout"))

    def _attention_sublayer(self, prefix, x, training, return_scores=False,
                            **attention_kwargs):
        """Runs the attention named `prefix` with its residual wiring.

        Returns (x, scores, cache): the attention weights [B, H, T_q, T_k]
        when `return_scores` (else None) and the updated cache when a cache
        was passed (else None).
        """
        attention = getattr(self, prefix)
        has_cache = attention_kwargs.get("cache") is not None

        def attend(inputs):
            result = attention(inputs, training=training,
                               return_attention_scores=return_scores,
                               **attention_kwargs)
            result = list(result) if isinstance(result, (tuple, list)) \
                else [result]
            output = result.pop(0)
            scores = result.pop(0) if return_scores else None
            return output, scores, (result.pop(0) if has_cache else None)

        if self.flavor != "paper":
            return attend(x)
        norm = getattr(self, f"{prefix}_layer_norm")
        dropout = getattr(self, f"{prefix}_dropout")
        attended, scores, cache = attend(norm(x) if self.normalize_first
                                         else x)
        x = x + dropout(attended, training=training)
        return (x if self.normalize_first else norm(x)), scores, cache

    def _feed_forward_sublayer(self, x, training):
        if self.flavor != "paper":
            return self.feed_forward_layer_norm(
                x + self.feed_forward(x, training=training))
        dropout = self.feed_forward_dropout
        if self.normalize_first:
            inner = self.feed_forward(self.feed_forward_layer_norm(x),
                                      training=training)
            return x + dropout(inner, training=training)
        inner = self.feed_forward(x, training=training)
        return self.feed_forward_layer_norm(
            x + dropout(inner, training=training))

    def get_config(self):
        config = super().get_config()
        config.update(
            num_heads=self.num_heads,
            ffn_units=self.ffn_units,
            dropout_rate=self.dropout_rate,
            attention_dropout_rate=self.attention_dropout_rate,
            flavor=self.flavor,
            normalize_first=self.normalize_first,
            layer_norm_epsilon=self.layer_norm_epsilon,
            activation=self.activation,
            seed=self.seed,
            kernel_initializer=keras.initializers.serialize(self.kernel_initializer),
            bias_initializer=keras.initializers.serialize(self.bias_initializer),
        )
        return with_sublayer_policies(self, config)
