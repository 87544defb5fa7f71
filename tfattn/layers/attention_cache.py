"""Incremental decoding of `MultiHeadAttention`: its key/value cache, and
the write of a call's keys and values into it (`write_cache`).

Shapes: B = batch, H = heads, T_k = key length, d = per-head width.
"""

from keras import ops

from tfattn.ops import attention as attention_ops

__all__ = ["AttentionCacheMixin", "write_cache"]


class AttentionCacheMixin:
    """The cache methods of `MultiHeadAttention` (every flavour): an empty
    self-attention cache, keys projected once for cross-attention, and the
    projection of a call's keys and values through the cache.

    Uses the layer's `key_dense`, `value_dense`, `num_heads`, `units`,
    `value_units` and its flavour's steps (`key_keep`,
    `check_values_allowed`).
    """

    def init_cache(self, batch_size, max_length):
        """An empty self-attention cache for incremental decoding.

        Args:
            batch_size: int. The batch size B.
            max_length: int. The number of positions the cache holds.

        Returns:
            dict with "key" and "value" [B, H, max_length, d] zeros in the
            compute dtype, and "keep" bool [B, max_length] all False. Pass it
            as `cache` with `cache_index` = the position of the first query;
            the layer writes the new keys there and returns the updated cache.
        """
        shape = (batch_size, self.num_heads, max_length,
                 self.units // self.num_heads)
        value_shape = shape[:3] + (self.value_units // self.num_heads,)
        return {
            "key": ops.zeros(shape, self.compute_dtype),
            "value": ops.zeros(value_shape, self.compute_dtype),
            "keep": ops.zeros((batch_size, max_length), "bool"),
        }

    def precompute_cache(self, keys, values=None, key_masks=None,
                         padding_mask=None):
        """Projects fixed keys/values once (cross-attention over a memory).

        Args:
            keys: tensor [B, T_k, C_k]. The memory the queries attend to.
            values: tensor [B, T_k, C_v] or None (the keys). Not accepted
                by `reference_2017`, whose V is projected from the keys.
            key_masks: bool [B, T_k], True = padding (`reference_2019`),
                or None.
            padding_mask: bool [B, T_k], True = a real key, or None.

        Returns:
            dict with "key" and "value" [B, H, T_k, d] and "keep" bool
            [B, T_k]; pass it as `cache` with `cache_index=None`.
        """
        values = keys if values is None else values
        if values is not keys:
            self._flavor_steps.check_values_allowed(values.shape)
        key = attention_ops.split_heads(self.key_dense(keys), self.num_heads)
        value = attention_ops.split_heads(self.value_dense(values),
                                          self.num_heads)
        keep = self._flavor_steps.key_keep(keys, values, key_masks,
                                           padding_mask)
        if keep is None:
            keep = ops.ones(ops.shape(keys)[:2], "bool")
        return {"key": key, "value": value, "keep": keep}

    def _keys_and_values(self, keys, values, key_masks, padding_mask, cache,
                         cache_index):
        """The heads' keys and values [B, H, T_k, d], the keys' keep-mask
        [B, T_k] (or None), the updated cache and the first query's
        position."""
        if cache is not None and cache_index is None:
            # Cross-attention over keys projected once (`precompute_cache`).
            return cache["key"], cache["value"], cache["keep"], cache, 0
        key = attention_ops.split_heads(self.key_dense(keys), self.num_heads)
        value = attention_ops.split_heads(self.value_dense(values),
                                          self.num_heads)
        key_keep = self._flavor_steps.key_keep(keys, values, key_masks,
                                               padding_mask)
        if cache is None:
            return key, value, key_keep, cache, 0
        cache = write_cache(cache, cache_index, key, value, key_keep)
        return cache["key"], cache["value"], cache["keep"], cache, cache_index


def write_cache(cache, cache_index, key, value, key_keep):
    """Writes new keys/values at `cache_index` (a scalar tensor, XLA-safe).

    Args:
        cache: dict. The cache from `init_cache`: "key" and "value"
            [B, H, L, d], "keep" bool [B, L].
        cache_index: scalar int tensor. The position of the first new key.
        key: tensor [B, H, T, d]. The new keys, split into heads.
        value: tensor [B, H, T, d_v]. The new values, split into heads.
        key_keep: bool [B, T] keep-mask of the new keys, or None (all
            kept).

    Returns:
        dict. The updated cache, of the same keys and shapes.
    """
    index = ops.cast(cache_index, "int32")
    zero = ops.zeros((), "int32")
    if key_keep is None:
        key_keep = ops.ones(ops.shape(key)[0:1] + ops.shape(key)[2:3], "bool")
    return {
        "key": ops.slice_update(
            cache["key"], (zero, zero, index, zero),
            ops.cast(key, cache["key"].dtype),
        ),
        "value": ops.slice_update(
            cache["value"], (zero, zero, index, zero),
            ops.cast(value, cache["value"].dtype),
        ),
        "keep": ops.slice_update(cache["keep"], (zero, index), key_keep),
    }
