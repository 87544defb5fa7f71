"""Where beam search's time goes: its parts timed apart, in one process.

The bench architecture of `bench/decoding.py` (3+3 layers, width 256, 4
heads, FFN 1,024, vocabulary 8,000, random weights), batch B, beam K,
exactly `--steps` tokens per row, each row one XLA while-loop:

- `greedy B`: greedy search of the B rows (the cost per row);
- `greedy B*K`: greedy search of B*K rows: the model work of beam K;
- `beam K`: `tfattn.decoding.beam_search`;
- `beam K, no cache reorder`: the same with the per-step gather of the
  self-attention cache by parent beam skipped (its output is wrong; only
  its time matters): the reorder's share is the difference;
- `log_softmax + top_k`: only the search's scoring of the K*V candidates,
  `--steps` times;
- `greedy B` and `beam K`, `no XLA`: the same searches in a plain
  `tf.function` graph (TensorFlow's own kernels, oneDNN's matmuls).

Then the rate of the decoder step's matmuls alone (the FFN and fused
Q/K/V products of one block, and the output projection), at B and B*K
rows, `--steps` products per call, compiled by XLA against TensorFlow's
graph kernels: what each runtime's matmuls reach at decoding's skinny
shapes.

    python bench/beam_profile.py              # batch 16, beam 4, 64 tokens
"""

import argparse
import os

import _repo  # noqa: F401  (puts the repository root on sys.path)

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import tfattn  # noqa: E402
from _timing import best_times  # noqa: E402
from tfattn import decoding  # noqa: E402
from tfattn.decoding import beam as beam_module  # noqa: E402


def search_function(model, source, steps, vocab, beam, alpha=0.6, xla=True):
    """One compiled search over `source`; EOS is out of the vocabulary."""
    start = tf.fill([source.shape[0]], 2)

    @tf.function(jit_compile=xla)
    def search():
        memory, keep = model.encode(source, training=False)
        cache = model.init_decode_cache(memory, keep, steps)
        if beam == 1:
            return decoding.greedy_search(
                model.decode_step, start, cache, steps, vocab
            )[0]
        return decoding.beam_search(
            model.decode_step,
            start,
            cache,
            steps,
            vocab,
            beam_size=beam,
            alpha=0.6,
        )[0]

    return search


def scoring_function(batch, beam, vocab, steps):
    logits = tf.random.normal([batch * beam, vocab], seed=0)

    @tf.function(jit_compile=True)
    def scoring():
        def body(i, total):
            log_probs = tf.nn.log_softmax(logits + tf.cast(i, tf.float32))
            top, _ = tf.math.top_k(tf.reshape(log_probs, [batch, -1]), 2 * beam)
            return i + 1, total + top[:, 0]

        return tf.while_loop(
            lambda i, _: i < steps, body, (0, tf.zeros([batch]))
        )[1]

    return scoring


def matmul_rate_functions(rows, width, ffn, vocab, repeats):
    """GFLOP per call and `{xla: function}` of the step's matmuls."""
    rng = np.random.default_rng(0)

    def weight(*shape):
        return tf.constant(rng.standard_normal(shape, dtype=np.float32))

    x = weight(rows, width)
    ffn_in, ffn_out = weight(width, ffn), weight(ffn, width)
    qkv, out = weight(width, 3 * width), weight(width, vocab)

    def products():
        total = tf.zeros([rows, width])
        for i in range(repeats):  # `i` keeps the products apart.
            h = x + float(i)
            total += tf.matmul(tf.matmul(h, ffn_in), ffn_out)
            total += tf.matmul(h, qkv)[:, :width]
            total += tf.matmul(h, out)[:, :width]
        return total

    gflop = 2 * rows * width * (2 * ffn + 3 * width + vocab) * repeats / 1e9
    return gflop, {
        xla: tf.function(products, jit_compile=xla) for xla in (True, False)
    }


def print_matmul_rates(batch, beam, vocab, steps, rounds):
    print("decoder-step matmuls alone (FFN, fused QKV, output projection):")
    for rows in (batch, batch * beam):
        gflop, functions = matmul_rate_functions(rows, 256, 1024, vocab, steps)
        best = best_times(functions, rounds)
        rates = {xla: gflop / t.seconds for xla, t in best.items()}
        print(
            f"  {rows:3d} rows: XLA {rates[True]:6.1f} GFLOP/s, "
            f"TensorFlow graph {rates[False]:6.1f} GFLOP/s"
        )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--steps", type=int, default=64)
    parser.add_argument("--source_length", type=int, default=32)
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    batch, beam, vocab = args.batch, args.beam, args.vocab
    model = tfattn.Transformer(
        vocab,
        num_layers=3,
        num_units=256,
        num_heads=4,
        ffn_units=1024,
        dropout_rate=0.0,
        max_length=max(args.steps, args.source_length) + 1,
    )
    rng = np.random.default_rng(0)
    source = tf.constant(
        rng.integers(4, vocab, size=(batch, args.source_length)), "int32"
    )
    model({"source": source, "target_in": source[:, :1]})
    tiled = tf.repeat(source, beam, axis=0)
    functions = {
        f"greedy {batch}": search_function(model, source, args.steps, vocab, 1),
        f"greedy {batch * beam}": search_function(
            model, tiled, args.steps, vocab, 1
        ),
        f"beam {beam}": search_function(model, source, args.steps, vocab, beam),
    }
    reorder = beam_module._reorder_cache
    beam_module._reorder_cache = lambda cache, new_cache, parents: new_cache
    try:
        skipped = search_function(model, source, args.steps, vocab, beam)
        skipped()  # traced (and compiled) without the reorder
    finally:
        beam_module._reorder_cache = reorder
    functions[f"beam {beam}, no cache reorder"] = skipped
    functions["log_softmax + top_k"] = scoring_function(
        batch, beam, vocab, args.steps
    )
    functions[f"greedy {batch}, no XLA"] = search_function(
        model, source, args.steps, vocab, 1, xla=False
    )
    functions[f"beam {beam}, no XLA"] = search_function(
        model, source, args.steps, vocab, beam, xla=False
    )
    best = {
        name: timing.seconds
        for name, timing in best_times(functions, args.rounds).items()
    }
    beam_time = best[f"beam {beam}"]
    print(
        f"batch {batch}, beam {beam}, {args.steps} tokens per row, "
        f"vocabulary {vocab}; best of {args.rounds}"
    )
    for name, seconds in best.items():
        print(
            f"{name:28} {seconds * 1e3:8.1f} ms {seconds / beam_time:6.0%}"
            " of beam"
        )
    print_matmul_rates(batch, beam, vocab, args.steps, args.rounds)


if __name__ == "__main__":
    main()
