"""The `Transformer`'s arguments: what each flavour builds, and the
checks that run before any sublayer exists."""

import keras

from tfattn.utils import validation
from tfattn.layers.block_base import block_arguments

__all__ = ["checked_layout"]

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
                   tie_output, embeddings_initializer, context=_CONTEXT):
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
        flavor, normalize_first, None,
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


def checked_activation(activation, flavor, context=_CONTEXT):
    """The feed-forward activation, checked; the reference flavours fix
    ReLU.

    Args:
        activation: a Keras activation name or callable.
        flavor: str. The model's flavour.
        context: str. The model that checks; prefixes the messages.

    Returns:
        `activation`, as given (`get_config` stores what the user passed).

    Raises:
        ValueError: naming `activation`, for an unknown one or one that a
            reference flavour does not use.
    """
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


def serialized_activation(activation):
    """`activation` for `get_config`: a name as is, a callable serialized."""
    if isinstance(activation, str):
        return activation
    return keras.activations.serialize(activation)
