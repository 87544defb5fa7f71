"""Tests of `train.py`: flag validators, `main`'s errors, an end-to-end run."""

import json
import os
import subprocess
import sys

import pytest
import tensorflow as tf
from absl import app
from absl import flags
from absl.testing import flagsaver

import train
from tfattn import training

FLAGS = flags.FLAGS
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAST = "--hparams_overrides=num_layers=1,log_every_steps=5"


@pytest.fixture(autouse=True)
def saved_flags():
    with flagsaver.flagsaver():
        yield
    FLAGS.unparse_flags()


def parse(*args):
    FLAGS.unparse_flags()
    return FLAGS(["train.py", *args])


@pytest.mark.parametrize("args, message", [
    (["--hparams=small"], "Known sets: tiny, base, big"),
    (["--hparams=tiny", "--hparams_overrides=heads=4"],
     "Unknown hparams field 'heads'.*Valid fields: flavor"),
    (["--hparams=tiny", "--hparams_overrides=num_heads"],
     "Malformed hparams override"),
    (["--hparams=tiny", "--hparams_overrides=num_heads=2.5"],
     "expected an int"),
    (["--hparams=tiny", "--hparams_overrides=num_heads=3"],
     "a multiple of num_heads=3"),
    (["--strategy=gpu"], "value should be one of <default|one_device"),
    (["--strategy=tpu"], "--tpu is required with --strategy=tpu"),
    (["--tpu=local"], "--tpu is required with --strategy=tpu and only"),
    (["--strategy=tpu", "--tpu=local", "--mixed_precision=mixed_float16"],
     "TPUs do not compute in float16"),
    (["--train_steps=5", "--train_epochs=1"], "At most one of"),
    (["--train_steps=0"], "--train_steps=0"),
    (["--export_dir=/tmp/e"], "--export_dir is only used with"),
    (["--mode=eval", "--train_steps=5"], "only apply with --mode=train"),
    (["--dataset=wmt"], "Unknown dataset 'wmt'"),
    (["--dataset=tfds:wmt14_translate/de-en"], "needs source_language"),
    (["--source_language=en"], "'numbers' dataset takes no source_language"),
    (["--dataset=multi30k", "--source_language=fr"],
     "between 'en' and 'de'"),
    (["--mixed_precision=fp16"], "value should be one of <off|"),
])
def test_flag_validators_reject_impossible_combinations(args, message,
                                                        tmp_path):
    with pytest.raises(flags.IllegalFlagValueError, match=message):
        parse(f"--model_dir={tmp_path}", *args)


def test_model_dir_is_required():
    with pytest.raises(flags.IllegalFlagValueError, match="--model_dir"):
        parse("--hparams=tiny")


def test_valid_flags_parse(tmp_path):
    parse(f"--model_dir={tmp_path}", "--hparams=tiny",
          "--hparams_overrides=num_heads=2,dropout_rate=0.2",
          "--strategy=mirrored", "--mixed_precision=mixed_bfloat16",
          "--dataset=textfiles:/data/corpus", "--source_language=en",
          "--target_language=de", "--train_epochs=2", "--mode=all",
          "--export_dir=/tmp/export")
    hp = train.requested_hparams()
    assert (hp.num_heads, hp.dropout_rate) == (2, 0.2)


@pytest.mark.parametrize("args, message", [
    (["--hparams=tiny", "--dataset=multi30k", "--manual_dir=/no/such/dir"],
     "manual_dir directory does not exist"),
    (["--hparams=tiny", "--dataset=tfds:wmt14_translate/de-en",
      "--source_language=de", "--target_language=en",
      "--data_dir=/no/such/dir"], "data_dir directory does not exist"),
    (["--hparams=tiny", "--dataset=textfiles:/no/such/corpus",
      "--source_language=en", "--target_language=de"],
     "No parallel text files"),
    ([], "name a hparams set"),
    (["--hparams_overrides=num_heads=2"], "needs --hparams for a new run"),
])
def test_main_refuses_bad_input_and_writes_nothing(args, message, tmp_path):
    model_dir = tmp_path / "run"
    parse(f"--model_dir={model_dir}", *args)
    with pytest.raises(app.UsageError, match=message):
        train.main(["train.py"])
    assert not model_dir.exists()


def test_main_refuses_extra_arguments(tmp_path):
    parse(f"--model_dir={tmp_path}", "--hparams=tiny")
    with pytest.raises(app.UsageError, match="Unexpected arguments: extra"):
        train.main(["train.py", "extra"])


def test_main_exits_non_zero_on_a_non_finite_loss(tmp_path, monkeypatch):
    def explode(*args, **kwargs):
        raise training.NonFiniteLossError(7, "loss", "/run/ckpt-6")

    monkeypatch.setattr(training, "train", explode)
    parse(f"--model_dir={tmp_path}", "--hparams=tiny")
    with pytest.raises(SystemExit) as exit_info:
        train.main(["train.py"])
    assert "non-finite loss at step 7" in str(exit_info.value.code)
    assert "/run/ckpt-6, is kept" in str(exit_info.value.code)


def test_main_passes_the_flags_to_train(tmp_path, monkeypatch):
    seen = {}

    def fake_train(hp, spec, model_dir, **kwargs):
        seen.update(kwargs, hp=hp, spec=spec, model_dir=model_dir)
        raise training.NonFiniteLossError(1, "loss", None)

    monkeypatch.setattr(training, "train", fake_train)
    parse(f"--model_dir={tmp_path}", "--hparams=tiny", FAST,
          "--train_steps=9", "--mixed_precision=mixed_bfloat16",
          "--jit_compile", "--seed=3", "--progress_bar=false")
    with pytest.raises(SystemExit):
        train.main(["train.py"])
    assert seen["hp"].num_layers == 1 and seen["spec"].kind == "numbers"
    assert (seen["steps"], seen["epochs"], seen["mixed_precision"],
            seen["jit_compile"], seen["seed"], seen["verbose"]) == (
        9, None, "mixed_bfloat16", True, 3, 0)


def test_bad_input_exits_non_zero_with_a_clear_message(tmp_path):
    out = subprocess.run(
        [sys.executable, "train.py", "--hparams=small",
         f"--model_dir={tmp_path / 'run'}"],
        cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode != 0
    assert "Known sets: tiny, base, big" in out.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_end_to_end_train_eval_export_then_resume(tmp_path):
    model_dir = tmp_path / "run"
    out = subprocess.run(
        [sys.executable, "train.py", "--hparams=tiny", FAST,
         "--dataset=numbers", f"--model_dir={model_dir}", "--train_steps=20",
         "--samples=5", "--mode=all", "--progress_bar=false"],
        cwd=REPO, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "Exact match on 5 validation pairs" in out.stdout
    assert "BLEU on the test split" in out.stdout
    assert "Exported a string-to-string translator" in out.stdout
    assert (model_dir / "export" / "saved_model.pb").exists()
    metrics = json.loads((model_dir / "metrics_test.json").read_text())
    assert metrics["num_sentences"] == 500

    # Resume in-process with the saved hparams and a longer run.
    parse(f"--model_dir={model_dir}", "--train_steps=25", "--samples=0",
          "--progress_bar=false")
    train.main(["train.py"])
    assert training.load_saved_hparams(model_dir).train_steps == 25
    last = str(model_dir / "ckpt-25")
    (iterations,) = [n for n, _ in tf.train.list_variables(last)
                     if n.startswith("optimizer/_iterations")]
    assert tf.train.load_variable(last, iterations) == 25
