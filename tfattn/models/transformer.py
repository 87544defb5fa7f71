"""`Transformer`: the sequence-to-sequence model, with cached decoding."""

import keras
from keras import ops

from tfattn.decoding.samplers import MASKED_LOGIT
from tfattn.layers.block_base import block_arguments
from tfattn.layers.decoder import Decoder
from tfattn.layers.dropout import Dropout
from tfattn.layers.encoder import Encoder
from tfattn.layers.positional_encoding import PositionalEncoding
from tfattn.layers.quantization import with_sublayer_policies
from tfattn.layers.token_embedding import TokenEmbedding
from tfattn.models._translation import TranslationGeneration
from tfattn.models import _ids
from tfattn.models.layout import checked_activation
from tfattn.models.layout import checked_layout
from tfattn.models.layout import serialized_activation
from tfattn.ops import masking
from tfattn.utils import validation
from tfattn.utils.ids import BOS_ID
from tfattn.utils.ids import EOS_ID
from tfattn.utils.ids import PAD_ID
from tfattn.utils.ids import UNK_ID
from tfattn.utils.seeds import sublayer_seed

__all__ = ["BOS_ID", "EOS_ID", "PAD_ID", "UNK_ID", "Transformer"]

_CONTEXT = "Transformer"


@keras.saving.register_keras_serializable(package="tfattn")
class Transformer(TranslationGeneration, keras.Model):
    """Encoder-decoder Transformer: (source ids, target input ids) -> logits.

    Shapes: B = batch, S = source length, T = target length, V = target
    vocabulary, C = `num_units`. Ids are int, 0 is padding; decoding starts
    from `BOS_ID` = 2 and stops at `EOS_ID` = 3 (the 2019 reference's ids).

    Flavours build these models:

    - `"paper"`: token embeddings × sqrt(C) plus the sinusoid, dropout,
      post-norm blocks with residual dropout (or pre-norm), output projection
      tied to the target embedding (`tie_output=True` by default), embeddings
      shared when there is one vocabulary (`target_vocab_size=None`).
    - `"reference_2017"` (§1.7): separate source and target embeddings,
      learned positions re-zeroed at padding, dropout only after the
      embedding and on the attention weights, masks from zero rows, output
      Dense with bias, untied.
    - `"reference_2019"` (§2.9): one joint embedding for source, target and
      output (all three tied), the sinusoid zeroed at padding, key masks from
      ids, no residual dropout.

    Args:
        source_vocab_size: int.
        target_vocab_size: int or None. None = one shared vocabulary.
        num_layers: int. Blocks per stack. Defaults to `6`.
        num_units: int. Model width C. Defaults to `512`.
        num_heads: int. Defaults to `8`.
        ffn_units: int. Defaults to `2048`.
        dropout_rate: float. Defaults to `0.1`.
        attention_dropout_rate: float or None (= `dropout_rate`).
        flavor: `"paper"`, `"reference_2017"` or `"reference_2019"`.
        normalize_first: bool. Pre-norm blocks (paper flavour only).
        max_length: int. Positions the positional table holds (source and
            target each). Defaults to `256`.
        positional_encoding: `"sinusoid"`, `"sinusoid_2017"`, `"learned"`,
            `"sinusoid_halves"` (Marian's layout: all sines, then all
            cosines) or None (the flavour's).
        share_embeddings: bool or None. One table for source and target.
        tie_output: bool or None. Output projection = target embeddingᵀ.
        embeddings_initializer: a Keras initializer (or its name or config)
            of the token tables. Defaults to `"glorot_uniform"` (about
            N(0, 2/(V+C)): small rows beside the sinusoid); tensor2tensor and
            fairseq draw N(0, C^-0.5), so that the rows, times sqrt(C), have
            unit scale like the positional signal.
        seed: int or None. Dropout seed.
        layer_norm_epsilon: float > 0 or None (the flavour's: 1e-6 in the
            paper flavour). Marian (torch's `LayerNorm`) uses 1e-5.
        activation: the feed-forward activation, a Keras activation name
            or callable. Defaults to `"relu"` (the paper's); Marian's
            OPUS-MT models use `"silu"` (swish).
        scale_embeddings: bool. Multiply the looked-up token rows by
            sqrt(C) (the paper's and Marian's `scale_embedding`).
            Defaults to `True`.
        final_logits_bias: bool. Add a bias [V] to the output logits, as
            Marian's `final_logits_bias`. Like Marian's (a torch buffer,
            not a parameter), it is a non-trainable weight: fine-tuning
            leaves it as loaded, as fine-tuning in transformers does.
            Defaults to `False`.
        suppress_bos: bool. Cached decoding (`decode_step`, hence
            `generate`, `search` and the exports) also gives `BOS_ID` the
            masked logit, so searches never emit it. A Marian model's start
            token is its padding id, which its generation config forbids
            (`bad_words_ids`); `tfattn.interop.marian` maps that id to
            `BOS_ID`. Defaults to `False`.

    Call arguments:
        - inputs: dict with "source" [B, S] and "target_in" [B, T] int ids, or
          the tuple (source, target_in).
        - training: bool.

    Returns:
        logits [B, T, V], float32.

    Token ids are range-checked (0 <= id < the vocabulary) where they enter:
    a ValueError naming the argument and the id where they hold values
    (eager TensorFlow, concrete JAX or torch arrays, NumPy), in-graph
    assertions with the same message in a TensorFlow graph (`tf.function`,
    XLA, serving). Under JAX tracing (`jax.jit`, `fit`'s compiled step) the
    values are unknown and JAX has no assertion that stops a compiled
    program, so traced ids are not checked: an id out of range would be
    clamped or filled by the gather, giving wrong logits without an error.
    """

    def __init__(
        self,
        source_vocab_size,
        target_vocab_size=None,
        num_layers=6,
        num_units=512,
        num_heads=8,
        ffn_units=2048,
        dropout_rate=0.1,
        attention_dropout_rate=None,
        flavor="paper",
        normalize_first=False,
        max_length=256,
        positional_encoding=None,
        share_embeddings=None,
        tie_output=None,
        embeddings_initializer="glorot_uniform",
        seed=None,
        layer_norm_epsilon=None,
        activation="relu",
        scale_embeddings=True,
        final_logits_bias=False,
        suppress_bos=False,
        **kwargs,
    ):
        """Checks the arguments (`layout`) and creates the sublayers."""
        block_args, defaults, positional_encoding, share, tie, initializer = (
            checked_layout(
                source_vocab_size, target_vocab_size, num_layers, num_units,
                num_heads, ffn_units, dropout_rate, attention_dropout_rate,
                flavor, normalize_first, max_length, positional_encoding,
                share_embeddings, tie_output, embeddings_initializer))
        validation.check_seed(seed, _CONTEXT)
        # The epsilon checked as the blocks check it; the activation as
        # `CausalLM` checks it (the reference flavours fix ReLU).
        block_args["layer_norm_epsilon"] = block_arguments(
            _CONTEXT, num_heads, ffn_units, dropout_rate,
            attention_dropout_rate, flavor, normalize_first,
            layer_norm_epsilon)["layer_norm_epsilon"]
        block_args["activation"] = checked_activation(
            activation, flavor, _CONTEXT)
        for name, value in (("scale_embeddings", scale_embeddings),
                            ("final_logits_bias", final_logits_bias),
                            ("suppress_bos", suppress_bos)):
            validation.check_bool(name, value, _CONTEXT)
        super().__init__(**kwargs)
        self.source_vocab_size = source_vocab_size
        self.target_vocab_size = target_vocab_size
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
        self.share_embeddings = share
        self.tie_output = tie
        self.embeddings_initializer = initializer
        self.seed = seed
        self.layer_norm_epsilon = layer_norm_epsilon
        self.activation = activation
        self.scale_embeddings = scale_embeddings
        self.final_logits_bias = final_logits_bias
        self.suppress_bos = suppress_bos
        self._searches = {}
        self.generate_traces = 0
        self._create_sublayers(block_args, defaults["padding_mode"])

    def _create_sublayers(self, block_args, padding_mode):
        """The embeddings, positions, stacks and output projection."""
        source_vocab_size, num_units = self.source_vocab_size, self.num_units
        initializer, seed = self.embeddings_initializer, self.seed
        share, positional_encoding = (self.share_embeddings,
                                      self.positional_encoding)
        vocab = self.target_vocab_size or source_vocab_size

        # A subclassed Model builds its sublayers here (Keras calls `build`
        # with the input shapes on the first call and when reloading).
        self.source_embedding = TokenEmbedding(
            source_vocab_size, num_units, dtype=self.dtype_policy,
            embeddings_initializer=initializer, name="source_embedding",
            scale=self.scale_embeddings,
        )
        self.target_embedding = (
            self.source_embedding if share else TokenEmbedding(
                vocab, num_units, dtype=self.dtype_policy,
                embeddings_initializer=keras.initializers.get(
                    keras.initializers.serialize(initializer)),
                scale=self.scale_embeddings, name="target_embedding"
            )
        )
        pe_kwargs = dict(kind=positional_encoding, max_length=self.max_length,
                         padding_mode=padding_mode, dtype=self.dtype_policy)
        self.source_positions = PositionalEncoding(name="source_positions",
                                                   **pe_kwargs)
        # The 2017 reference learns a separate table per stack; sinusoids
        # have no weights, so one layer serves both.
        self.target_positions = (
            PositionalEncoding(name="target_positions", **pe_kwargs)
            if positional_encoding == "learned" else self.source_positions
        )
        self.embedding_dropout = Dropout(
            self.dropout_rate, seed=sublayer_seed(seed, "embedding_dropout"),
            dtype=self.dtype_policy, name="embedding_dropout"
        )
        stack_args = dict(block_args, num_layers=self.num_layers,
                          dtype=self.dtype_policy)
        self.encoder = Encoder(name="encoder", seed=sublayer_seed(
            seed, "encoder"), **stack_args)
        self.decoder = Decoder(name="decoder", seed=sublayer_seed(
            seed, "decoder"), **stack_args)
        self.output_dense = None
        if not self.tie_output:
            self.output_dense = keras.layers.Dense(
                vocab, dtype=self.dtype_policy, name="output_dense"
            )

    # ------------------------------------------------------------------
    # Building and the training-time forward pass.

    def __call__(self, inputs, *args, **kwargs):
        # Checked where the user's call enters, before Keras builds the
        # model from the shapes: a bad first call would otherwise fail in
        # an inner layer, naming its argument, and leave the model half
        # built. Dtype first, then rank (`_check_ids`).
        source, target_in = _ids.pair(inputs, "inputs")
        self._check_ids("source", source, values=False)
        self._check_ids("target_in", target_in, values=False)
        return super().__call__(inputs, *args, **kwargs)

    def build(self, inputs_shape):
        source_shape, target_shape = _ids.pair(inputs_shape, "inputs_shape")
        width = self.num_units
        self.source_embedding.build(source_shape)
        if self.target_embedding is not self.source_embedding:
            self.target_embedding.build(target_shape)
        source_x = tuple(source_shape) + (width,)
        target_x = tuple(target_shape) + (width,)
        self.source_positions.build(source_x)
        if self.target_positions is not self.source_positions:
            self.target_positions.build(target_x)
        self.encoder.build(source_x)
        self.decoder.build(target_x, source_x)
        if self.output_dense is not None:
            self.output_dense.build(target_x)
        if self.final_logits_bias:
            # Marian's buffer: a weight that training leaves as loaded.
            self.logits_bias = self.add_weight(
                name="final_logits_bias",
                shape=(self.target_vocab_size or self.source_vocab_size,),
                initializer="zeros", trainable=False)
        self.built = True

    def call(self, inputs, training=None, return_attention_scores=False):
        """`{"source", "target_in"}` (or a pair) -> logits [B, T, V].

        With `return_attention_scores=True`: `(logits, scores)`, where
        `scores` is `{"encoder": [...], "decoder": [...], "cross": [...]}`,
        one float32 [B, H, T_q, T_k] tensor per layer (layer 0 first): the
        encoder's self-attention [B, H, S, S], the decoder's masked
        self-attention [B, H, T, T] and the encoder-decoder attention
        [B, H, T, S]. They are the weights of this same forward pass.
        """
        source, target_in = _ids.pair(inputs, "inputs")
        # Shapes only: `encode` and `decode` check the values, once.
        source = self._check_ids("source", source, values=False)
        target_in = self._check_ids("target_in", target_in, values=False)
        _ids.check_same_batch(source, target_in)
        encoded = self.encode(source, training=training,
                              return_attention_scores=return_attention_scores)
        decoded = self.decode(target_in, encoded[0], encoded[1],
                              training=training,
                              return_attention_scores=return_attention_scores)
        if not return_attention_scores:
            return decoded
        logits, scores = decoded
        return logits, dict(encoder=encoded[2], **scores)

    def encode(self, source, training=None, return_attention_scores=False):
        """Source ids [B, S] -> memory [B, S, C] and keep-mask [B, S].

        Args:
            source: int ids [B, S].
            training, return_attention_scores: as in `call`.

        Returns:
            `(memory, keep)`, then the encoder's weights (a list) if asked.
        """
        source = self._check_ids("source", source)
        keep = masking.padding_mask(source)
        x = self._embed(self.source_embedding, self.source_positions, source,
                        training)
        memory = self.encoder(x, padding_mask=self._stack_mask(keep),
                              training=training,
                              return_attention_scores=return_attention_scores)
        if return_attention_scores:
            memory, scores = memory
            return memory, keep, scores
        return memory, keep

    def decode(self, target_in, memory, source_keep, training=None,
               return_attention_scores=False):
        """Target input ids [B, T] and the encoder's output -> logits.

        Args:
            target_in: int ids [B, T].
            memory: [B, S, C], from `encode`.
            source_keep: bool [B, S], from `encode`.
            training, return_attention_scores: as in `call`.

        Returns:
            logits [B, T, V] float32, then the weights (a dict) if asked.
        """
        target_in = self._check_ids("target_in", target_in)
        keep = masking.padding_mask(target_in)
        x = self._embed(self.target_embedding, self.target_positions,
                        target_in, training)
        x = self.decoder(
            x, memory, padding_mask=self._stack_mask(keep),
            memory_padding_mask=self._stack_mask(source_keep),
            training=training,
            return_attention_scores=return_attention_scores,
        )
        if return_attention_scores:
            x, scores = x
            return self._logits(x), scores
        return self._logits(x)

    def _embed(self, embedding, positions, ids, training, start_index=0):
        x = positions(embedding(ids), start_index=start_index)
        return self.embedding_dropout(x, training=training)

    def _stack_mask(self, keep):
        # The 2017 reference finds padding from zero rows, not from ids.
        return None if self.flavor == "reference_2017" else keep

    def _logits(self, x):
        if self.output_dense is not None:
            logits = self.output_dense(x)
        else:
            logits = self.target_embedding.logits(x)
        logits = ops.cast(logits, "float32")
        if self.final_logits_bias:  # [V], as Marian's `final_logits_bias`
            logits = logits + ops.cast(self.logits_bias, "float32")
        return logits

    # ------------------------------------------------------------------
    # Incremental decoding.

    def init_decode_cache(self, memory, source_keep, max_length):
        """The decoder's per-block cache for `max_length` target positions.

        Args:
            memory: [B, S, C], from `encode`.
            source_keep: bool [B, S], from `encode`.
            max_length: int, at most the model's `max_length`.

        Returns:
            list: one cache per block (`Decoder.init_cache`).
        """
        if not _ids.is_symbolic_length(max_length):
            validation.check_positive_int("max_length", max_length, _CONTEXT)
            self._check_decode_length(max_length)
        return self.decoder.init_cache(
            ops.shape(memory)[0], max_length, memory,
            self._stack_mask(source_keep),
        )

    def decode_step(self, ids, position, cache):
        """One cached decoder step.

        Args:
            ids: int [B], the tokens at `position` (BOS at position 0).
            position: scalar int32 tensor.
            cache: from `init_decode_cache`.

        Returns:
            (logits [B, V] float32, with the padding id's logit (and with
            `suppress_bos` BOS's) at -1e9 so that searches never emit it;
            the updated cache).
        """
        ids = ops.expand_dims(ids, 1)
        keep = masking.padding_mask(ids)
        x = self._embed(self.target_embedding, self.target_positions, ids,
                        False, start_index=position)
        x, cache = self.decoder(
            x, padding_mask=self._stack_mask(keep), cache=cache,
            cache_index=position,
        )
        logits = self._logits(x)[:, 0]
        # Never emit padding: it would end a row without EOS.
        ids = ops.arange(ops.shape(logits)[-1])
        allowed = ops.not_equal(ids, PAD_ID)
        if self.suppress_bos:
            allowed = ops.logical_and(allowed, ops.not_equal(ids, BOS_ID))
        return ops.where(allowed[None, :], logits, MASKED_LOGIT), cache

    # ------------------------------------------------------------------
    # Checks and config.

    def _check_ids(self, name, ids, values=True):
        """Checks token ids at the model's door (`_ids.check_ids`): int,
        [B, T], within the positional table and (with `values`) 0 <= id <
        the vocabulary; eagerly a ValueError naming the argument and the id,
        in a TensorFlow graph in-graph assertions, under JAX tracing
        unchecked. Returns `ids` (in a TensorFlow graph, one that depends on
        the assertions)."""
        vocab = (self.source_vocab_size if name == "source"
                 else self.target_vocab_size or self.source_vocab_size)
        return _ids.check_ids(name, ids, vocab, self.max_length, values)

    def _check_decode_length(self, max_length, name="max_new_tokens"):
        if max_length > self.max_length:
            raise validation.invalid_argument(
                name,
                f"at most the positional table's {self.max_length} positions "
                f"(build the model with max_length>={max_length} to decode "
                "that far)",
                max_length,
                _CONTEXT,
            )

    def get_config(self):
        config = super().get_config()
        config.update(
            source_vocab_size=self.source_vocab_size,
            target_vocab_size=self.target_vocab_size,
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
            share_embeddings=self.share_embeddings,
            tie_output=self.tie_output,
            embeddings_initializer=keras.initializers.serialize(
                self.embeddings_initializer),
            seed=self.seed,
            layer_norm_epsilon=self.layer_norm_epsilon,
            activation=serialized_activation(self.activation),
            scale_embeddings=self.scale_embeddings,
            final_logits_bias=self.final_logits_bias,
            suppress_bos=self.suppress_bos,
        )
        return with_sublayer_policies(self, config)
