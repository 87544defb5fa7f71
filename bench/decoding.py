"""Greedy decoding speed: KV cache in one XLA while-loop against re-running.

One process, one model, the same source batch:
- `rerun`: the baseline of the referenced code and the TF tutorial: at each
  position the whole decoder runs again on the full (fixed-size) prefix
  buffer; the loop is a while-loop in one compiled function, so the
  baseline pays no retracing either.
- `cached greedy`: `Transformer.decode_step` with the per-layer key/value
  cache through `tfattn.decoding.greedy_search`, the whole loop in one
  XLA-compiled function (`tf.function(jit_compile=True)` on TensorFlow,
  `jax.jit` on JAX).
- `cached beam 4`: the same with `beam_search` (beam 4, alpha 0.6); its
  per-hypothesis rate is 4 x batch x steps / time.
- `keras-hub greedy`: the same architecture built from keras-hub layers
  (`TokenAndPositionEmbedding`, `TransformerEncoder`, `TransformerDecoder`
  with its self- and cross-attention caches, a Dense output), greedy in one
  `keras.ops.while_loop` under XLA, the encoder outside the loop as for tfattn.
- `matmul-only floor`: no model, only the matmuls of a decoding step of
  this size (per layer Q, K, V, output, cross-attention Q and output, the
  two FFN layers; then the vocabulary projection and argmax) in the same
  XLA while-loop: no attention scores, softmax, norms, embeddings or cache.
  No implementation of this architecture can decode faster on this machine
  with XLA's CPU matmuls, so it bounds every ratio above.
Every row decodes exactly `--steps` tokens (EOS disabled), so tokens/s are
comparable. Everything is written on `keras.ops` and runs on the process's
Keras backend; `--backends=tensorflow,jax` runs it once per backend.

    python bench/decoding.py                 # batch 16, 64 tokens
    python bench/decoding.py --backends=tensorflow,jax
"""

import argparse
import os

import _repo  # noqa: F401  (puts the repository root on sys.path)

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
from keras import ops  # noqa: E402

import _backend  # noqa: E402
import tfattn  # noqa: E402
from tfattn import decoding  # noqa: E402
from _peers import keras_hub_greedy  # noqa: E402
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
        max_length=max(args.steps + 1, args.source_length),
    )
    rng = np.random.default_rng(0)
    source = rng.integers(4, args.vocab, size=(args.batch, args.source_length))
    source = source.astype("int32")
    model({"source": source, "target_in": source[:, :1]})
    return model, source


def matmul_floor(args):
    """The step's matmuls alone, `--steps` times, in one XLA while-loop."""
    batch, width, steps = args.batch, args.units, args.steps
    rng = np.random.default_rng(1)

    def weight(rows, cols):
        return keras.Variable(
            (rng.normal(size=(rows, cols)) * 0.05).astype("float32"),
            trainable=False)

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
    start = rng.normal(size=(batch, width)).astype("float32")

    def floor(x):
        def body(t, x, out):
            for w in layers:
                projected = x @ w["query"] + x @ w["key"] + x @ w["value"]
                x = x + projected @ w["output"]
                x = x + (x @ w["cross_query"]) @ w["cross_output"]
                x = 0.5 * (x + ops.relu(x @ w["inner"]) @ w["outer"])
            ids = ops.cast(ops.argmax(x @ vocabulary, -1), "int32")
            one_hot = ops.one_hot(t, steps, dtype="int32")[None, :]
            return t + 1, x, out * (1 - one_hot) + ids[:, None] * one_hot

        _, _, out = ops.while_loop(
            lambda t, *rest: t < steps,
            body,
            (0, x, ops.zeros([batch, steps], "int32")),
        )
        return (out,)

    variables = [v for w in layers for v in w.values()] + [vocabulary]
    compiled = _backend.compiled(floor, variables)
    return lambda: compiled(start)


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
        "--backends", default="",
        help="comma list of Keras backends to run the bench under, a "
        "process each (default: this process's, KERAS_BACKEND)")
    return parser.parse_args()


def cached_search(model, source, args, beam_size):
    """The encoder, then `model.decode_step` with its key/value cache
    through `greedy_search` (beam_size 1) or `beam_search` (alpha 0.6), in
    one XLA-compiled function, `--steps` tokens per row; returns a
    zero-argument callable giving the search's (ids, scores), ids
    (batch, steps)."""
    steps = args.steps
    start_ids = np.full([args.batch], tfattn.models.transformer.BOS_ID,
                        "int32")
    no_eos = args.vocab

    def search(source, start_ids):
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

    compiled = _backend.compiled(search, model)
    return lambda: compiled(source, start_ids)


def full_rerun(model, source, args):
    """Greedy without a cache: at each position the whole decoder on the
    fixed-size prefix buffer, in one XLA while-loop; returns a
    zero-argument callable giving (ids,), ids (batch, steps)."""
    steps, batch = args.steps, args.batch

    def rerun(source):
        memory, keep = model.encode(source, training=False)
        start_ids = ops.full([batch, 1], tfattn.models.transformer.BOS_ID,
                             "int32")
        buffer = ops.concatenate(
            [start_ids, ops.zeros([batch, steps], "int32")], axis=1
        )

        def body(t, buffer):
            logits = model.decode(
                buffer[:, :steps], memory, keep, training=False
            )
            row = ops.take(logits, t, axis=1)[:, 1:]
            next_ids = ops.cast(ops.argmax(row, -1), "int32") + 1
            one_hot = ops.one_hot(t + 1, steps + 1, dtype="int32")[None, :]
            return t + 1, buffer * (1 - one_hot) + next_ids[:, None] * one_hot

        _, buffer = ops.while_loop(lambda t, b: t < steps, body, (0, buffer))
        return (buffer[:, 1:],)

    compiled = _backend.compiled(rerun, model)
    return lambda: compiled(source)


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
    if _backend.run_per_backend(args.backends):
        return
    model, source = build_model(args)
    params = model.count_params()
    print(
        f"backend {_backend.backend()}; "
        f"model: {args.layers}+{args.layers} layers, width {args.units}, "
        f"{params / 1e6:.1f}M parameters; batch {args.batch}, {args.steps} "
        f"tokens per row, best of {args.rounds}, interleaved round by round"
    )
    timings = best_times(
        {
            "rerun": full_rerun(model, source, args),
            "greedy": cached_search(model, source, args, 1),
            "beam": cached_search(model, source, args, 4),
            "hub": keras_hub_greedy(
                source, args.vocab, args.layers, args.units, args.heads,
                args.steps),
            "floor": matmul_floor(args),
        },
        args.rounds,
    )
    report(args, timings)


if __name__ == "__main__":
    main()
