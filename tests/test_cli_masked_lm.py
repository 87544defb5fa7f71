"""train.py's masked-LM task (hparams `bert_tiny`): pretraining on one side
of the data with BERT's masking in the pipeline, evaluation (masked-token
accuracy and perplexity, checked against a NumPy rescoring of blanks the
test chooses itself), fill-mask in Python and from the SavedModel (checked
against the model's own softmax in NumPy), and one-line errors."""

import contextlib
import io
import json
import math
import re

import numpy as np
import pytest
import sentencepiece as spm
import tensorflow as tf
from absl import flags

import hparams
from tests import bounds
from tests.test_cli_train import saved_flags  # noqa: F401 (autouse)
from tests.test_cli_train_errors import _main
from tfattn import config
from tfattn.decoding import mlm_evaluation
from tfattn.models import MaskedLM
from tfattn.models import SequenceClassifier
from tfattn.training import run_dir

FLAGS = flags.FLAGS
TEXTS = ["the cat sat on the mat", "a dog ran in the park",
         "the bird sang in the tree", "a cat ran to the tree"] * 8


def _write(path, text):
    with open(path, "w") as f:
        f.write(text)


def _logit_terms(hp, length, vocab_size):
    """To one logit of the run's MaskedLM over `length` tokens: the
    embeddings' layer norm where there is one (4·C), the stack, the head's
    Dense (C) and layer norm (4·C), the projection and the vocabulary (a
    log-softmax over it)."""
    embeddings = 4 * hp.num_units if hp.normalize_embeddings else 0
    return embeddings + 5 * hp.num_units + bounds.stack_terms(
        hp.num_layers, hp.num_units, hp.ffn_units, length, vocab_size)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """bert_tiny trained 60 steps on text files (batches of 8 texts, a
    shuffle buffer of 64: the default 10,000 would tokenize 10,000
    texts of the repeated corpus before the first step), then
    evaluated on the test split and exported, in one in-process
    `--mode=all` invocation: (the data's root, the model directory, what
    the run printed)."""
    root = tmp_path_factory.mktemp("mlm")
    _write(root / "text.train.txt", "\n".join(TEXTS) + "\n")
    _write(root / "text.validation.txt", "\n".join(TEXTS[:4]) + "\n")
    _write(root / "text.test.txt", "\n".join(TEXTS[:6]) + "\n")
    model_dir = root / "run"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status, line = _main(
            "--hparams=bert_tiny", f"--dataset=textfiles:{root}/text",
            "--hparams_overrides=vocab_size=40,num_layers=1,"
            "checkpoint_every_steps=30,log_every_steps=30,warmup_steps=20,"
            "batch_size=8,shuffle_buffer_size=64",
            "--train_steps=60", "--mode=all", f"--model_dir={model_dir}")
    FLAGS.unparse_flags()
    assert status == 0, line
    return root, model_dir, out.getvalue()


@pytest.fixture(scope="module")
def trained(run):
    """(the data's root, the model directory)."""
    return run[:2]


@pytest.fixture(scope="module")
def restored(trained):
    """The run's model, tokenizer and hparams, restored once (the tests
    only read them)."""
    return run_dir.restore_model(str(trained[1]))


def test_a_blank_written_as_a_word_loses_its_lone_word_start(restored):
    _, tokenizer, _ = restored
    space = tokenizer.piece_to_id("\u2581")
    pieces = tokenizer.tokenize(["the [MASK] sat"]).to_list()[0]
    assert space in pieces  # SentencePiece's own split: "▁" then [MASK]
    kept = mlm_evaluation.without_blank_spaces(tokenizer, pieces)
    assert kept == [p for p in pieces if p != space]


def test_training_writes_a_masked_lm_with_a_mask_piece(trained, restored):
    _, model_dir = trained
    saved = run_dir.load_saved_hparams(str(model_dir))
    assert saved.task == "masked_lm" and saved.activation == "gelu"
    model, tokenizer, _ = restored
    assert isinstance(model, MaskedLM)
    assert tokenizer.mask_id == model.mask_token_id == 4
    assert tokenizer.tokenize(["the [MASK] sat"]).to_list()[0].count(4) == 1


def test_eval_reports_the_figures_it_writes(run):
    # The evaluation of the `--mode=all` run (train, eval, export).
    _, model_dir, out = run
    match = re.search(r"Masked-token accuracy on the test split: "
                      r"([\d.]+)%, perplexity at the blanks ([\d.]+)", out)
    assert match, out
    metrics = json.loads((model_dir / "metrics_test.json").read_text())
    assert metrics["blanks"] > 0 and metrics["texts"] == 6
    assert metrics["truncated"] == 0
    bounds.assert_printed(100 * metrics["masked_accuracy"], match.group(1))
    bounds.assert_printed(metrics["masked_perplexity"], match.group(2))


class _FixedBlanks:
    """The test's own masker (not `MaskGenerator`): blanks at positions 1
    and 3 of each row `<s> pieces </s>` where a piece is there, replaced
    by the mask id 4; unused slots hold position 0 and weight 0. It keeps
    the rows it was given."""

    def __init__(self):
        self.rows = []

    def __call__(self, rows, seed):
        rows = np.asarray(rows)
        self.rows.extend(rows)
        lengths = (rows != 0).sum(axis=1)  # <s> and </s> included
        wanted = np.array([[1, 3]] * len(rows), np.int32)
        used = wanted < (lengths - 1)[:, None]  # a piece, not </s>
        positions = np.where(used, wanted, 0).astype(np.int32)
        token_ids = rows.copy()
        for row, slot in zip(*np.nonzero(used)):
            token_ids[row, positions[row, slot]] = 4
        return {"token_ids": token_ids, "mask_positions": positions,
                "mask_ids": np.take_along_axis(rows, positions, 1) * used,
                "mask_weights": used.astype(np.float32)}


def test_masked_lm_scores_equal_a_numpy_rescoring_of_fixed_blanks(restored):
    # Rows and blanks from the formulas here (`<s> pieces </s>`, blanks at
    # fixed positions), the model's full logits [1, T, V] per row, and
    # NumPy's log-softmax: accuracy and perplexity over the blanks.
    model, tokenizer, hp = restored
    texts = TEXTS[:5] + ["a", ""]
    masker = _FixedBlanks()
    got = mlm_evaluation.masked_lm_scores(model, tokenizer, texts, masker,
                                          batch_size=3)
    nll, hits, count = 0.0, 0, 0
    largest, longest = 0.0, 0
    for text, seen in zip(texts, masker.rows):
        pieces = tokenizer.tokenize([text]).to_list()[0]
        row = [2] + pieces + [3]
        assert [int(i) for i in seen[seen != 0]] == row
        blanks = [p for p in (1, 3) if p < len(row) - 1]
        masked = np.asarray([row], np.int32)
        masked[0, blanks] = 4
        logits = np.asarray(model(masked), np.float64)[0]
        longest = max(longest, len(row))
        for position in blanks:
            lp = logits[position] - logits[position].max()
            lp -= np.log(np.exp(lp).sum())
            nll -= lp[row[position]]
            largest = max(largest, np.abs(logits[position]).max(),
                          abs(lp[row[position]]))
            hits += int(np.argmax(lp) == row[position])
            count += 1
    assert got["blanks"] == count == 11  # 2 per text, 1 for "a", 0 for ""
    assert got["texts"] == 7 and got["truncated"] == 0
    # float32 log-probabilities (the model, the log-softmax over the
    # vocabulary) summed over the blanks, divided (1) and exponentiated
    # (1): the perplexity moves by itself times the mean's error, whose
    # terms have the logits' magnitude.
    want = math.exp(nll / count)
    terms = count + 2 + _logit_terms(hp, longest, tokenizer.vocab_size)
    bounds.assert_close(got["masked_perplexity"], want, terms=terms,
                        scale=want * largest)
    # One division of the same counts.
    bounds.assert_close(got["masked_accuracy"], hits / count, terms=1,
                        dtype="float64")


def test_fill_mask_returns_the_softmax_top_k_of_each_blank(restored):
    model, tokenizer, hp = restored
    texts = ["the [MASK] sat on the mat", "[MASK] dog ran in the [MASK]"]
    filled = mlm_evaluation.fill_mask(model, tokenizer, texts, top_k=3)
    assert [len(blanks) for blanks in filled] == [1, 2]
    sp = spm.SentencePieceProcessor(model_proto=tokenizer.model_proto)
    space = tokenizer.piece_to_id("\u2581")
    for text, blanks in zip(texts, filled):
        pieces = tokenizer.tokenize([text]).to_list()[0]
        # A blank stands for a whole piece, its word start included (as in
        # training): the lone "\u2581" SentencePiece writes before it goes.
        pieces = [p for p, after in zip(pieces, pieces[1:] + [None])
                  if not (p == space and after == 4)]
        ids = np.asarray([[2] + pieces + [3]], np.int32)
        logits = np.asarray(model(ids), np.float64)[0]
        for position, got in zip(np.flatnonzero(ids[0] == 4), blanks):
            probs = np.exp(logits[position] - logits[position].max())
            probs /= probs.sum()
            best = np.argsort(-probs)[:3]
            # The word a user reads: SentencePiece's own decoding of the
            # piece, a special piece (<s>, [MASK]...) as written.
            assert [w for w, _ in got] == [_read(sp, int(i)) for i in best]
            assert not any(w.startswith("\u2581") for w, _ in got)
            # A probability moves by at most its logits' error.
            bounds.assert_close(
                [q for _, q in got], probs[best],
                terms=_logit_terms(hp, ids.shape[1], tokenizer.vocab_size),
                scale=np.abs(logits[position]).max())


def _read(sp, token_id):
    """A piece as a user reads it, by SentencePiece alone."""
    if sp.is_control(token_id) or sp.is_unknown(token_id) or (
            sp.id_to_piece(token_id) == "[MASK]"):
        return sp.id_to_piece(token_id)
    return sp.decode_pieces([sp.id_to_piece(token_id)])


def test_fill_mask_refuses_texts_without_a_blank(restored):
    model, tokenizer, _ = restored
    with pytest.raises(ValueError,
                       match="texts\\[1\\].*at least one \\[MASK\\]"):
        mlm_evaluation.fill_mask(model, tokenizer, ["[MASK]", "no blank"])
    # An empty text has no blank: answered with none (as the export does).
    assert mlm_evaluation.fill_mask(model, tokenizer, ["", " "]) == [[], []]


@pytest.fixture(scope="module")
def exported(run):
    """The run's export, written by its `--mode=all`."""
    _, model_dir, out = run
    assert "Exported a fill-mask model" in out
    return tf.saved_model.load(str(model_dir / "export"))


def test_the_fill_mask_signature_equals_python(restored, exported):
    model, tokenizer, hp = restored
    texts = ["the [MASK] sat on the mat", "[MASK] dog ran in the [MASK]"]
    out = exported.signatures["fill_mask"](texts=tf.constant(texts))
    # A probability moves by at most its logits' error: the scale is the
    # largest |logit| on the texts, read as fill-mask reads them.
    rows = [[2, *pieces, 3] for pieces in
            mlm_evaluation.text_pieces(tokenizer, texts, True)]
    scale = max(np.abs(np.asarray(model(np.array([row], np.int32)))).max()
                for row in rows)
    terms = _logit_terms(hp, max(map(len, rows)), tokenizer.vocab_size)
    assert out["blanks"].numpy().tolist() == [1, 2]
    assert out["fillings"].shape == (2, 2, 5)
    want = mlm_evaluation.fill_mask(model, tokenizer, texts, top_k=5)
    for row, blanks in enumerate(want):
        for slot, pairs in enumerate(blanks):
            words = [w.decode() for w in out["fillings"][row, slot].numpy()]
            assert words == [w for w, _ in pairs]  # the same strings
            bounds.assert_close(
                out["probabilities"][row, slot].numpy(),
                [q for _, q in pairs], terms=terms, scale=scale)
    assert out["fillings"][0, 1, 0].numpy() == b""  # padding


def test_the_signature_refuses_texts_without_a_blank(exported):
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match="texts with pieces but without \\[MASK\\]"
                       ".*\\[1 3\\]"):
        exported.signatures["fill_mask"](
            texts=tf.constant(["a [MASK] cat", "no blank", "", "cat"]))


def test_a_ctranslate2_export_is_refused_in_one_line(trained):
    root, model_dir = trained
    status, line = _main(f"--model_dir={model_dir}", "--mode=export",
                         "--export_format=ctranslate2",
                         f"--dataset=textfiles:{root}/text",
                         "--export_dir=" + str(root / "ct2"))
    assert status != 0 and "ctranslate2" in line and "\n" not in line
    assert not (root / "ct2").exists()


def test_the_classifier_loads_the_pretrained_encoder(restored):
    model, _, _ = restored
    classifier = SequenceClassifier.from_masked_lm(model, num_classes=2)
    ids = np.array([[2, 5, 6, 7, 3]], np.int32)
    np.testing.assert_array_equal(np.asarray(classifier.text_encoder(ids)),
                                  np.asarray(model.text_encoder(ids)))


@pytest.mark.parametrize("override, message", [
    ("mask_selection_rate=1.5", "mask_selection_rate=1.5"),
    ("mask_token_rate=0.95", "random_token_rate=0.1"),
    ("eval_every_steps=10", "eval_every_steps=10"),
    ("activation=swish", "activation='swish'"),
])
def test_bad_masking_settings_are_refused_at_flag_parsing(tmp_path, override,
                                                          message):
    with pytest.raises(flags.IllegalFlagValueError, match=re.escape(message)):
        _main("--hparams=bert_tiny", "--dataset=numbers",
              f"--hparams_overrides={override}",
              f"--model_dir={tmp_path / 'run'}")
    assert not (tmp_path / "run").exists()


def test_bert_tiny_is_a_masked_lm_set():
    hp = hparams.get("bert_tiny")
    assert hp.task == "masked_lm" and hp.eval_every_steps == 0
    kwargs = config.model_kwargs(hp, 40)
    assert "tie_output" not in kwargs and kwargs["activation"] == "gelu"


def test_attention_maps_of_a_masked_lm_are_bidirectional(trained, tmp_path):
    from tfattn.visualize import cli

    _, model_dir = trained
    maps, paths = cli.run(str(model_dir), "the [MASK] sat", str(tmp_path))
    assert set(maps.scores) == {"encoder"} and maps.target_tokens == []
    assert maps.source_tokens[0] == "<s>" and "[MASK]" in maps.source_tokens
    assert maps.source_tokens[-1] == "</s>"
    for weights in maps.scores["encoder"]:  # [H, T, T] per layer
        assert weights.shape[1] == weights.shape[2] == len(maps.source_tokens)
        # A softmax over T keys (2·T), then the sum of its T weights (T),
        # each at most 1.
        keys = weights.shape[-1]
        bounds.assert_close(weights.sum(-1), 1.0, terms=2 * keys + keys,
                            scale=1.0)
        assert np.triu(weights, k=1).max() > 1e-3  # later tokens are seen
    assert any(p.endswith("encoder_layer0.png") for p in paths)


def test_reported_fillings_show_words_and_a_lone_word_start_as_a_space():
    from tfattn.cli.masked_lm import _fillings_lines

    lines = list(_fillings_lines(
        [("a [MASK] runs", [("dog", 0.5), ("", 0.25)], "a dog runs")]))
    assert lines == ["  a [MASK] runs\n    -> dog (0.50), (space) (0.25)"
                     "\n    (text: a dog runs)"]
