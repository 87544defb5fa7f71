"""Tests of tfattn.MultiHeadAttention against independent references: the
reference flavours and the paper's attention against NumPy written from
docs/reference.md, not from the layer (tests/reference_numpy.py), and the
facts of docs/reference.md §5 (mask constant, head layout, scale, zero
rows, causality)."""

import numpy as np
import pytest

import tfattn
from tests import bounds
from tests import reference_numpy as ref
from tests.harness import attention_params as _params
from tests.mha_helpers import B
from tests.mha_helpers import C
from tests.mha_helpers import H
from tests.mha_helpers import T
from tests.mha_helpers import built_layer
from tests.mha_helpers import make_inputs
from tests.mha_helpers import mha_terms
from tests.harness import logit_scale
from tfattn.layers.attention_flavors import FLAVORS


@pytest.mark.parametrize("causality", [False, True])
def test_reference_2017_matches_numpy(causality):
    x = make_inputs(0)
    memory = make_inputs(1, length=7)
    memory[1, -3:] = 0.0
    for queries, keys in ((x, x), (x, memory)):
        layer = built_layer("reference_2017", queries, causality=causality)
        layer(queries, keys)
        out, weights = layer(queries, keys, return_attention_scores=True)
        want_out, want_w = ref.mha_reference_2017(
            queries, keys, _params(layer), H, causality=causality
        )
        terms = mha_terms(layer, queries, keys)
        bounds.assert_close(out, want_out, terms=terms)
        bounds.assert_close(
            weights,
            want_w,
            terms=terms,
            scale=logit_scale(layer, queries, keys),
        )


@pytest.mark.parametrize("causality", [False, True])
def test_reference_2019_matches_numpy(causality):
    x = make_inputs(0, zero_rows=False)
    memory = make_inputs(1, length=7, zero_rows=False)
    key_masks = np.zeros((B, 7), bool)
    key_masks[0, -3:] = True
    self_masks = np.zeros((B, T), bool)
    self_masks[1, -2:] = True
    for queries, keys, masks in ((x, x, self_masks), (x, memory, key_masks)):
        values = keys * 0.5 + 1.0
        layer = built_layer("reference_2019", queries, causality=causality)
        out, weights = layer(
            queries, keys, values, key_masks=masks, return_attention_scores=True
        )
        want_out, want_w = ref.mha_reference_2019(
            queries,
            keys,
            values,
            _params(layer),
            H,
            key_masks=masks,
            causality=causality,
        )
        terms = mha_terms(layer, queries, keys)
        bounds.assert_close(out, want_out, terms=terms)
        bounds.assert_close(
            weights,
            want_w,
            terms=terms,
            scale=logit_scale(layer, queries, keys),
        )


def test_paper_matches_numpy_with_explicit_mask():
    x, memory = (
        make_inputs(0, zero_rows=False),
        make_inputs(1, length=7, zero_rows=False),
    )
    attend = np.random.default_rng(2).random((B, T, 7)) > 0.3
    attend[:, :, 0] = True
    layer = built_layer("paper", x)
    out, weights = layer(
        x, memory, attention_mask=attend, return_attention_scores=True
    )
    want_out, want_w = ref.mha_paper(
        x, memory, memory, _params(layer), H, attend_mask=attend
    )
    terms = mha_terms(layer, x, memory)
    bounds.assert_close(out, want_out, terms=terms)
    bounds.assert_close(
        weights, want_w, terms=terms, scale=logit_scale(layer, x, memory)
    )


def test_mask_constant_is_the_reference_float32_value():
    p = np.float32(tfattn.ops.REFERENCE_MASK_VALUE)
    assert p == np.float32(-4294967296.0)
    # The float32 spacing is 512 below P and 256 above it, so scores in
    # (-256, 128] vanish into P (docs/reference.md §5 says |s| < 256; 129..255
    # actually round to P + 256).
    assert np.float32(p + np.float32(128.0)) == p
    assert np.float32(p - np.float32(255.0)) == p


def test_head_layout_head_i_owns_its_channels():
    x = make_inputs(zero_rows=False)
    layer = built_layer("reference_2019", x)
    _, before = layer(x, return_attention_scores=True)
    d = C // H
    for dense in (layer.query_dense, layer.key_dense):
        kernel = dense.kernel.numpy()
        kernel[:, d:] += 3.0  # channels of head 1 only
        dense.kernel.assign(kernel)
    _, after = layer(x, return_attention_scores=True)
    np.testing.assert_array_equal(after[:, 0], before[:, 0])
    assert (
        np.abs(np.asarray(after[:, 1]) - np.asarray(before[:, 1])).max() > 1e-3
    )


def test_scale_is_one_over_sqrt_head_width():
    x = make_inputs(zero_rows=False)
    layer = tfattn.MultiHeadAttention(num_heads=H, flavor="reference_2019")
    layer(x)
    eye = np.eye(C, dtype="float32")
    for dense in (layer.query_dense, layer.key_dense, layer.value_dense):
        dense.kernel.assign(eye)
    _, weights = layer(x, return_attention_scores=True)
    d = C // H
    head0 = x[..., :d]
    scores = np.einsum("btd,bsd->bts", head0, head0) / np.sqrt(d)
    want = np.exp(scores - scores.max(-1, keepdims=True))
    want /= want.sum(-1, keepdims=True)
    # The scores over d, the scale, the softmax's sum over the T keys; the
    # weights move by at most their logits' error.
    bounds.assert_close(
        weights[:, 0],
        want,
        terms=d + 1 + T,
        scale=max(1.0, np.abs(scores).max()),
    )


def test_reference_2017_zero_rows():
    x = make_inputs()  # x[0, -2:] is zero
    layer = built_layer("reference_2017", x)
    out, weights = layer(x, return_attention_scores=True)
    weights = np.asarray(weights)
    # Zero key rows get exactly zero weight from every (real) query.
    assert np.all(weights[0, :, :-2, -2:] == 0.0)
    # Zero query rows: attention output 0, so the layer output is beta.
    beta = layer.layer_norm.beta.numpy()
    bounds.assert_close(
        np.asarray(out)[0, -2:],
        np.stack([beta, beta]),
        terms=mha_terms(layer, x, x),
    )
    # A query whose keys are all masked gets uniform weights 1/T_k.
    keys = np.zeros((B, 4, C), "float32")
    _, weights = layer(x, keys, return_attention_scores=True)
    real_rows = np.asarray(weights)[1]
    # The softmax's sum over the 4 keys and its division.
    bounds.assert_close(
        real_rows, np.full_like(real_rows, 0.25), terms=keys.shape[1] + 1
    )


@pytest.mark.parametrize("flavor", FLAVORS)
def test_causality_future_inputs_do_not_leak(flavor):
    x = make_inputs(zero_rows=False)
    layer = built_layer(flavor, x, causality=True)
    base = np.asarray(layer(x))
    for t in range(T - 1):
        changed = x.copy()
        changed[:, t + 1 :] += 5.0
        out = np.asarray(layer(changed))
        bounds.assert_close(
            out[:, : t + 1], base[:, : t + 1], terms=mha_terms(layer, x, x)
        )
        assert np.abs(out[:, t + 1 :] - base[:, t + 1 :]).max() > 1e-3
