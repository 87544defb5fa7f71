"""Peak memory of reading a large parallel corpus: the whole-file reader
against the streaming one that training uses, each in a fresh process.

A corpus of about `--megabytes` MB per side is written (a caption and its
translation, numbered); then one subprocess per reader reports its peak resident
memory (`ru_maxrss`) after reading every pair, less that of a process that
only imported TensorFlow and tfattn.

    python bench/textfiles_memory.py --megabytes=300
"""

import argparse
import os
import subprocess
import sys
import tempfile

import _repo  # (puts the repository root on sys.path; ROOT for children)

READERS = {
    "baseline": "pass",
    "read_parallel_files (whole files)":
        "pairs = textfiles.read_parallel_files(prefix + '.en', "
        "prefix + '.de'); count = len(pairs)",
    "parallel_dataset (streamed, what training reads)":
        "count = sum(1 for _ in textfiles.parallel_dataset(prefix, 'en', "
        "'de').batch(4096))",
}

_CHILD = """
import resource, sys
import tensorflow as tf
from tfattn.data import textfiles
prefix = sys.argv[1]
{code}
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)
"""


def write_corpus(directory, megabytes):
    prefix = os.path.join(directory, "corpus")
    line = ("a man in a blue shirt is standing on a ladder cleaning "
            "windows {}\n", "ein mann in einem blauen hemd steht auf einer "
            "leiter und putzt fenster {}\n")
    lines = int(megabytes * 1e6 / len(line[0]))
    for side, template in zip(("en", "de"), line):
        with open(f"{prefix}.{side}", "w") as f:
            for start in range(0, lines, 10000):
                f.write("".join(template.format(i) for i in range(
                    start, min(start + 10000, lines))))
    return prefix, lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--megabytes", type=float, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        prefix, lines = write_corpus(directory, args.megabytes)
        size = os.path.getsize(prefix + ".en") + os.path.getsize(
            prefix + ".de")
        print(f"corpus: {lines:,} pairs, {size / 1e6:,.0f} MB in all")
        peaks = {}
        for name, code in READERS.items():
            done = subprocess.run(
                [sys.executable, "-c", _CHILD.format(code=code), prefix],
                capture_output=True, text=True, env=dict(
                    os.environ, TF_CPP_MIN_LOG_LEVEL="3",
                    PYTHONPATH=_repo.ROOT))
            if done.returncode:
                print(f"{name}: failed: {done.stderr[-500:]}")
                continue
            peaks[name] = int(done.stdout.split()[-1])
        base = peaks.pop("baseline", 0)
        for name, peak in peaks.items():
            print(f"{name}: peak {peak:,} MB, {peak - base:,} MB above the "
                  f"imports ({(peak - base) * 1e6 / size:.1f}x the corpus)")


if __name__ == "__main__":
    main()
