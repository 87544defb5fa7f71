"""The one scaled dot-product attention core every tfattn layer calls.

Layout: B = batch, H = heads, T_q / T_k = query / key length, d = per-head
width. Inputs are head-major [B, H, T, d]; this is the same head layout as the
reference's split-and-concat on the batch axis (head i owns channels
[i*d, (i+1)*d)), only stored per batch element (REFERENCE_SPEC §5).

Precision: the two matmuls run in the inputs' dtype (so bfloat16 inputs use
the CPU's bfloat16 matrix units), while masking and the softmax always run in
float32. The referenced constant -2**32+1 therefore stays finite under
`mixed_float16`, a query whose keys are all masked gets uniform weights as in
the reference (never NaN), and float32 keeps the reference's exact numbers.
"""

from keras import ops

from tfattn.ops.masking import REFERENCE_MASK_VALUE


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

    Returns:
        (output [B, H, T_q, d_v] in the value dtype, weights [B, H, T_q, T_k]
        float32, before dropout).
    """
    if scale is None:
        scale = 1.0 / float(query.shape[-1]) ** 0.5
    # Scaling Q (B·T·d values) is cheaper than scaling the scores (B·T_q·T_k).
    query = query * ops.cast(scale, query.dtype)
    scores = ops.matmul(query, ops.swapaxes(key, -1, -2))
    scores = ops.cast(scores, "float32")
    if bias is not None:
        scores = scores + ops.cast(bias, "float32")
    if mask is not None:
        scores = ops.where(mask, scores, ops.cast(mask_value, "float32"))
    weights = ops.softmax(scores, axis=-1)
    if probs_multiplier is not None:
        weights = weights * ops.cast(probs_multiplier, "float32")
    probs = weights if dropout is None else dropout(weights)
    output = ops.matmul(ops.cast(probs, value.dtype), value)
    return output, weights


def split_heads(x, num_heads):
    """[B, T, H·d] -> [B, H, T, d]; head i takes channels [i·d, (i+1)·d)."""
    batch, length = ops.shape(x)[0], ops.shape(x)[1]
    x = ops.reshape(x, (batch, length, num_heads, x.shape[-1] // num_heads))
    return ops.transpose(x, (0, 2, 1, 3))


def merge_heads(x):
    """[B, H, T, d] -> [B, T, H·d], the inverse of `split_heads`."""
    x = ops.transpose(x, (0, 2, 1, 3))
    batch, length = ops.shape(x)[0], ops.shape(x)[1]
    return ops.reshape(x, (batch, length, x.shape[2] * x.shape[3]))
