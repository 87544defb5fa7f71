"""Tests of tfattn.MultiHeadAttention's paper flavour against
keras.layers.MultiHeadAttention with the same weights: Keras implicit,
causal and explicit masks, and queries that see no key (issue 14), where
Keras's default fused call and its explicit path differ."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras.src import backend as keras_backend

import tfattn
from tests import bounds
from tests.harness import load_keras_attention_weights as _load_keras_weights
from tests.harness import random_keras_attention
from tests.mha_helpers import B
from tests.mha_helpers import C
from tests.mha_helpers import H
from tests.mha_helpers import T
from tests.mha_helpers import built_layer
from tests.mha_helpers import keras_twin
from tests.mha_helpers import make_inputs
from tests.mha_helpers import mha_terms


def test_paper_matches_keras_padding_mask():
    ids = np.array([[3, 4, 5, 0, 0], [6, 7, 8, 9, 2]])
    embed = keras.layers.Embedding(12, C, mask_zero=True)
    ours = built_layer("paper", make_inputs())
    theirs = keras_twin(ours)
    inp = keras.Input((T,), dtype="int32")
    # Two models: keras' layer clears the implicit masks of its inputs.
    got = keras.Model(inp, ours(embed(inp), embed(inp)))(ids)
    want = keras.Model(inp, theirs(embed(inp), embed(inp)))(ids)
    # Keras 3.15's fused path (no scores, no dropout) gives a padded query,
    # which sees no key, uniform weights; its scores path gives it zero
    # weights, as tfattn does (the padded positions are checked below).
    embedded = embed(ids)
    terms = mha_terms(ours, embedded, embedded)
    bounds.assert_close(
        np.asarray(got)[0, :3], np.asarray(want)[0, :3], terms=terms
    )
    bounds.assert_close(np.asarray(got)[1], np.asarray(want)[1], terms=terms)
    scored = keras.Model(
        inp, theirs(embed(inp), embed(inp), return_attention_scores=True)[0]
    )(ids)
    bounds.assert_close(got, scored, terms=terms)
    bias = ours.output_dense.bias.numpy()
    bounds.assert_close(
        np.asarray(got)[0, 3:], np.stack([bias, bias]), terms=terms
    )
    # The padding mask must matter: without it the output differs.
    plain = tf.identity(embed(ids))  # the same values without the mask
    unmasked = ours(plain, plain)
    assert (
        np.abs(np.asarray(unmasked)[0, :3] - np.asarray(got)[0, :3]).max()
        > 1e-4
    )


def test_paper_matches_keras_causal_and_explicit_masks():
    x, memory = make_inputs(0, zero_rows=False), make_inputs(1, zero_rows=False)
    ours = built_layer("paper", x, causality=True)
    theirs = keras_twin(ours)
    bounds.assert_close(
        ours(x),
        theirs(x, x, use_causal_mask=True),
        terms=mha_terms(ours, x, x),
    )
    plain = built_layer("paper", x)
    plain_twin = keras_twin(plain)
    attend = np.random.default_rng(3).random((B, T, T)) > 0.4
    attend[:, :, 1] = True
    bounds.assert_close(
        plain(x, memory, attention_mask=attend),
        plain_twin(x, memory, attention_mask=attend),
        terms=mha_terms(plain, x, memory),
    )


@pytest.mark.parametrize(
    "policy", ["float32", "mixed_float16", "mixed_bfloat16"]
)
@pytest.mark.parametrize("chunk", [None, 2])
def test_paper_fully_masked_query_gets_zero_weights_as_keras(policy, chunk):
    """A query row of `attention_mask` that is all False: all-zero weights,
    so the output is the output projection's bias, as Keras 3.15 gives with
    `return_attention_scores=True` (its layer with the same weights, in
    float32); the reference flavours keep uniform weights (spec §5)."""
    x, memory = make_inputs(0, zero_rows=False), make_inputs(1, zero_rows=False)
    attend = np.random.default_rng(5).random((B, T, T)) > 0.4
    attend[:, :, 0] = True
    attend[1, 2, :] = False  # query 2 of row 1 sees nothing
    ours = built_layer("paper", x, query_chunk_size=chunk)
    # Keras's scores path zeroes such rows (its fused path, without scores,
    # gives them uniform weights: Keras 3.15 is not consistent there).
    want = np.asarray(
        keras_twin(ours)(
            x, memory, attention_mask=attend, return_attention_scores=True
        )[0]
    )
    bias = ours.output_dense.bias.numpy()
    terms = mha_terms(ours, x, memory)
    bounds.assert_close(want[1, 2], bias, terms=terms)
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
    # The policy's compute dtype is the less precise side. In 16 bits the
    # roundings that count are the casts to it (products accumulate in
    # float32): the inputs, the query/key/value projections, the scores,
    # the weights, the weighted sum and the output projection, 6 on the
    # longest chain.
    bounds.assert_close(
        np.asarray(got, "float32"),
        want,
        terms=terms if policy == "float32" else 6,
        dtype=policy.split("_")[-1],
    )
    for flavor in ("reference_2017", "reference_2019"):
        ref = built_layer(flavor, x, query_chunk_size=chunk)
        _, w = ref(x, attention_mask=attend, return_attention_scores=True)
        # The softmax's sum over the T equal scores and its division.
        bounds.assert_close(np.asarray(w)[1, :, 2], 1.0 / T, terms=T + 1)


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
    terms = mha_terms(ours, query, value)
    bounds.assert_close(got[query_keep], want[query_keep], terms=terms)
    # Keras took its fused path: the padded queries are not the bias there.
    bias = theirs._output_dense.bias.numpy()
    assert np.abs(want[~query_keep] - bias).max() > 1e-3
    bounds.assert_close(
        got[~query_keep],
        np.broadcast_to(bias, got[~query_keep].shape),
        terms=terms,
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
    terms = mha_terms(ours, query, value)
    bounds.assert_close(
        default[1, 2], _keras_uniform_output(theirs, value)[1], terms=terms
    )
    assert np.abs(default[1, 2] - bias).max() > 1e-3
    scored, scores = call(theirs, return_attention_scores=True)
    bounds.assert_close(np.asarray(scored)[1, 2], bias, terms=terms)
    assert np.all(np.asarray(scores)[1, :, 2] == 0.0)
    bounds.assert_close(
        np.asarray(call(dropped, training=False))[1, 2], bias, terms=terms
    )
    got, weights = call(ours, return_attention_scores=True)
    got = np.asarray(got)
    bounds.assert_close(got[1, 2], bias, terms=terms)
    assert np.all(np.asarray(weights)[1, :, 2] == 0.0)
    bounds.assert_close(got, np.asarray(scored), terms=terms)
    bounds.assert_close(got[query_keep], default[query_keep], terms=terms)
