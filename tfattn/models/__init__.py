"""Models built from tfattn layers."""

from tfattn.models.causal_lm import CausalLM
from tfattn.models.classifier import SequenceClassifier
from tfattn.models.masked_lm import MaskedLM
from tfattn.models.text_encoder import TextEncoder
from tfattn.models.transformer import Transformer

__all__ = ["CausalLM", "MaskedLM", "SequenceClassifier", "TextEncoder",
           "Transformer"]
