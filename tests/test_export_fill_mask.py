"""Fill-mask's contract, one set of cases run against the Python path
(`tfattn.decoding.mlm_evaluation.fill_mask` / `fill_mask_details`) and the
SavedModel (`tfattn.export.load_masked_lm`) of the same model: batch 0,
empty texts, texts cut to `max_length` (the reading rule of
`mlm_evaluation`'s docstring), refusals naming the argument; then the
signature itself for any client, and the other masked-LM functions'
arguments (the sweep of issue 57).

Both give words, the same strings: each piece as SentencePiece decodes it
("▁cat" is "cat"), special pieces as written, checked against
SentencePiece's own decoding.
"""

import io

import keras
import numpy as np
import pytest
import sentencepiece as spm
import tensorflow as tf

from tests import bounds
from tfattn import export
from tfattn.data import MaskGenerator
from tfattn.data import SubwordTokenizer
from tfattn.data import train_tokenizer
from tfattn.decoding import mlm_evaluation
from tfattn.models import MaskedLM
from tfattn.utils.ids import BOS_ID
from tfattn.utils.ids import EOS_ID

MAX_LENGTH = 16
TOP_K = 5
CORPUS = ["the cat sat on the mat", "a dog ran in the park",
          "the bird sang in the tree", "a cat ran to the tree"] * 8
BLANKS = ["", "   ", "\t\n "]
# Texts longer than MAX_LENGTH - 2 = 14 pieces: blanks before the cut, past
# it, and both.
LONG = ["the [MASK] sat " + "on the mat " * 8 + "[MASK]",
        "[MASK] " * 20,
        "[MASK] sat " + "on the mat " * 8]
# The fixture's MaskedLM (1 layer, width 16, FFN 32).
LAYERS, UNITS, FFN_UNITS = 1, 16, 32


@pytest.fixture(scope="module")
def model_and_tokenizer():
    # Seeded before the tokenizer is built (docs/traps.md item 10).
    keras.utils.set_random_seed(5)
    tokenizer = train_tokenizer(CORPUS, None, vocab_size=40, mask_piece=True)
    model = MaskedLM(tokenizer.vocab_size, num_layers=LAYERS,
                     num_units=UNITS, num_heads=2, ffn_units=FFN_UNITS,
                     max_length=MAX_LENGTH, dropout_rate=0.0)
    model(np.ones((1, 4), "int32"))
    return model, tokenizer


def _bound(model_and_tokenizer, texts):
    """`assert_close`'s terms and scale for fill-mask probabilities of the
    model on `texts`: to one logit, the stack over at most MAX_LENGTH
    positions, the head's Dense (C) and layer norm (4·C), the projection
    and the vocabulary; a probability moves by at most its logits' error,
    so the scale is the largest |logit| on the texts (read as fill-mask
    reads them: <s> pieces </s>, cut to MAX_LENGTH)."""
    model, tokenizer = model_and_tokenizer
    room = MAX_LENGTH - 2
    rows = [[BOS_ID, *p[:room], EOS_ID] for p in mlm_evaluation.text_pieces(
        tokenizer, texts, True)]
    logits = [np.asarray(model(np.array([row], "int32"))) for row in rows]
    terms = 5 * UNITS + bounds.stack_terms(
        LAYERS, UNITS, FFN_UNITS, MAX_LENGTH, tokenizer.vocab_size)
    return dict(terms=terms, scale=max(np.abs(x).max() for x in logits))


class _Python:
    """The Python path with the export's interface."""

    def __init__(self, model, tokenizer):
        self.model, self.tokenizer = model, tokenizer

    def fill_mask(self, texts):
        return mlm_evaluation.fill_mask(self.model, self.tokenizer, texts,
                                        top_k=TOP_K)

    def fill_mask_details(self, texts):
        return mlm_evaluation.fill_mask_details(self.model, self.tokenizer,
                                                texts, top_k=TOP_K)


@pytest.fixture(scope="module")
def engines(model_and_tokenizer, tmp_path_factory):
    model, tokenizer = model_and_tokenizer
    path = export.export_masked_lm(
        model, tokenizer, tmp_path_factory.mktemp("mlm") / "export",
        top_k=TOP_K)
    return {"python": _Python(model, tokenizer),
            "saved_model": export.load_masked_lm(path)}


@pytest.fixture(params=["python", "saved_model"])
def engine(request, engines):
    return engines[request.param]


def test_batch_zero_gives_empty_outputs(engine):
    assert engine.fill_mask([]) == []
    assert engine.fill_mask_details(()) == ([], [])


def test_empty_texts_have_no_blank_and_are_not_truncated(engine):
    out = engine.fill_mask_details(["the [MASK] sat"] + BLANKS)
    assert out.fillings[1:] == [[], [], []]
    assert len(out.fillings[0]) == 1 and len(out.fillings[0][0]) == TOP_K
    assert out.truncated == [False] * 4
    assert engine.fill_mask(BLANKS) == [[], [], []]


def test_blanks_past_max_length_are_refused_by_fill_mask(engine):
    with pytest.raises(ValueError, match=r"`texts\[1\]`.*max_length=16 "
                       r"\(its first 14 pieces\); 6 of its 20 blanks fall "
                       r"past it \(fill_mask_details"):
        engine.fill_mask(["the [MASK] sat", "[MASK] " * 20])
    with pytest.raises(ValueError, match=r"`texts\[0\]`.*1 of its 2 blanks"):
        engine.fill_mask(LONG[:1])


def test_fill_mask_details_fills_the_blanks_that_fit(engine,
                                                     model_and_tokenizer):
    out = engine.fill_mask_details(LONG + ["the [MASK] sat"])
    assert out.truncated == [True, True, True, False]
    assert [len(blanks) for blanks in out.fillings] == [1, 14, 1, 1]
    # A text cut without losing a blank is answered by fill_mask too (its
    # batch is narrower: float32 sums may differ in the last bits).
    alone = engine.fill_mask(LONG[2:])
    assert [w for w, _ in alone[0][0]] == [w for w, _ in out.fillings[2][0]]
    bounds.assert_close([q for _, q in alone[0][0]],
                        [q for _, q in out.fillings[2][0]],
                        **_bound(model_and_tokenizer, LONG[2:]))


def test_the_engines_agree_on_the_same_texts(engines, model_and_tokenizer):
    texts = LONG + BLANKS + ["[MASK] dog ran in the [MASK]", "the [MASK]"]
    python = engines["python"].fill_mask_details(texts)
    saved = engines["saved_model"].fill_mask_details(texts)
    assert saved.truncated == python.truncated
    assert len(saved.fillings) == len(python.fillings) == len(texts)
    bound = _bound(model_and_tokenizer, texts)
    for got, want in zip(saved.fillings, python.fillings):
        assert len(got) == len(want)
        for got_blank, want_blank in zip(got, want):
            # Ties aside (none at this model's float32 probabilities), the
            # same words in the same order.
            assert [w for w, _ in got_blank] == [w for w, _ in want_blank]
            bounds.assert_close([q for _, q in got_blank],
                                [q for _, q in want_blank], **bound)


@pytest.mark.parametrize("texts, match", [
    ("three [MASK]", r"argument `texts`, expected a list of strings"),
    (None, r"argument `texts`, expected a list of strings"),
    ([12], r"argument `texts\[0\]`, expected a str"),
    (["a [MASK]", b"b [MASK]"], r"argument `texts\[1\]`, expected a str"),
    (["ok [MASK]", "ab\ud800 [MASK]"],
     r"`texts\[1\]`.*character 2 is '\\ud800'"),
    (tf.constant(["a [MASK]"]), r"argument `texts`"),
    (np.array(["a [MASK]"]), r"argument `texts`"),
    (["a [MASK]", "no blank here"],
     r"`texts\[1\]`, expected a text with at least one \[MASK\]"),
    (["[mask] lower case"], r"`texts\[0\]`.*at least one \[MASK\]"),
])
def test_bad_input_is_refused_naming_the_argument(engine, texts, match):
    with pytest.raises(ValueError, match=match):
        engine.fill_mask(texts)
    with pytest.raises(ValueError, match=match):
        engine.fill_mask_details(texts)


def _read(sp, token_id):
    """A piece as a user reads it, by SentencePiece alone (not the code
    under test): its decoding; a special piece as written; a byte that is
    not a character alone as written."""
    piece = sp.id_to_piece(token_id)
    if (sp.is_control(token_id) or sp.is_unknown(token_id)
            or piece == "[MASK]" or sp.decode_pieces([piece]) == "\ufffd"):
        return piece
    return sp.decode_pieces([piece])


def test_every_filling_is_the_word_sentencepiece_decodes(
        model_and_tokenizer, tmp_path):
    model, tokenizer = model_and_tokenizer
    sp = spm.SentencePieceProcessor(model_proto=tokenizer.model_proto)
    size = tokenizer.vocab_size
    pieces = [sp.id_to_piece(i) for i in range(size)]
    assert sum(p.startswith("\u2581") and len(p) > 1 for p in pieces) >= 3
    want = sorted(_read(sp, i) for i in range(size))
    assert "tree" in want and "</s>" in want and "[MASK]" in want
    # top_k = the vocabulary: every id's word, once.
    path = export.export_masked_lm(model, tokenizer, tmp_path / "export",
                                   top_k=size)
    texts = ["the [MASK] sat"]
    for got in (mlm_evaluation.fill_mask(model, tokenizer, texts, size),
                export.load_masked_lm(path).fill_mask(texts)):
        words = [w for w, _ in got[0][0]]
        assert [w for w in words if w.startswith("\u2581")] == []
        assert sorted(words) == want


def test_special_and_byte_pieces_read_as_the_docstring_says():
    # A byte-fallback vocabulary (train_tokenizer has no such option).
    corpus = ["the caf\u00e9 sat", "a dog ran", "na\u00efve \u00fcber"] * 9
    writer = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus), model_writer=writer, vocab_size=280,
        pad_id=0, unk_id=1, bos_id=2, eos_id=3, byte_fallback=True,
        user_defined_symbols=["[MASK]"], minloglevel=2)
    tokenizer = SubwordTokenizer(writer.getvalue())
    sp = spm.SentencePieceProcessor(model_proto=tokenizer.model_proto)
    start = max((sp.id_to_piece(i) for i in range(sp.get_piece_size())),
                key=lambda p: (p.startswith("\u2581"), len(p)))
    assert start.startswith("\u2581") and len(start) > 2  # a word start
    ids = [0, 1, 2, 3, 4, sp.piece_to_id("<0x41>"),
           sp.piece_to_id("<0xC3>"), sp.piece_to_id("\u2581"),
           sp.piece_to_id(start), tokenizer.vocab_size + 3]
    assert mlm_evaluation.filling_words(tokenizer, ids) == [
        "<pad>", "<unk>", "<s>", "</s>", "[MASK]", "A", "<0xC3>", "",
        start[1:], "<unk>"]
    every = range(tokenizer.vocab_size)
    assert mlm_evaluation.filling_words(tokenizer, every) == [
        _read(sp, i) for i in every]


@pytest.mark.parametrize("texts", [
    ["\U0001F600 [MASK]"], ["e\u0301 [MASK]"], ["\ufeff[MASK]"],
    ["a\x00b [MASK]"], ["[MASK][MASK][MASK]"], ["\u200b", "[MASK]"],
])
def test_unicode_edges_are_answered_alike(engines, texts):
    python = engines["python"].fill_mask_details(texts)
    saved = engines["saved_model"].fill_mask_details(texts)
    assert saved.truncated == python.truncated
    assert [[[w for w, _ in b] for b in t] for t in saved.fillings] == [
        [[w for w, _ in b] for b in t] for t in python.fillings]


@pytest.mark.parametrize("texts, node", [
    (tf.constant("a [MASK]"), "texts_must_be_a_vector_of_strings"),
    (tf.constant([["a [MASK]"]]), "texts_must_be_a_vector_of_strings"),
    (tf.constant([b"a [MASK]", b"\xff\xfe [MASK]"]), "texts_must_be_utf8"),
    (tf.constant(["a [MASK]", "no blank", "", "b"]),
     r"texts with pieces but without \[MASK\].*\[1 3\]"),
])
def test_the_signature_names_texts_for_any_client(engines, texts, node):
    serve = engines["saved_model"].signatures["fill_mask"]
    with pytest.raises(tf.errors.InvalidArgumentError, match=node):
        serve(texts=texts)


def test_the_signature_answers_batch_zero_and_empty_texts(engines):
    serve = engines["saved_model"].signatures["fill_mask"]
    out = serve(texts=tf.constant([], tf.string))
    assert out["fillings"].shape[0] == 0 and out["blanks"].shape == (0,)
    out = serve(texts=tf.constant(BLANKS))
    assert out["blanks"].numpy().tolist() == [0, 0, 0]
    assert not out["truncated"].numpy().any()
    assert (out["fillings"].numpy() == b"").all()
    assert not out["probabilities"].numpy().any()


def test_a_tokenizer_without_the_mask_piece_is_refused(model_and_tokenizer,
                                                       tmp_path):
    model, _ = model_and_tokenizer
    # No reseeding here: it would break the fixture's tokenizer (traps 10).
    plain = train_tokenizer(CORPUS, None, vocab_size=40)
    for call in (mlm_evaluation.fill_mask, mlm_evaluation.fill_mask_details):
        with pytest.raises(ValueError, match="argument `tokenizer`.*mask "
                           r"piece \[MASK\]"):
            call(model, plain, ["the [MASK] sat"])
    with pytest.raises(ValueError, match="argument `tokenizer`"):
        export.export_masked_lm(model, plain, tmp_path / "export")
    assert not (tmp_path / "export").exists()


def test_load_masked_lm_refuses_a_directory_without_an_export(tmp_path):
    with pytest.raises(FileNotFoundError, match="saved_model.pb"):
        export.load_masked_lm(tmp_path)


def _call(function, pair, overrides):
    masker = MaskGenerator(pair[1].vocab_size)
    arguments = {
        "fill_mask": dict(texts=["the [MASK] sat"]),
        "fill_mask_details": dict(texts=["the [MASK] sat"]),
        "masked_lm_scores": dict(texts=["the cat sat"], masker=masker),
        "sample_fillings": dict(texts=["the cat sat"]),
        "evaluate_masked_lm": dict(texts=["the cat sat"], masker=masker,
                                   model_dir=None, split="test"),
    }[function]
    arguments.update(model=pair[0], tokenizer=pair[1])
    arguments.update(overrides)
    return getattr(mlm_evaluation, function)(**arguments)


# (function, argument, bad value, what the message must hold).
SWEEP = [
    (f, "top_k", v, m) for f in ("fill_mask", "fill_mask_details")
    for v, m in ((0, "top_k=0"), (True, "top_k=True"), (2.0, "top_k=2.0"),
                 ("3", "top_k='3'"), (float("nan"), "top_k=nan"),
                 (10**9, "at most the vocabulary"))
] + [
    (f, "model", v, "argument `model`") for f in (
        "fill_mask", "fill_mask_details", "masked_lm_scores",
        "sample_fillings", "evaluate_masked_lm") for v in (None, "model")
] + [
    (f, "tokenizer", v, "argument `tokenizer`") for f in (
        "fill_mask", "masked_lm_scores") for v in (None, "tok")
] + [
    (f, "texts", v, "argument `texts") for f in (
        "masked_lm_scores", "sample_fillings", "evaluate_masked_lm")
    for v in (None, "the cat sat", ["a", "b\ud800"])
] + [
    ("masked_lm_scores", "texts", [], "texts with at least one piece"),
    ("masked_lm_scores", "texts", ["", " "], "texts with at least one"),
    ("masked_lm_scores", "masker", None, "argument `masker`"),
    ("masked_lm_scores", "seed", True, "seed=True"),
    ("masked_lm_scores", "seed", 2.5, "seed=2.5"),
    ("masked_lm_scores", "seed", "a", "seed='a'"),
    ("masked_lm_scores", "seed", 2**40, "seed=1099511627776"),
    ("masked_lm_scores", "batch_size", 0, "batch_size=0"),
    ("masked_lm_scores", "batch_size", True, "batch_size=True"),
    ("masked_lm_scores", "batch_size", 2.0, "batch_size=2.0"),
    ("sample_fillings", "count", -1, "count=-1"),
    ("sample_fillings", "count", True, "count=True"),
    ("sample_fillings", "count", 2.0, "count=2.0"),
    ("sample_fillings", "top_k", 0, "top_k=0"),
    ("evaluate_masked_lm", "samples", -1, "samples=-1"),
    ("evaluate_masked_lm", "samples", True, "samples=True"),
    ("evaluate_masked_lm", "split", "", "split=''"),
    ("evaluate_masked_lm", "split", None, "split=None"),
    ("evaluate_masked_lm", "split", "../x", "split='../x'"),
    ("evaluate_masked_lm", "split", 3, "split=3"),
    ("evaluate_masked_lm", "model_dir", 3, "model_dir=3"),
]


@pytest.mark.parametrize("function, name, value, match", SWEEP)
def test_every_argument_is_refused_by_name(model_and_tokenizer, tmp_path,
                                           function, name, value, match):
    if function == "evaluate_masked_lm" and name != "model_dir":
        overrides = {"model_dir": tmp_path, name: value}
    else:
        overrides = {name: value}
    with pytest.raises(ValueError, match=match):
        _call(function, model_and_tokenizer, overrides)
    assert not list(tmp_path.iterdir())  # nothing written


def test_sample_fillings_skips_texts_without_a_word(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    long = "on the mat " * 12  # its middle word is piece 18 or later
    rows = mlm_evaluation.sample_fillings(
        model, tokenizer, ["", "  ", "the cat sat", long], count=5)
    assert [r[2] for r in rows] == ["the cat sat", long]
    assert rows[0][0] == "the [MASK] sat" and len(rows[0][1]) == 3
    assert rows[1][1] == []  # its middle word falls past max_length
    assert mlm_evaluation.sample_fillings(model, tokenizer, ["a b"],
                                          count=0) == []


def test_export_masked_lm_refuses_bad_arguments(model_and_tokenizer,
                                                tmp_path):
    model, tokenizer = model_and_tokenizer
    for overrides, match in [
            (dict(top_k=0), "top_k=0"), (dict(top_k=True), "top_k=True"),
            (dict(top_k=10**6), "top_k=1000000"),
            (dict(overwrite="yes"), "overwrite='yes'"),
            (dict(model="m"), "argument `model`"),
            (dict(tokenizer=b"not a model"), "model_proto"),
            (dict(export_dir=3), "export_dir")]:
        arguments = dict(model=model, tokenizer=tokenizer,
                         export_dir=tmp_path / "export")
        arguments.update(overrides)
        with pytest.raises(ValueError, match=match):
            export.export_masked_lm(**arguments)
    assert not list(tmp_path.iterdir())
