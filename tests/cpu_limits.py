"""The environment under which this machine computes as an AVX2-only CPU.

The libraries that choose their kernels per CPU can be told to use less than
the machine has (docs/traps.md item 21). `.ci/run` runs the numerically
sensitive tests a second time under `AVX2_LIMITS`, so that a developer on an
AVX-512 or AMX machine sees an AVX2 CPU's failures before they land:

    env $(python -m tests.cpu_limits) python -m pytest ...

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
    args = parser.parse_args(argv)
    if args.probe:
        _probe(args.probe)
    else:
        print(" ".join(f"{k}={v}" for k, v in AVX2_LIMITS.items()))


if __name__ == "__main__":
    sys.exit(main())
