"""The text-to-label SavedModel of a `SequenceClassifier`
(`tfattn.export.export_classifier` / `load_classifier`): its probabilities
are the Keras model's softmax on the ids `encode_texts` gives, its labels
are the named classes, texts are cut (and flagged) exactly past
`max_length - 2` pieces, batch 0 is answered, every bad argument is refused
by name, and the signature serves with TensorFlow and tensorflow-text
alone."""

import json
import os
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
import sentencepiece as spm
import tensorflow as tf

from tests import bounds
from tfattn import export
from tfattn.data import train_tokenizer
from tfattn.data.monolingual import encode_texts
from tfattn.models import MaskedLM
from tfattn.models import SequenceClassifier

MAX_LENGTH = 8  # the export's; the model holds 16
LABELS = ["bad", "neutral", "good"]
_THINGS = ["the food", "the service", "a room", "my staff", "our view",
           "this hotel", "that bar", "the garden", "the pool",
           "your breakfast"]
_OPINIONS = ["was great", "felt clean", "looked lovely", "was quick",
             "was awful", "seemed rude", "felt dirty", "was cold",
             "tasted bland", "stayed noisy"]
CORPUS = [f"{t} {o}" for t in _THINGS for o in _OPINIONS]
TEXTS = ["the food was great", "my staff seemed rude", "", "   ",
         "this hotel was cold and the bar felt dirty and slow",
         "a room", "our view looked lovely", "that bar was quick"]
# To one logit of the fixture's classifier (1 layer, width 16, FFN 32) over
# the export's MAX_LENGTH ids: the stack, the mean over the tokens, then
# the output layer over the 3 classes.
TERMS = MAX_LENGTH + bounds.stack_terms(1, 16, 32, MAX_LENGTH, len(LABELS))


@pytest.fixture(scope="module")
def model_and_tokenizer():
    # Seeded before the tokenizer is built (docs/traps.md item 10).
    keras.utils.set_random_seed(7)
    tokenizer = train_tokenizer(CORPUS, None, vocab_size=50, mask_piece=True)
    mlm = MaskedLM(tokenizer.vocab_size, num_layers=1, num_units=16,
                   num_heads=2, ffn_units=32, max_length=16,
                   dropout_rate=0.0)
    mlm(np.ones((1, 4), "int32"))
    model = SequenceClassifier.from_masked_lm(mlm, num_classes=3,
                                              pooling="mean")
    # Large logits, so that the texts fall in different classes.
    kernel = model.output_dense.kernel
    kernel.assign(np.random.default_rng(0).normal(
        0, 4, kernel.shape).astype("float32"))
    return model, tokenizer


@pytest.fixture(scope="module")
def overwritten(model_and_tokenizer, tmp_path_factory):
    """The module's export, written over a first one without label names
    (one export fewer than exporting both apart): what the plain one
    answered, and how a second export without `overwrite` was refused.
    `test_without_names_the_labels_are_the_ids_and_overwrite_replaces`
    checks them."""
    model, tokenizer = model_and_tokenizer
    path = export.export_classifier(
        model, tokenizer, tmp_path_factory.mktemp("classifier") / "export")
    plain = export.load_classifier(path)
    record = dict(labels=plain.labels, max_length=plain.max_length,
                  out=plain.classify(TEXTS[:3]))
    try:
        export.export_classifier(model, tokenizer, path, labels=LABELS)
    except FileExistsError as refusal:
        record["refusal"] = refusal
    record["kept_labels"] = export.load_classifier(path).labels
    assert export.export_classifier(
        model, tokenizer, path, labels=LABELS, max_length=MAX_LENGTH,
        overwrite=True) == path
    return path, record


@pytest.fixture(scope="module")
def exported(overwritten):
    return overwritten[0]


@pytest.fixture(scope="module")
def served(exported):
    return export.load_classifier(exported)


def _logits(model, ids):
    """The Keras model's logits on `ids`, called as the export calls it
    (`training=False`): one eager call, not `predict` (whose tf.function
    traced for 0.4 s on each new batch shape)."""
    return np.asarray(model(ids, training=False))


def _logit_scale(model_and_tokenizer, texts):
    """The largest |logit| of the Keras model on `texts`: the scale of the
    probabilities' error (a softmax moves by at most its logits' error)."""
    model, tokenizer = model_and_tokenizer
    return np.abs(_logits(model, encode_texts(tokenizer, texts,
                                              MAX_LENGTH))).max()


def _softmax(logits):
    """NumPy softmax over the last axis."""
    shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


def test_probabilities_are_the_keras_models_softmax(model_and_tokenizer,
                                                    served):
    model, tokenizer = model_and_tokenizer
    logits = _logits(model, encode_texts(tokenizer, TEXTS, MAX_LENGTH))
    out = served.classify(TEXTS)
    assert out.probabilities.shape == (len(TEXTS), 3)
    assert out.probabilities.dtype == np.float32
    bounds.assert_close(out.probabilities, _softmax(logits), terms=TERMS,
                        scale=np.abs(logits).max())
    assert out.label_ids == logits.argmax(-1).tolist()
    assert len(set(out.label_ids)) >= 2  # the names are really looked up
    assert out.labels == [LABELS[i] for i in out.label_ids]
    assert served.labels == LABELS and served.max_length == MAX_LENGTH


def test_truncated_exactly_when_a_text_has_more_pieces_than_fit(
        model_and_tokenizer, served):
    _, tokenizer = model_and_tokenizer
    sp = spm.SentencePieceProcessor(model_proto=tokenizer.model_proto)
    # Every prefix of a text, and "a" n times ("▁a" is one piece): the
    # piece counts climb across the cut.
    text = "the food was great and the bar felt dirty"
    texts = [text[:n] for n in range(len(text) + 1)]
    texts += [" ".join(["a"] * n) for n in range(MAX_LENGTH + 2)]
    counts = [len(sp.encode(text)) for text in texts]
    room = MAX_LENGTH - 2
    assert room in counts and room + 1 in counts and 0 in counts
    assert served.classify(texts).truncated == [n > room for n in counts]


def test_a_cut_text_reads_as_its_first_pieces(model_and_tokenizer, served):
    _, tokenizer = model_and_tokenizer
    sp = spm.SentencePieceProcessor(model_proto=tokenizer.model_proto)
    long = "this hotel was cold and the bar felt dirty and slow"
    first = sp.decode(sp.encode(long)[:MAX_LENGTH - 2])
    assert sp.encode(first) == sp.encode(long)[:MAX_LENGTH - 2]
    out = served.classify([long, first])
    assert out.truncated == [True, False]
    bounds.assert_close(out.probabilities[0], out.probabilities[1],
                        terms=TERMS, scale=_logit_scale(
                            model_and_tokenizer, [long, first]))


def test_batch_zero_gives_empty_results(served):
    for texts in ([], ()):
        out = served.classify(texts)
        assert (out.labels, out.label_ids, out.truncated) == ([], [], [])
        assert out.probabilities.shape == (0, 3)
    raw = served.signatures["serving_default"](texts=tf.constant([],
                                                                 tf.string))
    assert raw["probabilities"].shape == (0, 3)
    assert raw["labels"].shape == raw["truncated"].shape == (0,)


def test_the_export_holds_the_keras_model_and_the_vocabulary(
        model_and_tokenizer, exported):
    model, tokenizer = model_and_tokenizer
    assert {"saved_model.pb", "variables", "model.keras",
            "spm.model"} <= set(os.listdir(exported))
    parent = os.path.dirname(exported)
    assert [n for n in os.listdir(parent) if n.startswith(".")] == []
    with open(os.path.join(exported, "spm.model"), "rb") as f:
        assert f.read() == tokenizer.model_proto
    ids = encode_texts(tokenizer, TEXTS[:2], MAX_LENGTH)
    restored = keras.saving.load_model(os.path.join(exported, "model.keras"))
    bounds.assert_close(_logits(restored, ids), _logits(model, ids),
                        terms=TERMS)


def test_without_names_the_labels_are_the_ids_and_overwrite_replaces(
        model_and_tokenizer, overwritten, served):
    model, tokenizer = model_and_tokenizer
    _, plain = overwritten
    assert plain["labels"] == ["0", "1", "2"] and plain["max_length"] == 16
    out = plain["out"]
    assert out.labels == [str(i) for i in out.label_ids]
    assert out.label_ids == _logits(model, encode_texts(
        tokenizer, TEXTS[:3], 16)).argmax(-1).tolist()
    assert "overwrite=True" in str(plain.get("refusal")), \
        "an existing export without overwrite=True was not refused"
    assert plain["kept_labels"] == ["0", "1", "2"]
    # `served` loads what overwrite=True wrote in its place (named
    # labels, the module's MAX_LENGTH).
    assert (served.labels, served.max_length) == (LABELS, MAX_LENGTH)
    assert served.classify(TEXTS[:3]).labels == [
        LABELS[i] for i in _logits(model, encode_texts(
            tokenizer, TEXTS[:3], MAX_LENGTH)).argmax(-1)]


def _other_size_tokenizer():
    # No reseeding here: it would break the fixture's tokenizer (traps 10).
    return train_tokenizer(CORPUS, None, vocab_size=40, mask_piece=True)


# (argument, bad value, what the message must hold).
REFUSALS = [
    ("model", None, "argument `model`.*SequenceClassifier"),
    ("model", "mlm", "argument `model`.*Received: model='<MaskedLM>'"),
    ("labels", "bad", "argument `labels`, expected a list of strings"),
    ("labels", ["bad", "good"], r"argument `labels`.*num_classes=3"),
    ("labels", ["a", "b", "c", "d"], r"argument `labels`.*num_classes=3"),
    ("labels", ["a", 1, "c"], r"argument `labels\[1\]`, expected a str"),
    ("labels", ["a", b"b", "c"], r"argument `labels\[1\]`, expected a str"),
    ("labels", ["a", "b", "a"],
     r"argument `labels\[2\]`.*labels\[0\] is the same.*labels\[2\]='a'"),
    ("labels", ["a", "", "c"], r"argument `labels\[1\]`, expected a non-"),
    ("labels", ["a", "b\ud800", "c"], r"`labels\[1\]`.*lone surrogate"),
    ("max_length", 2, r"argument `max_length`.*from 3.*max_length=16"),
    ("max_length", 17, r"argument `max_length`.*Received: max_length=17"),
    ("max_length", 0, r"argument `max_length`.*max_length=0"),
    ("max_length", True, r"argument `max_length`.*max_length=True"),
    ("max_length", 8.0, r"argument `max_length`.*max_length=8.0"),
    ("tokenizer", None, r"argument `tokenizer`.*SubwordTokenizer"),
    ("tokenizer", "other_size",
     r"argument `tokenizer`.*the model's \d+ pieces.*of 40 pieces"),
    ("overwrite", "yes", r"argument `overwrite`.*overwrite='yes'"),
    ("export_dir", "gs://bucket/x", r"argument `export_dir`.*a local path"),
    ("export_dir", "", r"argument `export_dir`"),
]


@pytest.mark.parametrize("name, value, match", REFUSALS)
def test_every_bad_argument_is_refused_by_name(model_and_tokenizer, tmp_path,
                                               name, value, match):
    model, tokenizer = model_and_tokenizer
    if value == "mlm":
        value = MaskedLM(tokenizer.vocab_size, num_layers=1, num_units=16,
                         num_heads=2, ffn_units=32, max_length=16)
        value(np.ones((1, 4), "int32"))
    elif value == "other_size":
        value = _other_size_tokenizer()
    arguments = dict(model=model, tokenizer=tokenizer,
                     export_dir=tmp_path / "export")
    arguments[name] = value
    with pytest.raises(ValueError, match=match):
        export.export_classifier(**arguments)
    assert not list(tmp_path.iterdir())  # nothing written


def test_an_unbuilt_classifier_is_refused(model_and_tokenizer, tmp_path):
    _, tokenizer = model_and_tokenizer
    model = SequenceClassifier(tokenizer.vocab_size, num_classes=2,
                               num_layers=1, num_units=16, num_heads=2,
                               ffn_units=32, max_length=16)
    with pytest.raises(ValueError, match="a built tfattn.models.Sequence"):
        export.export_classifier(model, tokenizer, tmp_path / "export")
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("texts, match", [
    ("the food", r"argument `texts`, expected a list of strings"),
    (None, r"argument `texts`, expected a list of strings"),
    ([12], r"argument `texts\[0\]`, expected a str"),
    (["a", b"b"], r"argument `texts\[1\]`, expected a str"),
    (["ok", "ab\ud800"], r"`texts\[1\]`.*character 2 is '\\ud800'"),
    (tf.constant(["a"]), r"argument `texts`"),
    (np.array(["a"]), r"argument `texts`"),
])
def test_classify_refuses_bad_texts_by_name(served, texts, match):
    with pytest.raises(ValueError, match=match):
        served.classify(texts)


def test_load_classifier_refuses_what_is_not_an_export(tmp_path):
    with pytest.raises(FileNotFoundError, match="saved_model.pb.*"
                       "export_classifier"):
        export.load_classifier(tmp_path)
    for bad in (None, "", 3):
        with pytest.raises(ValueError, match="argument `export_dir`"):
            export.load_classifier(bad)


@pytest.mark.parametrize("texts, node", [
    (tf.constant("a"), "texts_must_be_a_vector_of_strings"),
    (tf.constant([["a"]]), "texts_must_be_a_vector_of_strings"),
    (tf.constant([b"a", b"\xff\xfe b"]), "texts_must_be_utf8"),
])
def test_the_signature_names_texts_for_any_client(served, texts, node):
    serve = served.signatures["serving_default"]
    with pytest.raises(tf.errors.InvalidArgumentError, match=node):
        serve(texts=texts)


def test_the_signature_alone_gives_what_classify_gives(exported, served):
    serve = tf.saved_model.load(exported).signatures["serving_default"]
    out = serve(texts=tf.constant(TEXTS))
    assert set(out) == {"probabilities", "label_ids", "labels", "truncated"}
    assert out["label_ids"].dtype == tf.int32
    assert out["probabilities"].dtype == tf.float32
    assert out["truncated"].dtype == tf.bool
    want = served.classify(TEXTS)
    assert [x.decode() for x in out["labels"].numpy()] == want.labels
    np.testing.assert_array_equal(out["probabilities"].numpy(),
                                  want.probabilities)


@pytest.mark.slow
def test_a_process_with_tensorflow_alone_serves_it(model_and_tokenizer,
                                                   exported, served):
    script = textwrap.dedent(f"""
        import json, sys
        import tensorflow as tf
        import tensorflow_text  # noqa: F401
        serve = tf.saved_model.load({exported!r}).signatures[
            "serving_default"]
        out = serve(texts=tf.constant({TEXTS!r}))
        assert not [m for m in sys.modules if m.startswith("tfattn")]
        print(json.dumps({{
            "labels": [x.decode() for x in out["labels"].numpy()],
            "probabilities": out["probabilities"].numpy().tolist(),
            "truncated": out["truncated"].numpy().tolist()}}))
    """)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    env.pop("PYTHONPATH", None)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True,
                          text=True, env=env, timeout=300, cwd="/")
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    want = served.classify(TEXTS)
    assert got["labels"] == want.labels
    assert got["truncated"] == want.truncated
    bounds.assert_close(got["probabilities"], want.probabilities,
                        terms=TERMS, scale=_logit_scale(
                            model_and_tokenizer, TEXTS))
