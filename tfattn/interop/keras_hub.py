"""keras-hub's `TransformerEncoder` / `TransformerDecoder` <-> tfattn's
paper-flavour `EncoderBlock` / `DecoderBlock`, with the same arguments and
weights.

- `from_keras_hub(block)`: a built keras-hub block -> an equal tfattn
  block;
- `to_keras_hub(block)`: the inverse.

The attention layers go through `tfattn.interop.keras` (`from_keras` /
`to_keras`: their weights are laid out differently); the layer norms and
feed-forward Dense layers hold the same arrays on both sides. keras-hub is
imported only when a block is ported. `tfattn.interop` hands both on.
"""

import keras

from tfattn.interop.keras import _CONTEXT
from tfattn.interop.keras import _describe
from tfattn.interop.keras import from_keras
from tfattn.interop.keras import to_keras
from tfattn.utils.validation import invalid_argument

__all__ = ["from_keras_hub", "to_keras_hub"]

# keras-hub blocks <-> tfattn blocks: sublayer pairs (keras-hub attribute,
# tfattn attribute path); attention layers go through `from_keras`.
_HUB_NORMS = (("_self_attention_layer_norm", "self_attention_layer_norm"),
              ("_feedforward_layer_norm", "feed_forward_layer_norm"))
_HUB_DENSE = (("_feedforward_intermediate_dense", "inner_dense"),
              ("_feedforward_output_dense", "outer_dense"))
_HUB_CROSS_NORM = ("_cross_attention_layer_norm", "cross_attention_layer_norm")


def _hub_counterparts(hub_block, block):
    """The sublayers of a keras-hub block and a tfattn block of the same
    kind, both built, that hold the same weights: (hub, tfattn) attention
    pairs (their weights are laid out differently: `from_keras` /
    `to_keras` convert them), then (hub, tfattn) pairs of norms and dense
    layers, whose weights are the same arrays."""
    attention = [(hub_block._self_attention_layer, block.self_attention)]
    names = list(_HUB_NORMS)
    if getattr(block, "use_cross_attention", False):
        attention.append((hub_block._cross_attention_layer,
                          block.cross_attention))
        names.append(_HUB_CROSS_NORM)
    others = [(getattr(hub_block, hub), getattr(block, ours))
              for hub, ours in names]
    others += [(getattr(hub_block, hub), getattr(block.feed_forward, ours))
               for hub, ours in _HUB_DENSE]
    return attention, others


def _hub_classes():
    try:
        import keras_hub
    except ImportError:
        raise ImportError("Porting keras-hub blocks needs keras-hub: pip "
                          "install keras-hub") from None
    return (keras_hub.layers.TransformerEncoder,
            keras_hub.layers.TransformerDecoder)


def from_keras_hub(block):
    """A paper-flavour `tfattn.EncoderBlock` / `DecoderBlock` from a
    built keras-hub `TransformerEncoder` / `TransformerDecoder` (same
    arguments: intermediate_dim -> ffn_units, dropout -> dropout_rate and
    attention_dropout_rate, activation, layer_norm_epsilon, normalize_first,
    initializers; same weights).

    Outputs are equal at every position with explicit padding masks
    (`padding_mask` / `memory_padding_mask` = keras-hub's
    `decoder_padding_mask` / `encoder_padding_mask`; neither side then
    masks padded queries), and at every valid position with Keras implicit
    masks. They differ (1) at padded positions with implicit masks: tfattn's
    attention masks padded queries (zero weights, so its output there is the
    output projection's bias); keras-hub's decoder never masks them, and its
    encoder's Keras attention does but, with `dropout=0`, gives them uniform
    weights; (2) at a query whose keys are all masked (left padding under
    the causal mask, an all-False attention-mask row): tfattn gives zero
    weights, keras-hub with `dropout=0` uniform ones.

    Args:
        block: keras_hub.layers.TransformerEncoder or TransformerDecoder. A
            built block; it is not changed.

    Returns:
        A new, built `EncoderBlock` (for an encoder) or `DecoderBlock`.

    Raises:
        ValueError: another class, or an unbuilt block.
        ImportError: keras-hub is not installed.
    """
    from tfattn.layers.decoder_block import DecoderBlock
    from tfattn.layers.encoder_block import EncoderBlock

    encoder_cls, decoder_cls = _hub_classes()
    if not isinstance(block, (encoder_cls, decoder_cls)):
        raise invalid_argument(
            "block", "a keras_hub.layers.TransformerEncoder or "
            "TransformerDecoder", _describe(block), _CONTEXT)
    if not block.built:
        raise invalid_argument("block", "a built block (call it once first)",
                               _describe(block), _CONTEXT)
    config = block.get_config()
    kwargs = dict(
        num_heads=config["num_heads"], ffn_units=config["intermediate_dim"],
        dropout_rate=float(config["dropout"]),
        activation=config["activation"],
        layer_norm_epsilon=float(config["layer_norm_epsilon"]),
        normalize_first=config["normalize_first"],
        kernel_initializer=config["kernel_initializer"],
        bias_initializer=config["bias_initializer"],
        dtype=block.dtype_policy, name=block.name)
    is_decoder = isinstance(block, decoder_cls)
    width = block._self_attention_layer._query_dense.kernel.shape[0]
    if is_decoder:
        cross = getattr(block, "_cross_attention_layer", None)
        ours = DecoderBlock(use_cross_attention=cross is not None, **kwargs)
        memory = (None if cross is None else
                  (None, None, cross._key_dense.kernel.shape[0]))
        ours.build((None, None, width), memory)
    else:
        ours = EncoderBlock(**kwargs)
        ours.build((None, None, width))
    attention, others = _hub_counterparts(block, ours)
    for theirs, mine in attention:
        for a, b in zip(mine.weights, from_keras(theirs).weights):
            a.assign(b)
    for theirs, mine in others:
        mine.set_weights(theirs.get_weights())
    return ours


def to_keras_hub(block):
    """The inverse of `from_keras_hub` for a built paper-flavour
    `EncoderBlock` / `DecoderBlock` whose attention width is its input
    width (keras-hub's key_dim = width / num_heads); equal outputs where
    `from_keras_hub` says.

    Args:
        block: EncoderBlock or DecoderBlock. A built block of flavour
            `paper`; it is not changed.

    Returns:
        A new, built keras-hub `TransformerEncoder` (for an `EncoderBlock`)
        or `TransformerDecoder`.

    Raises:
        ValueError: another class or flavour, or an unbuilt block.
        ImportError: keras-hub is not installed.
    """
    from tfattn.layers.decoder_block import DecoderBlock
    from tfattn.layers.encoder_block import EncoderBlock

    encoder_cls, decoder_cls = _hub_classes()
    if not isinstance(block, (EncoderBlock, DecoderBlock)):
        raise invalid_argument("block", "a tfattn EncoderBlock or "
                               "DecoderBlock", _describe(block), _CONTEXT)
    if block.flavor != "paper" or not block.built:
        raise invalid_argument(
            "block", "a built block of flavor 'paper' (keras-hub has no "
            "reference flavours)",
            f"{_describe(block)} of flavor {block.flavor!r}", _CONTEXT)
    kwargs = dict(
        intermediate_dim=block.ffn_units, num_heads=block.num_heads,
        dropout=block.dropout_rate, activation=block.activation,
        layer_norm_epsilon=block.self_attention_layer_norm.epsilon,
        normalize_first=block.normalize_first,
        kernel_initializer=keras.initializers.serialize(
            block.kernel_initializer),
        bias_initializer=keras.initializers.serialize(block.bias_initializer),
        dtype=block.dtype_policy, name=block.name)
    width = block.self_attention.query_dense.kernel.shape[0]
    is_decoder = isinstance(block, DecoderBlock)
    if is_decoder:
        theirs = decoder_cls(**kwargs)
        memory = None
        if block.use_cross_attention:
            memory = (None, None,
                      block.cross_attention.key_dense.kernel.shape[0])
        theirs.build((None, None, width), memory)
    else:
        theirs = encoder_cls(**kwargs)
        theirs.build((None, None, width))
    attention, others = _hub_counterparts(theirs, block)
    for target, mine in attention:
        for a, b in zip(target.weights, to_keras(mine).weights):
            a.assign(b)
    for target, mine in others:
        target.set_weights(mine.get_weights())
    return theirs
