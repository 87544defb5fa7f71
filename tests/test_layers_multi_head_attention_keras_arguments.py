"""Tests of the Keras arguments of tfattn.MultiHeadAttention's paper flavour
(`key_dim`, `value_dim`, `output_shape`, `use_bias`, initializers,
regularizers, constraints, `sliding_window`) against
keras.layers.MultiHeadAttention, their refusals, porting to and from Keras,
and Keras's quantization and LoRA through the projections."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfattn
from tests import bounds
from tests.harness import assert_same_attention
from tests.harness import copy_to_keras_attention
from tests.harness import load_keras_attention_weights as _load_keras_weights
from tests.harness import random_keras_attention
from tests.harness import randomize_weights as _randomize
from tests.mha_helpers import B
from tests.mha_helpers import C
from tests.mha_helpers import H
from tests.mha_helpers import T
from tests.mha_helpers import built_layer
from tests.mha_helpers import make_inputs
from tests.mha_helpers import mha_terms
from tests.harness import logit_scale


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
    bounds.assert_close(
        clone(query, value, attention_mask=mask),
        got,
        terms=mha_terms(ours, query, value),
    )


def test_initializers_regularizers_and_constraints_reach_every_projection():
    x = make_inputs(0, zero_rows=False)
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
    # A sum over a kernel's entries, then the square or |.| and the factor;
    # losses of many magnitudes, each to its own.
    terms = max(d.kernel.numpy().size for d in dense) + 2
    bounds.assert_close(
        sorted(weight_losses),
        sorted(want),
        terms=terms,
        scale=np.abs(sorted(want)),
    )
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
    x = make_inputs(0, zero_rows=False)
    with pytest.raises(
        ValueError, match="`layer`.*keras.layers.MultiHeadAttention.*Dense"
    ):
        tfattn.interop.from_keras(keras.layers.Dense(3))
    with pytest.raises(ValueError, match="`layer`.*a built layer"):
        tfattn.interop.from_keras(
            keras.layers.MultiHeadAttention(num_heads=2, key_dim=2)
        )
    with pytest.raises(ValueError, match="flavor 'paper'.*'reference_2019'"):
        tfattn.interop.to_keras(built_layer("reference_2019", x))
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
    x = make_inputs(0, zero_rows=False)
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
    x = make_inputs(0, zero_rows=False)
    layer = built_layer("paper", x)
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

    lora = built_layer("paper", x)
    plain = np.asarray(lora(x))
    lora.query_dense.enable_lora(2)
    # B starts at 0.
    bounds.assert_close(lora(x), plain, terms=mha_terms(lora, x, x))
    trainable = {
        v.path.split("/")[-1] for v in lora.query_dense.trainable_weights
    }
    assert trainable == {"lora_kernel_a", "lora_kernel_b", "bias"}


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("window", [1, 2, 4])
def test_sliding_window_as_keras(window, causal):
    """Keras's `sliding_window`: equal to Keras's layer with the same weights
    (alone and with a causal mask); the weights outside the band are 0; the
    cached one-step path gives the full pass's outputs (the band follows
    `cache_index`)."""
    x = make_inputs(0, zero_rows=False)
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
    terms = mha_terms(ours, x, x)
    bounds.assert_close(got, want, terms=terms)
    bounds.assert_close(
        weights, want_weights, terms=terms, scale=logit_scale(ours, x, x)
    )
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
        bounds.assert_close(np.concatenate(steps, axis=1), got, terms=terms)
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
