"""The GPU check: tfattn on one accelerator under Keras's JAX backend.

For a machine with a GPU, JAX and no TensorFlow (the machines this project
is lent). It installs nothing: it imports tfattn and `hparams` from this
working tree and Keras from wherever Python finds it, or from a carried
wheel (`--keras_wheel=PATH`: Keras is pure Python, so its wheel imports as
a zip; its dependencies absl-py, numpy, rich, namex, h5py, optree,
ml-dtypes and packaging must be installed). In a few minutes it prints:

1. the device and its measured matmul rate in float32 and bfloat16 (the
   ceiling the shares below are quoted against);
2. attention forward + backward at the bench shapes (batch 8, length 256,
   width 512, 8 heads) in float32 and bfloat16 against Keras's
   `MultiHeadAttention`, each with its share of the matmul rate;
3. a training step of the `base` set (6+6 layers, width 512, vocabulary
   37,000) with Keras `fit` in bfloat16, target tokens/s and model FLOP/s
   as a share of the bfloat16 matmul rate, against the same architecture
   built from keras-hub layers where keras-hub imports;
4. greedy and beam 4 decoding tokens/s of the same model (64 tokens a row,
   EOS disabled), each search one compiled while-loop; greedy against the
   same architecture built from keras-hub layers with their caches
   (`bench/_peers.py`) where keras-hub imports (`--keras_hub_wheel=PATH`;
   its dependencies regex and kagglehub aside, which it imports lazily).

    KERAS_BACKEND=jax python bench/gpu.py
    KERAS_BACKEND=jax python bench/gpu.py --keras_wheel=wheels/keras.whl
    KERAS_BACKEND=jax python bench/gpu.py --quick     # CPU-sized shapes

It runs on any backend and device (on a CPU use `--quick`); the figures
are for the README's hardware table, with the device named.
"""

import argparse
import os
import sys
import time

import _repo  # noqa: F401  (puts the repository root on sys.path)


def _parse():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keras_wheel", default=None,
                        help="a Keras wheel to import Keras from")
    parser.add_argument("--keras_hub_wheel", default=None,
                        help="a keras-hub wheel, for the decoding ratio")
    parser.add_argument("--quick", action="store_true",
                        help="small shapes, for a CPU or a smoke test")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--train_steps", type=int, default=20)
    return parser.parse_args()


ARGS = _parse()
for wheel in (ARGS.keras_hub_wheel, ARGS.keras_wheel):
    if wheel:
        sys.path.insert(0, os.path.abspath(wheel))
os.environ.setdefault("KERAS_BACKEND", "jax")

import keras  # noqa: E402
import numpy as np  # noqa: E402

import _backend  # noqa: E402
import hparams  # noqa: E402
import tfattn  # noqa: E402
from _timing import best_times  # noqa: E402
from tfattn import config  # noqa: E402
from tfattn import decoding  # noqa: E402


def device_name():
    """The accelerator's name as the backend reports it."""
    if _backend.backend() == "jax":
        import jax

        device = jax.devices()[0]
        return f"{device.platform}: {getattr(device, 'device_kind', device)}"
    if _backend.backend() == "torch":
        import torch

        if torch.cuda.is_available():
            return f"cuda: {torch.cuda.get_device_name(0)}"
    return "cpu"


def matmul_rates(size, rounds):
    """{dtype: FLOP/s} of a size x size product."""
    steps = {dtype: _backend.matmul_step(size, dtype)
             for dtype in ("float32", "bfloat16")}
    timings = best_times(steps, rounds, repeats=5, warmup=2)
    return {dtype: 2 * size ** 3 / timings[dtype].seconds for dtype in steps}


def attention(args, rates):
    """Prints tfattn's and Keras's attention step time per dtype."""
    batch, length, width, heads = (2, 64, 128, 4) if args.quick else (
        8, 256, 512, 8)
    forward = 8 * batch * length * width ** 2 + 4 * batch * length ** 2 * width
    print(f"\nattention forward + backward, batch {batch}, length {length}, "
          f"width {width}, {heads} heads")
    print(f"{'dtype':9} {'tfattn ms':>10} {'keras ms':>9} {'keras/tfattn':>13}"
          f" {'tfattn share':>13} {'keras share':>12}")
    for dtype, policy in (("float32", "float32"),
                          ("bfloat16", "mixed_bfloat16")):
        keras.config.set_dtype_policy(policy)
        x = _backend.variable(np.random.default_rng(0).normal(
            size=(batch, length, width)).astype("float32"))
        ours = tfattn.MultiHeadAttention(num_heads=heads)
        theirs = keras.layers.MultiHeadAttention(num_heads=heads,
                                                 key_dim=width // heads)
        ours(x), theirs(x, x)
        steps = {
            "tfattn": _backend.loss_and_grad_step(
                ours, lambda layer, v: layer(v), x),
            "keras": _backend.loss_and_grad_step(
                theirs, lambda layer, v: layer(v, v), x),
        }
        timings = best_times({k: (lambda s=s: s()[0]) for k, s in
                              steps.items()}, args.rounds, repeats=5, warmup=2)
        keras.config.set_dtype_policy("float32")
        ours_s, theirs_s = timings["tfattn"].seconds, timings["keras"].seconds
        share = 3 * forward / rates[dtype]
        print(f"{dtype:9} {ours_s * 1e3:10.2f} {theirs_s * 1e3:9.2f} "
              f"{theirs_s / ours_s:12.2f}x {share / ours_s:12.0%} "
              f"{share / theirs_s:11.0%}")


def base_model(args):
    """The `base` set's Transformer (smaller with --quick), bfloat16."""
    hp = hparams.get("base")
    vocab = 1000 if args.quick else hp.vocab_size
    kwargs = config.model_kwargs(hp, vocab)
    if args.quick:
        kwargs.update(num_layers=1, num_units=64, num_heads=2, ffn_units=128)
    keras.config.set_dtype_policy("mixed_bfloat16")
    model = tfattn.Transformer(**kwargs, seed=0)
    keras.config.set_dtype_policy("float32")
    return hp, model, vocab


def training(args, model, vocab, rates):
    """Prints `fit`'s target tokens/s, its share of the bf16 rate, and the
    same for keras-hub's layers where keras-hub imports."""
    batch, length = (8, 16) if args.quick else (64, 64)
    rng = np.random.default_rng(0)
    source = rng.integers(4, vocab, size=(256, length)).astype("int32")
    target = rng.integers(4, vocab, size=(256, length + 1)).astype("int32")
    data = ({"source": source, "target_in": target[:, :-1]}, target[:, 1:])
    steps = min(256 // batch, args.train_steps)
    models = {"tfattn": model}
    peer = keras_hub_fit_peer(model, vocab, length)
    if peer is not None:
        models["keras-hub"] = peer
    for each in models.values():
        each.compile(optimizer=keras.optimizers.Adam(1e-4),
                     loss=tfattn.LabelSmoothedCrossEntropy())
        each.fit(*data, batch_size=batch, epochs=1, verbose=0,
                 steps_per_epoch=2)  # compiles
    best = dict.fromkeys(models, float("inf"))
    for _ in range(args.rounds):  # interleaved, round by round
        for name, each in models.items():
            start = time.perf_counter()
            each.fit(*data, batch_size=batch, epochs=1, verbose=0,
                     steps_per_epoch=steps)
            best[name] = min(best[name],
                             (time.perf_counter() - start) / steps)
    print(f"\ntraining with fit, bfloat16, batch {batch} x {length}:")
    for name, each in models.items():
        params = each.count_params()
        # 6 FLOPs a parameter a token (forward 2, backward 4).
        flops = 6 * params * batch * length
        print(f"  {name:9} {params / 1e6:5.1f}M parameters "
              f"{best[name] * 1e3:7.1f} ms/step "
              f"{batch * length / best[name]:10,.0f} target tokens/s, "
              f"about {flops / best[name] / rates['bfloat16']:.0%} of the "
              f"bfloat16 matmul rate")
    if peer is None:
        print("  keras-hub does not import here: no ratio "
              "(--keras_hub_wheel=PATH)")
    else:
        print(f"  tokens/s vs keras-hub: "
              f"{best['keras-hub'] / best['tfattn']:.2f}x")


def keras_hub_fit_peer(model, vocab, length):
    """keras-hub's seq2seq model of `model`'s size and dtype policy, or
    None where keras-hub does not import."""
    try:
        import keras_hub  # noqa: F401
    except ImportError:
        return None
    from _peers import keras_hub_seq2seq

    keras.config.set_dtype_policy(model.dtype_policy)
    try:
        return keras_hub_seq2seq(vocab, max(length, 64), model.num_layers,
                                 model.num_units, model.num_heads,
                                 ffn_units=model.ffn_units)
    finally:
        keras.config.set_dtype_policy("float32")


def decoding_rates(args, model, vocab):
    """Prints greedy and beam 4 tokens/s of `model`, EOS disabled."""
    batch, steps = (4, 16) if args.quick else (32, 64)
    source = np.random.default_rng(1).integers(
        4, vocab, size=(batch, 32)).astype("int32")
    starts = np.full([batch], tfattn.models.transformer.BOS_ID, "int32")

    def search(beam_size):
        def run(source, starts):
            memory, keep = model.encode(source, training=False)
            cache = model.init_decode_cache(memory, keep, steps)
            if beam_size == 1:
                return decoding.greedy_search(model.decode_step, starts,
                                              cache, steps, vocab)
            return decoding.beam_search(model.decode_step, starts, cache,
                                        steps, vocab, beam_size=beam_size,
                                        alpha=0.6)
        compiled = _backend.compiled(run, model)
        return lambda: compiled(source, starts)

    searches = {"greedy": search(1), "beam 4": search(4)}
    peer = keras_hub_peer(model, source, vocab, steps)
    if peer is not None:
        searches["keras-hub greedy"] = peer
    timings = best_times(searches, args.rounds, warmup=1)
    print(f"\ndecoding, batch {batch}, {steps} tokens a row:")
    for name, timing in timings.items():
        print(f"  {name:16} {batch * steps / timing.seconds:10,.0f} tokens/s")
    if peer is None:
        print("  keras-hub does not import here: no ratio "
              "(--keras_hub_wheel=PATH)")
    else:
        ratio = (timings["keras-hub greedy"].seconds
                 / timings["greedy"].seconds)
        print(f"  greedy vs keras-hub's cached decoder: {ratio:.2f}x")


def keras_hub_peer(model, source, vocab, steps):
    """keras-hub's greedy over the same architecture and dtype policy as
    `model`, or None where keras-hub does not import."""
    try:
        import keras_hub  # noqa: F401
    except ImportError:
        return None
    from _peers import keras_hub_greedy

    keras.config.set_dtype_policy(model.dtype_policy)
    try:
        return keras_hub_greedy(source, vocab, model.num_layers,
                                model.num_units, model.num_heads, steps,
                                ffn_units=model.ffn_units)
    finally:
        keras.config.set_dtype_policy("float32")


def main():
    print(f"backend {_backend.backend()}, Keras {keras.__version__}, "
          f"device {device_name()}")
    rates = matmul_rates(1024 if ARGS.quick else 8192, ARGS.rounds)
    print("matmul rate: " + ", ".join(
        f"{dtype} {rate / 1e12:.1f} TFLOP/s" for dtype, rate in rates.items()))
    attention(ARGS, rates)
    _, model, vocab = base_model(ARGS)
    training(ARGS, model, vocab, rates)
    decoding_rates(ARGS, model, vocab)


if __name__ == "__main__":
    main()
