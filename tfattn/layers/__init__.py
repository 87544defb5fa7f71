"""Public Keras layers, one per module."""

from tfattn.layers.attention import Attention
from tfattn.layers.decoder import Decoder
from tfattn.layers.decoder_block import DecoderBlock
from tfattn.layers.dropout import Dropout
from tfattn.layers.encoder import Encoder
from tfattn.layers.encoder_block import EncoderBlock
from tfattn.layers.feed_forward import FeedForward
from tfattn.layers.hard_attention import HardAttention
from tfattn.layers.layer_normalization import LayerNormalization
from tfattn.layers.multi_head_attention import MultiHeadAttention
from tfattn.layers.positional_encoding import PositionalEncoding
from tfattn.layers.token_embedding import TokenEmbedding

__all__ = ["Attention", "Decoder", "DecoderBlock", "Dropout", "Encoder",
           "EncoderBlock", "FeedForward", "HardAttention", "LayerNormalization",
           "MultiHeadAttention", "PositionalEncoding", "TokenEmbedding"]
