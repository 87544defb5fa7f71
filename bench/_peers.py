"""The peers' versions of what the benches time, on `keras.ops` so that
they run on every Keras backend keras-hub supports."""

import keras
import numpy as np
from keras import ops

import _backend

BOS_ID = 2  # tfattn.models.transformer.BOS_ID; the value only seeds the loop


def keras_hub_greedy(source, vocab, layers, width, heads, steps,
                     ffn_units=None):
    """keras-hub's cached decoder, greedy, in one XLA while-loop.

    The architecture of `tfattn.Transformer` built from keras-hub layers
    (`TokenAndPositionEmbedding`, `TransformerEncoder`, `TransformerDecoder`
    with its self- and cross-attention caches, a Dense output), the encoder
    outside the loop as for tfattn. `source` is int32 (batch, T_src); every
    row decodes `steps` tokens; the feed-forward width is `ffn_units`
    (default 4 x width). The layers take Keras's global dtype policy.

    Returns:
        A zero-argument callable giving (ids,), ids (batch, steps) int32.
    """
    import keras_hub

    batch = source.shape[0]
    ffn_units = ffn_units or 4 * width
    cache_dtype = keras.config.dtype_policy().compute_dtype
    embed_source = keras_hub.layers.TokenAndPositionEmbedding(
        vocab, source.shape[1], width
    )
    embed_target = keras_hub.layers.TokenAndPositionEmbedding(
        vocab, steps + 1, width
    )
    encoders = [
        keras_hub.layers.TransformerEncoder(ffn_units, heads)
        for _ in range(layers)
    ]
    decoders = [
        keras_hub.layers.TransformerDecoder(ffn_units, heads)
        for _ in range(layers)
    ]
    output = keras.layers.Dense(vocab)
    memory = embed_source(source)
    for encoder in encoders:
        memory = encoder(memory)
    x = embed_target(source[:, :1])
    for decoder in decoders:
        x = decoder(x, memory)
    output(x)
    head_width = width // heads

    def greedy(source):
        memory = embed_source(source)
        for encoder in encoders:
            memory = encoder(memory)
        cross = [
            ops.stack(
                [
                    d._cross_attention_layer._key_dense(memory),
                    d._cross_attention_layer._value_dense(memory),
                ],
                axis=1,
            )
            for d in decoders
        ]
        caches = [
            ops.zeros([batch, 2, steps, heads, head_width],
                      cache_dtype)
            for _ in decoders
        ]
        ids = ops.full([batch], BOS_ID, "int32")
        out = ops.zeros([batch, steps], "int32")

        def body(t, ids, out, caches):
            x = embed_target(ids[:, None], start_index=t)
            new = []
            for decoder, cache, cross_cache in zip(decoders, caches, cross):
                x, cache, _ = decoder(
                    x,
                    memory,
                    self_attention_cache=cache,
                    self_attention_cache_update_index=t,
                    cross_attention_cache=cross_cache,
                )
                new.append(cache)
            ids = ops.cast(ops.argmax(output(x[:, 0]), -1), "int32")
            one_hot = ops.one_hot(t, steps, dtype="int32")[None, :]
            return t + 1, ids, out * (1 - one_hot) + ids[:, None] * one_hot, new

        _, _, out, _ = ops.while_loop(
            lambda t, *rest: t < steps, body, (0, ids, out, caches)
        )
        return (out,)

    everything = [embed_source, embed_target, *encoders, *decoders, output]
    variables = [v for layer in everything for v in layer.variables]
    compiled = _backend.compiled(greedy, variables)
    source = np.asarray(source, "int32")
    return lambda: compiled(source)


def keras_hub_seq2seq(vocab, length, layers, width, heads, ffn_units=None,
                      dropout=0.1):
    """The seq2seq Transformer of `tfattn.Transformer` built from keras-hub
    layers as a functional model: inputs {"source", "target_in"} int32
    (batch, T) with 0 as padding, output logits (batch, T_tgt, vocab) in
    float32; post-norm blocks with epsilon 1e-6, untied embeddings."""
    import keras_hub

    ffn_units = ffn_units or 4 * width
    source = keras.Input((None,), dtype="int32", name="source")
    target_in = keras.Input((None,), dtype="int32", name="target_in")
    x = keras_hub.layers.TokenAndPositionEmbedding(
        vocab, length, width, mask_zero=True
    )(source)
    for _ in range(layers):
        x = keras_hub.layers.TransformerEncoder(
            ffn_units, heads, dropout=dropout, layer_norm_epsilon=1e-6
        )(x)
    y = keras_hub.layers.TokenAndPositionEmbedding(
        vocab, length, width, mask_zero=True
    )(target_in)
    for _ in range(layers):
        y = keras_hub.layers.TransformerDecoder(
            ffn_units, heads, dropout=dropout, layer_norm_epsilon=1e-6
        )(y, x)
    logits = keras.layers.Dense(vocab, dtype="float32")(y)
    return keras.Model({"source": source, "target_in": target_in}, logits)
