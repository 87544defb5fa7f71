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
