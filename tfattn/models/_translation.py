"""`Transformer.generate` and `Transformer.search` (private module): the
translation side of the one generation dialect (`_generation`), as a
mixin the model class inherits.

Shapes: B = batch, S = source length, L = `max_new_tokens`.
"""

import numpy as np
from keras import ops

from tfattn.models import _generation
from tfattn.models import _ids
from tfattn.utils import buckets
from tfattn.utils import validation
from tfattn.utils.ids import BOS_ID
from tfattn.utils.ids import EOS_ID

__all__ = ["TranslationGeneration"]

_CONTEXT = "Transformer"


class TranslationGeneration:
    """`generate` (checked, compiled, NumPy out) and `search` (in-graph)
    for an encoder-decoder model with `encode`, `init_decode_cache`,
    `decode_step`, `_check_ids`, `_check_decode_length`, `max_length`,
    `source_vocab_size`, `target_vocab_size`, `_searches` and
    `generate_traces`."""

    def generate(self, source, max_new_tokens=None, sampler="beam",
                 stop_token_ids=(EOS_ID,), seed=0, jit_compile=True,
                 extra_length=50):
        """Translates source ids with `sampler`: beam search by default
        (the paper's 4 beams, length penalty 0.6), or greedy, random,
        top-k or top-p sampling, the same samplers as `CausalLM.generate`.

        The encoder runs once; the decoder runs one cached step per
        position, all inside one compiled `keras.ops.while_loop` (a
        `tf.function`, with XLA when `jit_compile`; `jax.jit` under JAX).
        The source width is bucketed (rounded up to a power of two, as
        `CausalLM.generate` buckets its prompts), so a new source length
        rarely compiles again; calls with the same buckets and settings
        reuse the compiled search (`generate_traces` counts the traces).
        Inside a function of your own (`tf.function`, `jax.jit`) call
        `search` instead.

        Args:
            source: int ids [B, S], right-padded with 0 (an array, a list
                of equal-length lists or an eager tensor).
            max_new_tokens: int or None. Tokens generated per row at most
                (the output's width); None: S + `extra_length`, capped at
                the positional table's `max_length`.
            sampler: a `tfattn.decoding.samplers.Sampler` or its name
                (`"beam"`, `"greedy"`, `"random"`, `"top_k"`, `"top_p"`,
                each with its class's defaults). Defaults to `"beam"`.
            stop_token_ids: int, tuple of ints in [1, V), or None. A row
                stops after emitting one (kept in the output). Defaults to
                `(EOS_ID,)`.
            seed: int in [-2**63, 2**63). The draws' seed (sampling).
            jit_compile: bool. Compile with XLA under TensorFlow (JAX
                always compiles). Defaults to `True`: XLA's first call
                compiles longer and every later one runs faster, so it
                wins over a session of calls (`bench/generation_session.py`;
                the Benchmarks page has the figures). XLA
                draws from another random stream than the plain graph
                (and the exports): a seed samples other text in each.
            extra_length: int >= 0. Each row stops at its own source
                length plus this (the paper's input length + 50).
                Defaults to `50`.

        Returns:
            `(ids, scores)` as NumPy arrays: ids int32 [B,
            max_new_tokens] without BOS, a stop token included, 0 after
            it; scores float32 [B], the output's log-probability (beam
            search: its length-penalised score).
        """
        settings = _generation.checked_settings(
            sampler, stop_token_ids, seed, jit_compile,
            self.target_vocab_size or self.source_vocab_size, _CONTEXT)
        extra_length = _checked_extra_length(extra_length)
        source = self._check_ids("source", source)
        concrete = _ids.concrete(source)
        if concrete is None:
            raise validation.invalid_argument(
                "source", "ids with values (inside tf.function or jax.jit, "
                "call Transformer.search)", "<a traced tensor>", _CONTEXT)
        batch, width = concrete.shape
        if max_new_tokens is None:
            max_new_tokens = min(width + extra_length, self.max_length)
        validation.check_positive_int("max_new_tokens", max_new_tokens,
                                      _CONTEXT)
        self._check_decode_length(max_new_tokens)
        if not self.built:  # Weights are made by the first call.
            self.build({"source": (None, None), "target_in": (None, 1)})
        if batch == 0:
            return (np.zeros((0, max_new_tokens), np.int32),
                    np.zeros((0,), np.float32))
        padded = _bucketed_source(concrete.astype(np.int32), self.max_length)
        key = (batch, padded.shape[1], max_new_tokens, extra_length,
               settings.sampler, settings.stop_ids, settings.jit_compile)
        search = self._searches.get(key)
        if search is None:
            search = self._searches[key] = self._compile(key)
        ids, scores = search(padded, settings.words)
        return (np.asarray(ops.convert_to_numpy(ids)),
                np.asarray(ops.convert_to_numpy(scores)))

    def _compile(self, key):
        """The search for `key`'s shapes and settings, compiled
        (`_generation.compiled`)."""
        _, _, buffer, extra_length, sampler, stop_ids, jit_compile = key

        def search(source, seed):
            self.generate_traces += 1  # Python runs only while tracing.
            return self.search(source, buffer, sampler, stop_ids, seed,
                               extra_length)

        return _generation.compiled(self, search, jit_compile)

    def search(self, source, max_new_tokens, sampler, stop_ids=EOS_ID,
               seed=None, extra_length=50):
        """`generate`'s search as tensors, for use inside a compiled
        function (`tf.function`, XLA, `jax.jit`) or an export: encode once,
        then `sampler.search` over cached decoder steps from BOS.

        The decoder's cache and the output hold L positions, and each step
        attends over all of them (masked past the step), so a buffer no
        longer than the work keeps the steps cheap: `None` sizes it from
        the source, as `generate` does.

        Args:
            source: int [B, S]. Right-padded with 0.
            max_new_tokens: Python int L, or None: S + `extra_length`,
                capped at the positional table's `max_length` (a Python
                int where S is static, as under XLA and JAX; a scalar
                tensor in a TensorFlow graph of unknown S, which sizes the
                buffer per call). The output's width.
            sampler: Sampler.
            stop_ids: int or tuple of ints. Tokens that end a row.
            seed: int32 [2] (`samplers.seed_words`) or None (0).
            extra_length: Python int. Each row stops at its own source
                length plus this.

        Returns:
            `(ids [B, L] int32, scores [B] float32)`, tensors of the
            running backend.
        """
        if max_new_tokens is None:
            max_new_tokens = _source_buffer(source, extra_length,
                                            self.max_length)
        memory, source_keep = self.encode(source, training=False)
        cache = self.init_decode_cache(memory, source_keep, max_new_tokens)
        lengths = ops.sum(ops.cast(source_keep, "int32"),
                          axis=1) + extra_length
        start = ops.full((ops.shape(source)[0],), BOS_ID, "int32")
        return sampler.search(self.decode_step, start, cache,
                              max_new_tokens, stop_ids,
                              seed=0 if seed is None else seed,
                              max_lengths=lengths)


def _checked_extra_length(extra_length):
    if (isinstance(extra_length, bool)
            or not isinstance(extra_length, (int, np.integer))
            or extra_length < 0):
        raise validation.invalid_argument(
            "extra_length", "an int >= 0", extra_length, _CONTEXT)
    return int(extra_length)


def _source_buffer(source, extra_length, max_length):
    """min(S + extra_length, max_length): a Python int where the source's
    width S is static, else a scalar int32 tensor."""
    width = ops.shape(source)[1]
    if isinstance(width, int):
        return min(width + extra_length, max_length)
    return ops.minimum(ops.cast(width, "int32") + extra_length, max_length)


def _bucketed_source(source, max_length):
    """`source` [B, S] right-padded with 0 to its bucket (a power of two
    >= 8, at most `max_length`): padding changes no output, and one
    compilation serves every width in the bucket."""
    width = min(max(buckets.bucket(source.shape[1]), source.shape[1]),
                max(max_length, source.shape[1]))
    return np.pad(source, [(0, 0), (0, width - source.shape[1])])
