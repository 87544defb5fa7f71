"""A pretrained checkpoint directory as the start of a training run.

- `describe(directory)`: what a directory holds, from its `config.json`
  (and a keras-hub preset's `task.json`) alone: a Hugging Face GPT-2
  directory, a keras-hub GPT-2 preset, a Hugging Face Marian (OPUS-MT)
  directory, a Hugging Face BERT masked LM (`BertForMaskedLM`,
  `BertForPreTraining`) or a keras-hub `BertMaskedLM` preset, and the task
  it serves ("language_model", "translation" or "masked_lm"); anything
  else is refused by name (a BERT classifier or a BERT encoder without
  its masked-LM head too).
- `load(directory)`: its `(model, tokenizer)` (`tfattn.interop.gpt2`,
  `tfattn.interop.marian`, `tfattn.interop.bert`), read once per process
  and directory.
- `architecture_fields(model)`: the HParams fields the model fixes.
- `save_to_run(kind, source, architecture, tokenizer, model_dir)` /
  `load_from_run(model_dir)`: what a run started from a checkpoint keeps
  beside its checkpoints, so that it resumes, evaluates and exports with
  the checkpoint's tokenizer and architecture::

      model_dir/pretrained/pretrained.json   the kind, the source directory
                                             and the model's Keras config
      model_dir/pretrained/...               the tokenizer's files (GPT-2:
                                             vocab.json, merges.txt;
                                             Marian: source.spm,
                                             target.spm, vocab.json,
                                             tokenizer_config.json,
                                             config.json; BERT: vocab.txt,
                                             tokenizer_config.json with
                                             do_lower_case)
"""

import collections
import json
import os

import tensorflow as tf

from tfattn.utils.files import write_files_atomically

__all__ = [
    "GPT2_HUGGINGFACE",
    "GPT2_KERAS_HUB",
    "MARIAN",
    "BERT_HUGGINGFACE",
    "BERT_KERAS_HUB",
    "TASKS",
    "RUN_SUBDIR",
    "Description",
    "describe",
    "load",
    "architecture_fields",
    "save_to_run",
    "load_from_run",
]

GPT2_HUGGINGFACE = "gpt2_huggingface"
GPT2_KERAS_HUB = "gpt2_keras_hub"
MARIAN = "marian"
BERT_HUGGINGFACE = "bert_huggingface"
BERT_KERAS_HUB = "bert_keras_hub"
# The task each kind of checkpoint starts.
TASKS = {GPT2_HUGGINGFACE: "language_model", GPT2_KERAS_HUB: "language_model",
         MARIAN: "translation", BERT_HUGGINGFACE: "masked_lm",
         BERT_KERAS_HUB: "masked_lm"}
RUN_SUBDIR = "pretrained"
_RECORD = "pretrained.json"
_GPT2_FILES = ("vocab.json", "merges.txt")
_BERT_CONFIG = "tokenizer_config.json"
_MARIAN_FILES = ("source.spm", "target.spm", "vocab.json",
                 "tokenizer_config.json", "config.json")
# HParams field -> the model's config key, per model class.
_FIELDS = {
    "CausalLM": dict(vocab_size="vocab_size"),
    "Transformer": dict(vocab_size="source_vocab_size"),
    "MaskedLM": dict(vocab_size="vocab_size"),
}
_COMMON = ("num_layers", "num_units", "num_heads", "ffn_units",
           "dropout_rate", "attention_dropout_rate", "max_length")

_BERT_CLASSIFIERS = ("BertForSequenceClassification",
                     "keras_hub>BertTextClassifier")
_BERT_ENCODERS = ("BertModel", "keras_hub>BertBackbone")

Description = collections.namedtuple("Description", ["kind", "task"])


def describe(directory):
    """What `directory` holds, read from its `config.json`.

    Args:
        directory: str. A local checkpoint directory.

    Returns:
        Description(kind, task): `kind` one of `GPT2_HUGGINGFACE`,
        `GPT2_KERAS_HUB`, `MARIAN`, `BERT_HUGGINGFACE`, `BERT_KERAS_HUB`;
        `task` its `TASKS` entry.

    Raises:
        ValueError: no directory or config.json there, or a model this
            cannot start training from (named; a BERT classifier or
            encoder says why).
    """
    directory = str(directory)
    path = os.path.join(directory, "config.json")
    if not os.path.isdir(directory):
        raise ValueError(f"{directory} is not a directory")
    if not os.path.isfile(path):
        raise ValueError(f"{directory} holds no config.json (expected a "
                         "Hugging Face GPT-2, Marian or BERT directory, or "
                         "a keras-hub GPT-2 or BERT preset)")
    try:
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
    except ValueError as error:
        raise ValueError(f"{path} does not parse ({error})") from None
    if not isinstance(config, dict):
        raise ValueError(f"{path} is not a JSON object")
    model_type = config.get("model_type")
    registered = str(config.get("registered_name", ""))
    if model_type == "gpt2":
        return Description(GPT2_HUGGINGFACE, TASKS[GPT2_HUGGINGFACE])
    if model_type == "marian":
        return Description(MARIAN, TASKS[MARIAN])
    if registered.startswith("keras_hub>GPT2"):
        return Description(GPT2_KERAS_HUB, TASKS[GPT2_KERAS_HUB])
    if model_type == "bert" or registered.startswith("keras_hub>Bert"):
        return _bert_description(directory, config)
    raise ValueError(
        f"config.json's model_type is {model_type!r} (registered_name "
        f"{registered or None!r}): training starts from a Hugging Face "
        "GPT-2 ('gpt2'), Marian ('marian') or BERT ('bert') directory, or "
        "a keras-hub GPT-2 or BERT preset")


def _bert_description(directory, config):
    """The Description of a BERT masked LM, or a ValueError naming the
    BERT model that cannot start a masked-LM run."""
    if config.get("model_type") == "bert":
        kind = BERT_HUGGINGFACE
        model = (config.get("architectures") or ["BertForMaskedLM"])[0]
    else:
        kind = BERT_KERAS_HUB
        task = os.path.join(directory, "task.json")
        model = "keras_hub>BertBackbone"
        if os.path.isfile(task):
            try:
                with open(task, encoding="utf-8") as f:
                    saved = json.load(f)
            except ValueError as error:
                raise ValueError(f"{task} does not parse ({error})") \
                    from None
            if not isinstance(saved, dict):
                raise ValueError(f"{task} is not a JSON object")
            model = saved.get("registered_name")
    if model in _BERT_CLASSIFIERS:
        raise ValueError(
            f"a BERT sequence classifier ({model}): train.py has no "
            "classification task; fine-tune it in Python with "
            "tfattn.interop.bert (a SequenceClassifier), or start train.py "
            "from a BERT masked language model")
    if model in _BERT_ENCODERS:
        raise ValueError(
            f"a BERT encoder without its masked-LM head ({model}): "
            "train.py fine-tunes a masked language model from a Hugging "
            "Face BertForMaskedLM or BertForPreTraining directory or a "
            "keras-hub BertMaskedLM preset")
    return Description(kind, TASKS[kind])


_loaded = {}  # (real path, kind) -> (model, tokenizer)


def load(directory):
    """The `(model, tokenizer)` of `directory` (read once per process).

    Args:
        directory: str. A directory `describe` accepts.

    Returns:
        (model, tokenizer): a built `CausalLM` and `GPT2Tokenizer`, a
        built `Transformer` and `MarianTokenizer`, or a built `MaskedLM`
        and `WordPieceTokenizer`.

    Raises:
        ValueError, FileNotFoundError: what `describe` or the reader
            refuses.
    """
    kind = describe(directory).kind
    key = (os.path.realpath(directory), kind)
    if key not in _loaded:
        if kind == MARIAN:
            from tfattn.interop import marian
            _loaded[key] = marian.from_huggingface(directory)
        elif kind in (BERT_HUGGINGFACE, BERT_KERAS_HUB):
            from tfattn.interop import bert
            read = (bert.from_huggingface if kind == BERT_HUGGINGFACE
                    else bert.from_keras_hub)
            _loaded[key] = read(directory)
        else:
            from tfattn.interop import gpt2
            read = (gpt2.from_huggingface if kind == GPT2_HUGGINGFACE
                    else gpt2.from_keras_hub)
            _loaded[key] = read(directory)
    return _loaded[key]


def architecture_fields(model):
    """The HParams fields a checkpoint's model fixes, with its values.

    Args:
        model: a `CausalLM`, `Transformer` or `MaskedLM` of `load`.

    Returns:
        dict of HParams field -> value (`num_layers`, `num_units`,
        `num_heads`, `ffn_units`, the two dropout rates, `max_length`,
        `vocab_size`).
    """
    config = model.get_config()
    names = dict(_FIELDS[type(model).__name__],
                 **{name: name for name in _COMMON})
    return {field: config[key] for field, key in names.items()}


def save_to_run(kind, source, architecture, tokenizer, model_dir):
    """Writes `model_dir/pretrained/`: the record and the tokenizer's files
    (atomically, all or none).

    Args:
        kind: str. `describe(source).kind`.
        source: str. The checkpoint directory (recorded for the user).
        architecture: dict. The checkpoint's model's Keras config
            (`keras.saving.serialize_keras_object(model)`).
        tokenizer: its `GPT2Tokenizer`, `MarianTokenizer` or
            `WordPieceTokenizer`.
        model_dir: str. The run's directory.
    """
    directory = os.path.join(str(model_dir), RUN_SUBDIR)
    tf.io.gfile.makedirs(directory)
    record = {"kind": kind, "source": os.path.abspath(str(source)),
              "model": architecture}
    contents = {_RECORD: json.dumps(record, indent=1)}
    if kind == MARIAN:
        contents.update({name: tokenizer.files[name]
                         for name in _MARIAN_FILES[:-1]})
        contents["config.json"] = json.dumps(tokenizer.config)
    elif kind in (BERT_HUGGINGFACE, BERT_KERAS_HUB):
        contents["vocab.txt"] = "".join(t + "\n"
                                        for t in tokenizer.vocabulary)
        contents[_BERT_CONFIG] = json.dumps(
            {"do_lower_case": tokenizer.lowercase})
    else:
        contents["vocab.json"] = json.dumps(tokenizer.vocabulary,
                                            ensure_ascii=False)
        contents["merges.txt"] = "".join(m + "\n" for m in tokenizer.merges)
    write_files_atomically({os.path.join(directory, name): value
                            for name, value in contents.items()})


def load_from_run(model_dir):
    """(model config, tokenizer, record) of a run started from a
    checkpoint, or None for another run.

    Args:
        model_dir: str. The run's directory.

    Returns:
        None, or (dict: the model's Keras config, for
        `keras.saving.deserialize_keras_object`; the tokenizer; dict: the
        record, with `kind` and `source`).

    Raises:
        ValueError: the record or the tokenizer does not read back (the
            file named).
    """
    directory = os.path.join(str(model_dir), RUN_SUBDIR)
    path = os.path.join(directory, _RECORD)
    if not tf.io.gfile.exists(path):
        return None
    with tf.io.gfile.GFile(path, "r") as f:
        try:
            record = json.loads(f.read())
            kind = record["kind"]
        except (ValueError, KeyError, TypeError) as error:
            raise ValueError(f"{path} does not read back ({error!r})") \
                from None
    if kind == MARIAN:
        from tfattn.interop._marian_vocab import MarianTokenizer
        with open(os.path.join(directory, "config.json"),
                  encoding="utf-8") as f:
            config = json.load(f)
        tokenizer = MarianTokenizer.from_directory(directory, config)
    elif kind in (BERT_HUGGINGFACE, BERT_KERAS_HUB):
        from tfattn.interop.wordpiece_tokenizer import WordPieceTokenizer
        with open(os.path.join(directory, _BERT_CONFIG),
                  encoding="utf-8") as f:
            lowercase = bool(json.load(f)["do_lower_case"])
        tokenizer = WordPieceTokenizer.from_file(
            os.path.join(directory, "vocab.txt"), lowercase=lowercase)
    else:
        from tfattn.interop.gpt2_tokenizer import GPT2Tokenizer
        tokenizer = GPT2Tokenizer.from_files(
            *(os.path.join(directory, name) for name in _GPT2_FILES))
    return record["model"], tokenizer, record
