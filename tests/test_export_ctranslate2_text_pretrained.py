"""Text in, text out through CTranslate2 for imported checkpoints:
`to_ctranslate2` of a tiny random Marian (tests/marian_fixtures.py) and
`causal_lm_to_ctranslate2` of a tiny random GPT-2 (tests/gpt2_fixtures.py,
built by keras-hub) keep the checkpoint's tokenizer in the export, and
`load_ctranslate2` / `load_ctranslate2_generator` then give what tfattn
gives on the same texts: the Marian translator tfattn's greedy search on
the ids transformers' `MarianTokenizer` gives (the token level is tested
in tests/test_export_ctranslate2_pretrained.py), the GPT-2 generator
`lm_evaluation.continue_details`'s continuations and scores; and beam
search at length penalty 0 gives the Marian model's best hypotheses.
"""

import json
import os

import numpy as np
import pytest

from tests import bounds
from tests import gpt2_fixtures as gpt2_fx
from tests import marian_fixtures as marian_fx
from tfattn.decoding import lm_evaluation
from tfattn.decoding import lm_serving
from tfattn.decoding import samplers
from tfattn.export import ctranslate2 as ct2_export
from tfattn.export import ctranslate2_generator
from tfattn.interop import gpt2
from tfattn.interop import marian
from tfattn.utils.ids import EOS_ID

ctranslate2 = pytest.importorskip("ctranslate2")

TEXTS = ["The cat sits on the mat.", "Le chien est sur le tapis.",
         ">>fra<< A dog runs in the park.", "Собака сидит.", ""]


@pytest.fixture(scope="module")
def marian_model(tmp_path_factory):
    """A tiny Marian whose end-of-sentence logit is raised, so that some
    rows stop before their limit and some run to it."""
    checkpoint = marian_fx.write_checkpoint(tmp_path_factory)
    _, config, weights, _ = checkpoint
    bias = weights["final_logits_bias"].copy()
    bias[0, config["eos_token_id"]] += 4.25
    directory = marian_fx.changed_copy(
        checkpoint, tmp_path_factory.mktemp("changed"),
        weights=dict(weights, final_logits_bias=bias))
    return marian.from_huggingface(directory)


@pytest.fixture(scope="module")
def marian_translator(marian_model, tmp_path_factory):
    """The CTranslate2 export of `marian_model` with the default decoding
    settings, loaded (tests only read it)."""
    model, tokenizer = marian_model
    return ct2_export.load_ctranslate2(ct2_export.to_ctranslate2(
        model, tokenizer, tmp_path_factory.mktemp("marian") / "ct2"))


def _tfattn_greedy(model, tokenizer, texts, extra_length):
    """tfattn's greedy translations of `texts`, one row at a time, on the
    ids of the Python tokenizer (transformers' `MarianTokenizer`'s), each
    cut at its own limit (its source's length + `extra_length`). Greedy's
    first n tokens do not depend on a limit beyond n: every row searches
    to the longest limit, from its source right-padded with 0 to the
    longest (padding changes no output), so that the search compiles
    once, not once per text."""
    sources = [tokenizer.encode(text) for text in texts]
    width = max(map(len, sources))
    outputs = []
    for source in sources:
        if len(source) == 1:  # No pieces: the contract's "".
            outputs.append("")
            continue
        padded = np.array([source + [0] * (width - len(source))], "int32")
        ids, _ = model.generate(padded, max_new_tokens=width + extra_length,
                                sampler="greedy", jit_compile=False)
        row = np.asarray(ids)[0].tolist()[:len(source) + extra_length]
        outputs.append(tokenizer.decode(row[:row.index(EOS_ID)]
                                        if EOS_ID in row else row))
    return outputs


def test_marian_translator_gives_tfattns_greedy_translations(
        marian_model, tmp_path):
    model, tokenizer = marian_model
    path = ct2_export.to_ctranslate2(model, tokenizer, tmp_path / "ct2",
                                     beam_size=1, extra_length=6)
    assert not os.path.exists(os.path.join(path, ct2_export.VOCAB_FILENAME))
    assert os.path.isfile(os.path.join(path, "pretrained", "source.spm"))
    translator = ct2_export.load_ctranslate2(path)
    got = translator.translate(TEXTS)
    assert got == _tfattn_greedy(model, tokenizer, TEXTS, extra_length=6)
    assert got[-1] == "" and any(got[:-1])
    assert len(set(got)) > 2  # Outputs depend on the text.


def test_marian_language_code_is_one_token(marian_model,
                                           marian_translator):
    _, tokenizer = marian_model
    translator = marian_translator
    pieces, truncated = translator.tokenize([">>fra<< Le chat"])
    assert pieces[0][0] == ">>fra<<" and truncated == [False]
    vocab = json.loads(tokenizer.files["vocab.json"])
    assert all(piece in vocab for piece in pieces[0])


@pytest.fixture(scope="module")
def gpt2_model(tmp_path_factory):
    root = tmp_path_factory.mktemp("gpt2")
    gpt2_fx.hub_model().save_to_preset(str(root / "preset"))
    return gpt2.from_keras_hub(str(root / "preset"))


def _continuation_scales(model, tokenizer, prompts, max_new_tokens):
    """The scale of each greedy continuation score's rounding (a sum of
    log-probabilities): the sum over its tokens of the largest |logit|
    (the masked ids left out) where each is chosen; and the longest
    prompt and continuation."""
    rows, _ = lm_serving.prompt_window(
        tokenizer.tokenize(prompts).to_list(),
        model.max_length - max_new_tokens)
    ids, _ = model.generate(rows, max_new_tokens=max_new_tokens,
                            jit_compile=False)
    scales, longest = [], 0
    for row, new in zip(rows, np.asarray(ids).tolist()):
        new = new[:new.index(EOS_ID) + 1] if EOS_ID in new else new
        logits = np.asarray(model(np.array([row + new], "int32")))[0]
        steps = np.abs(logits[len(row) - 1:-1])
        scales.append(np.where(steps < 1e8, steps, 0).max(-1).sum())
        longest = max(longest, len(row) + len(new))
    return np.array(scales), longest


def test_gpt2_generator_continues_as_tfattn(gpt2_model, tmp_path):
    model, tokenizer = gpt2_model
    prompts = ["The weather today", "Hello, world!", "über", ""]
    path = ctranslate2_generator.causal_lm_to_ctranslate2(
        model, tokenizer, tmp_path / "ct2", max_new_tokens=8)
    generator = ctranslate2_generator.load_ctranslate2_generator(path)
    got = generator.continue_details(prompts)
    ours = lm_evaluation.continue_details(model, tokenizer, prompts,
                                          max_new_tokens=8)
    assert got.continuations == ours.continuations
    scales, longest = _continuation_scales(model, tokenizer, prompts, 8)
    # A log-probability: the stack over the longest prompt and
    # continuation, its final layer norm (4·C) and the log-softmax over
    # the vocabulary; then the sum of at most 8 of them, at the magnitude
    # of their logits.
    terms = 8 + 4 * gpt2_fx.WIDTH + bounds.stack_terms(
        gpt2_fx.LAYERS, gpt2_fx.WIDTH, gpt2_fx.FFN, longest,
        model.vocab_size)
    bounds.assert_close(got.scores, ours.scores, terms=terms, scale=scales)
    assert any(got.continuations)


def test_another_tokenizer_is_refused_by_name(marian_model, tmp_path):
    model, _ = marian_model
    with pytest.raises(ValueError, match="tokenizer.*dict"):
        ct2_export.to_ctranslate2(model, {"a": 1}, tmp_path / "ct2")
    assert not os.path.exists(tmp_path / "ct2")


def test_marian_beam_search_equals_ctranslate2s(marian_model,
                                                marian_translator):
    """Beam 4 at length penalty 0 (where both engines rank by the sum of
    log-probabilities): the best hypothesis of every row that ends in
    `</s>` is CTranslate2's. A row that reaches the length limit unfinished
    may differ: the engines choose among unfinished beams differently.
    Every text has the same limit (the longest source's length + 6) and
    its source right-padded with 0 to the longest (padding changes no
    output: `generate` pads each source to its bucket itself), so that
    tfattn's search compiles once, not once per text."""
    model, tokenizer = marian_model
    translator = marian_translator
    beam = samplers.BeamSampler(beam_size=4, alpha=0.0)
    texts = marian_fx.SAMPLE[:-1] + marian_fx.TARGET_TEXTS
    width = max(len(tokenizer.encode(text)) for text in texts)
    limit = width + 6
    for text in texts:
        source = tokenizer.encode(text)
        padded = np.array([source + [0] * (width - len(source))], "int32")
        ids, _ = model.generate(padded, max_new_tokens=limit, sampler=beam,
                                jit_compile=False)
        row = np.asarray(ids)[0].tolist()
        assert EOS_ID in row, text  # The case this test covers.
        pieces, _ = translator.tokenize([text])
        result = translator.translator.translate_batch(
            pieces, beam_size=4, length_penalty=0.0,
            max_decoding_length=limit, min_decoding_length=0)
        theirs = [translator._text.id_of(t) for t in result[0].hypotheses[0]]
        assert theirs == row[:row.index(EOS_ID)], text
