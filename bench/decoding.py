"""Greedy decoding speed: KV cache in one XLA while-loop against re-running.

One process, one model, the same source batch:
- `rerun`: the baseline of the referenced code and the TF tutorial: at each
  position the whole decoder runs again on the full (fixed-size) prefix
  buffer; the loop is a `tf.while_loop` in one compiled function, so the
  baseline pays no retracing either.
- `cached greedy`: `Transformer.decode_step` with the per-layer key/value
  cache through `tfattn.decoding.greedy_search`, the whole loop in one
  `tf.function(jit_compile=True)`.
- `cached beam 4`: the same with `beam_search` (beam 4, alpha 0.6); its
  per-hypothesis rate is 4 x batch x steps / time.
- `keras-hub greedy`: the same architecture built from keras-hub layers
  (`TokenAndPositionEmbedding`, `TransformerEncoder`, `TransformerDecoder`
  with its self- and cross-attention caches, a Dense output), greedy in one
  `tf.while_loop` under XLA, the encoder outside the loop as for tfattn.
- `matmul-only floor`: no model, only the matmuls of a decoding step of
  this size (per layer Q, K, V, output, cross-attention Q and output, the
  two FFN layers; then the vocabulary projection and argmax) in the same
  XLA while-loop: no attention scores, softmax, norms, embeddings or cache.
  No implementation of this architecture can decode faster on this machine
  with XLA's CPU matmuls, so it bounds every ratio above.
Every row decodes exactly `--steps` tokens (EOS disabled), so tokens/s are
comparable.

    python bench/decoding.py                 # batch 16, 64 tokens
"""

import argparse
import os

import _repo  # noqa: F401  (puts the repository root on sys.path)

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import tfattn  # noqa: E402
from tfattn import decoding  # noqa: E402
from _timing import best_times  # noqa: E402

# EOS set to an id outside the vocabulary: every row runs all the steps.


def build_model(args):
    model = tfattn.Transformer(
        args.vocab,
        num_layers=args.layers,
        num_units=args.units,
        num_heads=args.heads,
        ffn_units=4 * args.units,
        dropout_rate=0.0,
        max_length=args.steps + 1,
    )
    rng = np.random.default_rng(0)
    source = rng.integers(4, args.vocab, size=(args.batch, args.source_length))
    source = tf.constant(source, "int32")
    model({"source": source, "target_in": source[:, :1]})
    return model, source


def keras_hub_greedy(args, source):
    """keras-hub's cached decoder, greedy, in one XLA while-loop."""
    import keras
    import keras_hub

    width, heads, steps = args.units, args.heads, args.steps
    batch = source.shape[0]
    embed_source = keras_hub.layers.TokenAndPositionEmbedding(
        args.vocab, source.shape[1], width
    )
    embed_target = keras_hub.layers.TokenAndPositionEmbedding(
        args.vocab, steps + 1, width
    )
    encoders = [
        keras_hub.layers.TransformerEncoder(4 * width, heads)
        for _ in range(args.layers)
    ]
    decoders = [
        keras_hub.layers.TransformerDecoder(4 * width, heads)
        for _ in range(args.layers)
    ]
    output = keras.layers.Dense(args.vocab)
    memory = embed_source(source)
    for encoder in encoders:
        memory = encoder(memory)
    x = embed_target(source[:, :1])
    for decoder in decoders:
        x = decoder(x, memory)
    output(x)
    head_width = width // heads

    @tf.function(jit_compile=True)
    def greedy():
        memory = embed_source(source)
        for encoder in encoders:
            memory = encoder(memory)
        cross = [
            tf.stack(
                [
                    d._cross_attention_layer._key_dense(memory),
                    d._cross_attention_layer._value_dense(memory),
                ],
                axis=1,
            )
            for d in decoders
        ]
        caches = [
            tf.zeros([batch, 2, steps, heads, head_width]) for _ in decoders
        ]
        ids = tf.fill([batch], tfattn.models.transformer.BOS_ID)
        out = tf.zeros([batch, steps], "int32")

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
            ids = tf.argmax(output(x[:, 0]), -1, output_type=tf.int32)
            one_hot = tf.one_hot(t, steps, dtype="int32")[None, :]
            return t + 1, ids, out * (1 - one_hot) + ids[:, None] * one_hot, new

        _, _, out, _ = tf.while_loop(
            lambda t, *rest: t < steps, body, (0, ids, out, caches)
        )
        return (out,)

    return greedy


def matmul_floor(args):
    """The step's matmuls alone, `--steps` times, in one XLA while-loop."""
    batch, width, steps = args.batch, args.units, args.steps
    rng = np.random.default_rng(1)

    def weight(rows, cols):
        return tf.constant(rng.normal(size=(rows, cols)) * 0.05, "float32")

    names = ("query", "key", "value", "output", "cross_query", "cross_output")
    layers = [
        dict(
            {name: weight(width, width) for name in names},
            inner=weight(width, 4 * width),
            outer=weight(4 * width, width),
        )
        for _ in range(args.layers)
    ]
    vocabulary = weight(width, args.vocab)
    start = tf.constant(rng.normal(size=(batch, width)), "float32")

    @tf.function(jit_compile=True)
    def floor():
        def body(t, x, out):
            for w in layers:
                projected = x @ w["query"] + x @ w["key"] + x @ w["value"]
                x = x + projected @ w["output"]
                x = x + (x @ w["cross_query"]) @ w["cross_output"]
                x = 0.5 * (x + tf.nn.relu(x @ w["inner"]) @ w["outer"])
            ids = tf.argmax(x @ vocabulary, -1, output_type=tf.int32)
            return t + 1, x, out.write(t, ids)

        _, _, out = tf.while_loop(
            lambda t, *rest: t < steps,
            body,
            (0, start, tf.TensorArray(tf.int32, steps)),
        )
        return (out.stack(),)

    return floor


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--steps", type=int, default=64)
    parser.add_argument("--source_length", type=int, default=32)
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--units", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--no_jit",
        dest="jit",
        action="store_false",
        help="Run the cached searches without XLA.",
    )
    return parser.parse_args()


def cached_search(model, source, args):
    """`search(beam_size)`: the encoder, then `model.decode_step` with its
    key/value cache through `greedy_search` (beam size 1) or `beam_search`
    (alpha 0.6), in one function (XLA unless `--no_jit`), `--steps` tokens
    per row; returns the search's (ids, scores), ids (batch, steps)."""
    steps = args.steps
    start_ids = tf.fill([args.batch], tfattn.models.transformer.BOS_ID)
    no_eos = args.vocab

    @tf.function(jit_compile=args.jit)
    def search(beam_size):
        memory, keep = model.encode(source, training=False)
        cache = model.init_decode_cache(memory, keep, steps)
        if beam_size == 1:
            return decoding.greedy_search(
                model.decode_step, start_ids, cache, steps, no_eos
            )
        return decoding.beam_search(
            model.decode_step,
            start_ids,
            cache,
            steps,
            no_eos,
            beam_size=beam_size,
            alpha=0.6,
        )

    return search


def full_rerun(model, source, args):
    """Greedy without a cache: at each position the whole decoder on the
    fixed-size prefix buffer, in one XLA while-loop; returns (ids,), ids
    (batch, steps)."""
    steps, batch = args.steps, args.batch
    start_ids = tf.fill([batch], tfattn.models.transformer.BOS_ID)

    @tf.function(jit_compile=True)
    def rerun():
        memory, keep = model.encode(source, training=False)
        buffer = tf.concat(
            [start_ids[:, None], tf.zeros([batch, steps], "int32")], axis=1
        )

        def body(t, buffer):
            logits = model.decode(
                buffer[:, :steps], memory, keep, training=False
            )
            next_ids = (
                tf.argmax(
                    tf.gather(logits, t, axis=1)[:, 1:],
                    -1,
                    output_type=tf.int32,
                )
                + 1
            )
            one_hot = tf.one_hot(t + 1, steps + 1, dtype="int32")[None, :]
            return t + 1, buffer * (1 - one_hot) + next_ids[:, None] * one_hot

        _, buffer = tf.while_loop(lambda t, b: t < steps, body, (0, buffer))
        return (buffer[:, 1:],)

    return rerun


def report(args, timings):
    """Prints tokens/s of each row of `timings` ({name: Timing}) and the
    ratios between them."""
    t_rerun, t_greedy, t_beam, t_hub, t_floor = (
        timings[name].seconds
        for name in ("rerun", "greedy", "beam", "hub", "floor")
    )
    same = np.array_equal(
        timings["rerun"].output[0], timings["greedy"].output[0]
    )
    tokens = args.batch * args.steps
    print(f"{'method':18} {'tokens/s':>9} {'vs rerun':>9}")
    for name, seconds in (
        ("rerun", t_rerun),
        ("cached greedy", t_greedy),
        ("cached beam 4", t_beam),
        ("keras-hub greedy", t_hub),
        ("matmul-only floor", t_floor),
    ):
        print(f"{name:18} {tokens / seconds:9.0f} {t_rerun / seconds:8.1f}x")
    print(
        f"greedy vs keras-hub's cached decoder: {t_hub / t_greedy:.2f}x; "
        f"beam 4 / greedy time: {t_beam / t_greedy:.2f}x (per-hypothesis "
        f"rate {4 * t_greedy / t_beam:.2f} of greedy's); greedy ids "
        f"identical to rerun: {same}"
    )
    print(
        f"cached greedy runs at {t_floor / t_greedy:.0%} of the matmul-only "
        f"floor, keras-hub at {t_floor / t_hub:.0%}; the floor is "
        f"{t_hub / t_floor:.2f}x keras-hub's greedy, the most any "
        f"implementation could reach here"
    )


def main():
    args = parse_args()
    model, source = build_model(args)
    cached = cached_search(model, source, args)
    rerun = full_rerun(model, source, args)
    params = model.count_params()
    print(
        f"model: {args.layers}+{args.layers} layers, width {args.units}, "
        f"{params / 1e6:.1f}M parameters; batch {args.batch}, {args.steps} "
        f"tokens per row, best of {args.rounds}, interleaved round by round"
    )
    timings = best_times(
        {
            "rerun": rerun,
            "greedy": lambda: cached(1),
            "beam": lambda: cached(4),
            "hub": keras_hub_greedy(args, source),
            "floor": matmul_floor(args),
        },
        args.rounds,
    )
    report(args, timings)


if __name__ == "__main__":
    main()
