"""tfattn's Marian tokenizer against transformers' `MarianTokenizer` (the
reference library; transformers imports its tokenizers without torch).

The checkpoint is tests/marian_fixtures.py's tiny random OPUS-MT
directory: different SentencePiece models for the source and the target
side, one shared vocab.json with a piece left out (it reads as <unk>) and
two language codes. Both of tfattn's paths are compared: the Python one
(`encode`) and the TensorFlow ops training and the exports use
(`tokenize_ids`, `tokenize_target`).
"""

import os

import numpy as np
import pytest
import tensorflow as tf
import transformers  # the test extra installs it (no torch needed)

from tests import marian_fixtures as fx
from tfattn.data import pipeline
from tfattn.interop import marian
from tfattn.utils.ids import BOS_ID
from tfattn.utils.ids import EOS_ID

# Latin, Cyrillic, Greek, Japanese, German diacritics, a piece vocab.json
# lacks, the empty string, and language codes: leading (with and without a
# space after it), unknown to the vocabulary, and not leading (cut as text).
TEXTS = fx.SAMPLE + fx.TARGET_TEXTS + [
    "Собака", ">>fra<< Le chat est assis.", ">>deu<<Die Katze.",
    ">>xyz<< The dog.", "The >>fra<< cat.", ">>fra<<", ">> not a code",
    "  spaced   out  ", "Straße\tmit Tab",
]
# Special tokens written in the text: the Python path keeps them whole, as
# transformers does; the graph path leaves them to SentencePiece.
WITH_SPECIALS = ["Le chat</s>", "<unk> dog <pad>"]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return fx.write_checkpoint(tmp_path_factory)


@pytest.fixture(scope="module")
def tokenizers(checkpoint):
    directory = checkpoint[0]
    reference = transformers.MarianTokenizer(
        source_spm=os.path.join(directory, "source.spm"),
        target_spm=os.path.join(directory, "target.spm"),
        vocab=os.path.join(directory, "vocab.json"),
        source_lang="en", target_lang="de")
    return marian.from_huggingface(directory)[1], reference


def _reference_ids(reference, text, target):
    if target:
        return reference(text_target=text)["input_ids"]
    return reference(text)["input_ids"]


@pytest.mark.parametrize("target", [False, True], ids=["source", "target"])
def test_python_path_equals_transformers(tokenizers, target):
    ours, reference = tokenizers
    for text in TEXTS + WITH_SPECIALS:
        got = ours.vocabulary.to_marian(ours.encode(text, target=target))
        assert got.tolist() == _reference_ids(reference, text, target), text


@pytest.mark.parametrize("target", [False, True], ids=["source", "target"])
def test_graph_path_equals_transformers(tokenizers, target):
    ours, reference = tokenizers
    ids = ours.tokenize_ids(tf.constant(TEXTS), target=target)
    assert isinstance(ids, tf.RaggedTensor)
    for text, row in zip(TEXTS, ids.to_list()):
        got = ours.vocabulary.to_marian(np.array(row + [EOS_ID]))
        assert got.tolist() == _reference_ids(reference, text, target), text
    for text in TEXTS:  # A scalar string gives the same ids, 1-D.
        one = ours.tokenize_ids(tf.constant(text), target=target)
        assert one.shape.rank == 1
        assert one.numpy().tolist() == ids[TEXTS.index(text)].numpy(
        ).tolist(), text


def test_the_two_sides_differ_somewhere(tokenizers):
    # Else the target tests above could not tell the sides apart.
    ours, _ = tokenizers
    source = ours.tokenize_ids(tf.constant(fx.TARGET_TEXTS)).to_list()
    target = ours.tokenize_target(tf.constant(fx.TARGET_TEXTS)).to_list()
    assert source != target


def test_training_pairs_cut_the_target_with_target_spm(tokenizers):
    ours, reference = tokenizers
    source_text, target_text = ">>deu<< A dog runs.", "Ein Hund läuft."
    source, target_in, labels = pipeline.encode_pair(
        ours, tf.constant(source_text), tf.constant(target_text))
    expected_source = _reference_ids(reference, source_text, False)
    expected_labels = _reference_ids(reference, target_text, True)
    to_marian = ours.vocabulary.to_marian
    assert to_marian(source.numpy()).tolist() == expected_source
    assert to_marian(labels.numpy()).tolist() == expected_labels
    assert target_in.numpy().tolist() == [BOS_ID] + labels.numpy().tolist(
    )[:-1]


def test_tensors_of_rank_two_are_refused_by_name(tokenizers):
    ours, _ = tokenizers
    with pytest.raises(ValueError, match=r"`text`.*\(1, 2\)"):
        ours.tokenize_ids(tf.constant([["a", "b"]]))
