"""CTranslate2 exports of imported checkpoints (`ctranslate2_spec`): a tiny
random Marian (tests/marian_fixtures.py) as a `ctranslate2.Translator` and
a tiny random GPT-2 (tests/gpt2_fixtures.py, built by keras-hub) as a
`ctranslate2.Generator`, each on tfattn's own ids, must give tfattn's
per-token log-probabilities (`score_batch`) to the rounding bound of
tests/bounds.py and its greedy
outputs (`checkpoint_to_ctranslate2` writes them); each option and each
feed-forward activation CTranslate2 has must map on its own.
"""

import os

import numpy as np
import pytest
import tensorflow as tf

import tfattn
from tests import bounds
from tests import gpt2_fixtures as gpt2_fx
from tests import marian_fixtures as marian_fx
from tfattn.export import ctranslate2 as ct2_export
from tfattn.export import ctranslate2_spec
from tfattn.interop import gpt2
from tfattn.interop import marian
from tfattn.utils.ids import BOS_ID
from tfattn.utils.ids import EOS_ID
from tfattn.utils.ids import PAD_ID

ctranslate2 = pytest.importorskip("ctranslate2")

MASKED = -1e9


def _saved(spec, directory):
    ct2_export._save_spec(spec, str(directory), None)
    return str(directory)


def _log_softmax(logits):
    return tf.nn.log_softmax(np.asarray(logits, np.float32)).numpy()


def _rows(rng, low, high, lengths):
    return [rng.integers(low, high, n).tolist() for n in lengths]


def _terms(num_blocks, units, ffn_units, length, vocab_size, final_norms=0):
    """To one log-probability: `num_blocks` blocks (a decoder layer's
    cross-attention a block of its own), a pre-norm model's final layer
    norms (4·C each) and the log-softmax over the vocabulary."""
    return final_norms * 4 * units + bounds.stack_terms(
        num_blocks, units, ffn_units, length, vocab_size)


def _scale(logits, log_probs):
    """The magnitude of log-probabilities' rounding: the largest |logit|
    or |log p|, whichever is larger (the masked ones left out)."""
    values = np.concatenate([np.ravel(logits), np.ravel(log_probs)])
    return np.abs(values[values > MASKED / 2]).max()


# ----------------------------------------------------------------------
# Marian -> Translator.

@pytest.fixture(scope="module")
def marian_export(tmp_path_factory):
    """(model, pieces, translator) of the tiny Marian whose padding logit
    is raised by 100, so that a search that did not suppress the start
    token would emit it at every step."""
    checkpoint = marian_fx.write_checkpoint(tmp_path_factory)
    _, config, weights, _ = checkpoint
    bias = weights["final_logits_bias"].copy()
    bias[0, config["pad_token_id"]] += 100.0
    bias[0, config["eos_token_id"]] += 4.25
    directory = marian_fx.changed_copy(
        checkpoint, tmp_path_factory.mktemp("changed"),
        weights=dict(weights, final_logits_bias=bias))
    model, tokenizer = marian.from_huggingface(directory)
    pieces = ctranslate2_spec.checkpoint_pieces(tokenizer)
    path = ct2_export.checkpoint_to_ctranslate2(
        model, tokenizer, tmp_path_factory.mktemp("ct2") / "marian")
    return model, pieces, ctranslate2.Translator(path, device="cpu")


def test_marian_scores_equal_tfattns_search_distribution(marian_export):
    """tfattn's searches mask padding and the start token (`decode_step`);
    CTranslate2 scores over the same distribution."""
    model, pieces, translator = marian_export
    rng = np.random.default_rng(0)
    vocab = len(pieces)
    sources = _rows(rng, 4, vocab, (5, 3, 7))
    targets = _rows(rng, 4, vocab, (4, 6, 2))
    results = translator.score_batch(
        [[pieces[i] for i in row] for row in sources],
        [[pieces[i] for i in row] for row in targets])
    for source, target, result in zip(sources, targets, results):
        logits = np.array(model((np.array([source + [EOS_ID]], "int32"),
                                 np.array([[BOS_ID] + target], "int32"))))
        logits[..., [PAD_ID, BOS_ID]] = MASKED
        log_probs = _log_softmax(logits[0])
        ours = [log_probs[t, i] for t, i in enumerate(target + [EOS_ID])]
        config = marian_fx.CONFIG
        terms = _terms(
            config["encoder_layers"] + 2 * config["decoder_layers"],
            config["d_model"], config["encoder_ffn_dim"],
            max(len(source), len(target)) + 1, vocab)
        bounds.assert_close(result.log_probs, ours, terms=terms,
                            scale=_scale(logits, ours))


def test_marian_greedy_outputs_are_tfattns(marian_export):
    model, pieces, translator = marian_export
    rng = np.random.default_rng(1)
    sources = _rows(rng, 4, len(pieces), (5, 3, 7, 4))
    width = max(len(row) for row in sources) + 1
    batch = np.array([row + [EOS_ID] + [0] * (width - len(row) - 1)
                      for row in sources], "int32")
    ids, _ = model.generate(batch, max_new_tokens=10, sampler="greedy",
                            extra_length=64, jit_compile=False)
    results = translator.translate_batch(
        [[pieces[i] for i in row] for row in sources], beam_size=1,
        max_decoding_length=10, min_decoding_length=0)
    index = {piece: i for i, piece in enumerate(pieces)}
    stops = 0
    for row, result in zip(np.asarray(ids).tolist(), results):
        theirs = [index[p] for p in result.hypotheses[0]]
        ours = row[:row.index(EOS_ID)] if EOS_ID in row else row[:10]
        stops += EOS_ID in row
        assert theirs == ours
        assert BOS_ID not in theirs and PAD_ID not in theirs
    assert 0 < stops < len(sources)  # rows that stop and rows that run


# ----------------------------------------------------------------------
# GPT-2 -> Generator.

@pytest.fixture(scope="module")
def gpt2_export(tmp_path_factory):
    """(model, pieces, generator) of the tiny GPT-2, read from the
    keras-hub preset."""
    root = tmp_path_factory.mktemp("gpt2")
    gpt2_fx.hub_model().save_to_preset(str(root / "preset"))
    model, tokenizer = gpt2.from_keras_hub(str(root / "preset"))
    pieces = ctranslate2_spec.checkpoint_pieces(tokenizer)
    path = ct2_export.checkpoint_to_ctranslate2(model, tokenizer,
                                                root / "ct2")
    return model, pieces, ctranslate2.Generator(path, device="cpu"), \
        tokenizer


def _generator_scores(model, pieces, generator, rows):
    """CTranslate2's log-probabilities of each row after its first id,
    tfattn's, and the scale of their rounding (`_scale`)."""
    results = generator.score_batch([[pieces[i] for i in row]
                                     for row in rows])
    for row, result in zip(rows, results):
        logits = np.asarray(model(np.array([row], "int32"))[0])
        log_probs = _log_softmax(logits)
        ours = [log_probs[t, i] for t, i in enumerate(row[1:])]
        yield result.log_probs, ours, _scale(logits, ours)


def test_gpt2_scores_equal_tfattns(gpt2_export):
    """Rows start with BOS (read as `<|endoftext|>`) and hold
    `<|endoftext|>` inside too."""
    model, pieces, generator, _ = gpt2_export
    rng = np.random.default_rng(2)
    rows = [[BOS_ID] + row for row in _rows(rng, 4, len(pieces), (6, 3))]
    rows.append([BOS_ID, 7, 9, EOS_ID, 11, 12])
    terms = _terms(gpt2_fx.LAYERS, gpt2_fx.WIDTH, gpt2_fx.FFN,
                   max(len(row) for row in rows), len(pieces),
                   final_norms=1)
    for theirs, ours, scale in _generator_scores(model, pieces, generator,
                                                 rows):
        bounds.assert_close(theirs, ours, terms=terms, scale=scale)


def test_gpt2_greedy_continuations_are_tfattns(gpt2_export):
    model, pieces, generator, _ = gpt2_export
    rng = np.random.default_rng(3)
    prompts = [[BOS_ID] + row for row in _rows(rng, 4, len(pieces),
                                                (4, 4, 4))]
    ids = model.generate(prompts, max_new_tokens=12, sampler="greedy",
                         stop_token_ids=None, jit_compile=False)
    ids = np.asarray(ids[0] if isinstance(ids, tuple) else ids).tolist()
    results = generator.generate_batch(
        [[pieces[i] for i in row] for row in prompts], max_length=12,
        sampling_topk=1, include_prompt_in_result=False,
        end_token=[], return_scores=False)
    for ours, result in zip(ids, results):
        assert result.sequences_ids[0] == ours[:12]
        assert not set(ours) & {PAD_ID, 1, BOS_ID}


def test_checkpoint_pieces_keep_tfattns_ids(marian_export, gpt2_export):
    for pieces in (marian_export[1], gpt2_export[1]):
        assert len(set(pieces)) == len(pieces)
    marian_pieces = marian_export[1]
    assert (marian_pieces[BOS_ID], marian_pieces[EOS_ID],
            marian_pieces[PAD_ID]) == ("<pad>", "</s>", "<blank>")
    gpt2_pieces = gpt2_export[1]
    vocab, _ = gpt2_fx.vocabulary()
    assert gpt2_pieces[EOS_ID] == "<|endoftext|>"
    assert gpt2_pieces[4:] == sorted(
        (t for t in vocab if t != "<|endoftext|>"), key=vocab.get)


def test_checkpoint_pieces_refuse_another_tokenizer():
    with pytest.raises(ValueError, match="`tokenizer`.*str"):
        ctranslate2_spec.checkpoint_pieces("vocab.json")


def test_checkpoint_export_is_atomic_and_quantizes(gpt2_export, tmp_path):
    model, _, _, tokenizer = gpt2_export
    sizes = {}
    for weights in ("float32", "int8"):
        path = ct2_export.checkpoint_to_ctranslate2(
            model, tokenizer, tmp_path / weights,
            quantization=None if weights == "float32" else weights)
        assert {"model.bin", "config.json"} <= set(os.listdir(path))
        sizes[weights] = os.path.getsize(os.path.join(path, "model.bin"))
    assert sizes["int8"] < 0.5 * sizes["float32"]
    with pytest.raises(FileExistsError, match="int8"):
        ct2_export.checkpoint_to_ctranslate2(model, tokenizer, path)
    assert sorted(os.listdir(tmp_path)) == ["float32", "int8"]


@pytest.mark.parametrize("arguments, match", [
    (dict(quantization="int4"), "quantization"),
    (dict(overwrite="yes"), "overwrite"),
    (dict(model="a model"), "model"),
    (dict(tokenizer="vocab.json"), "tokenizer"),
])
def test_checkpoint_export_refuses_bad_arguments_by_name(
        gpt2_export, tmp_path, arguments, match):
    model, _, _, tokenizer = gpt2_export
    arguments = dict(dict(model=model, tokenizer=tokenizer,
                          path=tmp_path / "ct2"), **arguments)
    with pytest.raises(ValueError, match=f"`{match}`"):
        ct2_export.checkpoint_to_ctranslate2(**arguments)
    assert not os.listdir(tmp_path)


# ----------------------------------------------------------------------
# Each option and activation on its own, on random tfattn models.

VOCAB = 24
PIECES = [f"p{i}" for i in range(VOCAB)]


def _random_lm(**kwargs):
    lm = tfattn.CausalLM(VOCAB, num_layers=1, num_units=16, num_heads=2,
                         ffn_units=32, max_length=16, dropout_rate=0.0,
                         normalize_first=True, **kwargs)
    lm(np.ones((1, 3), "int32"))
    rng = np.random.default_rng(4)
    for weight in lm.weights:
        weight.assign(weight.numpy() + rng.normal(
            0, 0.3, weight.shape).astype("float32"))
    return lm


@pytest.mark.parametrize("options", [
    dict(activation="gelu"), dict(activation="gelu_tanh"),
    dict(activation="silu"), dict(activation="swish"),
    dict(bos_is_eos=True), dict(masked_output_ids=(5, 9)),
    dict(bos_is_eos=True, masked_output_ids=(BOS_ID,))])
def test_each_option_scores_equal(options, tmp_path):
    """`bos_is_eos` alone keeps BOS's own logit column (only its input
    row reads EOS's)."""
    lm = _random_lm(**options)
    spec = ctranslate2_spec.decoder_only_spec(lm, PIECES)
    generator = ctranslate2.Generator(_saved(spec, tmp_path / "ct2"))
    rows = [[BOS_ID, 4, 5, BOS_ID, 7], [BOS_ID, EOS_ID, 9, 10]]
    terms = _terms(1, 16, 32, max(len(row) for row in rows), VOCAB,
                   final_norms=1)
    for theirs, ours, scale in _generator_scores(lm, PIECES, generator,
                                                 rows):
        masked = np.array(ours) < -1e8
        bounds.assert_close(np.array(theirs)[~masked],
                            np.array(ours)[~masked], terms=terms,
                            scale=scale)
        assert (np.array(theirs)[masked] < -1e8).all()


@pytest.mark.parametrize("options", [
    dict(activation="gelu"), dict(activation="silu"),
    dict(final_logits_bias=True), dict(suppress_bos=True),
    dict(final_logits_bias=True, suppress_bos=True, activation="swish",
         normalize_first=True)])
def test_each_translation_option_scores_equal(options, tmp_path):
    """With `suppress_bos`, against the distribution tfattn's searches
    draw from (padding and BOS masked)."""
    model = tfattn.Transformer(VOCAB, num_layers=1, num_units=16,
                               num_heads=2, ffn_units=32, max_length=16,
                               dropout_rate=0.0, **options)
    model((np.ones((1, 3), "int32"), np.ones((1, 2), "int32")))
    rng = np.random.default_rng(5)
    for weight in model.weights:
        weight.assign(weight.numpy() + rng.normal(
            0, 0.3, weight.shape).astype("float32"))
    spec = ctranslate2_spec.transformer_spec(model, PIECES)
    translator = ctranslate2.Translator(_saved(spec, tmp_path / "ct2"))
    result = translator.score_batch([["p5", "p6"]], [["p7", "p8"]])[0]
    logits = np.array(model((np.array([[5, 6, EOS_ID]], "int32"),
                             np.array([[BOS_ID, 7, 8]], "int32"))))
    if options.get("suppress_bos"):
        logits[..., [PAD_ID, BOS_ID]] = MASKED
    log_probs = _log_softmax(logits[0])
    ours = [log_probs[t, i] for t, i in enumerate((7, 8, EOS_ID))]
    terms = _terms(1 + 2 * 1, 16, 32, 3, VOCAB,
                   final_norms=2 * bool(options.get("normalize_first")))
    bounds.assert_close(result.log_probs, ours, terms=terms,
                        scale=_scale(logits, ours))


def test_an_activation_ctranslate2_lacks_is_refused(tmp_path):
    lm = _random_lm(activation="elu")
    with pytest.raises(ctranslate2_spec.NotExportable, match="'elu'"):
        ctranslate2_spec.decoder_only_spec(lm, PIECES)
    assert not os.listdir(tmp_path)
