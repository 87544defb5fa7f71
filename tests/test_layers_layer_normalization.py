"""tfattn.layers.LayerNormalization and tfattn.ops.normalization: the forward
pass against NumPy's formula, the written-out gradient against Keras's
layer differentiated by TensorFlow (the same weights), both dtypes, XLA,
the configurations that fall back to Keras's code, and the layer contract."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests import bounds
from tests.harness import run_layer_test
from tests.reference_numpy import layer_norm as numpy_layer_norm
from tfattn.layers import LayerNormalization
from tfattn.ops import normalization


def _inputs(shape, seed=0):
    rng = np.random.default_rng(seed)
    # An offset and a spread per row, so that centring and scaling matter.
    x = rng.normal(size=shape) * rng.uniform(0.5, 4.0, size=shape[:-1] + (1,))
    return (x + rng.normal(size=shape[:-1] + (1,)) * 3).astype("float32")


def _twins(shape, dtype="float32", seed=1, **kwargs):
    """tfattn's layer and Keras's, built on `shape`, with the same random
    gamma and beta."""
    ours = LayerNormalization(dtype=dtype, **kwargs)
    theirs = keras.layers.LayerNormalization(dtype=dtype, **kwargs)
    ours.build(shape)
    theirs.build(shape)
    rng = np.random.default_rng(seed)
    for a, b in zip(ours.weights, theirs.weights):
        value = rng.normal(size=a.shape).astype("float32") + 1.0
        a.assign(value)
        b.assign(value)
    return ours, theirs


def _terms(shape):
    """`bounds.assert_close` terms of a layer norm over the last axis C and
    of its gradients: the forward pass (4·C: mean and variance, each a sum
    of C, twice), the backward pass's two sums over C (the means of the
    upstream gradient and of its product with the normalized input), and
    gamma's and beta's sums over the rows."""
    width = shape[-1]
    rows = int(np.prod(shape[:-1]))
    return 4 * width + 2 * width + rows


def _forward_backward(layer, x, upstream):
    x = tf.convert_to_tensor(x)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x)
    grads = tape.gradient(y, [x] + layer.trainable_weights, upstream)
    return [np.asarray(tf.cast(t, tf.float32)) for t in [y] + grads]


@pytest.mark.parametrize("shape", [(6, 16), (3, 5, 32), (2, 3, 4, 8)])
def test_forward_equals_numpy(shape):
    x = _inputs(shape)
    ours, _ = _twins(shape, epsilon=1e-6)
    gamma, beta = (w.numpy() for w in ours.weights)
    want = numpy_layer_norm(x, gamma, beta, epsilon=1e-6)
    bounds.assert_close(ours(x).numpy(), want, terms=4 * shape[-1])


def test_a_constant_row_maps_to_beta():
    x = np.full((2, 8), 5.0, "float32")
    ours, _ = _twins((2, 8), epsilon=1e-8)
    # The forward pass over C = 8.
    bounds.assert_close(
        ours(x).numpy()[0], ours.beta.numpy(), terms=4 * x.shape[-1]
    )


@pytest.mark.parametrize("shape", [(6, 16), (3, 5, 32)])
def test_gradients_equal_kerass_layer_float32(shape):
    x = _inputs(shape)
    upstream = _inputs(shape, seed=2)
    ours, theirs = _twins(shape)
    names = ["output", "d_inputs", "d_gamma", "d_beta"]
    for name, a, b in zip(names, _forward_backward(ours, x, upstream),
                          _forward_backward(theirs, x, upstream)):
        bounds.assert_close(a, b, terms=_terms(shape), err_msg=name)


def test_bfloat16_matches_kerass_layer_within_its_rounding():
    shape = (4, 8, 64)
    x = tf.cast(_inputs(shape), tf.bfloat16)
    upstream = tf.cast(_inputs(shape, seed=2), tf.bfloat16)
    ours, theirs = _twins(shape, dtype="mixed_bfloat16")
    got = _forward_backward(ours, x, upstream)
    want = _forward_backward(theirs, x, upstream)
    assert ours(x).dtype == tf.bfloat16
    for name, a, b in zip(["output", "d_inputs", "d_gamma", "d_beta"],
                          got, want):
        # Both layers compute in float32 and round each result once to
        # bfloat16 (8 significant bits): two roundings of nearly the same
        # float32 value differ by one bfloat16 step at most.
        bounds.assert_close(a, b, terms=1, dtype="bfloat16", err_msg=name)


def test_gradients_under_xla_equal_the_graph_ones():
    shape = (3, 5, 16)
    x = tf.constant(_inputs(shape))
    gamma = tf.constant(np.linspace(0.5, 1.5, 16, dtype="float32"))
    beta = tf.constant(np.linspace(-1, 1, 16, dtype="float32"))

    def step(x, gamma, beta):
        with tf.GradientTape() as tape:
            tape.watch([x, gamma, beta])
            y = normalization.layer_normalization(x, gamma, beta, 1e-6)
            loss = tf.reduce_sum(y * y * x)
        return [y] + tape.gradient(loss, [x, gamma, beta])

    plain = tf.function(step)(x, gamma, beta)
    compiled = tf.function(step, jit_compile=True)(x, gamma, beta)
    # The layer norm and its gradients, plus the loss's products (y·y·x and
    # its derivative 2·y·x).
    terms = _terms(shape) + 3
    for a, b in zip(plain, compiled):
        bounds.assert_close(a.numpy(), b.numpy(), terms=terms)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"axis": [1, 2]},
        {"scale": False},
        {"center": False},
        {"axis": 1},
    ],
    ids=["two_axes", "no_scale", "no_center", "middle_axis"],
)
def test_other_configurations_run_kerass_code(kwargs):
    shape = (3, 5, 8)
    x = _inputs(shape)
    upstream = _inputs(shape, seed=2)
    ours, theirs = _twins(shape, **kwargs)
    for a, b in zip(_forward_backward(ours, x, upstream),
                    _forward_backward(theirs, x, upstream)):
        np.testing.assert_array_equal(a, b)


def test_keras_layer_contract():
    out = run_layer_test(
        LayerNormalization,
        {"epsilon": 1e-6},
        _inputs((4, 5, 8)),
        expected_output_shape=(4, 5, 8),
        expected_num_trainable_weights=2,
        run_saving=True,
    )
    assert out.dtype == tf.float32
