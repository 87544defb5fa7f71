"""Tests of TokenEmbedding (docs/reference.md §1.2, §2.2, §2.9).

Expected values are computed in NumPy from the layer's table, never by the
layer's own code paths.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests import bounds
from tests.harness import run_layer_test
from tests.harness import assert_keras_file_round_trip
from tfattn.layers.token_embedding import TokenEmbedding

B, T, V, C = 2, 5, 11, 8
IDS = np.array([[3, 4, 5, 0, 0], [6, 1, 10, 2, 0]], dtype="int32")


def _built(**kwargs):
    layer = TokenEmbedding(V, C, **kwargs)
    layer(IDS)
    return layer


# --------------------------------------------------------------------------
# Layer contract.


CONTRACT_KWARGS = [
    {},
    dict(zero_pad=False, scale=False),
    dict(mask_zero=True),
    dict(embeddings_initializer="random_normal"),
]


@pytest.mark.parametrize("kwargs", CONTRACT_KWARGS)
def test_layer_contract(kwargs):
    run_layer_test(
        TokenEmbedding,
        dict(vocab_size=V, num_units=C, **kwargs),
        IDS,
        expected_output_shape=(B, T, C),
        expected_num_trainable_weights=1,
    )


@pytest.mark.slow
def test_keras_file_round_trip():
    """The layer contract's `.keras` save and reload, once per configuration
    of the contract tests above (run_layer_test skips it)."""
    for kwargs in CONTRACT_KWARGS:
        assert_keras_file_round_trip(
            TokenEmbedding, dict(vocab_size=V, num_units=C, **kwargs), IDS
        )


def test_table_is_glorot_uniform_by_default():
    layer = TokenEmbedding(400, 200)
    layer(IDS)
    table = layer.embeddings.numpy()
    assert table.shape == (400, 200)
    limit = np.sqrt(6.0 / (400 + 200))
    assert np.abs(table).max() <= limit
    # Uniform(-l, l) has std l / sqrt(3); Keras' Embedding default (±0.05)
    # would give 0.029. A statistical bound, not a rounding one: the sample
    # std of n uniform draws has a relative standard error of
    # sqrt((mu_4 / sigma^4 - 1) / (4 n)) = sqrt(0.2 / n); 5 of them.
    want = limit / np.sqrt(3)
    assert abs(table.std() - want) <= 5 * np.sqrt(0.2 / table.size) * want


# --------------------------------------------------------------------------
# Lookup, zero padding, scaling.


def test_lookup_scaled_by_sqrt_num_units_and_zero_row_for_pad():
    layer = _built()
    table = layer.embeddings.numpy()
    want = table[IDS] * np.sqrt(C)
    want[IDS == 0] = 0.0
    # The cast of sqrt(C) and the product, each row by its own magnitude.
    bounds.assert_close(layer(IDS), want, terms=2, scale=np.abs(want))
    assert np.all(table[0] != 0)  # the variable keeps a non-zero row 0


def test_without_zero_pad_or_scale_is_a_plain_lookup():
    layer = _built(zero_pad=False, scale=False)
    np.testing.assert_array_equal(layer(IDS), layer.embeddings.numpy()[IDS])


def test_int64_and_uint8_ids_are_accepted():
    layer = _built()
    want = np.asarray(layer(IDS))
    np.testing.assert_array_equal(layer(IDS.astype("int64")), want)
    np.testing.assert_array_equal(layer(tf.constant(IDS, tf.uint8)), want)


def test_row_zero_gets_no_gradient():
    layer = _built()
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(layer(IDS) ** 2) + tf.reduce_sum(
            layer.logits(tf.ones((B, T, C)))
        )
    grad = tf.convert_to_tensor(tape.gradient(loss, layer.embeddings.value))
    grad = np.asarray(grad)
    assert np.all(grad[0] == 0.0)
    assert np.abs(grad[3]).max() > 0


def test_row_zero_learns_without_zero_pad():
    layer = _built(zero_pad=False)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(layer(IDS) ** 2)
    grad = np.asarray(
        tf.convert_to_tensor(tape.gradient(loss, layer.embeddings.value))
    )
    assert np.abs(grad[0]).max() > 0


def test_mask_zero_emits_keras_polarity_mask():
    layer = _built(mask_zero=True)
    out = layer(IDS)
    np.testing.assert_array_equal(out._keras_mask, IDS != 0)
    np.testing.assert_array_equal(layer.compute_mask(IDS), IDS != 0)
    assert _built().compute_mask(IDS) is None
    assert getattr(_built()(IDS), "_keras_mask", None) is None


# --------------------------------------------------------------------------
# Tied output projection.


def test_logits_is_tied_projection_with_zero_pad_column():
    layer = _built()
    x = np.random.default_rng(0).normal(size=(B, T, C)).astype("float32")
    table = layer.embeddings.numpy()
    want = x @ table.T
    want[..., 0] = 0.0
    got = np.asarray(layer.logits(x))
    assert got.shape == (B, T, V)
    bounds.assert_close(got, want, terms=C)  # x · tableᵀ sums C terms
    assert np.all(got[..., 0] == 0.0)


def test_logits_without_zero_pad_reads_row_zero():
    layer = _built(zero_pad=False)
    x = np.random.default_rng(1).normal(size=(B, T, C)).astype("float32")
    bounds.assert_close(
        layer.logits(x), x @ layer.embeddings.numpy().T, terms=C
    )


def test_logits_builds_an_unbuilt_layer():
    layer = TokenEmbedding(V, C)
    assert layer.logits(np.ones((1, 2, C), "float32")).shape == (1, 2, V)


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision(policy):
    layer = TokenEmbedding(V, C, dtype=policy)
    out = layer(IDS)
    compute = policy.split("_")[1]
    assert out.dtype == compute
    assert layer.embeddings.dtype == "float32"
    assert layer.logits(out).dtype == compute
    want = layer.embeddings.numpy()[IDS] * np.sqrt(C)
    want[IDS == 0] = 0
    # The table's and sqrt(C)'s casts to the compute dtype, the product.
    bounds.assert_close(
        np.asarray(out, "float32"), want, terms=3, scale=np.abs(want),
        dtype=compute,
    )


def test_jit_compile_equals_eager():
    layer = _built()
    fn = tf.function(lambda ids: layer.logits(layer(ids)), jit_compile=True)
    # The product by sqrt(C) (2), then x · tableᵀ over C.
    bounds.assert_close(fn(IDS), layer.logits(layer(IDS)), terms=C + 2)


# --------------------------------------------------------------------------
# Bad input.


@pytest.mark.parametrize(
    "kwargs, pattern",
    [
        (
            dict(vocab_size=0),
            r"TokenEmbedding.*argument `vocab_size`.*vocab_size=0",
        ),
        (dict(vocab_size=2.5), r"argument `vocab_size`.*vocab_size=2.5"),
        (dict(num_units=-1), r"argument `num_units`.*num_units=-1"),
        (dict(zero_pad=1), r"argument `zero_pad`.*bool.*zero_pad=1"),
        (dict(scale="yes"), r"argument `scale`.*scale='yes'"),
        (dict(mask_zero=None), r"argument `mask_zero`.*mask_zero=None"),
        (
            dict(embeddings_initializer="no_such_init"),
            r"argument `embeddings_initializer`.*'no_such_init'",
        ),
    ],
)
def test_constructor_rejects_bad_arguments(kwargs, pattern):
    args = dict(vocab_size=V, num_units=C)
    args.update(kwargs)
    with pytest.raises(ValueError, match=pattern):
        TokenEmbedding(**args)


@pytest.mark.parametrize(
    "ids, pattern",
    [
        (
            IDS.astype("float32"),
            r"`ids`.*integer tensor of shape \[B, T\].*dtype float32 and "
            r"shape \(2, 5\)",
        ),
        (IDS[0], r"`ids`.*dtype int32 and shape \(5,\)"),
        (IDS[..., None], r"`ids`.*shape \(2, 5, 1\)"),
    ],
)
def test_call_rejects_bad_ids(ids, pattern):
    with pytest.raises(ValueError, match=pattern):
        TokenEmbedding(V, C)(ids)
    built = _built()
    with pytest.raises(ValueError, match=pattern):
        built(ids)


def test_logits_rejects_wrong_width():
    layer = _built()
    with pytest.raises(
        ValueError, match=r"`x`.*num_units=8.*shape \(2, 5, 3\)"
    ):
        layer.logits(np.ones((B, T, 3), "float32"))
    with pytest.raises(ValueError, match=r"`x`.*num_units=8.*shape \(\)"):
        layer.logits(np.float32(1.0))


def test_functional_model_with_symbolic_ids():
    ids = keras.Input((None,), dtype="int32")
    layer = TokenEmbedding(V, C, mask_zero=True)
    out = layer(ids)
    assert tuple(out.shape) == (None, None, C)
    model = keras.Model(ids, out)
    # The same layer's ops on the same ids: bit for bit.
    np.testing.assert_array_equal(model(IDS), layer(IDS))
