"""Keras's `MultiHeadAttention` <-> tfattn's paper-flavour
`MultiHeadAttention`, with the same arguments and weights.

- `from_keras(layer)`: a built `keras.layers.MultiHeadAttention` -> an
  equal paper-flavour `tfattn.MultiHeadAttention`: Keras's EinsumDense
  kernels [C, H, d] become tfattn's Dense kernels [C, H·d], its biases
  [H, d] become [H·d], and its output kernel [H, d_v, O] becomes
  [H·d_v, O].
- `to_keras(layer)`: the inverse, for a built paper-flavour
  `tfattn.MultiHeadAttention`.

"Equal" means: the same outputs at every query that sees at least one key;
at a query whose keys are all masked tfattn gives all-zero weights (output:
the output projection's bias) where Keras's default, fused call gives
uniform weights (`MultiHeadAttention`'s docstring says when).

Both return a new, built layer; the input is not changed. `attention_axes`
(inputs of any rank), `use_gate` and `sliding_window` are carried, with
the gate's kernel [C, H, d_v] <-> [C, H·d_v]. An unbuilt layer or one of
another class is refused. `tfattn.interop` hands both on.

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

__all__ = ["from_keras", "to_keras"]

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

