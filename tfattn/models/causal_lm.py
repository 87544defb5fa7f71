"""`CausalLM`: a GPT-style language model, with prompt-prefilled generation."""

import keras
import numpy as np
from keras import ops

from tfattn.decoding.samplers import MASKED_LOGIT
from tfattn.layers.decoder import Decoder
from tfattn.layers.dropout import Dropout
from tfattn.layers.initializers import fresh_initializer
from tfattn.layers.initializers import initializer_arguments
from tfattn.layers.positional_encoding import PositionalEncoding
from tfattn.layers.quantization import with_sublayer_policies
from tfattn.layers.token_embedding import TokenEmbedding
from tfattn.models import _generation
from tfattn.models import _ids
from tfattn.models import _prompts
from tfattn.models.layout import checked_activation
from tfattn.models.layout import checked_layout
from tfattn.models.layout import checked_output_mask
from tfattn.models.layout import serialized_activation
from tfattn.ops import masking
from tfattn.utils import buckets
from tfattn.utils import validation
from tfattn.utils.ids import BOS_ID
from tfattn.utils.ids import EOS_ID
from tfattn.utils.ids import PAD_ID
from tfattn.utils.seeds import sublayer_seed

__all__ = ["CausalLM"]

_CONTEXT = "CausalLM"


@keras.saving.register_keras_serializable(package="tfattn")
class CausalLM(keras.Model):
    """GPT-style language model: ids [B, T] -> next-token logits [B, T, V].

    Token embedding (× sqrt(C)), positions, dropout, a `Decoder` without
    cross-attention (causal self-attention: each token sees its left
    context only, GPT's "restricted self-attention"), and an output head
    tied to the embedding (`tie_output=True`, trained through the table) or
    a Dense of its own. Id 0 is padding (right-padded batches); logits at
    padding positions are computed but mean nothing.

    Flavours: `"paper"` blocks, pre-norm by default (`normalize_first`:
    GPT-2's placement; `False` gives GPT-1's post-norm), and the two
    reference flavours' blocks (`"reference_2019"`: tied, key masks from
    ids; `"reference_2017"`: learned positions, masks from zero rows,
    untied), whose blocks are post-norm.

    Args:
        vocab_size: int V. Id 0 is padding.
        num_layers: int. Defaults to `6`.
        num_units: int C. Defaults to `512`.
        num_heads: int. Defaults to `8`.
        ffn_units: int. Defaults to `2048`.
        dropout_rate: float. Defaults to `0.1`.
        attention_dropout_rate: float or None (= `dropout_rate`).
        flavor: `"paper"`, `"reference_2017"` or `"reference_2019"`.
            Defaults to `"paper"`.
        normalize_first: bool or None. Pre-norm blocks; None = True in the
            paper flavour (GPT-2), False in the reference flavours.
        max_length: int. Positions the model holds (prompt and
            continuation). Defaults to `256`.
        positional_encoding: `"sinusoid"`, `"sinusoid_2017"`, `"learned"`
            or None (the flavour's: sinusoid, learned in reference_2017).
        tie_output: bool or None. Output projection = embeddingᵀ (None:
            the flavour's, tied in paper and reference_2019).
        embeddings_initializer: a Keras initializer of the token table.
            Defaults to `"glorot_uniform"`.
        scale_embeddings: bool. Multiply the looked-up rows by sqrt(C)
            (the paper's §3.4). Defaults to `True`; GPT-2 does not (False,
            with a table from N(0, 0.02)).
        activation: the feed-forward activation, a Keras activation name
            or callable, or `"gelu_tanh"` (GELU's tanh approximation,
            GPT-2's; Keras's `"gelu"` is the exact one, GPT's).
            Defaults to `"relu"` (the paper's and the references', which
            fix it).
        seed: int or None. Dropout seed.
        kernel_initializer: a Keras initializer of every Dense kernel (the
            blocks' projections and feed-forward layers, and an untied
            output head). Defaults to `"glorot_uniform"` (Keras's); GPT-2's
            is `keras.initializers.RandomNormal(stddev=0.02)`.
        layer_norm_epsilon: float > 0 or None. The epsilon of every layer
            norm (the blocks' and the pre-norm stack's final one). Defaults
            to `None`: the flavour's (1e-6 in the paper flavour, the
            references' 1e-8); GPT-2's is 1e-5.
        bos_is_eos: bool. Read the prompt-start id `BOS_ID` (2) as
            `EOS_ID` (3), so that the two share one embedding row: GPT-2
            starts and ends a text with one token, `<|endoftext|>`
            (`tfattn.interop.gpt2` maps it to 3). Row 2 is then never
            read. Defaults to `False`.
        masked_output_ids: tuple of ids in [0, V). Their logits are
            `MASKED_LOGIT` (-1e9) in every output (`call`, `generate`, the
            exports): ids the vocabulary holds but the model never
            predicts, such as the rows an imported vocabulary gains
            (softmax then gives them probability 0 and the other ids the
            source model's probabilities). Defaults to `()`.

    Call arguments:
        - ids: int [B, T], 0 = padding; or a `train.py` batch, the dict
          `{"source", "target_in"}`, of which the model reads `target_in`
          (the language-model task trains on the target side).
        - training: bool.
        - return_attention_scores: bool. Also return the self-attention
          weights, `{"decoder": [[B, H, T, T] per layer]}`.

    Returns:
        logits [B, T, V], float32: position t predicts token t + 1.

    Example::

        lm = tfattn.models.CausalLM(vocab_size=1000, num_layers=2,
                                    num_units=64, num_heads=4, ffn_units=128)
        lm.compile("adam", keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, ignore_class=0))
        lm.fit(ids[:, :-1], ids[:, 1:])
        continuations, scores = lm.generate([[5, 6, 7]], max_new_tokens=8)
    """

    def __init__(self, vocab_size, num_layers=6, num_units=512, num_heads=8,
                 ffn_units=2048, dropout_rate=0.1, attention_dropout_rate=None,
                 flavor="paper", normalize_first=None, max_length=256,
                 positional_encoding=None, tie_output=None,
                 embeddings_initializer="glorot_uniform", activation="relu",
                 scale_embeddings=True, seed=None,
                 kernel_initializer="glorot_uniform", layer_norm_epsilon=None,
                 bos_is_eos=False, masked_output_ids=(), **kwargs):
        """Checks the arguments; the sublayers are created when built."""
        validation.check_positive_int("vocab_size", vocab_size, _CONTEXT)
        if normalize_first is not None:
            validation.check_bool("normalize_first", normalize_first,
                                  _CONTEXT)
        pre_norm = (flavor == "paper") if normalize_first is None else (
            normalize_first)
        block_args, defaults, positional, _, tie, initializer = (
            checked_layout(
                vocab_size, None, num_layers, num_units, num_heads,
                ffn_units, dropout_rate, attention_dropout_rate, flavor,
                pre_norm, max_length, positional_encoding, None, tie_output,
                embeddings_initializer, context=_CONTEXT,
                layer_norm_epsilon=layer_norm_epsilon))
        block_args["activation"] = checked_activation(
            activation, flavor, _CONTEXT)
        block_args.update(initializer_arguments(
            _CONTEXT, kernel_initializer=kernel_initializer))
        validation.check_bool("scale_embeddings", scale_embeddings, _CONTEXT)
        validation.check_seed(seed, _CONTEXT)
        validation.check_bool("bos_is_eos", bos_is_eos, _CONTEXT)
        masked = checked_output_mask(masked_output_ids, vocab_size, _CONTEXT)
        if flavor != "paper" and not scale_embeddings:
            raise validation.invalid_argument(
                "scale_embeddings", f"True in flavor '{flavor}', which the "
                "reference fixes", scale_embeddings, _CONTEXT)
        super().__init__(**kwargs)
        self.vocab_size = vocab_size
        self.num_layers = num_layers
        self.num_units = num_units
        self.num_heads = num_heads
        self.ffn_units = ffn_units
        self.dropout_rate = dropout_rate
        self.attention_dropout_rate = attention_dropout_rate
        self.flavor = flavor
        self.normalize_first = normalize_first
        self.max_length = max_length
        self.positional_encoding = positional_encoding
        self.tie_output = tie_output
        self.embeddings_initializer = initializer
        self.activation = activation
        self.scale_embeddings = scale_embeddings
        self.seed = seed
        self.kernel_initializer = block_args["kernel_initializer"]
        self.layer_norm_epsilon = layer_norm_epsilon
        self.bos_is_eos = bos_is_eos
        self.masked_output_ids = masked
        self._block_args = block_args
        self._padding_mode = defaults["padding_mode"]
        self._positional_kind = positional
        self._tied = tie
        self._searches = {}
        self.generate_traces = 0

    def build(self, ids_shape):
        if isinstance(ids_shape, dict):
            ids_shape = ids_shape["target_in"]
        self.token_embedding = TokenEmbedding(
            self.vocab_size, self.num_units, dtype=self.dtype_policy,
            embeddings_initializer=self.embeddings_initializer,
            scale=self.scale_embeddings, name="token_embedding")
        self.positions = PositionalEncoding(
            kind=self._positional_kind, max_length=self.max_length,
            padding_mode=self._padding_mode, dtype=self.dtype_policy,
            name="positions")
        self.embedding_dropout = Dropout(
            self.dropout_rate, seed=sublayer_seed(self.seed,
                                                  "embedding_dropout"),
            dtype=self.dtype_policy, name="embedding_dropout")
        self.decoder = Decoder(
            use_cross_attention=False, num_layers=self.num_layers,
            seed=sublayer_seed(self.seed, "decoder"),
            dtype=self.dtype_policy, name="decoder",
            **self._block_args)
        self.output_dense = None
        if not self._tied:
            self.output_dense = keras.layers.Dense(
                self.vocab_size, kernel_initializer=fresh_initializer(
                    self.kernel_initializer),
                dtype=self.dtype_policy, name="output_dense")
        x_shape = tuple(ids_shape) + (self.num_units,)
        self.token_embedding.build(ids_shape)
        self.positions.build(x_shape)
        self.decoder.build(x_shape)
        if self.output_dense is not None:
            self.output_dense.build(x_shape)
        self.built = True

    def call(self, ids, training=None, return_attention_scores=False):
        if isinstance(ids, dict):  # A `train.py` batch: its target side.
            ids = ids["target_in"]
        ids = self._check_ids(ids)
        keep = masking.padding_mask(ids)
        x = self._embed(ids, 0, training)
        x = self.decoder(x, padding_mask=self._stack_mask(keep),
                         training=training,
                         return_attention_scores=return_attention_scores)
        if return_attention_scores:
            x, scores = x
            return self._logits(x), scores
        return self._logits(x)

    def _embed(self, ids, start_index, training):
        if self.bos_is_eos:
            ids = ops.where(ops.equal(ids, BOS_ID), EOS_ID, ids)
        x = self.positions(self.token_embedding(ids), start_index=start_index)
        return self.embedding_dropout(x, training=training)

    def _stack_mask(self, keep):
        # The 2017 reference finds padding from zero rows, not from ids.
        return None if self.flavor == "reference_2017" else keep

    def _logits(self, x):
        if self.output_dense is not None:
            logits = self.output_dense(x)
        else:
            logits = self.token_embedding.logits(x)
        logits = ops.cast(logits, "float32")
        if self.masked_output_ids:
            keep = np.ones((self.vocab_size,), bool)
            keep[list(self.masked_output_ids)] = False
            logits = ops.where(keep, logits, MASKED_LOGIT)
        return logits

    def _check_ids(self, ids, values=True):
        return _ids.check_ids("ids", ids, self.vocab_size, self.max_length,
                              values, context=_CONTEXT)

    # ------------------------------------------------------------------
    # Generation.

    def generate(self, prompts, max_new_tokens=32, sampler="greedy",
                 stop_token_ids=(EOS_ID,), seed=0, strip_prompt=True,
                 jit_compile=True):
        """Continues prompts: the prompts are prefilled into the key/value
        cache in one forward pass, then one token per step is chosen by
        `sampler`, every step inside one compiled while-loop.

        Prompts of different lengths share the batch: each is left-padded
        to a common prefill length (rounded up to a power of two, so a new
        prompt length rarely compiles again; `max_new_tokens` is bucketed
        the same way) and keeps its own positions. Calls with the same
        bucketed shapes and settings reuse the compiled search
        (`generate_traces` counts the traces).

        Args:
            prompts: a list of token-id lists (ragged), or an int array
                [B, P] right-padded with 0. Ids in [1, vocab_size).
            max_new_tokens: int >= 1. Tokens generated per prompt at most;
                each prompt's length plus this must fit in `max_length`.
            sampler: a `tfattn.decoding.samplers.Sampler` or its name
                (`"greedy"`, `"random"`, `"top_k"`, `"top_p"`, `"beam"`,
                each with its class's default arguments: k=5, p=0.9, 4
                beams). Defaults to `"greedy"`.
            stop_token_ids: int, tuple of ints in [1, vocab_size), or
                None. A row stops after emitting one (it is kept in the
                output); `()` or None: rows run to `max_new_tokens`.
                Defaults to `(3,)` (EOS). 0 (padding, never emitted) and
                ids outside the vocabulary are refused: no row would stop.
            seed: int in [-2**63, 2**63). The draws' seed: the same seed,
                prompts and settings give the same tokens. Defaults to
                `0`.
            strip_prompt: bool. Return the continuations only (True), or
                each prompt followed by its continuation.
            jit_compile: bool. Compile with XLA under TensorFlow (JAX always
                compiles). Defaults to `True`: XLA's first call
                compiles longer and every later one runs faster, so it
                wins over a session of calls (`bench/generation_session.py`;
                the Benchmarks page has the figures). XLA
                draws from another random stream than the plain graph
                (and the exports): a seed samples other text in each.

        Returns:
            `(ids, scores)` as NumPy arrays: ids int32 [B, max_new_tokens]
            (with `strip_prompt=False`: [B, longest prompt +
            max_new_tokens], each prompt then its continuation), a stop
            token included, 0 after it; scores float32 [B], the
            continuation's log-probability (beam search: its
            length-penalised score).
        """
        max_new_tokens = validation.check_positive_int(
            "max_new_tokens", max_new_tokens, _CONTEXT)
        settings = _generation.checked_settings(
            sampler, stop_token_ids, seed, jit_compile, self.vocab_size,
            _CONTEXT)
        validation.check_bool("strip_prompt", strip_prompt, _CONTEXT)
        packed = _prompts.pack(prompts, self.vocab_size, self.max_length,
                               max_new_tokens, _CONTEXT)
        if not self.built:
            self.build((None, None))
        buffer = buckets.bucket(max_new_tokens)
        batch = len(packed.prompts)
        key = (batch, packed.prefill.shape[1], buffer, settings.sampler,
               settings.stop_ids, settings.jit_compile)
        search = self._searches.get(key)
        if search is None:
            search = self._searches[key] = self._compile(key)
        ids, scores = search(
            packed.prefill, packed.last, packed.lengths,
            np.full((batch,), max_new_tokens, np.int32), settings.words)
        ids = np.asarray(ops.convert_to_numpy(ids))[:, :max_new_tokens]
        scores = np.asarray(ops.convert_to_numpy(scores))
        if not strip_prompt:
            ids = _prompts.with_prompts(packed, ids)
        return ids, scores

    def _compile(self, key):
        """The search for `key`'s shapes and settings, compiled
        (`_generation.compiled`)."""
        _, _, buffer, sampler, stop_ids, jit_compile = key

        def search(prefill, last, lengths, limits, seed):
            self.generate_traces += 1  # Python runs only while tracing.
            return self.search(prefill, last, lengths, limits, seed,
                               buffer, sampler, stop_ids)

        return _generation.compiled(self, search, jit_compile)

    def search(self, prefill, last, lengths, limits, seed, buffer,
               sampler, stop_ids):
        """The traced part of `generate`: the prefill, then the search.

        Args:
            prefill: int32 [B, Q]. Left-padded prompts without their last
                token. Q may be unknown in a TensorFlow graph (a request's
                longest prompt, as the SavedModel pads); it is then at
                least 1.
            last: int32 [B]. The prompts' last tokens.
            lengths: int32 [B]. The prompts' lengths.
            limits: int32 [B]. Tokens to generate per row at most.
            seed: int32 [2]. The draws' seed words
                (`samplers.seed_words`).
            buffer: int L. The output buffer (static).
            sampler: Sampler.
            stop_ids: int or tuple of ints.

        Returns:
            `(ids [B, L], scores [B])`.
        """
        prefill = ops.convert_to_tensor(prefill, "int32")
        batch, width = ops.shape(last)[0], prefill.shape[1]
        if width is None:  # Sized per request in the graph.
            width = ops.shape(prefill)[1]
        layers = self.decoder.init_cache(batch, width + buffer)
        if not isinstance(width, int) or width:
            start = ops.cast(lengths, "int32") - 1 - width  # [B]
            x = self._embed(prefill, start, False)
            keep = masking.padding_mask(prefill)
            _, layers = self.decoder(x, padding_mask=self._stack_mask(keep),
                                     cache=layers, cache_index=0)
        # Rows sit at different positions: each row's position travels in
        # the cache (beam search tiles it with the rows).
        cache = {"layers": layers,
                 "position": ops.cast(lengths, "int32") - 1}

        def step(ids, i, cache):
            return self._decode_step(ids, i, cache, width)

        last = ops.convert_to_tensor(last, "int32")
        limits = ops.convert_to_tensor(limits, "int32")
        return sampler.search(step, last, cache, buffer, stop_ids,
                              seed=seed, max_lengths=limits)

    def _decode_step(self, ids, i, cache, offset):
        """One cached step: the token at each row's position + i, written
        at cache index offset + i; next-token logits [B, V] (padding at
        -1e9)."""
        ids = ops.expand_dims(ids, 1)
        x = self._embed(ids, cache["position"] + i, False)
        x, layers = self.decoder(
            x, padding_mask=self._stack_mask(masking.padding_mask(ids)),
            cache=cache["layers"], cache_index=offset + i)
        logits = self._logits(x)[:, 0]
        not_pad = ops.not_equal(ops.arange(ops.shape(logits)[-1]), PAD_ID)
        logits = ops.where(not_pad[None, :], logits, MASKED_LOGIT)
        return logits, {"layers": layers, "position": cache["position"]}

    def get_config(self):
        config = super().get_config()
        config.update(
            vocab_size=self.vocab_size,
            num_layers=self.num_layers,
            num_units=self.num_units,
            num_heads=self.num_heads,
            ffn_units=self.ffn_units,
            dropout_rate=self.dropout_rate,
            attention_dropout_rate=self.attention_dropout_rate,
            flavor=self.flavor,
            normalize_first=self.normalize_first,
            max_length=self.max_length,
            positional_encoding=self.positional_encoding,
            tie_output=self.tie_output,
            embeddings_initializer=keras.initializers.serialize(
                self.embeddings_initializer),
            activation=serialized_activation(self.activation),
            scale_embeddings=self.scale_embeddings,
            seed=self.seed,
            kernel_initializer=keras.initializers.serialize(
                self.kernel_initializer),
            layer_norm_epsilon=self.layer_norm_epsilon,
            bos_is_eos=self.bos_is_eos,
            masked_output_ids=list(self.masked_output_ids),
        )
        return with_sublayer_policies(self, config)
