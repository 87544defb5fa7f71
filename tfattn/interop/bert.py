"""BERT checkpoints <-> an equal `tfattn.MaskedLM` or `SequenceClassifier`,
with their WordPiece tokenizer.

- `from_huggingface(directory)`: a Hugging Face `BertForMaskedLM`,
  `BertForPreTraining`, `BertModel` or `BertForSequenceClassification`
  directory: `config.json`, `model.safetensors` or a sharded
  `model.safetensors.index.json`, `vocab.txt` (and `do_lower_case` from
  `tokenizer_config.json` when there is one; True otherwise);
- `from_keras_hub(directory)`: a keras-hub preset of `BertBackbone`,
  `BertMaskedLM` or `BertTextClassifier` (what `save_to_preset` writes);
- `to_huggingface(model, tokenizer, directory)` /
  `to_keras_hub(model, tokenizer, directory)`: the inverse, each read
  back to the same weights.

Each reader returns `(model, tokenizer)`: a built `MaskedLM` (a
`SequenceClassifier` for the sequence-classification architectures, with
`num_classes` from `id2label` / the task) and a
`tfattn.interop.wordpiece_tokenizer.WordPieceTokenizer`. Nothing is
downloaded.

The model is BERT's forward pass (Devlin et al. 2019; transformers'
`modeling_bert.py`, which keras-hub's `BertBackbone` reproduces): unscaled
token embeddings plus learned positions plus segment (token type)
embeddings, a layer norm, post-norm blocks with biases, then for the
masked LM Dense + activation + layer norm and the output tied to the token
table plus a bias, and for the classifier the pooler (Dense + tanh on the
first token), dropout and a Dense layer. In tfattn's arguments:
`positional_encoding="learned"`, `scale_embeddings=False`,
`normalize_embeddings=True`, `normalize_first=False`, `type_vocab_size`,
`encoder_layer_norm_epsilon` (1e-12), `activation` ("gelu", the exact
one; "gelu_tanh" for `gelu_new`), and `pooling="pooler"`.

The vocabulary's rows are permuted (`wordpiece_tokenizer`: [PAD], [UNK],
[CLS], [SEP], [MASK] become tfattn ids 0-4): the token table and the
masked-LM output bias are stored in tfattn's order and written back in
BERT's. Segment ids are passed as `{"token_ids": ..., "segment_ids":
...}` (zeros when absent). tfattn masks padding by id ([PAD]), where
transformers takes an attention mask: the same for padded batches. Id 0
([PAD]) is tfattn's padding, a zero row: its logit is the output bias
alone where BERT's is not (no masked token is ever [PAD]); every other
logit is BERT's at `order[t]`.

Not read: `position_embedding_type` other than "absolute", decoders
(`is_decoder`, `add_cross_attention`), activations other than the GELUs,
regression heads (`num_labels` 1), and the next-sentence head and pooler
of pretraining files (skipped: a `MaskedLM` has none; a `BertModel`'s
masked-LM head keeps its initial values). keras-hub's `BertBackbone`
fixes the tanh GELU in its blocks, epsilon 1e-12 there and 1e-5 in its
masked-LM head, and one dropout rate; its presets are read as such and
`to_keras_hub` refuses a model with other values.
"""

import json
import os

import keras
import numpy as np

from tfattn.interop import hf_files
from tfattn.interop._bert_weights import TensorLoader
from tfattn.interop._bert_weights import hf_tensors
from tfattn.interop._bert_weights import hub_task
from tfattn.interop._bert_weights import hub_tensors
from tfattn.interop._bert_weights import load_weights
from tfattn.interop._bert_weights import named
from tfattn.interop._bert_weights import refuse as _refuse
from tfattn.interop.wordpiece_tokenizer import WordPieceTokenizer
from tfattn.layers.block_base import resolved_attention_dropout
from tfattn.models.classifier import SequenceClassifier
from tfattn.models.layout import gelu_tanh
from tfattn.models.masked_lm import MaskedLM
from tfattn.utils.files import write_files_atomically

__all__ = ["from_huggingface", "from_keras_hub", "to_huggingface",
           "to_keras_hub"]

_PREFIX = "bert."
_MLM = ("BertForMaskedLM", "BertForPreTraining", "BertModel")
_CLASSIFIER = "BertForSequenceClassification"
_HUB_BACKBONE = "keras_hub>BertBackbone"
_HUB_TASKS = ("keras_hub>BertMaskedLM", "keras_hub>BertTextClassifier")
_HUB_VOCAB = "assets/tokenizer/vocabulary.txt"

# transformers' `BertConfig` defaults.
_DEFAULTS = dict(
    vocab_size=30522, hidden_size=768, num_hidden_layers=12,
    num_attention_heads=12, intermediate_size=3072, hidden_act="gelu",
    hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
    max_position_embeddings=512, type_vocab_size=2, initializer_range=0.02,
    layer_norm_eps=1e-12, pad_token_id=0,
    position_embedding_type="absolute", classifier_dropout=None,
    is_decoder=False, add_cross_attention=False)
_FIXED = {"position_embedding_type": ("absolute", "relative positions"),
          "is_decoder": (False, "a causal decoder"),
          "add_cross_attention": (False, "cross-attention")}
_ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh",
                "gelu_pytorch_tanh": "gelu_tanh"}
_HF_ACTIVATIONS = {"gelu": "gelu", "gelu_tanh": "gelu_new"}


def _function(name):
    return gelu_tanh if name == "gelu_tanh" else name


def _activation_name(activation):
    if activation in ("gelu", keras.activations.gelu):
        return "gelu"
    if activation in ("gelu_tanh", gelu_tanh):
        return "gelu_tanh"
    return activation


# ----------------------------------------------------------------------
# Configuration.

def _option(config, name):
    return config.get(name, _DEFAULTS[name])


def _kind(config, where):
    """"classifier" or "masked_lm", refusing other models by name."""
    if config.get("model_type") != "bert":
        raise _refuse(where, f"model_type={config.get('model_type')!r}; "
                      "this reader reads 'bert' only.")
    names = config.get("architectures") or ["BertForMaskedLM"]
    for name in names:
        if name not in _MLM + (_CLASSIFIER,):
            raise _refuse(where, f"architectures holds {name!r}; this reader"
                          f" reads {', '.join(_MLM + (_CLASSIFIER,))}.")
    return "classifier" if names[0] == _CLASSIFIER else "masked_lm"


def _model_arguments(config, kind, where):
    """Model arguments of a BERT configuration (defaults filled in), or a
    ValueError naming `where` and the option."""
    for name, (value, meaning) in _FIXED.items():
        if _option(config, name) != value:
            raise _refuse(where, f"{name}={_option(config, name)!r}: tfattn "
                          f"implements {name}={value!r} only (not {meaning}).")
    activation = _option(config, "hidden_act")
    if activation not in _ACTIVATIONS:
        raise _refuse(where, f"hidden_act={activation!r}: tfattn reads "
                      f"{', '.join(sorted(_ACTIVATIONS))}.")
    if not _option(config, "type_vocab_size"):
        raise _refuse(where, "type_vocab_size=0: tfattn's BERT needs a "
                      "segment table.")
    init = keras.initializers.TruncatedNormal(
        stddev=float(_option(config, "initializer_range")))
    epsilon = float(_option(config, "layer_norm_eps"))
    arguments = dict(
        vocab_size=_option(config, "vocab_size"),
        num_layers=_option(config, "num_hidden_layers"),
        num_units=_option(config, "hidden_size"),
        num_heads=_option(config, "num_attention_heads"),
        ffn_units=_option(config, "intermediate_size"),
        dropout_rate=float(_option(config, "hidden_dropout_prob")),
        attention_dropout_rate=float(
            _option(config, "attention_probs_dropout_prob")),
        max_length=_option(config, "max_position_embeddings"),
        positional_encoding="learned", normalize_first=False,
        normalize_embeddings=True, scale_embeddings=False,
        type_vocab_size=_option(config, "type_vocab_size"),
        encoder_layer_norm_epsilon=epsilon,
        activation=_ACTIVATIONS[activation], embeddings_initializer=init,
        kernel_initializer=init, positions_initializer=init)
    if kind == "masked_lm":
        return dict(arguments, layer_norm_epsilon=epsilon,
                    head_activation=_function(_ACTIVATIONS[activation]))
    labels = config.get("id2label") or {}
    classes = len(labels) if labels else config.get("num_labels", 2)
    if classes < 2:
        raise _refuse(where, f"{classes} label(s): a regression head, which "
                      "tfattn's SequenceClassifier (num_classes >= 2) lacks.")
    dropout = _option(config, "classifier_dropout")
    return dict(arguments, num_classes=classes, pooling="pooler",
                classifier_dropout_rate=None if dropout is None
                else float(dropout))


def _check_tokenizer(config, tokenizer, where):
    n = _option(config, "vocab_size")
    if tokenizer.vocab_size != n:
        raise _refuse(where, f"vocab_size={n} but vocab.txt has "
                      f"{tokenizer.vocab_size} tokens.")
    pad = int(tokenizer.order[0])
    if _option(config, "pad_token_id") != pad:
        raise _refuse(where, f"pad_token_id={_option(config, 'pad_token_id')}"
                      f" but vocab.txt's [PAD] is {pad}.")


def _build(cls, arguments, tensors, tokenizer, where, with_head=True):
    model = cls(**arguments)
    model.build((None, None))
    load_weights(model, tensors, tokenizer.order, where, with_head)
    return model, tokenizer


def _checked_model(model, tokenizer, where):
    """The BERT options of `model`, refused by name where BERT has no
    counterpart; returns (block activation name, dropout, attention
    dropout)."""
    if not isinstance(model, (MaskedLM, SequenceClassifier)) or not (
            model.built):
        state = "" if getattr(model, "built", False) else " (unbuilt)"
        raise _refuse(where, f"model is a {type(model).__name__}{state}; "
                      "expected a built MaskedLM or SequenceClassifier.")
    wanted = dict(flavor="paper", positional_encoding="learned",
                  scale_embeddings=False, normalize_embeddings=True)
    if isinstance(model, SequenceClassifier):
        wanted["pooling"] = "pooler"
    for name, value in wanted.items():
        if getattr(model, name) != value:
            raise _refuse(where, f"the model has {name}="
                          f"{getattr(model, name)!r}; BERT needs {value!r}.")
    if model.normalize_first or not model.type_vocab_size:
        raise _refuse(where, f"the model has normalize_first="
                      f"{model.normalize_first!r} and type_vocab_size="
                      f"{model.type_vocab_size!r}; BERT needs post-norm "
                      "blocks and a segment table.")
    activation = _activation_name(model.activation)
    if activation not in _HF_ACTIVATIONS:
        raise _refuse(where, f"the model has activation={model.activation!r};"
                      f" BERT reads {', '.join(sorted(_HF_ACTIVATIONS))}.")
    if not isinstance(tokenizer, WordPieceTokenizer):
        raise _refuse(where, f"tokenizer is a {type(tokenizer).__name__}; "
                      "expected a WordPieceTokenizer.")
    if tokenizer.vocab_size != model.vocab_size:
        raise _refuse(where, f"the model has vocab_size={model.vocab_size}, "
                      f"the tokenizer {tokenizer.vocab_size}.")
    return (activation, model.dropout_rate, resolved_attention_dropout(
        model.dropout_rate, model.attention_dropout_rate))


# ----------------------------------------------------------------------
# Hugging Face directories.

def from_huggingface(directory):
    """A Hugging Face BERT directory -> `(model, WordPieceTokenizer)`.

    Args:
        directory: str or path-like. A local directory with `config.json`
            (`model_type` "bert"), `model.safetensors` (or a sharded index
            and its shards) and `vocab.txt`.

    Returns:
        `(model, tokenizer)`: a built `MaskedLM` (or `SequenceClassifier`)
        whose logits equal the checkpoint's in tfattn's id order (module
        docstring), and the tokenizer of its vocabulary.

    Raises:
        FileNotFoundError: the directory or one of its files is missing.
        ValueError: another `model_type` or architecture, an option tfattn
            does not implement, a missing or extra weight, a shape that
            disagrees with the configuration, a vocabulary that disagrees
            with it (each named, with both values).
    """
    where = f"checkpoint {os.fspath(directory)!r}"
    config = hf_files.read_config(directory, "from_huggingface")
    kind = _kind(config, where + " (config.json)")
    arguments = _model_arguments(config, kind, where + " (config.json)")
    vocab = hf_files.require_file(directory, "vocab.txt",
                                  "the tokenizer's vocabulary",
                                  "from_huggingface")
    lowercase = True
    extra = os.path.join(os.fspath(directory), "tokenizer_config.json")
    if os.path.isfile(extra):
        with open(extra, encoding="utf-8") as f:
            lowercase = bool(json.load(f).get("do_lower_case", True))
    tokenizer = WordPieceTokenizer.from_file(vocab, lowercase=lowercase)
    _check_tokenizer(config, tokenizer, where + " (config.json)")
    tensors = named(hf_files.read_tensors(directory, "from_huggingface"),
                    where)
    cls = SequenceClassifier if kind == "classifier" else MaskedLM
    with_head = kind == "classifier" or any(
        k.startswith("cls.predictions.") for k in tensors) or (
            (config.get("architectures") or [""])[0] != "BertModel")
    return _build(cls, arguments, tensors, tokenizer, where, with_head)


def _hf_config(model, tokenizer, where):
    activation, dropout, attention_dropout = _checked_model(
        model, tokenizer, where)
    epsilon = model.encoder_layer_norm_epsilon
    classifier = isinstance(model, SequenceClassifier)
    if not classifier and (
            _activation_name(model.head_activation) != activation
            or model.layer_norm_epsilon != epsilon):
        raise _refuse(where, f"the model's head has activation="
                      f"{_activation_name(model.head_activation)!r} and "
                      f"layer_norm_epsilon={model.layer_norm_epsilon!r}, "
                      f"its blocks {activation!r} and {epsilon!r}; BERT "
                      "has one hidden_act and one layer_norm_eps.")
    init = model.kernel_initializer.get_config().get("stddev", 0.02)
    config = dict(
        _DEFAULTS, model_type="bert", vocab_size=model.vocab_size,
        architectures=[_CLASSIFIER if classifier else "BertForMaskedLM"],
        hidden_size=model.num_units, num_hidden_layers=model.num_layers,
        num_attention_heads=model.num_heads,
        intermediate_size=model.ffn_units,
        hidden_act=_HF_ACTIVATIONS[activation],
        hidden_dropout_prob=dropout,
        attention_probs_dropout_prob=attention_dropout,
        max_position_embeddings=model.max_length,
        type_vocab_size=model.type_vocab_size, initializer_range=init,
        layer_norm_eps=1e-12 if epsilon is None else epsilon,
        pad_token_id=int(tokenizer.order[0]))
    if classifier:
        config.update(
            classifier_dropout=model.classifier_dropout_rate,
            id2label={str(i): f"LABEL_{i}" for i in range(model.num_classes)},
            label2id={f"LABEL_{i}": i for i in range(model.num_classes)})
    return config


def to_huggingface(model, tokenizer, directory):
    """Writes a BERT `MaskedLM` / `SequenceClassifier` as a Hugging Face
    `BertForMaskedLM` / `BertForSequenceClassification` directory that
    `from_huggingface` reads back to the same weights.

    Writes `config.json`, `model.safetensors` (float32; encoder names with
    the `bert.` prefix, the tied decoder left out as `save_pretrained`
    does), `vocab.txt` and `tokenizer_config.json`; other files are left.

    Args:
        model: MaskedLM or SequenceClassifier. Built, with BERT's options
            (module docstring).
        tokenizer: WordPieceTokenizer. Its vocabulary (same size).
        directory: str or path-like. Created if missing.

    Raises:
        ValueError: naming the model option that BERT lacks (and the
            value it has), or a tokenizer of another size.
    """
    where = f"export to {os.fspath(directory)!r}"
    config = _hf_config(model, tokenizer, where)
    os.makedirs(directory, exist_ok=True)
    tensors = hf_tensors(model, tokenizer.order)
    hf_files.write_tensors(directory, {
        (k if k.startswith(("cls.", "classifier.")) else _PREFIX + k): v
        for k, v in tensors.items()})
    hf_files.write_config(directory, config)
    write_files_atomically({
        os.path.join(directory, "vocab.txt"): "".join(
            t + "\n" for t in tokenizer.vocabulary),
        os.path.join(directory, "tokenizer_config.json"): json.dumps(
            {"do_lower_case": tokenizer.lowercase,
             "tokenizer_class": "BertTokenizer"}, indent=2) + "\n"})


# ----------------------------------------------------------------------
# keras-hub presets.

def _keras_hub():
    try:
        import keras_hub
        from keras_hub.src.utils.transformers import convert_bert
    except ImportError:
        raise ImportError("keras-hub presets need keras-hub: pip install "
                          "keras-hub") from None
    return keras_hub, convert_bert


def _preset_json(directory, file):
    """A preset's JSON file as a dict ({} when it is absent or not one)."""
    path = os.path.join(os.fspath(directory), file)
    if not os.path.isfile(path):
        return {}
    with open(path, encoding="utf-8") as f:
        saved = json.load(f)
    return saved if isinstance(saved, dict) else {}


def from_keras_hub(directory):
    """A keras-hub BERT preset -> `(model, WordPieceTokenizer)`.

    Args:
        directory: str or path-like. A local preset directory of a
            `BertBackbone`, `BertMaskedLM` or `BertTextClassifier`
            (`config.json`, `model.weights.h5`, `task.json` for a task, and
            the tokenizer's `assets/tokenizer/vocabulary.txt`).

    Returns:
        `(model, tokenizer)`: a `SequenceClassifier` for a
        `BertTextClassifier`, else a `MaskedLM` (a bare backbone's head
        keeps its initial values), with keras-hub's fixed options (tanh
        GELU blocks, exact GELU head with epsilon 1e-5).

    Raises:
        FileNotFoundError: the directory or one of its files is missing.
        ValueError: the preset holds another backbone or task (named).
        ImportError: keras-hub is not installed.
    """
    where = f"preset {os.fspath(directory)!r}"
    hf_files.require_file(directory, "config.json",
                          "the backbone's configuration", "from_keras_hub")
    name = _preset_json(directory, "config.json").get("registered_name")
    if name != _HUB_BACKBONE:
        raise _refuse(where + " (config.json)", f"registered_name={name!r};"
                      f" this reader reads {_HUB_BACKBONE!r}.")
    task_name = None
    if os.path.isfile(os.path.join(os.fspath(directory), "task.json")):
        task_name = _preset_json(directory, "task.json").get(
            "registered_name")
        if task_name not in _HUB_TASKS:
            raise _refuse(where + " (task.json)", f"registered_name="
                          f"{task_name!r}; this reader reads "
                          f"{' and '.join(_HUB_TASKS)}.")
    vocab = hf_files.require_file(directory, _HUB_VOCAB,
                                  "the tokenizer's vocabulary",
                                  "from_keras_hub")
    hf_files.require_file(directory, "model.weights.h5", "the weights",
                          "from_keras_hub")
    keras_hub, _ = _keras_hub()
    task = None
    if task_name is None:
        backbone = keras_hub.models.BertBackbone.from_preset(
            os.fspath(directory))
    else:
        cls = getattr(keras_hub.models, task_name.split(">")[1])
        task = cls.from_preset(os.fspath(directory))
        backbone = task.backbone
    tokenizer = WordPieceTokenizer.from_file(
        vocab, lowercase=bool(_preset_json(directory, "tokenizer.json").get(
            "config", {}).get("lowercase", False)))
    kind = ("classifier" if task_name == _HUB_TASKS[1] else "masked_lm")
    config = dict(
        model_type="bert", vocab_size=backbone.vocabulary_size,
        num_hidden_layers=backbone.num_layers,
        num_attention_heads=backbone.num_heads,
        hidden_size=backbone.hidden_dim,
        intermediate_size=backbone.intermediate_dim,
        max_position_embeddings=backbone.max_sequence_length,
        type_vocab_size=backbone.num_segments, hidden_act="gelu_new",
        hidden_dropout_prob=backbone.dropout,
        attention_probs_dropout_prob=backbone.dropout,
        pad_token_id=int(tokenizer.order[0]))
    if kind == "classifier":
        config.update(num_labels=task.num_classes,
                      classifier_dropout=task.dropout)
    _check_tokenizer(config, tokenizer, where)
    arguments = _model_arguments(config, kind, where)
    if kind == "masked_lm":
        arguments.update(head_activation="gelu", layer_norm_epsilon=1e-5)
    tensors = hub_tensors(backbone, task)
    cls = SequenceClassifier if kind == "classifier" else MaskedLM
    return _build(cls, arguments, tensors, tokenizer, where,
                  with_head=task is not None)


def to_keras_hub(model, tokenizer, directory):
    """Writes a BERT `MaskedLM` / `SequenceClassifier` as a keras-hub
    `BertMaskedLM` / `BertTextClassifier` preset (`save_to_preset`) that
    `from_keras_hub` reads back to the same weights.

    Args:
        model: MaskedLM or SequenceClassifier. Built, with BERT's options
            and keras-hub's fixed ones (module docstring).
        tokenizer: WordPieceTokenizer. Its vocabulary.
        directory: str or path-like. The preset directory (created).

    Raises:
        ValueError: naming the model option keras-hub's BERT lacks.
        ImportError: keras-hub is not installed.
    """
    where = f"export to {os.fspath(directory)!r}"
    activation, dropout, attention_dropout = _checked_model(
        model, tokenizer, where)
    fixed = dict(activation=(activation, "gelu_tanh"),
                 encoder_layer_norm_epsilon=(
                     model.encoder_layer_norm_epsilon, 1e-12),
                 attention_dropout_rate=(attention_dropout, dropout))
    if isinstance(model, MaskedLM):
        fixed.update(
            head_activation=(_activation_name(model.head_activation),
                             "gelu"),
            layer_norm_epsilon=(model.layer_norm_epsilon, 1e-5))
    for name, (value, want) in fixed.items():
        if value != want:
            raise _refuse(where, f"the model's {name} is {value!r}; "
                          f"keras-hub's BERT fixes {want!r}.")
    keras_hub, convert_bert = _keras_hub()
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=model.vocab_size, num_layers=model.num_layers,
        num_heads=model.num_heads, hidden_dim=model.num_units,
        intermediate_dim=model.ffn_units, dropout=dropout,
        max_sequence_length=model.max_length,
        num_segments=model.type_vocab_size)
    tensors = hf_tensors(model, tokenizer.order)
    pooler = backbone.pooled_dense
    tensors.setdefault("pooler.dense.weight", np.asarray(
        pooler.kernel.numpy()).T)
    tensors.setdefault("pooler.dense.bias", np.asarray(pooler.bias.numpy()))
    convert_bert.convert_weights(backbone, TensorLoader(tensors), {})
    hub_tokenizer = keras_hub.models.BertTokenizer(
        vocabulary=tokenizer.vocabulary, lowercase=tokenizer.lowercase)
    hub_task(keras_hub, model, backbone, hub_tokenizer, tensors,
             dropout).save_to_preset(os.fspath(directory))

