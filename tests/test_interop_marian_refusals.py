"""Refusals of tfattn.interop.marian: Hugging Face Marian (OPUS-MT)
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

import numpy as np
import pytest

import tfattn
from tests import marian_fixtures as fx
from tfattn.interop import marian


pytestmark = pytest.mark.filterwarnings(
    "ignore:You are using a softmax over axis")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return fx.write_checkpoint(tmp_path_factory)


@pytest.fixture(scope="module")
def loaded(checkpoint):
    return marian.from_huggingface(checkpoint[0])



# ----------------------------------------------------------------------
# Refusals.



@pytest.mark.parametrize("change, pattern", [
    ({"model_type": "bart"}, "'model_type' is 'bart'"),
    ({"normalize_before": True}, "'normalize_before' is True.*False"),
    ({"add_bias_logits": True}, "'add_bias_logits' is True.*False"),
    ({"static_position_embeddings": False},
     "'static_position_embeddings' is False.*True"),
    ({"activation_function": "gelu_new"},
     "'activation_function' is 'gelu_new'"),
    ({"share_encoder_decoder_embeddings": False},
     "'share_encoder_decoder_embeddings' is False"),
    ({"decoder_layers": 3}, "'encoder_layers' = 2 and 'decoder_layers' = 3"),
    ({"activation_dropout": 0.1}, "'activation_dropout' is 0.1"),
    ({"pad_token_id": 1}, "'pad_token_id' is 1; vocab.json's '<pad>'"),
    ({"bad_words_ids": [[3]]}, r"'bad_words_ids' is \[\[3\]\]"),
    ({"vocab_size": 7}, "'vocab_size' \\(7\\)"),
])
def test_config_refusals(checkpoint, tmp_path, change, pattern):
    with pytest.raises(ValueError, match=pattern):
        marian.from_huggingface(fx.changed_copy(checkpoint, tmp_path,
                                         config=change))


_FC1 = "model.encoder.layers.0.fc1.weight"


@pytest.mark.parametrize("change, pattern", [
    (lambda w: {k: v for k, v in w.items()
                if k != "model.decoder.layers.1.fc1.bias"},
     "lacks tensor.*model.decoder.layers.1.fc1.bias"),
    (lambda w: dict(w, **{"model.encoder.layer_norm.weight": w[
        "model.encoder.layers.0.final_layer_norm.weight"]}),
     "does not use.*model.encoder.layer_norm.weight"),
    (lambda w: dict(w, **{_FC1: w[_FC1].T.copy()}),
     fr"{_FC1}' has shape \(32, 64\);.* give \(64, 32\)"),
    (lambda w: dict(w, **{"lm_head.weight": w["model.shared.weight"] + 1}),
     "'lm_head.weight' differs"),
    (lambda w: dict(w, **{"model.decoder.embed_positions.weight":
                          np.zeros((64, 32), np.float32)}),
     "embed_positions.weight' is not Marian's sinusoid"),
])
def test_tensor_refusals(checkpoint, tmp_path, change, pattern):
    with pytest.raises(ValueError, match=pattern):
        marian.from_huggingface(fx.changed_copy(checkpoint, tmp_path,
                                         weights=change(checkpoint[2])))


def test_file_refusals(checkpoint, tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        marian.from_huggingface(str(tmp_path / "nowhere"))
    for name in ("target.spm", "vocab.json", "tokenizer_config.json",
                 "config.json", "model.safetensors"):
        with pytest.raises(FileNotFoundError, match=name.replace(".", r"\.")):
            marian.from_huggingface(fx.changed_copy(checkpoint, tmp_path,
                                             drop=name))
    separate = json.dumps({"separate_vocabs": True}).encode()
    with pytest.raises(ValueError, match="'separate_vocabs' is true"):
        marian.from_huggingface(fx.changed_copy(
            checkpoint, tmp_path,
            files={"tokenizer_config.json": separate}))


def test_writing_a_model_of_another_layout_is_refused(loaded, tmp_path):
    _, tokenizer = loaded
    other = tfattn.Transformer(tokenizer.vocabulary.tfattn_size,
                               num_layers=1, num_units=8, num_heads=2,
                               ffn_units=16, final_logits_bias=True)
    with pytest.raises(ValueError, match="'positional_encoding' is "
                       "'sinusoid'; a Marian checkpoint needs "
                       "'sinusoid_halves'"):
        marian.to_huggingface(other, tokenizer, str(tmp_path / "x"))
