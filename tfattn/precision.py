"""Choosing the compute precision: `auto` takes 16-bit compute only where
this machine runs it faster, float32 otherwise.

- TPU: `mixed_bfloat16` (TPUs compute in bfloat16).
- GPU: `mixed_bfloat16` from compute capability 8.0 (Ampere) on,
  `mixed_float16` on 7.x (tensor cores, with loss scaling), float32 below.
- CPU: bfloat16 only where `/proc/cpuinfo` lists a bfloat16 dot product
  (`avx512_bf16`, `amx_bf16`): elsewhere oneDNN emulates it and it is slower
  (0.81x float32 measured on an AVX2-only CPU). There, the set's own
  training step is timed once in both precisions on random batches of its
  size, and bfloat16 is taken if it is at least `MIN_SPEEDUP` times faster.
  A matmul alone misleads: on the AVX-512 BF16 EPYC here, width-128
  matmuls run 1.9x in bfloat16, but the multi30k set's whole step ran at
  0.66x float32 (its casts, layer norms and float32 softmax over 8,000
  entries outweigh the small matmuls).

`choose(hp)` returns the policy (None for float32) and the reason, which
`train.py` prints.
"""

import time

import tensorflow as tf

CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16")
MIN_SPEEDUP = 1.1
# Narrower models are not measured: their matmuls are too small for the
# bfloat16 units to pay for the casts (width 64: 0.99x for a matmul, 1.07x
# for the tiny set's step on the AVX-512 BF16 EPYC).
MIN_WIDTH = 128


def cpu_flags(path="/proc/cpuinfo"):
    """The CPU's feature flags (empty where /proc/cpuinfo is not there)."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def step_speedup(hp, steps=3, length=24):
    """How much faster `train.py`'s training step (`training.build_trainer`:
    the model, Adam, the label-smoothed loss) runs in mixed_bfloat16 than in
    float32 here, on random batches of the set's size (`length` tokens per
    row; `tokens_per_batch` or `batch_size` rows). Best of `steps` steps
    after two that trace and warm up."""
    import numpy as np

    from tfattn import training

    rows = hp.batch_size or max(1, hp.tokens_per_batch // length)
    rng = np.random.default_rng(0)
    ids = rng.integers(4, hp.vocab_size, (3, rows, length)).astype("int32")
    ids[1, :, 0] = 2  # BOS
    batch = ({"source": ids[0], "target_in": ids[1]}, ids[2])
    strategy = tf.distribute.get_strategy()
    times = {}
    for policy in (None, "mixed_bfloat16"):
        _, _, _, step = training.build_trainer(strategy, hp, hp.vocab_size,
                                               seed=0,
                                               mixed_precision=policy)
        iterator = iter(tf.data.Dataset.from_tensors(batch).repeat())
        for _ in range(2):
            float(step(iterator)[0])
        best = float("inf")
        for _ in range(steps):
            start = time.perf_counter()
            float(step(iterator)[0])
            best = min(best, time.perf_counter() - start)
        times[policy] = best
    return times[None] / times["mixed_bfloat16"]


def choose(hp, flags=None):
    """(policy name or None for float32, the reason in words) for training
    the hparams `hp` here."""
    if tf.config.list_logical_devices("TPU"):
        return "mixed_bfloat16", "a TPU computes in bfloat16"
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        details = tf.config.experimental.get_device_details(gpus[0])
        major, _ = details.get("compute_capability", (0, 0))
        name = details.get("device_name", "GPU")
        if major >= 8:
            return "mixed_bfloat16", f"{name} (compute capability {major}.x) " \
                "has bfloat16 tensor cores"
        if major == 7:
            return "mixed_float16", f"{name} (compute capability 7.x) has " \
                "float16 tensor cores"
        return None, f"{name} has no 16-bit tensor cores"
    flags = cpu_flags() if flags is None else set(flags)
    found = [f for f in CPU_BF16_FLAGS if f in flags]
    if not found:
        return None, ("the CPU has no bfloat16 dot product (no "
                      f"{' or '.join(CPU_BF16_FLAGS)} in /proc/cpuinfo)")
    if hp.num_units < MIN_WIDTH:
        return None, (f"a width of {hp.num_units} (< {MIN_WIDTH}) gains "
                      "nothing from bfloat16 on a CPU (not measured)")
    speedup = step_speedup(hp)
    verdict = "runs" if speedup >= MIN_SPEEDUP else "runs only"
    policy = "mixed_bfloat16" if speedup >= MIN_SPEEDUP else None
    return policy, (f"this set's training step {verdict} {speedup:.2f}x "
                    f"float32 in bfloat16 on this CPU ({', '.join(found)}; "
                    f"measured on random batches, {MIN_SPEEDUP}x needed)")
