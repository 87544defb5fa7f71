"""Whether this CPU computes CTranslate2's int8 matrix products faithfully.

CTranslate2 multiplies int8 weights by activations quantized to unsigned
8 bits (its log: `GEMM_S8 backend: DNNL (..., u8s8 preferred: true)`). An x86
CPU with an 8-bit dot-product instruction (VNNI: `avx512_vnni`, `avx_vnni`;
AMX: `amx_int8`) accumulates those products in 32 bits. Without one, oneDNN
sums pairs of 8-bit products in 16-bit registers (`vpmaddubsw`), which
saturate: the result then depends on the CPU and is wrong wherever
activations are large. On the numbers test split (500 sentences, the tiny
set trained 1,000 steps), int8 greedy translations equalled float32's on
100% of rows with VNNI and on 66% with oneDNN limited to AVX2
(`ONEDNN_MAX_CPU_ISA=AVX2`, which is what an AVX2-only EPYC runs); exact
matches fell from 97.4% to 64.4% (docs/traps.md item 36).

`int8_is_faithful` says which case this process is in, from
`/proc/cpuinfo` and the limit oneDNN honours (`ONEDNN_MAX_CPU_ISA`, or
`DNNL_MAX_CPU_ISA`), so that `CTranslate2Translator`'s default compute type
runs an int8 export in float32 where int8 would be wrong: the weights stay
the export's 8-bit values, dequantized once at load.
"""

import platform

from tfattn.training.precision import cpu_flags
from tfattn.training.precision import onednn_limit

__all__ = ["INT8_DOT_PRODUCT_FLAGS", "int8_is_faithful"]

INT8_DOT_PRODUCT_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")
_X86 = ("x86_64", "amd64", "i386", "i686", "x86")
# oneDNN's ISA names (ONEDNN_MAX_CPU_ISA) that leave out every 8-bit
# dot-product instruction; any other limit (AVX2_VNNI, AVX512_CORE_VNNI,
# AVX512_CORE_BF16, the AMX ones, ALL, DEFAULT) keeps the CPU's own.
_LIMITS_WITHOUT_VNNI = ("SSE41", "AVX", "AVX2", "AVX512_CORE")
# Limits that keep only the 256-bit VNNI form.
_LIMITS_WITH_AVX_VNNI_ONLY = ("AVX2_VNNI", "AVX2_VNNI_2")


def int8_is_faithful(flags=None, environ=None, machine=None):
    """True where CTranslate2's int8 products accumulate in 32 bits.

    Args:
        flags: set of str or None. The CPU's feature flags (None reads
            `/proc/cpuinfo`).
        environ: mapping or None (None: `os.environ`). Read for
            `ONEDNN_MAX_CPU_ISA` / `DNNL_MAX_CPU_ISA`.
        machine: str or None. `platform.machine()` where None; CPUs other
            than x86 (Arm's Ruy backend) are taken as faithful.

    Returns:
        bool.
    """
    machine = platform.machine() if machine is None else machine
    if machine.lower() not in _X86:
        return True
    flags = cpu_flags() if flags is None else set(flags)
    limit = onednn_limit(environ)
    if limit in _LIMITS_WITHOUT_VNNI:
        return False
    if limit in _LIMITS_WITH_AVX_VNNI_ONLY:
        return "avx_vnni" in flags
    return any(flag in flags for flag in INT8_DOT_PRODUCT_FLAGS)
