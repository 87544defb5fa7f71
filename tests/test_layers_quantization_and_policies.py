"""Keras features that reach tfattn's Dense sublayers: a dtype policy map
(one policy per sublayer path) and int8 quantization that survives a
`.keras` save and reload (the quantized policies travel in the config as a
`DTypePolicyMap`, tfattn/layers/quantization.py)."""

import os

import keras
import numpy as np
import pytest

import tfattn

X = np.random.default_rng(0).normal(size=(2, 5, 8)).astype("float32")


@pytest.mark.half_precision
def test_a_dtype_policy_map_reaches_each_projection():
    policies = keras.dtype_policies.DTypePolicyMap(
        default_policy=keras.dtype_policies.DTypePolicy("float32")
    )
    policies["mixed/query_dense"] = keras.dtype_policies.DTypePolicy("bfloat16")
    layer = tfattn.MultiHeadAttention(num_heads=2, dtype=policies, name="mixed")
    got = np.asarray(layer(X))
    assert layer.query_dense.compute_dtype == "bfloat16"
    assert {
        d.compute_dtype
        for d in (layer.key_dense, layer.value_dense, layer.output_dense)
    } == {"float32"}
    plain = tfattn.MultiHeadAttention(num_heads=2)
    plain(X)
    plain.set_weights(layer.get_weights())
    want = np.asarray(plain(X))
    assert 0 < np.abs(got - want).max() < 0.05 * np.abs(want).max()
    clone = tfattn.MultiHeadAttention.from_config(layer.get_config())
    clone(X)
    assert clone.query_dense.compute_dtype == "bfloat16"
    assert clone.key_dense.compute_dtype == "float32"


def _save_and_reload(model, tmp_path):
    path = os.path.join(tmp_path, "quantized.keras")
    model.save(path)
    return keras.saving.load_model(path)


def test_int8_attention_saves_and_reloads(tmp_path):
    inputs = keras.Input((5, 8))
    model = keras.Model(
        inputs, tfattn.MultiHeadAttention(num_heads=2, name="mha")(inputs)
    )
    model.quantize("int8")
    before = np.asarray(model(X))
    reloaded = _save_and_reload(model, tmp_path)
    layer = reloaded.get_layer("mha")
    assert layer.query_dense.quantization_mode == "int8"
    np.testing.assert_array_equal(np.asarray(reloaded(X)), before)


@pytest.mark.slow
def test_int8_transformer_saves_and_reloads(tmp_path):
    model = tfattn.Transformer(
        source_vocab_size=20,
        num_layers=1,
        num_units=8,
        num_heads=2,
        ffn_units=16,
        max_length=16,
    )
    source = np.array([[5, 6, 7, 0], [4, 9, 3, 0]])
    target = np.array([[2, 5, 6], [2, 7, 0]])
    model((source, target))
    model.quantize("int8")
    before = np.asarray(model((source, target)))
    reloaded = _save_and_reload(model, tmp_path)
    block = reloaded.decoder.blocks[0]
    assert block.cross_attention.value_dense.quantization_mode == "int8"
    assert block.feed_forward.inner_dense.quantization_mode == "int8"
    np.testing.assert_array_equal(
        np.asarray(reloaded((source, target))), before
    )
