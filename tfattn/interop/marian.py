"""Marian (OPUS-MT) Hugging Face directories <-> `tfattn.Transformer`.

`from_huggingface(directory)` reads a `MarianMTModel` directory
(`config.json`, `model.safetensors` or a sharded
`model.safetensors.index.json`, and the tokenizer's `source.spm`,
`target.spm`, `vocab.json`, `tokenizer_config.json`) into an equal
`Transformer` and a `MarianTokenizer`; `to_huggingface(model, tokenizer,
directory)` writes one back (what transformers' `save_pretrained` writes:
the tied embeddings and the positional tables are left out).

What "equal" means (transformers' `models/marian/modeling_marian.py`):
post-norm blocks, the activation, q/k/v/out projections with biases,
`MarianSinusoidalPositionalEmbedding` (`positional_encoding=
"sinusoid_halves"`), embeddings × sqrt(d_model) when `scale_embedding`,
torch's layer-norm epsilon 1e-5, logits = x Eᵀ + `final_logits_bias`.

The vocabulary (`MarianVocabulary`): tfattn's models read id 0 as padding,
start decoding from BOS_ID = 2 and stop at EOS_ID = 3; Marian's eos is 0,
its unk 1, its padding the last id, and its decoder starts from the
padding id. The embedding rows are permuted so that the Marian pad row
lands at tfattn 0 (padding, read as zeros) and at tfattn 2 (BOS: the
decoder's start, whose logit column is Marian's padding logit), unk at 1,
eos at 3, and the other Marian ids, in order, at 4... The tfattn
vocabulary has one id more than Marian's. Generation, searches and the
exports then run unchanged; `suppress_bos` keeps searches from emitting
the start token, as Marian's `bad_words_ids` keep its generation from
emitting padding.
"""

import os

import numpy as np

from tfattn.interop import _marian_files as files
from tfattn.interop._marian_files import refuse
from tfattn.interop._marian_vocab import MarianTokenizer
from tfattn.interop._marian_vocab import MarianVocabulary
from tfattn.models.transformer import Transformer

__all__ = ["MarianTokenizer", "MarianVocabulary", "from_huggingface",
           "to_huggingface"]

# Keras activation for each `activation_function` HF's ACT2FN maps
# exactly (swish and silu are the same function).
_ACTIVATIONS = {"swish": "silu", "silu": "silu", "relu": "relu",
                "gelu": "gelu"}
# Config options transformers' MarianConfig once carried (BART's), that
# its MarianMTModel no longer reads: only the value its code does is
# accepted.
_FIXED = {"normalize_before": False, "normalize_embedding": False,
          "add_final_layer_norm": False, "static_position_embeddings": True,
          "add_bias_logits": False, "share_encoder_decoder_embeddings": True,
          "tie_word_embeddings": True, "activation_dropout": 0.0,
          "encoder_layerdrop": 0.0, "decoder_layerdrop": 0.0}
_EPSILON = 1e-5  # torch.nn.LayerNorm's default, which Marian keeps


def from_huggingface(directory):
    """A Hugging Face `MarianMTModel` directory -> `(model, tokenizer)`.

    Args:
        directory: str or path. A local directory; nothing is downloaded.

    Returns:
        `(Transformer, MarianTokenizer)`: a built model whose logits over
        tfattn ids, mapped to Marian ids (`tokenizer.vocabulary`), equal
        `MarianMTModel`'s, and the tokenizer of the directory.

    Raises:
        FileNotFoundError: naming the directory or file that is missing.
        ValueError: naming the file, option or tensor, for a `model_type`
            other than `"marian"`, an option tfattn does not implement, a
            missing, extra or mis-shaped tensor.
    """
    directory = os.fspath(directory)
    config = files.read_json(directory, "config.json")
    if config.get("model_type") != "marian":
        refuse(f"config.json's 'model_type' is {config.get('model_type')!r}"
               "; this reader takes 'marian' (MarianMTModel)")
    tokenizer = MarianTokenizer.from_directory(directory, config)
    model = Transformer(**_model_arguments(config, tokenizer.vocabulary))
    model.build({"source": (None, None), "target_in": (None, None)})
    weights = files.read_weights(directory)
    _check_names(weights, config)
    vocab = tokenizer.vocabulary
    for name, variable, kind in _pairs(model):
        tensor = _tensor(weights, name, variable, kind, vocab)
        variable.assign(_to_tfattn(tensor, kind, vocab))
    return model, tokenizer


def _model_arguments(config, vocabulary):
    """`Transformer`'s arguments for a MarianConfig dict (refusing what
    tfattn does not implement)."""
    for name, value in _FIXED.items():
        if name in config and config[name] != value:
            refuse(f"config.json option {name!r} is {config[name]!r}; "
                   f"tfattn implements only {value!r}, as transformers' "
                   "MarianMTModel computes")
    for a, b in (("encoder_layers", "decoder_layers"),
                 ("encoder_attention_heads", "decoder_attention_heads"),
                 ("encoder_ffn_dim", "decoder_ffn_dim")):
        if config.get(a) != config.get(b):
            refuse(f"config.json options {a!r} = {config.get(a)!r} and "
                   f"{b!r} = {config.get(b)!r} differ; tfattn's Transformer "
                   "has one value for both stacks")
    activation = config.get("activation_function", "gelu")
    if activation not in _ACTIVATIONS:
        refuse(f"config.json option 'activation_function' is "
               f"{activation!r}; tfattn implements "
               f"{sorted(_ACTIVATIONS)}")
    return dict(
        source_vocab_size=vocabulary.tfattn_size,
        num_layers=config["encoder_layers"],
        num_units=config["d_model"],
        num_heads=config["encoder_attention_heads"],
        ffn_units=config["encoder_ffn_dim"],
        dropout_rate=float(config.get("dropout", 0.1)),
        attention_dropout_rate=float(config.get("attention_dropout", 0.0)),
        max_length=config["max_position_embeddings"],
        positional_encoding="sinusoid_halves",
        layer_norm_epsilon=_EPSILON,
        activation=_ACTIVATIONS[activation],
        scale_embeddings=bool(config.get("scale_embedding", False)),
        final_logits_bias=True,
        suppress_bos=vocabulary.suppress_pad,
        embeddings_initializer=files.normal_initializer(
            config.get("init_std", 0.02)),
    )


def _layer_names(model):
    """(HF prefix, tfattn block, sublayer pairs) for each block."""
    attention = ("q_proj", "query_dense"), ("k_proj", "key_dense"), \
        ("v_proj", "value_dense"), ("out_proj", "output_dense")
    for stack, blocks in (("encoder", model.encoder.blocks),
                          ("decoder", model.decoder.blocks)):
        parts = [("self_attn", "self_attention")]
        if stack == "decoder":
            parts.append(("encoder_attn", "cross_attention"))
        for i, block in enumerate(blocks):
            prefix = f"model.{stack}.layers.{i}"
            for hf, ours in parts:
                sub = getattr(block, ours)
                for hf_dense, dense in attention:
                    yield f"{prefix}.{hf}.{hf_dense}", getattr(sub, dense)
                yield (f"{prefix}.{hf}_layer_norm",
                       getattr(block, f"{ours}_layer_norm"))
            yield f"{prefix}.fc1", block.feed_forward.inner_dense
            yield f"{prefix}.fc2", block.feed_forward.outer_dense
            yield f"{prefix}.final_layer_norm", block.feed_forward_layer_norm


def _pairs(model):
    """(HF tensor name, tfattn variable, kind) for every tensor
    `save_pretrained` writes. Kinds: "linear" (torch [out, in] <-> Keras
    [in, out]), "same", "rows" (embedding rows, permuted), "bias" (the
    [1, V] logits bias, permuted)."""
    yield ("model.shared.weight", model.source_embedding.embeddings, "rows")
    for prefix, layer in _layer_names(model):
        if hasattr(layer, "kernel"):
            yield prefix + ".weight", layer.kernel, "linear"
            yield prefix + ".bias", layer.bias, "same"
        else:
            yield prefix + ".weight", layer.gamma, "same"
            yield prefix + ".bias", layer.beta, "same"
    yield "final_logits_bias", model.logits_bias, "bias"


def _hf_shape(variable, kind, vocab):
    shape = tuple(variable.shape)
    if kind == "linear":
        return shape[::-1]
    if kind == "rows":
        return (vocab.marian_size,) + shape[1:]
    if kind == "bias":
        return (1, vocab.marian_size)
    return shape


def _tensor(weights, name, variable, kind, vocab):
    """The checkpoint's tensor `name`, float32, its shape checked."""
    expected = _hf_shape(variable, kind, vocab)
    if name not in weights and name == "final_logits_bias":
        return np.zeros(expected, np.float32)  # transformers' default too
    tensor = weights[name]
    if tuple(tensor.shape) != expected:
        refuse(f"tensor {name!r} has shape {tuple(tensor.shape)}; the "
               f"config.json and vocab.json give {expected}")
    return np.asarray(tensor, np.float32)


def _to_tfattn(tensor, kind, vocab):
    if kind == "linear":
        return tensor.T
    if kind == "rows":
        return tensor[vocab.marian_of_tfattn]
    if kind == "bias":
        return tensor[0, vocab.marian_of_tfattn]
    return tensor


def _to_hf(value, kind, vocab):
    if kind == "linear":
        return np.ascontiguousarray(value.T)
    if kind == "rows":
        return np.ascontiguousarray(value[vocab.tfattn_of_marian])
    if kind == "bias":
        return np.ascontiguousarray(value[vocab.tfattn_of_marian][None])
    return value


def _check_names(weights, config):
    """Refuses missing and extra tensors; the optional ones (tied copies of
    the embedding, the positional tables) must equal what they copy."""
    expected = set(files.expected_names(config))
    shared = weights.get("model.shared.weight")
    for name in ("model.encoder.embed_tokens.weight",
                 "model.decoder.embed_tokens.weight", "lm_head.weight"):
        if name in weights and shared is not None and not np.array_equal(
                weights[name], shared):
            refuse(f"tensor {name!r} differs from 'model.shared.weight'; "
                   "tfattn implements tied, shared embeddings only")
        expected.add(name)
    for stack in ("encoder", "decoder"):
        name = f"model.{stack}.embed_positions.weight"
        if name in weights:
            table = files.positions(weights[name].shape, config)
            if not np.allclose(weights[name], table, atol=1e-6):
                refuse(f"tensor {name!r} is not Marian's sinusoid table; "
                       "tfattn implements static sinusoid positions only")
            expected.add(name)
    missing = sorted(expected - set(weights) - _OPTIONAL)
    extra = sorted(set(weights) - expected)
    if missing:
        refuse(f"model.safetensors lacks tensor(s) {missing}")
    if extra:
        refuse(f"model.safetensors has tensor(s) tfattn does not use: "
               f"{extra}")


_OPTIONAL = {"final_logits_bias", "model.encoder.embed_tokens.weight",
             "model.decoder.embed_tokens.weight", "lm_head.weight"}


def to_huggingface(model, tokenizer, directory):
    """Writes `model` and `tokenizer` as a Hugging Face `MarianMTModel`
    directory (`config.json`, `model.safetensors`, the tokenizer's four
    files), as `from_huggingface` reads it back.

    The config is the one the tokenizer was read with (so its other
    options, such as `num_beams` and `bad_words_ids`, are kept) with the
    model's sizes written over it. The tfattn row 0 (padding, never read)
    is dropped: Marian's padding row is the start token's (tfattn 2).

    Args:
        model: a built `Transformer` of Marian's options (as
            `from_huggingface` makes).
        tokenizer: `MarianTokenizer`.
        directory: str or path. Created if missing; files are replaced.

    Raises:
        ValueError: naming the option, for a model that is not Marian's
            layout, or whose vocabulary is not the tokenizer's.
    """
    vocab = tokenizer.vocabulary
    _check_writable(model, vocab)
    directory = os.fspath(directory)
    os.makedirs(directory, exist_ok=True)
    tensors = {name: _to_hf(np.asarray(variable.numpy() if hasattr(
        variable, "numpy") else variable, np.float32), kind, vocab)
        for name, variable, kind in _pairs(model)}
    files.write_weights(directory, tensors)
    config = dict(tokenizer.config)
    config.update(_config_of(model, vocab))
    files.write_config(directory, config)
    tokenizer.save(directory)


def _check_writable(model, vocab):
    wanted = dict(flavor="paper", normalize_first=False,
                  share_embeddings=True, tie_output=True,
                  positional_encoding="sinusoid_halves",
                  layer_norm_epsilon=_EPSILON, final_logits_bias=True,
                  source_vocab_size=vocab.tfattn_size)
    for name, value in wanted.items():
        if getattr(model, name) != value:
            refuse(f"the model's {name!r} is {getattr(model, name)!r}; a "
                   f"Marian checkpoint needs {value!r}")
    if model.target_vocab_size not in (None, vocab.tfattn_size):
        refuse(f"the model's 'target_vocab_size' is "
               f"{model.target_vocab_size!r}; a Marian checkpoint needs "
               f"None (one vocabulary of {vocab.tfattn_size})")
    if str(model.activation) not in {"silu", "relu", "gelu"}:
        refuse(f"the model's 'activation' is {model.activation!r}; a "
               "Marian checkpoint needs 'silu', 'relu' or 'gelu'")
    if not model.built:
        model.build({"source": (None, None), "target_in": (None, None)})


def _config_of(model, vocab):
    """The MarianConfig options the model determines."""
    activation = model.activation
    if activation == "silu":
        activation = "swish"
    return dict(
        model_type="marian", vocab_size=vocab.marian_size,
        decoder_vocab_size=vocab.marian_size, d_model=model.num_units,
        encoder_layers=model.num_layers, decoder_layers=model.num_layers,
        encoder_attention_heads=model.num_heads,
        decoder_attention_heads=model.num_heads,
        encoder_ffn_dim=model.ffn_units, decoder_ffn_dim=model.ffn_units,
        activation_function=activation,
        max_position_embeddings=model.max_length,
        scale_embedding=model.scale_embeddings,
        dropout=model.dropout_rate,
        attention_dropout=(model.dropout_rate
                           if model.attention_dropout_rate is None
                           else model.attention_dropout_rate),
        pad_token_id=vocab.pad, decoder_start_token_id=vocab.pad,
        eos_token_id=vocab.eos,
        share_encoder_decoder_embeddings=True, tie_word_embeddings=True,
    )
