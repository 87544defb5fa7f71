"""`Decoder`: N decoder blocks, with a cache for incremental decoding."""

import keras

from tfattn.utils import validation
from tfattn.layers.decoder_block import DecoderBlock
from tfattn.layers.encoder import Encoder

__all__ = ["Decoder"]


@keras.saving.register_keras_serializable(package="tfattn")
class Decoder(Encoder):
    """`num_layers` blocks (`DecoderBlock`); pre-norm stacks end with a
    layer norm.

    With `use_cross_attention=False` this is a GPT-style decoder: causal
    self-attention only, no encoder memory.

    Args:
        num_layers: int. Defaults to `6`.
        use_cross_attention: bool. Defaults to `True`.
        **kwargs: the other arguments of `EncoderBlock` (shared by every
            block) and base `keras.layers.Layer` arguments.

    Call arguments:
        - x: [B, T, C].
        - memory: [B, S, C] encoder output (with cross-attention, uncached).
        - padding_mask: bool [B, T], True = real target token, or None.
        - memory_padding_mask: bool [B, S], True = real source token, or None.
        - training: bool.
        - cache: list of per-block caches from `init_cache`, or None.
        - cache_index: scalar int tensor, the position of `x`'s first token.

    With `return_attention_scores=True` the call also returns the weights
    of every block: `{"decoder": [...], "cross": [...]}` (block 0 first;
    masked self-attention [B, H, T, T], cross-attention [B, H, T, S]; no
    "cross" without cross-attention).

    Returns:
        [B, T, C]; then the weights if asked; then the cache if one was
        passed.
    """

    _context = "Decoder"

    def __init__(self, use_cross_attention=True, **kwargs):
        """Checks the arguments; the blocks are created when built."""
        validation.check_bool(
            "use_cross_attention", use_cross_attention, self._context)
        super().__init__(**kwargs)
        self.use_cross_attention = use_cross_attention

    def build(self, x_shape, memory_shape=None):
        self.blocks = [
            DecoderBlock(
                use_cross_attention=self.use_cross_attention,
                **self._block_config(f"block_{i}"),
                dtype=self.dtype_policy,
                name=f"block_{i}",
            )
            for i in range(self.num_layers)
        ]
        for block in self.blocks:
            block.build(x_shape, memory_shape)
        if self.normalize_first:
            self.final_layer_norm = self._norm("final_layer_norm")
            self.final_layer_norm.build(x_shape)
        self.built = True

    def call(
        self,
        x,
        memory=None,
        padding_mask=None,
        memory_padding_mask=None,
        training=None,
        cache=None,
        cache_index=None,
        return_attention_scores=False,
    ):
        if cache is not None:
            self._check_cache(cache)
        new_cache = []
        scores = {"decoder": []}
        if self.use_cross_attention:
            scores["cross"] = []
        for i, block in enumerate(self.blocks):
            result = block(
                x, memory=memory, padding_mask=padding_mask,
                memory_padding_mask=memory_padding_mask, training=training,
                cache=None if cache is None else cache[i],
                cache_index=cache_index,
                return_attention_scores=return_attention_scores,
            )
            result = list(result) if isinstance(result, tuple) else [result]
            x = result.pop(0)
            if return_attention_scores:
                block_scores = result.pop(0)
                scores["decoder"].append(block_scores["self"])
                if self.use_cross_attention:
                    scores["cross"].append(block_scores["cross"])
            if cache is not None:
                new_cache.append(result.pop(0))
        if self.normalize_first:
            x = self.final_layer_norm(x)
        results = (x,)
        if return_attention_scores:
            results += (scores,)
        if cache is not None:
            results += (new_cache,)
        return results[0] if len(results) == 1 else results

    def init_cache(self, batch_size, max_length, memory=None,
                   memory_padding_mask=None):
        """One cache per block (see `DecoderBlock.init_cache`), as a list.

        Args:
            batch_size: int. The batch size B.
            max_length: int. The target positions each cache holds.
            memory: [B, S, C] encoder output, needed with cross-attention.
            memory_padding_mask: bool [B, S], True = real source token, or
                None.

        Returns:
            list of `num_layers` per-block cache dicts (block 0 first).
        """
        return [
            block.init_cache(
                batch_size, max_length, memory, memory_padding_mask)
            for block in self.blocks
        ]

    def _check_cache(self, cache):
        if (not isinstance(cache, (list, tuple))
                or len(cache) != self.num_layers):
            got = (len(cache) if isinstance(cache, (list, tuple))
                   else type(cache).__name__)
            raise validation.invalid_argument(
                "cache",
                f"a list of {self.num_layers} per-block caches from this "
                "decoder's `init_cache` (a cache from another model size?)",
                f"<{got} entries>",
                self._context,
            )

    def compute_output_shape(self, x_shape, memory_shape=None):
        return x_shape

    def get_config(self):
        config = super().get_config()
        config.update(use_cross_attention=self.use_cross_attention)
        return config
