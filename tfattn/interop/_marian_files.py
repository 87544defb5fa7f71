"""The files of a Hugging Face Marian directory (private module of
`tfattn.interop.marian`): config and tokenizer JSON, safetensors weights
(one file or shards), the tensor names `save_pretrained` writes, and the
refusals' one error type.

The files themselves are read and written by `tfattn.interop.hf_files`,
which every Hugging Face reader of tfattn shares.
"""

import json

import keras
import numpy as np

from tfattn.interop import hf_files
from tfattn.layers.positional_encoding import sinusoid_halves_table

__all__ = ["expected_names", "normal_initializer", "positions",
           "read_bytes", "read_json", "read_weights", "refuse",
           "write_config", "write_weights"]

_CONTEXT = "tfattn.interop.marian"
_WHAT = {"config.json": "the model's configuration",
         "source.spm": "the tokenizer's source SentencePiece model",
         "target.spm": "the tokenizer's target SentencePiece model",
         "vocab.json": "the tokenizer's vocabulary (pieces -> Marian ids)",
         "tokenizer_config.json": "the tokenizer's options"}


def refuse(message):
    """Raises the ValueError every refusal of this module raises."""
    raise ValueError(f"{_CONTEXT}: {message}.")


def read_bytes(directory, name):
    """The bytes of `directory/name` (`hf_files.require_file`:
    FileNotFoundError naming a missing directory or file)."""
    path = hf_files.require_file(directory, name, _WHAT.get(name, name),
                                 _CONTEXT)
    with open(path, "rb") as handle:
        return handle.read()


def read_json(directory, name):
    """`directory/name` parsed (a dict); refuses a broken file by name."""
    try:
        value = json.loads(read_bytes(directory, name).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        refuse(f"{name!r} in {directory!r} is not JSON ({error})")
    if not isinstance(value, dict):
        refuse(f"{name!r} in {directory!r} is not a JSON object")
    return value


def read_weights(directory):
    """Every tensor of the directory (`hf_files.read_tensors`:
    `model.safetensors`, or the shards its index names).

    Returns:
        dict: HF tensor name -> NumPy array (torch layout).
    """
    return hf_files.read_tensors(directory, _CONTEXT)


def write_config(directory, config):
    """`config.json` as transformers writes it (`hf_files.write_config`)."""
    hf_files.write_config(directory, config)


def write_weights(directory, tensors):
    """`tensors` (float32) as `directory/model.safetensors` with
    transformers' metadata (`hf_files.write_tensors`)."""
    hf_files.write_tensors(directory, {
        name: np.ascontiguousarray(value, np.float32)
        for name, value in tensors.items()})


def expected_names(config):
    """The tensor names transformers' `save_pretrained` writes for a
    MarianMTModel of `config` (the tied embeddings and the positional
    tables are left out)."""
    names = ["model.shared.weight", "final_logits_bias"]
    attention = ("q_proj", "k_proj", "v_proj", "out_proj")
    for stack in ("encoder", "decoder"):
        parts = ["self_attn"] + (["encoder_attn"] if stack == "decoder"
                                 else [])
        for i in range(config.get(f"{stack}_layers", 0)):
            prefix = f"model.{stack}.layers.{i}"
            for part in parts:
                names += [f"{prefix}.{part}.{dense}.{end}"
                          for dense in attention for end in ("weight", "bias")]
                names += [f"{prefix}.{part}_layer_norm.{end}"
                          for end in ("weight", "bias")]
            names += [f"{prefix}.{layer}.{end}"
                      for layer in ("fc1", "fc2", "final_layer_norm")
                      for end in ("weight", "bias")]
    return names


def positions(shape, config):
    """Marian's positional table for a stored tensor's shape (a wrong
    width gives a table that cannot match)."""
    if len(shape) != 2 or shape[1] != config.get("d_model"):
        return np.full((1,), np.nan, np.float32)
    return sinusoid_halves_table(shape[0], shape[1])


def normal_initializer(stddev):
    """transformers' initializer of Marian's weights: N(0, `init_std`)."""
    return keras.initializers.RandomNormal(stddev=float(stddev))
