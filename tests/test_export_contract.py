"""The serving contract (`tfattn.export.contract`), one set of cases run
against every engine: the SavedModel (`load_translator`) and the
CTranslate2 directory (`load_ctranslate2`) of the same model, and the Python
path (`translate_texts`) where it takes part."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfattn
from tests import bounds
from tfattn import export
from tfattn.data import numbers_splits
from tfattn.data import train_tokenizer
from tfattn.decoding.translate import translate_texts

pytest.importorskip("ctranslate2")

MAX_LENGTH = 32
EXTRA = 5
BLANKS = ["", "   ", "\t\n "]


@pytest.fixture(scope="module")
def model_and_tokenizer():
    # Seeded before the tokenizer is built (docs/traps.md item 10).
    keras.utils.set_random_seed(3)
    pairs = numbers_splits(max_value=1200, num_validation=20,
                           num_test=20)["train"][:300]
    tokenizer = train_tokenizer([s for pair in pairs for s in pair], None,
                                vocab_size=40, split_digits=True)
    model = tfattn.Transformer(tokenizer.vocab_size, num_layers=1,
                               num_units=16, num_heads=2, ffn_units=32,
                               dropout_rate=0.0, max_length=MAX_LENGTH)
    model((np.ones((1, 4), "int32"), np.ones((1, 3), "int32")))
    return model, tokenizer


@pytest.fixture(scope="module")
def engines(model_and_tokenizer, tmp_path_factory):
    model, tokenizer = model_and_tokenizer
    root = tmp_path_factory.mktemp("engines")
    settings = dict(beam_size=1, alpha=0.0, extra_length=EXTRA)
    return {
        "saved_model": export.load_translator(export.export_translator(
            model, tokenizer, root / "saved_model", **settings)),
        "ctranslate2": export.load_ctranslate2(export.to_ctranslate2(
            model, tokenizer, root / "ct2", **settings)),
    }


@pytest.fixture(params=["saved_model", "ctranslate2"])
def engine(request, engines):
    return engines[request.param]


def test_batch_zero_gives_empty_outputs(engine):
    assert engine.translate([]) == []
    assert engine.translate_details(()) == ([], [], [])


def test_blank_texts_translate_to_nothing(engine):
    out = engine.translate_details(["12"] + BLANKS)
    assert out.translations[1:] == ["", "", ""]
    assert out.scores[1:] == [0.0, 0.0, 0.0]
    assert out.truncated == [False] * 4
    assert out.translations[0] != "" or out.scores[0] != 0.0


def test_over_long_texts_are_cut_and_said_so(engine):
    out = engine.translate_details(["1" * 60, "12"])
    assert out.truncated == [True, False]
    assert all(isinstance(t, str) for t in out.translations)


@pytest.mark.parametrize(
    "texts, match",
    [
        ("12", r"argument `texts`, expected a list of strings"),
        (None, r"argument `texts`"),
        ([12], r"argument `texts\[0\]`, expected a str"),
        (["1", b"12"], r"argument `texts\[1\]`, expected a str"),
        (["1", None], r"argument `texts\[1\]`"),
        (["ok", "ab\ud800"], r"`texts\[1\]`.*character 2 is '\\ud800'"),
        (tf.constant([["12"]]), r"argument `texts`"),
        (np.array(["12"]), r"argument `texts`"),
    ],
)
def test_bad_input_is_refused_naming_the_argument(engine, texts, match):
    with pytest.raises(ValueError, match=match):
        engine.translate(texts)


def test_the_engines_and_the_python_path_agree(engines, model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    texts = ["12", "", "345", "   ", "1" * 60, "7 7"]
    python = translate_texts(model, tokenizer, texts, beam_size=1,
                             alpha=0.0, extra_length=EXTRA)
    saved = engines["saved_model"].translate_details(texts)
    ct2 = engines["ctranslate2"].translate_details(texts)
    assert saved.translations == ct2.translations == python
    assert saved.truncated == ct2.truncated
    # CTranslate2's scores are its own (it scores a row to the batch's
    # longest limit, then the translator cuts it); the SavedModel's (beam 1,
    # alpha 0) are the summed log-probabilities of its output, rescored
    # here by a teacher-forced forward pass and a NumPy log-softmax.
    assert all(np.isfinite(ct2.scores))
    want, scales = _rescored(model, tokenizer, texts)
    # A log-probability: the encoder's and the decoder's blocks
    # (cross-attention a block of its own) over at most MAX_LENGTH
    # positions and the log-softmax over the vocabulary; then the sum of
    # at most MAX_LENGTH of them, at the magnitude of their logits.
    terms = MAX_LENGTH + bounds.stack_terms(
        1 + 2 * 1, 16, 32, MAX_LENGTH, tokenizer.vocab_size)
    bounds.assert_close(saved.scores, want, terms=terms, scale=scales)
    assert [s == 0.0 for s in saved.scores] == [not t.strip() for t in texts]


def _rescored(model, tokenizer, texts):
    """Each text's greedy output scored by a full forward pass: the sum of
    log p(token) (padding excluded from the vocabulary) up to EOS; 0.0 for
    a text without pieces (the contract). Also the scale of each score's
    rounding: the sum over its tokens of the largest |logit| there."""
    from tfattn.decoding.translate import decode_lengths
    from tfattn.decoding.translate import encode_for_translation
    from tfattn.models.transformer import BOS_ID
    from tfattn.models.transformer import EOS_ID

    max_source, _ = decode_lengths(model, EXTRA)
    source = encode_for_translation(tokenizer, tf.constant(texts),
                                    max_source).numpy()
    # Without XLA, as the SavedModel searches (XLA against the plain search:
    # tests/test_decoding_searches.py and test_export_saved_model.py).
    ids = model.generate(source, sampler="greedy", extra_length=EXTRA,
                         jit_compile=False)[0]
    target_in = np.concatenate(
        [np.full((len(texts), 1), BOS_ID, "int32"), ids[:, :-1]], axis=1)
    logits = np.asarray(model((source, target_in)), np.float64)
    logits[..., 0] = -np.inf
    top = logits.max(-1, keepdims=True)
    log_probs = logits - top - np.log(np.exp(logits - top).sum(-1,
                                                               keepdims=True))
    largest = np.abs(logits[..., 1:]).max(-1)
    scores, scales = [], []
    for row, text in enumerate(texts):
        total = scale = 0.0
        for t, token in enumerate(ids[row]):
            if token == 0:
                break
            total += log_probs[row, t, token]
            scale += largest[row, t]
            if token == EOS_ID:
                break
        scores.append(total if text.strip() else 0.0)
        scales.append(scale if text.strip() else 0.0)
    return scores, np.array(scales)


@pytest.mark.parametrize(
    "sentences, node",
    [
        (tf.constant("12"), "sentences_must_be_a_vector_of_strings"),
        (tf.constant([["12"]]), "sentences_must_be_a_vector_of_strings"),
        (tf.constant([b"12", b"\xff\xfe"]), "sentences_must_be_utf8"),
    ],
)
def test_the_signature_names_sentences_for_any_client(engines, sentences,
                                                      node):
    serve = engines["saved_model"].signatures["serving_default"]
    with pytest.raises(tf.errors.InvalidArgumentError, match=node):
        serve(sentences=sentences)


def test_loading_a_directory_that_is_no_export_says_so(tmp_path):
    with pytest.raises(FileNotFoundError, match="export_translator"):
        export.load_translator(tmp_path)
