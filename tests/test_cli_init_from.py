"""train.py --init_from: fine-tuning a pretrained checkpoint (a tiny random
Marian and GPT-2 directory, tests/marian_fixtures.py and
tests/gpt2_fixtures.py) on text files, resuming, evaluating and exporting
the run (the SavedModel exports, which keep the checkpoint's tokenizer in
the graph, against the Python path: tests/test_export_pretrained.py's
contract, checked on these runs' exports), and the refusals, each one line
naming the flag. BERT's are in tests/test_cli_init_from_bert.py."""

import json
import os

import numpy as np
import pytest
from absl import flags

from tests import gpt2_fixtures as gfx
from tests import marian_fixtures as mfx
from tests.test_cli_train import saved_flags  # noqa: F401 (autouse)
from tests.test_cli_train_errors import _main
from tests.test_export_pretrained import PROMPTS
from tests.test_export_pretrained import SENTENCES
from tests.test_export_pretrained import _python_translations
from tfattn.decoding import lm_evaluation
from tfattn.export import load_language_model
from tfattn.export import load_translator
from tfattn.interop import pretrained
from tfattn.training import run_dir

FLAGS = flags.FLAGS
EN = ["The cat sits on the mat.", "A dog runs in the park.",
      "The dog sits.", "A cat runs."] * 3
DE = ["Die Katze sitzt auf der Matte.", "Ein Hund läuft im Park.",
      "Der Hund sitzt.", "Eine Katze läuft."] * 3


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """(Marian dir, GPT-2 dir, dataset prefix with .en, .de and .txt)."""
    marian = mfx.write_checkpoint(tmp_path_factory)[0]
    gpt2 = str(tmp_path_factory.mktemp("gpt2") / "hf")
    vocab, merges = gfx.vocabulary()
    gfx.write_huggingface(gpt2, gfx.hf_tensors(gfx.hub_model().backbone),
                          gfx.hf_config(len(vocab)), vocab, merges)
    prefix = str(tmp_path_factory.mktemp("data") / "c")
    for split in ("train", "validation", "test"):
        for lang, lines in (("en", EN), ("de", DE), ("txt", EN)):
            with open(f"{prefix}.{split}.{lang}", "w") as f:
                f.write("\n".join(lines) + "\n")
    return marian, gpt2, prefix


def _translation(prefix):
    return [f"--dataset=textfiles:{prefix}", "--source_language=en",
            "--target_language=de"]


def _weights_apart(model, other):
    return max(float(np.max(np.abs(a - b))) for a, b in
               zip(model.get_weights(), other.get_weights()))


@pytest.mark.slow
def test_marian_fine_tunes_resumes_evaluates_and_exports(sources, tmp_path,
                                                         capsys):
    """Trains from the checkpoint, then resumes, evaluates and exports in
    one invocation; the export (a pretrained checkpoint's model, its
    tokenizer in the graph) translates as the Python path does."""
    marian, _, prefix = sources
    model_dir = str(tmp_path / "run")
    status, line = _main(f"--init_from={marian}", "--hparams=tiny",
                         *_translation(prefix), "--train_steps=3",
                         "--mixed_precision=off", "--mode=train",
                         f"--model_dir={model_dir}")
    assert status == 0, line
    saved = run_dir.load_saved_hparams(model_dir)
    checkpoint, tokenizer = pretrained.load(marian)
    assert (saved.num_layers, saved.num_units, saved.num_heads,
            saved.ffn_units, saved.vocab_size) == (2, 32, 4, 64, 106)
    # Resumed without --init_from (the run directory holds the tokenizer),
    # then evaluated and exported in the same invocation.
    status, line = _main(f"--model_dir={model_dir}", *_translation(prefix),
                         "--train_steps=4", "--mode=all")
    assert status == 0, line
    out = capsys.readouterr().out
    assert "BLEU on the test split" in out
    model, restored, _ = run_dir.restore_model(model_dir)
    assert type(restored).__name__ == "MarianTokenizer"
    assert run_dir.load_saved_hparams(model_dir).train_steps == 4
    # Fine-tuned from the checkpoint (4 tiny warm-up steps), not random.
    assert 0 < _weights_apart(model, checkpoint) < 0.01
    served = load_translator(os.path.join(model_dir, "export")).translate(
        SENTENCES)
    extra = saved.decode_extra_length
    assert served == _python_translations(model, restored, SENTENCES, extra)
    assert any(served)  # Something was translated, not only "".


@pytest.mark.slow
def test_gpt2_fine_tunes_evaluates_and_exports(sources, tmp_path, capsys):
    """Trains, evaluates and exports in one invocation; the export (a
    pretrained checkpoint's model, its tokenizer in the graph) continues
    prompts as the Python path does."""
    _, gpt2, prefix = sources
    model_dir = str(tmp_path / "run")
    status, line = _main(f"--init_from={gpt2}", "--hparams=gpt_tiny",
                         f"--dataset=textfiles:{prefix}", "--train_steps=3",
                         "--mixed_precision=off", "--mode=all",
                         f"--model_dir={model_dir}")
    assert status == 0, line
    assert "Perplexity on the test split" in capsys.readouterr().out
    with open(os.path.join(model_dir, "pretrained", "pretrained.json")) as f:
        assert json.load(f)["kind"] == pretrained.GPT2_HUGGINGFACE
    saved = run_dir.load_saved_hparams(model_dir)
    assert saved.vocab_size == pretrained.load(gpt2)[1].vocab_size
    served = load_language_model(os.path.join(model_dir, "export"))
    details = served.continue_details(PROMPTS)
    assert len(details.continuations) == len(PROMPTS)
    model, restored, _ = run_dir.restore_model(model_dir)
    python = lm_evaluation.continue_texts(
        model, restored, PROMPTS, max_new_tokens=saved.decode_extra_length)
    assert [p + c for p, c in zip(PROMPTS, details.continuations)] == python


def _refused(sources, tmp_path, *args):
    marian, _, prefix = sources
    status, line = _main(*args, *_translation(prefix), "--train_steps=1",
                         f"--model_dir={tmp_path / 'run'}")
    assert status == 2, line
    assert not os.path.exists(tmp_path / "run")  # Nothing was written.
    return line


def test_refuses_a_directory_without_a_checkpoint(sources, tmp_path):
    line = _refused(sources, tmp_path, f"--init_from={tmp_path}",
                    "--hparams=tiny")
    assert line.startswith(f"Error: --init_from={tmp_path}: ")
    assert "holds no config.json" in line


def test_refuses_a_checkpoint_of_another_task(sources, tmp_path):
    marian, _, prefix = sources
    status, line = _main(f"--init_from={marian}", "--hparams=gpt_tiny",
                         f"--dataset=textfiles:{prefix}",
                         f"--model_dir={tmp_path / 'run'}")
    assert status == 2, line
    assert f"--init_from={marian}: the checkpoint is a translation model"\
        in line and "task 'language_model'" in line


def test_refuses_a_masked_lm_set(sources, tmp_path):
    marian, _, prefix = sources
    status, line = _main(f"--init_from={marian}", "--hparams=bert_tiny",
                         f"--dataset=textfiles:{prefix}",
                         f"--model_dir={tmp_path / 'run'}")
    assert status == 2, line
    assert f"--init_from={marian}: the checkpoint is a translation model"\
        in line and "--hparams=bert_tiny is task 'masked_lm'" in line


@pytest.mark.parametrize("override, field, ours, theirs", [
    ("vocab_size=8000", "vocab_size", 8000, 106),
    ("num_layers=3", "num_layers", 3, 2),
])
def test_refuses_an_explicit_conflicting_field(sources, tmp_path, override,
                                               field, ours, theirs):
    line = _refused(sources, tmp_path, f"--init_from={sources[0]}",
                    "--hparams=tiny", f"--hparams_overrides={override}")
    assert line.startswith(f"Error: --hparams_overrides={override}: ")
    assert f"{field} is {ours} here" in line
    assert f"has {field}={theirs}" in line


def test_refuses_sampled_tokenization(sources, tmp_path):
    line = _refused(sources, tmp_path, f"--init_from={sources[0]}",
                    "--hparams=tiny",
                    "--hparams_overrides=tokenizer_sampling_alpha=0.1")
    assert "does not sample" in line and "tokenizer_sampling_alpha" in line


def test_refuses_init_from_outside_training(sources, tmp_path):
    with pytest.raises(flags.IllegalFlagValueError,
                       match=f"--init_from={sources[0]}: only applies with"):
        _main("--mode=export", f"--init_from={sources[0]}",
              f"--model_dir={tmp_path}")


def test_refuses_a_run_started_without_it(sources, tmp_path,
                                          monkeypatch):
    from tfattn.cli import checks
    monkeypatch.setattr(checks.checkpoints, "exist", lambda _: True)
    line = _refused(sources, tmp_path, f"--init_from={sources[0]}",
                    "--hparams=tiny")
    assert "holds a run that did not start from a checkpoint" in line


def test_refuses_a_set_that_the_checkpoints_fields_break(sources, tmp_path):
    # base trains on 256-piece rows; the checkpoint's max_length is 64.
    line = _refused(sources, tmp_path, f"--init_from={sources[0]}",
                    "--hparams=base")
    assert line.startswith(f"Error: --init_from={sources[0]}: with the "
                           "checkpoint's ")
    assert "max_train_length" in line and "adjust --hparams_overrides" in line
