"""Keras's `attention_axes` (inputs of rank > 3) and `use_gate` on
tfattn.MultiHeadAttention, against keras.layers.MultiHeadAttention with the
same weights (loaded from Keras's layout by tests/harness.py), and NumPy
for what Keras does not define (causality over several axes)."""

import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfattn
from tests import bounds
from tests.harness import assert_keras_file_round_trip
from tests.harness import assert_same_attention
from tests.harness import attention_terms
from tests.harness import load_keras_attention_weights
from tests.harness import random_keras_attention
from tests.harness import logit_scale

H = 2
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _terms(layer, query, value):
    """`attention_terms` of `layer`'s output: its keys are the positions
    along its attention axes (every middle axis by default); the head
    widths summed are the wider of the query/key and the value units."""
    value = np.asarray(value)
    axes = layer.attention_axes or range(1, value.ndim - 1)
    keys = int(np.prod([value.shape[a] for a in axes]))
    units = max(layer.units, layer.value_units)
    return attention_terms(query, value, units, keys)


def _pair(shape, seed=0, value_shape=None, **kwargs):
    """Keras's layer and tfattn's, built on `shape`, with Keras's random
    weights copied into tfattn's."""
    rng = np.random.default_rng(seed)
    query = rng.normal(size=shape).astype("float32")
    value = (
        query
        if value_shape is None
        else rng.normal(size=value_shape).astype("float32")
    )
    theirs = random_keras_attention(
        query, value, rng, scale=0.4, num_heads=H, **kwargs
    )
    ours = tfattn.MultiHeadAttention(num_heads=H, **kwargs)
    ours(query, value)
    assert len(ours.weights) == len(theirs.weights)
    load_keras_attention_weights(ours, theirs)
    return theirs, ours, query, value


@pytest.mark.parametrize(
    "shape, axes",
    [
        ((2, 3, 4, 8), None),  # every middle axis, jointly
        ((2, 3, 4, 8), (1, 2)),
        ((2, 3, 4, 8), (2,)),  # axis 1 acts as a batch axis
        ((2, 3, 4, 8), (-3,)),  # = (1,)
        ((2, 3, 4, 8), (2, 1)),  # Keras keeps the given order in the scores
        ((2, 2, 3, 2, 8), (1, 3)),
    ],
)
def test_attention_axes_as_keras(shape, axes):
    theirs, ours, query, value = _pair(shape, key_dim=3, attention_axes=axes)
    got, _ = assert_same_attention(theirs, ours, query, value)
    assert ours.compute_output_shape(query.shape, value.shape) == got.shape
    config = ours.get_config()
    assert config["attention_axes"] == (None if axes is None else tuple(axes))
    clone = tfattn.MultiHeadAttention.from_config(config)
    clone(query, value)
    clone.set_weights(ours.get_weights())
    bounds.assert_close(
        clone(query, value), got, terms=_terms(ours, query, value)
    )


@pytest.mark.parametrize(
    "mask_shape",
    [
        (2, 3, 4, 3, 4),  # [B, q axes, k axes]: Keras inserts the head axis
        (1, 1, 3, 4, 3, 4),  # with a head axis, broadcast over batch and heads
        (3, 4, 3, 4),  # no batch axis
    ],
)
def test_attention_axes_masks_as_keras(mask_shape):
    """Keras's mask expansion and broadcasting for rank > 3, a query whose
    keys are all masked included (zero weights, as Keras)."""
    theirs, ours, query, value = _pair(
        (2, 3, 4, 8), key_dim=2, attention_axes=(1, 2)
    )
    rng = np.random.default_rng(3)
    mask = rng.random(mask_shape) > 0.4
    mask[..., 0, 1, :, :] = False
    _, scores = assert_same_attention(
        theirs, ours, query, value, attention_mask=mask
    )
    assert np.all(scores[..., 0, 1, :, :] == 0.0)


def test_attention_axes_with_other_key_lengths_and_a_model():
    """Keys longer than the queries along the attention axis, the batch-like
    axis equal; inside a functional model with an unknown batch size, eager
    and compiled with XLA."""
    theirs, ours, query, value = _pair(
        (2, 3, 5, 8),
        value_shape=(2, 3, 7, 6),
        key_dim=4,
        value_dim=3,
        attention_axes=(2,),
        output_shape=5,
    )
    assert_same_attention(theirs, ours, query, value)
    q_in, v_in = keras.Input((3, 5, 8)), keras.Input((3, 7, 6))
    model = keras.Model([q_in, v_in], ours(q_in, v_in))
    want = np.asarray(theirs(query, value))
    terms = _terms(ours, query, value)
    bounds.assert_close(model([query, value]), want, terms=terms)
    compiled = tf.function(model, jit_compile=True)
    bounds.assert_close(compiled([query, value]), want, terms=terms)


# Keras's own `test_high_dim_attention` cases: the query's and value's
# middle axes, the attention mask's (batch first), the attention axes. The
# mask may have a lower rank than the scores [B, ..., H, q axes, k axes]:
# it broadcasts from the right, as in Keras.
KERAS_HIGH_DIM_CASES = [
    ((3, 4), (3, 2), (4, 2), (2,)),
    ((3, 4), (3, 2), (3, 4, 2), (2,)),
    ((3, 4), (3, 2), (3, 2, 4, 2), (2,)),
    ((3, 4), (3, 2), (3, 4, 3, 2), (1, 2)),
    ((5, 3, 4), (5, 3, 2), (3, 4, 3, 2), (2, 3)),  # 5-D, mask of lower rank
    ((5, 3, 4), (5, 3, 2), (5, 3, 4, 3, 2), (2, 3)),  # 5-D, full-rank mask
]


@pytest.mark.parametrize("q_dims, v_dims, mask_dims, axes",
                         KERAS_HIGH_DIM_CASES)
def test_high_rank_inputs_and_broadcast_masks_as_keras(q_dims, v_dims,
                                                       mask_dims, axes):
    """Each way Keras's tests reach the layer: an eager call, a fresh layer
    built from shapes and then called, `compute_output_spec` on an unbuilt
    layer, and a functional model of named inputs (query, value, mask) as
    Keras 2's test built; every output Keras's layer's with the same
    weights."""
    batch, width = 3, 8
    theirs, ours, query, value = _pair(
        (batch,) + q_dims + (width,), value_shape=(batch,) + v_dims + (width,),
        key_dim=2, attention_axes=axes)
    mask = np.random.default_rng(4).random((batch,) + mask_dims) > 0.3
    terms = _terms(ours, query, value)
    got, _ = assert_same_attention(theirs, ours, query, value,
                                   attention_mask=mask)
    want = np.asarray(theirs(query, value, attention_mask=mask))
    assert np.abs(got - np.asarray(ours(query, value))).max() > 1e-3

    built = tfattn.MultiHeadAttention(num_heads=H, key_dim=2,
                                      attention_axes=axes)
    built.build(query.shape, value.shape)
    built.set_weights(ours.get_weights())
    bounds.assert_close(built(query, value, attention_mask=mask), want,
                        terms=terms)
    spec = tfattn.MultiHeadAttention(
        num_heads=H, key_dim=2, attention_axes=axes).compute_output_spec(
            keras.KerasTensor(query.shape), keras.KerasTensor(value.shape),
            attention_mask=keras.KerasTensor(mask.shape, dtype="bool"))
    assert tuple(spec.shape) == query.shape

    inputs = [keras.Input(query.shape[1:], name="query"),
              keras.Input(value.shape[1:], name="value"),
              keras.Input(mask.shape[1:], name="mask", dtype="bool")]
    model = keras.Model(inputs, ours(inputs[0], inputs[1],
                                     attention_mask=inputs[2]))
    bounds.assert_close(model.predict([query, value, mask], verbose=0),
                        want, terms=terms)
    everything = np.ones_like(mask)
    bounds.assert_close(
        model.predict([query, value, everything], verbose=0),
        theirs(query, value, attention_mask=everything), terms=terms)


@pytest.mark.slow
def test_keras_own_high_dim_attention_tests_pass_through_the_adapter():
    """Keras's own `test_high_dim_attention` (its run_layer_test: build,
    symbolic, eager and mixed-precision calls) on tfattn through
    tests/peers/keras_mha_adapter.py, run by tests/peers/run_keras_suite.py
    as it runs the whole of Keras's suite (a process: slow)."""
    result = subprocess.run(
        [sys.executable, os.path.join(REPO, "tests", "peers",
                                      "run_keras_suite.py"),
         "-k", "high_dim_attention"],
        capture_output=True, text=True, timeout=600)
    summary = result.stdout.strip().splitlines()[-1]
    assert result.returncode == 0, result.stdout[-3000:]
    assert summary.startswith(f"{len(KERAS_HIGH_DIM_CASES)} passed"), summary


def test_attention_axes_keras_file_round_trip():
    x = np.random.default_rng(0).normal(size=(2, 3, 4, 8)).astype("float32")
    assert_keras_file_round_trip(
        tfattn.MultiHeadAttention,
        dict(num_heads=H, attention_axes=(1, 2), use_gate=True),
        x,
    )


def test_implicit_and_padding_masks_fold_with_the_inputs():
    """A Keras mask on rank-4 queries/keys and `padding_mask` (shape of the
    input without features) act as the same `attention_mask` would: padded
    queries get zero weights, padded keys none."""
    rng = np.random.default_rng(5)
    x = rng.normal(size=(2, 3, 4, 8)).astype("float32")
    keep = rng.random((2, 3, 4)) > 0.3
    layer = tfattn.MultiHeadAttention(num_heads=H, attention_axes=(1, 2))
    layer(x)
    flat = keep.reshape(2, 12)
    explicit = (flat[:, :, None] & flat[:, None, :]).reshape(2, 3, 4, 3, 4)
    want, want_scores = layer(
        x, x, attention_mask=explicit, return_attention_scores=True
    )
    masked = tf.identity(x)
    masked._keras_mask = tf.constant(keep)
    got, scores = layer(masked, masked, return_attention_scores=True)
    terms = _terms(layer, x, x)
    bounds.assert_close(got, want, terms=terms)
    # The scores move by at most their logits' error; attention over both
    # middle axes is over the 12 flattened positions.
    flat_x = x.reshape(2, 12, 8)
    logits = logit_scale(layer, flat_x, flat_x)
    bounds.assert_close(scores, want_scores, terms=terms, scale=logits)
    key_only = (np.ones((2, 12, 1), bool) & flat[:, None, :]).reshape(
        2, 3, 4, 3, 4
    )
    bounds.assert_close(
        layer(x, x, padding_mask=keep),
        layer(x, x, attention_mask=key_only),
        terms=terms,
    )


def test_causality_over_several_axes_is_over_the_flattened_positions():
    """NumPy: causal attention of the [B, T1·T2, C] row-major flattening."""
    rng = np.random.default_rng(6)
    x = rng.normal(size=(2, 3, 2, 4)).astype("float32")
    layer = tfattn.MultiHeadAttention(
        num_heads=H, attention_axes=(1, 2), causality=True
    )
    _, scores = layer(x, x, return_attention_scores=True)
    flat = np.asarray(scores).reshape(2, H, 6, 6)
    assert np.all(
        flat[:, :, np.triu_indices(6, 1)[0], np.triu_indices(6, 1)[1]] == 0.0
    )
    # The softmax's sum, then this one, each over the 6 positions.
    bounds.assert_close(flat.sum(-1), 1.0, terms=2 * 6)
    lower = np.tril(np.ones((6, 6), bool)).reshape(3, 2, 3, 2)
    uncausal = tfattn.MultiHeadAttention(num_heads=H, attention_axes=(1, 2))
    uncausal(x)
    uncausal.set_weights(layer.get_weights())
    bounds.assert_close(
        layer(x),
        uncausal(x, attention_mask=lower),
        terms=_terms(layer, x, x),
    )


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(key_dim=4),
        dict(key_dim=3, value_dim=5, use_bias=False, output_shape=6),
    ],
)
def test_use_gate_as_keras(kwargs):
    """Keras's gated attention: sigmoid(gate(queries)) times the heads'
    output before the output projection; with a fully masked query."""
    theirs, ours, query, value = _pair(
        (2, 5, 8), value_shape=(2, 6, 7), use_gate=True, **kwargs
    )
    mask = np.random.default_rng(2).random((2, 5, 6)) > 0.3
    mask[1, 2] = False
    assert_same_attention(theirs, ours, query, value, attention_mask=mask)
    assert ours.gate_dense.kernel.shape == (
        8,
        H * (kwargs.get("value_dim") or kwargs["key_dim"]),
    )
    plain = tfattn.MultiHeadAttention(num_heads=H, **kwargs)
    plain(query, value)
    assert len(plain.weights) == len(ours.weights) - (
        1 + kwargs.get("use_bias", True)
    )
    assert (
        tfattn.MultiHeadAttention.from_config(ours.get_config()).use_gate
        is True
    )


@pytest.mark.parametrize(
    "kwargs, shape",
    [
        (dict(use_gate=True, key_dim=4), (2, 5, 8)),
        (dict(attention_axes=(1, 2), key_dim=2), (2, 3, 4, 8)),
        (
            dict(attention_axes=(2,), use_gate=True, key_dim=3, value_dim=2),
            (2, 3, 4, 8),
        ),
        (dict(sliding_window=2, key_dim=4), (2, 5, 8)),
    ],
)
def test_porting_carries_axes_gate_and_window(kwargs, shape):
    theirs, _, query, value = _pair(shape, seed=8, **kwargs)
    ours = tfattn.interop.from_keras(theirs)
    assert_same_attention(theirs, ours, query, value)
    back = tfattn.interop.to_keras(ours)
    for a, b in zip(back.get_weights(), theirs.get_weights()):
        np.testing.assert_array_equal(a, b)
    mine, yours = back.get_config(), theirs.get_config()
    for name in ("attention_axes", "use_gate", "sliding_window"):
        assert mine[name] == yours[name], name
    # Keras's own layer, its config and weights equal: bit for bit.
    np.testing.assert_array_equal(back(query, value), theirs(query, value))


@pytest.mark.parametrize(
    "kwargs, pattern",
    [
        (dict(attention_axes="rows"), r"`attention_axes`.*int.*'rows'"),
        (dict(attention_axes=()), r"`attention_axes`.*non-empty.*\(\)"),
        (dict(attention_axes=(1.5,)), r"`attention_axes`.*\(1.5,\)"),
        (
            dict(attention_axes=(1,), flavor="reference_2019"),
            r"`attention_axes`.*None in flavor 'reference_2019'",
        ),
        (dict(use_gate="yes"), r"`use_gate`.*bool.*'yes'"),
        (
            dict(use_gate=True, flavor="reference_2017"),
            r"`use_gate`.*False in flavor 'reference_2017'",
        ),
    ],
)
def test_bad_axes_and_gate_arguments(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        tfattn.MultiHeadAttention(num_heads=H, **kwargs)


def test_bad_axes_and_rank_at_call():
    x4 = np.zeros((2, 3, 4, 8), "float32")
    for axes, pattern in (
        ((0,), r"between 1 and 2.*\(0,\)"),
        ((3,), r"batch nor the feature axis.*\(3,\)"),
        ((2, -2), r"distinct.*\(2, -2\)"),
        ((2,), None),
    ):
        layer = tfattn.MultiHeadAttention(num_heads=H, attention_axes=axes)
        if pattern is None:
            layer(x4)
            continue
        with pytest.raises(ValueError, match=r"`attention_axes`.*" + pattern):
            layer(x4)
    with pytest.raises(ValueError, match=r"`queries`.*rank-3.*\(2, 3, 4, 8\)"):
        tfattn.MultiHeadAttention(num_heads=H, flavor="reference_2019")(x4)
    layer = tfattn.MultiHeadAttention(num_heads=H, attention_axes=(1, 2))
    with pytest.raises(ValueError, match=r"`keys`.*rank-4.*\(2, 12, 8\)"):
        layer(x4, np.zeros((2, 12, 8), "float32"))
    with pytest.raises(
        ValueError,
        match=r"`attention_mask`.*\(2, 2, 3, 4, "
        r"3, 4\).*\(2, 3, 3, 4\)",
    ):
        layer(x4, attention_mask=np.ones((2, 3, 3, 4), bool))
    with pytest.raises(
        ValueError,
        match=r"`padding_mask`.*\(2, 3, 4\).*"
        r"\(2, 12\)",
    ):
        layer(x4, padding_mask=np.ones((2, 12), bool))
    with pytest.raises(ValueError, match=r"`cache`.*rank > 3"):
        layer(x4, cache={}, cache_index=tf.constant(0))


@pytest.mark.parametrize(
    "shape, scores",
    [
        ((None, 5, 8), (None, H, 5, 5)),
        ((None, 3, 4, 8), (None, H, 3, 4, 3, 4)),
    ],
)
def test_symbolic_calls_return_the_scores(shape, scores):
    """On keras.Input tensors the layer gives (output, scores) with the
    shapes of the eager call, as Keras's layer does."""
    layer = tfattn.MultiHeadAttention(num_heads=H, output_shape=(2, 3))
    x = keras.Input(batch_shape=shape)
    out, weights = layer(x, x, return_attention_scores=True)
    assert tuple(out.shape) == shape[:-1] + (2, 3)
    assert tuple(weights.shape) == scores
    eager = np.zeros((2,) + shape[1:], "float32")
    got, got_weights = layer(eager, eager, return_attention_scores=True)
    assert got.shape[1:] == out.shape[1:]
    assert got_weights.shape[1:] == weights.shape[1:]
