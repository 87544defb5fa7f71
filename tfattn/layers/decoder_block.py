"""`DecoderBlock`: masked self-attention, encoder-decoder attention,
feed-forward."""

import keras

from tfattn.utils import validation
from tfattn.layers.block_base import BlockBase
from tfattn.ops import _backend
from tfattn.ops import masking

__all__ = ["DecoderBlock"]


@keras.saving.register_keras_serializable(package="tfattn")
class DecoderBlock(BlockBase):
    """One decoder block, with an optional key/value cache for decoding.

    Shapes: B = batch, T = target length, S = memory (source) length, C =
    width, L = cache length.

    Sublayers: causal self-attention (`self_attention`), then, when
    `use_cross_attention=True`, attention whose keys and values are the
    encoder's output (`cross_attention`), then `feed_forward`; each wired as
    in `EncoderBlock`. With `use_cross_attention=False` the block is a
    GPT-style decoder block (each token sees only its left context).

    Args:
        use_cross_attention: bool or None. None (default) decides when the
            block is built, as keras-hub's `TransformerDecoder` does: with
            cross-attention when the first call passes `memory`, GPT-style
            without it otherwise; later calls must agree.
        **kwargs: the other arguments of `EncoderBlock` and base
            `keras.layers.Layer` arguments.

    Call arguments:
        - x: [B, T, C].
        - memory: [B, S, C_m] encoder output, needed with cross-attention
          unless the cache holds it.
        - padding_mask: bool [B, T], True = real target token, or None.
        - memory_padding_mask: bool [B, S], True = real source token, or None.
        - decoder_attention_mask: bool [T, T], [B or 1, T, T] or [B or 1, H or
          1, T, T], True = may attend, combined with the causal and padding
          masks of the self-attention (keras-hub's argument), or None.
        - encoder_padding_mask: keras-hub's name for `memory_padding_mask`.
        - encoder_attention_mask: bool [T, S] or [B or 1, (H or 1,) T, S],
          True = may attend, for the cross-attention, or None.
        - training: bool.
        - cache: dict from `init_cache`, or None. Then `x` holds the tokens at
          positions `cache_index ...`, usually one.
        - cache_index: scalar int tensor, the position of `x`'s first token.
        - return_attention_scores: bool. Also return the weights, a dict:
          "self" (masked self-attention, float32 [B, H, T, T_cache or T])
          and, with cross-attention, "cross" ([B, H, T, S]).

    Returns:
        [B, T, C]; then the weights if asked; then the cache if one was
        passed: `(output, weights)`, `(output, cache)` or
        `(output, weights, cache)`.
    """

    _context = "DecoderBlock"

    def __init__(self, use_cross_attention=None, **kwargs):
        """Checks the arguments; the sublayers are created when built."""
        if use_cross_attention is not None:
            validation.check_bool("use_cross_attention", use_cross_attention,
                                  self._context)
        super().__init__(**kwargs)
        self.use_cross_attention = use_cross_attention

    def build(self, x_shape, memory_shape=None):
        if self.use_cross_attention is None:
            self.use_cross_attention = memory_shape is not None
        self.self_attention = self._attention("self_attention", causality=True)
        self.self_attention.build(x_shape)
        self._build_paper_wiring("self_attention", x_shape)
        if self.use_cross_attention:
            self.cross_attention = self._attention("cross_attention",
                                                   causality=False)
            self.cross_attention.build(x_shape, memory_shape or x_shape)
            self._build_paper_wiring("cross_attention", x_shape)
        self._build_feed_forward(x_shape)
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
        decoder_attention_mask=None,
        encoder_padding_mask=None,
        encoder_attention_mask=None,
    ):
        self._check_call(x, memory, cache, cache_index)
        if encoder_padding_mask is not None:
            if memory_padding_mask is not None:
                raise validation.invalid_argument(
                    "encoder_padding_mask", "None when `memory_padding_mask` "
                    "is given (keras-hub's name for the same mask)",
                    "<tensor of shape "
                    f"{validation.shape_of(encoder_padding_mask)}>",
                    self._context)
            memory_padding_mask = encoder_padding_mask
        if padding_mask is None:
            padding_mask = masking.implicit_mask(x)
        self_cache = None if cache is None else cache["self"]
        scores = {}
        x, scores["self"], self_cache = self._attention_sublayer(
            "self_attention", x, training,
            return_scores=return_attention_scores, padding_mask=padding_mask,
            cache=self_cache, cache_index=cache_index,
            attention_mask=decoder_attention_mask,
        )
        if self.use_cross_attention:
            if cache is not None:
                cross = dict(cache=cache["cross"])
            else:
                if memory_padding_mask is None:
                    memory_padding_mask = masking.implicit_mask(memory)
                cross = dict(keys=memory, padding_mask=memory_padding_mask)
            x, scores["cross"], _ = self._attention_sublayer(
                "cross_attention", x, training,
                return_scores=return_attention_scores,
                attention_mask=encoder_attention_mask, **cross)
        x = self._feed_forward_sublayer(x, training)
        results = (x,)
        if return_attention_scores:
            results += (scores,)
        if cache is not None:
            results += (dict(cache, self=self_cache),)
        return results[0] if len(results) == 1 else results

    def init_cache(self, batch_size, max_length, memory=None,
                   memory_padding_mask=None):
        """A cache for decoding up to `max_length` positions.

        Args:
            batch_size: int. The batch size B.
            max_length: int. The target positions the cache holds.
            memory: [B, S, C_m] encoder output, needed with
                cross-attention.
            memory_padding_mask: bool [B, S], True = real source token, or
                None.

        Returns:
            dict: "self", the self-attention's key/value buffers
            [B, H, max_length, d]; with cross-attention also "cross", the
            memory's keys and values projected once [B, H, S, d].

        Raises:
            ValueError: no `memory` for a block with cross-attention.
        """
        cache = {"self": self.self_attention.init_cache(batch_size, max_length)}
        if self.use_cross_attention:
            if memory is None:
                raise validation.invalid_argument(
                    "memory", "the encoder output [B, S, C] for a block with "
                    "cross-attention", None, "DecoderBlock.init_cache",
                )
            cache["cross"] = self.cross_attention.precompute_cache(
                memory, padding_mask=memory_padding_mask
            )
        return cache

    def _check_call(self, x, memory, cache, cache_index):
        if cache is not None and cache_index is None:
            raise validation.invalid_argument(
                "cache_index", "the position (scalar int tensor) of the first "
                "token when a cache is given", None, self._context,
            )
        if cache is not None:
            self._check_cache_room(x, cache, cache_index)
        if not self.use_cross_attention:
            if memory is not None:
                raise validation.invalid_argument(
                    "memory", "None for a block built with "
                    "use_cross_attention=False, or first called without "
                    "memory (a GPT-style decoder)",
                    f"<tensor of shape {validation.shape_of(memory)}>",
                    self._context,
                )
        elif memory is None and cache is None:
            raise validation.invalid_argument(
                "memory", "the encoder output [B, S, C] (this block has "
                "cross-attention; build it with use_cross_attention=False for "
                "a decoder-only model)", None, self._context,
            )

    def _check_cache_room(self, x, cache, cache_index):
        """Raises when the tokens would be written past the cache's end.

        The write itself cannot fail: out-of-range slice updates are clamped
        (they would silently overwrite the last slots). Checked whenever the
        position is known while tracing (eager calls, Python ints); inside a
        compiled decoding loop (a `tf.function`, `jax.jit`) the caller sizes
        the cache.
        """
        self_cache = cache.get("self") if isinstance(cache, dict) else None
        key = None if self_cache is None else self_cache.get("key")
        length = None if key is None else validation.shape_of(key)[2]
        steps = validation.shape_of(x)[1]
        index = _backend.static_value(cache_index)
        if None in (length, steps, index):
            return
        if int(index) < 0 or int(index) + steps > length:
            raise validation.invalid_argument(
                "cache_index",
                f"a position p >= 0 with p + {steps} (tokens) <= {length}, "
                "the length of the cache (build it with a larger max_length)",
                int(index),
                self._context,
            )

    def compute_output_shape(self, x_shape, memory_shape=None):
        return x_shape

    def get_config(self):
        config = super().get_config()
        config.update(use_cross_attention=self.use_cross_attention)
        return config
