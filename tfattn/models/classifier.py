"""`SequenceClassifier`: a `TextEncoder` with a pooled classification head,
fine-tuned from a pretrained `MaskedLM`."""

import keras
import numpy as np
from keras import ops

from tfattn.layers.dropout import Dropout
from tfattn.layers.initializers import fresh_initializer
from tfattn.models.text_encoder import ENCODER_ARGUMENTS
from tfattn.models.text_encoder import TextEncoder
from tfattn.models.text_encoder import check_call_flags
from tfattn.models.text_encoder import encoder_arguments
from tfattn.models.text_encoder import encoder_config
from tfattn.models.text_encoder import mean_over_tokens
from tfattn.utils import validation
from tfattn.utils.seeds import sublayer_seed

__all__ = ["SequenceClassifier"]

_CONTEXT = "SequenceClassifier"
POOLINGS = ("first", "mean", "pooler")


@keras.saving.register_keras_serializable(package="tfattn")
class SequenceClassifier(keras.Model):
    """Sentence classifier: a `TextEncoder`, a pooled vector, dropout and a
    Dense layer to `num_classes` logits (BERT's fine-tuning recipe; keras-hub
    `BertTextClassifier`, Model Garden `ClassificationHead`).

    Args:
        vocab_size ... seed: `TextEncoder`'s arguments.
        num_classes: int >= 2.
        pooling: `"first"` (the first token's vector: BERT's [CLS]; in
            tfattn's batches the `<s>` token) or `"mean"` (the mean over
            the real tokens) or `"pooler"` (BERT's pooler: the first
            token's vector through Dense(C) and tanh, a layer
            `pooler_dense` whose kernel is drawn from
            `kernel_initializer`). Defaults to `"first"`.
        classifier_dropout_rate: float or None (= `dropout_rate`). Dropout
            on the pooled vector.
        **kwargs: base `keras.Model` arguments (`name`, `dtype`).

    Call arguments:
        - ids: int [B, T], or a dict with `"token_ids"` [B, T] and
          optionally `"segment_ids"` int [B, T] (with `type_vocab_size >
          0`; all zeros when absent). 0 = padding, T >= 1 (a pooled
          vector needs a token; T = 0 is refused naming `ids`, in Python
          where the shape is known and by an in-graph assertion in a
          TensorFlow graph).
        - training: bool.

    Returns:
        float32 logits [B, num_classes].

    Example::

        classifier = tfattn.models.SequenceClassifier.from_masked_lm(
            pretrained_mlm, num_classes=2)
        classifier.compile("adam", keras.losses.SparseCategoricalCrossentropy(
            from_logits=True), metrics=["accuracy"])
        classifier.fit(ids, labels)
    """

    def __init__(self, vocab_size, num_classes=2, pooling="first",
                 classifier_dropout_rate=None, **kwargs):
        """Checks the arguments; the sublayers are created when built."""
        encoder_kwargs, kwargs = encoder_arguments(kwargs)
        self._encoder_kwargs = dict(vocab_size=vocab_size, **encoder_kwargs)
        probe = TextEncoder(context=_CONTEXT, **self._encoder_kwargs)
        if (isinstance(num_classes, bool) or not isinstance(num_classes, int)
                or num_classes < 2):
            raise validation.invalid_argument(
                "num_classes", "an int >= 2", num_classes, _CONTEXT)
        validation.check_choice("pooling", pooling, POOLINGS, _CONTEXT)
        if classifier_dropout_rate is not None:
            validation.check_rate("classifier_dropout_rate",
                                  classifier_dropout_rate, _CONTEXT)
        super().__init__(**kwargs)
        for name in ENCODER_ARGUMENTS:
            setattr(self, name, getattr(probe, name))
        self.num_classes = num_classes
        self.pooling = pooling
        self.classifier_dropout_rate = classifier_dropout_rate

    @classmethod
    def from_masked_lm(cls, masked_lm, num_classes=2, pooling="first",
                       classifier_dropout_rate=None, **overrides):
        """A classifier with `masked_lm`'s encoder: its sizes and its
        trained weights (the masked-LM head is left behind).

        Args:
            masked_lm: a built `tfattn.models.MaskedLM`.
            num_classes, pooling, classifier_dropout_rate: as in the
                constructor.
            **overrides: encoder arguments that may differ without changing
                a weight's shape (e.g. `dropout_rate`, `seed`).

        Returns:
            A built `SequenceClassifier`.

        Raises:
            ValueError: naming `masked_lm` when it is not a built MaskedLM.
        """
        _check_pretrained(masked_lm)
        encoder = masked_lm.text_encoder
        kwargs = {name: getattr(encoder, name) for name in ENCODER_ARGUMENTS}
        kwargs.update(overrides)
        classifier = cls(num_classes=num_classes, pooling=pooling,
                         classifier_dropout_rate=classifier_dropout_rate,
                         dtype=masked_lm.dtype_policy, **kwargs)
        classifier.build((None, None))
        classifier.load_encoder(masked_lm)
        return classifier

    def load_encoder(self, masked_lm):
        """Copies `masked_lm`'s encoder weights (token table, positions,
        blocks) into this classifier's encoder, after checking that every
        weight has the same shape.

        Args:
            masked_lm: a built `MaskedLM` (or a `TextEncoder`).

        Raises:
            ValueError: naming `masked_lm`, the first weight whose shape
                differs and both shapes; nothing is copied then.
        """
        source = (masked_lm if isinstance(masked_lm, TextEncoder)
                  else _check_pretrained(masked_lm).text_encoder)
        if not self.built:
            self.build((None, None))
        mine, theirs = self.text_encoder.weights, source.weights
        if len(mine) != len(theirs):
            raise validation.invalid_argument(
                "masked_lm", f"an encoder of {len(mine)} weights like this "
                f"classifier's ({self.num_layers} layers)",
                f"<encoder of {len(theirs)} weights>", _CONTEXT)
        for want, got in zip(mine, theirs):
            if tuple(want.shape) != tuple(got.shape):
                raise validation.invalid_argument(
                    "masked_lm", f"weight {want.path} of shape "
                    f"{tuple(want.shape)}",
                    f"<weight {got.path} of shape {tuple(got.shape)}>",
                    _CONTEXT)
        for want, got in zip(mine, theirs):
            want.assign(np.asarray(ops.convert_to_numpy(got)))

    def build(self, ids_shape):
        self.text_encoder = TextEncoder(
            context=_CONTEXT, dtype=self.dtype_policy, name="text_encoder",
            **self._encoder_kwargs)
        rate = (self.dropout_rate if self.classifier_dropout_rate is None
                else self.classifier_dropout_rate)
        self.classifier_dropout = Dropout(
            rate, seed=sublayer_seed(self.seed, "classifier_dropout"),
            dtype=self.dtype_policy, name="classifier_dropout")
        self.output_dense = keras.layers.Dense(
            self.num_classes,
            kernel_initializer=fresh_initializer(self.kernel_initializer),
            dtype=self.dtype_policy, name="output_dense")
        if self.pooling == "pooler":
            self.pooler_dense = keras.layers.Dense(
                self.num_units, activation="tanh",
                kernel_initializer=fresh_initializer(
                    self.kernel_initializer),
                dtype=self.dtype_policy, name="pooler_dense")
            self.pooler_dense.build((None, self.num_units))
        if isinstance(ids_shape, dict):
            ids_shape = ids_shape["token_ids"]
        self.text_encoder.build(tuple(ids_shape))
        self.output_dense.build((None, self.num_units))
        self.built = True

    def call(self, ids, training=None):
        check_call_flags(training, False, _CONTEXT)
        segments = None
        if isinstance(ids, dict):
            if "token_ids" not in ids:
                raise validation.invalid_argument(
                    "ids", "ids [B, T] or a dict with 'token_ids'",
                    f"<dict with keys {sorted(ids)}>", _CONTEXT)
            ids, segments = ids["token_ids"], ids.get("segment_ids")
        ids = _check_tokens(self.text_encoder.check_ids(ids))
        x = self.text_encoder(ids, segment_ids=segments, training=training)
        if self.pooling == "mean":
            pooled = mean_over_tokens(x, ids)
        else:
            pooled = x[:, 0]
            if self.pooling == "pooler":
                pooled = self.pooler_dense(pooled)
        pooled = self.classifier_dropout(pooled, training=training)
        return ops.cast(self.output_dense(pooled), "float32")

    def get_config(self):
        config = super().get_config()
        config.update(encoder_config(self))
        config.update(
            num_classes=self.num_classes,
            pooling=self.pooling,
            classifier_dropout_rate=self.classifier_dropout_rate,
        )
        return config


def _check_tokens(ids):
    """`ids` [B, T] after checking that T >= 1 (statically, or in a
    TensorFlow graph by an assertion with the same message)."""
    length = validation.shape_of(ids)[1]
    expected = "at least one token per row (T >= 1) to pool"
    if length is not None:
        if length < 1:
            raise validation.invalid_argument(
                "ids", expected, f"<tensor of shape {ids.shape}>", _CONTEXT)
        return ids
    if keras.config.backend() != "tensorflow" or isinstance(
            ids, keras.KerasTensor):
        return ids
    import tensorflow as tf

    check = tf.debugging.assert_positive(
        tf.shape(ids)[1], message=f"{_CONTEXT}: Received an invalid value "
        f"for argument `ids`, expected {expected}.")
    with tf.control_dependencies([check]):
        return tf.identity(ids)


def _check_pretrained(masked_lm):
    if not getattr(masked_lm, "built", False) or not hasattr(
            masked_lm, "text_encoder"):
        raise validation.invalid_argument(
            "masked_lm", "a built tfattn.models.MaskedLM (call it once or "
            "load it)", f"<{type(masked_lm).__name__}>", _CONTEXT)
    return masked_lm
