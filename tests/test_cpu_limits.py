"""The AVX2 limits of `tests/cpu_limits.py` are honoured, each library's own
log or code says so: oneDNN (in TensorFlow and in CTranslate2), CTranslate2's
own kernels, and XLA's CPU code generation.

On an AVX-512 or AMX CPU these fail if a library stops honouring its limit
(and `.ci/run`'s AVX2 pass would then test the machine's own paths again);
on an AVX2-only CPU they hold trivially.
"""

import glob
import os
import re
import shutil
import subprocess
import sys

import pytest

from tests import cpu_limits
from tests.cpu_limits import AVX2_LIMITS

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Registers and instructions that exist only with AVX-512 (EVEX encoding):
# zmm, ymm16-31/xmm16-31, the mask registers and a few EVEX-only mnemonics.
AVX512_ONLY = re.compile(
    r"%zmm|%[xy]mm(1[6-9]|2\d|3[01])\b|%k[1-7]\b|"
    r"\bv(pternlog|rndscale|scalef|permt2|permi2|fixupimm|getexp|range)")


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    directory = tmp_path_factory.mktemp("cpu_limits")
    env = dict(os.environ, **AVX2_LIMITS, ONEDNN_VERBOSE="1",
               CT2_VERBOSE="1", TF_CPP_MIN_LOG_LEVEL="2")
    result = subprocess.run(
        [sys.executable, "-m", "tests.cpu_limits", "--probe",
         str(directory)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return directory, result.stdout + result.stderr


def test_printed_limits_are_the_module_s(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "tests.cpu_limits"], cwd=REPO,
        capture_output=True, text=True, timeout=60)
    assert result.stdout.split() == [f"{k}={v}"
                                     for k, v in AVX2_LIMITS.items()]


@pytest.mark.slow
def test_onednn_runs_avx2_kernels(probe):
    _, log = probe
    isa_lines = re.findall(r"onednn_verbose,.*isa:([^\n]*)", log)
    # TensorFlow's oneDNN and CTranslate2's bundled one each say it once.
    assert len(isa_lines) >= 2, log[-3000:]
    assert all(line.strip() == "Intel AVX2" for line in isa_lines), isa_lines
    # CTranslate2's int8 product ran through oneDNN (u8 by s8).
    assert re.search(r"onednn_verbose,.*exec.*src_u8.*wei_s8", log)


@pytest.mark.slow
def test_ctranslate2_selects_avx2_and_onednn(probe):
    _, log = probe
    assert "Selected ISA: AVX2" in log, log[-3000:]
    assert "GEMM_S8 backend: DNNL" in log


@pytest.mark.slow
def test_xla_emits_no_avx512_instructions(probe):
    directory, _ = probe
    objects = glob.glob(os.path.join(directory, "xla", "*obj-file*"))
    assert objects, "XLA dumped no object code"
    objdump = shutil.which("objdump")
    assert objdump, "objdump (binutils) is needed to read XLA's code"
    code = "".join(
        subprocess.run([objdump, "-d", path], capture_output=True,
                       text=True, check=True).stdout for path in objects)
    assert re.search(r"\bv\w+\s+%ymm", code), "no AVX code found at all"
    assert not AVX512_ONLY.search(code), AVX512_ONLY.search(code).group(0)


# --------------------------------------------------------------------------
# Which CPUs get the second pass, and what it leaves out.

AVX2_EPYC = {"avx", "avx2", "fma", "f16c"}
ZEN4_EPYC = AVX2_EPYC | {"avx512f", "avx512_vnni", "avx512_bf16"}
AMX_XEON = AVX2_EPYC | {"avx512f", "avx512_fp16", "amx_tile", "amx_bf16"}
SKYLAKE = AVX2_EPYC | {"avx512f", "avx512bw"}


@pytest.mark.parametrize("flags,beyond", [
    (AVX2_EPYC, False), (ZEN4_EPYC, True), (AMX_XEON, True),
    (SKYLAKE, True), (AVX2_EPYC | {"avx_vnni"}, True), (set(), False)])
def test_the_second_pass_runs_where_the_limits_take_something_away(
        flags, beyond):
    assert cpu_limits.beyond_avx2(flags) is beyond


def test_the_limits_are_in_effect_only_when_every_one_is_set():
    assert cpu_limits.limits_in_effect(dict(AVX2_LIMITS))
    for name in AVX2_LIMITS:
        partial = {k: v for k, v in AVX2_LIMITS.items() if k != name}
        assert not cpu_limits.limits_in_effect(partial), name
    assert not cpu_limits.limits_in_effect({})


@pytest.mark.parametrize("flags,left_out", [
    (ZEN4_EPYC, ("half_precision",)), (AMX_XEON, ("half_precision",)),
    (SKYLAKE, ()), (AVX2_EPYC, ())])
def test_half_precision_is_left_out_only_where_it_would_crash(flags,
                                                              left_out):
    assert cpu_limits.excluded_here(dict(AVX2_LIMITS), flags) == left_out
    # Natively, nothing is left out anywhere.
    assert cpu_limits.excluded_here({}, flags) == ()


def test_every_exclusion_says_why():
    assert set(cpu_limits.EXCLUDED) == {"half_precision"}
    assert all(len(reason) > 80 for reason in cpu_limits.EXCLUDED.values())


def test_cpu_flags_are_read_from_cpuinfo(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512_bf16\n")
    assert cpu_limits.cpu_flags(str(info)) == {"fpu", "avx2", "avx512_bf16"}
    assert cpu_limits.cpu_flags(str(tmp_path / "missing")) == set()


@pytest.mark.parametrize("limited", [False, True])
def test_the_beyond_avx2_command_answers_by_exit_status(limited):
    env = {k: v for k, v in os.environ.items() if k not in AVX2_LIMITS}
    if limited:
        env.update(AVX2_LIMITS)
    result = subprocess.run(
        [sys.executable, "-m", "tests.cpu_limits", "--beyond-avx2"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    # Under the limits already, there is nothing left to take away.
    want = 0 if cpu_limits.beyond_avx2() and not limited else 1
    assert result.returncode == want, result.stdout + result.stderr
    assert result.stdout.startswith("beyond AVX2: ")


def test_a_test_named_for_float16_is_marked_half_precision(request):
    # tests/conftest.py marks by name: this test is its own example (and
    # the one the next test sees deselected).
    assert request.node.get_closest_marker("half_precision") is not None


def test_the_suite_deselects_half_precision_tests_under_the_limits(
        tmp_path):
    # (Where nothing is left out, `excluded_here` says so above.)
    info = tmp_path / "cpuinfo"
    info.write_text("flags\t: avx2 avx512f avx512_bf16\n")
    env = dict(os.environ, **AVX2_LIMITS, TFATTN_CPUINFO=str(info))
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q",
         "-p", "no:cacheprovider", "-p", "no:xdist",
         "tests/test_cpu_limits.py"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:]
    listed = result.stdout
    assert "test_a_test_named_for_float16_is_marked_half_precision" \
        not in listed
    assert "1 deselected" in listed, listed[-2000:]
    assert "test_every_exclusion_says_why" in listed  # the rest is kept
