"""What a user gets from `generate` over a session of calls, with and
without XLA: the first call (tracing and compiling included) and each
later call, for `CausalLM.generate` (GPT-2's shape of `bench/causal_lm.py`:
4 pre-norm layers of width 256, vocabulary 8,000, prompts of 32 tokens, 64
new tokens, no stop token) and `Transformer.generate` (the shape of
`bench/decoding.py`: 3+3 layers of width 256, sources of 32 tokens, 64 new
tokens), greedy and top-p 0.9, batch 1 and 16; keras-hub's GPT-2
`generate` at its default (`compile()` leaves `jit_compile="auto"`) and
with XLA for the peer row. Each model is made fresh per mode, so its first
call pays its own compilation; later calls are the best of `--rounds`.

It prints, per row, the first call's seconds, a later call's seconds and
the total over a session of 1, 10 and 100 calls: the default of
`jit_compile` is chosen from these (the docs' benchmarks page says which).

    python bench/generation_session.py
    python bench/generation_session.py --quick
"""

import argparse
import os
import time

import _repo  # noqa: F401  (puts the repository root on sys.path)

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

import tfattn  # noqa: E402
from tfattn.decoding import samplers  # noqa: E402

SESSIONS = (1, 10, 100)


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--units", type=int, default=256)
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--length", type=int, default=32)
    parser.add_argument("--new", type=int, default=64)
    parser.add_argument("--batches", default="1,16")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--models", default="causal_lm,transformer,keras-hub")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.units, args.vocab, args.length, args.new = 32, 300, 8, 8
        args.rounds, args.batches = 1, "2"
    return args


def _causal_lm(args):
    keras.utils.set_random_seed(0)
    lm = tfattn.CausalLM(vocab_size=args.vocab, num_layers=4,
                         num_units=args.units, num_heads=4,
                         ffn_units=4 * args.units, dropout_rate=0.0,
                         max_length=args.length + args.new + 32)
    lm(np.ones((1, 4), "int32"))
    return lm


def _transformer(args):
    keras.utils.set_random_seed(0)
    model = tfattn.Transformer(args.vocab, num_layers=3,
                               num_units=args.units, num_heads=4,
                               ffn_units=4 * args.units, dropout_rate=0.0,
                               max_length=args.length + args.new + 32)
    model((np.ones((1, 4), "int32"), np.ones((1, 3), "int32")))
    return model


def _hub(args, jit):
    import keras_hub

    keras.utils.set_random_seed(0)
    backbone = keras_hub.models.GPT2Backbone(
        vocabulary_size=args.vocab, num_layers=4, num_heads=4,
        hidden_dim=args.units, intermediate_dim=4 * args.units, dropout=0.0,
        max_sequence_length=args.length + args.new + 32)
    hub = keras_hub.models.GPT2CausalLM(backbone=backbone, preprocessor=None)
    hub.compile(sampler="greedy", **({"jit_compile": True} if jit else {}))
    return hub


def session(make_call, rounds):
    """(first call's seconds, best later call's seconds)."""
    call = make_call()
    start = time.perf_counter()
    call()
    first = time.perf_counter() - start
    later = []
    for _ in range(rounds):
        start = time.perf_counter()
        call()
        later.append(time.perf_counter() - start)
    return first, min(later)


def rows_for(args, batch, rng):
    inputs = rng.integers(4, args.vocab, (batch, args.length)).astype("int32")
    for sampler in ("greedy", samplers.TopPSampler(0.9)):
        name = "greedy" if sampler == "greedy" else "top-p 0.9"
        for jit in (False, True):
            label = "XLA" if jit else "default"
            if "causal_lm" in args.models:
                def make(jit=jit, sampler=sampler):
                    lm = _causal_lm(args)
                    return lambda: lm.generate(
                        inputs, args.new, sampler=sampler, stop_token_ids=(),
                        jit_compile=jit)
                yield ("CausalLM", batch, name, label, session(make,
                                                               args.rounds))
            if "transformer" in args.models:
                def make(jit=jit, sampler=sampler):
                    model = _transformer(args)
                    return lambda: model.generate(
                        inputs, args.new, sampler=sampler,
                        stop_token_ids=None, extra_length=args.new,
                        jit_compile=jit)
                yield ("Transformer", batch, name, label,
                       session(make, args.rounds))
            if "keras-hub" in args.models and name == "greedy":
                total = args.length + args.new
                ids = np.zeros((batch, total), "int32")
                ids[:, :args.length] = inputs
                mask = np.zeros((batch, total), bool)
                mask[:, :args.length] = True

                def make(jit=jit):
                    hub = _hub(args, jit)
                    return lambda: hub.generate(
                        {"token_ids": ids, "padding_mask": mask},
                        stop_token_ids=None)
                yield ("keras-hub GPT-2", batch, name, label,
                       session(make, args.rounds))


def main():
    args = parse_args()
    rng = np.random.default_rng(0)
    print(f"{'model':<16}{'batch':>6} {'sampler':<10}{'mode':<8}"
          f"{'first s':>9}{'later s':>9}"
          + "".join(f"{f'{n} calls s':>13}" for n in SESSIONS))
    for batch in [int(b) for b in args.batches.split(",")]:
        for model, b, name, label, (first, later) in rows_for(args, batch,
                                                               rng):
            totals = [first + (n - 1) * later for n in SESSIONS]
            print(f"{model:<16}{b:>6} {name:<10}{label:<8}{first:>9.2f}"
                  f"{later:>9.3f}" + "".join(f"{t:>13.1f}" for t in totals),
                  flush=True)


if __name__ == "__main__":
    main()
