"""What `tfattn.interop.gpt2` and `hf_files` refuse, each by name: a
directory or file that is not there, another model type, an option tfattn
does not implement, a missing, extra or misshapen weight, a tokenizer that
disagrees with the model; and the writers' refusals of a model GPT-2 (or
keras-hub's GPT2Backbone) cannot hold."""

import json
import os
import shutil

import numpy as np
import pytest

from tests import gpt2_fixtures as fx
from tfattn.interop import gpt2
from tfattn.interop import hf_files
from tfattn.interop.gpt2_tokenizer import GPT2Tokenizer


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """(a valid HF directory, a valid keras-hub preset, its tensors)."""
    hub = fx.hub_model()
    root = tmp_path_factory.mktemp("gpt2_refusals")
    hf, preset = str(root / "hf"), str(root / "preset")
    vocab, merges = fx.vocabulary()
    tensors = fx.hf_tensors(hub.backbone)
    fx.write_huggingface(hf, tensors, fx.hf_config(len(vocab)), vocab,
                         merges)
    hub.save_to_preset(preset)
    return hf, preset, tensors


def _variant(checkpoint, tmp_path, config=None, tensors=None, shards=1):
    """A copy of the HF checkpoint with config options or tensors
    replaced (a None tensor is removed)."""
    _, _, base = checkpoint
    vocab, merges = fx.vocabulary()
    weights = dict(base)
    for name, value in (tensors or {}).items():
        if value is None:
            weights.pop(name)
        else:
            weights[name] = value
    directory = str(tmp_path / "variant")
    fx.write_huggingface(directory, weights,
                         dict(fx.hf_config(len(vocab)), **(config or {})),
                         vocab,
                         merges, shards=shards)
    return directory


# --------------------------------------------------------------------------
# Files.

def test_a_directory_that_does_not_exist(tmp_path):
    missing = str(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match="nowhere.*does not exist"):
        gpt2.from_huggingface(missing)
    with pytest.raises(FileNotFoundError, match="nowhere.*does not exist"):
        gpt2.from_keras_hub(missing)


@pytest.mark.parametrize("file, what", [
    ("config.json", "configuration"), ("vocab.json", "vocabulary"),
    ("merges.txt", "merge rules"), ("model.safetensors", "neither")])
def test_a_missing_file_is_named(checkpoint, tmp_path, file, what):
    directory = str(tmp_path / "copy")
    shutil.copytree(checkpoint[0], directory)
    os.remove(os.path.join(directory, file))
    if file == "model.safetensors":
        open(os.path.join(directory, "pytorch_model.bin"), "wb").close()
    with pytest.raises(FileNotFoundError, match=what) as error:
        gpt2.from_huggingface(directory)
    if file == "model.safetensors":
        assert "pytorch_model.bin" in str(error.value)  # the hint
    else:
        assert file in str(error.value)


@pytest.mark.parametrize("file", [
    "config.json", "model.weights.h5", "assets/tokenizer/vocabulary.json",
    "assets/tokenizer/merges.txt"])
def test_a_missing_preset_file_is_named(checkpoint, tmp_path, file):
    directory = str(tmp_path / "copy")
    shutil.copytree(checkpoint[1], directory)
    os.remove(os.path.join(directory, file))
    with pytest.raises(FileNotFoundError, match=file.replace(".", r"\.")):
        gpt2.from_keras_hub(directory)


def test_another_keras_hub_backbone_is_refused(checkpoint, tmp_path):
    directory = str(tmp_path / "copy")
    shutil.copytree(checkpoint[1], directory)
    path = os.path.join(directory, "config.json")
    with open(path) as f:
        config = json.load(f)
    config["registered_name"] = "keras_hub>BertBackbone"
    with open(path, "w") as f:
        json.dump(config, f)
    with pytest.raises(ValueError, match="registered_name="
                       "'keras_hub>BertBackbone'.*GPT2Backbone"):
        gpt2.from_keras_hub(directory)


def test_config_json_that_does_not_parse(tmp_path):
    with open(tmp_path / "config.json", "w") as f:
        f.write("{not json")
    with pytest.raises(ValueError, match="config.json.*not valid JSON"):
        hf_files.read_config(str(tmp_path))
    with open(tmp_path / "config.json", "w") as f:
        f.write("[1, 2]")
    with pytest.raises(ValueError, match="list, not a JSON object"):
        hf_files.read_config(str(tmp_path))


def test_a_sharded_index_that_disagrees_with_its_shards(checkpoint,
                                                        tmp_path):
    directory = _variant(checkpoint, tmp_path, shards=2)
    index = os.path.join(directory, "model.safetensors.index.json")
    with open(index) as f:
        data = json.load(f)
    data["weight_map"]["h.9.ln_1.weight"] = "model-00001-of-00002.safetensors"
    with open(index, "w") as f:
        json.dump(data, f)
    with pytest.raises(ValueError, match="'h.9.ln_1.weight' in "
                       "'model-00001-of-00002.safetensors'"):
        hf_files.read_tensors(directory)
    os.remove(os.path.join(directory, "model-00002-of-00002.safetensors"))
    with pytest.raises(FileNotFoundError,
                       match="model-00002-of-00002.safetensors.*shard"):
        hf_files.read_tensors(directory)


def test_a_weights_file_that_is_not_safetensors(checkpoint, tmp_path):
    directory = str(tmp_path / "copy")
    shutil.copytree(checkpoint[0], directory)
    with open(os.path.join(directory, "model.safetensors"), "wb") as f:
        f.write(b"\x00" * 16)
    with pytest.raises(ValueError, match="could not be read as safetensors"):
        gpt2.from_huggingface(directory)


# --------------------------------------------------------------------------
# The configuration.

@pytest.mark.parametrize("option, value, message", [
    ("model_type", "bert", "model_type='bert'.*'gpt2' only"),
    ("architectures", ["GPT2ForSequenceClassification"],
     "'GPT2ForSequenceClassification'"),
    ("scale_attn_by_inverse_layer_idx", True,
     "scale_attn_by_inverse_layer_idx=True.*False only"),
    ("reorder_and_upcast_attn", True, "reorder_and_upcast_attn=True"),
    ("add_cross_attention", True, "add_cross_attention=True"),
    ("scale_attn_weights", False, "scale_attn_weights=False"),
    ("tie_word_embeddings", False, "tie_word_embeddings=False"),
    ("activation_function", "silu", "activation_function='silu'"),
    ("embd_pdrop", 0.2, "embd_pdrop=0.2 and resid_pdrop=0.0"),
    ("vocab_size", 300, "vocab_size=300 but the tokenizer has 266"),
    ("eos_token_id", 0, "eos_token_id=0 but the tokenizer's "
     r"<\|endoftext\|> is 265"),
])
def test_an_option_tfattn_does_not_implement_is_named(
        checkpoint, tmp_path, option, value, message):
    directory = _variant(checkpoint, tmp_path, config={option: value})
    with pytest.raises(ValueError, match=message) as error:
        gpt2.from_huggingface(directory)
    assert "config.json" in str(error.value)


def test_gelu_and_relu_checkpoints_are_read(checkpoint, tmp_path):
    for name, ours in (("gelu", "gelu"), ("gelu_pytorch_tanh", "gelu_tanh")):
        directory = _variant(checkpoint, tmp_path,
                             config={"activation_function": name})
        model, _ = gpt2.from_huggingface(directory)
        assert model.activation == ours
        shutil.rmtree(directory)


# --------------------------------------------------------------------------
# The weights.

@pytest.mark.parametrize("change, message", [
    ({"h.1.ln_2.bias": None}, r"missing weights \['h.1.ln_2.bias'\]"),
    ({"h.2.ln_1.weight": np.ones(32, np.float32)},
     r"unexpected weights \['h.2.ln_1.weight'\]"),
    ({"h.0.attn.c_attn.weight": np.ones((32, 64), np.float32)},
     r"tensor h.0.attn.c_attn.weight has shape \[32, 64\]; the "
     r"configuration gives \[32, 96\]"),
    ({"wte.weight": np.ones((265, 32), np.float32)},
     r"wte.weight has shape \[265, 32\].*\[266, 32\]"),
    ({"lm_head.weight": np.ones((266, 32), np.float32)},
     "lm_head.weight differs from wte.weight"),
])
def test_a_missing_extra_or_misshapen_weight_is_named(
        checkpoint, tmp_path, change, message):
    directory = _variant(checkpoint, tmp_path, tensors=change)
    with pytest.raises(ValueError, match=message):
        gpt2.from_huggingface(directory)


def test_prefixed_names_and_a_tied_head_are_read(checkpoint, tmp_path):
    _, _, tensors = checkpoint
    prefixed = {"transformer." + k: v for k, v in tensors.items()}
    prefixed["lm_head.weight"] = tensors["wte.weight"]
    directory = str(tmp_path / "prefixed")
    vocab, merges = fx.vocabulary()
    fx.write_huggingface(directory, prefixed, fx.hf_config(len(vocab)),
                         vocab, merges)
    model, _ = gpt2.from_huggingface(directory)
    reference, _ = gpt2.from_huggingface(checkpoint[0])
    for a, b in zip(model.weights, reference.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


# --------------------------------------------------------------------------
# The writers.

@pytest.fixture(scope="module")
def imported(checkpoint):
    return gpt2.from_huggingface(checkpoint[0])


@pytest.mark.parametrize("change, message", [
    (dict(scale_embeddings=True), "scale_embeddings=True; GPT-2 needs False"),
    (dict(positional_encoding="sinusoid"), "positional_encoding='sinusoid'"),
    (dict(bos_is_eos=False), "bos_is_eos=False"),
    (dict(masked_output_ids=(0,)), r"masked_output_ids=\(0,\)"),
    (dict(normalize_first=False), "normalize_first=False"),
    (dict(tie_output=False), "tie_output=False"),
    (dict(activation="silu"), "activation='silu'"),
])
def test_a_model_gpt2_cannot_hold_is_refused(imported, tmp_path, change,
                                             message):
    model, tokenizer = imported
    other = type(model).from_config(dict(model.get_config(), **change))
    other.build((None, None))
    with pytest.raises(ValueError, match=message):
        gpt2.to_huggingface(other, tokenizer, str(tmp_path / "out"))
    assert not os.path.exists(tmp_path / "out")


def test_writers_refuse_an_unbuilt_model_or_another_tokenizer(imported,
                                                              tmp_path):
    model, tokenizer = imported
    unbuilt = type(model).from_config(model.get_config())
    with pytest.raises(ValueError, match="unbuilt"):
        gpt2.to_huggingface(unbuilt, tokenizer, str(tmp_path / "a"))
    vocab, merges = fx.vocabulary()
    vocab["extra"] = len(vocab)
    with pytest.raises(ValueError, match="vocab_size=269, the tokenizer 270"):
        gpt2.to_huggingface(model, GPT2Tokenizer(vocab, merges),
                            str(tmp_path / "b"))
    with pytest.raises(ValueError, match="expected tfattn.interop"):
        gpt2.to_keras_hub(model, object(), str(tmp_path / "c"))


@pytest.mark.parametrize("change, message", [
    (dict(layer_norm_epsilon=1e-6), "layer_norm_epsilon is 1e-06"),
    (dict(activation="gelu"), "activation_function is 'gelu'"),
    (dict(attention_dropout_rate=0.3), "attn_pdrop is 0.3"),
])
def test_keras_hub_refuses_what_its_backbone_fixes(imported, tmp_path,
                                                   change, message):
    model, tokenizer = imported
    other = type(model).from_config(dict(model.get_config(), **change))
    other.build((None, None))
    with pytest.raises(ValueError, match=message + ".*GPT2Backbone fixes"):
        gpt2.to_keras_hub(other, tokenizer, str(tmp_path / "out"))


def test_writing_beside_a_sharded_index_is_refused(imported, tmp_path):
    model, tokenizer = imported
    open(tmp_path / "model.safetensors.index.json", "w").close()
    with pytest.raises(ValueError, match="sharded index"):
        gpt2.to_huggingface(model, tokenizer, str(tmp_path))


def test_tokenizer_refusals_name_the_argument():
    vocab, merges = fx.vocabulary()
    with pytest.raises(ValueError, match=r"`vocabulary`.*<\|endoftext\|>"):
        GPT2Tokenizer({k: v for k, v in vocab.items()
                       if k != "<|endoftext|>"}, merges)
    with pytest.raises(ValueError, match="`vocabulary`.*0..n-1"):
        GPT2Tokenizer(dict(vocab, extra=len(vocab) + 5), merges)
    with pytest.raises(ValueError, match="`merges`"):
        GPT2Tokenizer(vocab, merges + ["zz qq"])
    tokenizer = GPT2Tokenizer(vocab, merges)
    with pytest.raises(ValueError, match="`text`"):
        tokenizer.tokenize([["a"]])
    with pytest.raises(ValueError, match="`ids`"):
        tokenizer.detokenize(np.zeros((1, 2, 3), "int32"))
