"""Tests of tfattn.MultiHeadAttention's masks: `padding_mask` against the
same `attention_mask`, and `attention_mask` shapes broadcast as Keras's
(or refused, naming both shapes)."""

import numpy as np
import pytest

from tests import bounds
from tests.mha_helpers import B
from tests.mha_helpers import H
from tests.mha_helpers import T
from tests.mha_helpers import built_layer
from tests.mha_helpers import keras_twin
from tests.mha_helpers import make_inputs
from tests.mha_helpers import mha_terms
from tfattn.layers.attention_flavors import FLAVORS


@pytest.mark.parametrize("flavor", FLAVORS)
def test_padding_mask_equals_the_same_attention_mask(flavor):
    x = make_inputs(zero_rows=False)
    memory = make_inputs(1, length=7, zero_rows=False)
    keep = np.ones((B, 7), bool)
    keep[0, -3:] = False
    layer = built_layer(flavor, x)
    via_padding = layer(x, memory, padding_mask=keep)
    via_attention = layer(
        x, memory, attention_mask=np.broadcast_to(keep[:, None, :], (B, T, 7))
    )
    bounds.assert_close(
        via_padding, via_attention, terms=mha_terms(layer, x, memory)
    )


@pytest.mark.parametrize(
    "shape",
    [
        (T, T),
        (1, T, T),
        (B, T, T),
        (1, 1, T, T),
        (B, 1, T, T),
        (1, H, T, T),
        (B, H, T, T),
    ],
)
def test_attention_masks_broadcast_as_in_keras(shape):
    """Rank 2, 3 and 4 masks with 1 for the batch or head axis: the output
    equals the one of the mask expanded to [B, H, T_q, T_k] by NumPy, and
    Keras's layer with the same weights where its shapes allow."""
    x, memory = make_inputs(0, zero_rows=False), make_inputs(1, zero_rows=False)
    rng = np.random.default_rng(7)
    mask = rng.random(shape) > 0.4
    mask[..., 0] = True
    ours = built_layer("paper", x)
    got, weights = ours(
        x, memory, attention_mask=mask, return_attention_scores=True
    )
    full = mask.reshape((1,) * (4 - mask.ndim) + mask.shape)
    if mask.ndim == 3:
        full = mask[:, None]
    full = np.broadcast_to(full, (B, H, T, T))
    weights = np.asarray(weights)
    assert np.all(weights[~full] == 0.0) and np.all(weights[full] > 0.0)
    if len(shape) < 4 or shape[1] == 1:
        keras_mask = mask if len(shape) < 4 else mask[:, 0]
        want = keras_twin(ours)(x, memory, attention_mask=keras_mask)
        bounds.assert_close(got, want, terms=mha_terms(ours, x, memory))


@pytest.mark.parametrize(
    "shape",
    [(B + 1, T, T), (T,), (B, H + 1, T, T), (T, T + 1), (1, 1, 1, T, T)],
)
def test_attention_mask_that_does_not_broadcast_names_both_shapes(shape):
    x = make_inputs(0, zero_rows=False)
    layer = built_layer("paper", x)
    with pytest.raises(ValueError) as info:
        layer(x, attention_mask=np.ones(shape, bool))
    message = str(info.value)
    assert "`attention_mask`" in message and str(shape) in message
    assert f"({B}, {H}, {T}, {T})" in message
