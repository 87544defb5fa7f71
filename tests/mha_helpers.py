"""What the tests of `tfattn.MultiHeadAttention`
(tests/test_multi_head_attention_*.py) share: the sizes of their inputs,
random inputs, a built layer with random weights, and its Keras twin.

Shapes: B = batch, T = length, C = width, H = heads.
"""

import keras
import numpy as np

import tfattn
from tests.harness import attention_terms
from tests.harness import copy_to_keras_attention
from tests.harness import randomize_weights

__all__ = ["B", "T", "C", "H", "make_inputs", "built_layer", "keras_twin",
           "mha_terms"]

B, T, C, H = 2, 5, 8, 2


def make_inputs(seed=0, batch=B, length=T, width=C, zero_rows=True):
    """Random float32 inputs.

    Args:
        seed: int. The NumPy generator's seed.
        batch, length, width: int. The shape [B, T, C].
        zero_rows: bool. Zero the last two rows of batch 0 (the padding
            the 2017 reference finds from all-zero rows).

    Returns:
        np.ndarray [batch, length, width], float32.
    """
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(batch, length, width)).astype("float32")
    if zero_rows:
        x[0, -2:] = 0.0  # zero-padded rows, as the 2017 reference expects
    return x


def built_layer(flavor, x, **kwargs):
    """A `tfattn.MultiHeadAttention` of H heads, built on `x` (self-attention)
    and given random weights, biases included.

    Args:
        flavor: str. One of `attention_flavors.FLAVORS`.
        x: array [B, T, C]. The inputs it is built on.
        **kwargs: further constructor arguments.

    Returns:
        tfattn.MultiHeadAttention. The built layer.
    """
    layer = tfattn.MultiHeadAttention(num_heads=H, flavor=flavor, **kwargs)
    layer(x)
    randomize_weights(layer)
    return layer


def keras_twin(layer):
    """`keras.layers.MultiHeadAttention` holding `layer`'s paper weights.

    Args:
        layer: tfattn.MultiHeadAttention. A built paper-flavour layer.

    Returns:
        keras.layers.MultiHeadAttention. Of the same heads and head width.
    """
    d = layer.units // layer.num_heads
    twin = keras.layers.MultiHeadAttention(num_heads=layer.num_heads, key_dim=d)
    x = np.zeros((1, 1, layer.query_dense.kernel.shape[0]), "float32")
    twin(x, x)
    copy_to_keras_attention(twin, layer)
    return twin


def mha_terms(layer, queries, keys, key_length=None):
    """`bounds.assert_close` terms of a `MultiHeadAttention` output.

    Paper: `attention_terms` (the projection over the inputs' width, the
    scores, the softmax and weighted sum over the keys, the output
    projection; the heads' width the wider of the query/key and the value
    units). Reference flavours: the projection over the inputs' width, the
    scores (`units`, all heads' widths at most), the softmax and weighted
    sum over the keys (2·T_k), the residual (1) and the layer norm (4·C).
    `key_length`: T_k when it is not the keys' length (a cache's slots).
    """
    if key_length is None:
        key_length = np.shape(keys)[1]
    if layer.flavor == "paper":
        units = max(layer.units, layer.value_units)
        return attention_terms(queries, keys, units, key_length)
    width = max(np.shape(queries)[-1], np.shape(keys)[-1])
    return width + layer.units + 2 * key_length + 1 + 4 * np.shape(queries)[-1]

