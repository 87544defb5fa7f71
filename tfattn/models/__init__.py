"""Models built from tfattn layers."""

from tfattn.models.transformer import Transformer

__all__ = ["Transformer"]
