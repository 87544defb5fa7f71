"""Imported checkpoints served three ways: tfattn against keras-hub and
CTranslate2 on the same random weights, in one process.

- GPT-2 (`--parts=gpt2`): a keras-hub `GPT2CausalLM` (4 layers, width 256,
  4 heads, FFN 1024, vocabulary 8,000, every weight redrawn) saved as a
  preset and read into a `tfattn.CausalLM` by
  `tfattn.interop.gpt2.from_keras_hub`; new tokens per second, greedy, at
  batch 1 and 16, prompts of 32 tokens, 64 new tokens per row (no stop
  token): tfattn's `generate` with and without XLA, keras-hub's `generate`
  with and without XLA (`compile(jit_compile=...)`, one task object per
  mode on the one backbone), and CTranslate2's `Generator` of the export
  (`ctranslate2_spec.decoder_only_spec`), float32 and int8.
- Marian (`--parts=marian`): a random OPUS-MT-shaped Hugging Face
  directory (2 + 2 layers, width 256, 4 heads, FFN 1024, swish,
  vocabulary 8,000) read by `tfattn.interop.marian.from_huggingface`;
  new tokens per second at batch 1 and 16, sources of 32 tokens, 64 new
  tokens per row, greedy and beam 4: tfattn's `generate` with and without
  XLA against CTranslate2's `Translator` (`transformer_spec`), float32 and
  int8. The end-of-sentence logit is lowered by 100 in the checkpoint, so
  that every row of every engine runs its 64 steps.

Each table gives each side at its default (tfattn: `generate`'s default
`jit_compile`; keras-hub: what `compile()` resolves `jit_compile="auto"`
to here; CTranslate2: the export's weight type, float32) and at its best
mode, and the share of greedy tokens equal to tfattn's (without XLA) for
each peer: the engines read the same ids, so the share is 100% unless
float32 rounding flips a near tie.

    python bench/pretrained.py
    python bench/pretrained.py --quick          # smaller, a smoke test
    python bench/pretrained.py --parts=marian --batches=1
"""

import argparse
import json
import os
import tempfile

import _repo  # noqa: F401  (puts the repository root on sys.path)

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

import tfattn  # noqa: E402
from _timing import best_times  # noqa: E402
from tfattn.decoding import samplers  # noqa: E402
from tfattn.export import ctranslate2 as ct2_export  # noqa: E402
from tfattn.export import ctranslate2_spec  # noqa: E402

BOS_ID = 2  # tfattn.utils.ids.BOS_ID
MODES = {True: "XLA", False: "no XLA"}


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--parts", default="gpt2,marian",
                        help="comma-separated: gpt2, marian")
    parser.add_argument("--layers", type=int, default=4,
                        help="GPT-2 layers")
    parser.add_argument("--marian_layers", type=int, default=2,
                        help="Marian layers per stack")
    parser.add_argument("--units", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--prompt", type=int, default=32,
                        help="prompt (GPT-2) and source (Marian) tokens")
    parser.add_argument("--new", type=int, default=64)
    parser.add_argument("--batches", default="1,16")
    parser.add_argument("--beam", type=int, default=4,
                        help="Marian's beam width (0: greedy only)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count(),
                        help="CTranslate2's intra_threads")
    parser.add_argument("--json", default=None,
                        help="also write the rates to this JSON file")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.layers, args.marian_layers, args.units = 1, 1, 64
        args.vocab, args.prompt, args.new = 400, 8, 8
        args.batches, args.beam, args.rounds = "2", 2, 1
    return args


def ct2_models(model, tokenizer, kind, directory, threads):
    """{weights: a CTranslate2 `kind` (Generator or Translator)} of
    `model`, exported float32 and int8 (`checkpoint_to_ctranslate2`)."""
    import ctranslate2

    models = {}
    for weights in ("float32", "int8"):
        path = ct2_export.checkpoint_to_ctranslate2(
            model, tokenizer, os.path.join(directory, weights),
            quantization=weights)
        models[weights] = getattr(ctranslate2, kind)(
            path, device="cpu", compute_type=weights, inter_threads=1,
            intra_threads=threads)
    return models


def agreement(reference, other):
    """Share of tokens of `other` equal to `reference`'s ([B, N] ids)."""
    reference, other = np.asarray(reference), np.asarray(other)
    return float(np.mean(reference == other[:, :reference.shape[1]]))


# ----------------------------------------------------------------------
# GPT-2.

def gpt2_preset(args, directory):
    """Saves a random keras-hub GPT2CausalLM preset; returns its
    backbone. The vocabulary: GPT-2's 256 byte symbols, made-up tokens,
    `<|endoftext|>` last (two merges: the benchmark runs on ids)."""
    import keras_hub
    from keras_hub.src.tokenizers.byte_pair_tokenizer import bytes_to_unicode

    _, symbols = bytes_to_unicode()
    merges = ["\u0120 t", "h e"]
    tokens = list(symbols) + ["\u0120t", "he"]
    tokens += [f"\u0120w{i}" for i in range(args.vocab - len(tokens) - 1)]
    vocab = {token: i for i, token in enumerate(tokens + ["<|endoftext|>"])}
    tokenizer = keras_hub.models.GPT2Tokenizer(vocabulary=vocab,
                                               merges=merges)
    backbone = keras_hub.models.GPT2Backbone(
        vocabulary_size=len(vocab), num_layers=args.layers,
        num_heads=args.heads, hidden_dim=args.units,
        intermediate_dim=4 * args.units, dropout=0.0,
        max_sequence_length=args.prompt + args.new + 32)
    rng = np.random.default_rng(0)
    for weight in backbone.weights:
        shape = tuple(weight.shape)
        if weight.path.endswith("gamma"):
            value = 1.0 + rng.normal(0.0, 0.1, shape)
        elif weight.path.endswith(("beta", "bias")):
            value = rng.normal(0.0, 0.1, shape)
        elif "embedding" in weight.path:
            value = rng.normal(0.0, 1.0, shape)
        else:
            value = rng.normal(0.0, shape[0] ** -0.5, shape)
        weight.assign(value.astype("float32"))
    preprocessor = keras_hub.models.GPT2CausalLMPreprocessor(
        tokenizer=tokenizer, sequence_length=args.prompt + args.new)
    keras_hub.models.GPT2CausalLM(
        backbone=backbone, preprocessor=preprocessor).save_to_preset(
            directory)
    return backbone


def gpt2_contenders(args, lm, tokenizer, backbone, ct2, batch):
    """{name: callable} for one batch of random prompts, and the
    tfattn ids [B, P] of the prompts (BOS first)."""
    import keras_hub

    from tfattn.interop.gpt2_tokenizer import to_gpt2_ids

    rng = np.random.default_rng(batch)
    prompts = rng.integers(4, lm.vocab_size, (batch, args.prompt - 1))
    prompts = np.concatenate([np.full((batch, 1), BOS_ID), prompts],
                             axis=1).astype("int32")
    total = args.prompt + args.new
    token_ids = np.zeros((batch, total), "int32")
    token_ids[:, :args.prompt] = to_gpt2_ids(prompts,
                                             tokenizer.end_of_text_id)
    mask = np.zeros((batch, total), bool)
    mask[:, :args.prompt] = True
    contenders = {}
    for jit in (False, True):
        contenders["tfattn" + (" XLA" if jit else "")] = (
            lambda jit=jit: lm.generate(prompts, args.new, "greedy",
                                        stop_token_ids=(),
                                        jit_compile=jit)[0])
    for jit in (False, True):
        hub = keras_hub.models.GPT2CausalLM(backbone=backbone,
                                            preprocessor=None)
        hub.compile(sampler="greedy", jit_compile=jit)
        contenders["keras-hub" + (" XLA" if jit else "")] = (
            lambda hub=hub: hub.generate(
                {"token_ids": token_ids, "padding_mask": mask},
                stop_token_ids=None))
    pieces = ctranslate2_spec.checkpoint_pieces(tokenizer)
    tokens = [[pieces[i] for i in row] for row in prompts]
    for weights, generator in ct2.items():
        contenders[f"CTranslate2 {weights}"] = (
            lambda generator=generator: generator.generate_batch(
                tokens, max_length=args.new, min_length=args.new,
                sampling_topk=1, include_prompt_in_result=False,
                max_batch_size=batch))
    return contenders


def gpt2_outputs(args, times, tokenizer):
    """Each contender's greedy continuation as tfattn ids [B, new]."""
    from tfattn.interop.gpt2_tokenizer import to_tfattn_ids

    outputs = {}
    for name, timing in times.items():
        if name.startswith("tfattn"):
            outputs[name] = np.asarray(timing.output)
        elif name.startswith("keras-hub"):
            outputs[name] = to_tfattn_ids(
                np.asarray(timing.output["token_ids"])[:, args.prompt:],
                tokenizer.end_of_text_id)
        else:
            outputs[name] = np.array([r.sequences_ids[0]
                                      for r in timing.output])
            assert outputs[name].shape[1] == args.new, (name,
                                                        outputs[name].shape)
    return outputs


def gpt2_bench(args):
    """Rows (batch, {contender: new tokens/s}, {peer: agreement})."""
    from tfattn.interop import gpt2

    directory = tempfile.mkdtemp()
    backbone = gpt2_preset(args, os.path.join(directory, "preset"))
    lm, tokenizer = gpt2.from_keras_hub(os.path.join(directory, "preset"))
    ct2 = ct2_models(lm, tokenizer, "Generator",
                     os.path.join(directory, "ct2"), args.threads)
    rows = []
    for batch in [int(b) for b in args.batches.split(",")]:
        times = best_times(gpt2_contenders(args, lm, tokenizer, backbone,
                                           ct2, batch), rounds=args.rounds)
        outputs = gpt2_outputs(args, times, tokenizer)
        rates = {k: batch * args.new / v.seconds for k, v in times.items()}
        rows.append((batch, "greedy", rates, {
            k: agreement(outputs["tfattn"], v) for k, v in outputs.items()
            if k != "tfattn"}))
    return rows


# ----------------------------------------------------------------------
# Marian.

def marian_directory(args, directory):
    """Writes a random Marian (OPUS-MT-shaped) Hugging Face directory."""
    from tests import marian_fixtures as fx

    names = (["</s>", "<unk>"] + [f"\u2581w{i}" for i in range(
        args.vocab - 3)] + ["<pad>"])
    vocab = {piece: i for i, piece in enumerate(names)}
    pad, eos = len(vocab) - 1, 0
    config = dict(
        fx.CONFIG, d_model=args.units, encoder_layers=args.marian_layers,
        decoder_layers=args.marian_layers, encoder_attention_heads=args.heads,
        decoder_attention_heads=args.heads, encoder_ffn_dim=4 * args.units,
        decoder_ffn_dim=4 * args.units, dropout=0.0,
        max_position_embeddings=args.prompt + args.new + 32,
        vocab_size=len(vocab), decoder_vocab_size=len(vocab),
        pad_token_id=pad, decoder_start_token_id=pad, bad_words_ids=[[pad]])
    weights = fx.random_weights(config)
    weights["final_logits_bias"][0, eos] -= 100.0  # every row runs on
    spm = fx.trained_spm(fx.SOURCE_TEXTS, 90)
    files = {"source.spm": spm, "target.spm": spm,
             "vocab.json": json.dumps(vocab).encode(),
             "tokenizer_config.json": json.dumps(dict(
                 source_lang="en", target_lang="de", separate_vocabs=False,
                 tokenizer_class="MarianTokenizer")).encode()}
    fx.write_directory(directory, config, weights, files)


def marian_contenders(args, model, pieces, ct2, batch, beam):
    rng = np.random.default_rng(batch)
    source = rng.integers(4, len(pieces), (batch, args.prompt - 1))
    with_eos = np.concatenate([source, np.full((batch, 1), 3)],
                              axis=1).astype("int32")
    sampler = "greedy" if beam == 1 else samplers.BeamSampler(beam_size=beam)
    contenders = {}
    for jit in (False, True):
        contenders["tfattn" + (" XLA" if jit else "")] = (
            lambda jit=jit: model.generate(
                with_eos, args.new, sampler=sampler, stop_token_ids=None,
                extra_length=args.new, jit_compile=jit)[0])
    tokens = [[pieces[i] for i in row] for row in source]
    for weights, translator in ct2.items():
        contenders[f"CTranslate2 {weights}"] = (
            lambda translator=translator: translator.translate_batch(
                tokens, beam_size=beam, max_decoding_length=args.new,
                min_decoding_length=args.new, max_batch_size=batch))
    return contenders


def marian_bench(args):
    """Rows (batch, search, {contender: new tokens/s}, {peer:
    agreement})."""
    from tfattn.interop import marian

    directory = tempfile.mkdtemp()
    marian_directory(args, os.path.join(directory, "hf"))
    model, tokenizer = marian.from_huggingface(os.path.join(directory, "hf"))
    pieces = ctranslate2_spec.checkpoint_pieces(tokenizer)
    ct2 = ct2_models(model, tokenizer, "Translator",
                     os.path.join(directory, "ct2"), args.threads)
    index = {piece: i for i, piece in enumerate(pieces)}
    rows = []
    beams = [1] + ([args.beam] if args.beam > 1 else [])
    for batch in [int(b) for b in args.batches.split(",")]:
        for beam in beams:
            times = best_times(marian_contenders(args, model, pieces, ct2,
                                                 batch, beam),
                               rounds=args.rounds)
            outputs = {k: np.asarray(v.output) for k, v in times.items()
                       if k.startswith("tfattn")}
            for weights in ct2:
                outputs[f"CTranslate2 {weights}"] = np.array([
                    [index[p] for p in r.hypotheses[0]]
                    for r in times[f"CTranslate2 {weights}"].output])
            rates = {k: batch * args.new / v.seconds
                     for k, v in times.items()}
            rows.append((batch, "greedy" if beam == 1 else f"beam {beam}",
                         rates, {k: agreement(outputs["tfattn"], v)
                                 for k, v in outputs.items()
                                 if k != "tfattn"}))
    return rows


# ----------------------------------------------------------------------
# Report.

def hub_default_xla():
    """What keras-hub's `compile()` resolves `jit_compile="auto"` to."""
    import keras_hub

    backbone = keras_hub.models.GPT2Backbone(
        vocabulary_size=10, num_layers=1, num_heads=1, hidden_dim=4,
        intermediate_dim=4, max_sequence_length=4)
    hub = keras_hub.models.GPT2CausalLM(backbone=backbone,
                                        preprocessor=None)
    hub.compile(sampler="greedy")
    return bool(hub.jit_compile)


def best(rates, prefix):
    return max(v for k, v in rates.items() if k.startswith(prefix))


def print_rows(title, rows, defaults):
    """A Markdown table: the rates, then the ratios to tfattn at the
    defaults (`defaults`: {side: its default contender}) and best against
    best, then the greedy agreement."""
    sides = list(defaults)
    names = list(rows[0][2])
    print(f"\n{title}; defaults: " + ", ".join(defaults.values()))
    labels = [f"{n} (no XLA)" if n in ("tfattn", "keras-hub") else n
              for n in names]
    print("| batch | search | " + " | ".join(labels) + " | "
          + " | ".join(f"tfattn / {s}, defaults | tfattn / {s}, best"
                       for s in sides[1:])
          + " | tokens equal to tfattn's |")
    print("|---:|---|" + "---:|" * (len(names) + 2 * len(sides) - 2)
          + "---|")
    for batch, search, rates, agree in rows:
        ratios = []
        for side in sides[1:]:
            ratios.append(rates[defaults["tfattn"]] / rates[defaults[side]])
            ratios.append(best(rates, "tfattn") / best(rates, side))
        print(f"| {batch} | {search} | "
              + " | ".join(f"{rates[n]:,.0f}" for n in names) + " | "
              + " | ".join(f"{r:.2f}x" for r in ratios) + " | "
              + ", ".join(f"{k} {v:.0%}" for k, v in agree.items()) + " |")


def main():
    args = parse_args()
    import inspect

    cpu = next((line.split(":", 1)[1].strip() for line in open(
        "/proc/cpuinfo") if line.startswith("model name")), "?")
    print(f"CPU: {cpu}; Keras {keras.__version__} "
          f"({keras.config.backend()}); prompt/source {args.prompt}, "
          f"{args.new} new tokens; CTranslate2 intra_threads "
          f"{args.threads}")
    ours = inspect.signature(tfattn.CausalLM.generate).parameters[
        "jit_compile"].default
    tfattn_default = "tfattn XLA" if ours else "tfattn"
    results = {}
    if "gpt2" in args.parts:
        hub = "keras-hub XLA" if hub_default_xla() else "keras-hub"
        rows = gpt2_bench(args)
        print_rows(f"GPT-2 ({args.layers} layers, width {args.units}, "
                   f"vocabulary {args.vocab}), new tokens/s", rows,
                   {"tfattn": tfattn_default, "keras-hub": hub,
                    "CTranslate2": "CTranslate2 float32"})
        results["gpt2"] = rows
    if "marian" in args.parts:
        rows = marian_bench(args)
        print_rows(f"Marian ({args.marian_layers}+{args.marian_layers} "
                   f"layers, width {args.units}, vocabulary {args.vocab}), "
                   "new tokens/s", rows,
                   {"tfattn": tfattn_default,
                    "CTranslate2": "CTranslate2 float32"})
        results["marian"] = rows
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(cpu=cpu, args=vars(args), results={
                part: [dict(batch=b, search=s, rates=r, agreement=a)
                       for b, s, r, a in rows]
                for part, rows in results.items()}), f, indent=2)


if __name__ == "__main__":
    main()
