"""Export a trained `Transformer` as a string -> string SavedModel.

`export_translator` writes a SavedModel whose `serving_default` signature
takes one input, `sentences` (a `[batch]` `tf.string` tensor of source
text; any other rank is refused in the graph with an InvalidArgumentError
naming `sentences`), and returns `translations` (`[batch]` `tf.string`,
detokenised, cut at EOS), `scores` (`[batch]` float32, the
length-penalised beam score) and `truncated` (`[batch]` bool, True where
the source was longer than `max_source_length` and was cut, see Lengths).
Everything runs inside the graph: SentencePiece tokenisation (a
`tensorflow_text.SentencepieceTokenizer` built from the serialized model
bytes, held by the exported `tf.Module`, see docs/traps.md item 7), truncation,
EOS and padding, the encoder, the cached beam search in one
`tf.while_loop`, and detokenisation. A client needs only TensorFlow and
tensorflow-text::

    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the SentencePiece ops)

    translator = tf.saved_model.load("export_dir")
    out = translator.signatures["serving_default"](
        sentences=tf.constant(["A dog runs."]))
    out["translations"], out["scores"]

A second signature, `attention`, returns the translations with their
pieces and the attention weights of every layer and head (see
`Translator.attention`), so that a served model can be inspected too.

The export directory also holds `model.keras` (the Keras model, for
fine-tuning or Python-side decoding) and `spm.model` (its vocabulary).

Lengths. Sources are cut to `max_source_length` pieces (EOS included; by
default the model's `max_length - extra_length`) and each row stops at its
own source length plus `extra_length`. Both the source and the decode buffer
keep the request's size: the source its longest row S, the buffer
`min(S + extra_length, model.max_length)` positions (the saved `max_length`
is its largest size), so short requests pay neither for the encoder nor for
the decoder's attention at full length. Under `jit_compile` the source is
padded to its length bucket (a power of two >= 8, at most
`max_source_length`), and XLA compiles once per batch size and bucket.
"""

import os

import tensorflow as tf

from tfattn.utils import files
from tfattn.export import contract
from tfattn.data.tokenizer import BOS_ID
from tfattn.data.tokenizer import EOS_ID
from tfattn.data.tokenizer import PAD_ID
from tfattn.data.tokenizer import SubwordTokenizer
from tfattn.decoding import samplers
from tfattn.decoding.translate import decode_lengths
from tfattn.decoding.translate import encode_for_translation
from tfattn.decoding.translate import model_proto_of
from tfattn.decoding.translate import pad_to_bucket
from tfattn.utils.validation import check_non_negative_float
from tfattn.utils.validation import check_positive_int
from tfattn.utils.validation import invalid_argument

__all__ = [
    "ATTENTION_SIGNATURE_KEY",
    "KERAS_FILENAME",
    "SIGNATURE_KEY",
    "loaded_export",
    "VOCAB_FILENAME",
    "graph_tokenizer",
    "SavedModelTranslator",
    "Translator",
    "export_translator",
    "load_translator",
]

_CONTEXT = "export_translator"
KERAS_FILENAME = "model.keras"
VOCAB_FILENAME = "spm.model"
SIGNATURE_KEY = "serving_default"
ATTENTION_SIGNATURE_KEY = "attention"


class Translator(tf.Module):
    """The exported module: the Keras model, the tokenizer and `translate`.

    Args:
        model: a built `tfattn.Transformer`.
        model_proto: bytes. Its serialized SentencePiece model (or another
            tokenizer that `graph_tokenizer` accepts).
        beam_size, alpha, extra_length: decoding settings, fixed in the
            graph. Default to `4`, `0.6` and `50`.
        max_source_length: int or None. See
            `tfattn.decoding.translate.decode_lengths`. Defaults to `None`.
        jit_compile: bool. Run `serving_default`'s search under XLA, with
            sources padded to their length bucket (one compilation per
            batch size and bucket, as `translate_texts(jit_compile=True)`).
            Defaults to `False`.
        name: str or None. The module name. Defaults to `None`.
    """

    def __init__(self, model, model_proto, beam_size=4, alpha=0.6,
                 extra_length=50, max_source_length=None, jit_compile=False,
                 name=None):
        """Keeps the model and the decoding settings; see the class
        docstring."""
        super().__init__(name=name)
        # Only the model's variables are saved, not the Keras object: saving
        # a tracked Keras 3 model also traces its default `serving_default`
        # (a float32 call signature, which an int-input model rejects).
        # `trace` tracks the tf.Variables the traced graph reads, as Keras'
        # own `ExportArchive` does (tracking the Keras variable wrappers
        # instead leaves a SavedModel that TF1-style loaders such as
        # `saved_model_cli run` cannot restore).
        self._set_model(model)
        # The tensorflow-text tokenizer (inside `SubwordTokenizer`) keeps the
        # model bytes as a graph constant: nothing outside the SavedModel.
        self.tokenizer = graph_tokenizer(model_proto)[0]
        self._beam_size = beam_size
        self._alpha = alpha
        self._extra_length = extra_length
        self._max_source_length, self._max_length = decode_lengths(
            model, extra_length, max_source_length
        )
        self._jit_compile = jit_compile
        self._compiled_search = self._search
        if jit_compile:
            self._compiled_search = tf.function(
                self._search, jit_compile=True, autograph=False)
        # Saved as (non-trainable) variables of the loaded object, so that a
        # client can read how the export decodes: `loaded.beam_size.numpy()`.
        settings = dict(
            beam_size=(beam_size, tf.int32),
            alpha=(alpha, tf.float32),
            extra_length=(extra_length, tf.int32),
            max_source_length=(self._max_source_length, tf.int32),
            max_length=(self._max_length, tf.int32),
        )
        for key, (value, dtype) in settings.items():
            setattr(self, key, tf.Variable(value, dtype=dtype,
                                           trainable=False, name=key))

    @property
    def model(self):
        """The Keras model (not saved as an object; its variables are)."""
        return self._model

    @tf.__internal__.tracking.no_automatic_dependency_tracking
    def _set_model(self, model):
        self._model = model

    def trace(self):
        """Traces `translate` and `attention` (the signatures to save).

        Returns:
            dict: `SIGNATURE_KEY` and `ATTENTION_SIGNATURE_KEY` to the
            concrete functions of `translate` and `attention`.
        """
        concrete = self.translate.get_concrete_function()
        self.model_variables = list(concrete.variables)
        return {SIGNATURE_KEY: concrete,
                ATTENTION_SIGNATURE_KEY:
                    self.attention.get_concrete_function()}

    @tf.function(input_signature=[
        tf.TensorSpec([None], tf.string, name="sentences")
    ], autograph=False)
    def translate(self, sentences):
        """Translates a batch of sentences (the `serving_default`
        signature).

        Args:
            sentences: `[B]` `tf.string` tensor.

        Returns:
            dict: `translations` (`[B]` `tf.string`), `scores` (`[B]`
            float32) and `truncated` (`[B]` bool).
        """
        if self._jit_compile:
            source, truncated = encode_for_translation(
                self.tokenizer, _vector_of_strings(sentences),
                self._max_source_length, return_truncated=True)
            ids, scores = self._compiled_search(
                pad_to_bucket(source, self._max_source_length))
        else:
            source, truncated, ids, scores = self._decode(sentences)
        # The serving contract: a text without pieces translates to "", 0.0.
        empty = contract.empty_source_rows(source)
        return {
            "translations": tf.where(empty, "",
                                     self.tokenizer.detokenize(ids)),
            "scores": tf.where(empty, 0.0, tf.cast(scores, tf.float32)),
            "truncated": truncated,
        }

    @tf.function(input_signature=[
        tf.TensorSpec([None], tf.string, name="sentences")
    ], autograph=False)
    def _decode(self, sentences):
        """(source ids, truncated, output ids, scores) of `[B]` strings.

        One trace of the beam search, called by both signatures: tracing
        it once per signature doubled the export's time.
        """
        source, truncated = encode_for_translation(
            self.tokenizer, _vector_of_strings(sentences),
            self._max_source_length, return_truncated=True)
        ids, scores = self._search(source)
        return source, truncated, ids, scores

    def _search(self, source):
        # The buffer: the request's longest source plus `extra_length`,
        # sized per call (under XLA, per compiled bucket).
        return self.model.search(
            source, None,
            samplers.for_beam_size(self._beam_size, self._alpha), EOS_ID,
            tf.zeros([2], tf.int32), self._extra_length)

    @tf.function(input_signature=[
        tf.TensorSpec([None], tf.string, name="sentences")
    ], autograph=False)
    def attention(self, sentences):
        """Translates `sentences` and returns the attention of the forward
        pass over the translations (the `attention` signature).

        Args:
            sentences: `[B]` `tf.string` tensor.

        Returns:
            dict: `translations` [B], `source_tokens` [B, S] and
            `target_tokens` [B, T] (pieces; "" past a row's end),
            `encoder` [layers, B, H, S, S], `decoder` [layers, B, H, T, T],
            `cross` [layers, B, H, T, S] (float32), and `truncated` [B].
        """
        source, truncated, ids, _ = self._decode(sentences)
        # The decoder reads BOS then the output: its query t emitted ids[t].
        target_in = tf.concat(
            [tf.fill([tf.shape(ids)[0], 1], BOS_ID), ids[:, :-1]], axis=1)
        _, scores = self.model((source, target_in),
                               return_attention_scores=True)

        def pieces(token_ids):
            text = self.tokenizer.id_to_string(token_ids)
            return tf.where(tf.equal(token_ids, PAD_ID), "", text)

        outputs = {kind: tf.stack(scores[kind]) for kind in scores}
        outputs.update(translations=self.tokenizer.detokenize(ids),
                       source_tokens=pieces(source),
                       target_tokens=pieces(ids), truncated=truncated)
        return outputs


def graph_tokenizer(tokenizer):
    """The tokenizer an export runs in its graph, and its SentencePiece
    bytes (written beside the SavedModel) when it has them.

    Args:
        tokenizer: a `SubwordTokenizer` or its SentencePiece bytes (a new
            `SubwordTokenizer` is made, owned by the export), or a
            `tf.Module` tokenizing in TensorFlow ops (`tokenize([B]
            strings)` -> ragged ids, `detokenize(ids)` -> strings; a
            pretrained checkpoint's `GPT2Tokenizer` or `MarianTokenizer`),
            used as it is.

    Returns:
        (tokenizer, bytes or None).

    Raises:
        ValueError: naming `tokenizer`, when it is none of these.
    """
    if isinstance(tokenizer, tf.Module) and not hasattr(
            tokenizer, "model_proto") and all(callable(getattr(
                tokenizer, name, None)) for name in ("tokenize",
                                                     "detokenize")):
        return tokenizer, None
    model_proto = model_proto_of(tokenizer)
    return SubwordTokenizer(model_proto), model_proto


def _vector_of_strings(sentences):
    """The signature declares [None] strings, but a SavedModel signature
    does not check what it is fed: a [2, 2] tensor would give 4
    translations. EnsureShape checks at run time (its name is in the
    error), then every row must be UTF-8 (`contract.utf8_checked`)."""
    return contract.utf8_checked(tf.ensure_shape(
        sentences, [None], name="sentences_must_be_a_vector_of_strings"))


def export_translator(model, tokenizer, export_dir, beam_size=4, alpha=0.6,
                      extra_length=50, max_source_length=None,
                      overwrite=False, keras_path=None, jit_compile=False):
    """Writes a string -> string SavedModel of `model`, atomically.

    The export is built in a temporary sibling directory (`.NAME.tmp-*`) and
    renamed to `export_dir` only once complete, so `export_dir` never holds
    half an export and a failure leaves nothing behind. With
    `overwrite=True` an existing `export_dir` is moved aside, the new one is
    renamed into place, and only then is the old one deleted (restored if
    that rename fails). Atomic on a local POSIX filesystem; export locally
    and copy to remote storage.

    Args:
        model: a built `tfattn.Transformer`.
        tokenizer: its `tfattn.data.SubwordTokenizer` (or a pretrained
            checkpoint's tokenizer: `graph_tokenizer`; or the bytes of the
            SentencePiece model).
        export_dir: str or path-like. Local directory to create.
        beam_size: int. 1 = greedy search. Defaults to `4`.
        alpha: float. Length penalty. Defaults to `0.6`.
        extra_length: int. Outputs stop at their source length plus this.
            Defaults to `50`.
        max_source_length: int or None. Sources are cut to this many pieces
            (EOS included). Defaults to `model.max_length - extra_length`.
        overwrite: bool. Replace an existing `export_dir`. Defaults to
            `False` (an existing one is an error).
        keras_path: str, path-like or None. Where to write the `.keras`
            model file instead of `export_dir/model.keras` (must end in
            `.keras`; written atomically, refused if it exists unless
            `overwrite`). Defaults to `None`.
        jit_compile: bool. Compile `serving_default`'s search with XLA
            (sources padded to their length bucket; the serving runtime
            must have XLA, as TensorFlow's Python runtime does). Gains
            most at small batches (`bench/export.py`; the Benchmarks
            page). Defaults to `False`.

    Returns:
        str, the absolute `export_dir`.

    Raises:
        FileExistsError: `export_dir` (or `keras_path`) exists and
            `overwrite` is False.
        ValueError: an invalid argument (the message names it).
    """
    beam_size = check_positive_int("beam_size", beam_size, _CONTEXT)
    alpha = check_non_negative_float("alpha", alpha, _CONTEXT)
    for flag, value in (("overwrite", overwrite),
                        ("jit_compile", jit_compile)):
        if not isinstance(value, bool):
            raise invalid_argument(flag, "a Python bool", value, _CONTEXT)
    in_graph, model_proto = graph_tokenizer(tokenizer)
    if not getattr(model, "built", False) or not hasattr(model, "generate"):
        raise invalid_argument(
            "model", "a built tfattn.Transformer (call it once, or load it)",
            type(model).__name__, _CONTEXT,
        )
    export_dir = files.local_directory("export_dir", export_dir, _CONTEXT)
    if keras_path is not None:
        keras_path = files.local_directory("keras_path", keras_path, _CONTEXT)
        if not keras_path.endswith(".keras"):
            raise invalid_argument("keras_path", "a path ending in '.keras'",
                                   keras_path, _CONTEXT)
    # Validates the lengths before any file is written.
    translator = Translator(model, in_graph, beam_size=beam_size,
                            alpha=alpha, extra_length=extra_length,
                            max_source_length=max_source_length,
                            jit_compile=jit_compile)
    if keras_path is not None:
        files.refuse_existing(keras_path, overwrite)
    tmp_keras = None
    try:
        with files.directory_written_atomically(export_dir,
                                                overwrite) as tmp_dir:
            _save_saved_model(translator, tmp_dir)
            if model_proto is not None:
                with open(os.path.join(tmp_dir, VOCAB_FILENAME), "wb") as f:
                    f.write(model_proto)
            if keras_path is None:
                _save_keras(model, os.path.join(tmp_dir, KERAS_FILENAME))
            else:
                os.makedirs(os.path.dirname(keras_path), exist_ok=True)
                # Ends in .keras, as `Model.save` requires.
                tmp_keras = files.temporary_sibling(keras_path) + ".keras"
                _save_keras(model, tmp_keras)
        if tmp_keras is not None:
            files.refuse_existing(keras_path, overwrite)
            os.replace(tmp_keras, keras_path)
    finally:
        if tmp_keras is not None and os.path.exists(tmp_keras):
            os.remove(tmp_keras)
    return export_dir


class SavedModelTranslator:
    """Text to text with an export of `export_translator`, in Python.

    It keeps the serving contract of `tfattn.export.contract`, as
    `CTranslate2Translator` does: the texts are checked here, so a bad one
    is refused naming `texts[i]` before anything runs in the graph.

    Args:
        export_dir: str or path-like. The export directory.

    Attributes:
        module: the loaded SavedModel (`tf.saved_model.load`).
        signatures: its signatures (`serving_default`, `attention`), each
            taking `sentences`, a `[B]` `tf.string` tensor.
        settings: dict, the export's decoding settings (`beam_size`,
            `alpha`, `extra_length`, `max_source_length`, `max_length`).

    Raises:
        FileNotFoundError: `export_dir` holds no `saved_model.pb`.
    """

    def __init__(self, export_dir):
        """Loads the SavedModel and reads its decoding settings."""
        import tensorflow_text  # noqa: F401  (registers the SentencePiece ops)

        _, self.module = loaded_export(export_dir, "load_translator",
                                       "export_translator")
        self.signatures = self.module.signatures
        self.settings = {name: getattr(self.module, name).numpy().item()
                         for name in ("beam_size", "alpha", "extra_length",
                                      "max_source_length", "max_length")}

    def translate(self, texts):
        """List of str -> list of str (see `translate_details`).

        Args:
            texts: list or tuple of str.

        Returns:
            A list of str, the translations.
        """
        return self.translate_details(texts).translations

    def translate_details(self, texts):
        """Translates `texts` with the export's `serving_default` signature.

        Args:
            texts: list or tuple of str.

        Returns:
            `tfattn.export.contract.Translations`.

        Raises:
            ValueError: `texts` breaks the serving contract (naming
                `texts` or `texts[i]`).
        """
        texts = contract.checked_texts(texts,
                                       "SavedModelTranslator.translate")
        out = self.signatures[SIGNATURE_KEY](
            sentences=tf.constant(texts, tf.string, shape=[len(texts)]))
        return contract.Translations(
            [t.decode("utf-8") for t in out["translations"].numpy()],
            [float(x) for x in out["scores"].numpy()],
            [bool(x) for x in out["truncated"].numpy()])


def loaded_export(export_dir, context, producer,
                  files_needed=("saved_model.pb",)):
    """The SavedModel in `export_dir`, checked first: every loader's
    (`load_translator`, `load_language_model`, `load_masked_lm`) one way.

    Args:
        export_dir: what the caller passed: a directory path.
        context: str. The loader, named in the messages.
        producer: str. The `tfattn.export` function that writes such a
            directory, named when a file is missing.
        files_needed: tuple of str. Files the directory must hold.

    Returns:
        `(export_dir, module)`: the path as a str and the loaded module.

    Raises:
        ValueError: `export_dir` is not a path (naming it).
        FileNotFoundError: a needed file is missing.
    """
    export_dir = files.checked_path("export_dir", export_dir, context)
    for name in files_needed:
        if not os.path.isfile(os.path.join(export_dir, name)):
            raise FileNotFoundError(
                f"{export_dir}: no {name}; not an export of "
                f"tfattn.export.{producer}")
    return export_dir, tf.saved_model.load(export_dir)


def load_translator(export_dir):
    """A `SavedModelTranslator` of the export at `export_dir`.

    Args:
        export_dir: str or path-like. The directory `export_translator`
            wrote.

    Returns:
        `SavedModelTranslator`: `.translate(texts)` for text, `.signatures`
        for the graph functions (`serving_default`, `attention`).
    """
    return SavedModelTranslator(export_dir)


def _save_saved_model(translator, directory):
    tf.saved_model.save(translator, directory, signatures=translator.trace())


def _save_keras(model, path):
    model.save(path)
