"""Text in, text out at the sizes people use: each text-level call and
export beside the model-level call that does the same work, on the
checkpoints of `bench/real_size.py` (OPUS-MT-, GPT-2-small- and
BERT-base-shaped, random, written by tfattn's writers and read back).

- Marian: 32 Multi30k test sentences, batches of 16, each row stopping at
  its source length + `--extra` pieces (the end-of-sentence logit is
  lowered, so no row stops sooner). `translate_texts` (greedy, and beam 4
  under XLA) and the `export_translator` SavedModel's `serving_default`
  against `Transformer.generate` on the sources `encode_for_translation`
  gives, with the same search, `extra_length` and XLA setting.
- GPT-2: 8 Multi30k test sentences as prompts, one batch, `--new` pieces
  greedily. `continue_texts` and the `export_language_model` SavedModel
  against `CausalLM.generate` on the prompt windows
  `lm_serving.prompt_window` reads.
- BERT: 32 Multi30k test sentences with one word blanked. `fill_mask` and
  the `export_masked_lm` SavedModel against the `MaskedLM` call on the
  rows `fill_mask` reads; and the forward pass of 32 x 128 random ids
  (the issue's row), eagerly and as an XLA-compiled function.

Each figure is the best of `--rounds` passes after a first one (printed
too: compiling included), the two calls of a row taking turns. The ratio
is text-level seconds over model-level seconds: 1.10 is 10% slower.
Then, per part, the
first call of a new process: the seconds to load the checkpoint, then to
answer one text with the text-level call at its defaults (tracing or
compiling included), then a text of another length bucket, then the first
text again, without and with XLA (`--first-only`: these alone).

    python bench/text_calls.py --workdir=DIR     # DIR as real_size.py's
    python bench/text_calls.py --quick           # small shapes, a smoke test
"""

import argparse
import json
import os
import sys
import tempfile

import _repo  # noqa: F401  (puts the repository root on sys.path)

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

import real_size  # noqa: E402

BERT_SHAPE = dict(layers=12, units=768, heads=12, ffn=3072, vocab=30522)
BERT_QUICK = dict(layers=1, units=64, heads=4, ffn=128, vocab=2000)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--parts", default="marian,gpt2,bert")
    parser.add_argument("--extra", type=int, default=64,
                        help="Marian: pieces past each source")
    parser.add_argument("--new", type=int, default=64,
                        help="GPT-2: new pieces per prompt")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--json", default=None)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--first-only", action="store_true",
                        help="only the first calls of new processes")
    parser.add_argument("--first-child", default=None,
                        help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def pair(name, text_run, reference_name, reference_run, rounds):
    """One row: a text-level call against its model-level reference, each
    first called once (its first pass), then `rounds` rounds of both in
    turn (a change in the machine's load reaches both alike); the best
    pass of each."""
    text_first = real_size._timed(text_run)
    model_first = real_size._timed(reference_run)
    text_s = model_s = float("inf")
    for _ in range(rounds):
        text_s = min(text_s, real_size._timed(text_run))
        model_s = min(model_s, real_size._timed(reference_run))
    row = dict(call=name, reference=reference_name, text_s=text_s,
               model_s=model_s, ratio=text_s / model_s,
               text_first_s=text_first, model_first_s=model_first)
    print(f"| {name} | {text_s:.2f} (first {text_first:.1f}) | "
          f"{reference_name} | {model_s:.2f} (first {model_first:.1f}) | "
          f"{row['ratio']:.2f} |", flush=True)
    return row


# ----------------------------------------------------------------------
# The parts.

def marian_rows(directory, args, workdir):
    import tensorflow as tf

    from tfattn import export
    from tfattn.decoding import samplers
    from tfattn.decoding import translate
    from tfattn.interop import marian

    model, tokenizer = marian.from_huggingface(directory)
    texts = real_size.multi30k("test_2016_flickr", "en", 32)
    cap, _ = translate.decode_lengths(model, args.extra)
    sources = [translate.encode_for_translation(
        tokenizer, tf.constant(texts[i:i + 16]), cap).numpy()
        for i in range(0, len(texts), 16)]

    def generate(sampler, jit):
        return lambda: [model.generate(s, sampler=sampler,
                                       extra_length=args.extra,
                                       jit_compile=jit) for s in sources]

    def text(beam, jit):
        return lambda: translate.translate_texts(
            model, tokenizer, texts, beam_size=beam, batch_size=16,
            extra_length=args.extra, jit_compile=jit)

    beam4 = samplers.BeamSampler(beam_size=4)
    rows = [
        pair("translate_texts, greedy, XLA", text(1, True),
             "generate, greedy, XLA", generate("greedy", True), args.rounds),
        pair("translate_texts, greedy (default: no XLA)", text(1, False),
             "generate, greedy, no XLA", generate("greedy", False),
             args.rounds),
        pair("translate_texts, beam 4, XLA", text(4, True),
             "generate, beam 4, XLA", generate(beam4, True), args.rounds),
    ]
    saved = export.export_translator(
        model, tokenizer, os.path.join(workdir, "translator"), beam_size=1,
        extra_length=args.extra, overwrite=True)
    signature = tf.saved_model.load(saved).signatures["serving_default"]
    rows.append(pair(
        "SavedModel serving_default, greedy",
        lambda: [signature(sentences=tf.constant(texts[i:i + 16]))
                 for i in range(0, len(texts), 16)],
        "generate, greedy, no XLA", generate("greedy", False), args.rounds))
    return rows


def gpt2_rows(directory, args, workdir):
    import tensorflow as tf

    from tfattn import export
    from tfattn.decoding import lm_evaluation
    from tfattn.decoding import lm_serving
    from tfattn.interop import gpt2

    model, tokenizer = gpt2.from_huggingface(directory)
    prompts = real_size.multi30k("test_2016_flickr", "en", 8)
    pieces = tokenizer.tokenize(prompts).to_list()
    windows, _ = lm_serving.prompt_window(pieces,
                                          model.max_length - args.new)

    def generate(jit):
        return lambda: model.generate(windows, args.new, "greedy",
                                      jit_compile=jit)

    def text(jit):
        return lambda: lm_evaluation.continue_texts(
            model, tokenizer, prompts, max_new_tokens=args.new,
            jit_compile=jit)

    rows = [
        pair("continue_texts, XLA", text(True), "generate, XLA",
             generate(True), args.rounds),
        pair("continue_texts (default: no XLA)", text(False),
             "generate, no XLA", generate(False), args.rounds),
    ]
    saved = export.export_language_model(
        model, tokenizer, os.path.join(workdir, "language_model"),
        max_new_tokens=args.new, overwrite=True)
    signature = tf.saved_model.load(saved).signatures["serving_default"]
    rows.append(pair(
        "SavedModel serving_default",
        lambda: signature(prompts=tf.constant(prompts)),
        "generate, no XLA", generate(False), args.rounds))
    return rows


def write_bert(shape, directory):
    """A random BERT-base-shaped directory through tfattn's writer: a
    keras-hub `BertMaskedLM` of random weights under transformers' names
    (`tests/bert_fixtures.py`), read by `bert.from_huggingface`, written
    by `bert.to_huggingface` and that copy read back; returns it."""
    import keras_hub

    from tests import bert_fixtures
    from tfattn.interop import bert

    words = bert_fixtures.vocabulary()
    words += [f"word{i}" for i in range(shape["vocab"] - len(words))]
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=len(words), num_layers=shape["layers"],
        num_heads=shape["heads"], hidden_dim=shape["units"],
        intermediate_dim=shape["ffn"], dropout=0.0,
        max_sequence_length=512, num_segments=2)
    task = keras_hub.models.BertMaskedLM(backbone=backbone)
    config = bert_fixtures.hf_config(
        hidden_size=shape["units"], intermediate_size=shape["ffn"],
        max_position_embeddings=512, num_attention_heads=shape["heads"],
        num_hidden_layers=shape["layers"], vocab_size=len(words))
    seed = os.path.join(directory, "seed")
    bert_fixtures.write_huggingface(
        seed, bert_fixtures.hf_tensors(task), config, vocab=words)
    model, tokenizer = bert.from_huggingface(seed)
    written = os.path.join(directory, "bert-shaped")
    bert.to_huggingface(model, tokenizer, written)
    return written


def bert_rows(directory, args, workdir):
    import tensorflow as tf

    from tfattn import export
    from tfattn.decoding import mlm_evaluation
    from tfattn.data.tokenizer import BOS_ID
    from tfattn.data.tokenizer import EOS_ID
    from tfattn.interop import bert

    model, tokenizer = bert.from_huggingface(directory)
    texts = []
    for sentence in real_size.multi30k("test_2016_flickr", "en", 32):
        words = sentence.split()
        words[len(words) // 2] = "[MASK]"
        texts.append(" ".join(words))
    # The reading rule of `mlm_evaluation` (its module docstring): BOS,
    # the pieces, EOS, right-padded (these texts fit `max_length`).
    pieces = mlm_evaluation.text_pieces(tokenizer, texts, True)
    rows = np.zeros((len(pieces), max(map(len, pieces)) + 2), np.int32)
    for i, ids in enumerate(pieces):
        rows[i, :len(ids) + 2] = [BOS_ID] + list(ids) + [EOS_ID]
    positions = [np.flatnonzero(r == tokenizer.mask_id) for r in rows]
    blanks = np.zeros((len(rows), max(len(p) for p in positions)), np.int32)
    for i, found in enumerate(positions):
        blanks[i, :len(found)] = found

    def call():
        return model({"token_ids": rows, "mask_positions": blanks},
                     training=False)

    out = [
        pair("fill_mask", lambda: mlm_evaluation.fill_mask(
            model, tokenizer, texts), "MaskedLM call", call, args.rounds)]
    saved = export.export_masked_lm(
        model, tokenizer, os.path.join(workdir, "masked_lm"),
        overwrite=True)
    signature = tf.saved_model.load(saved).signatures["fill_mask"]
    out.append(pair("SavedModel fill_mask",
                    lambda: signature(texts=tf.constant(texts)),
                    "MaskedLM call", call, args.rounds))
    ids = np.random.default_rng(0).integers(
        1000, model.vocab_size, (32, 128)).astype(np.int32)
    forward = {"token_ids": ids, "mask_positions": np.zeros((32, 1),
                                                            np.int32)}
    compiled = tf.function(lambda x: model(x, training=False),
                           jit_compile=True)
    out.append(pair("forward 32 x 128, XLA", lambda: compiled(forward),
                    "forward 32 x 128, eager",
                    lambda: model(forward, training=False), args.rounds))
    return out


# ----------------------------------------------------------------------
# The first call, each in a fresh process.

def first_call(part, directory, jit):
    """Seconds to load the checkpoint (the libraries imported before), to
    answer one short text with the task's text-level call at its defaults
    (`jit`: with XLA), tracing or compiling included, then a text of
    another length bucket, then the first text again; printed as JSON for
    the parent."""
    import time

    from tfattn.decoding import lm_evaluation
    from tfattn.decoding import mlm_evaluation
    from tfattn.decoding import translate
    from tfattn.interop import bert
    from tfattn.interop import gpt2
    from tfattn.interop import marian

    long = ("A man in a blue shirt and a woman in a red dress walk their "
            "two dogs along the crowded beach while children play in the "
            "sand near the water")
    start = time.perf_counter()
    if part == "marian":
        model, tokenizer = marian.from_huggingface(directory)

        def answer(text):
            translate.translate_texts(model, tokenizer, [text],
                                      jit_compile=jit)
    elif part == "gpt2":
        model, tokenizer = gpt2.from_huggingface(directory)

        def answer(text):
            lm_evaluation.continue_texts(model, tokenizer, [text],
                                         jit_compile=jit)
    else:
        model, tokenizer = bert.from_huggingface(directory)

        def answer(text):
            mlm_evaluation.fill_mask(model, tokenizer, [text + " [MASK]."])
    times = [time.perf_counter()]
    for text in ("A dog runs.", long, "A dog runs."):
        answer(text)
        times.append(time.perf_counter())
    print("RESULT " + json.dumps(dict(
        load_s=times[0] - start, first_s=times[1] - times[0],
        other_length_s=times[2] - times[1], again_s=times[3] - times[2])),
        flush=True)


def first_rows(part, directory):
    """The first call's figures, with and without XLA (BERT's `fill_mask`
    has no XLA setting), each in a new process."""
    import subprocess

    rows = []
    for jit in ((False, True) if part != "bert" else (False,)):
        done = subprocess.run(
            [sys.executable, os.path.abspath(__file__),
             f"--first-child={part},{int(jit)},{directory}"],
            capture_output=True, text=True)
        line = [x for x in done.stdout.splitlines()
                if x.startswith("RESULT ")]
        if not line:
            raise RuntimeError(f"{part} first call failed:\n"
                               f"{done.stderr[-3000:]}")
        row = dict(json.loads(line[0][len("RESULT "):]), xla=jit)
        print(f"first call ({'XLA' if jit else 'no XLA'}): load "
              f"{row['load_s']:.1f} s, then the first answer "
              f"{row['first_s']:.1f} s, a text of another length "
              f"{row['other_length_s']:.1f} s, the first text again "
              f"{row['again_s']:.1f} s", flush=True)
        rows.append(row)
    return rows


def main(argv=None):
    args = parse_args(argv)
    if args.first_child:
        part, jit, directory = args.first_child.split(",", 2)
        first_call(part, directory, jit == "1")
        return
    cpu = next((line.split(":", 1)[1].strip() for line in open(
        "/proc/cpuinfo") if line.startswith("model name")), "?")
    print(f"CPU: {cpu}, {os.cpu_count()} cores")
    shapes = real_size.QUICK if args.quick else real_size.SHAPES
    workdir = args.workdir or tempfile.mkdtemp()
    figures = {"cpu": cpu, "parts": {}}
    for part in args.parts.split(","):
        directory = os.path.join(workdir, part)
        name = {"marian": "opus-mt-shaped", "gpt2": "gpt2-shaped",
                "bert": "bert-shaped"}[part]
        written = os.path.join(directory, name)
        if not os.path.exists(os.path.join(written, "config.json")):
            if part == "bert":
                write_bert(BERT_QUICK if args.quick else BERT_SHAPE,
                           directory)
            else:
                getattr(real_size, f"write_{part}")(shapes[part], directory)
        print(f"\n{part}: {real_size.parameters(written) / 1e6:.1f}M "
              f"parameters\n| text-level call | seconds | model-level call "
              "| seconds | ratio |\n|---|---:|---|---:|---:|", flush=True)
        make = {"marian": marian_rows, "gpt2": gpt2_rows,
                "bert": bert_rows}[part]
        figures["parts"][part] = dict(
            calls=[] if args.first_only else make(written, args, directory),
            first=first_rows(part, written))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
