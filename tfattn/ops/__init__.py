"""Functions (not layers) shared by tfattn's layers: masks, dropout and
the attention core."""

from tfattn.ops.attention import merge_heads
from tfattn.ops.attention import scaled_dot_product_attention
from tfattn.ops.attention import split_heads
from tfattn.ops.masking import REFERENCE_MASK_VALUE
from tfattn.ops.masking import causal_mask
from tfattn.ops.masking import combine_masks
from tfattn.ops.masking import nonzero_rows
from tfattn.ops.masking import padding_mask

__all__ = ["REFERENCE_MASK_VALUE", "causal_mask", "combine_masks",
           "merge_heads", "nonzero_rows", "padding_mask",
           "scaled_dot_product_attention", "split_heads"]
