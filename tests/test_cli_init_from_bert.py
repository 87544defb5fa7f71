"""train.py --init_from with a BERT checkpoint (a tiny random one,
tests/bert_fixtures.py): fine-tuning a masked language model, evaluating
and exporting it with its WordPiece tokenizer, and the refusals, each one
line naming the flag."""

import json
import os

import numpy as np
import pytest

from tests import bert_fixtures as bfx
from tests import bounds
from tests.test_cli_train import saved_flags  # noqa: F401 (autouse)
from tests.test_cli_train_errors import _main
from tfattn.decoding import mlm_evaluation
from tfattn.export import load_masked_lm
from tfattn.interop import pretrained
from tfattn.training import run_dir
from tfattn.utils.ids import BOS_ID
from tfattn.utils.ids import EOS_ID

# Words of the fixture's vocabulary (and "jumping": "jump ##ing").
TEXTS = ["the quick brown fox is jumping over the lazy dog",
         "hello world and yes the dog is there",
         "we jump over the brown dog", "the lazy fox is ok"] * 3


@pytest.fixture(scope="module")
def hub_mlm():
    """The keras-hub BertMaskedLM every directory here is written from."""
    return bfx.hub_masked_lm()


@pytest.fixture(scope="module")
def data_dirs(tmp_path_factory, hub_mlm):
    """{"pretraining": a Hugging Face BertForPreTraining directory,
    "data": a dataset prefix}: what fine-tuning reads."""
    root = tmp_path_factory.mktemp("bert_data")
    dirs = {"pretraining": str(root / "pretraining")}
    bfx.write_huggingface(dirs["pretraining"],
                          bfx.hf_tensors(hub_mlm, extras=True),
                          bfx.hf_config("BertForPreTraining"))
    prefix = str(root / "data" / "t")
    os.makedirs(os.path.dirname(prefix))
    for split in ("train", "validation", "test"):
        with open(f"{prefix}.{split}.txt", "w") as f:
            f.write("\n".join(TEXTS) + "\n")
    dirs["data"] = prefix
    return dirs


@pytest.fixture(scope="module")
def bert_dirs(tmp_path_factory, hub_mlm, data_dirs):
    """{name: directory}: Hugging Face BertForMaskedLM, BertForPreTraining,
    BertModel and BertForSequenceClassification directories, keras-hub
    BertMaskedLM and BertTextClassifier presets; "data": a dataset
    prefix."""
    root = tmp_path_factory.mktemp("bert")
    mlm = hub_mlm
    dirs = {name: str(root / name) for name in (
        "mlm", "encoder", "classifier", "hub", "hub_cls")}
    dirs.update(data_dirs)
    bfx.write_huggingface(dirs["mlm"], bfx.hf_tensors(mlm), bfx.hf_config())
    encoder = {k: v for k, v in bfx.hf_tensors(mlm).items()
               if k.startswith("bert.")}
    bfx.write_huggingface(dirs["encoder"], encoder,
                          bfx.hf_config("BertModel"))
    classifier = bfx.hub_classifier()
    bfx.write_huggingface(dirs["classifier"], bfx.hf_tensors(classifier),
                          bfx.hf_config("BertForSequenceClassification"))
    mlm.save_to_preset(dirs["hub"])
    classifier.save_to_preset(dirs["hub_cls"])
    return dirs


def _logits(model, tokenizer, text):
    """The model's logits [T, V] at every position of `text`, read as
    fill-mask reads it ([CLS] pieces [SEP])."""
    pieces, = mlm_evaluation.text_pieces(tokenizer, [text], True)
    ids = np.array([[BOS_ID, *pieces, EOS_ID]], "int32")
    return np.asarray(model(ids))[0]


def _refused(bert_dirs, tmp_path, *args):
    status, line = _main(*args, f"--dataset=textfiles:{bert_dirs['data']}",
                         "--train_steps=1", f"--model_dir={tmp_path / 'run'}")
    assert status == 2, line
    assert not os.path.exists(tmp_path / "run")  # Nothing was written.
    return line


@pytest.mark.parametrize("which, message", [
    ("classifier", "a BERT sequence classifier "
     "(BertForSequenceClassification): train.py has no classification "
     "task; fine-tune it in Python with tfattn.interop.bert"),
    ("hub_cls", "a BERT sequence classifier (keras_hub>BertTextClassifier)"),
    ("encoder", "a BERT encoder without its masked-LM head (BertModel)"),
])
def test_refuses_a_bert_model_that_is_not_a_masked_lm(bert_dirs, tmp_path,
                                                      which, message):
    line = _refused(bert_dirs, tmp_path, f"--init_from={bert_dirs[which]}",
                    "--hparams=bert_tiny")
    assert line.startswith(f"Error: --init_from={bert_dirs[which]}: ")
    assert message in line


def test_refuses_a_set_of_another_task(bert_dirs, tmp_path):
    line = _refused(bert_dirs, tmp_path, f"--init_from={bert_dirs['mlm']}",
                    "--hparams=gpt_tiny")
    assert f"--init_from={bert_dirs['mlm']}: the checkpoint is a masked "\
        "language model (task 'masked_lm'), but --hparams=gpt_tiny is task "\
        "'language_model'" in line


def test_refuses_an_explicit_conflicting_field(bert_dirs, tmp_path):
    line = _refused(bert_dirs, tmp_path, f"--init_from={bert_dirs['hub']}",
                    "--hparams=bert_tiny",
                    "--hparams_overrides=num_units=64")
    assert line.startswith("Error: --hparams_overrides=num_units=64: ")
    assert "num_units is 64 here" in line and "has num_units=32" in line


@pytest.mark.parametrize("which", ["mlm", "pretraining", "hub"])
def test_the_masked_lm_kinds_fix_the_architecture(bert_dirs, which):
    described = pretrained.describe(bert_dirs[which])
    assert described.task == "masked_lm" and described.kind == (
        pretrained.BERT_KERAS_HUB if which == "hub"
        else pretrained.BERT_HUGGINGFACE)
    fields = pretrained.architecture_fields(
        pretrained.load(bert_dirs[which])[0])
    assert fields == dict(
        vocab_size=len(bfx.vocabulary()), num_layers=bfx.LAYERS,
        num_units=bfx.WIDTH, num_heads=bfx.HEADS, ffn_units=bfx.FFN,
        dropout_rate=0.0, attention_dropout_rate=0.0,
        max_length=bfx.POSITIONS)


@pytest.mark.slow
def test_bert_fine_tunes_evaluates_and_exports(data_dirs, tmp_path, capsys):
    model_dir = str(tmp_path / "run")
    status, line = _main(
        f"--init_from={data_dirs['pretraining']}", "--hparams=bert_tiny",
        f"--dataset=textfiles:{data_dirs['data']}", "--train_steps=3",
        # A shuffle buffer of 64 (the default 10,000 would tokenize and
        # mask 10,000 texts of the repeated corpus before the first step).
        "--hparams_overrides=whole_word_masking=true,shuffle_buffer_size=64",
        "--mixed_precision=off", "--mode=train", f"--model_dir={model_dir}")
    assert status == 0, line
    with open(os.path.join(model_dir, "pretrained", "pretrained.json")) as f:
        assert json.load(f)["kind"] == pretrained.BERT_HUGGINGFACE
    # Resumed without --init_from (the run directory holds the tokenizer),
    # then evaluated and exported in the same invocation.
    status, line = _main(f"--model_dir={model_dir}", "--train_steps=4",
                         "--mode=all",
                         f"--dataset=textfiles:{data_dirs['data']}")
    assert status == 0, line
    out = capsys.readouterr().out
    assert "Masked-token accuracy on the test split" in out
    assert "Exported a fill-mask model" in out
    checkpoint, tokenizer = pretrained.load(data_dirs["pretraining"])
    model, restored, saved = run_dir.restore_model(model_dir)
    assert type(restored).__name__ == "WordPieceTokenizer"
    assert saved.vocab_size == tokenizer.vocab_size
    assert saved.whole_word_masking
    apart = max(float(np.max(np.abs(a - b))) for a, b in
                zip(model.get_weights(), checkpoint.get_weights()))
    # Fine-tuned from the checkpoint (4 tiny warm-up steps), not random.
    assert 0 < apart < 0.01
    assert run_dir.load_saved_hparams(model_dir).train_steps == 4
    served = load_masked_lm(os.path.join(model_dir, "export"))
    assert type(served.tokenizer).__name__ == "WordPieceTokenizer"
    text = "the lazy dog is jump[MASK] over the fox"
    (fillings,), = served.fill_mask([text])
    python = mlm_evaluation.fill_mask(model, restored, [text])[0][0]
    assert [w for w, _ in fillings] == [w for w, _ in python]
    logits = _logits(model, restored, text)
    # To one logit: the embeddings' layer norm (4·C), the stack over the
    # text, the head's Dense (C) and layer norm (4·C), the projection and
    # the vocabulary; a probability moves by at most its logits' error.
    terms = 4 * saved.num_units + 5 * saved.num_units + bounds.stack_terms(
        saved.num_layers, saved.num_units, saved.ffn_units, len(logits),
        saved.vocab_size)
    bounds.assert_close([p for _, p in fillings], [p for _, p in python],
                        terms=terms, scale=np.abs(logits).max())
    # Each filling is a token of vocab.txt, without its "##".
    vocab = bfx.vocabulary()
    for word, _ in fillings:
        assert word in vocab or "##" + word in vocab
