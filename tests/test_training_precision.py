"""`tfattn.training.precision`: `--mixed_precision=auto` takes bfloat16 only
where
this machine runs it faster."""

import json
import random

import numpy as np
import pytest
import tensorflow as tf
from absl import flags

import train
from tests.test_cli_train import saved_flags  # noqa: F401 (autouse)
from tfattn.training import memory
from tfattn.training import precision
from tfattn import training

FLAGS = flags.FLAGS


def test_cpu_flags_are_read_from_cpuinfo(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512_bf16\n")
    assert precision.cpu_flags(str(cpuinfo)) == {"fpu", "avx2", "avx512_bf16"}
    assert precision.cpu_flags(str(tmp_path / "missing")) == set()


def _hp(**overrides):
    import hparams
    from tfattn import config

    return config.parse_overrides(
        hparams.get("multi30k"),
        ",".join(f"{k}={v}" for k, v in overrides.items()),
    )


def test_a_cpu_without_bfloat16_dot_products_keeps_float32(monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("no measurement without the CPU flag")

    monkeypatch.setattr(precision, "step_speedup", never)
    policy, why, *_ = precision.choose(_hp(), 8000, 16, flags={"avx2", "fma"})
    assert policy is None and "no bfloat16 dot product" in why
    policy, why, *_ = precision.choose(
        _hp(num_units=64, num_heads=4), 8000, 16, flags={"avx512_bf16"}
    )
    assert policy is None and "width of 64" in why


@pytest.mark.parametrize(
    "speedup, policy", [(1.9, "mixed_bfloat16"), (1.05, None)]
)
def test_a_bfloat16_cpu_is_measured(monkeypatch, speedup, policy):
    seen = {}

    def measured(hp, vocab_size, rows, length):
        seen.update(vocab_size=vocab_size, rows=rows, length=length)
        return speedup

    monkeypatch.setattr(precision, "step_speedup", measured)
    choice = precision.choose(_hp(), 5000, 13.2, flags={"avx512_bf16"},
                              environ={})
    assert choice.policy == policy and choice.speedup == speedup
    assert choice.source == "measured"
    assert f"{speedup:.2f}x float32" in choice.reason
    # The run's vocabulary, rows of its mean length rounded up to 8, at
    # most PROBE_TOKENS tokens.
    assert seen == dict(
        vocab_size=5000, length=16, rows=precision.PROBE_TOKENS // 16
    )


@pytest.mark.parametrize("environ, measured", [
    ({"ONEDNN_MAX_CPU_ISA": "AVX2"}, False),
    ({"DNNL_MAX_CPU_ISA": " sse41 "}, False),
    ({"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_VNNI"}, False),
    ({"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"}, True),
    ({"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_AMX"}, True),
    ({"ONEDNN_MAX_CPU_ISA": "ALL"}, True),
    ({}, True)])
def test_a_onednn_limit_below_bfloat16_keeps_float32(
        monkeypatch, environ, measured):
    """oneDNN limited below AVX512_CORE_BF16 has no bfloat16 kernel on a
    CPU that lists one (TensorFlow would still send bfloat16 matmuls to
    it): float32, unmeasured; a limit at or above it measures."""
    monkeypatch.setattr(precision, "step_speedup", lambda *args: 1.9)
    choice = precision.choose(_hp(), 5000, 13.2, flags={"amx_bf16"},
                              environ=environ)
    if measured:
        assert choice.policy == "mixed_bfloat16" and choice.speedup == 1.9
    else:
        limit = next(iter(environ.values())).strip().upper()
        assert choice.policy is None and choice.speedup is None
        assert (f"oneDNN is limited to {limit} (ONEDNN_MAX_CPU_ISA)"
                in choice.reason), choice.reason


@pytest.mark.slow
@pytest.mark.half_precision  # It times a mixed_bfloat16 step.
def test_the_measurement_times_the_real_step():
    """A small set's real step in both precisions: a positive ratio, and
    the global random state training seeds from left as it was."""
    python_state, numpy_draw = random.getstate(), np.random.get_state()
    ratio = precision.step_speedup(_hp(num_layers=1), 200, 8, 16, steps=1)
    assert 0 < ratio < 100
    assert random.getstate() == python_state
    assert np.random.get_state()[1].tolist() == numpy_draw[1].tolist()


def test_train_py_auto_passes_the_choice_to_training(
    tmp_path, monkeypatch, capsys
):
    seen = {}

    def fake_train(prepared, **kwargs):
        seen.update(mixed_precision=prepared.precision.policy)
        raise training.NonFiniteLossError(1, "loss", None)

    monkeypatch.setattr(training, "train_prepared", fake_train)
    monkeypatch.setattr(
        precision,
        "choose",
        lambda *args: precision.PrecisionChoice(
            "mixed_bfloat16", "a test said so"
        ),
    )
    FLAGS.unparse_flags()
    FLAGS(
        [
            "train.py",
            "--hparams=tiny",
            f"--model_dir={tmp_path}",
            "--mixed_precision=auto",
            "--samples=0",
        ]
    )
    with pytest.raises(SystemExit):
        train.main(["train.py"])
    assert seen["mixed_precision"] == "mixed_bfloat16"
    assert (
        "Precision: mixed_bfloat16, because a test said so"
        in capsys.readouterr().out
    )


def test_the_probe_batch_stays_within_its_share_of_memory():
    hp = _hp()
    rows, length = precision.probe_batch(hp, 8000, 13.2, available=2**40)
    assert (rows, length) == (precision.PROBE_TOKENS // 16, 16)
    # Less memory: fewer rows, each probe step within the share.
    budget = 1.1 * 2**30
    rows, length = precision.probe_batch(
        hp, 8000, 13.2, available=budget / 0.25
    )
    assert 1 <= rows < precision.PROBE_TOKENS // 16
    assert memory.training_memory(hp, 8000, rows, length).total <= budget
    assert precision.probe_batch(hp, 8000, 13.2, available=2**20) is None


def test_a_probe_that_cannot_fit_keeps_float32(monkeypatch):
    monkeypatch.setattr(memory, "physical_memory", lambda: 2**20)
    monkeypatch.setattr(precision, "step_speedup", _never_measured)
    choice = precision.choose(_hp(), 8000, 13.2, flags={"amx_bf16"},
                              environ={})
    assert choice.policy is None and "not even one row" in choice.reason


def test_a_probe_out_of_memory_keeps_float32(monkeypatch):
    def out_of_memory(*args):
        raise tf.errors.ResourceExhaustedError(
            None, None, "OOM when allocating tensor with shape[64,16,8000]"
        )

    monkeypatch.setattr(precision, "step_speedup", out_of_memory)
    choice = precision.choose(_hp(), 8000, 13.2, flags={"amx_bf16"},
                              environ={})
    assert choice.policy is None and "ran out of memory" in choice.reason


def _never_measured(*args, **kwargs):
    raise AssertionError("measured again")


def _train_py(model_dir, *args):
    FLAGS.unparse_flags()
    FLAGS(
        [
            "train.py",
            "--hparams=tiny",
            f"--model_dir={model_dir}",
            "--samples=0",
            "--progress_bar=false",
            "--hparams_overrides=num_layers=1",
            *args,
        ]
    )
    train.main(["train.py"])


@pytest.mark.slow
@pytest.mark.half_precision  # It trains in mixed_bfloat16.
def test_the_choice_is_recorded_once_and_reused(tmp_path, monkeypatch, capsys):
    """The first start measures and records; a resume reads the record
    (measuring again would fail); an explicit policy overrides it."""
    calls = []
    monkeypatch.setattr(precision, "cpu_flags", lambda: {"amx_bf16"})
    monkeypatch.setattr(precision, "MIN_WIDTH", 1)
    monkeypatch.setattr(
        precision, "step_speedup", lambda *args: calls.append(args) or 1.5
    )
    _train_py(tmp_path, "--train_steps=2")
    assert len(calls) == 1
    assert (
        "Precision: mixed_bfloat16, because this set's training step "
        "runs 1.50x" in capsys.readouterr().out
    )
    record = json.loads((tmp_path / "precision.json").read_text())
    assert (record["policy"], record["speedup"]) == ("mixed_bfloat16", 1.5)

    monkeypatch.setattr(precision, "step_speedup", _never_measured)
    _train_py(tmp_path, "--train_steps=2")
    out = capsys.readouterr().out
    assert (
        "Precision: mixed_bfloat16, recorded at the first start "
        "(this set's training step runs 1.50x" in out
    )
    assert json.loads((tmp_path / "precision.json").read_text()) == record

    _train_py(tmp_path, "--train_steps=2", "--mixed_precision=off")
    assert (
        "Precision: float32, because --mixed_precision asks for it, "
        "overriding the mixed_bfloat16 recorded at the first start."
        in capsys.readouterr().out
    )
    assert json.loads((tmp_path / "precision.json").read_text()) == record


@pytest.mark.parametrize("text", ["{", '{"policy": "float64"}', "[]"])
def test_an_unreadable_or_foreign_record_is_measured_again(tmp_path, text):
    (tmp_path / "precision.json").write_text(text)
    assert precision.read_record(tmp_path, _hp(), 8000) is None
    precision.write_record(
        tmp_path,
        precision.PrecisionChoice(
            "mixed_bfloat16", "measured", 1.3, "measured"
        ),
        _hp(),
        8000,
    )
    assert (
        precision.read_record(tmp_path, _hp(), 8000).policy == "mixed_bfloat16"
    )
    # Another model or vocabulary: not this record's.
    assert precision.read_record(tmp_path, _hp(num_units=256), 8000) is None
    assert precision.read_record(tmp_path, _hp(), 7999) is None
    # Resumable fields (a longer run, a smaller batch) keep it.
    assert (
        precision.read_record(
            tmp_path, _hp(train_steps=9999, tokens_per_batch=1024), 8000
        )
        is not None
    )
