"""Weight porting between tfattn and Keras.

- `from_keras(layer)`: a built `keras.layers.MultiHeadAttention` -> an
  equal paper-flavour `tfattn.MultiHeadAttention` (same arguments, same
  weights): Keras's EinsumDense kernels [C, H, d] become tfattn's Dense
  kernels [C, H·d], its biases [H, d] become [H·d], and its output kernel
  [H, d_v, O] becomes [H·d_v, O].
- `to_keras(layer)`: the inverse, for a built paper-flavour
  `tfattn.MultiHeadAttention`.
- `from_reference_checkpoint(path)` / `load_reference_checkpoint(model,
  path)`: a checkpoint written by the referenced TF1 code -> a
  `reference_2017` / `reference_2019` `Transformer`
  (tfattn/interop/reference_checkpoint.py).
- `from_keras_hub(block)` / `to_keras_hub(block)`: keras-hub's
  `TransformerEncoder` / `TransformerDecoder` <-> tfattn's paper-flavour
  `EncoderBlock` / `DecoderBlock` (attention through `from_keras`, layer
  norms and feed-forward Dense layers as they are).

"Equal" means: the same outputs at every query that sees at least one key;
at a query whose keys are all masked tfattn gives all-zero weights (output:
the output projection's bias) where Keras's default, fused call gives
uniform weights (`MultiHeadAttention`'s docstring says when).

Both return a new, built layer; the input is not changed. `attention_axes`
(inputs of any rank), `use_gate` and `sliding_window` are carried, with
the gate's kernel [C, H, d_v] <-> [C, H·d_v]. An unbuilt layer or one of
another class is refused.

Example::

    theirs = keras.layers.MultiHeadAttention(num_heads=4, key_dim=16)
    theirs(x, x)
    ours = tfattn.interop.from_keras(theirs)   # ours(x, x) == theirs(x, x)
    back = tfattn.interop.to_keras(ours)       # same weights as `theirs`
"""

import keras
import numpy as np

from tfattn.layers.multi_head_attention import MultiHeadAttention
from tfattn.utils.validation import invalid_argument

__all__ = ["from_keras", "to_keras", "from_keras_hub", "to_keras_hub",
           "from_reference_checkpoint", "load_reference_checkpoint"]

_CONTEXT = "interop"
_PROJECTIONS = ("query", "key", "value")
_SHARED_OPTIONS = (
    "kernel_initializer", "bias_initializer", "kernel_regularizer",
    "bias_regularizer", "kernel_constraint", "bias_constraint",
)


def _describe(layer):
    return f"<{type(layer).__name__} {getattr(layer, 'name', '')}>".replace(
        " >", ">")


def from_keras(layer):
    """A paper-flavour `tfattn.MultiHeadAttention` equal to a built
    `keras.layers.MultiHeadAttention`.

    Args:
        layer: keras.layers.MultiHeadAttention. A built layer; it is not
            changed.

    Returns:
        A new, built `tfattn.MultiHeadAttention` with the same arguments
        and weights.

    Raises:
        ValueError: not a built Keras MultiHeadAttention.
    """
    if not isinstance(layer, keras.layers.MultiHeadAttention):
        raise invalid_argument("layer", "a keras.layers.MultiHeadAttention",
                               _describe(layer), _CONTEXT)
    if not layer.built:
        raise invalid_argument("layer", "a built layer (call it once first)",
                               _describe(layer), _CONTEXT)
    config = layer.get_config()
    rank = len(layer._query_dense.equation.split(",")[0])
    ours = MultiHeadAttention(
        num_heads=config["num_heads"], key_dim=config["key_dim"],
        value_dim=config.get("value_dim"),
        output_shape=config.get("output_shape"),
        use_bias=config["use_bias"], dropout_rate=float(config["dropout"]),
        seed=config.get("seed"), attention_axes=config.get("attention_axes"),
        use_gate=bool(config.get("use_gate")),
        sliding_window=config.get("sliding_window"),
        activity_regularizer=config.get("activity_regularizer"),
        dtype=layer.dtype_policy, name=layer.name,
        **{name: config[name] for name in _SHARED_OPTIONS},
    )
    ours.build(*[(None,) * (rank - 1)
                 + (getattr(layer, f"_{part}_dense").kernel.shape[0],)
                 for part in _PROJECTIONS])
    for part in _PROJECTIONS + (("gate",) if ours.use_gate else ()):
        theirs = getattr(layer, f"_{part}_dense")
        mine = getattr(ours, f"{part}_dense")
        mine.kernel.assign(np.reshape(theirs.kernel.numpy(), mine.kernel.shape))
        if config["use_bias"]:
            mine.bias.assign(np.reshape(theirs.bias.numpy(), mine.bias.shape))
    out = layer._output_dense
    ours.output_dense.kernel.assign(
        np.reshape(out.kernel.numpy(), ours.output_dense.kernel.shape))
    if config["use_bias"]:
        ours.output_dense.bias.assign(np.reshape(out.bias.numpy(), [-1]))
    return ours


def to_keras(layer):
    """A `keras.layers.MultiHeadAttention` equal to a built paper-flavour
    `tfattn.MultiHeadAttention`.

    Args:
        layer: tfattn.MultiHeadAttention. A built layer of flavour `paper`;
            it is not changed.

    Returns:
        A new, built `keras.layers.MultiHeadAttention` with the same
        arguments and weights.

    Raises:
        ValueError: not a built tfattn MultiHeadAttention of the paper
            flavour (the reference flavours have no Keras equivalent).
    """
    if not isinstance(layer, MultiHeadAttention):
        raise invalid_argument("layer", "a tfattn.MultiHeadAttention",
                               _describe(layer), _CONTEXT)
    if layer.flavor != "paper":
        raise invalid_argument(
            "layer", "flavor 'paper' (the reference flavours have no output "
            "projection and add a residual and layer norm: no Keras "
            "equivalent)", f"{_describe(layer)} of flavor {layer.flavor!r}",
            _CONTEXT)
    if not layer.built:
        raise invalid_argument("layer", "a built layer (call it once first)",
                               _describe(layer), _CONTEXT)
    heads = layer.num_heads
    key_dim = layer.units // heads
    value_dim = layer.value_units // heads
    query_width = layer.query_dense.kernel.shape[0]
    output_width = layer.output_dense.kernel.shape[1]
    options = {name: getattr(layer, name) for name in _SHARED_OPTIONS}
    theirs = keras.layers.MultiHeadAttention(
        num_heads=heads, key_dim=key_dim, value_dim=value_dim,
        output_shape=layer.output_shape_ or (
            None if output_width == query_width else output_width),
        use_bias=layer.use_bias, dropout=layer.dropout_rate, seed=layer.seed,
        attention_axes=layer.attention_axes, use_gate=layer.use_gate,
        sliding_window=layer.sliding_window,
        dtype=layer.dtype_policy, name=layer.name, **options)
    width = {part: getattr(layer, f"{part}_dense").kernel.shape[0]
             for part in _PROJECTIONS}
    leading = (None,) * (layer.input_rank - 1)
    theirs.build(leading + (width["query"],), leading + (width["value"],),
                 leading + (width["key"],))
    parts = _PROJECTIONS + (("gate",) if layer.use_gate else ())
    width["gate"] = width["query"]
    for part, d in zip(parts, (key_dim, key_dim, value_dim, value_dim)):
        mine = getattr(layer, f"{part}_dense")
        target = getattr(theirs, f"_{part}_dense")
        target.kernel.assign(np.reshape(mine.kernel.numpy(),
                                        (width[part], heads, d)))
        if layer.use_bias:
            target.bias.assign(np.reshape(mine.bias.numpy(), (heads, d)))
    out = theirs._output_dense
    out.kernel.assign(np.reshape(layer.output_dense.kernel.numpy(),
                                 out.kernel.shape))
    if layer.use_bias:
        out.bias.assign(np.reshape(layer.output_dense.bias.numpy(),
                                   out.bias.shape))
    return theirs


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
        kernel_initializer=keras.initializers.serialize(block.kernel_initializer),
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


def __getattr__(name):
    # The TF1 checkpoint import reads checkpoints with TensorFlow: loaded on
    # first use so that `tfattn.interop` imports under every backend.
    if name in ("from_reference_checkpoint", "load_reference_checkpoint"):
        from tfattn.interop import reference_checkpoint

        return getattr(reference_checkpoint, name)
    raise AttributeError(f"module 'tfattn.interop' has no attribute {name!r}")
