"""The one scaled dot-product attention core every tfattn layer calls.

Layout: B = batch, H = heads, T_q / T_k = query / key length, d = per-head
width. Inputs are head-major [B, H, T, d]; this is the same head layout as the
reference's split-and-concat on the batch axis (head i owns channels
[i*d, (i+1)*d)), only stored per batch element (docs/reference.md §5).

Precision: the two matmuls run in the inputs' dtype (so bfloat16 inputs use
the CPU's bfloat16 matrix units), while masking and the softmax always run in
float32. The referenced constant -2**32+1 therefore stays finite under
`mixed_float16`, a query whose keys are all masked gets uniform weights as in
the reference, or all-zero weights as Keras's `MultiHeadAttention` gives when
it computes scores explicitly (its fused default path gives uniform ones)
(`fully_masked`), never NaN, and float32 keeps the reference's exact numbers.
"""

import keras
from keras import ops

from tfattn.ops.masking import REFERENCE_MASK_VALUE

__all__ = ["AUTO_CHUNK_MIN_SCORES", "AUTO_CHUNK_SIZE", "masked_softmax",
           "merge_heads", "scaled_dot_product_attention", "split_heads"]

# `query_chunk_size="auto"` chunks only long attention: at least this many
# scores per batch element and head (2048 x 2048), where the [T_q, T_k]
# matrices, not the projections, dominate memory.
AUTO_CHUNK_MIN_SCORES = 2048 * 2048
AUTO_CHUNK_SIZE = 512


def scaled_dot_product_attention(
    query,
    key,
    value,
    mask=None,
    bias=None,
    probs_multiplier=None,
    dropout=None,
    scale=None,
    mask_value=REFERENCE_MASK_VALUE,
    query_chunk_size=None,
    return_weights=True,
    fully_masked="uniform",
):
    """softmax(Q Kᵀ · scale + bias, masked) · V.

    Args:
        query: [B, H, T_q, d].
        key: [B, H, T_k, d].
        value: [B, H, T_k, d_v].
        mask: bool keep-mask broadcastable to [B, H, T_q, T_k] (True = may
            attend), or None. Masked scores are *replaced* by `mask_value`,
            as the reference does (spec §1.4 steps 5-6).
        bias: float tensor broadcastable to the scores, *added* before the
            mask, or None (the 2019 reference's additive key mask, §2.4).
        probs_multiplier: float tensor broadcastable to the weights, multiplied
            after the softmax, or None (the 2017 query mask, §1.4 step 8).
        dropout: callable applied to the weights before A·V, or None.
        scale: float. Defaults to `1/sqrt(d)`. Applied to the query.
        mask_value: float. Defaults to the reference's -2**32+1.
        query_chunk_size: None, an int, or "auto". Process the queries in
            chunks of this many positions, each chunk's scores recomputed in
            the backward pass instead of stored (`keras.remat`:
            `tf.recompute_grad`, `jax.checkpoint`, PyTorch's checkpoint), so
            peak memory holds one chunk's [B, H, chunk, T_k] scores instead of
            all [B, H, T_q, T_k]. The numbers are the same. "auto" chunks by
            512 when T_q·T_k >= 2048². Ignored with `dropout` (recomputation
            would draw a new dropout mask) or an unknown static T_q.
        return_weights: bool. With False, `weights` is None (saves memory in
            the chunked path, which would otherwise concatenate them).
        fully_masked: `"uniform"` or `"zero"`: the weights of a query whose
            keys are all masked (see `masked_softmax`).

    Returns:
        (output [B, H, T_q, d_v] in the value dtype, weights [B, H, T_q, T_k]
        float32, before dropout, or None).
    """
    if scale is None:
        scale = 1.0 / float(query.shape[-1]) ** 0.5
    chunk = _chunk_size(query_chunk_size, query.shape[2], key.shape[2])
    if chunk is not None and dropout is None:
        return _chunked_attention(
            query, key, value, mask, bias, probs_multiplier, scale, mask_value,
            chunk, return_weights, fully_masked,
        )
    # Scaling Q (B·T·d values) is cheaper than scaling the scores (B·T_q·T_k).
    query = query * ops.cast(scale, query.dtype)
    scores = ops.matmul(query, ops.swapaxes(key, -1, -2))
    if bias is not None:
        scores = ops.cast(scores, "float32") + ops.cast(bias, "float32")
    weights = masked_softmax(scores, mask, mask_value, fully_masked)
    if probs_multiplier is not None:
        weights = weights * ops.cast(probs_multiplier, "float32")
    probs = weights if dropout is None else dropout(weights)
    output = ops.matmul(ops.cast(probs, value.dtype), value)
    return output, (weights if return_weights else None)


def masked_softmax(scores, mask=None, mask_value=REFERENCE_MASK_VALUE,
                   fully_masked="uniform"):
    """Attention weights from scores, in float32: softmax over the last axis
    (the keys) of the scores with masked entries replaced by `mask_value`.

    Args:
        scores: float tensor [..., T_q, T_k], any float dtype.
        mask: bool keep-mask broadcastable to `scores` (True = may attend),
            or None.
        mask_value: float. Defaults to the reference's -2**32+1, whose exp
            is exactly 0 next to any unmasked score.
        fully_masked: `"uniform"` (the referenced code: a query that may see
            no key weighs them all 1/T_k) or `"zero"` (all-zero weights, so
            the output is 0: Keras 3.15's `Softmax` with a mask, which its
            `MultiHeadAttention` uses only when it computes scores
            explicitly; its fused `ops.dot_product_attention` gives uniform
            weights).

    Returns:
        float32 weights of the shape of `scores`.
    """
    if fully_masked not in ("uniform", "zero"):
        raise ValueError("Received an invalid value for argument "
                         "`fully_masked`, expected 'uniform' or 'zero'. "
                         f"Received: fully_masked={fully_masked!r}")
    scores = ops.cast(scores, "float32")
    if mask is None:
        return ops.softmax(scores, axis=-1)
    weights = ops.softmax(
        ops.where(mask, scores, ops.cast(mask_value, "float32")), axis=-1)
    if fully_masked == "zero":
        # Masked keys already weigh exactly 0 unless all of a row's are.
        weights = ops.where(mask, weights, ops.zeros_like(weights))
    return weights


def _chunk_size(query_chunk_size, query_length, key_length):
    if query_chunk_size is None or query_length is None:
        return None
    if query_chunk_size == "auto":
        if (key_length is None
                or query_length * key_length < AUTO_CHUNK_MIN_SCORES):
            return None
        query_chunk_size = AUTO_CHUNK_SIZE
    return query_chunk_size if query_length > query_chunk_size else None


def _query_slice(tensor, start, stop):
    """Slices the T_q axis (second to last) of a mask-like tensor if it has
    one."""
    if tensor is None or tensor.shape[-2] == 1:
        return tensor
    return tensor[..., start:stop, :]


def _chunked_attention(
    query, key, value, mask, bias, probs_multiplier, scale, mask_value, chunk,
    return_weights, fully_masked,
):
    outputs, weights = [], []
    length = query.shape[2]
    for start in range(0, length, chunk):
        stop = min(start + chunk, length)
        chunk_mask = _query_slice(mask, start, stop)
        chunk_bias = _query_slice(bias, start, stop)
        chunk_multiplier = _query_slice(probs_multiplier, start, stop)

        def attend(q, k, v, chunk_mask=chunk_mask, chunk_bias=chunk_bias,
                   chunk_multiplier=chunk_multiplier):
            out, _ = scaled_dot_product_attention(
                q, k, v, mask=chunk_mask, bias=chunk_bias,
                probs_multiplier=chunk_multiplier, scale=scale,
                mask_value=mask_value, return_weights=False,
                fully_masked=fully_masked,
            )
            return out

        q = query[:, :, start:stop]
        outputs.append(keras.remat(attend)(q, key, value))
        if return_weights:
            _, w = scaled_dot_product_attention(
                q, key, value, mask=chunk_mask, bias=chunk_bias,
                probs_multiplier=chunk_multiplier, scale=scale,
                mask_value=mask_value, fully_masked=fully_masked,
            )
            weights.append(w)
    output = ops.concatenate(outputs, axis=2)
    return output, (
        ops.concatenate(weights, axis=2) if return_weights else None)


def split_heads(x, num_heads):
    """[B, T, H·d] -> [B, H, T, d]; head i takes channels [i·d, (i+1)·d).

    Args:
        x: tensor [B, T, H·d], of static width.
        num_heads: int. The number of heads H; divides the width.

    Returns:
        tensor [B, H, T, d].
    """
    batch, length = ops.shape(x)[0], ops.shape(x)[1]
    x = ops.reshape(x, (batch, length, num_heads, x.shape[-1] // num_heads))
    return ops.transpose(x, (0, 2, 1, 3))


def merge_heads(x):
    """[B, H, T, d] -> [B, T, H·d], the inverse of `split_heads`.

    Args:
        x: tensor [B, H, T, d], of static H and d.

    Returns:
        tensor [B, T, H·d].
    """
    x = ops.transpose(x, (0, 2, 1, 3))
    batch, length = ops.shape(x)[0], ops.shape(x)[1]
    return ops.reshape(x, (batch, length, x.shape[2] * x.shape[3]))
