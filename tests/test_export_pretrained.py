"""The SavedModel exports of a pretrained checkpoint's model keep its
tokenizer in the graph (`tfattn.export.saved_model.graph_tokenizer`): a
Marian (OPUS-MT) translator and a GPT-2 language model, each read from a
tiny random checkpoint directory (tests/marian_fixtures.py,
tests/gpt2_fixtures.py), give through their signatures what the Python
path gives with the same tokenizer."""

import numpy as np
import pytest
import tensorflow as tf

from tests import gpt2_fixtures as gfx
from tests import marian_fixtures as mfx
from tfattn.decoding import lm_evaluation
from tfattn.decoding import samplers
from tfattn.decoding import translate
from tfattn.export import export_language_model
from tfattn.export import export_translator
from tfattn.export import load_language_model
from tfattn.export import load_translator
from tfattn.export.saved_model import graph_tokenizer
from tfattn.interop import pretrained

SENTENCES = ["The cat sits on the mat.", "Le chien est sur le tapis.",
             "Собака сидит.", ""]
PROMPTS = ["The cat", "the dog in", "A"]


@pytest.fixture(scope="module")
def marian_dir(tmp_path_factory):
    return mfx.write_checkpoint(tmp_path_factory)[0]


@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("gpt2") / "hf")
    vocab, merges = gfx.vocabulary()
    gfx.write_huggingface(directory, gfx.hf_tensors(gfx.hub_model().backbone),
                          gfx.hf_config(len(vocab)), vocab, merges)
    return directory


def _python_translations(model, tokenizer, texts, extra_length):
    """`translate_texts`'s path (greedy) with the checkpoint's tokenizer:
    encode in the graph, search, decode in Python (transformers' way)."""
    max_source, max_length = translate.decode_lengths(model, extra_length)
    source = translate.encode_for_translation(
        tokenizer, tf.constant(texts), max_source)
    ids, _ = translate.generate_fn(
        model, samplers.for_beam_size(1, 0.6), extra_length, max_length,
        False)(source)
    empty = translate.empty_source_rows(source).numpy()
    return ["" if blank else tokenizer.decode(row)
            for row, blank in zip(np.asarray(ids), empty)]


@pytest.mark.slow
def test_marian_translator_signature_is_the_python_path(marian_dir,
                                                        tmp_path):
    model, tokenizer = pretrained.load(marian_dir)
    export_dir = export_translator(model, tokenizer, str(tmp_path / "m"),
                                   beam_size=1, extra_length=6)
    served = load_translator(export_dir).translate(SENTENCES)
    assert served == _python_translations(model, tokenizer, SENTENCES, 6)
    assert any(served)  # Something was translated, not only "".


@pytest.mark.slow
def test_gpt2_language_model_signature_is_the_python_path(gpt2_dir,
                                                          tmp_path):
    model, tokenizer = pretrained.load(gpt2_dir)
    export_dir = export_language_model(model, tokenizer, str(tmp_path / "g"),
                                       max_new_tokens=5)
    served = load_language_model(export_dir).continue_details(PROMPTS)
    python = lm_evaluation.continue_texts(model, tokenizer, PROMPTS,
                                          max_new_tokens=5)
    assert [p + c for p, c in zip(PROMPTS, served.continuations)] == python


def test_graph_tokenizer_keeps_a_pretrained_tokenizer(gpt2_dir):
    tokenizer = pretrained.load(gpt2_dir)[1]
    assert graph_tokenizer(tokenizer) == (tokenizer, None)


def test_graph_tokenizer_refuses_another_object():
    with pytest.raises(ValueError, match="argument `tokenizer`"):
        graph_tokenizer(object())


def test_marian_graph_tokenizer_is_the_python_tokenizer(marian_dir):
    tokenizer = pretrained.load(marian_dir)[1]
    texts = [t for t in mfx.SAMPLE if t]
    rows = tokenizer.tokenize(texts).to_list()
    assert [row + [tokenizer.eos_id] for row in rows] == [
        tokenizer.encode(t) for t in texts]
    ids = [tokenizer.encode(t, target=True) for t in mfx.TARGET_TEXTS]
    width = max(map(len, ids))
    batch = np.array([row + [0] * (width - len(row)) for row in ids])
    assert [t.decode() for t in tokenizer.detokenize(batch).numpy()] == [
        tokenizer.decode(row) for row in batch]
