"""tfattn.ops.dropout and tfattn.layers.Dropout: the mask against NumPy's
reading of the same random words, the applied rate in float32 and bfloat16,
scaling, noise shapes, gradients, XLA and the Keras layer contract."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests import bounds
from tests.harness import run_layer_test
from tfattn.layers import Dropout
from tfattn.ops import dropout as dropout_ops

SEED = tf.constant([7, 11], tf.int32)


def _numpy_keep(shape, rate, seed):
    """The keep mask from the formula: the Philox words read as
    little-endian 16-bit halves, an element kept where its half >= t."""
    count = int(np.prod(shape))
    words = tf.random.stateless_uniform(
        [(count + 1) // 2],
        seed=seed,
        minval=None,
        maxval=None,
        dtype=tf.uint32,
    ).numpy()
    halves = np.stack([words & 0xFFFF, words >> 16], axis=-1).reshape(-1)
    threshold = round(rate * 65536)
    return (halves[:count] >= threshold).reshape(shape)


@pytest.mark.parametrize("shape", [(3, 5, 7), (4, 6)])
def test_mask_and_scale_equal_numpy_from_the_same_words(shape):
    x = np.random.default_rng(0).normal(size=shape).astype("float32") + 3.0
    y = dropout_ops.dropout(x, 0.3, SEED).numpy()
    keep = _numpy_keep(shape, 0.3, SEED)  # odd and even element counts
    threshold = round(0.3 * 65536)
    scale = np.float32(65536 / (65536 - threshold))
    np.testing.assert_array_equal(y != 0, keep)
    # Two float32 operations per value (the scale's division, the product),
    # each rounding relative to the value itself.
    want = x[keep] * scale
    bounds.assert_close(y[keep], want, terms=2, scale=np.abs(want))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_applied_rate_is_the_asked_rate_in_every_dtype(dtype):
    n = 1 << 20
    x = tf.ones([n], dtype)
    kept = float(
        tf.reduce_mean(
            tf.cast(dropout_ops.dropout(x, 0.3, SEED) != 0, tf.float32)
        )
    )
    bounds.assert_sampled(kept, 0.7, n)
    sigma = (0.3 * 0.7 / n) ** 0.5
    mean = float(
        tf.reduce_mean(tf.cast(dropout_ops.dropout(x, 0.3, SEED), tf.float32))
    )
    # Unbiased up to the scale's rounding to the dtype (bfloat16: 2^-8).
    assert abs(mean - 1.0) < 5 * sigma / 0.7 + (
        4e-3 if dtype == "bfloat16" else 0
    )


def test_keras_bfloat16_dropout_keeps_89_of_128_at_rate_0_3():
    # The reason for tfattn's layer (its docstring): Keras's bfloat16 draw
    # has 128 levels. If this fails, Keras changed and the docs are stale.
    n = 1 << 20
    layer = keras.layers.Dropout(0.3, seed=1, dtype="bfloat16")
    y = layer(tf.ones([n], "bfloat16"), training=True)
    kept = float(tf.reduce_mean(tf.cast(y != 0, tf.float32)))
    bounds.assert_sampled(kept, 89 / 128, n)


def test_rates_at_the_ends():
    x = tf.random.normal([4, 8])
    np.testing.assert_array_equal(dropout_ops.dropout(x, 0.0, SEED), x)
    np.testing.assert_array_equal(dropout_ops.dropout(x, 1e-6, SEED), x)
    np.testing.assert_array_equal(
        dropout_ops.dropout(x, 1.0, SEED), np.zeros((4, 8))
    )
    assert dropout_ops.drop_threshold(0.5) == 32768
    assert dropout_ops.drop_threshold(1.0) == 65536


def test_same_seed_same_mask_and_int64_seeds_are_wrapped():
    x = tf.ones([64, 64])
    a = dropout_ops.dropout(x, 0.5, SEED)
    np.testing.assert_array_equal(a, dropout_ops.dropout(x, 0.5, SEED))
    assert np.any(
        a.numpy() != dropout_ops.dropout(x, 0.5, tf.constant([7, 12])).numpy()
    )
    big = tf.constant([2**40 + 5, 3], tf.int64)
    wrapped = dropout_ops.stateless_seed(big)
    assert wrapped.dtype == tf.int32
    np.testing.assert_array_equal(
        dropout_ops.dropout(x, 0.5, big), dropout_ops.dropout(x, 0.5, wrapped)
    )


def test_noise_shape_broadcasts_and_a_wrong_rank_is_named():
    x = tf.ones([3, 9, 16])
    y = dropout_ops.dropout(x, 0.5, SEED, noise_shape=[None, 1, 16]).numpy()
    np.testing.assert_array_equal(y, np.broadcast_to(y[:, :1], y.shape))
    assert 0 < np.mean(y != 0) < 1
    with pytest.raises(ValueError, match=r"noise_shape \(3, 16\).*rank 3"):
        dropout_ops.dropout(x, 0.5, SEED, noise_shape=[3, 16])


def test_gradient_is_the_mask_times_the_scale():
    x = tf.random.normal([5, 12])
    weights = tf.random.normal([5, 12])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = dropout_ops.dropout(x, 0.4, SEED)
        loss = tf.reduce_sum(y * weights)
    grad = tape.gradient(loss, x).numpy()
    keep = _numpy_keep((5, 12), 0.4, SEED)
    scale = 65536 / (65536 - round(0.4 * 65536))
    want = keep * scale * weights.numpy()
    # The scale's division and the product, each relative to the value.
    bounds.assert_close(grad, want, terms=2, scale=np.abs(want))


def test_runs_under_xla_with_the_same_mask():
    x = tf.ones([6, 10])
    compiled = tf.function(
        lambda x: dropout_ops.dropout(x, 0.3, SEED), jit_compile=True
    )
    np.testing.assert_array_equal(
        compiled(x).numpy() != 0, _numpy_keep((6, 10), 0.3, SEED)
    )


def test_layer_contract():
    run_layer_test(
        Dropout,
        {"rate": 0.25, "noise_shape": (None, 1, 4), "seed": 3},
        np.ones((2, 3, 4), "float32"),
        expected_output_shape=(2, 3, 4),
        expected_num_trainable_weights=0,
        run_fit=False,
    )


def test_layer_is_the_identity_unless_training_and_draws_anew_each_call():
    layer = Dropout(0.5, seed=4)
    x = tf.ones([32, 32])
    np.testing.assert_array_equal(layer(x), x)
    np.testing.assert_array_equal(layer(x, training=False), x)
    first, second = layer(x, training=True), layer(x, training=True)
    assert np.any(first.numpy() != second.numpy())
    assert set(np.unique(first.numpy())) == {0.0, 2.0}
    layer.rate = 0.0  # read at call time, as Keras's layer does
    np.testing.assert_array_equal(layer(x, training=True), x)


def test_layer_refuses_a_rate_outside_0_1_as_keras_does():
    with pytest.raises(ValueError, match="rate=1.5"):
        Dropout(1.5)


def test_the_model_uses_it_where_tfattn_owns_the_randomness():
    import tfattn

    model = tfattn.Transformer(
        11,
        num_layers=1,
        num_units=8,
        num_heads=2,
        ffn_units=16,
        dropout_rate=0.2,
        max_length=8,
    )
    model((np.ones((1, 4), "int32"), np.ones((1, 3), "int32")))
    dropouts = [
        layer
        for layer in model._flatten_layers()
        if isinstance(layer, keras.layers.Dropout)
    ]
    ours = {layer.name for layer in dropouts if isinstance(layer, Dropout)}
    keras_own = {layer.name for layer in dropouts} - ours
    assert "embedding_dropout" in ours
    assert any("feed_forward" in name for name in ours)
    # Attention-weight dropout stays Keras's, as Keras's attention has it.
    assert keras_own and all("attention_dropout" == n for n in keras_own)
