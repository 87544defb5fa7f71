"""Tests of `train.py`: flag validators, `main`'s errors, end-to-end runs,
kill and resume."""

import json
import logging
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import tensorflow as tf
from absl import flags
from absl.testing import flagsaver

import hparams
import train
from tfattn.cli import commands
from tfattn import config
from tfattn.training import model_io
from tfattn.training import run_dir
from tfattn.utils.files import write_text_atomically
from tfattn import training
from tfattn.decoding import translate

FLAGS = flags.FLAGS
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAST = "--hparams_overrides=num_layers=1,log_every_steps=5"
# The end-to-end test's runs (tests of the kill and resume): the first run
# ends at TERM_STEPS, and checkpoints there only; SIGTERM is sent at step 5.
# The second, longer one checkpoints at 2 * TERM_STEPS and SIGKILL is sent
# then. Each leaves tens of steps before the run's end for the signal to
# land (a step takes tens of milliseconds), and the resumed runs are quick.
TERM_STEPS = 50
KILL_STEPS = 150


@pytest.fixture(autouse=True)
def saved_flags():
    with flagsaver.flagsaver():
        yield
    FLAGS.unparse_flags()


def parse(*args):
    FLAGS.unparse_flags()
    return FLAGS(["train.py", *args])


@pytest.mark.parametrize(
    "args, message",
    [
        (["--hparams=small"], "Known sets: tiny, base, big"),
        (
            ["--hparams=tiny", "--hparams_overrides=heads=4"],
            "Unknown hparams field 'heads'.*Valid fields: task, flavor",
        ),
        (
            ["--hparams=tiny", "--hparams_overrides=num_heads"],
            "Malformed hparams override",
        ),
        (
            ["--hparams=tiny", "--hparams_overrides=num_heads=2.5"],
            "expected an int",
        ),
        (
            ["--hparams=tiny", "--hparams_overrides=num_heads=3"],
            "a multiple of num_heads=3",
        ),
        (
            [
                "--hparams=tiny",
                "--hparams_overrides=tokenizer_model_type=char,"
                "tokenizer_sampling_alpha=0.1",
            ],
            r"`tokenizer_sampling_alpha`, expected 0 with "
            r"tokenizer_model_type='char'.*Received: "
            r"tokenizer_sampling_alpha=0.1",
        ),
        (["--strategy=gpu"], "value should be one of <default|one_device"),
        (["--strategy=tpu"], "--tpu is required with --strategy=tpu"),
        (["--tpu=local"], "--tpu is required with --strategy=tpu and only"),
        (
            [
                "--strategy=tpu",
                "--tpu=local",
                "--mixed_precision=mixed_float16",
            ],
            "TPUs do not compute in float16",
        ),
        (
            ["--train_steps=5", "--train_epochs=1"],
            "--train_epochs=1: give --train_steps or --train_epochs, not both",
        ),
        (["--train_steps=0"], "--train_steps=0"),
        (
            ["--export_dir=/tmp/e"],
            "--export_dir=/tmp/e: only applies with --mode=export or "
            "--mode=all",
        ),
        (
            ["--export_format=ctranslate2"],
            "--export_format=ctranslate2: only applies with --mode=export",
        ),
        (
            ["--mode=export", "--ctranslate2_quantization=int8"],
            "only applies with --export_format=ctranslate2",
        ),
        (
            ["--mode=export", "--export_format=onnx"],
            "value should be one of <saved_model|ctranslate2>",
        ),
        (
            ["--mode=eval", "--train_steps=5"],
            "--train_steps=5: only applies with --mode=train",
        ),
        (["--dataset=wmt"], "--dataset=wmt: unknown dataset"),
        (["--dataset=tfds:wmt14_translate/de-en"], "needs source_language"),
        (
            ["--source_language=en"],
            "'numbers' dataset takes no source_language",
        ),
        (
            ["--dataset=multi30k", "--source_language=fr"],
            "between 'en' and 'de'",
        ),
        (["--mixed_precision=fp16"], "value should be one of <off|"),
    ],
)
def test_flag_validators_reject_impossible_combinations(
    args, message, tmp_path
):
    with pytest.raises(flags.IllegalFlagValueError, match=message):
        parse(f"--model_dir={tmp_path}", *args)


def test_the_help_is_true_for_every_task():
    doc = " ".join(train.__doc__.split())
    for said in ("translation model", "GPT-style language model",
                 "BERT-style masked language model", "BLEU for translation",
                 "perplexity for a language model", "masked-token accuracy"):
        assert said in doc, said
    eval_split = " ".join(FLAGS["eval_split"].help.split())
    assert "BLEU" in eval_split and "perplexity" in eval_split
    assert "masked-token accuracy" in eval_split


def test_the_environment_takes_tensorflow_and_refuses_another_backend(
    monkeypatch,
):
    from tfattn.utils import startup

    monkeypatch.setenv("KERAS_BACKEND", "jax")
    assert startup.set_environment("train.py") == (
        "train.py: error: train.py runs on Keras's TensorFlow backend, and "
        "KERAS_BACKEND is 'jax': unset it or set KERAS_BACKEND=tensorflow"
    )
    monkeypatch.delenv("KERAS_BACKEND")
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
    assert startup.set_environment("train.py") is None
    assert os.environ["KERAS_BACKEND"] == "tensorflow"
    assert os.environ["TF_CPP_MIN_LOG_LEVEL"] == "1"


def test_model_dir_defaults_to_runs_hparams_dataset():
    parse("--hparams=tiny")
    assert train.model_dir() == os.path.join("runs", "tiny_numbers")
    parse(
        "--hparams=base",
        "--dataset=tfds:wmt14_translate/de-en",
        "--source_language=en",
        "--target_language=de",
    )
    assert train.model_dir() == os.path.join(
        "runs", "base_tfds_wmt14_translate_de-en"
    )
    parse("--model_dir=/somewhere")
    assert train.model_dir() == "/somewhere"
    parse()
    with pytest.raises(ValueError, match="Give --hparams for a new run"):
        train.model_dir()


def test_valid_flags_parse(tmp_path):
    parse(
        f"--model_dir={tmp_path}",
        "--hparams=tiny",
        "--hparams_overrides=num_heads=2,dropout_rate=0.2",
        "--strategy=mirrored",
        "--mixed_precision=mixed_bfloat16",
        "--dataset=textfiles:/data/corpus",
        "--source_language=en",
        "--target_language=de",
        "--train_epochs=2",
        "--mode=all",
        "--export_dir=/tmp/export",
    )
    hp = train.requested_hparams(str(tmp_path))
    assert (hp.num_heads, hp.dropout_rate) == (2, 0.2)


@pytest.mark.parametrize(
    "args, message",
    [
        (
            [
                "--hparams=tiny",
                "--dataset=multi30k",
                "--manual_dir=/no/such/dir",
            ],
            "manual_dir directory does not exist",
        ),
        (
            [
                "--hparams=tiny",
                "--dataset=textfiles:/no/such/corpus",
                "--source_language=en",
                "--target_language=de",
            ],
            "No parallel text files",
        ),
        ([], "name a hparams set"),
        (["--hparams_overrides=num_heads=2"], "needs --hparams for a new run"),
    ],
)
def test_main_refuses_bad_input_and_writes_nothing(args, message, tmp_path):
    model_dir = tmp_path / "run"
    parse(f"--model_dir={model_dir}", *args)
    with pytest.raises(SystemExit) as exit_info:
        train.main(["train.py"])
    assert re.search(message, str(exit_info.value.code))
    assert not model_dir.exists()


def test_main_refuses_extra_arguments(tmp_path, capsys):
    parse(f"--model_dir={tmp_path}", "--hparams=tiny")
    with pytest.raises(SystemExit) as exit_info:
        train.main(["train.py", "extra"])
    assert exit_info.value.code == 2  # usage
    assert capsys.readouterr().err == "Error: unexpected arguments: extra\n"


def test_main_exits_non_zero_on_a_non_finite_loss(tmp_path, monkeypatch):
    def explode(*args, **kwargs):
        raise training.NonFiniteLossError(7, "loss", "/run/ckpt-6")

    monkeypatch.setattr(training, "train_prepared", explode)
    parse(f"--model_dir={tmp_path}", "--hparams=tiny")
    with pytest.raises(SystemExit) as exit_info:
        train.main(["train.py"])
    assert "non-finite loss at step 7" in str(exit_info.value.code)
    assert "/run/ckpt-6, is kept" in str(exit_info.value.code)


def test_main_passes_the_flags_to_train(tmp_path, monkeypatch):
    seen = {}

    def fake_train(prepared, **kwargs):
        seen.update(kwargs, prepared=prepared)
        raise training.NonFiniteLossError(1, "loss", None)

    monkeypatch.setattr(training, "train_prepared", fake_train)
    parse(
        f"--model_dir={tmp_path}",
        "--hparams=tiny",
        FAST,
        "--train_steps=9",
        "--mixed_precision=mixed_bfloat16",
        "--jit_compile",
        "--seed=3",
        "--progress_bar=false",
    )
    with pytest.raises(SystemExit):
        train.main(["train.py"])
    prepared = seen["prepared"]
    hp = prepared.hparams
    assert hp.num_layers == 1 and prepared.dataset.kind == "numbers"
    assert prepared.model_dir == str(tmp_path)
    assert (
        hp.train_steps,
        hp.train_epochs,
        prepared.precision.policy,
        seen["jit_compile"],
        prepared.seed,
        seen["verbose"],
    ) == (9, None, "mixed_bfloat16", True, 3, 0)
    # XLA pads batches to max_train_length: the memory estimate says so.
    assert prepared.static_shapes
    assert prepared.memory.length == hp.max_train_length


@pytest.mark.slow
def test_bad_input_exits_non_zero_with_a_clear_message(tmp_path):
    """train.py as a program: a bad flag ends in one line on standard error
    (not the help), status 2, and nothing written. (The same boundary,
    `exits.parse_flags`, refuses a malformed flag value in
    test_cli_train_errors.py::test_a_bad_flag_prints_one_line_not_the_help,
    in this process.)"""
    out = subprocess.run(
        [
            sys.executable,
            "train.py",
            "--hparams=small",
            f"--model_dir={tmp_path / 'run'}",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 2, out.stderr[-3000:]
    [line] = out.stderr.strip().splitlines()
    assert line.startswith("Error: flag --hparams=small: Unknown hparams set.")
    assert "Known sets: tiny, base, big" in line
    assert line.endswith("(python train.py --helpfull lists the flags)")
    assert not (tmp_path / "run").exists()


def _wait_until(predicate, process, log, timeout=120):
    """Polls `predicate()` every 50 ms while `process` runs (`timeout` only
    bounds a hung run)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        if process.poll() is not None:
            pytest.fail(
                "training ended before the kill:\n" + log.read_text()[-3000:]
            )
        time.sleep(0.05)
    pytest.fail("timed out waiting for training:\n" + log.read_text()[-3000:])


def _checkpoint_steps(model_dir):
    state = tf.train.get_checkpoint_state(str(model_dir))
    return sorted(
        int(path.rsplit("-", 1)[1])
        for path in (state.all_model_checkpoint_paths if state else [])
    )


def _assert_checkpoints_load(model_dir):
    """Every checkpoint the index lists reads back whole."""
    state = tf.train.get_checkpoint_state(str(model_dir))
    for path in state.all_model_checkpoint_paths:
        reader = tf.train.load_checkpoint(path)
        for name in reader.get_variable_to_shape_map():
            reader.get_tensor(name)


def _run_killed(command, log, signum, ready, env=None, seconds=None,
                pids=None):
    """Starts `command` (in `env`), sends `signum` once `ready()`, returns
    the status; `seconds` (a list) receives the time from the signal to the
    exit, `pids` (a list) the process id."""
    with open(log, "w") as out:
        process = subprocess.Popen(
            command, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, env=env
        )
    if pids is not None:
        pids.append(process.pid)
    try:
        _wait_until(ready, process, log)
        process.send_signal(signum)
        sent = time.time()
        status = process.wait(timeout=120)
        if seconds is not None:
            seconds.append(time.time() - sent)
        return status
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def _checkpoint_step_value(path):
    (name,) = [
        n for n, _ in tf.train.list_variables(path) if n.startswith("step/")
    ]
    return int(tf.train.load_variable(path, name))


def _environment(**switches):
    """This environment with TensorFlow's log switches replaced by
    `switches`."""
    environment = {k: v for k, v in os.environ.items()
                   if k not in ("TF_CPP_MIN_LOG_LEVEL",
                                "TFATTN_VERBOSE_IMPORT")}
    environment.update(switches)
    return environment


@pytest.mark.slow
def test_end_to_end_sigterm_resume_eval_export_then_sigkill_resume(
    tmp_path, caplog
):
    """One model directory through train.py's life, four runs:

    1. a new `--mode=all` run that SIGTERM stops: a checkpoint saved by the
       handler, status 143, gone within a preemption's grace period;
    2. the same command again, a process of its own: it resumes there,
       trains to the end, samples, evaluates (BLEU on the whole test split,
       attention maps into TensorBoard) and exports;
    3. a longer run of the model dir alone (its saved hparams, no
       --hparams): SIGKILL stops it mid-run, after a periodic checkpoint;
    4. the same command again, in this process: it resumes at the last
       checkpoint and trains to the new end; the hparams record the longer
       run, the model restores whole and translates.

    Runs 1 and 3 also show that TF_CPP_MIN_LOG_LEVEL=0 and
    TFATTN_VERBOSE_IMPORT=1 keep TensorFlow's start-up banner, which
    train.py holds back by default (tests/test_readme.py).
    """
    model_dir = tmp_path / "run"
    # No periodic checkpoint before the end of run 1 (TERM_STEPS): the one
    # found after SIGTERM can only come from the SIGTERM handler.
    command = [
        sys.executable,
        "train.py",
        "--hparams=tiny",
        "--hparams_overrides=num_layers=1,log_every_steps=5,"
        f"checkpoint_every_steps={TERM_STEPS}",
        "--dataset=numbers",
        f"--model_dir={model_dir}",
        f"--train_steps={TERM_STEPS}",
        "--samples=5",
        "--mode=all",
        "--progress_bar=false",
    ]

    # 1. SIGTERM.
    log = tmp_path / "sigterm.log"
    seconds = []
    status = _run_killed(
        command,
        log,
        signal.SIGTERM,
        ready=lambda: "step 5:" in log.read_text(),
        env=_environment(TF_CPP_MIN_LOG_LEVEL="0"),
        seconds=seconds,
    )
    text = log.read_text()
    assert status == 128 + signal.SIGTERM, text[-3000:]
    # Saved and gone well within a preemption's grace period (often 30 s);
    # the input pipeline's threads no longer hold the exit for minutes.
    assert seconds[0] < 20, (seconds, text[-3000:])
    (stopped_at,) = _checkpoint_steps(model_dir)
    assert 5 <= stopped_at < TERM_STEPS
    assert f"Training stopped on SIGTERM at step {stopped_at}" in text
    assert "Run the same command again to resume" in text
    _assert_checkpoints_load(model_dir)
    assert (
        _checkpoint_step_value(str(model_dir / f"ckpt-{stopped_at}"))
        == stopped_at
    )
    assert "absl::InitializeLog" in text, (
        "TF_CPP_MIN_LOG_LEVEL=0 did not keep TensorFlow's banner")
    assert not (model_dir / "export").exists()

    # 2. The same command again: resumes, trains, evaluates and exports.
    out = subprocess.run(
        command,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"resuming at step {stopped_at}." in out.stderr
    assert _checkpoint_steps(model_dir) == [stopped_at, TERM_STEPS]
    assert "Exact match on 5 validation pairs" in out.stdout
    assert "BLEU on the test split" in out.stdout
    assert "Exported a string-to-string translator" in out.stdout
    exported = model_dir / "export" / "saved_model.pb"
    assert exported.exists()
    written = exported.read_bytes()
    metrics = json.loads((model_dir / "metrics_test.json").read_text())
    assert metrics["num_sentences"] == 500
    # Eval drew attention maps into TensorBoard's Images tab.
    tags = {
        value.tag
        for path in tf.io.gfile.glob(str(model_dir / "eval" / "events*"))
        for event in tf.compat.v1.train.summary_iterator(path)
        for value in event.summary.value
    }
    assert {
        "attention/encoder/sentence_0",
        "attention/cross/sentence_1",
    } <= tags

    # 3. A longer run with the saved hparams (no --hparams): it checkpoints
    # at 2 * TERM_STEPS, and SIGKILL lands before its end, KILL_STEPS.
    longer = [
        sys.executable,
        "train.py",
        "--dataset=numbers",
        f"--model_dir={model_dir}",
        "--samples=0",
        "--progress_bar=false",
        f"--train_steps={KILL_STEPS}",
    ]
    log = tmp_path / "sigkill.log"
    pids = []
    status = _run_killed(
        longer,
        log,
        signal.SIGKILL,
        ready=lambda: any(
            s >= 2 * TERM_STEPS for s in _checkpoint_steps(model_dir)),
        env=_environment(TFATTN_VERBOSE_IMPORT="1"),
        pids=pids,
    )
    assert status == -signal.SIGKILL
    assert "absl::InitializeLog" in log.read_text(), (
        "TFATTN_VERBOSE_IMPORT=1 did not keep TensorFlow's banner")
    # The killed run held the model directory's lock (it could not release
    # it; the resume below takes it over, as test_training_run_dir.py's
    # dead-process test shows in detail).
    holder = json.loads((model_dir / ".lock").read_text())
    assert holder["pid"] == pids[0] and "train.py" in holder["command"]
    killed_at = max(_checkpoint_steps(model_dir))
    assert 2 * TERM_STEPS <= killed_at < KILL_STEPS
    _assert_checkpoints_load(model_dir)
    assert exported.read_bytes() == written  # a training run left it

    # 4. The same command again, in this process (a process of its own
    # would add only TensorFlow's start).
    with caplog.at_level(logging.INFO):
        parse(*longer[2:], "--verbosity=0")  # INFO, as train.py's own run
        train.main(["train.py"])
    assert f"resuming at step {killed_at}." in caplog.text
    assert f"from step {killed_at} to {KILL_STEPS}" in caplog.text
    _assert_checkpoints_load(model_dir)
    last = str(model_dir / f"ckpt-{KILL_STEPS}")
    assert _checkpoint_step_value(last) == KILL_STEPS
    # The longer run is recorded, and its optimizer ran every step.
    assert run_dir.load_saved_hparams(model_dir).train_steps == KILL_STEPS
    (iterations,) = [
        n
        for n, _ in tf.train.list_variables(last)
        if n.startswith("optimizer/_iterations")
    ]
    assert tf.train.load_variable(last, iterations) == KILL_STEPS
    # The resumed model restores whole, as eval and export restore it
    # (every saved object matched), and translates.
    model, tokenizer, _ = run_dir.restore_model(model_dir)
    (translation,) = translate.translate_texts(
        model, tokenizer, ["12"], beam_size=1
    )
    assert isinstance(translation, str)
    assert exported.read_bytes() == written


def test_main_exits_143_when_preempted(tmp_path, monkeypatch):
    def preempted(*args, **kwargs):
        raise training.TrainingPreempted(12, "/run/ckpt-12")

    monkeypatch.setattr(training, "train_prepared", preempted)
    parse(f"--model_dir={tmp_path}", "--hparams=tiny")
    with pytest.raises(SystemExit) as exit_info:
        train.main(["train.py"])
    assert exit_info.value.code == 143


def test_worker_index_out_of_range_is_refused_before_training(
    tmp_path, monkeypatch
):
    monkeypatch.setenv(
        "TF_CONFIG",
        json.dumps(
            {
                "cluster": {"worker": ["localhost:1", "localhost:2"]},
                "task": {"type": "worker", "index": 2},
            }
        ),
    )
    model_dir = tmp_path / "run"
    parse(
        f"--model_dir={model_dir}",
        "--hparams=tiny",
        "--strategy=multi_worker_mirrored",
    )
    with pytest.raises(SystemExit, match="task index 2 is not an index"):
        train.main(["train.py"])
    assert not model_dir.exists()


def test_eval_with_too_many_checkpoints_to_average_exits(tmp_path, monkeypatch):
    seen = {}

    def fake_restore(model_dir, average_last=1):
        seen["average_last"] = average_last
        raise ValueError("Cannot average the last 7 checkpoints")

    monkeypatch.setattr(model_io, "restore_model", fake_restore)
    write_text_atomically(
        run_dir.hparams_path(tmp_path), config.to_json(hparams.get("tiny"))
    )
    parse(f"--model_dir={tmp_path}", "--mode=export", "--average_checkpoints=7")
    with pytest.raises(SystemExit) as exit_info:
        train.main(["train.py"])
    assert "Cannot average the last 7" in str(exit_info.value.code)
    assert seen["average_last"] == 7


def _saved_run(tmp_path, monkeypatch):
    """A model dir holding tiny's hparams.json, with restoring, data and
    the evaluation and export faked: what eval/export are called with."""
    write_text_atomically(
        run_dir.hparams_path(tmp_path), config.to_json(hparams.get("tiny"))
    )
    seen = {}

    def fake_restore(model_dir, average_last=1):
        seen["average_last"] = average_last
        return "model", "tok", None

    def fake_load_pairs(spec, split, limit=None):
        seen.setdefault("splits", []).append(split)
        return [("1", "one")]

    monkeypatch.setattr(model_io, "restore_model", fake_restore)
    monkeypatch.setattr(commands.sources, "load_pairs", fake_load_pairs)
    monkeypatch.setattr(commands, "attention_images", lambda *args: 0)

    def fake_evaluate(model, tokenizer, pairs, model_dir, split, **kwargs):
        seen["evaluate"] = kwargs
        seen["split"] = split
        return {"bleu": 1.0, "bleu_signature": "sig"}

    def fake_export(model, tokenizer, export_dir, **kwargs):
        seen["export"] = dict(kwargs, export_dir=export_dir)
        return export_dir

    from tfattn.decoding import evaluation
    from tfattn import export

    monkeypatch.setattr(evaluation, "evaluate", fake_evaluate)
    monkeypatch.setattr(export, "export_translator", fake_export)
    return seen


def test_decoding_overrides_are_honoured_at_eval_and_export(
    tmp_path, monkeypatch
):
    seen = _saved_run(tmp_path, monkeypatch)
    parse(
        f"--model_dir={tmp_path}",
        "--mode=eval",
        "--hparams_overrides=beam_size=8,decode_alpha=1.0",
    )
    train.main(["train.py"])
    assert seen["evaluate"]["beam_size"] == 8
    assert seen["evaluate"]["alpha"] == 1.0
    assert (
        seen["evaluate"]["extra_length"]
        == hparams.get("tiny").decode_extra_length
    )
    parse(
        f"--model_dir={tmp_path}",
        "--mode=export",
        "--hparams_overrides=decode_extra_length=3",
    )
    train.main(["train.py"])
    assert seen["export"]["extra_length"] == 3
    assert seen["export"]["beam_size"] == hparams.get("tiny").beam_size
    # The default export dir is replaced; an explicit one needs the flag.
    assert seen["export"]["overwrite"] is True
    parse(
        f"--model_dir={tmp_path}",
        "--mode=export",
        f"--export_dir={tmp_path / 'elsewhere'}",
    )
    train.main(["train.py"])
    assert seen["export"]["overwrite"] is False
    # An existing explicit one is refused, naming the flag, before any
    # export work.
    (tmp_path / "elsewhere").mkdir()
    seen.pop("export")
    with pytest.raises(SystemExit, match="pass --overwrite_export"):
        train.main(["train.py"])
    assert "export" not in seen
    parse(
        f"--model_dir={tmp_path}",
        "--mode=export",
        "--overwrite_export",
        f"--export_dir={tmp_path / 'elsewhere'}",
    )
    train.main(["train.py"])
    assert seen["export"]["overwrite"] is True


def test_eval_split_and_the_sets_checkpoint_average(tmp_path, monkeypatch):
    """--eval_split picks the scored split (test by default); the set's
    average_checkpoints applies unless --average_checkpoints or a decoding
    override says otherwise."""
    seen = _saved_run(tmp_path, monkeypatch)
    parse(f"--model_dir={tmp_path}", "--mode=eval")
    train.main(["train.py"])
    assert (seen["split"], seen["average_last"]) == ("test", 1)
    parse(
        f"--model_dir={tmp_path}",
        "--mode=eval",
        "--eval_split=validation",
        "--hparams_overrides=average_checkpoints=3",
    )
    train.main(["train.py"])
    assert (seen["split"], seen["average_last"]) == ("validation", 3)
    assert seen["splits"][-1] == "validation"
    parse(
        f"--model_dir={tmp_path}",
        "--mode=export",
        "--hparams_overrides=average_checkpoints=3",
        "--average_checkpoints=2",
    )
    train.main(["train.py"])
    assert seen["average_last"] == 2
    with pytest.raises(Exception, match="eval_split.*validation"):
        parse(f"--model_dir={tmp_path}", "--mode=eval", "--eval_split=train")
    parse(
        f"--model_dir={tmp_path}",
        "--mode=eval",
        "--hparams_overrides=average_checkpoints=4",
    )  # keep_checkpoints=3
    with pytest.raises(
        SystemExit, match="average_checkpoints.*at most keep_checkpoints=3"
    ):
        train.main(["train.py"])


def test_model_fields_cannot_be_overridden_at_eval(
    tmp_path, monkeypatch, capsys
):
    _saved_run(tmp_path, monkeypatch)
    parse(
        f"--model_dir={tmp_path}",
        "--mode=eval",
        "--hparams_overrides=num_layers=3,beam_size=2",
    )
    with pytest.raises(SystemExit) as exit_info:
        train.main(["train.py"])
    assert exit_info.value.code == 2  # usage: the flag, first
    message = capsys.readouterr().err
    assert message.startswith(
        "Error: --hparams_overrides=num_layers=3,beam_size=2: "
    )
    assert "only the decoding fields" in message and "num_layers" in message


# The library never imports the hparams sets (train.py's): checked in the
# fresh process of test_visualize_maps.py::test_cli_as_a_program, which
# imports the library's modules after running its program.
