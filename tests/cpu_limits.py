"""The environment under which this machine computes as an AVX2-only CPU.

The libraries that choose their kernels per CPU can be told to use less than
the machine has (docs/traps.md item 37). `.ci/run` runs the whole suite a
second time under `AVX2_LIMITS`, so that a developer on an AVX-512 or AMX
machine sees an AVX2 CPU's failures before they land:

    env $(python -m tests.cpu_limits) python -m pytest ...

`python -m tests.cpu_limits --beyond-avx2` exits 0 where this CPU has
kernels beyond AVX2 for the limits to take away (AVX-512, VNNI, AMX), 1 on
an AVX2-only CPU, whose own tiers already ran the AVX2 paths, and under
the limits already (`env $(python -m tests.cpu_limits) bash .ci/run` runs
every tier as an AVX2-only CPU would, once): a second pass would repeat
them.

`EXCLUDED` holds, in one place, the tests that cannot run under the limits
and why; `tests/conftest.py` deselects them there (and only there), and
pytest's summary counts them as deselected.

`python -m tests.cpu_limits --probe DIR` runs one of each library's
CPU-dependent kernels (a TensorFlow matmul through oneDNN, an XLA-compiled
function with its object code dumped to DIR, a CTranslate2 int8 translation)
so that `tests/test_cpu_limits.py` can read, from each library's own log and
code, that the limits are honoured.
"""

import argparse
import os
import sys

AVX2_LIMITS = {
    # oneDNN's own limit: TensorFlow's oneDNN and CTranslate2's bundled copy
    # both honour it (their ONEDNN_VERBOSE line says `isa:Intel AVX2`). AVX2
    # has no 8-bit dot product (VNNI), as on the AVX2-only EPYC.
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    # CTranslate2's own kernels (its CT2_VERBOSE line: `Selected ISA`).
    "CT2_FORCE_CPU_ISA": "AVX2",
    # CTranslate2 multiplies through oneDNN as it does on AMD CPUs, not
    # through Intel MKL as it would on an Intel one.
    "CT2_USE_MKL": "0",
    # XLA's CPU code generation.
    "XLA_FLAGS": "--xla_cpu_max_isa=AVX2",
}

# CPU flags (/proc/cpuinfo) of kernels that the limits take away.
BEYOND_AVX2 = ("avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16",
               "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8")

# The tests that cannot run under the limits, by marker, and why. Each runs
# natively in .ci/run's other tiers.
EXCLUDED = {
    "half_precision": (
        "a bfloat16 or float16 matmul: on a CPU with avx512_bf16 or "
        "avx512_fp16, TensorFlow routes it to oneDNN by the CPU's flags, and "
        "oneDNN limited to AVX2 has no kernel for it: the process ends in a "
        "segmentation fault (docs/traps.md item 37). A real AVX2 CPU takes "
        "another path; these run there, and natively in every tier here"),
}
# Tests whose names hold one of these are half_precision without the mark.
HALF_PRECISION_NAMES = ("float16",)  # bfloat16 too
# The flags by which TensorFlow sends half-precision matmuls to oneDNN.
HALF_PRECISION_FLAGS = ("avx512_bf16", "avx512_fp16", "amx_bf16", "amx_fp16")


def cpu_flags(cpuinfo=None):
    """The CPU's feature flags, as a set (empty where unreadable), from
    /proc/cpuinfo, or the file TFATTN_CPUINFO names (for the suite's own
    tests of the selection)."""
    cpuinfo = cpuinfo or os.environ.get("TFATTN_CPUINFO", "/proc/cpuinfo")
    try:
        with open(cpuinfo) as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def limits_in_effect(environ=None):
    """Whether this process runs under every one of `AVX2_LIMITS`."""
    environ = os.environ if environ is None else environ
    return all(environ.get(k) == v for k, v in AVX2_LIMITS.items())


def beyond_avx2(flags=None):
    """Whether the CPU has kernels that the limits take away."""
    flags = cpu_flags() if flags is None else flags
    return any(flag in flags for flag in BEYOND_AVX2)


def excluded_here(environ=None, flags=None):
    """The markers of `EXCLUDED` to deselect in this process: half_precision
    under the limits on a CPU with `HALF_PRECISION_FLAGS`, none elsewhere."""
    flags = cpu_flags() if flags is None else flags
    if limits_in_effect(environ) and any(
            flag in flags for flag in HALF_PRECISION_FLAGS):
        return ("half_precision",)
    return ()


def _probe(directory):
    os.environ["XLA_FLAGS"] = " ".join(filter(None, [
        os.environ.get("XLA_FLAGS"),
        f"--xla_dump_to={os.path.join(directory, 'xla')}"]))
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import numpy as np
    import tensorflow as tf

    import tfattn
    from tfattn import export
    from tfattn.data import train_tokenizer

    a = tf.constant(np.ones((64, 64), "float32"))
    tf.matmul(a, a).numpy()
    tf.function(lambda x: tf.nn.softmax(tf.matmul(x, x)),
                jit_compile=True)(a).numpy()
    sentences = [f"{n} {n * 7}" for n in range(200)]
    tokenizer = train_tokenizer(sentences, None, vocab_size=24,
                                split_digits=True)
    model = tfattn.Transformer(tokenizer.vocab_size, num_layers=1,
                               num_units=16, num_heads=2, ffn_units=32,
                               max_length=16)
    model((np.ones((1, 4), "int32"), np.ones((1, 3), "int32")))
    path = export.to_ctranslate2(model, tokenizer,
                                 os.path.join(directory, "ct2"),
                                 quantization="int8")
    export.load_ctranslate2(path, compute_type="int8").translate(["12"])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--probe", metavar="DIR",
                        help="run the probe, writing XLA's dump under DIR")
    parser.add_argument("--beyond-avx2", action="store_true",
                        help="exit 0 if this CPU has kernels beyond AVX2 "
                        "(the limits change something), 1 if not")
    args = parser.parse_args(argv)
    if args.probe:
        _probe(args.probe)
    elif args.beyond_avx2:
        if limits_in_effect():
            print("beyond AVX2: none (this process runs under the limits)")
            return 1
        found = sorted(cpu_flags() & set(BEYOND_AVX2))
        print("beyond AVX2: " + (" ".join(found) if found else "none"))
        return 0 if found else 1
    else:
        print(" ".join(f"{k}={v}" for k, v in AVX2_LIMITS.items()))


if __name__ == "__main__":
    sys.exit(main())
