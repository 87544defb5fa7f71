"""Tests of tfattn.MultiHeadAttention's incremental-decoding cache, in every
flavour: cached steps against the full causal pass, a precomputed
cross-attention cache against the uncached call, and the cache's errors."""

import numpy as np
import pytest
import tensorflow as tf

import tfattn
from tests import bounds
from tests.mha_helpers import B
from tests.mha_helpers import T
from tests.mha_helpers import built_layer
from tests.mha_helpers import make_inputs
from tests.mha_helpers import mha_terms
from tfattn.layers.attention_flavors import FLAVORS


@pytest.mark.parametrize("flavor", FLAVORS)
def test_cached_steps_equal_the_full_causal_pass(flavor):
    x = make_inputs()  # zero rows exercise the 2017 masks through the cache
    layer = built_layer(flavor, x, causality=True)
    full = np.asarray(layer(x))
    step = tf.function(
        lambda q, c, i: layer(q, cache=c, cache_index=i), jit_compile=True
    )
    cache = layer.init_cache(
        B, T + 2
    )  # longer than needed: unused slots masked
    # Each step sums over the cache's T + 2 slots.
    terms = mha_terms(layer, x, x, key_length=T + 2)
    for t in range(T):
        out, cache = step(x[:, t : t + 1], cache, tf.constant(t))
        bounds.assert_close(out[:, 0], full[:, t], terms=terms)
    assert step.experimental_get_tracing_count() == 1


@pytest.mark.parametrize("flavor", FLAVORS)
def test_precomputed_cross_cache_equals_uncached(flavor):
    x, memory = make_inputs(zero_rows=False), make_inputs(1, length=7)
    keep = np.ones((B, 7), bool)
    keep[1, -2:] = False
    layer = built_layer(flavor, x)
    want = layer(x, memory, padding_mask=keep)
    cache = layer.precompute_cache(memory, padding_mask=keep)
    got, same = layer(x, cache=cache)
    bounds.assert_close(got, want, terms=mha_terms(layer, x, memory))
    for name in cache:  # returned unchanged
        np.testing.assert_array_equal(same[name], cache[name])


def test_cache_errors_name_the_argument():
    x = make_inputs()
    layer = built_layer("paper", x, causality=True)
    with pytest.raises(
        ValueError, match=r"argument `cache`.*'key', 'value', 'keep'"
    ):
        layer(x, cache={"key": 1}, cache_index=0)
    other = tfattn.MultiHeadAttention(num_heads=4, causality=True)
    other(x)
    with pytest.raises(
        ValueError,
        match=r"argument `cache`.*another model size.*key shape \(2, 4, 3, 2\)",
    ):
        layer(x[:, :1], cache=other.init_cache(B, 3), cache_index=0)
    plain = built_layer("paper", x)
    with pytest.raises(
        ValueError, match=r"argument `cache_index`.*causality=False"
    ):
        plain(x[:, :1], cache=plain.init_cache(B, 3), cache_index=0)
    with pytest.raises(
        ValueError, match=r"argument `padding_mask`.*\[B, T_k\].*shape \(2, 4\)"
    ):
        layer(x, padding_mask=np.ones((B, 4), bool))
