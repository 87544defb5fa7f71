"""A tiny random BERT in the two formats people download, built here
without tfattn (the oracle side of tests/test_interop_bert*.py).

- `vocabulary()`: a WordPiece `vocab.txt` of about 120 tokens laid out as
  bert-base-uncased's is ([PAD] 0, unused rows, then [UNK] [CLS] [SEP]
  [MASK], punctuation, letters, words and `##` pieces, a few CJK
  characters);
- `hub_masked_lm()` / `hub_classifier()`: a keras-hub `BertMaskedLM` /
  `BertTextClassifier` (2 layers, width 32, 2 heads, FFN 64, 64
  positions, 2 segments) with every weight redrawn (norms near 1, biases
  N(0, 0.1), embeddings N(0, 1), kernels N(0, 0.3)), so that the logits
  depend on every weight;
- `hf_tensors(task)` / `write_huggingface(...)`: the same weights as a
  Hugging Face directory, written from transformers' names
  (`modeling_bert.py`; what keras-hub's `convert_bert.py` reads: torch
  `Linear` weights [out, in]), optionally with a pretraining file's
  extras (pooler, next-sentence head, position-id buffer) and sharded.
"""

import json
import os

import numpy as np

LAYERS, WIDTH, HEADS, FFN, POSITIONS, SEGMENTS = 2, 32, 2, 64, 64, 2
WORDS = ["the", "quick", "brown", "fox", "jump", "over", "lazy", "dog",
         "hello", "world", "cafe", "naive", "resume", "gru", "koln", "und",
         "stra", "berlin", "is", "there", "un", "believ", "able", "we",
         "don", "1234", "emoji", "and", "ok", "yes"]
PIECES = ["##s", "##ed", "##ing", "##able", "##be", "##sse",
          "##n", "##ße", "##t", "##ll", "##1"]
CJK = ["東", "京", "你", "好", "世", "界", "と"]


def vocabulary():
    """BERT's tokens by id (`vocab.txt`'s lines)."""
    tokens = ["[PAD]"] + [f"[unused{i}]" for i in range(4)]
    tokens += ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tokens += list("!\"#$%&'()*+,-./:;<=>?@[]_")
    tokens += [chr(c) for c in range(ord("a"), ord("z") + 1)]
    tokens += WORDS + PIECES + CJK
    tokens += ["##" + chr(c) for c in range(ord("a"), ord("k"))]
    return tokens


def _randomize(model, seed):
    rng = np.random.default_rng(seed)
    for weight in model.weights:
        name = weight.path
        if name.endswith("gamma"):
            value = 1.0 + rng.normal(0.0, 0.1, weight.shape)
        elif name.endswith(("beta", "bias")):
            value = rng.normal(0.0, 0.1, weight.shape)
        else:
            value = rng.normal(0.0, 1.0 if "embedding" in name else 0.3,
                               weight.shape)
        weight.assign(value.astype("float32"))


def _backbone():
    import keras_hub

    return keras_hub.models.BertBackbone(
        vocabulary_size=len(vocabulary()), num_layers=LAYERS,
        num_heads=HEADS, hidden_dim=WIDTH, intermediate_dim=FFN,
        dropout=0.0, max_sequence_length=POSITIONS, num_segments=SEGMENTS)


def hub_masked_lm(seed=3):
    """A keras-hub `BertMaskedLM` with its tokenizer and random weights."""
    import keras_hub

    tokenizer = keras_hub.models.BertTokenizer(vocabulary=vocabulary(),
                                               lowercase=True)
    task = keras_hub.models.BertMaskedLM(
        backbone=_backbone(),
        preprocessor=keras_hub.models.BertMaskedLMPreprocessor(
            tokenizer, sequence_length=POSITIONS))
    _randomize(task, seed)
    return task


def hub_classifier(seed=4, num_classes=3):
    """A keras-hub `BertTextClassifier` with random weights."""
    import keras_hub

    tokenizer = keras_hub.models.BertTokenizer(vocabulary=vocabulary(),
                                               lowercase=True)
    task = keras_hub.models.BertTextClassifier(
        backbone=_backbone(), num_classes=num_classes, dropout=0.0,
        preprocessor=keras_hub.models.BertTextClassifierPreprocessor(
            tokenizer, sequence_length=POSITIONS))
    _randomize(task, seed)
    return task


def hf_tensors(task, extras=False):
    """The task's weights under transformers' BERT names (with the `bert.`
    prefix; `extras`: a pretraining file's pooler, next-sentence head and
    position-id buffer too)."""
    def get(variable, shape=None, linear=False):
        array = np.asarray(variable.numpy(), np.float32)
        array = array if shape is None else array.reshape(shape)
        # Contiguous: safetensors writes an array's buffer as it lies.
        return np.ascontiguousarray(array.T if linear else array)

    b = task.backbone
    width = b.hidden_dim  # WIDTH for the fixtures; any for the benches
    norm = b.get_layer("embeddings_layer_norm")
    t = {"bert.embeddings.word_embeddings.weight":
         get(b.token_embedding.embeddings),
         "bert.embeddings.position_embeddings.weight":
         get(b.get_layer("position_embedding").position_embeddings),
         "bert.embeddings.token_type_embeddings.weight":
         get(b.get_layer("segment_embedding").embeddings),
         "bert.embeddings.LayerNorm.weight": get(norm.gamma),
         "bert.embeddings.LayerNorm.bias": get(norm.beta)}
    for i, layer in enumerate(b.transformer_layers):
        h, att = f"bert.encoder.layer.{i}.", layer._self_attention_layer
        for part in ("query", "key", "value"):
            dense = getattr(att, part + "_dense")
            t[h + f"attention.self.{part}.weight"] = get(
                dense.kernel, (width, width), linear=True)
            t[h + f"attention.self.{part}.bias"] = get(dense.bias, (width,))
        t[h + "attention.output.dense.weight"] = get(
            att.output_dense.kernel, (width, width), linear=True)
        t[h + "attention.output.dense.bias"] = get(att.output_dense.bias)
        for name, ln in (("attention.output.LayerNorm",
                          layer._self_attention_layer_norm),
                         ("output.LayerNorm", layer._feedforward_layer_norm)):
            t[h + name + ".weight"] = get(ln.gamma)
            t[h + name + ".bias"] = get(ln.beta)
        for name, dense in (("intermediate.dense",
                             layer._feedforward_intermediate_dense),
                            ("output.dense",
                             layer._feedforward_output_dense)):
            t[h + name + ".weight"] = get(dense.kernel, linear=True)
            t[h + name + ".bias"] = get(dense.bias)
    pooler = {"bert.pooler.dense.weight": get(b.pooled_dense.kernel,
                                              linear=True),
              "bert.pooler.dense.bias": get(b.pooled_dense.bias)}
    head = getattr(task, "masked_lm_head", None)
    if head is None:
        t.update(pooler)
        t["classifier.weight"] = get(task.output_dense.kernel, linear=True)
        t["classifier.bias"] = get(task.output_dense.bias)
        return t
    p = "cls.predictions."
    t.update({p + "transform.dense.weight": get(
        head._intermediate_dense.kernel, linear=True),
        p + "transform.dense.bias": get(head._intermediate_dense.bias),
        p + "transform.LayerNorm.weight": get(
            head._intermediate_layer_norm.gamma),
        p + "transform.LayerNorm.bias": get(
            head._intermediate_layer_norm.beta),
        p + "bias": get(head._bias)})
    if extras:
        t.update(pooler)
        t["cls.seq_relationship.weight"] = np.ones((2, width), np.float32)
        t["cls.seq_relationship.bias"] = np.zeros((2,), np.float32)
        t["bert.embeddings.position_ids"] = np.arange(
            POSITIONS, dtype=np.int64)[None]
        t[p + "decoder.weight"] = t["bert.embeddings.word_embeddings.weight"]
        t[p + "decoder.bias"] = t[p + "bias"]
    return t


def hf_config(architecture="BertForMaskedLM", **overrides):
    """config.json of a BERT model, as transformers writes it."""
    config = dict(
        architectures=[architecture], attention_probs_dropout_prob=0.0,
        classifier_dropout=None, hidden_act="gelu_new",
        hidden_dropout_prob=0.0, hidden_size=WIDTH, initializer_range=0.02,
        intermediate_size=FFN, layer_norm_eps=1e-12,
        max_position_embeddings=POSITIONS, model_type="bert",
        num_attention_heads=HEADS, num_hidden_layers=LAYERS, pad_token_id=0,
        position_embedding_type="absolute", type_vocab_size=SEGMENTS,
        use_cache=True, vocab_size=len(vocabulary()))
    if architecture == "BertForSequenceClassification":
        config.update(id2label={"0": "a", "1": "b", "2": "c"},
                      label2id={"a": 0, "b": 1, "c": 2})
    config.update(overrides)
    return config


def write_huggingface(directory, tensors, config, vocab=None, shards=1,
                      lowercase=True):
    """Writes a Hugging Face BERT directory (`shards` > 1: a sharded
    index, as `save_pretrained(max_shard_size=...)` writes)."""
    import safetensors.numpy

    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(config, f)
    with open(os.path.join(directory, "vocab.txt"), "w",
              encoding="utf-8") as f:
        f.write("".join(t + "\n" for t in (vocab or vocabulary())))
    with open(os.path.join(directory, "tokenizer_config.json"), "w") as f:
        json.dump({"do_lower_case": lowercase,
                   "tokenizer_class": "BertTokenizer"}, f)
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
