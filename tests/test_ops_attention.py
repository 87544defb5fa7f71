"""Tests of tfattn.ops.attention (the shared attention core)."""

import numpy as np
import pytest

from tests.harness import FLOAT32_EPS
from tfattn.ops import attention

# Run again by .ci/run under tests/cpu_limits.AVX2_LIMITS.
pytestmark = pytest.mark.cpu_sensitive


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
    np.testing.assert_allclose(w, want_w, atol=1e-6)
    np.testing.assert_allclose(out, want_w @ v, atol=1e-5)


def test_fully_masked_row_is_uniform_and_dropout_is_applied_after_weights():
    q = np.ones((1, 1, 2, 4), "float32")
    out, w = attention.scaled_dot_product_attention(
        q, q, q * 3.0, mask=np.zeros((2, 2), bool), dropout=lambda p: p * 0.0
    )
    np.testing.assert_allclose(w, np.full((1, 1, 2, 2), 0.5))
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
    # oneDNN may block the d-term score sums differently (by CPU). A score's
    # error is at most d * EPS * sum_c |q_c k_c| / sqrt(d); softmax turns it
    # into a relative weight error of about twice that, plus T_k * EPS from
    # the normalising sum.
    d, t_k = q.shape[-1], k.shape[-2]
    magnitudes = np.abs(q.numpy()) @ np.abs(k.numpy()).swapaxes(-1, -2)
    score_error = d * FLOAT32_EPS * magnitudes.max() / np.sqrt(d)
    weight_atol = 2 * score_error + t_k * FLOAT32_EPS
    for chunk in (3, 5):
        c_out, c_w, c_grads = run(chunk)
        np.testing.assert_allclose(c_out, out, atol=1e-6)
        np.testing.assert_allclose(c_w, w, atol=weight_atol)
        for a, b in zip(c_grads, grads):
            np.testing.assert_allclose(a, b, atol=1e-5)


def test_auto_chunking_threshold():
    assert attention._chunk_size("auto", 1024, 1024) is None
    assert (
        attention._chunk_size("auto", 4096, 1024) == attention.AUTO_CHUNK_SIZE
    )
    assert attention._chunk_size(None, 8192, 8192) is None
    assert attention._chunk_size(16, 8, 8) is None  # shorter than one chunk
    assert attention._chunk_size("auto", None, 8192) is None
