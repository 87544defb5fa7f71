"""Serving speed: tfattn's decoding paths against CTranslate2, one process.

Part 1, the bench architecture (`bench/decoding.py`'s: 3+3 layers, width
256, 4 heads, FFN 1,024, vocabulary 8,000, random weights), ids in, every
row exactly `--steps` tokens (EOS disabled in tfattn, `min_decoding_length`
= `max_decoding_length` in CTranslate2), sources of 31 tokens + EOS:

- `tfattn XLA`: `Transformer.encode` + `decoding.greedy_search` /
  `beam_search` in one `tf.function(jit_compile=True)`;
- `ct2 float32`, `ct2 int8`: the same weights exported with
  `tfattn.export.ctranslate2_spec`, `Translator.translate_batch` on the
  same tokens (2 intra-op threads, the machine's cores by default).

Part 2, with `--model_dir`: a trained model, text in and text out on the
first `--sentences` lines of `--texts`, each path with its own stopping
(EOS); tokens are the output's SentencePiece pieces:

- `tfattn XLA`: `tfattn.decoding.translate.translate_texts(...,
jit_compile=True)`;
- `SavedModel`, `SavedModel jit`: `export_translator` (default, and
  `jit_compile=True`), called through `serving_default`;
- `ct2 float32`, `ct2 int8`: `to_ctranslate2`, `load_ctranslate2`.

With `--references`, part 2 also prints the tokenised, lowercased BLEU
(Multi30k's `tok/` references) of tfattn's and CTranslate2's translations
of every line of `--texts`, at batch 64.

    python bench/serving.py                          # part 1
    T=../shared/data/multi30k
    python bench/serving.py --model_dir=runs/m30k --batches=16,64 \\
        --texts=$T/raw/test_2016_flickr.en.gz --sentences=1000 \\
        --references=$T/tok/test_2016_flickr.lc.norm.tok.de.gz
"""

import argparse
import functools
import gzip
import os
import tempfile

import _repo  # noqa: F401  (puts the repository root on sys.path)
from beam_profile import search_function

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import tfattn  # noqa: E402
from tfattn import export  # noqa: E402
from tfattn.export import ctranslate2 as ct2_export  # noqa: E402
from tfattn.export import ctranslate2_spec  # noqa: E402
from tfattn.decoding.translate import translate_texts  # noqa: E402
from _timing import best_times  # noqa: E402


def ct2_translator(path, compute_type, threads):
    import ctranslate2

    return ctranslate2.Translator(
        path, compute_type=compute_type, inter_threads=1, intra_threads=threads
    )


def architecture_rows(args, batch, beam, model, pieces, translators):
    """(name, seconds) of each path at one batch size and beam."""
    rng = np.random.default_rng(batch)
    ids = rng.integers(4, args.vocab, size=(batch, args.source_length - 1))
    source = tf.constant(
        np.concatenate([ids, np.full([batch, 1], 3)], axis=1), "int32"
    )
    cached = search_function(
        model, source, args.steps, args.vocab, beam, args.alpha
    )
    steps = args.steps
    tokens = [[pieces[i] for i in row] for row in ids.tolist()]

    def run(translator):
        return lambda: translator.translate_batch(
            tokens,
            beam_size=beam,
            length_penalty=args.alpha,
            min_decoding_length=steps,
            max_decoding_length=steps,
            max_input_length=0,
        )

    runs = {"tfattn XLA": cached}
    runs.update((name, run(t)) for name, t in translators.items())
    timings = best_times(runs, args.rounds)
    for name in translators:
        out = timings[name].output
        assert all(len(r.hypotheses[0]) == steps for r in out), name
    return [(name, t.seconds) for name, t in timings.items()]


def part_architecture(args):
    model = tfattn.Transformer(
        args.vocab,
        num_layers=args.layers,
        num_units=args.units,
        num_heads=args.heads,
        ffn_units=4 * args.units,
        dropout_rate=0.0,
        max_length=max(args.steps, args.source_length) + 1,
    )
    model((np.ones((1, 4), "int32"), np.ones((1, 3), "int32")))
    pieces = ["<pad>", "<unk>", "<s>", "</s>"] + [
        f"t{i}" for i in range(4, args.vocab)
    ]
    spec = ctranslate2_spec.transformer_spec(model, pieces)
    translators = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "ct2")
        ct2_export._save_spec(spec, path, None)
        for compute_type in ("float32", "int8"):
            translators[f"ct2 {compute_type}"] = ct2_translator(
                path, compute_type, args.threads
            )
    print(
        f"part 1: {args.layers}+{args.layers} layers, width {args.units}, "
        f"vocabulary {args.vocab}, {model.count_params() / 1e6:.1f}M "
        f"parameters; sources {args.source_length} tokens, exactly "
        f"{args.steps} output tokens per row; best of {args.rounds}"
    )
    print_header()
    for beam in args.beams:
        for batch in args.batches:
            rows = architecture_rows(
                args, batch, beam, model, pieces, translators
            )
            print_rows(rows, batch, beam, batch * args.steps)


def print_header():
    print(
        f"{'path':16} {'beam':>4} {'batch':>5} {'sent/s':>8} "
        f"{'tokens/s':>9} {'vs ct2 f32':>10}"
    )


def print_rows(rows, batch, beam, tokens, sentences=None):
    reference = dict(rows)["ct2 float32"]
    for name, seconds in rows:
        count = tokens[name] if isinstance(tokens, dict) else tokens
        print(
            f"{name:16} {beam:4d} {batch:5d} "
            f"{(sentences or batch) / seconds:8.1f} {count / seconds:9.0f} "
            f"{reference / seconds:9.2f}x"
        )


def read_lines(path, count):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in f]
    return lines[:count] if count else lines


def trained_paths(args, model, tokenizer, tmp, beam):
    """{name: texts -> translations} of the trained model's paths."""
    decoding_args = dict(
        beam_size=beam, alpha=args.alpha, extra_length=args.extra_length
    )
    paths = {
        "tfattn XLA": lambda texts: translate_texts(
            model,
            tokenizer,
            texts,
            batch_size=len(texts),
            jit_compile=True,
            **decoding_args,
        )
    }
    saved_models = (
        ()
        if args.bleu_only
        else (("SavedModel", False), ("SavedModel jit", True))
    )
    for name, jit in saved_models:
        directory = os.path.join(tmp, f"saved_{beam}_{jit}")
        export.export_translator(
            model, tokenizer, directory, jit_compile=jit, **decoding_args
        )
        serve = export.load_translator(directory).signatures["serving_default"]
        paths[name] = (
            lambda serve: (
                lambda texts: [
                    t.decode()
                    for t in serve(sentences=tf.constant(texts))[
                        "translations"
                    ].numpy()
                ]
            )
        )(serve)
    directory = export.to_ctranslate2(
        model, tokenizer, os.path.join(tmp, f"ct2_{beam}"), **decoding_args
    )
    for compute_type in ("float32", "int8"):
        translator = export.load_ctranslate2(
            directory, compute_type=compute_type, intra_threads=args.threads
        )
        paths[f"ct2 {compute_type}"] = translator.translate
    return paths


def translate_all(translate, texts, batch):
    return [
        out
        for start in range(0, len(texts), batch)
        for out in translate(texts[start : start + batch])
    ]


def part_trained(args):
    from tfattn.decoding import evaluation
    from tfattn.training import run_dir

    model, tokenizer, _ = run_dir.restore_model(
        args.model_dir, average_last=args.average_checkpoints
    )
    lines = read_lines(args.texts, None)
    texts = lines[: args.sentences]
    print(
        f"part 2: {args.model_dir} ({model.count_params() / 1e6:.1f}M "
        f"parameters, {args.average_checkpoints} checkpoint(s) averaged), "
        f"the first {len(texts)} lines of {args.texts}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for beam in args.beams:
            paths = trained_paths(args, model, tokenizer, tmp, beam)
            print_header()
            for batch in [] if args.bleu_only else args.batches:
                timings = best_times(
                    {
                        name: functools.partial(
                            translate_all, translate, texts, batch
                        )
                        for name, translate in paths.items()
                    },
                    args.rounds,
                )
                rows = [(name, t.seconds) for name, t in timings.items()]
                tokens = {
                    name: int(
                        tf.reduce_sum(
                            tokenizer.tokenize(t.output).row_lengths()
                        )
                    )
                    for name, t in timings.items()
                }
                print_rows(rows, batch, beam, tokens, len(texts))
            if not args.references:
                continue
            # Every line; the SavedModels translate as `tfattn XLA` does.
            references = read_lines(args.references, None)
            for name in ("tfattn XLA", "ct2 float32", "ct2 int8"):
                out = translate_all(paths[name], lines, 64)
                hypotheses = [
                    evaluation.multi30k_tokenize(t, args.target_language)
                    for t in out
                ]
                score = evaluation.bleu(hypotheses, references, tokenize="none")
                print(
                    f"BLEU (tokenised, lowercased, {len(lines)} lines) "
                    f"beam {beam} {name}: {score['score']:.2f}"
                )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", default="1,16,64")
    parser.add_argument("--beams", default="1,5")
    parser.add_argument("--steps", type=int, default=64)
    parser.add_argument("--source_length", type=int, default=32)
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--units", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--alpha", type=float, default=0.6)
    parser.add_argument("--extra_length", type=int, default=50)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--model_dir", help="a trained run: part 2 only")
    parser.add_argument("--texts", help="source lines (.gz read too)")
    parser.add_argument(
        "--references", help="tokenised, lowercased reference lines"
    )
    parser.add_argument("--target_language", default="de")
    parser.add_argument(
        "--sentences",
        type=int,
        default=256,
        help="lines timed (BLEU scores every line)",
    )
    parser.add_argument("--average_checkpoints", type=int, default=1)
    parser.add_argument(
        "--bleu_only",
        action="store_true",
        help="part 2: only the BLEU of --references",
    )
    args = parser.parse_args()
    args.batches = [int(b) for b in args.batches.split(",")]
    args.beams = [int(b) for b in args.beams.split(",")]
    if args.model_dir:
        if not args.texts:
            parser.error("--model_dir needs --texts")
        part_trained(args)
    else:
        part_architecture(args)


if __name__ == "__main__":
    main()
