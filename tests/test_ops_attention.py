"""Tests of tfattn.ops.attention (the shared attention core)."""

import numpy as np

from tests import bounds
from tfattn.ops import attention


def _softmax(s):
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_core_matches_numpy_with_mask_bias_and_multiplier():
    rng = np.random.default_rng(0)
    q, k, v = (
        rng.normal(size=(2, 3, 4, 5)).astype("float32") for _ in range(3)
    )
    mask = rng.random((2, 1, 4, 4)) > 0.3
    bias = rng.normal(size=(2, 1, 1, 4)).astype("float32")
    mult = (rng.random((2, 1, 4, 1)) > 0.5).astype("float32")
    out, w = attention.scaled_dot_product_attention(
        q, k, v, mask=mask, bias=bias, probs_multiplier=mult
    )
    s = np.einsum("bhqd,bhkd->bhqk", q, k) / np.sqrt(5) + bias
    s = np.where(mask, s, np.float32(-4294967296.0))
    want_w = _softmax(s) * mult
    d, t_k = q.shape[-1], k.shape[-2]
    # Weights: the scores' sum over d, the softmax's over T_k; a weight
    # moves by at most its logits' error, so their magnitude is the scale.
    logits = np.abs(np.where(mask, s, 0.0)).max()
    bounds.assert_close(w, want_w, terms=d + t_k, scale=logits)
    bounds.assert_close(out, want_w @ v, terms=d + 2 * t_k)


def test_fully_masked_row_is_uniform_and_dropout_is_applied_after_weights():
    q = np.ones((1, 1, 2, 4), "float32")
    out, w = attention.scaled_dot_product_attention(
        q, q, q * 3.0, mask=np.zeros((2, 2), bool), dropout=lambda p: p * 0.0
    )
    # Equal logits: the softmax's normalising sum over the T_k keys.
    bounds.assert_close(w, np.full((1, 1, 2, 2), 0.5), terms=w.shape[-1])
    np.testing.assert_array_equal(out, np.zeros_like(out))


def test_bfloat16_inputs_keep_float32_weights():
    import keras

    q = keras.ops.cast(np.ones((1, 1, 2, 4)), "bfloat16")
    out, w = attention.scaled_dot_product_attention(q, q, q)
    assert str(out.dtype) == "<dtype: 'bfloat16'>" or "bfloat16" in str(
        out.dtype
    )
    assert "float32" in str(w.dtype)


def test_split_and_merge_heads_layout():
    x = np.arange(2 * 3 * 6, dtype="float32").reshape(2, 3, 6)
    heads = np.asarray(attention.split_heads(x, 3))
    assert heads.shape == (2, 3, 3, 2)
    np.testing.assert_array_equal(
        heads[:, 1], x[:, :, 2:4]
    )  # head 1 = channels 2..3
    np.testing.assert_array_equal(attention.merge_heads(heads), x)


def test_query_chunks_give_the_same_outputs_and_gradients():
    import tensorflow as tf

    from tfattn.ops import masking

    rng = np.random.default_rng(1)
    q, k, v = (
        tf.constant(rng.normal(size=(2, 2, 7, 4)).astype("float32"))
        for _ in range(3)
    )
    pad = np.ones((2, 7), bool)
    pad[1, -2:] = False
    mask = masking.as_score_mask(padding=pad, causal=masking.causal_mask(7, 7))
    bias = rng.normal(size=(2, 1, 1, 7)).astype("float32")
    mult = rng.random((2, 1, 7, 1)).astype("float32")

    def run(chunk):
        with tf.GradientTape() as tape:
            tape.watch([q, k, v])
            out, w = attention.scaled_dot_product_attention(
                q,
                k,
                v,
                mask=mask,
                bias=bias,
                probs_multiplier=mult,
                query_chunk_size=chunk,
            )
            loss = tf.reduce_sum(out**2)
        return out, w, tape.gradient(loss, [q, k, v])

    out, w, grads = run(None)
    # Chunks of 3 or 5 queries are other matmul shapes than 7, for which
    # oneDNN may block the d-term score sums differently (by CPU). A weight
    # moves by at most its logits' error: the score sum over d terms of
    # magnitude sum_c |q_c k_c| / sqrt(d) (+ the bias), then the softmax's
    # normalising sum over T_k.
    d, t_q, t_k = q.shape[-1], q.shape[-2], k.shape[-2]
    magnitudes = np.abs(q.numpy()) @ np.abs(k.numpy()).swapaxes(-1, -2)
    logits = magnitudes.max() / np.sqrt(d) + np.abs(bias).max()
    # The gradients: the forward chain (d + 2 T_k), then back through
    # A·V (d), the softmax (T_k), and Q Kᵀ (T_k for dQ, T_q for dK).
    grad_terms = 2 * d + 3 * t_k + max(t_q, t_k)
    for chunk in (3, 5):
        c_out, c_w, c_grads = run(chunk)
        bounds.assert_close(c_out, out, terms=d + 2 * t_k)
        bounds.assert_close(c_w, w, terms=d + t_k, scale=logits)
        for a, b in zip(c_grads, grads):
            bounds.assert_close(a, b, terms=grad_terms)


def test_auto_chunking_threshold():
    assert attention._chunk_size("auto", 1024, 1024) is None
    assert (
        attention._chunk_size("auto", 4096, 1024) == attention.AUTO_CHUNK_SIZE
    )
    assert attention._chunk_size(None, 8192, 8192) is None
    assert attention._chunk_size(16, 8, 8) is None  # shorter than one chunk
    assert attention._chunk_size("auto", None, 8192) is None
