"""Choosing the compute precision: `auto` takes 16-bit compute only where
this machine runs it faster, float32 otherwise.

- TPU: `mixed_bfloat16` (TPUs compute in bfloat16).
- GPU: `mixed_bfloat16` from compute capability 8.0 (Ampere) on,
  `mixed_float16` on 7.x (tensor cores, with loss scaling), float32 below.
- CPU: bfloat16 only where `/proc/cpuinfo` lists a bfloat16 dot product
  (`avx512_bf16`, `amx_bf16`): elsewhere oneDNN emulates it and it is
  slower than float32. There, the set's own training step is timed once in
  both precisions (`step_speedup`), and bfloat16 is taken if it is at least
  `MIN_SPEEDUP` times faster. A matmul alone misleads: small matmuls gain
  from bfloat16 while a whole step may lose, its casts, layer norms and
  float32 softmax over the vocabulary outweighing them
  (`bench/training_modes.py`; the Benchmarks page has the figures per
  CPU).

The probe measures what will run: the run's real vocabulary, rows of the
training data's mean length, at most `PROBE_TOKENS` tokens and a batch
whose estimated step (`tfattn.training.memory`) stays within
`PROBE_MEMORY_SHARE` of physical memory; the float32 trainer is released
before the bfloat16 one is built. It never ends a run: out of memory, it
keeps float32 and says so.

Measured once per model directory: `resolve` reuses the choice recorded in
`MODEL_DIR/precision.json` (`write_record`, at the first start) on resume,
for the same hparams and vocabulary; a `--mixed_precision` given
explicitly overrides it for that run.
"""

import contextlib
import gc
import json
import os
import random
import time
from typing import NamedTuple
from typing import Optional

import numpy as np
import tensorflow as tf

from tfattn import config
from tfattn.data.masking import MaskGenerator
from tfattn.data.masking import masked_lm_batch
from tfattn.training import memory
from tfattn.utils.files import write_text_atomically

__all__ = [
    "CPU_BF16_FLAGS",
    "MIN_SPEEDUP",
    "MIN_WIDTH",
    "cpu_flags",
    "onednn_limit",
    "PROBE_TOKENS",
    "PROBE_MEMORY_SHARE",
    "RECORD_FILENAME",
    "POLICIES",
    "PrecisionChoice",
    "probe_batch",
    "step_speedup",
    "choose",
    "record_path",
    "write_record",
    "read_record",
    "resolve",
    "describe",
]

CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16")
# oneDNN's ISA names (ONEDNN_MAX_CPU_ISA) below its first bfloat16 dot
# product (AVX512_CORE_BF16): under these, oneDNN has no bfloat16 kernel to
# run, whatever the CPU lists (tfattn.export.int8_cpu reads the limit the
# same way for 8-bit products).
_LIMITS_WITHOUT_BF16 = ("SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2",
                        "AVX512_CORE", "AVX512_CORE_VNNI")
MIN_SPEEDUP = 1.1
# Narrower models are not measured: their matmuls are too small for the
# bfloat16 units to pay for the casts (width 64: 0.99x for a matmul, 1.07x
# for the tiny set's step on the AVX-512 BF16 EPYC).
MIN_WIDTH = 128


def cpu_flags(path="/proc/cpuinfo"):
    """The CPU's feature flags (empty where /proc/cpuinfo is not there).

    Args:
        path: str. The cpuinfo file. Defaults to `"/proc/cpuinfo"`.

    Returns:
        set of str. The words of its first `flags` line.
    """
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


PROBE_TOKENS = 2048
PROBE_MEMORY_SHARE = 0.25
RECORD_FILENAME = "precision.json"
POLICIES = (None, "mixed_float16", "mixed_bfloat16")


class PrecisionChoice(NamedTuple):
    """A run's compute precision and why.

    Attributes:
        policy: None (float32), "mixed_float16" or "mixed_bfloat16".
        reason: str, in words (printed by `train.py`).
        speedup: float or None. The measured bfloat16 / float32 step-time
            ratio, where one was measured.
        source: "measured", "rule" (decided without measuring), "recorded"
            (read from the model directory) or "given" (asked for).
    """

    policy: Optional[str]
    reason: str
    speedup: Optional[float] = None
    source: str = "rule"

    @property
    def name(self):
        """str. The policy's name, `"float32"` for None."""
        return self.policy or "float32"


def probe_batch(hp, vocab_size, mean_length, available=None):
    """(rows, length) of the probe's random batch, or None when not even
    one row's step fits in `PROBE_MEMORY_SHARE` of `available` bytes.

    Args:
        hp: HParams.
        vocab_size: int. The run's vocabulary size.
        mean_length: float. The training rows' mean length; the probe's
            length is it rounded up to a multiple of 8 (at least 8, at most
            `max_train_length`).
        available: int or None. Bytes of memory (default: the machine's
            physical memory).

    Returns:
        tuple `(rows, length)` of ints, or None.
    """
    length = max(8, min(hp.max_train_length,
                        int(np.ceil(mean_length / 8)) * 8))
    rows, _ = memory.batch_shape(hp, length)
    rows = max(1, min(rows, PROBE_TOKENS // length))
    budget = PROBE_MEMORY_SHARE * (memory.physical_memory()
                                   if available is None else available)
    while rows >= 1:
        if memory.training_memory(hp, vocab_size, rows, length).total <= \
                budget:
            return rows, length
        rows //= 2
    return None


@contextlib.contextmanager
def _random_state_kept():
    """Python's and NumPy's global random state as they were: the probe's
    models draw their initial weights from them, training's must not see
    that (`tf.random.set_seed` would delete the tokenizer's op resource)."""
    python_state, numpy_state = random.getstate(), np.random.get_state()
    try:
        yield
    finally:
        random.setstate(python_state)
        np.random.set_state(numpy_state)


def step_speedup(hp, vocab_size, rows, length, steps=3):
    """How much faster `train.py`'s training step
    (`tfattn.training.step.build_trainer`: the model, Adam, the
    label-smoothed loss) runs in mixed_bfloat16 than in float32 here, on a
    random [rows, length] batch of a `vocab_size` vocabulary. Best of
    `steps` steps after two that trace and warm up; the float32 trainer is
    released before the bfloat16 one is built.

    Args:
        hp: HParams.
        vocab_size: int. The vocabulary size.
        rows: int. Rows of the random batch.
        length: int. Tokens per row.
        steps: int. Timed steps per precision. Defaults to `3`.

    Returns:
        float. The float32 step time over the bfloat16 one (> 1 where
        bfloat16 is faster).
    """
    # step imports this module's neighbours, not this module: no cycle.
    from tfattn.training.step import build_trainer

    rng = np.random.default_rng(0)
    ids = rng.integers(4, vocab_size, (3, rows, length)).astype("int32")
    ids[1, :, 0] = 2  # BOS
    batch = ({"source": ids[0], "target_in": ids[1]}, ids[2])
    if hp.task == "masked_lm":
        batch = _masked_batch(batch, hp, vocab_size)
    strategy = tf.distribute.get_strategy()
    times = {}
    with _random_state_kept():
        for policy in (None, "mixed_bfloat16"):
            step = build_trainer(strategy, hp, vocab_size, seed=0,
                                          mixed_precision=policy).train_step
            iterator = iter(tf.data.Dataset.from_tensors(batch).repeat())
            for _ in range(2):
                float(step(iterator)[0])
            best = float("inf")
            for _ in range(steps):
                start = time.perf_counter()
                float(step(iterator)[0])
                best = min(best, time.perf_counter() - start)
            times[policy] = best
            del step, iterator
            gc.collect()
    return times[None] / times["mixed_bfloat16"]


def onednn_limit(environ=None):
    """oneDNN's CPU ISA limit, upper case ("" where none is set).

    Args:
        environ: mapping or None (None: `os.environ`). Read for
            `ONEDNN_MAX_CPU_ISA` / `DNNL_MAX_CPU_ISA`.

    Returns:
        str.
    """
    environ = os.environ if environ is None else environ
    return (environ.get("ONEDNN_MAX_CPU_ISA")
            or environ.get("DNNL_MAX_CPU_ISA") or "").strip().upper()


def choose(hp, vocab_size, mean_length, flags=None, environ=None):
    """The `PrecisionChoice` for training the hparams `hp` here, with a
    vocabulary of `vocab_size` pieces on rows of `mean_length` tokens.

    Args:
        hp: HParams.
        vocab_size: int. The vocabulary size.
        mean_length: float. The training rows' mean length.
        flags: iterable of str or None. The CPU's flags (default:
            `cpu_flags()`).
        environ: mapping or None (None: `os.environ`). A oneDNN ISA limit
            below AVX512_CORE_BF16 in it (`onednn_limit`) takes the CPU's
            bfloat16 dot product away.

    Returns:
        PrecisionChoice. By the rules of the module docstring; measured
        (`step_speedup`) only on a CPU with a bfloat16 dot product that
        oneDNN may use and a width of at least `MIN_WIDTH`.
    """
    if tf.config.list_logical_devices("TPU"):
        return PrecisionChoice("mixed_bfloat16", "a TPU computes in bfloat16")
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        details = tf.config.experimental.get_device_details(gpus[0])
        major, _ = details.get("compute_capability", (0, 0))
        name = details.get("device_name", "GPU")
        if major >= 8:
            return PrecisionChoice("mixed_bfloat16", f"{name} (compute "
                                   f"capability {major}.x) has bfloat16 "
                                   "tensor cores")
        if major == 7:
            return PrecisionChoice("mixed_float16", f"{name} (compute "
                                   "capability 7.x) has float16 tensor cores")
        return PrecisionChoice(None, f"{name} has no 16-bit tensor cores")
    flags = cpu_flags() if flags is None else set(flags)
    found = [f for f in CPU_BF16_FLAGS if f in flags]
    if not found:
        return PrecisionChoice(None, (
            "the CPU has no bfloat16 dot product (no "
            f"{' or '.join(CPU_BF16_FLAGS)} in /proc/cpuinfo)"))
    limit = onednn_limit(environ)
    if limit in _LIMITS_WITHOUT_BF16:
        return PrecisionChoice(None, (
            f"oneDNN is limited to {limit} (ONEDNN_MAX_CPU_ISA), which has "
            f"no bfloat16 dot product, though the CPU lists {found[0]}"))
    if hp.num_units < MIN_WIDTH:
        return PrecisionChoice(None, (
            f"a width of {hp.num_units} (< {MIN_WIDTH}) gains nothing from "
            "bfloat16 on a CPU (not measured)"))
    return _measure(hp, vocab_size, mean_length, found)


def _measure(hp, vocab_size, mean_length, found):
    shape = probe_batch(hp, vocab_size, mean_length)
    if shape is None:
        return PrecisionChoice(None, (
            "not even one row of this set's training step fits in "
            f"{PROBE_MEMORY_SHARE:.0%} of this machine's memory, so bfloat16 "
            "was not measured"))
    rows, length = shape
    try:
        speedup = step_speedup(hp, vocab_size, rows, length)
    except tf.errors.ResourceExhaustedError:
        gc.collect()
        return PrecisionChoice(None, (
            f"measuring bfloat16 ran out of memory on a {rows} x {length} "
            "batch, so float32 was kept"))
    policy = "mixed_bfloat16" if speedup >= MIN_SPEEDUP else None
    verdict = "runs" if policy else "runs only"
    return PrecisionChoice(policy, (
        f"this set's training step {verdict} {speedup:.2f}x float32 in "
        f"bfloat16 on this CPU ({', '.join(found)}; measured on random "
        f"{rows} x {length} batches, vocabulary {vocab_size:,}, "
        f"{MIN_SPEEDUP}x needed)"), speedup, "measured")


# ----------------------------------------------------------------------
# The record in the model directory.

def record_path(model_dir):
    """The path of the precision record of a model directory.

    Args:
        model_dir: str or path-like.

    Returns:
        str. `model_dir/precision.json`.
    """
    return tf.io.gfile.join(str(model_dir), RECORD_FILENAME)


def write_record(model_dir, choice, hp, vocab_size):
    """Records `choice` for `hp` and `vocab_size` in `model_dir` (whole, or
    not at all).

    Args:
        model_dir: str or path-like.
        choice: PrecisionChoice.
        hp: HParams. The hparams it was chosen for.
        vocab_size: int. The vocabulary size it was chosen for.
    """
    write_text_atomically(record_path(model_dir), json.dumps(dict(
        policy=choice.name, reason=choice.reason, speedup=choice.speedup,
        source=choice.source, vocab_size=vocab_size,
        hparams=config.to_dict(hp)), indent=2, sort_keys=True) + "\n")


def read_record(model_dir, hp, vocab_size):
    """The `PrecisionChoice` recorded in `model_dir` for these hparams
    (outside `config.RESUMABLE_FIELDS`) and vocabulary size, or None (no
    record, another run's, or one that does not read).

    Args:
        model_dir: str or path-like.
        hp: HParams. The run's hparams.
        vocab_size: int. The run's vocabulary size.

    Returns:
        PrecisionChoice (source "recorded") or None.
    """
    path = record_path(model_dir)
    if not tf.io.gfile.exists(path):
        return None
    try:
        with tf.io.gfile.GFile(path) as f:
            saved = json.load(f)
        measured_for = config.from_json(json.dumps(saved["hparams"]))
        policy = None if saved["policy"] == "float32" else saved["policy"]
        if policy not in POLICIES:
            return None
    except (ValueError, KeyError, TypeError, tf.errors.OpError):
        return None
    if saved.get("vocab_size") != vocab_size or config.differences(
            measured_for, hp, ignore=config.RESUMABLE_FIELDS):
        return None
    return PrecisionChoice(policy, str(saved.get("reason", "")),
                           saved.get("speedup"), "recorded")


def resolve(requested, hp, vocab_size, mean_length, model_dir):
    """The `PrecisionChoice` of a training run.

    Args:
        requested: "auto", None (float32) or a policy name. Anything but
            "auto" is taken as given.
        hp, vocab_size, mean_length: what `choose` measures with.
        model_dir: where a first start's choice is recorded.

    Returns:
        PrecisionChoice. For "auto", the recorded choice (source
        "recorded"), else `choose`'s. Otherwise the requested policy
        (source "given"), whose reason names the recorded choice it
        overrides, if any.
    """
    recorded = read_record(model_dir, hp, vocab_size)
    if requested == "auto":
        return recorded or choose(hp, vocab_size, mean_length)
    reason = "--mixed_precision asks for it"
    if recorded is not None and recorded.policy != requested:
        reason += (f", overriding the {recorded.name} recorded at the first "
                   "start")
    return PrecisionChoice(requested, reason, None, "given")


def describe(choice):
    """The line `train.py` prints: the policy, why, and how to change it.

    Args:
        choice: PrecisionChoice.

    Returns:
        str.
    """
    if choice.source == "recorded":
        return (f"Precision: {choice.name}, recorded at the first start "
                f"({choice.reason}); --mixed_precision=off, mixed_float16 "
                "or mixed_bfloat16 overrides.")
    if choice.source == "given":
        return f"Precision: {choice.name}, because {choice.reason}."
    return (f"Precision: {choice.name}, because {choice.reason} "
            "(--mixed_precision=off, mixed_float16 or mixed_bfloat16 "
            "overrides).")


def _masked_batch(batch, hp, vocab_size):
    """The random batch with BERT's blanks (mask id 4), as the masked-LM
    task's pipeline makes them."""
    masker = MaskGenerator(vocab_size, mask_selection_rate=(
        hp.mask_selection_rate), mask_token_rate=hp.mask_token_rate,
        random_token_rate=hp.random_token_rate)
    return masked_lm_batch(*batch, masker, seed=[0, 0])
