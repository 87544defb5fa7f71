"""The SavedModel exports of a pretrained checkpoint's model keep its
tokenizer in the graph (`tfattn.export.saved_model.graph_tokenizer`): a
Marian (OPUS-MT) translator and a GPT-2 language model, each read from a
tiny random checkpoint directory (tests/marian_fixtures.py,
tests/gpt2_fixtures.py), give through their signatures what the Python
path gives with the same tokenizer. The two exports are checked on the
exports of tests/test_cli_init_from.py's end-to-end runs (slow tier),
which fine-tune these checkpoints and export them (`export_translator`,
`export_language_model`), against `_python_translations` below and
`lm_evaluation.continue_texts` on `SENTENCES` and `PROMPTS`: one export
of each, not two; the tokenizers' graph side is checked here."""

import numpy as np
import pytest
import tensorflow as tf

from tests import gpt2_fixtures as gfx
from tests import marian_fixtures as mfx
from tfattn.decoding import samplers
from tfattn.decoding import translate
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
