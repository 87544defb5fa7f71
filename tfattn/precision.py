"""Choosing the compute precision: `auto` takes 16-bit compute only where
this machine runs it faster, float32 otherwise.

- TPU: `mixed_bfloat16` (TPUs compute in bfloat16).
- GPU: `mixed_bfloat16` from compute capability 8.0 (Ampere) on,
  `mixed_float16` on 7.x (tensor cores, with loss scaling), float32 below.
- CPU: bfloat16 only where `/proc/cpuinfo` lists a bfloat16 dot product
  (`avx512_bf16`, `amx_bf16`): elsewhere oneDNN emulates it and it is slower
  (0.81x float32 measured on an AVX2-only CPU). There, a matmul of the
  model's width is timed once in both precisions (about a second), and
  bfloat16 is taken if it is at least `MIN_SPEEDUP` times faster.

`choose(width)` returns the policy (None for float32) and the reason, which
`train.py` prints.
"""

import time

import tensorflow as tf

CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16")
MIN_SPEEDUP = 1.2


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


def matmul_speedup(width, rows=4096, repeats=8, rounds=3):
    """How much faster a [rows, width] x [width, 4·width] matmul runs in
    bfloat16 than in float32 here (best of `rounds`, after a warm-up)."""
    def timed(dtype):
        x = tf.random.stateless_normal([rows, width], [1, 2], dtype=dtype)
        w = tf.random.stateless_normal([width, 4 * width], [3, 4],
                                       dtype=dtype)

        @tf.function
        def work():
            y = x
            for _ in range(repeats):
                y = tf.matmul(x + tf.cast(tf.reduce_mean(y[:1, :1]), dtype),
                              w)[:, :width]
            return y

        work().numpy()
        best = float("inf")
        for _ in range(rounds):
            start = time.perf_counter()
            work().numpy()
            best = min(best, time.perf_counter() - start)
        return best

    return timed(tf.float32) / timed(tf.bfloat16)


def choose(width, flags=None):
    """(policy name or None for float32, the reason in words)."""
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
    speedup = matmul_speedup(width)
    if speedup >= MIN_SPEEDUP:
        return "mixed_bfloat16", (f"bfloat16 matmuls of width {width} run "
                                  f"{speedup:.2f}x float32 on this CPU "
                                  f"({', '.join(found)})")
    return None, (f"bfloat16 matmuls of width {width} run only {speedup:.2f}x "
                  f"float32 on this CPU (below {MIN_SPEEDUP}x)")
