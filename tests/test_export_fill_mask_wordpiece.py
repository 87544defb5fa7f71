"""The fill-mask SavedModel of a masked LM with a BERT checkpoint's
WordPiece tokenizer (`tfattn.export.export_masked_lm`): the tokenizer runs
in the graph, its files sit beside the SavedModel, and the export answers
as the Python path (`mlm_evaluation.fill_mask`), words included."""

import os

import numpy as np
import pytest
import tensorflow as tf

from tests import bounds
from tests.test_decoding_mlm_wordpiece import MAX_LENGTH
from tests.test_decoding_mlm_wordpiece import model  # noqa: F401
from tests.test_decoding_mlm_wordpiece import tokenizer  # noqa: F401
from tfattn import export
from tfattn.decoding import mlm_evaluation
from tfattn.utils.ids import BOS_ID
from tfattn.utils.ids import EOS_ID

TEXTS = ["the dog is jump[MASK] over", "[MASK] lazy [MASK]", "",
         "The QUICK [MASK] fox"]


@pytest.fixture(scope="module")
def served(model, tokenizer, tmp_path_factory):  # noqa: F811
    directory = tmp_path_factory.mktemp("wordpiece") / "export"
    export.export_masked_lm(model, tokenizer, directory, top_k=4)
    return str(directory), export.load_masked_lm(directory)


def test_the_export_keeps_the_wordpiece_files(served, tokenizer):  # noqa
    directory, loaded = served
    assert sorted(os.listdir(directory)) == sorted([
        "assets", "fingerprint.pb", "model.keras", "saved_model.pb",
        "tokenizer_config.json", "variables", "vocab.txt"])
    assert loaded.tokenizer.vocabulary == tokenizer.vocabulary
    assert loaded.tokenizer.lowercase == tokenizer.lowercase


def test_the_export_answers_as_the_python_path(served, model,  # noqa: F811
                                               tokenizer):  # noqa: F811
    got = served[1].fill_mask(TEXTS)
    want = mlm_evaluation.fill_mask(model, tokenizer, TEXTS, top_k=4)
    assert [[[w for w, _ in blank] for blank in text] for text in got] == [
        [[w for w, _ in blank] for blank in text] for text in want]
    # To one logit of the fixture's MaskedLM (1 layer, width 16, FFN 32):
    # the stack over at most MAX_LENGTH positions, the head's Dense (C)
    # and layer norm (4·C), the projection and the vocabulary.
    terms = 5 * 16 + bounds.stack_terms(1, 16, 32, MAX_LENGTH,
                                        tokenizer.vocab_size)
    # A probability moves by at most its logits' error: the scale is the
    # largest |logit| on the texts, read as fill-mask reads them.
    rows = [[BOS_ID, *pieces, EOS_ID] for pieces in
            mlm_evaluation.text_pieces(tokenizer, TEXTS, True)]
    scale = max(np.abs(np.asarray(model(np.array([row], "int32")))).max()
                for row in rows)
    bounds.assert_close(
        [p for text in got for blank in text for _, p in blank],
        [p for text in want for blank in text for _, p in blank],
        terms=terms, scale=scale)
    assert [len(text) for text in got] == [1, 2, 0, 1]


def test_the_export_refuses_a_text_without_mask(served):
    with pytest.raises(ValueError, match=r"argument `texts\[1\]`"):
        served[1].fill_mask(["a [MASK]", "the dog"])
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match="without \\[MASK\\]"):
        served[1].signatures["fill_mask"](texts=tf.constant(["the dog"]))


def test_an_export_without_its_vocabulary_is_refused(served, tmp_path):
    directory = tmp_path / "copy"
    directory.mkdir()
    (directory / "saved_model.pb").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match="no spm.model"):
        export.load_masked_lm(directory)
    (directory / "vocab.txt").write_text("[PAD]\n")
    with pytest.raises(FileNotFoundError, match="no tokenizer_config.json"):
        export.load_masked_lm(directory)
