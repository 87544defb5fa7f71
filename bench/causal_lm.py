"""GPT-style language model: generation and training speed against
keras-hub's GPT-2, in one process, same sizes, random weights.

- Generation: new tokens per second at batch 1 and 16, prompts of 32
  tokens, 64 new tokens per row (no stop token), greedy and top-p (p=0.9):
  `tfattn.CausalLM.generate` (prompt prefilled in one pass, one compiled
  while-loop; with and without XLA) against
  `keras_hub.models.GPT2CausalLM.generate` (its own compiled loop; with and
  without XLA: `compile(sampler=..., jit_compile=False / True)`) with the
  same sampler, and against CTranslate2's `Generator` on the same weights
  (`tfattn.export.ctranslate2_spec.decoder_only_spec`), float32 and int8
  (`min_length` = `max_length` = 64: every row emits 64 tokens). Two ratios
  against keras-hub: each side at its default (tfattn's `generate` default
  `jit_compile`; keras-hub's `compile()` default `jit_compile="auto"`,
  which Keras resolves to no XLA on a CPU-only TensorFlow), and each side's
  best mode against the other's best.
- Training: tokens per second of one `train_on_batch` step (Adam, sparse
  cross-entropy from logits) at batch 16 x 128 tokens, each model in
  float32 and in mixed_bfloat16, with and without XLA (the best of the four
  is each side's best setting on this CPU).

The models: 4 pre-norm layers of width 256, 4 heads, FFN 1024, vocabulary
8,000, 128 positions, output head tied to the token embedding (GPT-2's
layout; GPT-2's learned positions against tfattn's sinusoid, GELU against
ReLU: the same matmul sizes).

    python bench/causal_lm.py
    python bench/causal_lm.py --quick        # smaller, for a smoke test
    python bench/causal_lm.py --parts=generation
"""

import argparse
import os

import _repo  # noqa: F401  (puts the repository root on sys.path)

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

import tfattn  # noqa: E402
from _timing import best_times  # noqa: E402
from tfattn.decoding import samplers  # noqa: E402


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--units", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--prompt", type=int, default=32)
    parser.add_argument("--new", type=int, default=64)
    parser.add_argument("--batches", default="1,16")
    parser.add_argument("--train_length", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--parts", default="generation,training")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.layers, args.units, args.vocab, args.new = 1, 64, 500, 8
        args.prompt, args.train_length, args.rounds = 8, 32, 1
    return args


def tfattn_lm(args):
    keras.utils.set_random_seed(0)
    lm = tfattn.CausalLM(
        vocab_size=args.vocab, num_layers=args.layers, num_units=args.units,
        num_heads=args.heads, ffn_units=4 * args.units, dropout_rate=0.0,
        normalize_first=True, max_length=args.prompt + args.new + 32)
    lm(np.ones((1, 4), "int32"))
    return lm


def hub_lm(args):
    import keras_hub

    keras.utils.set_random_seed(0)
    backbone = keras_hub.models.GPT2Backbone(
        vocabulary_size=args.vocab, num_layers=args.layers,
        num_heads=args.heads, hidden_dim=args.units,
        intermediate_dim=4 * args.units, dropout=0.0,
        max_sequence_length=args.prompt + args.new + 32)
    return keras_hub.models.GPT2CausalLM(backbone=backbone, preprocessor=None)


def ct2_generators(lm, directory):
    """CTranslate2 `Generator`s of `lm` (float32 and int8), with piece
    names standing for the ids (`t5` for id 5)."""
    import ctranslate2

    from tfattn.export import ctranslate2 as ct2_export
    from tfattn.export import ctranslate2_spec

    pieces = ["<pad>", "<unk>", "<s>", "</s>"] + [
        f"t{i}" for i in range(4, lm.vocab_size)]
    generators = {}
    for weights in ("float32", "int8"):
        path = os.path.join(directory, weights)
        spec = ctranslate2_spec.decoder_only_spec(lm, pieces)
        ct2_export._save_spec(spec, path, weights)
        generators[weights] = ctranslate2.Generator(
            path, device="cpu", compute_type=weights,
            inter_threads=1, intra_threads=os.cpu_count())
    return generators


def ct2_run(generator, prompts, new, sampler):
    tokens = [["<s>"] + [f"t{i}" for i in row] for row in prompts]
    options = (dict(sampling_topk=1) if sampler == "greedy"
               else dict(sampling_topk=0, sampling_topp=0.9))
    return lambda: generator.generate_batch(
        tokens, max_length=new, min_length=new,
        include_prompt_in_result=False, max_batch_size=len(tokens),
        **options)


def tfattn_run(lm, prompts, new, sampler, jit):
    """A call of `lm.generate` with `jit_compile=jit`, as a closure."""
    return lambda: lm.generate(prompts, new, sampler=sampler,
                               stop_token_ids=(), seed=1, jit_compile=jit)


def defaults(hub):
    """(tfattn's, keras-hub's) generate default for XLA: booleans.

    tfattn's from `CausalLM.generate`'s signature; keras-hub's from what
    `compile()` without `jit_compile` resolves to on this machine.
    """
    import inspect

    ours = inspect.signature(tfattn.CausalLM.generate).parameters[
        "jit_compile"].default
    hub.compile(sampler="greedy")
    return bool(ours), bool(hub.jit_compile)


def ratios(rates, tfattn_xla, hub_xla):
    """tfattn / keras-hub at each side's default, and best against best."""
    ours = rates["tfattn XLA" if tfattn_xla else "tfattn"]
    theirs = rates["keras-hub XLA" if hub_xla else "keras-hub"]
    best_ours = max(rates["tfattn"], rates["tfattn XLA"])
    best_theirs = max(rates["keras-hub"], rates["keras-hub XLA"])
    return ours / theirs, best_ours / best_theirs


def generation(args, lm, hubs):
    """New tokens/s of every contender, per batch and sampler.

    Args:
        args: the parsed command line.
        lm: the tfattn.CausalLM.
        hubs: {False: keras-hub GPT2CausalLM, True: another with the same
            weights}; each is compiled with that `jit_compile`, so both
            keras-hub modes run in the same interleaved rounds.

    Returns:
        List of (batch, sampler name, {contender: new tokens/s}).
    """
    import tempfile

    import keras_hub

    ct2 = ct2_generators(lm, tempfile.mkdtemp())

    rng = np.random.default_rng(0)
    rows = []
    for batch in [int(b) for b in args.batches.split(",")]:
        prompts = rng.integers(4, args.vocab, (batch, args.prompt)).astype(
            "int32")
        total = args.prompt + args.new
        token_ids = np.zeros((batch, total), "int32")
        token_ids[:, :args.prompt] = prompts
        mask = np.zeros((batch, total), bool)
        mask[:, :args.prompt] = True
        hub_inputs = {"token_ids": token_ids, "padding_mask": mask}
        for name, ours, theirs in (
                ("greedy", "greedy", "greedy"),
                ("top-p 0.9", samplers.TopPSampler(0.9),
                 keras_hub.samplers.TopPSampler(p=0.9))):
            contenders = {
                "tfattn": tfattn_run(lm, prompts, args.new, ours, False),
                "tfattn XLA": tfattn_run(lm, prompts, args.new, ours, True),
            }
            for jit, hub in hubs.items():
                hub.compile(sampler=theirs, jit_compile=jit)
                contenders["keras-hub XLA" if jit else "keras-hub"] = (
                    lambda hub=hub: hub.generate(hub_inputs,
                                                 stop_token_ids=None))
            for weights, generator in ct2.items():
                contenders[f"CTranslate2 {weights}"] = ct2_run(
                    generator, prompts, args.new, name)
            times = best_times(contenders, rounds=args.rounds)
            for weights in ct2:
                lengths = {len(r.sequences[0]) for r in
                           times[f"CTranslate2 {weights}"].output}
                assert lengths == {args.new}, (weights, lengths)
            new_tokens = batch * args.new
            rates = {k: new_tokens / v.seconds for k, v in times.items()}
            rows.append((batch, name, rates))
    return rows


def training(args):
    """Tokens/s of one train_on_batch step, per model and precision."""
    rng = np.random.default_rng(1)
    ids = rng.integers(4, args.vocab, (16, args.train_length + 1)).astype(
        "int32")
    x, y = ids[:, :-1], ids[:, 1:]
    mask = np.ones_like(x, bool)
    tokens = x.size
    rates = {}
    for policy in ("float32", "mixed_bfloat16"):
        for jit in (False, True):
            keras.config.set_dtype_policy(policy)
            loss = keras.losses.SparseCategoricalCrossentropy(
                from_logits=True)
            lm, hub = tfattn_lm(args), hub_lm(args)
            for model in (lm, hub):
                model.compile(optimizer=keras.optimizers.Adam(1e-4),
                              loss=loss, jit_compile=jit)
            mode = f"{policy}{' XLA' if jit else ''}"
            times = best_times({
                f"tfattn {mode}": lambda: lm.train_on_batch(x, y),
                f"keras-hub {mode}": lambda: hub.train_on_batch(
                    {"token_ids": x, "padding_mask": mask}, y),
            }, rounds=args.rounds, repeats=3)
            rates.update({k: tokens / v.seconds for k, v in times.items()})
    keras.config.set_dtype_policy("float32")
    return rates


def main():
    args = parse_args()
    cpu = next((line.split(":", 1)[1].strip() for line in open(
        "/proc/cpuinfo") if line.startswith("model name")), "?")
    print(f"CPU: {cpu}; Keras {keras.__version__} "
          f"({keras.config.backend()}); {args.layers} layers, width "
          f"{args.units}, vocabulary {args.vocab}")
    if "generation" in args.parts:
        print_generation(args)
    if "training" in args.parts:
        print_training(args)


def print_generation(args):
    lm = tfattn_lm(args)
    hubs = {False: hub_lm(args), True: hub_lm(args)}  # the same weights
    tfattn_xla, hub_xla = defaults(hub_lm(args))
    mode = {True: "XLA", False: "no XLA"}
    print(f"\nGeneration, new tokens/s (prompt {args.prompt}, "
          f"{args.new} new tokens); defaults: tfattn {mode[tfattn_xla]}, "
          f"keras-hub {mode[hub_xla]}:")
    print("| batch | sampler | tfattn (no XLA) | tfattn XLA | keras-hub "
          "(no XLA) | keras-hub XLA | CTranslate2 float32 | CTranslate2 "
          "int8 | tfattn / keras-hub, both at their defaults | best / best "
          "| best tfattn / CTranslate2 float32 |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for batch, name, r in generation(args, lm, hubs):
        at_defaults, best_best = ratios(r, tfattn_xla, hub_xla)
        best = max(r["tfattn"], r["tfattn XLA"])
        cells = [r[k] for k in ("tfattn", "tfattn XLA", "keras-hub",
                                "keras-hub XLA", "CTranslate2 float32",
                                "CTranslate2 int8")]
        print(f"| {batch} | {name} | "
              + " | ".join(f"{c:,.0f}" for c in cells)
              + f" | {at_defaults:.2f}x | {best_best:.2f}x | "
              f"{best / r['CTranslate2 float32']:.2f}x |")


def print_training(args):
    rates = training(args)
    print(f"\nTraining step, tokens/s (batch 16 x {args.train_length}):")
    for name, rate in rates.items():
        print(f"  {name}: {rate:,.0f}")
    ours = max(v for k, v in rates.items() if k.startswith("tfattn"))
    theirs = max(v for k, v in rates.items() if k.startswith("keras-hub"))
    print(f"  best tfattn / best keras-hub: {ours / theirs:.2f}x")


if __name__ == "__main__":
    main()
