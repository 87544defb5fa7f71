"""`train.py` refuses a whole command before any work: an explicit
`--hparams` that disagrees with the set saved in `--model_dir`, an export
format or directory the run cannot take, decoding overrides the task never
reads, and flags that do nothing in the chosen mode; every message starts
with the flag (`--FLAG=VALUE: reason`)."""

import pytest

import train
from tests.test_cli_train import saved_flags  # noqa: F401 (autouse)
from tests.test_cli_train_errors import _main
from tfattn import training
from tfattn.training import model_io
from tfattn.training import run_dir

def _usage(capsys, *args):
    """_main for a command refused as usage: its one stderr line."""
    status, line = _main(*args)
    lines = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and lines == [line], lines
    return line


def _saved(model_dir, name, overrides="", steps=()):
    """A model dir holding set `name`'s hparams.json (and checkpoints)."""
    import hparams
    from tests.test_training_run_dir import _write_checkpoints
    from tfattn import config
    from tfattn.utils.files import write_text_atomically

    model_dir.mkdir(exist_ok=True)
    hp = config.parse_overrides(hparams.get(name), overrides)
    write_text_atomically(run_dir.hparams_path(model_dir), config.to_json(hp))
    if steps:
        _write_checkpoints(model_dir, steps)
    return model_dir


@pytest.fixture
def no_training(monkeypatch):
    """Training, eval and export fail the test if they are reached."""
    def reached(*args, **kwargs):
        raise AssertionError("work started before the refusal")

    monkeypatch.setattr(training, "train_prepared", reached)
    monkeypatch.setattr(model_io, "restore_model", reached)


@pytest.mark.parametrize("mode", ["eval", "export"])
def test_an_explicit_hparams_of_another_task_is_refused(
    tmp_path, capsys, no_training, mode
):
    model_dir = _saved(tmp_path / "run", "tiny")
    line = _usage(capsys, f"--model_dir={model_dir}", "--hparams=bert_tiny",
                  f"--mode={mode}")
    assert line == (
        f"Error: --hparams=bert_tiny: asks for a masked language model, "
        f"but {model_dir} holds a translation model (task 'translation' in "
        f"{model_dir}/hparams.json); --mode={mode} uses the saved set: "
        "leave --hparams out, or name the --model_dir of that set's run."
    )


def test_an_explicit_hparams_that_differs_is_refused(
    tmp_path, capsys, no_training
):
    model_dir = _saved(tmp_path / "run", "tiny", "num_layers=1")
    line = _usage(capsys, f"--model_dir={model_dir}", "--hparams=tiny",
                  "--mode=eval")
    assert line.startswith(
        f"Error: --hparams=tiny: differs from the hparams {model_dir} was "
        f"trained with ({model_dir}/hparams.json) in num_layers: saved 1, "
        "requested 2; --mode=eval uses the saved set")
    # The same set and overrides (a decoding one too) pass the checks: the
    # model is restored (here, the fake refusing any work).
    status, line = _main(f"--model_dir={model_dir}", "--hparams=tiny",
                         "--hparams_overrides=num_layers=1,beam_size=2",
                         "--mode=eval")
    assert status == 1 and "work started before the refusal" in line


def test_a_resumed_run_names_the_flag_that_differs(
    tmp_path, capsys, no_training
):
    model_dir = _saved(tmp_path / "run", "tiny", steps=(1,))
    line = _usage(capsys, f"--model_dir={model_dir}", "--hparams=gpt_tiny")
    assert line.startswith(
        "Error: --hparams=gpt_tiny: asks for a language model, but "
        f"{model_dir} holds a translation model")
    assert "leave --hparams out to resume with the saved set" in line
    line = _usage(capsys, f"--model_dir={model_dir}",
                  "--hparams_overrides=num_heads=2")
    assert line.startswith(
        "Error: --hparams_overrides=num_heads=2: differs from the hparams "
        f"{model_dir} was trained with")


@pytest.mark.parametrize(
    "args, message",
    [
        (["--hparams=bert_tiny"],
         "--export_format=ctranslate2: CTranslate2 serves translators and "
         "generators, not masked language models"),
        (["--hparams=gpt_multi30k", "--dataset=numbers"],
         "--export_format=ctranslate2: the feed-forward activation 'gelu'"),
        (["--hparams=reference_2017"],
         "--export_format=ctranslate2: flavor 'reference_2017' has no "
         "CTranslate2 mapping"),
    ],
)
def test_an_export_format_the_model_cannot_take_is_refused_before_training(
    tmp_path, capsys, no_training, args, message
):
    line = _usage(capsys, *args, f"--model_dir={tmp_path / 'run'}",
                  "--mode=all", "--export_format=ctranslate2")
    assert line.startswith(f"Error: {message}"), line
    assert not (tmp_path / "run").exists()


def test_export_and_averaging_refusals_come_before_training(
    tmp_path, capsys, no_training
):
    run = f"--model_dir={tmp_path / 'run'}"
    (tmp_path / "taken").mkdir()
    status, line = _main("--hparams=tiny", run, "--mode=all",
                         f"--export_dir={tmp_path / 'taken'}")
    assert status == 1 and line == (
        f"Error: --export_dir={tmp_path / 'taken'}: already exists; pass "
        "--overwrite_export to replace it, or choose another --export_dir.")
    line = _usage(capsys, "--hparams=tiny", run, "--mode=all",
                  "--export_dir=gs://bucket/export")
    assert line.startswith("Error: --export_dir=gs://bucket/export: exports "
                           "are written on the local filesystem")
    line = _usage(capsys, "--hparams=tiny", run, "--mode=all",
                  "--average_checkpoints=4")
    assert line.startswith(
        "Error: --average_checkpoints=4: more than the 3 checkpoints the "
        "run keeps (the hparams' keep_checkpoints)")
    assert not (tmp_path / "run").exists()
    saved = _saved(tmp_path / "saved", "tiny", steps=(1, 2))
    line = _usage(capsys, f"--model_dir={saved}", "--mode=export",
                  "--average_checkpoints=3")
    assert line == (f"Error: --average_checkpoints=3: {saved} keeps 2 "
                    "checkpoint(s) (ckpt-1, ckpt-2).")


@pytest.mark.parametrize(
    "name, overrides, mode, message",
    [
        ("gpt_tiny", "beam_size=8", "eval",
         "a language model's --mode=eval does not use beam_size "
         "(it reads average_checkpoints)"),
        ("gpt_tiny", "decode_extra_length=9", "eval",
         "a language model's --mode=eval does not use "
         "decode_extra_length"),
        ("bert_tiny", "decode_alpha=1.0", "export",
         "a masked language model's --mode=export does not use "
         "decode_alpha"),
    ],
)
def test_decoding_overrides_the_task_ignores_are_refused(
    tmp_path, capsys, no_training, name, overrides, mode, message
):
    model_dir = _saved(tmp_path / "run", name)
    line = _usage(capsys, f"--model_dir={model_dir}", f"--mode={mode}",
                  f"--hparams_overrides={overrides}")
    assert line.startswith(f"Error: --hparams_overrides={overrides}: "
                           f"{message}"), line


@pytest.mark.parametrize(
    "args, message",
    [
        (["--hparams=gpt_tiny", "--source_language=de"],
         "--source_language=de: a language model reads one side of the "
         "data"),
        (["--hparams=tiny", "--dataset=textfiles:/x", "--source_language=en"],
         "--target_language=None: dataset 'textfiles:/x' needs "
         "source_language and target_language"),
        (["--hparams=tiny", "--hparams_overrides=heads=4"],
         "--hparams_overrides=heads=4: Unknown hparams field 'heads'"),
        (["--hparams=tiny", "--mode=eval", "--samples=5"],
         "--samples=5: only applies with --mode=train or --mode=all, not "
         "--mode=eval"),
        (["--mode=export", "--jit_compile"],
         "--jit_compile=true: only applies with --mode=train"),
        (["--mode=eval", "--mixed_precision=mixed_bfloat16"],
         "--mixed_precision=mixed_bfloat16: only applies with --mode=train"),
        (["--mode=export", "--seed=3"], "--seed=3: only applies with"),
        (["--eval_split=validation"],
         "--eval_split=validation: only applies with --mode=eval or "
         "--mode=all, not --mode=train"),
        (["--average_checkpoints=2"],
         "--average_checkpoints=2: only applies with --mode=eval or "
         "--mode=export or --mode=all"),
        (["--model_dir="], "--model_dir: given an empty value"),
        (["--mode=export", "--export_dir= "],
         "--export_dir: given an empty value"),
        (["--dataset=multi30k", "--data_dir="], "--data_dir: given an empty"),
        (["--seed=-1"], "flag --seed=-1: -1 is not an integer in the range"),
        (["--mode=export", "--overwrite_export"],
         "--overwrite_export: only applies with --export_dir"),
        (["--strategy=tpu", "--tpu=local", "--mixed_precision=mixed_float16"],
         "--mixed_precision=mixed_float16: TPUs do not compute in float16"),
    ],
)
def test_flag_errors_name_the_flag_and_reason_first(capsys, args, message):
    with pytest.raises(SystemExit) as exit_info:
        train._parse_flags(["train.py", *args])
    assert exit_info.value.code == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"Error: {message}"), lines
    assert lines[0].endswith("(python train.py --helpfull lists the flags)")
