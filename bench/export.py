"""Translation throughput of an exported SavedModel against the Python path.

One process, one model (random weights, so every row decodes to its length
limit), the same sentences:
- `python`: `tfattn.decoding.translate.translate_texts` (tokenisation,
`generate`,
  detokenisation), without XLA and with `jit_compile=True`;
- `saved_model`: the export's `serving_default` signature (string in,
  string out, all in one graph), loaded back with `tf.saved_model.load`;
  `saved_model+XLA` the same exported with `jit_compile=True`.
Sentences per second at each batch size (one call = one batch), best of
`--rounds` after a warm-up call; the translations are checked equal between
the SavedModel and the non-XLA Python path.

    python bench/export.py                    # batches 1, 16, 64; beam 4
"""

import argparse
import collections
import os
import tempfile

import _repo  # noqa: F401  (puts the repository root on sys.path)

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402
import tensorflow_text  # noqa: E402,F401  (registers the SentencePiece ops)

import tfattn  # noqa: E402
from tfattn import export  # noqa: E402
from tfattn.data import numbers_splits  # noqa: E402
from tfattn.data import train_tokenizer  # noqa: E402
from _timing import best_times  # noqa: E402
from tfattn.decoding.translate import translate_texts  # noqa: E402


# The random-weight model, its tokenizer, the decoding settings (kwargs of
# both paths) and the two exported `serving_default` signatures.
Translators = collections.namedtuple(
    "Translators", ["model", "tokenizer", "decoding", "serve", "serve_xla"]
)


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", default="1,16,64")
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--units", type=int, default=128)
    parser.add_argument("--extra_length", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    return parser.parse_args()


def exported_signature(model, tokenizer, directory, **kwargs):
    """`export_translator` to `directory`, loaded back: its
    `serving_default` signature (sentences (batch,) string in,
    translations (batch,) string out)."""
    export.export_translator(model, tokenizer, directory, **kwargs)
    return tf.saved_model.load(directory).signatures["serving_default"]


def build_translators(args):
    """(Translators, the numbers task's test source sentences): a model
    with random weights (seed 0), a tokenizer trained on the task, both
    exported to a new temporary folder."""
    keras.utils.set_random_seed(0)
    pairs = numbers_splits(max_value=99999, num_validation=200, num_test=200)
    work = tempfile.mkdtemp()
    tokenizer = train_tokenizer(
        [s for pair in pairs["train"][:2000] for s in pair],
        work,
        vocab_size=64,
        split_digits=True,
    )
    model = tfattn.Transformer(
        tokenizer.vocab_size,
        num_layers=args.layers,
        num_units=args.units,
        num_heads=4,
        ffn_units=2 * args.units,
        dropout_rate=0.0,
        max_length=64,
    )
    model((tf.ones([1, 4], "int32"), tf.ones([1, 3], "int32")))
    decoding = dict(beam_size=args.beam, extra_length=args.extra_length)
    serve = exported_signature(
        model, tokenizer, os.path.join(work, "export"), **decoding
    )
    serve_xla = exported_signature(
        model,
        tokenizer,
        os.path.join(work, "export_xla"),
        jit_compile=True,
        **decoding,
    )
    texts = [source for source, _ in pairs["test"]]
    return Translators(model, tokenizer, decoding, serve, serve_xla), texts


def python_path(translators, chunk, batch, **kwargs):
    """`translate_texts` of `chunk` (list of str) in batches of `batch`,
    as a zero-argument callable; returns list of str."""
    return lambda: translate_texts(
        translators.model,
        translators.tokenizer,
        chunk,
        batch_size=batch,
        **kwargs,
        **translators.decoding,
    )


def saved_model_path(serve, chunk):
    """The exported signature `serve` on `chunk` (list of str), as a
    zero-argument callable; returns the translations, (len(chunk),)
    string."""
    return lambda: serve(sentences=tf.constant(chunk))["translations"]


def same_translations(translators, chunk, batch):
    """Whether the SavedModel (no XLA) translates `chunk` as the non-XLA
    Python path does."""
    serve = translators.serve
    return [
        t.decode()
        for t in serve(sentences=tf.constant(chunk))["translations"].numpy()
    ] == python_path(translators, chunk, batch)()


def print_header(args, model):
    print(
        f"{model.count_params() / 1e6:.1f}M parameters, {args.layers}+"
        f"{args.layers} layers, width {args.units}, beam {args.beam}; "
        f"sentences/s, best of {args.rounds}"
    )
    print(
        f"{'batch':>5} {'python':>9} {'python+XLA':>11} {'saved_model':>12}"
        f" {'saved+XLA':>10} {'saved / python':>15} "
        f"{'saved+XLA / python+XLA':>23}"
    )


def print_row(batch, timings, same):
    """One batch size's sentences/s from `timings` ({name: Timing}, one
    call = one batch of `batch`) and their ratios."""
    python, xla, saved, saved_xla = (
        batch / timings[name].seconds
        for name in ("python", "python+XLA", "saved_model", "saved+XLA")
    )
    print(
        f"{batch:5d} {python:9.1f} {xla:11.1f} {saved:12.1f} "
        f"{saved_xla:10.1f} {saved / python:14.2f}x "
        f"{saved_xla / xla:22.2f}x"
        + ("" if same else "  (translations differ!)")
    )


def main():
    args = parse_args()
    translators, texts = build_translators(args)
    print_header(args, translators.model)
    for batch in [int(b) for b in args.batches.split(",")]:
        chunk = texts[:batch]
        timings = best_times(
            {
                "python": python_path(translators, chunk, batch),
                "python+XLA": python_path(
                    translators, chunk, batch, jit_compile=True
                ),
                "saved_model": saved_model_path(translators.serve, chunk),
                "saved+XLA": saved_model_path(translators.serve_xla, chunk),
            },
            args.rounds,
        )
        print_row(batch, timings, same_translations(translators, chunk, batch))


if __name__ == "__main__":
    main()
