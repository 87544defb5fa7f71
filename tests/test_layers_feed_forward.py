"""Tests of FeedForward (docs/reference.md §1.5, §2.6, §5).

The expected outputs are NumPy computations from the layer's weights.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests import bounds
from tests.harness import run_layer_test
from tests.harness import assert_keras_file_round_trip
from tfattn.layers.feed_forward import FeedForward
from tfattn.layers.token_embedding import TokenEmbedding

B, T, C, F = 2, 5, 8, 12
# The network's chain: the inner Dense over C, its bias and activation, the
# outer Dense over F and its bias.
TERMS = C + 2 + F + 1


def _inputs(seed=0, width=C):
    return (
        np.random.default_rng(seed).normal(size=(B, T, width)).astype("float32")
    )


def _built(x=None, seed=1, **kwargs):
    x = _inputs() if x is None else x
    layer = FeedForward(F, **kwargs)
    layer(x)
    rng = np.random.default_rng(seed)
    for w in layer.weights:  # non-zero biases too
        w.assign(0.5 * rng.normal(size=w.shape).astype("float32"))
    return layer


def _numpy_ffn(layer, x, activation=lambda h: np.maximum(h, 0)):
    h = activation(
        x @ layer.inner_dense.kernel.numpy() + layer.inner_dense.bias.numpy()
    )
    return h @ layer.outer_dense.kernel.numpy() + layer.outer_dense.bias.numpy()


# --------------------------------------------------------------------------
# Layer contract.


@pytest.mark.parametrize(
    "kwargs, out_width",
    [
        ({}, C),
        (dict(num_units=6), 6),
        (dict(activation="gelu", dropout_rate=0.1, seed=3), C),
    ],
)
def test_layer_contract(kwargs, out_width):
    run_layer_test(
        FeedForward,
        dict(ffn_units=F, **kwargs),
        _inputs(),
        expected_output_shape=(B, T, out_width),
        expected_num_trainable_weights=4,
    )


@pytest.mark.slow
def test_keras_file_round_trip():
    """The layer contract's `.keras` save and reload, once per configuration
    of the contract tests above (run_layer_test skips it)."""
    for kwargs in [
        {},
        dict(num_units=6),
        dict(activation="gelu", dropout_rate=0.1, seed=3),
    ]:
        assert_keras_file_round_trip(
            FeedForward, dict(ffn_units=F, **kwargs), _inputs()
        )


def test_sublayers_and_initializers():
    layer = FeedForward(F, num_units=6)
    layer(_inputs())
    assert layer.inner_dense.name == "inner_dense"
    assert layer.outer_dense.name == "outer_dense"
    assert layer.inner_dropout.name == "inner_dropout"
    assert layer.inner_dense.kernel.shape == (C, F)
    assert layer.outer_dense.kernel.shape == (F, 6)
    assert layer.inner_dense.activation is keras.activations.relu
    assert layer.outer_dense.activation is keras.activations.linear
    for dense in (layer.inner_dense, layer.outer_dense):
        assert isinstance(
            dense.kernel_initializer, keras.initializers.GlorotUniform
        )
        np.testing.assert_array_equal(dense.bias.numpy(), 0.0)
    # Parameter count of spec §5's FF (512 -> 2048 -> 512), without the LN.
    big = FeedForward(2048)
    big.build((None, None, 512))
    assert big.count_params() == 2_100_736 - 2 * 512


def test_matches_numpy_relu_ffn():
    x = _inputs()
    layer = _built(x)
    bounds.assert_close(layer(x), _numpy_ffn(layer, x), terms=TERMS)


def test_custom_activation_and_output_width():
    x = _inputs()
    layer = _built(x, activation="tanh", num_units=3)
    out = layer(x)
    assert out.shape == (B, T, 3)
    bounds.assert_close(out, _numpy_ffn(layer, x, np.tanh), terms=TERMS)


def test_no_residual_or_norm_inside():
    x = _inputs()
    layer = _built(x)
    for w in layer.weights:
        w.assign(np.zeros(w.shape, "float32"))
    np.testing.assert_array_equal(layer(x), np.zeros((B, T, C)))


def test_dropout_acts_only_when_training():
    x = _inputs()
    layer = _built(x, dropout_rate=0.5, seed=7)
    want = _numpy_ffn(layer, x)
    bounds.assert_close(layer(x), want, terms=TERMS)
    bounds.assert_close(layer(x, training=False), want, terms=TERMS)
    assert np.abs(np.asarray(layer(x, training=True)) - want).max() > 1e-3


def test_any_rank_at_least_two_and_mask_passthrough():
    layer = FeedForward(F)
    assert layer(np.ones((3, C), "float32")).shape == (3, C)
    ids = np.array([[3, 4, 5, 6, 1], [2, 3, 0, 0, 0]])
    x = TokenEmbedding(7, C, mask_zero=True)(ids)  # carries a Keras mask
    out = FeedForward(F)(x)
    np.testing.assert_array_equal(out._keras_mask, ids != 0)


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision(policy):
    layer = FeedForward(F, dtype=policy)
    out = layer(_inputs())
    assert out.dtype == policy.split("_")[1]
    assert layer.inner_dense.kernel.dtype == "float32"
    assert np.all(np.isfinite(np.asarray(out, "float32")))


def test_jit_compile_equals_eager():
    x = _inputs()
    layer = _built(x)
    fn = tf.function(lambda a: layer(a), jit_compile=True)
    bounds.assert_close(fn(x), layer(x), terms=TERMS)


# --------------------------------------------------------------------------
# Bad input.


@pytest.mark.parametrize(
    "kwargs, pattern",
    [
        (dict(ffn_units=0), r"FeedForward.*argument `ffn_units`.*ffn_units=0"),
        (dict(ffn_units=2.0), r"argument `ffn_units`.*ffn_units=2.0"),
        (dict(num_units=-2), r"argument `num_units`.*num_units=-2"),
        (
            dict(activation="no_such_fn"),
            r"argument `activation`.*activation='no_such_fn'",
        ),
        (
            dict(dropout_rate=1.0),
            r"argument `dropout_rate`.*\[0, 1\).*dropout_rate=1.0",
        ),
        (
            dict(dropout_rate=-0.5),
            r"argument `dropout_rate`.*dropout_rate=-0.5",
        ),
        (dict(seed="7"), r"argument `seed`.*integer or None.*seed='7'"),
    ],
)
def test_constructor_rejects_bad_arguments(kwargs, pattern):
    args = dict(ffn_units=F)
    args.update(kwargs)
    with pytest.raises(ValueError, match=pattern):
        FeedForward(**args)


@pytest.mark.parametrize(
    "shape, pattern",
    [
        ((C,), r"argument `x`.*rank >= 2.*shape \(8,\)"),
        (
            (None, T, None),
            r"argument `x`.*known width C.*shape \(None, 5, None\)",
        ),
    ],
)
def test_build_rejects_bad_shapes(shape, pattern):
    with pytest.raises(ValueError, match=pattern):
        FeedForward(F).build(shape)


def test_initializers_are_arguments_and_each_dense_draws_its_own():
    layer = FeedForward(
        ffn_units=8,
        num_units=8,
        kernel_initializer="he_uniform",
        bias_initializer="ones",
    )
    layer(np.zeros((1, 2, 8), "float32"))
    inner, outer = layer.inner_dense, layer.outer_dense
    assert np.all(inner.bias.numpy() == 1) and np.all(outer.bias.numpy() == 1)
    assert np.abs(inner.kernel.numpy() - outer.kernel.numpy()).max() > 1e-3
    clone = FeedForward.from_config(layer.get_config())
    assert clone.get_config() == layer.get_config()
    with pytest.raises(ValueError, match=r"FeedForward.*`bias_initializer`"):
        FeedForward(ffn_units=8, bias_initializer=3)
