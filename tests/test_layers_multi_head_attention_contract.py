"""Tests of tfattn.MultiHeadAttention's layer contract, in every flavour:
config, serialization, symbolic and eager calls, a fit step, `.keras`
reload, its documented sublayers, and what must not change its outputs
(dropout outside training, mixed precision, XLA, query chunking)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfattn
from tests import bounds
from tests.harness import assert_keras_file_round_trip
from tests.harness import run_layer_test
from tests.mha_helpers import B
from tests.mha_helpers import C
from tests.mha_helpers import H
from tests.mha_helpers import T
from tests.mha_helpers import built_layer
from tests.mha_helpers import make_inputs
from tests.mha_helpers import mha_terms
from tfattn.layers.attention_flavors import FLAVORS


@pytest.mark.parametrize("flavor", FLAVORS)
@pytest.mark.parametrize("causality", [False, True])
def test_layer_contract(flavor, causality):
    x = make_inputs()
    num_weights = 8  # paper: 4 Dense x (kernel, bias); reference: 3 Dense + LN
    run_layer_test(
        tfattn.MultiHeadAttention,
        dict(
            num_heads=H,
            flavor=flavor,
            causality=causality,
            dropout_rate=0.1,
            seed=3,
        ),
        x,
        expected_output_shape=(B, T, C),
        expected_num_trainable_weights=num_weights,
    )


def test_cross_attention_contract_with_values():
    q, kv = make_inputs(0, length=3), make_inputs(1, length=6)
    run_layer_test(
        tfattn.MultiHeadAttention,
        dict(num_heads=H, flavor="reference_2019"),
        [q, kv, kv],
        expected_output_shape=(B, 3, C),
    )


@pytest.mark.slow
def test_keras_file_round_trip():
    """The layer contract's `.keras` save and reload, once per configuration
    of the contract tests above (run_layer_test skips it)."""
    for flavor in FLAVORS:
        for causality in (False, True):
            assert_keras_file_round_trip(
                tfattn.MultiHeadAttention,
                dict(
                    num_heads=H,
                    flavor=flavor,
                    causality=causality,
                    dropout_rate=0.1,
                    seed=3,
                ),
                make_inputs(),
            )
    q, kv = make_inputs(0, length=3), make_inputs(1, length=6)
    assert_keras_file_round_trip(
        tfattn.MultiHeadAttention,
        dict(num_heads=H, flavor="reference_2019"),
        [q, kv, kv],
    )


def test_public_sublayers_have_documented_shapes():
    x = make_inputs()
    paper = built_layer("paper", x, num_units=8)
    assert paper.query_dense.kernel.shape == (C, 8)
    assert paper.output_dense.kernel.shape == (8, 8)
    assert not hasattr(paper, "layer_norm")
    ref17 = built_layer("reference_2017", x)
    assert ref17.layer_norm.epsilon == 1e-8
    assert not hasattr(ref17, "output_dense")
    assert ref17.query_dense.activation is keras.activations.relu


@pytest.mark.parametrize("flavor", FLAVORS)
def test_dropout_acts_only_when_training(flavor):
    x = make_inputs(zero_rows=False)
    layer = built_layer(flavor, x, dropout_rate=0.5, seed=7)
    quiet = tfattn.MultiHeadAttention(num_heads=H, flavor=flavor)
    quiet(x)
    quiet.set_weights(layer.get_weights())
    terms = mha_terms(layer, x, x)
    bounds.assert_close(layer(x, training=False), quiet(x), terms=terms)
    bounds.assert_close(layer(x), quiet(x), terms=terms)
    assert (
        np.abs(np.asarray(layer(x, training=True)) - np.asarray(quiet(x))).max()
        > 1e-3
    )


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
@pytest.mark.parametrize("flavor", FLAVORS)
def test_mixed_precision_stays_finite_with_fully_masked_rows(policy, flavor):
    x = make_inputs(zero_rows=False) * 30.0
    keys = x.copy()
    kwargs = {}
    attend = np.ones((B, T, T), bool)
    attend[0, 1, :] = False  # one query sees no key at all
    if flavor == "reference_2017":
        keys[0] = 0.0  # every key of batch 0 is padding
    elif flavor == "reference_2019":
        kwargs["key_masks"] = np.ones((B, T), bool)
    else:
        kwargs["attention_mask"] = attend
    layer = tfattn.MultiHeadAttention(num_heads=H, flavor=flavor, dtype=policy)
    out, weights = layer(x, keys, return_attention_scores=True, **kwargs)
    assert out.dtype == policy.split("_")[1]
    assert np.all(np.isfinite(np.asarray(out, dtype="float32")))
    assert np.all(np.isfinite(np.asarray(weights)))


@pytest.mark.parametrize("flavor", FLAVORS)
def test_jit_compile_equals_eager(flavor):
    x = make_inputs()
    layer = built_layer(flavor, x, causality=True)
    compiled = tf.function(lambda a: layer(a), jit_compile=True)
    bounds.assert_close(compiled(x), layer(x), terms=mha_terms(layer, x, x))



@pytest.mark.parametrize("flavor", FLAVORS)
def test_query_chunking_keeps_the_outputs(flavor):
    """Chunks of 2 queries against all at once: the same sums, but oneDNN
    picks its kernel (and so its summation order) by the matmul's shape and
    the CPU. Equal on the AVX-512 EPYC; 4.8e-7 apart (2 ulp of the largest
    output) with oneDNN limited to AVX2. The bound: the chunks' matmuls
    (projections, scores, weighted sums) have other shapes, so every sum
    on the chain may round in another order: `mha_terms`."""
    x = make_inputs()
    layer = built_layer(flavor, x, causality=True, query_chunk_size=2)
    plain = tfattn.MultiHeadAttention(
        num_heads=H, flavor=flavor, causality=True, query_chunk_size=None
    )
    plain(x)
    plain.set_weights(layer.get_weights())
    expected = plain(x).numpy()
    bounds.assert_close(layer(x), expected, terms=mha_terms(layer, x, x))
