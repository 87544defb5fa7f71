"""Models built from tfattn layers."""

from tfattn.models.causal_lm import CausalLM
from tfattn.models.transformer import Transformer

__all__ = ["CausalLM", "Transformer"]
