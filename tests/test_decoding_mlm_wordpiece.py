"""A masked LM with a BERT checkpoint's WordPiece vocabulary
(`tfattn.interop.wordpiece_tokenizer`): word starts for whole-word masking
(`tfattn.data.word_starts`), the masker's special ids, how fill-mask reads
`[MASK]` in a text and names its fillings (`mlm_evaluation`), each against
what this file computes from `vocab.txt`'s tokens on its own."""

import keras
import numpy as np
import pytest

from hparams import bert_tiny
from tests import bert_fixtures as bfx
from tests import bounds
from tfattn.data.masking import MaskGenerator
from tfattn.data.masking import masker_for
from tfattn.data.masking import word_starts
from tfattn.decoding import mlm_evaluation
from tfattn.interop.wordpiece_tokenizer import WordPieceTokenizer
from tfattn.models.masked_lm import MaskedLM

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
MAX_LENGTH = 12


def _tokens():
    """The tokens by tfattn id, computed here: the five specials, then
    every other token in vocab.txt's order."""
    vocab = bfx.vocabulary()
    return SPECIALS + [t for t in vocab if t not in SPECIALS]


def _id(token):
    return _tokens().index(token)


@pytest.fixture(scope="module")
def tokenizer():
    return WordPieceTokenizer(bfx.vocabulary())


@pytest.fixture(scope="module")
def model(tokenizer):
    keras.utils.set_random_seed(7)
    model = MaskedLM(tokenizer.vocab_size, num_layers=1, num_units=16,
                     num_heads=2, ffn_units=32, max_length=MAX_LENGTH,
                     dropout_rate=0.0)
    model(np.ones((1, 4), "int32"))
    return model


def test_id_to_piece_and_piece_to_id_use_tfattn_ids(tokenizer):
    assert [tokenizer.id_to_piece(i) for i in range(tokenizer.vocab_size)] \
        == _tokens()
    assert tokenizer.piece_to_id("##ing") == _id("##ing")
    assert tokenizer.piece_to_id("not-a-token") == _id("[UNK]")


@pytest.mark.parametrize("token_id", [-1, len(bfx.vocabulary()), 1.0, True])
def test_id_to_piece_refuses_an_id_outside_the_vocabulary(tokenizer,
                                                          token_id):
    with pytest.raises(ValueError, match="argument `token_id`"):
        tokenizer.id_to_piece(token_id)


def test_word_starts_are_the_pieces_without_hashes(tokenizer):
    want = [not t.startswith("##") and t not in SPECIALS for t in _tokens()]
    got = word_starts(tokenizer)
    assert got.dtype == bool and got.tolist() == want
    assert got[_id("jump")] and not got[_id("##ing")]


def test_whole_word_masking_chooses_whole_wordpiece_words(tokenizer):
    words = "the fox is jumping over the dog".split()
    ids = tokenizer.tokenize(" ".join(words)).numpy()
    row = np.array([[_id("[CLS]"), *ids, _id("[SEP]")]])
    jump = list(row[0]).index(_id("jump"))
    assert row[0, jump + 1] == _id("##ing")  # "jumping" is two pieces.
    masker = MaskGenerator(tokenizer.vocab_size, mask_selection_rate=0.3,
                           mask_token_rate=1.0, random_token_rate=0.0,
                           word_start_ids=word_starts(tokenizer))
    # 40 draws in one call: 40 copies of the row, each drawn on its own.
    out = masker(np.repeat(row, 40, axis=0), seed=[0, 0])
    together = 0
    for weights, positions in zip(out["mask_weights"].numpy(),
                                  out["mask_positions"].numpy()):
        chosen = set(positions[weights > 0].tolist())
        assert (jump in chosen) == (jump + 1 in chosen)
        assert not chosen & {0, row.shape[1] - 1}  # [CLS], [SEP].
        together += jump in chosen
    assert together > 0  # The two-piece word was chosen, whole.


def test_the_masker_never_chooses_berts_special_tokens(tokenizer):
    masker = masker_for(bert_tiny.HPARAMS, tokenizer)
    specials = {tokenizer.piece_to_id(t) for t in SPECIALS}
    assert specials == {0, 1, 2, 3, 4} and masker.mask_token_id == _id(
        "[MASK]")
    assert specials <= set(masker.unselectable_token_ids) | {
        masker.mask_token_id}
    row = np.array([[_id("[CLS]"), _id("dog"), _id("[UNK]"), _id("[MASK]"),
                     _id("[SEP]"), 0]])
    out = MaskGenerator(tokenizer.vocab_size, mask_selection_rate=1.0)(
        row, seed=[1, 2])
    assert out["mask_positions"].numpy()[out["mask_weights"].numpy() > 0] \
        .tolist() == [1]


@pytest.mark.parametrize("text, tokens", [
    ("the dog is jump[MASK] over", ["the", "dog", "is", "jump", "[MASK]",
                                    "over"]),
    ("The [MASK] fox", ["the", "[MASK]", "fox"]),  # Lowercased around it.
    ("[MASK][MASK]", ["[MASK]", "[MASK]"]),
    ("", []),
    ("no blank", ["no", "blank"]),
])
def test_fill_mask_reads_mask_in_the_text_as_the_mask_id(tokenizer, text,
                                                         tokens):
    got = mlm_evaluation.text_pieces(tokenizer, [text], True)[0]
    if text == "no blank":  # Letters the vocabulary covers piece by piece.
        assert _id("[MASK]") not in got
        return
    assert got == [_id(t) for t in tokens]


def test_plain_tokenize_still_splits_mask_like_text(tokenizer):
    plain = mlm_evaluation.text_pieces(tokenizer, ["a [MASK]"], False)[0]
    assert _id("[MASK]") not in plain and _id("[") in plain


def test_tokenize_with_blanks_refuses_a_scalar(tokenizer):
    with pytest.raises(ValueError, match="argument `texts`"):
        tokenizer.tokenize_with_blanks("a [MASK]")


def test_without_blank_spaces_keeps_every_wordpiece(tokenizer):
    pieces = [_id("[UNK]"), _id("[MASK]"), _id("dog")]
    assert mlm_evaluation.without_blank_spaces(tokenizer, pieces) == pieces


def test_filling_words_drop_the_hashes_and_keep_specials(tokenizer):
    want = [t if t in SPECIALS else t[2:] if t.startswith("##") else t
            for t in _tokens()]
    ids = list(range(tokenizer.vocab_size))
    assert mlm_evaluation.filling_words(tokenizer, ids) == want
    assert mlm_evaluation.filling_words(tokenizer, [len(want)]) == ["[UNK]"]
    # The filling replaces [MASK]: "jump[MASK]" with "##ing" reads as BERT
    # joins "jump ##ing".
    word, = mlm_evaluation.filling_words(tokenizer, [_id("##ing")])
    assert "jump[MASK]".replace("[MASK]", word) == " ".join(
        ["jump", "##ing"]).replace(" ##", "") == "jumping"


def test_fill_mask_gives_every_word_once(model, tokenizer):
    (fillings,), = mlm_evaluation.fill_mask(
        model, tokenizer, ["the dog is jump[MASK]"],
        top_k=tokenizer.vocab_size)
    want = mlm_evaluation.filling_words(tokenizer, range(
        tokenizer.vocab_size))
    assert sorted(w for w, _ in fillings) == sorted(want)
    # A float64 softmax over the V logits, then the sum of its V values.
    bounds.assert_close(sum(p for _, p in fillings), 1.0,
                        terms=2 * tokenizer.vocab_size, scale=1.0,
                        dtype="float64")


def test_fill_mask_refuses_texts_as_for_sentencepiece(model, tokenizer):
    with pytest.raises(ValueError, match=r"argument `texts\[0\]`.*\[MASK\]"):
        mlm_evaluation.fill_mask(model, tokenizer, ["the dog"])
    long = "the dog " * MAX_LENGTH + "[MASK]"
    with pytest.raises(ValueError, match="max_length=12"):
        mlm_evaluation.fill_mask(model, tokenizer, [long])
    details = mlm_evaluation.fill_mask_details(model, tokenizer, [long])
    assert details.fillings == [[]] and details.truncated == [True]


def test_sample_fillings_and_scores_read_wordpiece(model, tokenizer):
    rows = mlm_evaluation.sample_fillings(
        model, tokenizer, ["the lazy dog is there"], top_k=2)
    assert rows[0][0] == "the lazy [MASK] is there"
    assert len(rows[0][1]) == 2
    scores = mlm_evaluation.masked_lm_scores(
        model, tokenizer, ["the lazy dog is there"],
        masker_for(bert_tiny.HPARAMS, tokenizer))
    assert scores["blanks"] >= 1 and scores["masked_perplexity"] > 1.0


def test_a_tokenizer_of_neither_kind_is_refused(model):
    class Pieces:
        vocab_size, mask_id = 8, 4

        def tokenize(self, texts):
            raise AssertionError("not reached")

        def id_to_piece(self, i):
            return "x"

    with pytest.raises(ValueError, match="WordPieceTokenizer"):
        mlm_evaluation.fill_mask(model, Pieces(), ["a [MASK]"])
