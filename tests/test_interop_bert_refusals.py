"""What `tfattn.interop.bert` refuses, each by name: a directory or file
that is not there, another model type or architecture, an option tfattn
does not implement, a missing, extra or misshapen weight, an untied
decoder, a vocabulary that disagrees with the configuration; the writers'
refusals of a model BERT (or keras-hub's BertBackbone) cannot hold; and
the new model arguments' and the tokenizer's refusals."""

import json
import os
import shutil

import numpy as np
import pytest

from tests import bert_fixtures as fx
from tfattn.interop import bert
from tfattn.interop.wordpiece_tokenizer import WordPieceTokenizer
from tfattn.models.classifier import SequenceClassifier
from tfattn.models.masked_lm import MaskedLM
from tfattn.models.text_encoder import TextEncoder


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """(a valid HF directory, a valid keras-hub preset, its tensors)."""
    hub = fx.hub_masked_lm()
    root = tmp_path_factory.mktemp("bert_refusals")
    hf, preset = str(root / "hf"), str(root / "preset")
    tensors = fx.hf_tensors(hub)
    fx.write_huggingface(hf, tensors, fx.hf_config())
    hub.save_to_preset(preset)
    return hf, preset, tensors


def _variant(checkpoint, tmp_path, config=None, tensors=None, vocab=None):
    """A copy of the HF checkpoint with config options or tensors
    replaced (a None tensor is removed)."""
    weights = dict(checkpoint[2])
    for name, value in (tensors or {}).items():
        if value is None:
            weights.pop(name)
        else:
            weights[name] = value
    directory = str(tmp_path / "variant")
    fx.write_huggingface(directory, weights,
                         dict(fx.hf_config(), **(config or {})), vocab)
    return directory


def test_a_directory_that_does_not_exist(tmp_path):
    missing = str(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match="nowhere.*does not exist"):
        bert.from_huggingface(missing)
    with pytest.raises(FileNotFoundError, match="nowhere.*does not exist"):
        bert.from_keras_hub(missing)


@pytest.mark.parametrize("file, what", [
    ("config.json", "configuration"), ("vocab.txt", "vocabulary"),
    ("model.safetensors", "neither")])
def test_a_missing_file_is_named(checkpoint, tmp_path, file, what):
    directory = str(tmp_path / "copy")
    shutil.copytree(checkpoint[0], directory)
    os.remove(os.path.join(directory, file))
    with pytest.raises(FileNotFoundError, match=what) as error:
        bert.from_huggingface(directory)
    assert file in str(error.value) or file == "model.safetensors"


@pytest.mark.parametrize("file", [
    "assets/tokenizer/vocabulary.txt", "model.weights.h5", "config.json"])
def test_a_missing_preset_file_is_named(checkpoint, tmp_path, file):
    directory = str(tmp_path / "preset")
    shutil.copytree(checkpoint[1], directory)
    os.remove(os.path.join(directory, file))
    with pytest.raises(FileNotFoundError, match=os.path.basename(file)):
        bert.from_keras_hub(directory)


@pytest.mark.parametrize("file, name", [
    ("config.json", "keras_hub>GPT2Backbone"),
    ("task.json", "keras_hub>BertTextEmbedder")])
def test_another_keras_hub_model_is_refused(checkpoint, tmp_path, file,
                                            name):
    directory = str(tmp_path / "preset")
    shutil.copytree(checkpoint[1], directory)
    path = os.path.join(directory, file)
    with open(path) as f:
        saved = json.load(f)
    saved["registered_name"] = name
    with open(path, "w") as f:
        json.dump(saved, f)
    with pytest.raises(ValueError, match=f"registered_name='{name}'.*"
                       f"{file}|{file}.*registered_name='{name}'"):
        bert.from_keras_hub(directory)


@pytest.mark.parametrize("option, value, message", [
    ("model_type", "roberta", "model_type='roberta'.*'bert' only"),
    ("architectures", ["BertForQuestionAnswering"],
     "'BertForQuestionAnswering'"),
    ("position_embedding_type", "relative_key",
     "position_embedding_type='relative_key'.*'absolute' only"),
    ("is_decoder", True, "is_decoder=True.*False only"),
    ("add_cross_attention", True, "add_cross_attention=True"),
    ("hidden_act", "relu", "hidden_act='relu'"),
    ("type_vocab_size", 0, "type_vocab_size=0"),
    ("vocab_size", 200, "vocab_size=200 but vocab.txt has 118"),
    ("pad_token_id", 3, r"pad_token_id=3 but vocab.txt's \[PAD\] is 0"),
])
def test_an_option_tfattn_does_not_implement_is_named(
        checkpoint, tmp_path, option, value, message):
    directory = _variant(checkpoint, tmp_path, config={option: value})
    with pytest.raises(ValueError, match=message) as error:
        bert.from_huggingface(directory)
    assert "config.json" in str(error.value)


def test_a_regression_head_is_refused(checkpoint, tmp_path):
    directory = _variant(checkpoint, tmp_path, config=dict(
        architectures=["BertForSequenceClassification"], num_labels=1,
        id2label={"0": "score"}))
    with pytest.raises(ValueError, match="1 label.*regression"):
        bert.from_huggingface(directory)


@pytest.mark.parametrize("change, message", [
    ({"cls.predictions.bias": None},
     r"missing weights \['cls.predictions.bias'\]"),
    ({"bert.encoder.layer.2.output.dense.bias": np.ones(32, np.float32)},
     r"unexpected weights \['encoder.layer.2.output.dense.bias'\]"),
    ({"bert.encoder.layer.0.attention.self.key.weight":
      np.ones((32, 16), np.float32)},
     r"tensor encoder.layer.0.attention.self.key.weight has shape "
     r"\[32, 16\]; the configuration gives \[32, 32\]"),
    ({"bert.embeddings.token_type_embeddings.weight":
      np.ones((3, 32), np.float32)},
     r"token_type_embeddings.weight has shape \[3, 32\].*\[2, 32\]"),
    ({"cls.predictions.decoder.weight": np.ones((118, 32), np.float32)},
     "cls.predictions.decoder.weight differs from "
     "embeddings.word_embeddings.weight"),
])
def test_a_missing_extra_or_misshapen_weight_is_named(
        checkpoint, tmp_path, change, message):
    directory = _variant(checkpoint, tmp_path, tensors=change)
    with pytest.raises(ValueError, match=message):
        bert.from_huggingface(directory)


def test_a_vocabulary_without_a_special_token_is_named(checkpoint,
                                                       tmp_path):
    vocab = [t if t != "[MASK]" else "[unused9]" for t in fx.vocabulary()]
    directory = _variant(checkpoint, tmp_path, vocab=vocab)
    with pytest.raises(ValueError, match=r"vocabulary.*\['\[MASK\]'\]"):
        bert.from_huggingface(directory)


# --------------------------------------------------------------------------
# Writers.

@pytest.fixture(scope="module")
def imported(checkpoint):
    return bert.from_huggingface(checkpoint[0])


def _tiny(cls=MaskedLM, **kwargs):
    arguments = dict(vocab_size=len(fx.vocabulary()), num_layers=1,
                     num_units=8, num_heads=2, ffn_units=16,
                     positional_encoding="learned", scale_embeddings=False,
                     normalize_embeddings=True, type_vocab_size=2,
                     activation="gelu", encoder_layer_norm_epsilon=1e-12,
                     layer_norm_epsilon=1e-12)
    if cls is SequenceClassifier:
        arguments.pop("layer_norm_epsilon")
        arguments["pooling"] = "pooler"
    arguments.update(kwargs)
    model = cls(**arguments)
    model.build((None, None))
    return model


@pytest.mark.parametrize("cls, change, message", [
    (MaskedLM, dict(scale_embeddings=True), "scale_embeddings=True"),
    (MaskedLM, dict(positional_encoding="sinusoid"),
     "positional_encoding='sinusoid'"),
    (MaskedLM, dict(normalize_embeddings=False),
     "normalize_embeddings=False"),
    (MaskedLM, dict(type_vocab_size=0), "type_vocab_size=0"),
    (MaskedLM, dict(normalize_first=True), "normalize_first=True"),
    (MaskedLM, dict(activation="relu"), "activation='relu'"),
    (MaskedLM, dict(layer_norm_epsilon=1e-5), "one layer_norm_eps"),
    (SequenceClassifier, dict(pooling="first"), "pooling='first'"),
])
def test_a_model_bert_cannot_hold_is_refused(tmp_path, cls, change,
                                             message):
    model = _tiny(cls, **change)
    tokenizer = WordPieceTokenizer(fx.vocabulary())
    with pytest.raises(ValueError, match=message):
        bert.to_huggingface(model, tokenizer, str(tmp_path))
    assert not os.listdir(tmp_path)


def test_writers_refuse_an_unbuilt_model_or_another_tokenizer(imported,
                                                              tmp_path):
    model, tokenizer = imported
    unbuilt = MaskedLM(vocab_size=118, num_layers=1, num_units=8,
                       num_heads=2, ffn_units=16)
    for write in (bert.to_huggingface, bert.to_keras_hub):
        with pytest.raises(ValueError, match="MaskedLM \\(unbuilt\\)"):
            write(unbuilt, tokenizer, str(tmp_path))
        with pytest.raises(ValueError, match="tokenizer is a str"):
            write(model, "vocab.txt", str(tmp_path))
    small = WordPieceTokenizer(fx.vocabulary()[:-1])
    with pytest.raises(ValueError, match="vocab_size=118, the tokenizer 117"):
        bert.to_huggingface(model, small, str(tmp_path))


def test_keras_hub_refuses_what_its_backbone_fixes(checkpoint, tmp_path):
    model, tokenizer = bert.from_huggingface(checkpoint[0])
    model.head_activation = "gelu"  # keras-hub's; its epsilon is 1e-5
    with pytest.raises(ValueError, match="layer_norm_epsilon is 1e-12; "
                       "keras-hub's BERT fixes 1e-05"):
        bert.to_keras_hub(model, tokenizer, str(tmp_path))
    exact = _tiny()
    with pytest.raises(ValueError, match="activation is 'gelu'; keras-hub's "
                       "BERT fixes 'gelu_tanh'"):
        bert.to_keras_hub(exact, WordPieceTokenizer(fx.vocabulary()),
                          str(tmp_path))


# --------------------------------------------------------------------------
# The new model arguments and the tokenizer.

@pytest.mark.parametrize("kwargs, name", [
    (dict(type_vocab_size=-1), "type_vocab_size"),
    (dict(type_vocab_size=2.0), "type_vocab_size"),
    (dict(encoder_layer_norm_epsilon=0.0), "encoder_layer_norm_epsilon"),
    (dict(encoder_layer_norm_epsilon=1), "encoder_layer_norm_epsilon"),
])
def test_new_encoder_arguments_are_checked(kwargs, name):
    with pytest.raises(ValueError, match=f"`{name}`"):
        TextEncoder(vocab_size=10, num_layers=1, num_units=8, num_heads=2,
                    ffn_units=8, **kwargs)


def test_segment_ids_are_checked():
    model = _tiny(type_vocab_size=2)
    ids = np.array([[2, 5, 6, 3]])
    for bad, expected in ((np.array([[0, 1, 2, 0]]), "type_vocab_size=2"),
                          (np.array([[0, 1, 0]]), "shape of ids"),
                          (np.array([[0.0, 1.0, 0.0, 0.0]]), "int ids")):
        with pytest.raises(ValueError, match=f"segment_ids.*{expected}"):
            model({"token_ids": ids, "segment_ids": bad})
    plain = _tiny(type_vocab_size=0)
    with pytest.raises(ValueError, match="segment_ids.*type_vocab_size=0"):
        plain({"token_ids": ids, "segment_ids": ids * 0})
    classifier = _tiny(SequenceClassifier)
    with pytest.raises(ValueError, match="`ids`.*'token_ids'"):
        classifier({"segments": ids})


def test_pooling_refuses_an_unknown_choice():
    with pytest.raises(ValueError, match="`pooling`"):
        _tiny(SequenceClassifier, pooling="max")


@pytest.mark.parametrize("vocabulary, lowercase, name, message", [
    (["[PAD]", "[UNK]"], True, "vocabulary", r"\['\[CLS\]'"),
    (fx.vocabulary() + ["the"], True, "vocabulary", "repeating 'the'"),
    ("vocab.txt", True, "vocabulary", "a list of token strings"),
    (fx.vocabulary(), "yes", "lowercase", "a bool"),
])
def test_tokenizer_refusals_name_the_argument(vocabulary, lowercase, name,
                                              message):
    with pytest.raises(ValueError, match=f"`{name}`.*{message}"):
        WordPieceTokenizer(vocabulary, lowercase=lowercase)


def test_tokenizer_refuses_ids_of_another_rank():
    tokenizer = WordPieceTokenizer(fx.vocabulary())
    with pytest.raises(ValueError, match="`ids`"):
        tokenizer.detokenize(np.zeros((1, 2, 3), int))
    with pytest.raises(ValueError, match="`text`"):
        tokenizer.tokenize([["a"]])
