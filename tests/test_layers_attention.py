"""Tests of `tfattn.Attention`: each scoring function against NumPy written
here from the formulas (not from the layer), both soft modes, single and
sequence queries, heads, masks, dtypes, Keras, errors, serialization."""

import keras
import numpy as np
import pytest

import tfattn
from tests import bounds
from tests.harness import run_layer_test

RNG = np.random.default_rng(7)
B, T_Q, T_K = 2, 3, 5


def _split(x, heads):
    """[B, T, H·d] -> [B, H, T, d]."""
    b, t, c = x.shape
    return x.reshape(b, t, heads, c // heads).transpose(0, 2, 1, 3)


def numpy_attention(layer, q, k, v, keep=None):
    """α = softmax(s(k, q)) over unmasked keys (0 where a row has none),
    output Σ α v, per head, from the formulas and the layer's weights.
    Returns (output, α, the largest |score|: the logits' magnitude)."""
    heads = layer.num_heads
    single = q.ndim == 2
    if single:
        q = q[:, None]
    qh, kh, vh = (_split(x.astype(np.float64), heads) for x in (q, k, v))
    if layer.score == "dot":
        s = qh @ kh.swapaxes(-1, -2)
    elif layer.score == "scaled_dot":
        s = qh @ kh.swapaxes(-1, -2) / np.sqrt(kh.shape[-1])
    elif layer.score == "additive":
        w_k = layer.key_dense.kernel.numpy()  # W
        w_q = layer.query_dense.kernel.numpy()  # U
        w_s = layer.score_dense.kernel.numpy()  # v
        hidden = np.tanh(
            (kh @ w_k)[:, :, None, :, :] + (qh @ w_q)[:, :, :, None, :]
        )
        s = (hidden @ w_s)[..., 0]
    else:  # bilinear: kᵀ W q
        w = layer.bilinear_kernel.numpy()
        s = np.einsum("bhkd,de,bhqe->bhqk", kh, w, qh)
    logits = float(np.abs(s).max())
    if keep is not None:
        keep = np.broadcast_to(
            keep if keep.ndim == 3 else keep[:, None, :],
            (q.shape[0], q.shape[1], k.shape[1]),
        )
        keep = keep[:, None]
        s = np.where(keep, s, -np.inf)
    m = np.max(s, -1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(s - m)
    total = e.sum(-1, keepdims=True)
    w = np.divide(e, total, out=np.zeros_like(e), where=total > 0)
    out = (w @ vh).transpose(0, 2, 1, 3).reshape(q.shape[0], q.shape[1], -1)
    if heads == 1:
        w = w[:, 0]
    if single:
        out, w = out[:, 0], w[..., 0, :]
    return out, w, logits


def attention_terms(layer, q, k):
    """`bounds.assert_close` terms of an `Attention` output: the score of
    one (query, key) pair (a dot product over a head's width d; + 1 for the
    scale; additive: a projection over the wider of d_q and d_k, the sum
    and the tanh, then the score projection over `units`; bilinear: W q
    over d_q, then the dot product over d_k), then the softmax and the
    weighted sum over the T_k keys (2·T_k)."""
    d_q = q.shape[-1] // layer.num_heads
    d_k = k.shape[-1] // layer.num_heads
    score = {
        "dot": d_k,
        "scaled_dot": d_k + 1,
        "additive": max(d_q, d_k) + 2 + (layer.units or d_k),
        "bilinear": d_q + d_k,
    }[layer.score]
    return score + 2 * k.shape[1]


def _assert_differ(a, b, terms):
    """Dropout moved the outputs by more than the bound of a comparison."""
    a, b = np.asarray(a), np.asarray(b)
    assert np.abs(a - b).max() > bounds.bound(terms, np.abs(b).max())


def _inputs(score, heads, key_value):
    d_q = 8 if score in ("dot", "scaled_dot") else 12
    q = RNG.normal(size=(B, T_Q, d_q)).astype("float32")
    k = RNG.normal(size=(B, T_K, 8)).astype("float32")
    v = RNG.normal(size=(B, T_K, 4)).astype("float32") if key_value else None
    return q, k, v


def _padding():
    keep = np.ones((B, T_K), bool)
    keep[1, 3:] = False
    return keep


@pytest.mark.parametrize("score", ["dot", "scaled_dot", "additive", "bilinear"])
@pytest.mark.parametrize("heads", [1, 4])
@pytest.mark.parametrize("key_value", [False, True])
@pytest.mark.parametrize("single", [False, True])
@pytest.mark.parametrize("masked", [False, True])
def test_matches_numpy_from_the_formulas(
    score, heads, key_value, single, masked
):
    q, k, v = _inputs(score, heads, key_value)
    if single:
        q = q[:, 0]
    keep = _padding() if masked else None
    layer = tfattn.Attention(score=score, num_heads=heads)
    out, w = layer(q, k, v, mask=keep, return_attention_scores=True)
    want_out, want_w, logits = numpy_attention(
        layer, q, k, k if v is None else v, keep
    )
    assert out.shape == want_out.shape and w.shape == want_w.shape
    terms = attention_terms(layer, q, k)
    bounds.assert_close(out, want_out, terms=terms)
    # Probabilities move by at most their logits' error.
    bounds.assert_close(w, want_w, terms=terms, scale=max(1.0, logits))
    # The weights sum to 1 over the unmasked keys, 0 on the masked ones:
    # the softmax's sum, then this one, each over T_K.
    bounds.assert_close(np.sum(w, -1), 1.0, terms=2 * T_K)
    if masked:
        assert np.all(np.asarray(w)[1, ..., 3:] == 0)


def test_attention_mask_of_rank_3_and_causality():
    q, k, _ = _inputs("scaled_dot", 1, False)
    k = k[:, :T_Q]
    keep = RNG.random((1, T_Q, T_Q)) > 0.3
    keep[..., 0] = True
    causal = np.tril(np.ones((T_Q, T_Q), bool))
    layer = tfattn.Attention(causality=True)
    out, w = layer(q, k, mask=keep, return_attention_scores=True)
    want_out, want_w, logits = numpy_attention(layer, q, k, k, keep & causal)
    terms = attention_terms(layer, q, k)
    bounds.assert_close(out, want_out, terms=terms)
    bounds.assert_close(w, want_w, terms=terms, scale=max(1.0, logits))


def test_dot_equals_keras_attention():
    q, k, v = _inputs("dot", 1, True)
    keep = _padding()
    ours, w = tfattn.Attention(score="dot")(
        q, k, v, mask=keep, return_attention_scores=True
    )
    theirs, w_k = keras.layers.Attention(score_mode="dot", use_scale=False)(
        [q, v, k], mask=[None, keep], return_attention_scores=True
    )
    # The dot product over the width 8, the softmax and sum over T_K keys.
    terms = k.shape[-1] + 2 * T_K
    bounds.assert_close(ours, theirs, terms=terms)
    logits = np.abs(np.einsum("bqc,bkc->bqk", q, k)).max()
    bounds.assert_close(w, w_k, terms=terms, scale=max(1.0, logits))


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_fully_masked_query_gets_zero_weights_and_output(dtype):
    q, k, v = _inputs("scaled_dot", 1, True)
    keep = np.ones((B, T_Q, T_K), bool)
    keep[0, 1] = False  # Query 1 of row 0 may see no key.
    layer = tfattn.Attention(dtype=dtype)
    out, w = layer(q, k, v, mask=keep, return_attention_scores=True)
    out = np.asarray(keras.ops.cast(out, "float32"))
    w = np.asarray(w)
    assert w.dtype == np.float32  # The softmax runs in float32.
    assert np.all(np.isfinite(out)) and np.all(np.isfinite(w))
    assert np.all(w[0, 1] == 0) and np.all(out[0, 1] == 0)
    # The float32 softmax's sum, then this one, each over T_K.
    bounds.assert_close(w[0, 0].sum(), 1.0, terms=2 * T_K)


def test_keras_implicit_key_mask_is_read():
    ids = np.array([[3, 4, 5, 0, 0], [6, 7, 0, 0, 0]])
    token_ids = keras.Input((None,), dtype="int32")
    keys = keras.layers.Embedding(10, 8, mask_zero=True)(token_ids)
    query = keras.Input((8,))
    layer = tfattn.Attention()
    out, w = layer(query, keys, return_attention_scores=True)
    model = keras.Model([query, token_ids], [out, w])
    q = RNG.normal(size=(2, 8)).astype("float32")
    _, weights = model.predict([q, ids], verbose=0)
    np.testing.assert_array_equal(weights[ids == 0], 0)
    # The softmax's sum, then this one, each over the ids' length.
    bounds.assert_close(weights.sum(-1), 1.0, terms=2 * ids.shape[1])


@pytest.mark.slow
def test_layer_contract_and_keras_file():
    q, k, v = _inputs("additive", 2, True)
    run_layer_test(
        tfattn.Attention,
        dict(score="additive", units=6, num_heads=2, dropout_rate=0.1, seed=1),
        [q, k, v],
        (B, T_Q, 4),
        expected_num_trainable_weights=3,
        run_saving=True,
    )
    q, k, _ = _inputs("bilinear", 1, False)
    run_layer_test(
        tfattn.Attention,
        dict(score="bilinear"),
        [q[:, 0], k],
        (B, 8),
        expected_num_trainable_weights=1,
        run_saving=True,
    )


def test_weights_are_public_and_named():
    layer = tfattn.Attention(score="additive", units=5)
    layer(*_inputs("additive", 1, False)[:2])
    assert layer.key_dense.kernel.shape == (8, 5)
    assert layer.query_dense.kernel.shape == (12, 5)
    assert layer.score_dense.kernel.shape == (5, 1)
    assert not layer.key_dense.use_bias and not layer.score_dense.use_bias
    bilinear = tfattn.Attention(score="bilinear")
    bilinear(*_inputs("bilinear", 1, False)[:2])
    assert bilinear.bilinear_kernel.shape == (8, 12)


def test_dropout_only_in_training():
    q, k, _ = _inputs("scaled_dot", 1, False)
    layer = tfattn.Attention(dropout_rate=0.5, seed=3)
    # No dropout either way: the same kernels on the same inputs.
    np.testing.assert_array_equal(layer(q, k), layer(q, k, training=False))
    _assert_differ(
        layer(q, k, training=True), layer(q, k), attention_terms(layer, q, k)
    )


@pytest.mark.parametrize(
    "kwargs, call, message",
    [
        (dict(score="cosine"), None, "argument `score`"),
        (dict(units=0), None, "argument `units`"),
        (dict(num_heads=0), None, "argument `num_heads`"),
        (dict(dropout_rate=1.5), None, "argument `dropout_rate`"),
        (dict(score="dot"), dict(query=(B, T_Q, 6)), "argument `score`.*'dot'"),
        (dict(num_heads=3), {}, "argument `num_heads`.*divisor"),
        (dict(), dict(values=(B, T_K + 1, 4)), "argument `values`.*as many"),
        (dict(), dict(mask=(B, T_K + 1)), "argument `mask`"),
        (
            dict(),
            dict(mask=(B, T_K), mask_dtype="int32"),
            "argument `mask`.*bool",
        ),
        (dict(), dict(query=(B, 1, T_Q, 8)), "argument `query`.*rank"),
        (dict(), dict(query=(8,)), "argument `query`.*rank"),
    ],
)
def test_bad_input_names_the_argument(kwargs, call, message):
    with pytest.raises(ValueError, match=message):
        layer = tfattn.Attention(**kwargs)
        if call is None:
            return
        q = np.zeros(call.get("query", (B, T_Q, 8)), "float32")
        k = np.zeros((B, T_K, 8), "float32")
        v = np.zeros(call["values"], "float32") if "values" in call else None
        mask = None
        if "mask" in call:
            mask = np.ones(call["mask"], call.get("mask_dtype", "bool"))
        layer(q, k, v, mask=mask)


# ----------------------------------------------------------------------
# Attention whose query comes from outside: a GRU encoder-decoder.

PAD, BOS, EOS, FIRST, VOCAB, LONGEST = 0, 1, 2, 3, 13, 7


def _reverse_task(rng, n):
    """Digit sequences (3-7 tokens) -> the same reversed, then EOS."""
    source = np.zeros((n, LONGEST), "int32")
    target_in = np.zeros((n, LONGEST + 1), "int32")
    target_out = np.zeros((n, LONGEST + 1), "int32")
    for i in range(n):
        length = rng.integers(3, LONGEST + 1)
        reversed_ = rng.integers(FIRST, VOCAB, length)[::-1]
        source[i, :length] = reversed_[::-1]
        target_in[i, 0], target_in[i, 1 : length + 1] = BOS, reversed_
        target_out[i, :length], target_out[i, length] = reversed_, EOS
    return source, target_in, target_out


def gru_encoder_decoder(units=64):
    """Bahdanau-style: additive attention over the encoder's states, the
    query being the decoder's state; Keras layers and tfattn only."""
    source = keras.Input((None,), dtype="int32")
    target_in = keras.Input((None,), dtype="int32")
    embedded = keras.layers.Embedding(VOCAB, 32, mask_zero=True)(source)
    states, last = keras.layers.GRU(
        units, return_sequences=True, return_state=True
    )(embedded)
    decoder = keras.layers.Embedding(VOCAB, 32, mask_zero=True)(target_in)
    decoder = keras.layers.GRU(units, return_sequences=True)(
        decoder, initial_state=last
    )
    context = tfattn.Attention(score="additive")(decoder, states)
    logits = keras.layers.Dense(VOCAB)(
        keras.layers.Concatenate()([decoder, context])
    )
    return keras.Model([source, target_in], logits)


@pytest.mark.slow
def test_gru_encoder_decoder_with_additive_attention_learns_to_reverse():
    keras.utils.set_random_seed(0)
    source, target_in, target_out = _reverse_task(
        np.random.default_rng(0), 4000
    )
    model = gru_encoder_decoder()
    model.compile(
        keras.optimizers.Adam(3e-3),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    model.fit(
        [source, target_in], target_out, batch_size=64, epochs=3, verbose=0
    )
    # Greedy decoding of held-out sequences, one token at a time.
    test_source, _, test_target = _reverse_task(np.random.default_rng(1), 300)
    output = np.zeros((300, LONGEST + 2), "int32")
    output[:, 0] = BOS
    for t in range(LONGEST + 1):
        logits = model.predict_on_batch([test_source, output[:, : t + 1]])
        output[:, t + 1] = np.argmax(logits[:, t], -1)
    ends = np.argmax(test_target == EOS, -1)
    exact = np.mean(
        [
            np.array_equal(
                output[i, 1 : ends[i] + 2], test_target[i, : ends[i] + 1]
            )
            for i in range(300)
        ]
    )
    assert exact >= 0.9
