"""Export a fine-tuned `SequenceClassifier` as a SavedModel: texts (strings)
in, labels out.

One signature, `serving_default`, taking `texts`, a `[batch]` `tf.string`
tensor. Each text is read as the classifier read it in training, by the
rule of `tfattn.data.monolingual.encode_texts`: `<s> pieces </s>`, padded
with 0, and a text of more than `max_length - 2` pieces keeps its first
`max_length - 2` (`max_length`, the export's, counts the ids of a row as
`encode_texts`' `length` does: export with the `length` you trained with).
It returns, with C the model's `num_classes`:

- `probabilities`: `[batch, C]` float32, the softmax of the logits;
- `label_ids`: `[batch]` int32, the most probable class (argmax of the
  logits);
- `labels`: `[batch]` `tf.string`, that class's name from the export's
  `labels`, or its id written as a string ("0", "1", ...) when the export
  has no names;
- `truncated`: `[batch]` bool, the text had more than `max_length - 2`
  pieces and only its first ones were read.

An empty text (no piece once normalised) is read as `<s> </s>` and
classified like any other, as `encode_texts` reads it. A batch of 0 texts
gives outputs of batch 0. A tensor of another rank fails the call with an
`InvalidArgumentError` naming `texts_must_be_a_vector_of_strings`, bytes
that are not UTF-8 one naming `texts_must_be_utf8`. Tokenisation runs in
the graph (a `tensorflow_text.SentencepieceTokenizer` built from the
vocabulary's bytes, held by the export), so a client needs TensorFlow and
tensorflow-text only::

    import tensorflow as tf, tensorflow_text  # noqa: F401
    classifier = tf.saved_model.load("export_dir")
    out = classifier.signatures["serving_default"](
        texts=tf.constant(["the staff was rude"]))
    out["labels"], out["probabilities"]

In Python, `load_classifier(export_dir).classify(texts)` checks the texts
first (naming `texts` or `texts[i]`) and returns `Classifications`.

The directory also holds `model.keras` (the Keras classifier, to fine-tune
further) and `spm.model` (its vocabulary).
"""

from typing import NamedTuple

import numpy as np
import tensorflow as tf

from tfattn.data.tokenizer import BOS_ID
from tfattn.data.tokenizer import EOS_ID
from tfattn.data.tokenizer import SubwordTokenizer
from tfattn.export import contract
from tfattn.export.language_model import write_export
from tfattn.export.saved_model import SIGNATURE_KEY
from tfattn.export.saved_model import loaded_export
from tfattn.models.classifier import SequenceClassifier
from tfattn.utils import files
from tfattn.utils.texts import checked_texts
from tfattn.utils.validation import check_positive_int
from tfattn.utils.validation import invalid_argument

__all__ = ["Classifications", "ClassifierExport", "SavedModelClassifier",
           "export_classifier", "load_classifier"]

_CONTEXT = "export_classifier"
_TEXTS = tf.TensorSpec([None], tf.string, name="texts")


class Classifications(NamedTuple):
    """What `SavedModelClassifier.classify` returns for N texts:
    `labels` (list of N str, the class names, or the ids as strings when
    the export has no names), `label_ids` (list of N int), `probabilities`
    (NumPy float32 `[N, num_classes]`, each row summing to 1) and
    `truncated` (list of N bool, the text was cut to `max_length`)."""

    labels: list
    label_ids: list
    probabilities: np.ndarray
    truncated: list


class ClassifierExport(tf.Module):
    """The exported module: the classifier's variables, the tokenizer and
    the `serving_default` signature (see the module docstring).

    Args:
        model: a built `tfattn.models.SequenceClassifier`.
        model_proto: bytes. Its SentencePiece model, of the model's
            vocabulary size.
        labels: list of `num_classes` distinct str. The class names the
            signature answers with (`["0", "1", ...]` for none).
        max_length: int in [3, model.max_length]. The ids of a row.
        name: str or None. The module name.

    Raises:
        ValueError: naming `tokenizer` when its vocabulary size is not the
            model's.
    """

    def __init__(self, model, model_proto, labels, max_length, name=None):
        """Checks the vocabulary's size; keeps the model (its variables
        only are saved) and the settings."""
        super().__init__(name=name)
        self.tokenizer = SubwordTokenizer(model_proto)
        if self.tokenizer.vocab_size != model.vocab_size:
            raise invalid_argument(
                "tokenizer", f"the vocabulary of the model's "
                f"{model.vocab_size} pieces (vocab_size)",
                f"<SubwordTokenizer of {self.tokenizer.vocab_size} pieces>",
                _CONTEXT)
        self._max_length = max_length
        self._names = tf.constant(labels, tf.string)
        self._set_model(model)
        # Saved as variables of the loaded object, for clients to read.
        self.max_length = tf.Variable(max_length, dtype=tf.int32,
                                      trainable=False)
        self.label_names = tf.Variable(labels, dtype=tf.string,
                                       trainable=False)

    @tf.__internal__.tracking.no_automatic_dependency_tracking
    def _set_model(self, model):
        self._model = model

    def trace(self):
        """The concrete signatures to save.

        Returns:
            dict: `serving_default` to its concrete function.
        """
        classify = self.classify.get_concrete_function()
        self.model_variables = list(classify.variables)
        return {SIGNATURE_KEY: classify}

    @tf.function(input_signature=[_TEXTS], autograph=False)
    def classify(self, texts):
        """The class of each text (the `serving_default` signature).

        Args:
            texts: `[B]` `tf.string`.

        Returns:
            dict: `probabilities` (`[B, C]` float32), `label_ids` (`[B]`
            int32), `labels` (`[B]` string), `truncated` (`[B]` bool).
        """
        texts = contract.utf8_checked(tf.ensure_shape(
            texts, [None], name="texts_must_be_a_vector_of_strings"),
            name="texts")
        ids, truncated = self._ids(texts)
        logits = tf.cast(self._model(ids, training=False),
                         tf.float32)  # [B, C]
        label_ids = tf.argmax(logits, axis=-1, output_type=tf.int32)
        return {"probabilities": tf.nn.softmax(logits),
                "label_ids": label_ids,
                "labels": tf.gather(self._names, label_ids),
                "truncated": truncated}

    def _ids(self, texts):
        """`encode_texts`' rows in the graph, as wide as the longest.

        Returns:
            `(ids, truncated)`: int32 `[B, T]` with 2 <= T <= max_length,
            and bool `[B]`.
        """
        pieces = self.tokenizer.tokenize(texts)
        room = self._max_length - 2
        truncated = pieces.row_lengths() > room
        batch = tf.shape(texts)[0]
        rows = tf.concat([tf.fill([batch, 1], BOS_ID),
                          tf.cast(pieces[:, :room], tf.int32),
                          tf.fill([batch, 1], EOS_ID)], axis=1)
        ids = rows.to_tensor(0)  # [B, T]
        # A batch of 0 texts has no row to set T: 2 columns, as <s> </s>.
        width = tf.maximum(2 - tf.shape(ids)[1], 0)
        return tf.pad(ids, [[0, 0], [0, width]]), truncated


def _checked_labels(labels, num_classes):
    """`labels` as a list of distinct str, `["0", "1", ...]` for None."""
    if labels is None:
        return [str(i) for i in range(num_classes)]
    labels = checked_texts(labels, _CONTEXT, name="labels")
    if len(labels) != num_classes:
        raise invalid_argument(
            "labels", f"one name per class of the model (num_classes="
            f"{num_classes})", labels, _CONTEXT)
    for i, label in enumerate(labels):
        if not label:
            raise invalid_argument(f"labels[{i}]", "a non-empty str", label,
                                   _CONTEXT)
        if label in labels[:i]:
            raise invalid_argument(
                f"labels[{i}]", f"a name no other class has (labels"
                f"[{labels.index(label)}] is the same)", label, _CONTEXT)
    return labels


def _checked_max_length(max_length, model):
    """`max_length`, the model's for None, checked in [3, model's]."""
    if max_length is None:
        max_length = model.max_length
    else:
        check_positive_int("max_length", max_length, _CONTEXT)
    if not 3 <= max_length <= model.max_length:
        raise invalid_argument(
            "max_length", f"an int from 3 (<s>, a piece, </s>) to the "
            f"model's max_length={model.max_length}", max_length, _CONTEXT)
    return max_length


def _model_proto(tokenizer):
    """The SentencePiece bytes of `tokenizer` (or `tokenizer` itself)."""
    proto = tokenizer if isinstance(tokenizer, bytes) else getattr(
        tokenizer, "model_proto", None)
    if not isinstance(proto, bytes) or not proto:
        raise invalid_argument(
            "tokenizer", "a tfattn.data.SubwordTokenizer (or the bytes of "
            "its SentencePiece model)", f"<{type(tokenizer).__name__}>",
            _CONTEXT)
    return proto


def export_classifier(model, tokenizer, export_dir, labels=None,
                      max_length=None, overwrite=False):
    """Writes the text-to-label SavedModel of a `SequenceClassifier`,
    atomically (built beside `export_dir`, renamed when complete).

    Texts of more than `max_length - 2` pieces are cut as
    `tfattn.data.monolingual.encode_texts(tokenizer, texts, max_length)`
    cuts them (their first pieces are read) and flagged `truncated`.

    Args:
        model: a built `tfattn.models.SequenceClassifier` (for example
            from `SequenceClassifier.from_masked_lm`, fine-tuned).
        tokenizer: its `SubwordTokenizer` (or the SentencePiece bytes): the
            vocabulary the model's ids come from, of its `vocab_size`.
        export_dir: str or path-like. Local directory to create.
        labels: list or tuple of `num_classes` distinct non-empty str, the
            name of each class id, or None (the ids as strings). Defaults
            to `None`.
        max_length: int in [3, model.max_length], or None (the model's
            `max_length`). The ids of a row, `<s>` and `</s>` included: the
            `length` given to `encode_texts` in training. Defaults to
            `None`.
        overwrite: bool. Replace an existing `export_dir`. Defaults to
            `False`.

    Returns:
        str, the absolute `export_dir`.

    Raises:
        FileExistsError: `export_dir` exists and `overwrite` is False.
        ValueError: an invalid argument (the message names it).
    """
    if not isinstance(overwrite, bool):
        raise invalid_argument("overwrite", "a Python bool", overwrite,
                               _CONTEXT)
    if not isinstance(model, SequenceClassifier) or not model.built:
        raise invalid_argument(
            "model", "a built tfattn.models.SequenceClassifier",
            f"<{type(model).__name__}>", _CONTEXT)
    labels = _checked_labels(labels, model.num_classes)
    max_length = _checked_max_length(max_length, model)
    model_proto = _model_proto(tokenizer)
    export_dir = files.local_directory("export_dir", export_dir, _CONTEXT)
    module = ClassifierExport(model, model_proto, labels, max_length)
    write_export(module, model, model_proto, export_dir, overwrite)
    return export_dir


class SavedModelClassifier:
    """Texts to labels with an export of `export_classifier`, in Python:
    the texts are checked here (naming `texts` or `texts[i]`, before
    anything runs in the graph), then classified by the signature.

    Args:
        export_dir: str or path-like. The export directory.

    Attributes:
        module: the loaded SavedModel (`tf.saved_model.load`).
        signatures: its signatures (`serving_default`, taking `texts`).
        labels: list of str. The name of each class id (the ids as
            strings when the export has none).
        max_length: int. The ids of a row; texts of more than
            `max_length - 2` pieces are cut.

    Raises:
        FileNotFoundError: `export_dir` holds no `saved_model.pb`.
    """

    def __init__(self, export_dir):
        """Loads the SavedModel and reads its settings."""
        import tensorflow_text  # noqa: F401  (registers the SentencePiece ops)

        _, self.module = loaded_export(export_dir, "load_classifier",
                                       "export_classifier")
        self.signatures = self.module.signatures
        self.labels = [name.decode("utf-8")
                       for name in self.module.label_names.numpy()]
        self.max_length = int(self.module.max_length.numpy())

    def classify(self, texts):
        """The class of each text.

        Args:
            texts: list or tuple of str (may be empty).

        Returns:
            `Classifications`: `labels`, `label_ids`, `probabilities`
            (`[N, num_classes]`) and `truncated`, one row per text.

        Raises:
            ValueError: `texts` is not a list or tuple of valid str
                (naming `texts` or `texts[i]`).
        """
        texts = checked_texts(texts, "SavedModelClassifier.classify")
        out = self.signatures[SIGNATURE_KEY](
            texts=tf.constant(texts, tf.string, shape=[len(texts)]))
        return Classifications(
            labels=[name.decode("utf-8")
                    for name in out["labels"].numpy().tolist()],
            label_ids=out["label_ids"].numpy().tolist(),
            probabilities=out["probabilities"].numpy(),
            truncated=[bool(x) for x in out["truncated"].numpy()])


def load_classifier(export_dir):
    """A `SavedModelClassifier` of the export at `export_dir`.

    Args:
        export_dir: str or path-like. The directory `export_classifier`
            wrote.

    Returns:
        `SavedModelClassifier`: `.classify(texts)` for Python lists,
        `.signatures` for the graph function.
    """
    return SavedModelClassifier(export_dir)
