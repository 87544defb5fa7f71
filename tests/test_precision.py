"""`tfattn.precision`: `--mixed_precision=auto` takes bfloat16 only where
this machine runs it faster."""

import pytest
from absl import flags

import train
from tests.test_train_cli import saved_flags  # noqa: F401 (autouse)
from tfattn import precision
from tfattn import training

FLAGS = flags.FLAGS


def test_cpu_flags_are_read_from_cpuinfo(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512_bf16\n")
    assert precision.cpu_flags(str(cpuinfo)) == {"fpu", "avx2",
                                                  "avx512_bf16"}
    assert precision.cpu_flags(str(tmp_path / "missing")) == set()


def _hp(**overrides):
    import hparams
    from tfattn import config
    return config.parse_overrides(hparams.get("multi30k"), ",".join(
        f"{k}={v}" for k, v in overrides.items()))


def test_a_cpu_without_bfloat16_dot_products_keeps_float32(monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("no measurement without the CPU flag")

    monkeypatch.setattr(precision, "step_speedup", never)
    policy, why = precision.choose(_hp(), flags={"avx2", "fma"})
    assert policy is None and "no bfloat16 dot product" in why
    policy, why = precision.choose(_hp(num_units=64, num_heads=4),
                                   flags={"avx512_bf16"})
    assert policy is None and "width of 64" in why


@pytest.mark.parametrize("speedup, policy", [(1.9, "mixed_bfloat16"),
                                             (1.05, None)])
def test_a_bfloat16_cpu_is_measured(monkeypatch, speedup, policy):
    monkeypatch.setattr(precision, "step_speedup", lambda hp: speedup)
    chosen, why = precision.choose(_hp(), flags={"avx512_bf16"})
    assert chosen == policy
    assert f"{speedup:.2f}x float32" in why


@pytest.mark.slow
def test_the_measurement_times_the_real_step():
    """A small set's real step in both precisions: a positive ratio."""
    ratio = precision.step_speedup(_hp(num_layers=1, vocab_size=200,
                                       tokens_per_batch=256), steps=1)
    assert 0 < ratio < 100


def test_train_py_auto_passes_the_choice_to_training(tmp_path, monkeypatch,
                                                     capsys):
    seen = {}

    def fake_train(hp, spec, model_dir, **kwargs):
        seen.update(kwargs)
        raise training.NonFiniteLossError(1, "loss", None)

    monkeypatch.setattr(training, "train", fake_train)
    monkeypatch.setattr(precision, "choose",
                        lambda hp: ("mixed_bfloat16", "a test said so"))
    FLAGS.unparse_flags()
    FLAGS(["train.py", "--hparams=tiny", f"--model_dir={tmp_path}",
           "--mixed_precision=auto", "--samples=0"])
    with pytest.raises(SystemExit):
        train.main(["train.py"])
    assert seen["mixed_precision"] == "mixed_bfloat16"
    assert ("Precision: mixed_bfloat16, because a test said so"
            in capsys.readouterr().out)
