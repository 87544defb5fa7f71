"""Tests of tfattn.MultiHeadAttention against independent references.

References: tests/reference_numpy.py (NumPy written from docs/reference.md, not
from the layer) for the reference flavours, and keras.layers.MultiHeadAttention
with copied weights for the paper flavour.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras.src import backend as keras_backend

import tfattn
from tests import reference_numpy as ref
from tests.harness import FLOAT32_EPS
from tests.harness import assert_same_attention
from tests.harness import copy_to_keras_attention
from tests.harness import random_keras_attention
from tests.harness import load_keras_attention_weights as _load_keras_weights
from tests.harness import run_layer_test
from tests.harness import assert_keras_file_round_trip
from tests.harness import randomize_weights as _randomize
from tests.harness import attention_params as _params

B, T, C, H = 2, 5, 8, 2
FLAVORS = ["paper", "reference_2017", "reference_2019"]


def _inputs(seed=0, batch=B, length=T, width=C, zero_rows=True):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(batch, length, width)).astype("float32")
    if zero_rows:
        x[0, -2:] = 0.0  # zero-padded rows, as the 2017 reference expects
    return x


def _built(flavor, x, **kwargs):
    layer = tfattn.MultiHeadAttention(num_heads=H, flavor=flavor, **kwargs)
    layer(x)
    _randomize(layer)
    return layer


# --------------------------------------------------------------------------
# Layer contract: config, serialization, symbolic/eager, fit, .keras reload.


@pytest.mark.parametrize("flavor", FLAVORS)
@pytest.mark.parametrize("causality", [False, True])
def test_layer_contract(flavor, causality):
    x = _inputs()
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
    q, kv = _inputs(0, length=3), _inputs(1, length=6)
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
                _inputs(),
            )
    q, kv = _inputs(0, length=3), _inputs(1, length=6)
    assert_keras_file_round_trip(
        tfattn.MultiHeadAttention,
        dict(num_heads=H, flavor="reference_2019"),
        [q, kv, kv],
    )


def test_public_sublayers_have_documented_shapes():
    x = _inputs()
    paper = _built("paper", x, num_units=8)
    assert paper.query_dense.kernel.shape == (C, 8)
    assert paper.output_dense.kernel.shape == (8, 8)
    assert not hasattr(paper, "layer_norm")
    ref17 = _built("reference_2017", x)
    assert ref17.layer_norm.epsilon == 1e-8
    assert not hasattr(ref17, "output_dense")
    assert ref17.query_dense.activation is keras.activations.relu


# --------------------------------------------------------------------------
# Numerical equality with the references.


@pytest.mark.parametrize("causality", [False, True])
@pytest.mark.cpu_sensitive
def test_reference_2017_matches_numpy(causality):
    x = _inputs(0)
    memory = _inputs(1, length=7)
    memory[1, -3:] = 0.0
    for queries, keys in ((x, x), (x, memory)):
        layer = _built("reference_2017", queries, causality=causality)
        layer(queries, keys)
        out, weights = layer(queries, keys, return_attention_scores=True)
        want_out, want_w = ref.mha_reference_2017(
            queries, keys, _params(layer), H, causality=causality
        )
        np.testing.assert_allclose(out, want_out, atol=1e-5, rtol=0)
        np.testing.assert_allclose(weights, want_w, atol=1e-6, rtol=0)


@pytest.mark.parametrize("causality", [False, True])
@pytest.mark.cpu_sensitive
def test_reference_2019_matches_numpy(causality):
    x = _inputs(0, zero_rows=False)
    memory = _inputs(1, length=7, zero_rows=False)
    key_masks = np.zeros((B, 7), bool)
    key_masks[0, -3:] = True
    self_masks = np.zeros((B, T), bool)
    self_masks[1, -2:] = True
    for queries, keys, masks in ((x, x, self_masks), (x, memory, key_masks)):
        values = keys * 0.5 + 1.0
        layer = _built("reference_2019", queries, causality=causality)
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
        np.testing.assert_allclose(out, want_out, atol=1e-5, rtol=0)
        np.testing.assert_allclose(weights, want_w, atol=1e-6, rtol=0)


@pytest.mark.cpu_sensitive
def test_paper_matches_numpy_with_explicit_mask():
    x, memory = (
        _inputs(0, zero_rows=False),
        _inputs(1, length=7, zero_rows=False),
    )
    attend = np.random.default_rng(2).random((B, T, 7)) > 0.3
    attend[:, :, 0] = True
    layer = _built("paper", x)
    out, weights = layer(
        x, memory, attention_mask=attend, return_attention_scores=True
    )
    want_out, want_w = ref.mha_paper(
        x, memory, memory, _params(layer), H, attend_mask=attend
    )
    np.testing.assert_allclose(out, want_out, atol=1e-5, rtol=0)
    np.testing.assert_allclose(weights, want_w, atol=1e-6, rtol=0)


def _keras_twin(layer):
    """keras.layers.MultiHeadAttention holding `layer`'s paper weights."""
    d = layer.units // layer.num_heads
    twin = keras.layers.MultiHeadAttention(num_heads=layer.num_heads, key_dim=d)
    x = np.zeros((1, 1, layer.query_dense.kernel.shape[0]), "float32")
    twin(x, x)
    copy_to_keras_attention(twin, layer)
    return twin


@pytest.mark.cpu_sensitive
def test_paper_matches_keras_padding_mask():
    ids = np.array([[3, 4, 5, 0, 0], [6, 7, 8, 9, 2]])
    embed = keras.layers.Embedding(12, C, mask_zero=True)
    ours = _built("paper", _inputs())
    theirs = _keras_twin(ours)
    inp = keras.Input((T,), dtype="int32")
    # Two models: keras' layer clears the implicit masks of its inputs.
    got = keras.Model(inp, ours(embed(inp), embed(inp)))(ids)
    want = keras.Model(inp, theirs(embed(inp), embed(inp)))(ids)
    # Keras 3.15's fused path (no scores, no dropout) gives a padded query,
    # which sees no key, uniform weights; its scores path gives it zero
    # weights, as tfattn does (the padded positions are checked below).
    np.testing.assert_allclose(
        np.asarray(got)[0, :3], np.asarray(want)[0, :3], atol=1e-5, rtol=0
    )
    np.testing.assert_allclose(
        np.asarray(got)[1], np.asarray(want)[1], atol=1e-5, rtol=0
    )
    scored = keras.Model(
        inp, theirs(embed(inp), embed(inp), return_attention_scores=True)[0]
    )(ids)
    np.testing.assert_allclose(got, scored, atol=1e-5, rtol=0)
    bias = ours.output_dense.bias.numpy()
    np.testing.assert_allclose(
        np.asarray(got)[0, 3:], np.stack([bias, bias]), atol=1e-6
    )
    # The padding mask must matter: without it the output differs.
    plain = tf.identity(embed(ids))  # the same values without the mask
    unmasked = ours(plain, plain)
    assert (
        np.abs(np.asarray(unmasked)[0, :3] - np.asarray(got)[0, :3]).max()
        > 1e-4
    )


@pytest.mark.cpu_sensitive
def test_paper_matches_keras_causal_and_explicit_masks():
    x, memory = _inputs(0, zero_rows=False), _inputs(1, zero_rows=False)
    ours = _built("paper", x, causality=True)
    theirs = _keras_twin(ours)
    np.testing.assert_allclose(
        ours(x), theirs(x, x, use_causal_mask=True), atol=1e-5, rtol=0
    )
    plain = _built("paper", x)
    plain_twin = _keras_twin(plain)
    attend = np.random.default_rng(3).random((B, T, T)) > 0.4
    attend[:, :, 1] = True
    np.testing.assert_allclose(
        plain(x, memory, attention_mask=attend),
        plain_twin(x, memory, attention_mask=attend),
        atol=1e-5,
        rtol=0,
    )


# --------------------------------------------------------------------------
# Facts of docs/reference.md §5.


def test_mask_constant_is_the_reference_float32_value():
    p = np.float32(tfattn.ops.REFERENCE_MASK_VALUE)
    assert p == np.float32(-4294967296.0)
    # The float32 spacing is 512 below P and 256 above it, so scores in
    # (-256, 128] vanish into P (docs/reference.md §5 says |s| < 256; 129..255
    # actually round to P + 256).
    assert np.float32(p + np.float32(128.0)) == p
    assert np.float32(p - np.float32(255.0)) == p


def test_head_layout_head_i_owns_its_channels():
    x = _inputs(zero_rows=False)
    layer = _built("reference_2019", x)
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


@pytest.mark.cpu_sensitive
def test_scale_is_one_over_sqrt_head_width():
    x = _inputs(zero_rows=False)
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
    np.testing.assert_allclose(weights[:, 0], want, atol=1e-6)


def test_reference_2017_zero_rows():
    x = _inputs()  # x[0, -2:] is zero
    layer = _built("reference_2017", x)
    out, weights = layer(x, return_attention_scores=True)
    weights = np.asarray(weights)
    # Zero key rows get exactly zero weight from every (real) query.
    assert np.all(weights[0, :, :-2, -2:] == 0.0)
    # Zero query rows: attention output 0, so the layer output is beta.
    beta = layer.layer_norm.beta.numpy()
    np.testing.assert_allclose(
        np.asarray(out)[0, -2:], np.stack([beta, beta]), atol=1e-6
    )
    # A query whose keys are all masked gets uniform weights 1/T_k.
    keys = np.zeros((B, 4, C), "float32")
    _, weights = layer(x, keys, return_attention_scores=True)
    real_rows = np.asarray(weights)[1]
    np.testing.assert_allclose(
        real_rows, np.full_like(real_rows, 0.25), atol=1e-7
    )


@pytest.mark.parametrize("flavor", FLAVORS)
def test_causality_future_inputs_do_not_leak(flavor):
    x = _inputs(zero_rows=False)
    layer = _built(flavor, x, causality=True)
    base = np.asarray(layer(x))
    for t in range(T - 1):
        changed = x.copy()
        changed[:, t + 1 :] += 5.0
        out = np.asarray(layer(changed))
        np.testing.assert_allclose(out[:, : t + 1], base[:, : t + 1], atol=1e-6)
        assert np.abs(out[:, t + 1 :] - base[:, t + 1 :]).max() > 1e-3


@pytest.mark.parametrize("flavor", FLAVORS)
def test_dropout_acts_only_when_training(flavor):
    x = _inputs(zero_rows=False)
    layer = _built(flavor, x, dropout_rate=0.5, seed=7)
    quiet = tfattn.MultiHeadAttention(num_heads=H, flavor=flavor)
    quiet(x)
    quiet.set_weights(layer.get_weights())
    np.testing.assert_allclose(layer(x, training=False), quiet(x), atol=1e-6)
    np.testing.assert_allclose(layer(x), quiet(x), atol=1e-6)
    assert (
        np.abs(np.asarray(layer(x, training=True)) - np.asarray(quiet(x))).max()
        > 1e-3
    )


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
@pytest.mark.parametrize("flavor", FLAVORS)
@pytest.mark.cpu_sensitive
def test_mixed_precision_stays_finite_with_fully_masked_rows(policy, flavor):
    x = _inputs(zero_rows=False) * 30.0
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
@pytest.mark.cpu_sensitive
def test_jit_compile_equals_eager(flavor):
    x = _inputs()
    layer = _built(flavor, x, causality=True)
    compiled = tf.function(lambda a: layer(a), jit_compile=True)
    np.testing.assert_allclose(compiled(x), layer(x), atol=1e-5)


# --------------------------------------------------------------------------
# Bad input: every error names the argument and echoes the value.


@pytest.mark.parametrize(
    "kwargs, pattern",
    [
        (
            dict(num_units=10, num_heads=4),
            r"argument `num_units`.*multiple of num_heads=4.*num_units=10",
        ),
        (dict(num_heads=0), r"argument `num_heads`.*num_heads=0"),
        (dict(num_heads=2.5), r"argument `num_heads`.*num_heads=2.5"),
        (
            dict(dropout_rate=1.0),
            r"argument `dropout_rate`.*\[0, 1\).*dropout_rate=1.0",
        ),
        (
            dict(dropout_rate=-0.1),
            r"argument `dropout_rate`.*dropout_rate=-0.1",
        ),
        (dict(flavor="2017"), r"argument `flavor`.*'paper'.*flavor='2017'"),
        (dict(causality="yes"), r"argument `causality`.*causality='yes'"),
    ],
)
def test_constructor_rejects_bad_arguments(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        tfattn.MultiHeadAttention(**kwargs)


def test_num_units_not_dividing_queries_width():
    layer = tfattn.MultiHeadAttention(num_heads=3)
    with pytest.raises(
        ValueError, match=r"`num_units`.*multiple of num_heads=3.*num_units=8"
    ):
        layer(_inputs())


@pytest.mark.parametrize("flavor", ["reference_2017", "reference_2019"])
def test_reference_flavours_need_num_units_equal_to_queries_width(flavor):
    layer = tfattn.MultiHeadAttention(num_units=4, num_heads=2, flavor=flavor)
    with pytest.raises(
        ValueError, match=r"`num_units`.*queries' width 8.*num_units=4"
    ):
        layer(_inputs())


@pytest.mark.parametrize(
    "args, kwargs, pattern",
    [
        (
            (np.zeros((B, C), "float32"),),
            {},
            r"`queries`.*rank-3.*shape \(2, 8\)",
        ),
        (
            (_inputs(), np.zeros((B, T, C, 1), "float32")),
            {},
            r"`keys`.*rank-3.*\(2, 5, 8, 1\)",
        ),
        (
            (_inputs(), _inputs(batch=3)),
            {},
            r"`keys`.*same batch size as `queries` \(2\).*\(3, 5, 8\)",
        ),
        (
            (_inputs(), _inputs(), _inputs(length=4)),
            {},
            r"`values` and `keys`, except the last one, must be "
            r"equal.*values_shape=\(2, 4, 8\) and keys_shape=\(2, 5, 8\)",
        ),
        (
            (_inputs(),),
            dict(key_masks=np.zeros((B, T), bool)),
            r"`key_masks`.*outside flavor 'reference_2019'",
        ),
        (
            (_inputs(),),
            dict(attention_mask=np.ones((B, T, T), "float32")),
            r"`attention_mask`.*bool.*dtype float32",
        ),
        (
            (_inputs(),),
            dict(attention_mask=np.ones((B, T), bool)),
            r"`attention_mask`.*\[T_q, T_k\].*\(2, 2, 5, 5\).*shape \(2, 5\)",
        ),
    ],
)
def test_call_rejects_bad_inputs(args, kwargs, pattern):
    layer = tfattn.MultiHeadAttention(num_heads=H)
    with pytest.raises(ValueError, match=pattern):
        layer(*args, **kwargs)


@pytest.mark.parametrize(
    "kwargs, pattern",
    [
        (
            dict(key_masks=np.zeros((B, T + 1), bool)),
            r"`key_masks`.*\[B, T_k\].*shape \(2, 6\)",
        ),
        (
            dict(key_masks=np.zeros((B, T), "int32")),
            r"`key_masks`.*bool.*dtype int32",
        ),
    ],
)
def test_reference_2019_rejects_bad_key_masks(kwargs, pattern):
    layer = tfattn.MultiHeadAttention(num_heads=H, flavor="reference_2019")
    with pytest.raises(ValueError, match=pattern):
        layer(_inputs(), **kwargs)


def test_reference_2017_rejects_values():
    layer = tfattn.MultiHeadAttention(num_heads=H, flavor="reference_2017")
    with pytest.raises(
        ValueError, match=r"`values`.*None in flavor 'reference_2017'"
    ):
        layer(_inputs(), _inputs(), _inputs())


# --------------------------------------------------------------------------
# padding_mask and the incremental-decoding cache.


@pytest.mark.parametrize("flavor", FLAVORS)
def test_padding_mask_equals_the_same_attention_mask(flavor):
    x, memory = _inputs(zero_rows=False), _inputs(1, length=7, zero_rows=False)
    keep = np.ones((B, 7), bool)
    keep[0, -3:] = False
    layer = _built(flavor, x)
    via_padding = layer(x, memory, padding_mask=keep)
    via_attention = layer(
        x, memory, attention_mask=np.broadcast_to(keep[:, None, :], (B, T, 7))
    )
    np.testing.assert_allclose(via_padding, via_attention, atol=1e-5)


@pytest.mark.parametrize("flavor", FLAVORS)
@pytest.mark.cpu_sensitive
def test_cached_steps_equal_the_full_causal_pass(flavor):
    x = _inputs()  # zero rows exercise the 2017 masks through the cache
    layer = _built(flavor, x, causality=True)
    full = np.asarray(layer(x))
    step = tf.function(
        lambda q, c, i: layer(q, cache=c, cache_index=i), jit_compile=True
    )
    cache = layer.init_cache(
        B, T + 2
    )  # longer than needed: unused slots masked
    for t in range(T):
        out, cache = step(x[:, t : t + 1], cache, tf.constant(t))
        np.testing.assert_allclose(out[:, 0], full[:, t], atol=1e-5)
    assert step.experimental_get_tracing_count() == 1


@pytest.mark.parametrize("flavor", FLAVORS)
@pytest.mark.cpu_sensitive
def test_precomputed_cross_cache_equals_uncached(flavor):
    x, memory = _inputs(zero_rows=False), _inputs(1, length=7)
    keep = np.ones((B, 7), bool)
    keep[1, -2:] = False
    layer = _built(flavor, x)
    want = layer(x, memory, padding_mask=keep)
    cache = layer.precompute_cache(memory, padding_mask=keep)
    got, same = layer(x, cache=cache)
    np.testing.assert_allclose(got, want, atol=1e-5)
    for name in cache:  # returned unchanged
        np.testing.assert_array_equal(same[name], cache[name])


def test_cache_errors_name_the_argument():
    x = _inputs()
    layer = _built("paper", x, causality=True)
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
    plain = _built("paper", x)
    with pytest.raises(
        ValueError, match=r"argument `cache_index`.*causality=False"
    ):
        plain(x[:, :1], cache=plain.init_cache(B, 3), cache_index=0)
    with pytest.raises(
        ValueError, match=r"argument `padding_mask`.*\[B, T_k\].*shape \(2, 4\)"
    ):
        layer(x, padding_mask=np.ones((B, 4), bool))


@pytest.mark.parametrize("flavor", FLAVORS)
@pytest.mark.cpu_sensitive
def test_query_chunking_keeps_the_outputs(flavor):
    """Chunks of 2 queries against all at once: the same sums, but oneDNN
    picks its kernel (and so its summation order) by the matmul's shape and
    the CPU. Equal on the AVX-512 EPYC; 4.8e-7 apart (2 ulp of the largest
    output) with oneDNN limited to AVX2. The bound: each output sums T_k
    weighted values and then C projected entries, so two orders differ by
    about (T + C) float32 roundings of the output's size."""
    x = _inputs()
    layer = _built(flavor, x, causality=True, query_chunk_size=2)
    plain = tfattn.MultiHeadAttention(
        num_heads=H, flavor=flavor, causality=True, query_chunk_size=None
    )
    plain(x)
    plain.set_weights(layer.get_weights())
    expected = plain(x).numpy()
    atol = (T + C) * FLOAT32_EPS * np.abs(expected).max()
    np.testing.assert_allclose(layer(x), expected, atol=atol, rtol=0)


def test_query_chunk_size_is_checked():
    with pytest.raises(
        ValueError, match=r"argument `query_chunk_size`.*query_chunk_size=0"
    ):
        tfattn.MultiHeadAttention(query_chunk_size=0)


# --------------------------------------------------------------------------
# Issue 14: fully masked queries and Keras's mask shapes.


@pytest.mark.parametrize(
    "policy", ["float32", "mixed_float16", "mixed_bfloat16"]
)
@pytest.mark.parametrize("chunk", [None, 2])
@pytest.mark.cpu_sensitive
def test_paper_fully_masked_query_gets_zero_weights_as_keras(policy, chunk):
    """A query row of `attention_mask` that is all False: all-zero weights,
    so the output is the output projection's bias, as Keras 3.15 gives with
    `return_attention_scores=True` (its layer with the same weights, in
    float32); the reference flavours keep uniform weights (spec §5)."""
    x, memory = _inputs(0, zero_rows=False), _inputs(1, zero_rows=False)
    attend = np.random.default_rng(5).random((B, T, T)) > 0.4
    attend[:, :, 0] = True
    attend[1, 2, :] = False  # query 2 of row 1 sees nothing
    ours = _built("paper", x, query_chunk_size=chunk)
    # Keras's scores path zeroes such rows (its fused path, without scores,
    # gives them uniform weights: Keras 3.15 is not consistent there).
    want = np.asarray(
        _keras_twin(ours)(
            x, memory, attention_mask=attend, return_attention_scores=True
        )[0]
    )
    bias = ours.output_dense.bias.numpy()
    np.testing.assert_allclose(want[1, 2], bias, atol=1e-6)
    try:
        keras.config.set_dtype_policy(policy)
        low = tfattn.MultiHeadAttention(num_heads=H, query_chunk_size=chunk)
        low(x, memory)
        for a, b in zip(low.weights, ours.weights):
            a.assign(b)
    finally:
        keras.config.set_dtype_policy("float32")
    got, weights = low(
        x, memory, attention_mask=attend, return_attention_scores=True
    )
    weights = np.asarray(weights)
    assert np.all(weights[1, :, 2] == 0.0)
    assert np.all(np.isfinite(np.asarray(got, "float32")))
    tol = 1e-5 if policy == "float32" else 5e-2
    np.testing.assert_allclose(
        np.asarray(got, "float32"), want, atol=tol, rtol=tol
    )
    for flavor in ("reference_2017", "reference_2019"):
        ref = _built(flavor, x, query_chunk_size=chunk)
        _, w = ref(x, attention_mask=attend, return_attention_scores=True)
        np.testing.assert_allclose(np.asarray(w)[1, :, 2], 1.0 / T, atol=1e-7)


def _with_keras_mask(x, keep):
    """A fresh tensor of `x` carrying `keep` as its Keras implicit mask
    (Keras's layer clears the masks of the tensors it is given)."""
    tensor = tf.identity(x)
    keras_backend.set_keras_mask(tensor, tf.constant(keep))
    return tensor


def _keras_and_ours(query, value, rng, **kwargs):
    """A random Keras MultiHeadAttention and a paper-flavour tfattn layer
    holding its weights."""
    theirs = random_keras_attention(
        query, value, rng, num_heads=H, key_dim=C // H, **kwargs
    )
    ours = tfattn.MultiHeadAttention(num_heads=H, key_dim=C // H)
    ours(query, value)
    _load_keras_weights(ours, theirs)
    return theirs, ours


def _keras_uniform_output(theirs, value):
    """NumPy, from Keras's formulas: the output of a query that weighs all
    T_k keys 1/T_k, the output projection of the mean projected value."""
    wv, bv = (
        theirs._value_dense.kernel.numpy(),
        theirs._value_dense.bias.numpy(),
    )
    wo, bo = (
        theirs._output_dense.kernel.numpy(),
        theirs._output_dense.bias.numpy(),
    )
    values = np.einsum("bsc,chd->bshd", value, wv) + bv  # [B, T_k, H, d]
    return np.einsum("bhd,hdo->bo", values.mean(axis=1), wo) + bo  # [B, O]


@pytest.mark.parametrize("cross", [False, True])
@pytest.mark.parametrize("masks", ["implicit", "attention_mask"])
@pytest.mark.cpu_sensitive
def test_paper_matches_keras_default_call_at_valid_positions(cross, masks):
    """Keras's default call (no scores asked, no dropout: its fused
    `ops.dot_product_attention` path), with padded queries and keys as
    Keras implicit masks or as the equivalent `attention_mask`: tfattn's
    outputs equal it at every valid query position. At the padded queries
    Keras's fused path gives uniform weights and tfattn the bias (the
    next test), which shows this is the path compared."""
    rng = np.random.default_rng(11)
    length = T + 2 if cross else T
    query = rng.normal(size=(B, T, C)).astype("float32")
    value = (
        rng.normal(size=(B, length, C)).astype("float32") if cross else query
    )
    query_keep = np.ones((B, T), bool)
    query_keep[0, 3:] = False
    key_keep = np.ones((B, length), bool)
    if cross:
        key_keep[0, -3:] = False
        key_keep[1, -1:] = False
    else:
        key_keep = query_keep
    theirs, ours = _keras_and_ours(query, value, rng)
    if masks == "implicit":
        want = theirs(
            _with_keras_mask(query, query_keep),
            _with_keras_mask(value, key_keep),
        )
        got = ours(
            _with_keras_mask(query, query_keep),
            _with_keras_mask(value, key_keep),
        )
    else:
        attend = query_keep[:, :, None] & key_keep[:, None, :]
        want = theirs(query, value, attention_mask=attend)
        got = ours(query, value, attention_mask=attend)
    got, want = np.asarray(got), np.asarray(want)
    np.testing.assert_allclose(
        got[query_keep], want[query_keep], atol=1e-5, rtol=0
    )
    # Keras took its fused path: the padded queries are not the bias there.
    bias = theirs._output_dense.bias.numpy()
    assert np.abs(want[~query_keep] - bias).max() > 1e-3
    np.testing.assert_allclose(
        got[~query_keep],
        np.broadcast_to(bias, got[~query_keep].shape),
        atol=1e-6,
    )
    # The key masks must matter at the valid positions.
    unmasked = np.asarray(ours(query, value))
    assert np.abs(unmasked[query_keep] - got[query_keep]).max() > 1e-3


@pytest.mark.parametrize("masks", ["implicit", "attention_mask"])
def test_fully_masked_query_keras_default_uniform_tfattn_bias(masks):
    """Where tfattn is not equal to Keras's default call: a query whose keys
    are all masked (a padded query under implicit masks, or an all-False
    row of `attention_mask`). Keras 3.15's fused default path gives it
    uniform weights 1/T_k over all T_k keys (output: the projected mean
    value, checked against NumPy); its explicit path (scores asked, or
    dropout > 0) and tfattn, always, give it zero weights (output: the
    output projection's bias)."""
    rng = np.random.default_rng(12)
    length = T + 1
    query = rng.normal(size=(B, T, C)).astype("float32")
    value = rng.normal(size=(B, length, C)).astype("float32")
    theirs, ours = _keras_and_ours(query, value, rng)
    dropped = random_keras_attention(
        query, value, rng, num_heads=H, key_dim=C // H, dropout=0.5
    )
    dropped.set_weights(theirs.get_weights())
    query_keep = np.ones((B, T), bool)
    query_keep[1, 2] = False  # query 2 of row 1: padding, or sees no key
    attend = rng.random((B, T, length)) > 0.3
    attend[..., 0] = True
    attend[1, 2] = False

    def call(layer, **kwargs):
        if masks == "implicit":
            return layer(_with_keras_mask(query, query_keep), value, **kwargs)
        return layer(query, value, attention_mask=attend, **kwargs)

    bias = theirs._output_dense.bias.numpy()
    default = np.asarray(call(theirs))
    np.testing.assert_allclose(
        default[1, 2],
        _keras_uniform_output(theirs, value)[1],
        atol=1e-5,
        rtol=0,
    )
    assert np.abs(default[1, 2] - bias).max() > 1e-3
    scored, scores = call(theirs, return_attention_scores=True)
    np.testing.assert_allclose(np.asarray(scored)[1, 2], bias, atol=1e-6)
    assert np.all(np.asarray(scores)[1, :, 2] == 0.0)
    np.testing.assert_allclose(
        np.asarray(call(dropped, training=False))[1, 2], bias, atol=1e-6
    )
    got, weights = call(ours, return_attention_scores=True)
    got = np.asarray(got)
    np.testing.assert_allclose(got[1, 2], bias, atol=1e-6)
    assert np.all(np.asarray(weights)[1, :, 2] == 0.0)
    np.testing.assert_allclose(got, np.asarray(scored), atol=1e-5, rtol=0)
    np.testing.assert_allclose(
        got[query_keep], default[query_keep], atol=1e-5, rtol=0
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
@pytest.mark.cpu_sensitive
def test_attention_masks_broadcast_as_in_keras(shape):
    """Rank 2, 3 and 4 masks with 1 for the batch or head axis: the output
    equals the one of the mask expanded to [B, H, T_q, T_k] by NumPy, and
    Keras's layer with the same weights where its shapes allow."""
    x, memory = _inputs(0, zero_rows=False), _inputs(1, zero_rows=False)
    rng = np.random.default_rng(7)
    mask = rng.random(shape) > 0.4
    mask[..., 0] = True
    ours = _built("paper", x)
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
        want = _keras_twin(ours)(x, memory, attention_mask=keras_mask)
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "shape",
    [(B + 1, T, T), (T,), (B, H + 1, T, T), (T, T + 1), (1, 1, 1, T, T)],
)
def test_attention_mask_that_does_not_broadcast_names_both_shapes(shape):
    x = _inputs(0, zero_rows=False)
    layer = _built("paper", x)
    with pytest.raises(ValueError) as info:
        layer(x, attention_mask=np.ones(shape, bool))
    message = str(info.value)
    assert "`attention_mask`" in message and str(shape) in message
    assert f"({B}, {H}, {T}, {T})" in message


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(key_dim=4),
        dict(key_dim=4, value_dim=2, output_shape=6),
        dict(key_dim=3, value_dim=5, output_shape=(7,), use_bias=False),
        dict(
            key_dim=2, kernel_initializer="he_normal", bias_initializer="ones"
        ),
        dict(key_dim=2, output_shape=(3, 4)),  # Keras's multi-axis output
    ],
)
def test_paper_takes_keras_projection_arguments(kwargs):
    """key_dim / value_dim / output_shape / use_bias with Keras's meaning:
    Keras's layer with the same weights gives the same outputs and scores,
    with a query width (8) that num_heads=3 does not divide and values of
    another width (5); config and .keras round trips keep every argument."""
    rng = np.random.default_rng(11)
    query = rng.normal(size=(B, T, C)).astype("float32")
    value = rng.normal(size=(B, T + 2, 5)).astype("float32")
    mask = rng.random((B, T, T + 2)) > 0.3
    mask[1, 3] = False  # a query that sees nothing
    theirs = random_keras_attention(query, value, rng, num_heads=3, **kwargs)
    ours = tfattn.MultiHeadAttention(num_heads=3, **kwargs)
    ours(query, value)
    assert len(ours.weights) == len(theirs.weights)
    _load_keras_weights(ours, theirs)
    got, _ = assert_same_attention(
        theirs, ours, query, value, attention_mask=mask
    )
    assert ours.compute_output_shape(query.shape, value.shape) == got.shape
    config = ours.get_config()
    for name in ("key_dim", "value_dim", "use_bias"):
        if name in kwargs:
            assert config[name] == kwargs[name]
    clone = tfattn.MultiHeadAttention.from_config(config)
    clone(query, value)
    clone.set_weights(ours.get_weights())
    np.testing.assert_allclose(
        clone(query, value, attention_mask=mask), got, atol=1e-6
    )


def test_initializers_regularizers_and_constraints_reach_every_projection():
    x = _inputs(0, zero_rows=False)
    layer = tfattn.MultiHeadAttention(
        num_heads=H,
        kernel_initializer="ones",
        bias_initializer="ones",
        kernel_regularizer=keras.regularizers.L2(0.5),
        bias_regularizer="l1",
        kernel_constraint=keras.constraints.MaxNorm(0.5),
        bias_constraint="non_neg",
        activity_regularizer="l2",
    )
    layer(x)
    dense = [
        layer.query_dense,
        layer.key_dense,
        layer.value_dense,
        layer.output_dense,
    ]
    for d in dense:
        assert np.all(d.kernel.numpy() == 1) and np.all(d.bias.numpy() == 1)
        assert isinstance(d.kernel_constraint, keras.constraints.MaxNorm)
    weight_losses = [float(loss) for d in dense for loss in d.losses]
    want = [
        v
        for d in dense
        for v in (
            0.5 * np.sum(d.kernel.numpy() ** 2),
            0.01 * np.sum(np.abs(d.bias.numpy())),
        )
    ]
    np.testing.assert_allclose(sorted(weight_losses), sorted(want), rtol=1e-6)
    # The layer's own activity regulariser adds one more.
    assert len(layer.losses) == len(want) + 1
    clone = tfattn.MultiHeadAttention.from_config(layer.get_config())
    assert clone.get_config() == layer.get_config()
    assert isinstance(clone.kernel_constraint, keras.constraints.MaxNorm)


@pytest.mark.parametrize(
    "kwargs, pattern",
    [
        (dict(key_dim=0), r"`key_dim`.*positive integer.*key_dim=0"),
        (dict(key_dim=4, value_dim=-1), r"`value_dim`.*value_dim=-1"),
        (dict(value_dim=4), r"`value_dim`.*unless `key_dim`.*value_dim=4"),
        (
            dict(key_dim=4, num_units=6),
            r"`num_units`.*num_heads \* key_dim = 8",
        ),
        (dict(output_shape="wide"), r"`output_shape`.*output_shape='wide'"),
        (dict(output_shape=(4, 0)), r"`output_shape`.*output_shape=\(4, 0\)"),
        (dict(output_shape=()), r"`output_shape`.*output_shape=\(\)"),
        (dict(output_shape=0), r"`output_shape`.*output_shape=0"),
        (dict(use_bias="yes"), r"`use_bias`.*use_bias='yes'"),
        (dict(kernel_initializer="nope"), r"`kernel_initializer`.*'nope'"),
        (dict(bias_regularizer="nope"), r"`bias_regularizer`.*'nope'"),
        (
            dict(kernel_constraint=3),
            r"`kernel_constraint`.*kernel_constraint=3",
        ),
        (
            dict(flavor="reference_2019", key_dim=4),
            r"`key_dim`.*None in flavor 'reference_2019'",
        ),
        (
            dict(flavor="reference_2017", use_bias=False),
            r"`use_bias`.*True in flavor 'reference_2017'",
        ),
        (dict(flavor="reference_2019", output_shape=8), r"`output_shape`"),
    ],
)
def test_bad_projection_arguments(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        tfattn.MultiHeadAttention(num_heads=H, **kwargs)


def test_compute_output_shape_checks_shapes_as_keras():
    layer = tfattn.MultiHeadAttention(num_heads=H, key_dim=3, output_shape=6)
    assert layer.compute_output_shape((B, T, C), (B, 7, 5)) == (B, T, 6)
    with pytest.raises(
        ValueError,
        match="`values` and `keys`, except the last one, must be equal",
    ):
        layer.compute_output_shape((B, T, C), (B, 7, 5), (B, 6, 5))
    with pytest.raises(ValueError, match="`keys`.*rank-3"):
        layer.compute_output_shape((B, T, C), (5,))


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(key_dim=4),
        dict(key_dim=3, value_dim=5, output_shape=7, use_bias=False),
        dict(key_dim=3, output_shape=[2, 3]),
    ],
)
@pytest.mark.cpu_sensitive
def test_from_keras_and_back(kwargs):
    """`interop.from_keras` gives a layer equal to Keras's (outputs and
    scores, a fully masked query included); `to_keras` gives back identical
    weights and arguments."""
    rng = np.random.default_rng(4)
    query = rng.normal(size=(B, T, C)).astype("float32")
    value = rng.normal(size=(B, T + 1, 5)).astype("float32")
    mask = rng.random((B, T, T + 1)) > 0.3
    mask[0, 1] = False
    theirs = random_keras_attention(query, value, rng, num_heads=3, **kwargs)
    ours = tfattn.interop.from_keras(theirs)
    assert_same_attention(theirs, ours, query, value, attention_mask=mask)
    back = tfattn.interop.to_keras(ours)
    assert [w.shape for w in back.weights] == [w.shape for w in theirs.weights]
    for a, b in zip(back.get_weights(), theirs.get_weights()):
        np.testing.assert_array_equal(a, b)
    mine, yours = back.get_config(), theirs.get_config()
    for name in (
        "num_heads",
        "key_dim",
        "value_dim",
        "use_bias",
        "output_shape",
        "kernel_initializer",
    ):
        assert mine[name] == yours[name], name


def test_porting_refuses_what_it_cannot_carry():
    x = _inputs(0, zero_rows=False)
    with pytest.raises(
        ValueError, match="`layer`.*keras.layers.MultiHeadAttention.*Dense"
    ):
        tfattn.interop.from_keras(keras.layers.Dense(3))
    with pytest.raises(ValueError, match="`layer`.*a built layer"):
        tfattn.interop.from_keras(
            keras.layers.MultiHeadAttention(num_heads=2, key_dim=2)
        )
    with pytest.raises(ValueError, match="flavor 'paper'.*'reference_2019'"):
        tfattn.interop.to_keras(_built("reference_2019", x))
    with pytest.raises(ValueError, match="a built layer"):
        tfattn.interop.to_keras(tfattn.MultiHeadAttention(num_heads=2))
    with pytest.raises(ValueError, match="a tfattn.MultiHeadAttention"):
        tfattn.interop.to_keras(keras.layers.MultiHeadAttention(2, 2))


@pytest.mark.parametrize(
    "initializer", ["glorot_uniform", keras.initializers.HeNormal()]
)
def test_each_projection_draws_its_own_kernel(initializer):
    """One initializer object shared by the four projections would give them
    one kernel (a Keras initializer with seed=None repeats its draw)."""
    x = _inputs(0, zero_rows=False)
    layer = tfattn.MultiHeadAttention(
        num_heads=H, kernel_initializer=initializer
    )
    layer(x)
    kernels = [
        d.kernel.numpy()
        for d in (
            layer.query_dense,
            layer.key_dense,
            layer.value_dense,
            layer.output_dense,
        )
    ]
    for i in range(4):
        for j in range(i):
            assert np.abs(kernels[i] - kernels[j]).max() > 1e-3, (i, j)


def test_keras_quantize_and_lora_come_through_the_dense_sublayers():
    """`model.quantize("int8")` on a model holding the layer quantizes its
    four projections (Keras quantizes the leaf Dense layers) and stays
    close to float; LoRA on a projection trains only its low-rank factors
    and starts as no change."""
    x = _inputs(0, zero_rows=False)
    layer = _built("paper", x)
    before = np.asarray(layer(x))
    inputs = keras.Input((T, C))
    model = keras.Model(inputs, layer(inputs))
    model.quantize("int8")
    for d in (
        layer.query_dense,
        layer.key_dense,
        layer.value_dense,
        layer.output_dense,
    ):
        assert d.quantization_mode == "int8"
    after = np.asarray(model(x))
    assert np.abs(after - before).max() < 0.05 * np.abs(before).max()
    assert np.abs(after - before).max() > 0  # int8 kernels, not float

    lora = _built("paper", x)
    plain = np.asarray(lora(x))
    lora.query_dense.enable_lora(2)
    np.testing.assert_allclose(lora(x), plain, atol=1e-6)  # B starts at 0
    trainable = {
        v.path.split("/")[-1] for v in lora.query_dense.trainable_weights
    }
    assert trainable == {"lora_kernel_a", "lora_kernel_b", "bias"}


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("window", [1, 2, 4])
@pytest.mark.cpu_sensitive
def test_sliding_window_as_keras(window, causal):
    """Keras's `sliding_window`: equal to Keras's layer with the same weights
    (alone and with a causal mask); the weights outside the band are 0; the
    cached one-step path gives the full pass's outputs (the band follows
    `cache_index`)."""
    x = _inputs(0, zero_rows=False)
    ours = tfattn.MultiHeadAttention(
        num_heads=H, sliding_window=window, causality=causal
    )
    ours(x, x)
    _randomize(ours)
    theirs = keras.layers.MultiHeadAttention(
        num_heads=H, key_dim=C // H, sliding_window=window
    )
    theirs(x, x)
    copy_to_keras_attention(theirs, ours)
    got, weights = ours(x, x, return_attention_scores=True)
    want, want_weights = theirs(
        x, x, use_causal_mask=causal, return_attention_scores=True
    )
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(weights, want_weights, atol=1e-6)
    i, j = np.meshgrid(np.arange(T), np.arange(T), indexing="ij")
    outside = np.abs(i - j) >= window
    assert np.all(np.asarray(weights)[:, :, outside] == 0.0)
    if causal:
        cache = ours.init_cache(B, T)
        steps = []
        for t in range(T):
            out, cache = ours(
                x[:, t : t + 1], cache=cache, cache_index=tf.constant(t)
            )
            steps.append(np.asarray(out))
        np.testing.assert_allclose(
            np.concatenate(steps, axis=1), got, atol=1e-5
        )
    assert (
        tfattn.MultiHeadAttention.from_config(ours.get_config()).sliding_window
        == window
    )


@pytest.mark.parametrize(
    "kwargs, pattern",
    [
        (dict(sliding_window=0), r"`sliding_window`.*sliding_window=0"),
        (dict(sliding_window=2.0), r"`sliding_window`.*sliding_window=2.0"),
        (
            dict(sliding_window=3, flavor="reference_2017"),
            r"`sliding_window`.*None in flavor 'reference_2017'",
        ),
    ],
)
def test_bad_sliding_window(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        tfattn.MultiHeadAttention(num_heads=H, **kwargs)
