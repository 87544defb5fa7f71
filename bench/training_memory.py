"""Peak resident memory of training against `tfattn.training.memory`'s estimate.

TensorFlow's CPU allocator keeps no peak counter, so each row runs in a
child process and its peak resident set size (`ru_maxrss` of that child,
from `os.wait4`) is compared with `memory.training_memory` for the same
hparams, vocabulary and batch shape. Rows:

- steps: `training.build_trainer` and two training steps on a random
  [rows, length] batch (what `train.py` runs per step);
- `--train_py`: whole `train.py` runs (`--hparams=base` on the numbers task,
  `--hparams=multi30k` on Multi30k with `--manual_dir`), against the
  estimate `train.py` logs itself ("Memory: about ...").

    python bench/training_memory.py
    python bench/training_memory.py --train_py \
        --manual_dir=../shared/data/multi30k/raw
"""

import argparse
import itertools
import json
import os
import re
import subprocess
import sys
import tempfile

import _repo  # noqa: F401  (puts the repository root on sys.path)

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# (hparams set, overrides, vocabulary, rows, length, policy)
STEP_ROWS = (
    ("multi30k", "", 8000, 128, 32, "float32"),
    ("multi30k", "", 8000, 256, 32, "float32"),
    ("multi30k", "", 8000, 128, 64, "float32"),
    ("multi30k", "", 16000, 128, 32, "float32"),
    ("multi30k", "num_layers=8", 8000, 128, 32, "float32"),
    ("multi30k", "", 8000, 128, 32, "mixed_bfloat16"),
    ("base", "", 209, 64, 32, "float32"),
    ("base", "", 209, 128, 32, "float32"),
    ("base", "", 209, 64, 128, "float32"),
    ("base", "", 209, 128, 32, "mixed_bfloat16"),
    # R-Drop stacks the batch twice and keeps its KL's float32 terms.
    ("multi30k_reference", "", 10000, 256, 32, "mixed_bfloat16"),
    ("multi30k_reference", "rdrop_alpha=1.0", 10000, 128, 32,
     "mixed_bfloat16"),
    ("multi30k_reference", "rdrop_alpha=1.0", 10000, 128, 32, "float32"),
)


def _hparams(name, overrides):
    import hparams

    from tfattn import config

    return config.parse_overrides(hparams.get(name), overrides)


def child(name, overrides, vocab, rows, length, policy):
    """Builds the trainer, runs two steps; prints nothing else."""
    import numpy as np
    import tensorflow as tf

    from tfattn import training

    hp = _hparams(name, overrides)
    ids = (
        np.random.default_rng(0)
        .integers(4, vocab, (3, rows, length))
        .astype("int32")
    )
    batch = ({"source": ids[0], "target_in": ids[1]}, ids[2])
    trainer = training.build_trainer(
        tf.distribute.get_strategy(),
        hp,
        vocab,
        seed=0,
        mixed_precision=None if policy == "float32" else policy,
    )
    iterator = iter(tf.data.Dataset.from_tensors(batch).repeat())
    for _ in range(2):
        float(trainer.train_step(iterator)[0])


def _peak_of(command):
    """(peak RSS bytes, stdout + stderr) of a child process."""
    with tempfile.TemporaryFile() as output:
        process = subprocess.Popen(
            command, stdout=output, stderr=subprocess.STDOUT
        )
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
        output.seek(0)
        text = output.read().decode("utf-8", "replace")
    if process.returncode:
        raise RuntimeError(f"{' '.join(command)} failed:\n{text[-2000:]}")
    return usage.ru_maxrss * 1024, text


def step_rows(only=None):
    """The STEP_ROWS whose set name or overrides contain `only` (all for
    None), measured one by one."""
    from tfattn.training import memory

    for name, overrides, vocab, rows, length, policy in STEP_ROWS:
        if only and only not in f"{name} {overrides}":
            continue
        peak, _ = _peak_of(
            [
                sys.executable,
                __file__,
                "--child",
                json.dumps([name, overrides, vocab, rows, length, policy]),
            ]
        )
        estimate = memory.training_memory(
            _hparams(name, overrides),
            vocab,
            rows,
            length,
            None if policy == "float32" else policy,
        )
        yield (
            f"{name} {overrides}".strip(),
            f"{rows} x {length}",
            vocab,
            policy,
            peak,
            estimate.total,
        )


def train_py_rows(manual_dir, only_multi30k=False):
    runs = [("base", ["--hparams=base", "--train_steps=1"])]
    if only_multi30k:
        runs = []
    if manual_dir:
        runs.append(
            (
                "multi30k",
                [
                    "--hparams=multi30k",
                    "--dataset=multi30k",
                    f"--manual_dir={manual_dir}",
                    "--train_steps=20",
                    # Memory does not depend on the schedule.
                    "--hparams_overrides=warmup_steps=5",
                    "--data_dir={directory}/tfds",
                ],
            )
        )
    for name, flags in runs:
        for policy in ("off", "auto"):
            with tempfile.TemporaryDirectory() as directory:
                peak, text = _peak_of(
                    [
                        sys.executable,
                        os.path.join(_repo.ROOT, "train.py"),
                        *(f.format(directory=directory) for f in flags),
                        "--samples=0",
                        "--progress_bar=false",
                        f"--model_dir={directory}/run",
                        f"--mixed_precision={policy}",
                    ]
                )
            found = re.search(
                r"Memory: about ([0-9.,]+) GiB .*?for batches "
                r"of ([0-9,]+ x \d+) tokens",
                text,
            )
            chosen = re.search(r"Precision: (\S+),", text)
            estimate = float(found.group(1).replace(",", "")) * 2**30
            yield (
                f"train.py {name}",
                found.group(2),
                "-",
                chosen.group(1) if chosen else policy,
                peak,
                estimate,
            )


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--train_py",
        action="store_true",
        help="Also measure whole train.py runs.",
    )
    parser.add_argument(
        "--manual_dir",
        default=None,
        help="Multi30k's raw files, for the multi30k run.",
    )
    parser.add_argument(
        "--skip_steps",
        action="store_true",
        help="Only the train.py runs (with --train_py).",
    )
    parser.add_argument(
        "--skip_base",
        action="store_true",
        help="Leave out the train.py base runs (with --train_py).",
    )
    parser.add_argument(
        "--only",
        default=None,
        help="Only the step rows whose set or overrides contain this text "
        "(e.g. multi30k_reference).",
    )
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*json.loads(args.child))
        return
    from tfattn.training import memory

    print(
        "| run | batch | vocab | policy | peak RSS GiB | estimate GiB "
        "| peak / estimate |\n|---|---|---:|---|---:|---:|---:|"
    )
    measured = iter(()) if args.skip_steps else step_rows(args.only)
    if args.train_py:
        measured = itertools.chain(
            measured, train_py_rows(args.manual_dir, args.skip_base)
        )
    rows = []
    for row in measured:  # Each row as soon as it is measured.
        rows.append(row)
        name, shape, vocab, policy, peak, estimate = row
        print(
            f"| {name} | {shape} | {vocab} | {policy} | "
            f"{peak / 2**30:.2f} | {estimate / 2**30:.2f} | "
            f"{peak / estimate:.2f} |",
            flush=True,
        )
    ratios = [peak / estimate for *_, peak, estimate in rows]
    print(
        f"\npeak / estimate from {min(ratios):.2f} to {max(ratios):.2f} "
        f"(stated: within {memory.STATED_FACTOR}x either way)"
    )


if __name__ == "__main__":
    main()
