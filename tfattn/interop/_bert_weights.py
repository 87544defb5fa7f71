"""BERT's weights: a tfattn `MaskedLM` / `SequenceClassifier`'s variables
<-> Hugging Face's tensor names, and a keras-hub BERT task's -> Hugging
Face's.

Private to `tfattn.interop.bert`, whose docstring gives the names and the
vocabulary's row permutation (`tfattn.interop.wordpiece_tokenizer`).
"""

import numpy as np

__all__ = ["refuse", "named", "load_weights", "hf_tensors", "hub_tensors",
           "hub_task", "TensorLoader", "IGNORED_PREFIXES"]

_PREFIX = "bert."
# Tensors a reader skips: the position-id buffer older files hold, and the
# next-sentence head of `BertForPreTraining` files (bert-base-uncased's).
IGNORED_PREFIXES = ("embeddings.position_ids", "cls.seq_relationship.")
_POOLER = ("pooler.dense.weight", "pooler.dense.bias")


def refuse(where, message):
    """The ValueError of a BERT reader or writer.

    Args:
        where: str. The file or directory (and what reads it).
        message: str. What is refused, naming the option or tensor and
            both values.

    Returns:
        ValueError, to raise.
    """
    return ValueError(f"BERT {where}: {message}")


def named(tensors, where):
    """`tensors` under short names: without the `bert.` prefix, the ignored
    buffers and heads, old `gamma`/`beta` layer-norm names as
    `weight`/`bias`, and without a tied decoder (which must equal the word
    embeddings and the prediction bias).

    Args:
        tensors: dict. Hugging Face name -> array.
        where: str. The checkpoint, for the messages.

    Returns:
        dict. Short name -> array.

    Raises:
        ValueError: an untied `cls.predictions.decoder`.
    """
    out = {}
    for name, array in tensors.items():
        short = name[len(_PREFIX):] if name.startswith(_PREFIX) else name
        if short.startswith(IGNORED_PREFIXES):
            continue
        if ".LayerNorm." in short:
            short = short.replace(".gamma", ".weight").replace(
                ".beta", ".bias")
        out[short] = array
    for suffix, tied in (("weight", "embeddings.word_embeddings.weight"),
                         ("bias", "cls.predictions.bias")):
        head = out.pop("cls.predictions.decoder." + suffix, None)
        if head is not None and not (tied in out and np.array_equal(
                head, out[tied])):
            raise refuse(where, f"cls.predictions.decoder.{suffix} differs "
                         f"from {tied}: an untied output layer, which "
                         "tfattn's MaskedLM does not read.")
    return out


def _norm(name, layer):
    return [(name + ".weight", layer.gamma, False),
            (name + ".bias", layer.beta, False)]


def _dense(name, layer):
    """(name, variable, transposed): torch's Linear stores [out, in]."""
    return [(name + ".weight", layer.kernel, True),
            (name + ".bias", layer.bias, False)]


def _slots(model):
    """(short name, variable, transposed) of every weight but the token
    table and the prediction bias, which are permuted by rows."""
    encoder = model.text_encoder
    slots = [("embeddings.position_embeddings.weight",
              encoder.positions.embeddings, False)]
    if encoder.type_vocab_size:
        slots.append(("embeddings.token_type_embeddings.weight",
                      encoder.segment_embedding.embeddings, False))
    slots += _norm("embeddings.LayerNorm", encoder.embedding_layer_norm)
    for i, block in enumerate(encoder.encoder.blocks):
        h, attention = f"encoder.layer.{i}.", block.self_attention
        for part in ("query", "key", "value"):
            slots += _dense(h + "attention.self." + part,
                            getattr(attention, part + "_dense"))
        slots += _dense(h + "attention.output.dense", attention.output_dense)
        slots += _norm(h + "attention.output.LayerNorm",
                       block.self_attention_layer_norm)
        slots += _dense(h + "intermediate.dense",
                        block.feed_forward.inner_dense)
        slots += _dense(h + "output.dense", block.feed_forward.outer_dense)
        slots += _norm(h + "output.LayerNorm", block.feed_forward_layer_norm)
    if hasattr(model, "head_dense"):
        slots += _dense("cls.predictions.transform.dense", model.head_dense)
        slots += _norm("cls.predictions.transform.LayerNorm",
                       model.head_norm)
    else:
        slots += _dense("pooler.dense", model.pooler_dense)
        slots += _dense("classifier", model.output_dense)
    return slots


def _shape(variable, transposed):
    shape = tuple(variable.shape)
    return shape[::-1] if transposed else shape


def load_weights(model, tensors, order, where, with_head=True):
    """Assigns Hugging Face tensors to a built BERT-shaped model.

    Args:
        model: MaskedLM or SequenceClassifier (pooling "pooler"), built
            with BERT's options.
        tensors: dict. Short name (`named`) -> array.
        order: int array [V]. BERT's id of every tfattn id (the rows'
            permutation).
        where: str. The checkpoint, for the messages.
        with_head: bool. Read the MaskedLM's head (`cls.predictions.*`);
            False for a `BertModel` (the head keeps its initial values).

    Raises:
        ValueError: a missing, unexpected or misshapen tensor (named, with
            both shapes).
    """
    slots = [s for s in _slots(model) if with_head or not
             s[0].startswith("cls.")]
    expected = {name: _shape(v, t) for name, v, t in slots}
    expected["embeddings.word_embeddings.weight"] = (
        model.vocab_size, model.num_units)
    masked_lm = hasattr(model, "head_dense")
    if masked_lm and with_head:
        expected["cls.predictions.bias"] = (model.vocab_size,)
    skipped = set(_POOLER) if masked_lm else set()
    missing = sorted(set(expected) - set(tensors))
    extra = sorted(set(tensors) - set(expected) - skipped)
    if missing:
        raise refuse(where, f"missing weights {missing}.")
    if extra:
        raise refuse(where, f"unexpected weights {extra} (not read by "
                     f"tfattn's {type(model).__name__}).")
    for name, shape in expected.items():
        if tuple(tensors[name].shape) != shape:
            raise refuse(where, f"tensor {name} has shape "
                         f"{list(tensors[name].shape)}; the configuration "
                         f"gives {list(shape)}.")
    table = np.asarray(tensors["embeddings.word_embeddings.weight"],
                       np.float32)
    model.text_encoder.token_embedding.embeddings.assign(table[order])
    if masked_lm and with_head:
        bias = np.asarray(tensors["cls.predictions.bias"], np.float32)
        model.head_bias.assign(bias[order])
    for name, variable, transposed in slots:
        array = np.asarray(tensors[name], np.float32)
        variable.assign(array.T if transposed else array)


def hf_tensors(model, order):
    """The model's weights under Hugging Face's short names (no `bert.`
    prefix, no pooler for a MaskedLM, no tied decoder).

    Args:
        model: MaskedLM or SequenceClassifier. Built with BERT's options.
        order: int array [V]. BERT's id of every tfattn id.

    Returns:
        dict. Name -> contiguous float32 array.
    """
    def rows(variable):
        array = np.asarray(variable.numpy(), np.float32)
        out = np.empty_like(array)
        out[order] = array
        return out

    tensors = {"embeddings.word_embeddings.weight": rows(
        model.text_encoder.token_embedding.embeddings)}
    if hasattr(model, "head_bias"):
        tensors["cls.predictions.bias"] = rows(model.head_bias)
    for name, variable, transposed in _slots(model):
        array = np.asarray(variable.numpy(), np.float32)
        tensors[name] = array.T if transposed else array
    return {k: np.ascontiguousarray(v) for k, v in tensors.items()}


def hub_tensors(backbone, task=None):
    """A keras-hub BERT's weights under Hugging Face's short names: the
    inverse of keras-hub's `convert_bert.convert_weights` (attention
    kernels [C, H, d] / [H, d, C] reshaped to [C, C]), with the head of a
    `BertMaskedLM` or `BertTextClassifier` task.

    Args:
        backbone: keras_hub.models.BertBackbone. Built.
        task: None, or the BertMaskedLM / BertTextClassifier around it.

    Returns:
        dict. Name -> float32 array, as `hf_tensors` gives (with the
        pooler; the caller drops it for a MaskedLM).
    """
    def get(variable, shape=None, transpose=True):
        array = np.asarray(variable.numpy(), np.float32)
        array = array if shape is None else array.reshape(shape)
        return array.T if transpose and array.ndim == 2 else array

    width = backbone.hidden_dim
    norm = backbone.get_layer("embeddings_layer_norm")
    tensors = {
        "embeddings.word_embeddings.weight": get(
            backbone.token_embedding.embeddings, transpose=False),
        "embeddings.position_embeddings.weight": get(
            backbone.get_layer("position_embedding").position_embeddings,
            transpose=False),
        "embeddings.token_type_embeddings.weight": get(
            backbone.get_layer("segment_embedding").embeddings,
            transpose=False),
        "embeddings.LayerNorm.weight": get(norm.gamma),
        "embeddings.LayerNorm.bias": get(norm.beta),
        "pooler.dense.weight": get(backbone.pooled_dense.kernel),
        "pooler.dense.bias": get(backbone.pooled_dense.bias)}
    for i, layer in enumerate(backbone.transformer_layers):
        h, attention = f"encoder.layer.{i}.", layer._self_attention_layer
        for part in ("query", "key", "value", "output"):
            dense = getattr(attention, part + "_dense")
            name = ("attention.self." + part if part != "output"
                    else "attention.output.dense")
            tensors[h + name + ".weight"] = get(dense.kernel, (width, width))
            tensors[h + name + ".bias"] = get(dense.bias, (width,))
        for name, layer_norm in (
                ("attention.output.LayerNorm",
                 layer._self_attention_layer_norm),
                ("output.LayerNorm", layer._feedforward_layer_norm)):
            tensors[h + name + ".weight"] = get(layer_norm.gamma)
            tensors[h + name + ".bias"] = get(layer_norm.beta)
        for name, dense in (
                ("intermediate.dense",
                 layer._feedforward_intermediate_dense),
                ("output.dense", layer._feedforward_output_dense)):
            tensors[h + name + ".weight"] = get(dense.kernel)
            tensors[h + name + ".bias"] = get(dense.bias)
    head = getattr(task, "masked_lm_head", None)
    if head is not None:
        tensors.update({
            "cls.predictions.transform.dense.weight": get(
                head._intermediate_dense.kernel),
            "cls.predictions.transform.dense.bias": get(
                head._intermediate_dense.bias),
            "cls.predictions.transform.LayerNorm.weight": get(
                head._intermediate_layer_norm.gamma),
            "cls.predictions.transform.LayerNorm.bias": get(
                head._intermediate_layer_norm.beta),
            "cls.predictions.bias": get(head._bias)})
    elif task is not None:
        tensors["classifier.weight"] = get(task.output_dense.kernel)
        tensors["classifier.bias"] = get(task.output_dense.bias)
    return tensors


def hub_task(keras_hub, model, backbone, hub_tokenizer, tensors, dropout):
    """The keras-hub task around a converted `backbone`, with `model`'s
    head (the inverse of `hub_tensors`' head).

    Args:
        keras_hub: the keras_hub module.
        model: MaskedLM or SequenceClassifier. The model written.
        backbone: keras_hub.models.BertBackbone. Its weights assigned.
        hub_tokenizer: keras_hub.models.BertTokenizer.
        tensors: dict. The model's weights under Hugging Face's short
            names (`hf_tensors`).
        dropout: float. The classifier's dropout when the model has none
            of its own.

    Returns:
        A keras-hub `BertMaskedLM` or `BertTextClassifier`.
    """
    length = model.max_length
    if not hasattr(model, "head_dense"):
        rate = (dropout if model.classifier_dropout_rate is None
                else model.classifier_dropout_rate)
        task = keras_hub.models.BertTextClassifier(
            backbone=backbone, num_classes=model.num_classes, dropout=rate,
            preprocessor=keras_hub.models.BertTextClassifierPreprocessor(
                hub_tokenizer, sequence_length=length))
        task.output_dense.kernel.assign(tensors["classifier.weight"].T)
        task.output_dense.bias.assign(tensors["classifier.bias"])
        return task
    task = keras_hub.models.BertMaskedLM(
        backbone=backbone,
        preprocessor=keras_hub.models.BertMaskedLMPreprocessor(
            hub_tokenizer, sequence_length=length))
    head, t = task.masked_lm_head, "cls.predictions.transform."
    head._intermediate_dense.kernel.assign(tensors[t + "dense.weight"].T)
    head._intermediate_dense.bias.assign(tensors[t + "dense.bias"])
    head._intermediate_layer_norm.gamma.assign(tensors[t + "LayerNorm.weight"])
    head._intermediate_layer_norm.beta.assign(tensors[t + "LayerNorm.bias"])
    head._bias.assign(tensors["cls.predictions.bias"])
    return task


class TensorLoader:
    """What keras-hub's `convert_bert.convert_weights` reads from: Hugging
    Face tensors by short name (its `SafetensorLoader`, from memory)."""

    def __init__(self, tensors):
        self.tensors = tensors

    def get_tensor(self, name):
        return self.tensors[name]

    def port_weight(self, keras_variable, hf_weight_key, hook_fn=None):
        array = self.tensors[hf_weight_key]
        if hook_fn:
            array = hook_fn(array, list(keras_variable.shape))
        keras_variable.assign(array)
