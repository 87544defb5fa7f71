"""The `Transformer`'s arguments: what each flavour builds, and the
checks that run before any sublayer exists."""

import keras

from tfattn.utils import validation
from tfattn.layers.block_base import block_arguments

__all__ = ["checked_layout", "checked_activation", "checked_output_mask",
           "gelu_tanh", "serialized_activation"]

_CONTEXT = "Transformer"

# What each flavour builds (docs/reference.md §1.7, §2.9, §3). `None` arguments
# of the constructor take these values; explicit ones must agree with them in
# the reference flavours.
_FLAVOR_DEFAULTS = {
    "paper": dict(positional_encoding="sinusoid", padding_mode=None),
    "reference_2017": dict(
        positional_encoding="learned", padding_mode="reference_2017",
        share_embeddings=False, tie_output=False,
    ),
    "reference_2019": dict(
        positional_encoding="sinusoid", padding_mode="reference_2019",
        share_embeddings=True, tie_output=True,
    ),
}


def checked_layout(source_vocab_size, target_vocab_size, num_layers,
                   num_units, num_heads, ffn_units, dropout_rate,
                   attention_dropout_rate, flavor, normalize_first,
                   max_length, positional_encoding, share_embeddings,
                   tie_output, embeddings_initializer, context=_CONTEXT,
                   layer_norm_epsilon=None):
    """`Transformer`'s arguments checked, with the flavour's defaults
    filled in.

    Args:
        source_vocab_size, target_vocab_size, num_layers, num_units: as in
            `Transformer`.
        num_heads, ffn_units, dropout_rate, attention_dropout_rate: as in
            `Transformer`.
        flavor, normalize_first, max_length, positional_encoding: as in
            `Transformer`.
        share_embeddings, tie_output, embeddings_initializer: as in
            `Transformer`.
        context: str. The model that checks; prefixes the messages.
        layer_norm_epsilon: float > 0 or None (the flavour's epsilon,
            `tfattn.layers.block_base.resolved_epsilon`). Every layer norm
            of the blocks and the pre-norm stack's final norm.

    Returns:
        (block arguments (`block_arguments`), the flavour's defaults (a
        dict), the positional encoding kind, share (bool), tie (bool), the
        embeddings' Keras initializer).

    Raises:
        ValueError: the first invalid argument, by name, or one that
            disagrees with what a reference flavour fixes.
    """
    validation.check_positive_int(
        "source_vocab_size", source_vocab_size, context)
    if target_vocab_size is not None:
        validation.check_positive_int(
            "target_vocab_size", target_vocab_size, context)
    validation.check_positive_int("num_layers", num_layers, context)
    validation.check_positive_int("num_units", num_units, context)
    validation.check_positive_int("max_length", max_length, context)
    block_args = block_arguments(
        context, num_heads, ffn_units, dropout_rate, attention_dropout_rate,
        flavor, normalize_first, layer_norm_epsilon,
    )
    if num_units % num_heads:
        raise validation.invalid_argument(
            "num_units", f"a multiple of num_heads={num_heads}", num_units,
            context,
        )
    defaults = dict(_FLAVOR_DEFAULTS[flavor])
    # The paper shares embeddings when there is one vocabulary and ties
    # the output projection to them.
    defaults.setdefault("share_embeddings", target_vocab_size is None)
    defaults.setdefault("tie_output", True)
    positional_encoding = _resolve(
        "positional_encoding", positional_encoding, defaults, flavor,
        context, fixed=False,
    )
    single_vocab = target_vocab_size in (None, source_vocab_size)
    share = _resolve("share_embeddings", share_embeddings, defaults, flavor,
                     context)
    tie = _resolve("tie_output", tie_output, defaults, flavor, context)
    if share and not single_vocab:
        raise validation.invalid_argument(
            "share_embeddings",
            "False when the source and target vocabularies differ "
            f"({source_vocab_size} and {target_vocab_size})",
            share_embeddings,
            context,
        )
    try:
        initializer = keras.initializers.get(embeddings_initializer)
    except (ValueError, TypeError) as error:
        raise validation.invalid_argument(
            "embeddings_initializer", "a Keras initializer or its name",
            embeddings_initializer, context,
        ) from error
    return block_args, defaults, positional_encoding, share, tie, initializer


def _resolve(name, value, defaults, flavor, context, fixed=True):
    """A flavour default for a None argument; reference flavours fix theirs."""
    default = defaults[name]
    if value is None:
        return default
    if isinstance(default, bool) and not isinstance(value, bool):
        raise validation.invalid_argument(
            name, "a Python bool or None (the flavour's)", value, context)
    if fixed and flavor != "paper" and value != default:
        raise validation.invalid_argument(
            name, f"{default} (or None) in flavor '{flavor}', which the "
            "reference fixes", value, context,
        )
    return value


@keras.saving.register_keras_serializable(package="tfattn",
                                          name="gelu_tanh")
def gelu_tanh(x):
    """GELU with the tanh approximation, elementwise (any shape):
    0.5·x·(1 + tanh(sqrt(2/π)·(x + 0.044715·x³))).

    GPT-2's activation (Hugging Face's `gelu_new`, keras-hub's
    `gelu_approximate`; Hendrycks & Gimpel 2016, eq. after §2). Keras's
    `"gelu"` string is the exact one, x·Φ(x), which differs from this by up
    to about 5e-4. Models take it by the name `"gelu_tanh"`.

    Args:
        x: float tensor, any shape.

    Returns:
        A tensor of `x`'s shape and dtype.
    """
    return keras.activations.gelu(x, approximate=True)


# Activation names tfattn's models accept besides Keras's own.
_NAMED_ACTIVATIONS = {"gelu_tanh": gelu_tanh}


def checked_activation(activation, flavor, context=_CONTEXT):
    """The feed-forward activation, checked; the reference flavours fix
    ReLU.

    Args:
        activation: a Keras activation name or callable, or `"gelu_tanh"`
            (`gelu_tanh`, GPT-2's).
        flavor: str. The model's flavour.
        context: str. The model that checks; prefixes the messages.

    Returns:
        What the blocks take: `activation` as given, or for `"gelu_tanh"`
        the function (`get_config` stores what the user passed).

    Raises:
        ValueError: naming `activation`, for an unknown one or one that a
            reference flavour does not use.
    """
    if isinstance(activation, str) and activation in _NAMED_ACTIVATIONS:
        activation = _NAMED_ACTIVATIONS[activation]
    try:
        function = keras.activations.get(activation)
    except (ValueError, TypeError) as error:
        raise validation.invalid_argument(
            "activation", "a Keras activation name or a callable",
            activation, context) from error
    if flavor != "paper" and function is not keras.activations.relu:
        raise validation.invalid_argument(
            "activation", f"'relu' in flavor '{flavor}', which the "
            "reference fixes", activation, context)
    return activation


def checked_output_mask(masked_output_ids, vocab_size, context=_CONTEXT):
    """The ids whose logits a model masks, checked.

    Args:
        masked_output_ids: a tuple or list of distinct ints in
            [0, vocab_size).
        vocab_size: int V.
        context: str. The model that checks; prefixes the messages.

    Returns:
        tuple of ints, sorted.

    Raises:
        ValueError: naming `masked_output_ids`: not a tuple or list, an id
            that is not an int in [0, V), a repeated id, or every id.
    """
    if not isinstance(masked_output_ids, (tuple, list)):
        raise validation.invalid_argument(
            "masked_output_ids", "a tuple or list of ids", masked_output_ids,
            context)
    ids = tuple(masked_output_ids)
    for i in ids:
        if (isinstance(i, bool) or not isinstance(i, int)
                or not 0 <= i < vocab_size):
            raise validation.invalid_argument(
                "masked_output_ids", f"ids in [0, vocab_size={vocab_size})",
                masked_output_ids, context)
    if len(set(ids)) != len(ids) or len(ids) >= vocab_size:
        raise validation.invalid_argument(
            "masked_output_ids", "distinct ids, fewer than vocab_size="
            f"{vocab_size}", masked_output_ids, context)
    return tuple(sorted(ids))


def serialized_activation(activation):
    """`activation` for `get_config`: a name as is, a callable serialized.

    Args:
        activation: a Keras activation name or callable.

    Returns:
        str or dict. The name, or Keras's serialized form of the callable.
    """
    if isinstance(activation, str):
        return activation
    return keras.activations.serialize(activation)
