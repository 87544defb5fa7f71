"""Decoding at the sizes people use: OPUS-MT en-de's and GPT-2 small's
shapes, tfattn beside CTranslate2 (float32 and int8), each engine alone in
a process of its own.

Nothing is downloaded. The checkpoints are random and written by tfattn's
own writers, then read back by its readers, as a user's would be:

- Marian (OPUS-MT en-de's shape: 6 + 6 layers, width 512, 8 heads, FFN
  2,048, swish, vocabulary 58,101; 73.9M parameters): a SentencePiece
  model trained on the shared Multi30k training text (English and German),
  its pieces filled up to 58,101 entries; a Hugging Face directory of
  random weights read by `tfattn.interop.marian.from_huggingface`, written
  again by `marian.to_huggingface`, and that copy read back. Sources: the
  first Multi30k test sentences (English), 64 new tokens per row: the
  end-of-sentence logit is lowered by 100, so that no engine stops early.
- GPT-2 (12 layers, width 768, 12 heads, vocabulary 50,257; 124.4M): a
  random keras-hub preset read by `gpt2.from_keras_hub`, written by
  `gpt2.to_huggingface`, read back by `gpt2.from_huggingface`. 16-token
  random prompts, 64 new tokens, no stop token.

The engines (`--engines`): `tfattn` (`generate` at its defaults, XLA),
`tfattn-plain` (`jit_compile=False`), `ct2-float32` and `ct2-int8` (the
`checkpoint_to_ctranslate2` exports, `intra_threads` = the CPU count), and
`ct2-float32-onednn`, `ct2-int8-onednn`: the same with `CT2_USE_MKL=0`
(oneDNN's GEMMs instead of MKL's), and `tfattn-keras-int8`: `generate`
(XLA) after Keras's `model.quantize("int8")`.
Settings, as the issue that asked for this bench measured them: Marian
greedy and beam 4 at batch 1 (`--sentences` rows, one call each) and batch
16 (`2 x --sentences` rows); GPT-2 greedy at batch 1 and 8.

Each engine's process prints, per setting: the seconds of the best of
`--rounds` passes over the rows (after one untimed pass), new tokens per
second, and the first call's time (from a loaded checkpoint, compiling
included), and once its peak resident memory. At batch 1 greedy, the
weight traffic a step implies (every weight read once a token) is set
beside the machine's memory bandwidth (the best of five 1 GiB array
copies, read + write), so that the distance to the limit shows.

    python bench/real_size.py
    python bench/real_size.py --parts=marian --engines=tfattn,ct2-float32
    python bench/real_size.py --quick          # small shapes, a smoke test
"""

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time

import _repo  # noqa: F401  (puts the repository root on sys.path)

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

MULTI30K = os.environ.get("MULTI30K_DIR", os.path.join(
    _repo.ROOT, "..", "shared", "data", "multi30k", "raw"))
ENGINES = ("tfattn", "tfattn-plain", "ct2-float32", "ct2-int8")
# CTranslate2 with oneDNN's GEMMs instead of Intel MKL's, its default on
# x86 (`CT2_USE_MKL=0`): its other backend, the one its AVX2 limit uses.
ONEDNN_ENGINES = ("ct2-float32-onednn", "ct2-int8-onednn")
# tfattn's generate (XLA) after Keras's `model.quantize("int8")`.
KERAS_INT8 = "tfattn-keras-int8"
SHAPES = {
    "marian": dict(layers=6, units=512, heads=8, ffn=2048, vocab=58101),
    "gpt2": dict(layers=12, units=768, heads=12, ffn=3072, vocab=50257),
}
QUICK = {
    "marian": dict(layers=1, units=64, heads=4, ffn=128, vocab=2000),
    "gpt2": dict(layers=1, units=64, heads=4, ffn=128, vocab=2000),
}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--parts", default="marian,gpt2")
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--sentences", type=int, default=16,
                        help="rows at batch 1 (twice as many at batch 16)")
    parser.add_argument("--new", type=int, default=64)
    parser.add_argument("--prompt", type=int, default=16,
                        help="GPT-2 prompt tokens")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--workdir", default=None,
                        help="checkpoints here (kept and reused); default: "
                             "a temporary directory")
    parser.add_argument("--json", default=None,
                        help="also write every figure to this JSON file")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def multi30k(split, language, count):
    with gzip.open(os.path.join(MULTI30K, f"{split}.{language}.gz"),
                   "rt", encoding="utf-8") as f:
        return [line.strip() for _, line in zip(range(count), f)]


def memory_bandwidth():
    """GB/s of a 1 GiB float32 array copy (bytes read + written), best of
    5."""
    a = np.ones(2 ** 28, np.float32)
    b = np.empty_like(a)
    best = min(_timed(lambda: np.copyto(b, a)) for _ in range(5))
    return 2 * a.nbytes / best / 1e9


def _timed(function):
    start = time.perf_counter()
    function()
    return time.perf_counter() - start


def peak_memory_gb():
    """This process's peak resident memory (VmHWM: its own address space,
    not a parent's high-water mark that getrusage carries over exec)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 2 ** 20
    return float("nan")


# ----------------------------------------------------------------------
# The checkpoints.

def write_marian(shape, directory):
    """A random OPUS-MT-shaped Marian directory through tfattn's writer;
    returns the directory `from_huggingface` reads."""
    from tests import marian_fixtures as fx
    from tfattn.interop import marian

    texts = multi30k("train", "en", 30000) + multi30k("train", "de", 30000)
    spm = fx.trained_spm(texts, min(8000, shape["vocab"] // 2))
    pieces = fx.spm_processor(spm)
    names = ["</s>", "<unk>"] + sorted(
        {pieces.id_to_piece(i) for i in range(pieces.get_piece_size())}
        - {"<unk>", "<s>", "</s>"})
    names += [f"\u2581fill{i}" for i in range(shape["vocab"] - len(names)
                                              - 1)] + ["<pad>"]
    vocab = {piece: i for i, piece in enumerate(names)}
    pad, eos = len(vocab) - 1, 0
    config = dict(
        fx.CONFIG, d_model=shape["units"], encoder_layers=shape["layers"],
        decoder_layers=shape["layers"],
        encoder_attention_heads=shape["heads"],
        decoder_attention_heads=shape["heads"],
        encoder_ffn_dim=shape["ffn"], decoder_ffn_dim=shape["ffn"],
        dropout=0.0, max_position_embeddings=512, vocab_size=len(vocab),
        decoder_vocab_size=len(vocab), pad_token_id=pad,
        decoder_start_token_id=pad, bad_words_ids=[[pad]])
    weights = fx.random_weights(config)
    for name, value in weights.items():  # Activations of a unit scale.
        if value.ndim == 2 and "final_logits_bias" not in name:
            weights[name] = value * (0.2 * value.shape[-1] ** 0.5) ** -1
    weights["final_logits_bias"][0, eos] -= 100.0  # every row runs on
    files = {"source.spm": spm, "target.spm": spm,
             "vocab.json": json.dumps(vocab).encode(),
             "tokenizer_config.json": json.dumps(dict(
                 source_lang="en", target_lang="de", separate_vocabs=False,
                 tokenizer_class="MarianTokenizer")).encode()}
    seed = os.path.join(directory, "seed")
    fx.write_directory(seed, config, weights, files)
    model, tokenizer = marian.from_huggingface(seed)
    written = os.path.join(directory, "opus-mt-shaped")
    marian.to_huggingface(model, tokenizer, written)
    return written


def write_gpt2(shape, directory):
    """A random GPT-2-small-shaped directory through tfattn's writer;
    returns the directory `from_huggingface` reads."""
    from pretrained import gpt2_preset
    from tfattn.interop import gpt2

    preset = os.path.join(directory, "preset")
    gpt2_preset(argparse.Namespace(
        vocab=shape["vocab"], layers=shape["layers"], heads=shape["heads"],
        units=shape["units"], prompt=0, new=1024 - 32), preset)
    model, tokenizer = gpt2.from_keras_hub(preset)
    written = os.path.join(directory, "gpt2-shaped")
    gpt2.to_huggingface(model, tokenizer, written)
    return written


def step_weights(part, shape):
    """The weights one decoding step reads: each decoder layer's matrices
    (Marian: self-attention's four, cross-attention's query and output
    ones, its keys and values being computed once per source; GPT-2:
    attention's four) and the output layer (the tied table, V x C)."""
    c, f = shape["units"], shape["ffn"]
    attention = 6 * c * c if part == "marian" else 4 * c * c
    return shape["layers"] * (attention + 2 * c * f) + shape["vocab"] * c


def parameters(directory):
    import safetensors.numpy

    tensors = safetensors.numpy.load_file(
        os.path.join(directory, "model.safetensors"))
    return sum(int(np.prod(t.shape)) for t in tensors.values())


# ----------------------------------------------------------------------
# One engine, in its own process.

def marian_rows(tokenizer, count):
    """The source ids of the first `count` test sentences, each [S]."""
    texts = multi30k("test_2016_flickr", "en", count)
    return [np.asarray(tokenizer.encode(t), np.int32) for t in texts]


def batched(rows, batch):
    """[B, S] id arrays of `batch` rows each, right-padded with 0."""
    out = []
    for i in range(0, len(rows), batch):
        chunk = rows[i:i + batch]
        width = max(len(r) for r in chunk)
        out.append(np.stack([np.pad(r, (0, width - len(r)))
                             for r in chunk]))
    return out


def ct2_model(kind, engine, model, tokenizer, directory):
    """(a CTranslate2 `kind` (Translator or Generator) of the checkpoint's
    `checkpoint_to_ctranslate2` export in the engine's weights, its token
    strings by tfattn id), or (None, None) for a tfattn engine."""
    if not engine.startswith("ct2"):
        return None, None
    import ctranslate2

    from tfattn.export import ctranslate2 as ct2_export
    from tfattn.export import ctranslate2_spec

    weights = engine.split("-")[1]
    path = ct2_export.checkpoint_to_ctranslate2(
        model, tokenizer, os.path.join(directory, engine),
        quantization=weights, overwrite=True)
    return (getattr(ctranslate2, kind)(
        path, device="cpu", compute_type=weights, inter_threads=1,
        intra_threads=os.cpu_count()),
        ctranslate2_spec.checkpoint_pieces(tokenizer))


def marian_engine(engine, model, tokenizer, directory, args):
    """{(search, batch): callable over every batch of that setting}."""
    from tfattn.decoding import samplers

    rows = marian_rows(tokenizer, 2 * args.sentences)
    settings = {}
    translator, pieces = ct2_model("Translator", engine, model, tokenizer,
                                   directory)
    for beam in (1, 4):
        for batch in (1, 16):
            chunks = batched(rows[:args.sentences] if batch == 1 else rows,
                             batch)
            if translator is not None:
                # CTranslate2 appends </s> (tfattn's EOS_ID, 3) itself.
                tokens = [[[pieces[i] for i in row if i not in (0, 3)]
                           for row in chunk] for chunk in chunks]
                settings[beam, batch] = (
                    lambda tokens=tokens, beam=beam: [
                        translator.translate_batch(
                            t, beam_size=beam,
                            max_decoding_length=args.new,
                            min_decoding_length=args.new)
                        for t in tokens])
                continue
            sampler = ("greedy" if beam == 1
                       else samplers.BeamSampler(beam_size=beam))
            jit = engine in ("tfattn", KERAS_INT8)
            settings[beam, batch] = (
                lambda chunks=chunks, sampler=sampler, jit=jit: [
                    model.generate(c, args.new, sampler=sampler,
                                   stop_token_ids=None,
                                   extra_length=args.new, jit_compile=jit)
                    for c in chunks])
    return settings, len(rows[:args.sentences]), len(rows)


def gpt2_engine(engine, model, tokenizer, directory, args):
    """{(1, batch): callable over the prompts of that batch size}."""
    rng = np.random.default_rng(0)
    rows = rng.integers(4, model.vocab_size, (8 * 2, args.prompt))
    rows[:, 0] = 2  # tfattn's BOS
    rows = rows.astype(np.int32)
    settings = {}
    generator, pieces = ct2_model("Generator", engine, model, tokenizer,
                                  directory)
    for batch in (1, 8):
        chunks = [rows[i:i + batch] for i in range(0, 8, batch)][
            :args.sentences if batch == 1 else 1]
        if generator is not None:
            tokens = [[[pieces[i] for i in row] for row in c]
                      for c in chunks]
            settings[1, batch] = (lambda tokens=tokens: [
                generator.generate_batch(
                    t, max_length=args.new, min_length=args.new,
                    sampling_topk=1, include_prompt_in_result=False)
                for t in tokens])
            continue
        jit = engine in ("tfattn", KERAS_INT8)
        settings[1, batch] = (lambda chunks=chunks, jit=jit: [
            model.generate(c, args.new, "greedy", stop_token_ids=(),
                           jit_compile=jit) for c in chunks])
    return settings, min(args.sentences, 8), 8


def run_child(spec, args):
    """Loads one part's checkpoint, times one engine, prints JSON."""
    part, engine, directory = spec.split(",", 2)
    from tfattn.interop import gpt2
    from tfattn.interop import marian

    reader = {"marian": marian, "gpt2": gpt2}[part]
    start = time.perf_counter()
    model, tokenizer = reader.from_huggingface(
        os.path.join(directory, {"marian": "opus-mt-shaped",
                                 "gpt2": "gpt2-shaped"}[part]))
    load = time.perf_counter() - start
    if engine == KERAS_INT8:
        # Keras's int8 quantization of every layer that has one (Dense:
        # int8 weights, activations quantized per call); tfattn's tied
        # output layer (TokenEmbedding) has none and stays float32.
        model.quantize("int8")
    make = {"marian": marian_engine, "gpt2": gpt2_engine}[part]
    settings, rows_1, rows_n = make(engine, model, tokenizer, directory,
                                    args)
    result = {"load_s": load, "settings": []}
    for (beam, batch), run in settings.items():
        first = _timed(run)
        best = min(_timed(run) for _ in range(args.rounds))
        rows = rows_1 if batch == 1 else rows_n
        result["settings"].append(dict(
            search="greedy" if beam == 1 else f"beam {beam}", batch=batch,
            rows=rows, seconds=best, first_pass_s=first,
            tokens_per_s=rows * args.new / best))
    result["peak_memory_gb"] = peak_memory_gb()
    print("RESULT " + json.dumps(result), flush=True)


# ----------------------------------------------------------------------
# The report.

def run_engine(part, engine, directory, args):
    command = [sys.executable, os.path.abspath(__file__),
               f"--child={part},{engine},{directory}",
               f"--sentences={args.sentences}", f"--new={args.new}",
               f"--prompt={args.prompt}", f"--rounds={args.rounds}"]
    env = dict(os.environ)
    if engine in ONEDNN_ENGINES:
        env["CT2_USE_MKL"] = "0"
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError(f"{part} {engine} failed:\n{done.stderr[-3000:]}")


def report(part, results, weights_bytes, bandwidth, args):
    engines = list(results)
    print(f"\n{part}: seconds for the rows (new tokens/s); first pass "
          "(compiling included)")
    print("| search, batch (rows) | " + " | ".join(engines)
          + " | tfattn / CTranslate2 float32 |")
    print("|---|" + "---:|" * (len(engines) + 1))
    settings = results[engines[0]]["settings"]
    for i, setting in enumerate(settings):
        cells = []
        for engine in engines:
            s = results[engine]["settings"][i]
            cells.append(f"{s['seconds']:.2f} ({s['tokens_per_s']:.0f}; "
                         f"first {s['first_pass_s']:.1f})")
        ratio = ""
        if "tfattn" in results and "ct2-float32" in results:
            ours = results["tfattn"]["settings"][i]["seconds"]
            theirs = results["ct2-float32"]["settings"][i]["seconds"]
            ratio = f"{theirs / ours:.2f}x"
        print(f"| {setting['search']}, {setting['batch']} "
              f"({setting['rows']}) | " + " | ".join(cells) + f" | {ratio} |")
    print("load (s): " + ", ".join(
        f"{e} {r['load_s']:.1f}" for e, r in results.items())
        + "; peak memory (GB): " + ", ".join(
        f"{e} {r['peak_memory_gb']:.2f}" for e, r in results.items()))
    for engine, result in results.items():
        greedy = result["settings"][0]
        step = greedy["seconds"] / (greedy["rows"] * args.new)
        print(f"{engine}: batch-1 greedy {step * 1e3:.1f} ms a token, "
              f"{weights_bytes / step / 1e9:.1f} GB/s of weights read "
              f"({weights_bytes / step / 1e9 / bandwidth:.0%} of the "
              f"{bandwidth:.1f} GB/s copy bandwidth)")


def main(argv=None):
    args = parse_args(argv)
    if args.child:
        run_child(args.child, args)
        return
    cpu = next((line.split(":", 1)[1].strip() for line in open(
        "/proc/cpuinfo") if line.startswith("model name")), "?")
    bandwidth = memory_bandwidth()
    print(f"CPU: {cpu}, {os.cpu_count()} cores; memory bandwidth "
          f"{bandwidth:.1f} GB/s (1 GiB copy, read + write); "
          f"{args.new} new tokens a row")
    shapes = QUICK if args.quick else SHAPES
    workdir = args.workdir or tempfile.mkdtemp()
    figures = {"cpu": cpu, "bandwidth_gb_s": bandwidth, "parts": {}}
    for part in args.parts.split(","):
        directory = os.path.join(workdir, part)
        written = os.path.join(directory, {"marian": "opus-mt-shaped",
                                           "gpt2": "gpt2-shaped"}[part])
        if not os.path.exists(os.path.join(written, "config.json")):
            {"marian": write_marian, "gpt2": write_gpt2}[part](
                shapes[part], directory)
        count = parameters(written)
        weights_bytes = 4 * step_weights(part, shapes[part])
        print(f"\n{part}: {count / 1e6:.1f}M parameters ({written})")
        results = {e: run_engine(part, e, directory, args)
                   for e in args.engines.split(",")}
        report(part, results, weights_bytes, bandwidth, args)
        figures["parts"][part] = dict(parameters=count, results=results)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=1)


if __name__ == "__main__":
    main()
