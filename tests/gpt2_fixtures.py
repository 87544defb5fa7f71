"""A tiny random GPT-2 in the two formats people download, built here
without tfattn (the oracle side of tests/test_interop_gpt2*.py).

- `vocabulary()`: a byte-level BPE vocabulary: GPT-2's 256 byte symbols
  (keras-hub's `bytes_to_unicode`, the table of OpenAI's encoder.py), a few
  merges, `<|endoftext|>` last, as GPT-2 has it;
- `hub_model()`: a keras-hub `GPT2CausalLM` (2 layers, width 32, 2 heads,
  64 positions) with every weight redrawn (norms near 1, biases N(0, 0.1),
  embeddings N(0, 1), kernels N(0, 0.3)), so that logits and greedy
  continuations depend on every weight;
- `write_huggingface(directory, backbone, ...)`: the same weights as a
  Hugging Face `GPT2LMHeadModel` directory, written from transformers'
  names (what keras-hub's `convert_gpt2.py` reads: `c_attn` [C, 3C] is the
  query, key and value kernels side by side), with the causal-mask buffers
  (`h.{i}.attn.bias`) that the hub's `gpt2` file holds, optionally sharded.
"""

import json
import os

import numpy as np

LAYERS, WIDTH, HEADS, FFN, POSITIONS = 2, 32, 2, 128, 64
MERGES = ["Ġ t", "h e", "Ġt he", "i n", "Ġ a", "e r", "Ġ b", "e n", "Ġ d"]


def vocabulary():
    """(vocab dict token -> id, merges list): 256 bytes, the merges'
    tokens, then `<|endoftext|>`."""
    from keras_hub.src.tokenizers.byte_pair_tokenizer import bytes_to_unicode

    _, symbols = bytes_to_unicode()
    vocab = {symbol: i for i, symbol in enumerate(symbols)}
    for merge in MERGES:
        vocab.setdefault(merge.replace(" ", ""), len(vocab))
    vocab["<|endoftext|>"] = len(vocab)
    return vocab, list(MERGES)


def hub_model(seed=3):
    """A keras-hub `GPT2CausalLM` with its tokenizer and random weights."""
    import keras_hub

    vocab, merges = vocabulary()
    tokenizer = keras_hub.models.GPT2Tokenizer(vocabulary=vocab,
                                               merges=merges)
    preprocessor = keras_hub.models.GPT2CausalLMPreprocessor(
        tokenizer=tokenizer, sequence_length=POSITIONS)
    backbone = keras_hub.models.GPT2Backbone(
        vocabulary_size=len(vocab), num_layers=LAYERS, num_heads=HEADS,
        hidden_dim=WIDTH, intermediate_dim=FFN, dropout=0.0,
        max_sequence_length=POSITIONS)
    rng = np.random.default_rng(seed)
    for weight in backbone.weights:
        name = weight.path
        if name.endswith("gamma"):
            value = 1.0 + rng.normal(0.0, 0.1, weight.shape)
        elif name.endswith(("beta", "bias")):
            value = rng.normal(0.0, 0.1, weight.shape)
        else:  # N(0, 1) embeddings, N(0, 0.3) kernels.
            value = rng.normal(0.0, 1.0 if "embedding" in name else 0.3,
                               weight.shape)
        weight.assign(value.astype("float32"))
    return keras_hub.models.GPT2CausalLM(backbone=backbone,
                                         preprocessor=preprocessor)


def hf_tensors(backbone):
    """The backbone's weights under transformers' GPT-2 names."""
    def get(variable, shape=None):
        array = np.asarray(variable.numpy(), np.float32)
        return array if shape is None else array.reshape(shape)

    tensors = {"wte.weight": get(backbone.token_embedding.embeddings),
               "wpe.weight": get(
                   backbone.position_embedding.position_embeddings),
               "ln_f.weight": get(backbone.layer_norm.gamma),
               "ln_f.bias": get(backbone.layer_norm.beta)}
    for i, layer in enumerate(backbone.transformer_layers):
        h, att = f"h.{i}.", layer._self_attention_layer
        for name, norm in (("ln_1", layer._self_attention_layer_norm),
                           ("ln_2", layer._feedforward_layer_norm)):
            tensors[h + name + ".weight"] = get(norm.gamma)
            tensors[h + name + ".bias"] = get(norm.beta)
        qkv = (att.query_dense, att.key_dense, att.value_dense)
        tensors[h + "attn.c_attn.weight"] = np.concatenate(
            [get(d.kernel, (WIDTH, WIDTH)) for d in qkv], axis=1)
        tensors[h + "attn.c_attn.bias"] = np.concatenate(
            [get(d.bias, (WIDTH,)) for d in qkv])
        tensors[h + "attn.c_proj.weight"] = get(att.output_dense.kernel,
                                                (WIDTH, WIDTH))
        tensors[h + "attn.c_proj.bias"] = get(att.output_dense.bias)
        for name, dense in (("c_fc", layer._feedforward_intermediate_dense),
                            ("c_proj", layer._feedforward_output_dense)):
            tensors[h + "mlp." + name + ".weight"] = get(dense.kernel)
            tensors[h + "mlp." + name + ".bias"] = get(dense.bias)
        # The causal-mask buffer older checkpoints hold (not a weight).
        tensors[h + "attn.bias"] = np.tril(np.ones(
            (1, 1, POSITIONS, POSITIONS), np.float32))
    return tensors


def hf_config(vocab_size, **overrides):
    """config.json of a GPT2LMHeadModel, as transformers writes it."""
    config = dict(
        activation_function="gelu_new", architectures=["GPT2LMHeadModel"],
        attn_pdrop=0.0, bos_token_id=vocab_size - 1, embd_pdrop=0.0,
        eos_token_id=vocab_size - 1, initializer_range=0.02,
        layer_norm_epsilon=1e-05, model_type="gpt2", n_ctx=POSITIONS,
        n_embd=WIDTH, n_head=HEADS, n_inner=None, n_layer=LAYERS,
        n_positions=POSITIONS, reorder_and_upcast_attn=False,
        resid_pdrop=0.0, scale_attn_by_inverse_layer_idx=False,
        scale_attn_weights=True, summary_activation=None,
        summary_type="cls_index", use_cache=True, vocab_size=vocab_size)
    config.update(overrides)
    return config


def write_huggingface(directory, tensors, config, vocab, merges,
                      shards=1):
    """Writes a Hugging Face GPT-2 directory (`shards` > 1: a sharded
    index, as `save_pretrained(max_shard_size=...)` writes)."""
    import safetensors.numpy

    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(config, f)
    with open(os.path.join(directory, "vocab.json"), "w",
              encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(directory, "merges.txt"), "w",
              encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "".join(m + "\n" for m in merges))
    names = sorted(tensors)
    if shards == 1:
        safetensors.numpy.save_file(
            tensors, os.path.join(directory, "model.safetensors"),
            metadata={"format": "pt"})
        return
    weight_map = {}
    for s in range(shards):
        file = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: tensors[n] for n in names[s::shards]}
        safetensors.numpy.save_file(part, os.path.join(directory, file),
                                    metadata={"format": "pt"})
        weight_map.update({n: file for n in part})
    with open(os.path.join(directory, "model.safetensors.index.json"),
              "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)
