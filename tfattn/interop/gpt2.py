"""GPT-2 checkpoints <-> an equal `tfattn.CausalLM`, with their tokenizer.

- `from_huggingface(directory)`: a Hugging Face `GPT2LMHeadModel` (or
  `GPT2Model`) directory: `config.json`, `model.safetensors` or a sharded
  `model.safetensors.index.json`, `vocab.json` and `merges.txt`;
- `from_keras_hub(directory)`: a keras-hub preset of `GPT2Backbone` or
  `GPT2CausalLM` (what `save_to_preset` writes);
- `to_huggingface(model, tokenizer, directory)` /
  `to_keras_hub(model, tokenizer, directory)`: the inverse, each read
  back to the same weights.

Each reader returns `(model, tokenizer)`: a built `CausalLM` and a
`tfattn.interop.gpt2_tokenizer.GPT2Tokenizer`. Nothing is downloaded.

The model is GPT-2's forward pass (Radford et al. 2019, §2.3; transformers'
`modeling_gpt2.py`, which keras-hub's `GPT2Backbone` reproduces): learned
positions added to unscaled token embeddings, pre-norm blocks (layer norm,
causal self-attention with biases, residual; layer norm, Dense, GELU,
Dense, residual), a final layer norm, and the output tied to the token
table without a bias. In `CausalLM`'s arguments: `positional_encoding=
"learned"`, `scale_embeddings=False`, `normalize_first=True`,
`tie_output=True`, `layer_norm_epsilon` (1e-5), `activation="gelu_tanh"`
(`gelu_new`), and for the vocabulary (the mapping of
`tfattn.interop.gpt2_tokenizer`: GPT-2 id g -> g + 4, `<|endoftext|>` ->
EOS) `bos_is_eos=True` and `masked_output_ids=(0, 1, 2)`. tfattn's logits
at ids >= 3 are GPT-2's, its masked ones -1e9, so `generate`, the
searches and the exports run unchanged.

Weights: Hugging Face's names (transformers' `Conv1D` stores kernels as
[in, out], as Keras's Dense does), read with or without the `transformer.`
prefix; the attention's causal-mask buffers (`h.{i}.attn.bias`,
`h.{i}.attn.masked_bias`) that older files hold are skipped, and a
`lm_head.weight` must equal `wte.weight` (tied). `c_attn` is the query,
key and value kernels side by side ([C, 3C]); heads are contiguous column
blocks in both. keras-hub presets are read with keras-hub
(`GPT2Backbone.from_preset`) and written with its own converter
(`keras_hub/src/utils/transformers/convert_gpt2.py`), through the same
Hugging Face names.
"""

import json
import os

import keras

from tfattn.interop import hf_files
from tfattn.interop._gpt2_weights import ROWS as _ROWS
from tfattn.interop._gpt2_weights import TensorLoader
from tfattn.interop._gpt2_weights import hf_tensors
from tfattn.interop._gpt2_weights import hub_tensors
from tfattn.interop._gpt2_weights import load_weights
from tfattn.interop._gpt2_weights import refuse as _refuse
from tfattn.interop.gpt2_tokenizer import ADDED_IDS
from tfattn.interop.gpt2_tokenizer import END_OF_TEXT
from tfattn.interop.gpt2_tokenizer import GPT2Tokenizer
from tfattn.layers.block_base import resolved_attention_dropout
from tfattn.layers.block_base import resolved_epsilon
from tfattn.models.causal_lm import CausalLM
from tfattn.utils.files import write_files_atomically

__all__ = ["from_huggingface", "from_keras_hub", "to_huggingface",
           "to_keras_hub"]

_PREFIX = "transformer."
_ARCHITECTURES = ("GPT2LMHeadModel", "GPT2Model")
_HUB_BACKBONE = "keras_hub>GPT2Backbone"
_HUB_VOCAB = "assets/tokenizer/vocabulary.json"
_HUB_MERGES = "assets/tokenizer/merges.txt"

# transformers' `GPT2Config` defaults: a key missing from config.json has
# its default there too.
_DEFAULTS = dict(
    vocab_size=50257, n_positions=1024, n_embd=768, n_layer=12, n_head=12,
    n_inner=None, activation_function="gelu_new", resid_pdrop=0.1,
    embd_pdrop=0.1, attn_pdrop=0.1, layer_norm_epsilon=1e-5,
    initializer_range=0.02, bos_token_id=50256, eos_token_id=50256,
    scale_attn_weights=True, scale_attn_by_inverse_layer_idx=False,
    reorder_and_upcast_attn=False, add_cross_attention=False,
    tie_word_embeddings=True)
# Options tfattn implements at one value only: (value, what it would need).
_FIXED = {
    "scale_attn_weights": (True, "unscaled attention scores"),
    "scale_attn_by_inverse_layer_idx": (
        False, "scores divided by the layer index"),
    "reorder_and_upcast_attn": (False, "the reordered, upcast attention"),
    "add_cross_attention": (False, "cross-attention"),
    "tie_word_embeddings": (True, "an output head of its own"),
}
# Hugging Face activation names -> tfattn's, and back.
_ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
                "gelu": "gelu", "relu": "relu"}
_HF_ACTIVATIONS = {"gelu_tanh": "gelu_new", "gelu": "gelu", "relu": "relu"}


# ----------------------------------------------------------------------
# Configuration.

def _option(config, name):
    return config.get(name, _DEFAULTS[name])


def _model_arguments(config, where):
    """`CausalLM` arguments of a GPT-2 configuration (Hugging Face's names,
    defaults filled in), or a ValueError naming `where` and the option."""
    if config.get("model_type") != "gpt2":
        raise _refuse(where, f"model_type={config.get('model_type')!r}; "
                      "this reader reads 'gpt2' only.")
    for name in config.get("architectures") or ():
        if name not in _ARCHITECTURES:
            raise _refuse(where, f"architectures holds {name!r}; this "
                          f"reader reads {' and '.join(_ARCHITECTURES)}.")
    for name, (value, meaning) in _FIXED.items():
        if _option(config, name) != value:
            raise _refuse(where, f"{name}={_option(config, name)!r}: tfattn "
                          f"implements {name}={value!r} only (not {meaning}).")
    activation = _option(config, "activation_function")
    if activation not in _ACTIVATIONS:
        raise _refuse(where, f"activation_function={activation!r}: tfattn "
                      f"reads {', '.join(sorted(_ACTIVATIONS))}.")
    resid, embd = _option(config, "resid_pdrop"), _option(config, "embd_pdrop")
    if embd != resid:
        raise _refuse(where, f"embd_pdrop={embd!r} and resid_pdrop={resid!r}"
                      ": tfattn's CausalLM has one dropout_rate for both.")
    width = _option(config, "n_embd")
    init = keras.initializers.RandomNormal(
        stddev=float(_option(config, "initializer_range")))
    return dict(
        vocab_size=_option(config, "vocab_size") + _ROWS,
        num_layers=_option(config, "n_layer"), num_units=width,
        num_heads=_option(config, "n_head"),
        ffn_units=_option(config, "n_inner") or 4 * width,
        dropout_rate=float(resid),
        attention_dropout_rate=float(_option(config, "attn_pdrop")),
        max_length=_option(config, "n_positions"),
        positional_encoding="learned", tie_output=True, normalize_first=True,
        scale_embeddings=False, activation=_ACTIVATIONS[activation],
        layer_norm_epsilon=float(_option(config, "layer_norm_epsilon")),
        bos_is_eos=True, masked_output_ids=ADDED_IDS,
        embeddings_initializer=init, kernel_initializer=init)


def _check_tokenizer(config, tokenizer, where):
    """The configuration's vocabulary and special ids are the tokenizer's."""
    n = _option(config, "vocab_size")
    if tokenizer.gpt2_vocab_size != n:
        raise _refuse(where, f"vocab_size={n} but the tokenizer has "
                      f"{tokenizer.gpt2_vocab_size} tokens.")
    for name in ("bos_token_id", "eos_token_id"):
        if _option(config, name) != tokenizer.end_of_text_id:
            raise _refuse(where, f"{name}={_option(config, name)!r} but the "
                          f"tokenizer's {END_OF_TEXT} is "
                          f"{tokenizer.end_of_text_id}: tfattn maps that "
                          "one token to BOS and EOS.")


def _checked_layout(model, tokenizer, where):
    """The GPT-2 options of `model`, refused by name where GPT-2 has no
    counterpart; returns (activation name, epsilon, dropout, attention
    dropout)."""
    if not isinstance(model, CausalLM) or not model.built:
        state = "" if getattr(model, "built", False) else " (unbuilt)"
        raise _refuse(where, f"model is a {type(model).__name__}{state}; "
                      "expected a built tfattn.CausalLM.")
    wanted = dict(flavor="paper", positional_encoding="learned",
                  scale_embeddings=False, bos_is_eos=True,
                  masked_output_ids=ADDED_IDS)
    for name, value in wanted.items():
        if getattr(model, name) != value:
            raise _refuse(where, f"the model has {name}="
                          f"{getattr(model, name)!r}; GPT-2 needs {value!r}.")
    for name in ("normalize_first", "tie_output"):
        if getattr(model, name) not in (None, True):
            raise _refuse(where, f"the model has {name}="
                          f"{getattr(model, name)!r}; GPT-2 needs True.")
    if model.activation not in _HF_ACTIVATIONS:
        raise _refuse(where, f"the model has activation={model.activation!r};"
                      f" GPT-2 reads {', '.join(sorted(_HF_ACTIVATIONS))}.")
    if not isinstance(tokenizer, GPT2Tokenizer):
        raise _refuse(where, f"tokenizer is a {type(tokenizer).__name__}; "
                      "expected tfattn.interop.gpt2_tokenizer.GPT2Tokenizer.")
    if tokenizer.vocab_size != model.vocab_size:
        raise _refuse(where, f"the model has vocab_size={model.vocab_size}, "
                      f"the tokenizer {tokenizer.vocab_size} (tfattn ids).")
    return (model.activation,
            resolved_epsilon("paper", model.layer_norm_epsilon),
            model.dropout_rate,
            resolved_attention_dropout(model.dropout_rate,
                                       model.attention_dropout_rate))


def _hf_config(model, tokenizer, where):
    activation, epsilon, dropout, attention_dropout = _checked_layout(
        model, tokenizer, where)
    e = tokenizer.end_of_text_id
    init = model.kernel_initializer.get_config().get("stddev", 0.02)
    return dict(
        _DEFAULTS, model_type="gpt2", architectures=["GPT2LMHeadModel"],
        vocab_size=tokenizer.gpt2_vocab_size, n_positions=model.max_length,
        n_ctx=model.max_length, n_embd=model.num_units,
        n_layer=model.num_layers, n_head=model.num_heads,
        n_inner=model.ffn_units, activation_function=_HF_ACTIVATIONS[
            activation], resid_pdrop=dropout, embd_pdrop=dropout,
        attn_pdrop=attention_dropout, layer_norm_epsilon=epsilon,
        initializer_range=init, bos_token_id=e, eos_token_id=e,
        use_cache=True)


def _build(arguments, tensors, tokenizer, where):
    model = CausalLM(**arguments)
    model.build((None, None))
    load_weights(model, tensors, tokenizer.end_of_text_id, where)
    return model, tokenizer


# ----------------------------------------------------------------------
# Hugging Face directories.

def from_huggingface(directory):
    """A Hugging Face GPT-2 directory -> `(CausalLM, GPT2Tokenizer)`.

    Args:
        directory: str or path-like. A local directory with `config.json`
            (`model_type` "gpt2"), `model.safetensors` (or a sharded index
            and its shards; float weights of any width are read as
            float32), `vocab.json` and `merges.txt`.

    Returns:
        `(model, tokenizer)`: a built `CausalLM` whose logits at tfattn
        ids >= 3 equal the checkpoint's (module docstring), and the
        `GPT2Tokenizer` of its vocabulary.

    Raises:
        FileNotFoundError: the directory or one of its files is missing.
        ValueError: another `model_type` or architecture, an option tfattn
            does not implement, a missing or extra weight, a shape that
            disagrees with the configuration, a tokenizer that disagrees
            with it (each named, with both values).
    """
    where = f"checkpoint {os.fspath(directory)!r}"
    config = hf_files.read_config(directory, "from_huggingface")
    arguments = _model_arguments(config, where + " (config.json)")
    tokenizer = GPT2Tokenizer.from_files(
        hf_files.require_file(directory, "vocab.json",
                              "the tokenizer's vocabulary",
                              "from_huggingface"),
        hf_files.require_file(directory, "merges.txt",
                              "the tokenizer's merge rules",
                              "from_huggingface"))
    _check_tokenizer(config, tokenizer, where + " (config.json)")
    tensors = hf_files.read_tensors(directory, "from_huggingface")
    return _build(arguments, tensors, tokenizer, where)


def to_huggingface(model, tokenizer, directory):
    """Writes a GPT-2 `CausalLM` as a Hugging Face `GPT2LMHeadModel`
    directory that `from_huggingface` reads back to the same weights.

    Writes `config.json`, `model.safetensors` (float32, names with the
    `transformer.` prefix and without the tied `lm_head.weight`, as
    transformers' `save_pretrained` does), `vocab.json` and `merges.txt`;
    other files in the directory are left as they are.

    Args:
        model: CausalLM. Built, with GPT-2's options (module docstring).
        tokenizer: GPT2Tokenizer. Its vocabulary (same tfattn size).
        directory: str or path-like. Created if missing.

    Raises:
        ValueError: naming the model option that GPT-2 lacks (and the
            value it has), or a tokenizer of another size.
    """
    where = f"export to {os.fspath(directory)!r}"
    config = _hf_config(model, tokenizer, where)
    os.makedirs(directory, exist_ok=True)
    tensors = hf_tensors(model, tokenizer.end_of_text_id)
    hf_files.write_tensors(
        directory, {_PREFIX + k: v for k, v in tensors.items()})
    hf_files.write_config(directory, config)
    _write_vocabulary(tokenizer, os.path.join(directory, "vocab.json"),
                      os.path.join(directory, "merges.txt"))


def _write_vocabulary(tokenizer, vocab_path, merges_path):
    write_files_atomically({
        vocab_path: json.dumps(tokenizer.vocabulary, ensure_ascii=False),
        merges_path: "".join(["#version: 0.2\n"] + [
            m + "\n" for m in tokenizer.merges])})


# ----------------------------------------------------------------------
# keras-hub presets.

def _keras_hub():
    try:
        import keras_hub
        from keras_hub.src.utils.transformers import convert_gpt2
    except ImportError:
        raise ImportError("keras-hub presets need keras-hub: pip install "
                          "keras-hub") from None
    return keras_hub, convert_gpt2


def from_keras_hub(directory):
    """A keras-hub GPT-2 preset -> `(CausalLM, GPT2Tokenizer)`.

    Args:
        directory: str or path-like. A local preset directory of a
            `GPT2Backbone` or `GPT2CausalLM` (`config.json`,
            `model.weights.h5`, and the tokenizer's
            `assets/tokenizer/vocabulary.json` and `merges.txt`).

    Returns:
        `(model, tokenizer)`, as `from_huggingface` does.

    Raises:
        FileNotFoundError: the directory or one of its files is missing.
        ValueError: the preset holds another backbone (named), or its
            tokenizer disagrees with it.
        ImportError: keras-hub is not installed.
    """
    where = f"preset {os.fspath(directory)!r}"
    path = hf_files.require_file(directory, "config.json",
                                 "the backbone's configuration",
                                 "from_keras_hub")
    with open(path, encoding="utf-8") as f:
        saved = json.load(f)
    name = saved.get("registered_name") if isinstance(saved, dict) else None
    if name != _HUB_BACKBONE:
        raise _refuse(where + " (config.json)", f"registered_name={name!r};"
                      f" this reader reads {_HUB_BACKBONE!r}.")
    tokenizer = GPT2Tokenizer.from_files(*[
        hf_files.require_file(directory, file, what, "from_keras_hub")
        for file, what in ((_HUB_VOCAB, "the tokenizer's vocabulary"),
                           (_HUB_MERGES, "the tokenizer's merge rules"))])
    hf_files.require_file(directory, "model.weights.h5", "the weights",
                          "from_keras_hub")
    keras_hub, _ = _keras_hub()
    backbone = keras_hub.models.GPT2Backbone.from_preset(os.fspath(directory))
    e = tokenizer.end_of_text_id
    config = dict(
        model_type="gpt2", vocab_size=backbone.vocabulary_size,
        n_layer=backbone.num_layers, n_head=backbone.num_heads,
        n_embd=backbone.hidden_dim, n_inner=backbone.intermediate_dim,
        n_positions=backbone.max_sequence_length,
        resid_pdrop=backbone.dropout, embd_pdrop=backbone.dropout,
        attn_pdrop=backbone.dropout, bos_token_id=e, eos_token_id=e)
    _check_tokenizer(config, tokenizer, where)
    arguments = _model_arguments(config, where)
    return _build(arguments, hub_tensors(backbone), tokenizer, where)


def to_keras_hub(model, tokenizer, directory):
    """Writes a GPT-2 `CausalLM` as a keras-hub `GPT2CausalLM` preset
    (`save_to_preset`) that `from_keras_hub` reads back to the same
    weights.

    keras-hub's `GPT2Backbone` fixes what tfattn leaves open: the layer-norm
    epsilon (1e-5), the tanh GELU, and one dropout rate for every site.

    Args:
        model: CausalLM. Built, with GPT-2's options (module docstring),
            `layer_norm_epsilon=1e-5`, `activation="gelu_tanh"` and
            `attention_dropout_rate` None or `dropout_rate`.
        tokenizer: GPT2Tokenizer. Its vocabulary.
        directory: str or path-like. The preset directory (created).

    Raises:
        ValueError: naming the model option keras-hub's GPT-2 lacks.
        ImportError: keras-hub is not installed.
    """
    where = f"export to {os.fspath(directory)!r}"
    config = _hf_config(model, tokenizer, where)
    fixed = dict(activation_function="gelu_new", layer_norm_epsilon=1e-5,
                 attn_pdrop=config["resid_pdrop"])
    for name, value in fixed.items():
        if config[name] != value:
            raise _refuse(where, f"the model's {name} is {config[name]!r}; "
                          f"keras-hub's GPT2Backbone fixes {value!r}.")
    keras_hub, convert_gpt2 = _keras_hub()
    backbone = keras_hub.models.GPT2Backbone(
        vocabulary_size=config["vocab_size"], num_layers=config["n_layer"],
        num_heads=config["n_head"], hidden_dim=config["n_embd"],
        intermediate_dim=config["n_inner"], dropout=config["resid_pdrop"],
        max_sequence_length=config["n_positions"])
    convert_gpt2.convert_weights(
        backbone, TensorLoader(hf_tensors(model, tokenizer.end_of_text_id)),
        config)
    hub_tokenizer = keras_hub.models.GPT2Tokenizer(
        vocabulary=tokenizer.vocabulary, merges=tokenizer.merges)
    preprocessor = keras_hub.models.GPT2CausalLMPreprocessor(
        tokenizer=hub_tokenizer, sequence_length=config["n_positions"])
    keras_hub.models.GPT2CausalLM(
        backbone=backbone, preprocessor=preprocessor).save_to_preset(
            os.fspath(directory))
