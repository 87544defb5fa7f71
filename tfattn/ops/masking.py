"""Mask helpers shared by every tfattn layer.

Polarity: every mask built or returned here uses the Keras convention,
**True = keep / may attend**, unless a function name says otherwise
(`reference_key_mask_bias` takes the 2019 reference's True = padding mask).

Shapes: B = batch, T_q = query length, T_k = key length, H = heads. Masks are
kept as small as their meaning allows ([B, T_k] for padding, [T_q, T_k] for
causality) and only broadcast against the [B, H, T_q, T_k] scores at the point
of use, so a causal mask never costs a [B, T_q, T_k] tensor.
"""

import numpy as np
from keras import ops

__all__ = ["REFERENCE_MASK_VALUE", "as_score_mask", "causal_mask",
           "combine_masks", "implicit_mask", "nonzero_rows", "padding_mask",
           "reference_key_mask_bias", "sliding_window_mask",
           "with_implicit_mask"]

# The referenced code's mask constant, -2**32 + 1. As float32 it rounds to
# -4294967296.0, and float32(P + s) == P for |s| < 256 (docs/reference.md §5).
REFERENCE_MASK_VALUE = float(-(2**32) + 1)


def padding_mask(ids, pad_id=0):
    """Keep-mask of the non-padding positions of token ids.

    Args:
        ids: int tensor [B, T].
        pad_id: int. The padding id. Defaults to `0`.

    Returns:
        bool [B, T], True where `ids != pad_id`.
    """
    return ops.not_equal(ids, pad_id)


def implicit_mask(x):
    """The Keras implicit mask carried by tensor `x` (True = keep), or None.

    Keras layers such as `Embedding(mask_zero=True)` attach it as the
    `_keras_mask` attribute; Keras 3 has no public getter for it.

    Args:
        x: tensor, or any object.

    Returns:
        The bool mask `x` carries, or None.
    """
    return getattr(x, "_keras_mask", None)


def with_implicit_mask(x, mask):
    """`x` carrying `mask` as its Keras implicit mask (as Keras layers
    attach it); `x` unchanged when `mask` is None.

    Args:
        x: tensor. Its `_keras_mask` attribute is set in place.
        mask: bool tensor (True = keep) or None.

    Returns:
        `x`.
    """
    if mask is not None:
        x._keras_mask = mask
    return x


def nonzero_rows(x):
    """Keep-mask of the rows of `x` that are not all zeros.

    This is how the 2017 reference (spec §1.4 step 5, G1b) finds padding: a
    position is masked exactly when every feature of the layer *input* is 0,
    i.e. `sign(sum_c |x[b, t, c]|) == 0`.

    Args:
        x: float tensor [B, T, C].

    Returns:
        bool [B, T].
    """
    return ops.not_equal(ops.sum(ops.abs(x), axis=-1), 0)


def causal_mask(query_length, key_length, query_offset=0):
    """Lower-triangular keep-mask, diagonal included.

    Query i sits at absolute position `query_offset + i` and may see keys
    `0 .. query_offset + i`. With `query_offset=0` this is the reference's
    `tril(ones([T_q, T_k]))` (spec §1.4 step 6, §2.4 step 3). A tensor offset
    keeps shapes static for cached decoding.

    Args:
        query_length: int or scalar int tensor T_q.
        key_length: int or scalar int tensor T_k.
        query_offset: int or scalar int tensor. Defaults to `0`.

    Returns:
        bool [T_q, T_k].
    """
    rows = ops.expand_dims(ops.arange(query_length, dtype="int32"), 1)
    cols = ops.expand_dims(ops.arange(key_length, dtype="int32"), 0)
    return ops.greater_equal(rows + ops.cast(query_offset, "int32"), cols)


def sliding_window_mask(query_length, key_length, window, query_offset=0):
    """bool [T_q, T_k]: True where abs(query position - key position) <
    `window`, query i sitting at position `query_offset + i` (Keras's
    `sliding_window` band).

    Args:
        query_length: int or scalar int tensor T_q.
        key_length: int or scalar int tensor T_k.
        window: int. The band's half-width (exclusive).
        query_offset: int or scalar int tensor. Defaults to `0`.

    Returns:
        bool [T_q, T_k].
    """
    rows = ops.expand_dims(ops.arange(query_length, dtype="int32"), 1)
    cols = ops.expand_dims(ops.arange(key_length, dtype="int32"), 0)
    distance = rows + ops.cast(query_offset, "int32") - cols
    return ops.less(ops.abs(distance), window)


def combine_masks(*masks):
    """Logical AND of keep-masks that broadcast together; Nones are skipped.

    Args:
        *masks: keep-masks (cast to bool) or None.

    Returns:
        The combined bool mask, or `None` when every input is `None`.
    """
    combined = None
    for mask in masks:
        if mask is None:
            continue
        mask = ops.cast(mask, "bool")
        combined = mask if combined is None else ops.logical_and(combined, mask)
    return combined


def as_score_mask(
    padding=None, query_padding=None, attention=None, causal=None
):
    """Combines masks of the layer-level shapes into one [.., T_q, T_k] mask.

    Args:
        padding: bool [B, T_k] keep-mask of the keys, or None.
        query_padding: bool [B, T_q] keep-mask of the queries, or None.
        attention: bool keep-mask [T_q, T_k], [B or 1, T_q, T_k] or [B or
            1, H or 1, T_q, T_k] (Keras's shapes), or None.
        causal: bool [T_q, T_k] keep-mask, or None.

    Returns:
        A bool mask that broadcasts against scores [B, H, T_q, T_k] (its rank
        is 4 or 2), or None. Nothing larger than the inputs' own broadcast is
        built: a causal mask alone stays [T_q, T_k].
    """
    parts = []
    if padding is not None:
        parts.append(padding[:, None, None, :])
    if query_padding is not None:
        parts.append(query_padding[:, None, :, None])
    if attention is not None:
        rank = len(attention.shape)
        if rank == 2:
            attention = attention[None, None, :, :]
        elif rank == 3:
            attention = attention[:, None, :, :]
        parts.append(attention)
    if causal is not None:
        parts.append(causal if not parts else causal[None, None, :, :])
    return combine_masks(*parts)


def reference_key_mask_bias(key_masks, dtype="float32"):
    """The 2019 reference's additive key mask, `key_masks * P` (spec §2.4).

    Args:
        key_masks: bool [B, T_k], **True = padding** (the reference's polarity).

    Returns:
        float [B, 1, 1, T_k], P where padded and 0 elsewhere.
    """
    bias = ops.cast(key_masks, dtype) * np.asarray(REFERENCE_MASK_VALUE, dtype)
    return bias[:, None, None, :]
