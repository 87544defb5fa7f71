"""Tests of tfattn.interop.marian: Hugging Face Marian (OPUS-MT)
directories <-> tfattn.Transformer.

The checkpoint is a tiny random `MarianMTModel` directory written here
(2 + 2 layers, d_model 32, 4 heads, FFN 64, SentencePiece models trained
here on a few multilingual sentences, vocab.json with Marian's special
ids, config.json with MarianConfig's names, model.safetensors with
transformers' tensor names). The oracle is tests/reference_numpy_marian.py
(a NumPy forward pass written from transformers' modeling_marian.py, in
Marian's ids); the tokenizer's oracle is SentencePiece itself plus a
vocab.json lookup written here.
"""

import json
import os
import shutil

import keras
import numpy as np
import pytest

import tfattn
from tests import bounds
from tests import marian_fixtures as fx
from tests import reference_numpy_marian as ref
from tfattn.decoding import samplers
from tfattn.interop import marian
from tfattn.layers.positional_encoding import PositionalEncoding
from tfattn.layers.positional_encoding import sinusoid_halves_table
from tfattn.utils.ids import BOS_ID
from tfattn.utils.ids import EOS_ID


pytestmark = pytest.mark.filterwarnings(
    "ignore:You are using a softmax over axis")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return fx.write_checkpoint(tmp_path_factory)


@pytest.fixture(scope="module")
def loaded(checkpoint):
    return marian.from_huggingface(checkpoint[0])


def _marian_terms(config, length):
    """To one logit of the checkpoint over `length` tokens: the encoder's
    and the decoder's layers (a decoder layer's cross-attention counts as
    a block of its own), the tied projection and the vocabulary."""
    return bounds.stack_terms(
        config["encoder_layers"] + 2 * config["decoder_layers"],
        config["d_model"], config["encoder_ffn_dim"], length,
        config["vocab_size"])


def _assert_logits_equal_the_reference(model, tokenizer, weights, config,
                                       **ref_kw):
    """tfattn's teacher-forced logits against the NumPy reference's
    (`fx.max_logit_difference`'s comparison) at the targets' real
    positions."""
    source_marian, source, _ = fx.id_batches(tokenizer, fx.SAMPLE[:4])
    target_marian, target_in, lengths = fx.teacher_forced(
        tokenizer, ["Die Katze läuft.", "Ein Hund!", "Größe", "Park"])
    expected = ref.forward(weights, config, source_marian, target_marian,
                           **ref_kw)
    logits = np.asarray(model((source, target_in)))
    ours = logits[..., tokenizer.vocabulary.tfattn_of_marian]
    keep = np.arange(target_in.shape[1])[None, :] < lengths[:, None]
    length = max(source.shape[1], target_in.shape[1])
    bounds.assert_close(ours[keep], expected[keep],
                        terms=_marian_terms(config, length))
    assert np.abs(expected[keep]).max() > 1.0  # not a vacuous comparison


# ----------------------------------------------------------------------
# Model options, each on its own.

@pytest.mark.parametrize("length, width", [(7, 32), (5, 7), (3, 2)])
def test_sinusoid_halves_table_is_marians(length, width):
    # Both float64 formulas, each rounded once to float32.
    bounds.assert_close(sinusoid_halves_table(length, width),
                        ref.positions(length, width), terms=1)
    layer = PositionalEncoding("sinusoid_halves", max_length=length)
    x = np.random.default_rng(1).normal(size=(2, length, width))
    # x's rounding to float32, then the sum.
    bounds.assert_close(np.asarray(layer(x.astype("float32"))),
                        x + ref.positions(length, width), terms=2)


def _variant(model, weights=None, **options):
    """`model` rebuilt with `options` changed, same weights."""
    other = tfattn.Transformer.from_config(dict(model.get_config(),
                                                **options))
    other.build({"source": (None, None), "target_in": (None, None)})
    other.set_weights(model.get_weights() if weights is None else weights)
    return other


@pytest.mark.parametrize("options, config_change, ref_kw", [
    ({}, {}, {}),
    ({"activation": "relu"}, {"activation_function": "relu"}, {}),
    ({"activation": "gelu"}, {"activation_function": "gelu"}, {}),
    ({"scale_embeddings": False}, {"scale_embedding": False}, {}),
    ({"layer_norm_epsilon": 0.5}, {}, {"eps": 0.5}),
])
def test_each_option_against_numpy(checkpoint, loaded, options,
                                   config_change, ref_kw):
    _, config, weights, _ = checkpoint
    model, tokenizer = loaded
    model = _variant(model, **options) if options else model
    _assert_logits_equal_the_reference(
        model, tokenizer, weights, dict(config, **config_change), **ref_kw)


def test_final_logits_bias_is_added_and_not_trained(loaded):
    model, _ = loaded
    assert [w.name for w in model.non_trainable_weights] == [
        "final_logits_bias"]
    bias = model.logits_bias.numpy()
    with_bias = np.asarray(model((fx.SOURCE, fx.TARGET_IN)))
    zero = np.asarray(_variant(model, final_logits_bias=False, weights=[
        w.numpy() for w in model.weights if w is not model.logits_bias])((
            fx.SOURCE, fx.TARGET_IN)))
    # The same logits, with the bias added (1) and taken off again (1),
    # each rounded at the logits' magnitude.
    bounds.assert_close(with_bias - zero, np.broadcast_to(
        bias, with_bias.shape), terms=2, scale=np.abs(with_bias).max())


def test_suppress_bos_masks_the_start_token(loaded):
    model, _ = loaded
    memory, keep = model.encode(fx.SOURCE)
    for suppress in (True, False):
        variant = model if suppress else _variant(model, suppress_bos=False)
        cache = variant.init_decode_cache(memory, keep, 4)
        logits, _ = variant.decode_step(np.array([BOS_ID], np.int32),
                                        np.int32(0), cache)
        logits = np.asarray(logits)
        assert logits[0, 0] == samplers.MASKED_LOGIT
        assert (logits[0, BOS_ID] == samplers.MASKED_LOGIT) == suppress


def test_options_round_trip_the_config(loaded, tmp_path):
    model, _ = loaded
    config = model.get_config()
    assert (config["positional_encoding"], config["layer_norm_epsilon"],
            config["activation"], config["scale_embeddings"],
            config["final_logits_bias"], config["suppress_bos"]) == (
        "sinusoid_halves", 1e-5, "silu", True, True, True)
    model.save(str(tmp_path / "marian.keras"))
    again = keras.saving.load_model(str(tmp_path / "marian.keras"))
    bounds.assert_close(np.asarray(again((fx.SOURCE, fx.TARGET_IN))),
                        np.asarray(model((fx.SOURCE, fx.TARGET_IN))),
                        terms=_marian_terms(dict(
                            fx.CONFIG, vocab_size=model.source_vocab_size),
                            fx.SOURCE.shape[1]))


@pytest.mark.parametrize("name, value", [
    ("scale_embeddings", 1), ("final_logits_bias", "yes"),
    ("suppress_bos", None), ("layer_norm_epsilon", -1.0),
    ("activation", "no_such_activation")])
def test_bad_option_values_are_refused(name, value):
    with pytest.raises(ValueError, match=f"`{name}`"):
        tfattn.Transformer(20, **{name: value})


# ----------------------------------------------------------------------
# The vocabulary and the tokenizer.

def test_vocabulary_permutation(loaded):
    _, tokenizer = loaded
    vocab = tokenizer.vocabulary
    size = vocab.marian_size
    assert vocab.tfattn_size == size + 1
    assert list(vocab.marian_of_tfattn[:4]) == [size - 1, 1, size - 1, 0]
    assert list(vocab.to_tfattn([0, 1, size - 1, 2, size - 2])) == [
        EOS_ID, 1, BOS_ID, 4, size]
    everything = np.arange(size)
    np.testing.assert_array_equal(
        vocab.to_marian(vocab.to_tfattn(everything)), everything)


def test_tokenizer_matches_sentencepiece_and_vocab_json(checkpoint, loaded):
    _, _, _, files = checkpoint
    _, tokenizer = loaded
    vocab = json.loads(files["vocab.json"])
    for target, name in ((False, "source.spm"), (True, "target.spm")):
        processor = fx.spm_processor(files[name])
        for text in fx.SAMPLE + ["Собака"]:
            pieces = processor.encode(text, out_type=str)
            expected = [vocab.get(p, vocab["<unk>"]) for p in pieces] + [
                vocab["</s>"]]
            got = tokenizer.vocabulary.to_marian(
                tokenizer.encode(text, target=target))
            assert got.tolist() == expected, text
    assert vocab["<unk>"] in tokenizer.vocabulary.to_marian(
        tokenizer.encode("Собака")).tolist()  # `fx.left_out_pieces`


def test_tokenizer_language_code_and_special_tokens(checkpoint, loaded):
    _, _, _, files = checkpoint
    _, tokenizer = loaded
    vocab = json.loads(files["vocab.json"])
    processor = fx.spm_processor(files["source.spm"])
    ids = tokenizer.vocabulary.to_marian(
        tokenizer.encode(">>fra<< Le chat</s>")).tolist()
    pieces = processor.encode(" Le chat", out_type=str)
    assert ids == [vocab[">>fra<<"]] + [vocab.get(p, 1) for p in pieces] + [
        0, 0]


def test_tokenizer_decodes_what_it_encodes(checkpoint, loaded):
    _, _, _, files = checkpoint
    _, tokenizer = loaded
    processor = fx.spm_processor(files["target.spm"])
    for text in fx.TARGET_TEXTS + ["Größe"]:
        ids = tokenizer.encode(text, target=True) + [0, 0]
        expected = processor.decode_pieces(processor.encode(
            text, out_type=str)).replace("\u2581", " ").strip()
        assert tokenizer.decode(ids) == expected
    assert tokenizer.decode([BOS_ID, 1, EOS_ID],
                            skip_special_tokens=False) == (
        "<pad> <unk> </s>")


# ----------------------------------------------------------------------
# Equal to the source.

def test_logits_equal_the_numpy_reference(checkpoint, loaded):
    _, config, weights, _ = checkpoint
    model, tokenizer = loaded
    _assert_logits_equal_the_reference(model, tokenizer, weights, config)


def test_greedy_equals_the_numpy_greedy_loop(checkpoint, tmp_path):
    """On the checkpoint with padding's logit bias +100 (generation must
    skip it: Marian's `bad_words_ids`, tfattn's `suppress_bos`) and eos's
    +4.25 (some rows stop at once, others run to the length limit)."""
    _, config, weights, _ = checkpoint
    bias = weights["final_logits_bias"].copy()
    bias[0, config["pad_token_id"]] += 100.0
    bias[0, config["eos_token_id"]] += 4.25
    weights = dict(weights, final_logits_bias=bias)
    model, tokenizer = marian.from_huggingface(fx.changed_copy(
        checkpoint, tmp_path, weights=weights))
    source_marian, source, _ = fx.id_batches(tokenizer, fx.SAMPLE[:4])
    expected = ref.greedy(weights, config, source_marian, max_length=12)
    assert sorted({len(row) for row in expected}) == [1, 11]
    ids, _ = model.generate(source, max_new_tokens=11, sampler="greedy",
                            extra_length=64, jit_compile=False)
    for row, want in zip(ids, expected):
        row = list(row)
        if EOS_ID in row:
            row = row[:row.index(EOS_ID) + 1]
        assert tokenizer.vocabulary.to_marian(row).tolist() == want
    beam, _ = model.generate(source, max_new_tokens=11, extra_length=64,
                             sampler=samplers.BeamSampler(beam_size=1),
                             jit_compile=False)
    np.testing.assert_array_equal(beam, ids)
    wide, _ = model.generate(source, max_new_tokens=11, extra_length=64,
                             jit_compile=False)
    assert wide.shape == ids.shape and not np.isin(wide[:, 0],
                                                   [0, BOS_ID]).any()
    unsuppressed = _variant(model, suppress_bos=False)
    first, _ = unsuppressed.generate(source, max_new_tokens=2,
                                     sampler="greedy", jit_compile=False)
    assert (first[:, 0] == BOS_ID).all()


def test_round_trip_is_exact(checkpoint, loaded, tmp_path):
    directory = checkpoint[0]
    model, tokenizer = loaded
    out = str(tmp_path / "back")
    marian.to_huggingface(model, tokenizer, out)
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name), "rb") as a, open(
                os.path.join(out, name), "rb") as b:
            assert a.read() == b.read(), name
    assert sorted(os.listdir(out)) == sorted(os.listdir(directory))
    again, _ = marian.from_huggingface(out)
    for ours, theirs in zip(model.weights, again.weights):
        np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))


def test_sharded_and_optional_tensors_read_the_same(checkpoint, loaded,
                                                    tmp_path):
    directory, config, weights, files = checkpoint
    names = sorted(weights)
    shards = {"model-00001-of-00002.safetensors": names[::2],
              "model-00002-of-00002.safetensors": names[1::2]}
    out = str(tmp_path / "sharded")
    shutil.copytree(directory, out)
    os.remove(os.path.join(out, "model.safetensors"))
    for shard, keys in shards.items():
        fx.safetensors_numpy.save_file({k: weights[k] for k in keys},
                                    os.path.join(out, shard))
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"weight_map": {k: s for s, ks in shards.items()
                                  for k in ks}}, f)
    sharded, _ = marian.from_huggingface(out)
    for ours, theirs in zip(loaded[0].weights, sharded.weights):
        np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))
    extra = dict(weights, **{
        "lm_head.weight": weights["model.shared.weight"],
        "model.encoder.embed_positions.weight": ref.positions(64, 32)})
    fx.write_directory(str(tmp_path / "extra"), config, extra, files)
    marian.from_huggingface(str(tmp_path / "extra"))


