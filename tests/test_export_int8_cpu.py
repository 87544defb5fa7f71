"""Tests of `tfattn.export.int8_cpu.int8_is_faithful`: which CPUs and
oneDNN limits give CTranslate2's int8 products 32-bit accumulation."""

import pytest

from tfattn.export.int8_cpu import int8_is_faithful

AVX2_EPYC = {"sse4_1", "avx", "avx2", "fma"}
AVX512_EPYC = AVX2_EPYC | {"avx512f", "avx512bw", "avx512_vnni", "avx512_bf16"}
AMX_XEON = AVX512_EPYC | {"amx_tile", "amx_int8", "amx_bf16"}
ALDER_LAKE = AVX2_EPYC | {"avx_vnni"}


@pytest.mark.parametrize(
    "flags, environ, expected",
    [
        (AVX2_EPYC, {}, False),
        (AVX512_EPYC, {}, True),
        (AMX_XEON, {}, True),
        (ALDER_LAKE, {}, True),
        (AVX512_EPYC - {"avx512_vnni"}, {}, False),
        # oneDNN's own limit, as .ci/run sets it to emulate an AVX2 CPU.
        (AVX512_EPYC, {"ONEDNN_MAX_CPU_ISA": "AVX2"}, False),
        (AMX_XEON, {"ONEDNN_MAX_CPU_ISA": "avx512_core"}, False),
        (AMX_XEON, {"DNNL_MAX_CPU_ISA": "SSE41"}, False),
        (AMX_XEON, {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_VNNI"}, True),
        (AMX_XEON, {"ONEDNN_MAX_CPU_ISA": "AVX2_VNNI"}, False),
        (ALDER_LAKE, {"ONEDNN_MAX_CPU_ISA": "AVX2_VNNI"}, True),
        (AVX2_EPYC, {"ONEDNN_MAX_CPU_ISA": "ALL"}, False),
        (AVX512_EPYC, {"ONEDNN_MAX_CPU_ISA": ""}, True),
    ],
)
def test_x86_cpus_and_onednn_limits(flags, environ, expected):
    assert int8_is_faithful(flags, environ, machine="x86_64") is expected


def test_other_architectures_are_faithful():
    assert int8_is_faithful(set(), {}, machine="aarch64") is True


def test_this_machine_is_read_from_cpuinfo():
    """This process's answer is a bool whichever CPU runs the suite."""
    assert isinstance(int8_is_faithful(), bool)
