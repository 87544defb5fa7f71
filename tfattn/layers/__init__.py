"""Public Keras layers, one per module."""

from tfattn.layers.multi_head_attention import MultiHeadAttention
