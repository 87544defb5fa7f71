"""Tests of tfattn.multihead_attention, the referenced function's signature."""

import keras
import numpy as np
import pytest

import tfattn
from tests import bounds
from tests import reference_numpy as ref
from tests.harness import attention_params as _params

C, HEADS, T_K = 8, 2, 6  # width, heads, the longest key length of _x
# The 2017 attention's chain: the ReLU projection (C), the scores over a
# head's width (C / HEADS), the softmax and weighted sum over the keys
# (2·T_K), the residual (1) and the layer norm (4·C).
TERMS = C + C // HEADS + 2 * T_K + 1 + 4 * C


def _assert_differ(a, b):
    """Two dropout draws differ by more than the bound of a comparison."""
    a, b = np.asarray(a), np.asarray(b)
    assert np.abs(a - b).max() > bounds.bound(TERMS, np.abs(b).max())


def _x(seed=0, length=5):
    x = (
        np.random.default_rng(seed)
        .normal(size=(2, length, C))
        .astype("float32")
    )
    x[0, -1] = 0.0
    return x


def test_functional_model_matches_numpy_reference():
    queries = keras.Input((5, C))
    keys = keras.Input((T_K, C))
    out = tfattn.multihead_attention(
        queries,
        keys,
        num_heads=HEADS,
        causality=True,
        is_training=None,
        scope="vanilla_attention",
    )
    model = keras.Model([queries, keys], out)
    layer = model.get_layer("vanilla_attention")
    assert isinstance(layer, tfattn.MultiHeadAttention)
    assert layer.flavor == "reference_2017"
    q, k = _x(0), _x(1, length=T_K)
    want, _ = ref.mha_reference_2017(
        q, k, _params(layer), HEADS, causality=True
    )
    bounds.assert_close(model.predict([q, k], verbose=0), want, terms=TERMS)


def test_eager_call_and_is_training():
    q = _x()
    out = tfattn.multihead_attention(q, q, num_heads=2, dropout_rate=0.0)
    assert out.shape == (2, 5, 8)
    a = tfattn.multihead_attention(
        q, q, num_heads=2, dropout_rate=0.9, is_training=False
    )
    assert np.all(np.isfinite(a))


def test_is_training_is_the_default_phase_and_keras_phases_win():
    queries = keras.Input((5, 8))
    x = _x()
    train_out = tfattn.multihead_attention(
        queries, queries, num_heads=2, dropout_rate=0.5, is_training=True
    )
    model = keras.Model(queries, train_out)
    # No phase named: the reference's is_training=True applies (dropout).
    _assert_differ(model(x), model(x))
    # predict names inference, which wins as for any Keras layer.
    np.testing.assert_array_equal(
        model.predict(x, verbose=0), model.predict(x, verbose=0)
    )
    eval_out = tfattn.multihead_attention(
        queries, queries, num_heads=2, dropout_rate=0.5, is_training=False
    )
    model = keras.Model(queries, eval_out)
    np.testing.assert_array_equal(model(x), model(x))
    _assert_differ(model(x, training=True), model(x, training=True))


@pytest.mark.parametrize("reuse", [True, "AUTO_REUSE"])
def test_reuse_cannot_be_mirrored(reuse):
    with pytest.raises(
        ValueError, match=r"argument `reuse`.*call `layer\(queries, keys\)`"
    ):
        tfattn.multihead_attention(_x(), _x(), num_heads=2, reuse=reuse)


def test_is_training_must_be_a_python_value():
    with pytest.raises(
        ValueError, match=r"argument `is_training`.*is_training='train'"
    ):
        tfattn.multihead_attention(_x(), _x(), num_heads=2, is_training="train")


def test_bad_arguments_reach_the_layer_checks():
    with pytest.raises(ValueError, match=r"argument `num_units`.*num_units=7"):
        tfattn.multihead_attention(_x(), _x(), num_units=7, num_heads=2)
