"""Export a trained `CausalLM` as a SavedModel: prompts (strings) in,
continuations (strings) out.

Two signatures, each taking `prompts`, a `[batch]` `tf.string` tensor:

- `serving_default`: greedy continuations.
- `sample`: top-p sampling, with the inputs `temperature` (float32 > 0),
  `top_p` (float32 in (0, 1]; 1 samples from the whole distribution) and
  `seed` (int32: the same seed and prompts give the same continuations).

Both return `continuations` (`[batch]` `tf.string`: the generated text
only, cut at the end-of-text piece), `scores` (`[batch]` float32, the
continuation's log-probability under the model) and `truncated` (`[batch]`
bool: the prompt was longer than the export's prompt length and only its
last pieces were read). Everything runs in the graph: tokenisation, the
prompt read as BOS + its pieces (an empty prompt continues from BOS alone:
unconditional text), left-padded to the export's static prompt length,
prefilled in one pass, the search in one `tf.while_loop`, detokenisation.
A client needs TensorFlow and tensorflow-text::

    import tensorflow as tf, tensorflow_text  # noqa: F401
    lm = tf.saved_model.load("export_dir")
    lm.signatures["serving_default"](prompts=tf.constant(["a dog"]))
    lm.signatures["sample"](prompts=tf.constant(["a dog"]),
                            temperature=tf.constant(0.8),
                            top_p=tf.constant(0.9), seed=tf.constant(1))

`causal_lm_to_ctranslate2` writes the same model for CTranslate2's
`Generator` (its decoder-only spec, `ctranslate2_spec.decoder_only_spec`):
prompts are token lists starting with `<s>` (BOS).

The SavedModel directory also holds `model.keras` and `spm.model`. Lengths
are fixed at export: `max_new_tokens` pieces per continuation at most, and
prompts of at most `model.max_length - max_new_tokens` pieces (BOS
included).
"""

import os

import tensorflow as tf
from keras import ops

from tfattn.data.tokenizer import BOS_ID
from tfattn.data.tokenizer import EOS_ID
from tfattn.data.tokenizer import SubwordTokenizer
from tfattn.decoding import samplers
from tfattn.decoding.translate import model_proto_of
from tfattn.export import contract
from tfattn.utils import files
from tfattn.utils.validation import check_positive_int
from tfattn.utils.validation import invalid_argument

__all__ = ["SAMPLE_SIGNATURE_KEY", "LanguageModelExport",
           "export_language_model", "causal_lm_to_ctranslate2"]

_CONTEXT = "export_language_model"
SAMPLE_SIGNATURE_KEY = "sample"
_PROMPTS = tf.TensorSpec([None], tf.string, name="prompts")


class _TensorTopP(samplers.Sampler):
    """Top-p with temperature whose settings are graph tensors (the
    `sample` signature's inputs, checked in the graph)."""

    draws = True

    def __init__(self, top_p, temperature):
        """Keeps the two scalar tensors."""
        self.top_p, self.temperature = top_p, temperature

    def _choose(self, log_probs, seed):
        scaled = log_probs / self.temperature
        keep = samplers.nucleus(ops.softmax(scaled, axis=-1), self.top_p)
        return samplers.draw(ops.where(keep, scaled, -1e9), seed)


class LanguageModelExport(tf.Module):
    """The exported module: the model's variables, the tokenizer and the
    two signatures (see the module docstring).

    Args:
        model: a built `tfattn.CausalLM`.
        model_proto: bytes. Its serialized SentencePiece model.
        max_new_tokens: int >= 1. Pieces generated per prompt at most.
        name: str or None. The module name.
    """

    def __init__(self, model, model_proto, max_new_tokens, name=None):
        """Checks the lengths and keeps the model (its variables only are
        saved, as `saved_model.Translator` does)."""
        super().__init__(name=name)
        self._new = check_positive_int("max_new_tokens", max_new_tokens,
                                       _CONTEXT)
        self._width = model.max_length - self._new
        if self._width < 1:
            raise invalid_argument(
                "max_new_tokens", f"less than the model's max_length="
                f"{model.max_length}", max_new_tokens, _CONTEXT)
        self._set_model(model)
        self.tokenizer = SubwordTokenizer(model_proto)
        self.max_new_tokens = tf.Variable(self._new, dtype=tf.int32,
                                          trainable=False)
        self.max_prompt_length = tf.Variable(self._width, dtype=tf.int32,
                                             trainable=False)

    @tf.__internal__.tracking.no_automatic_dependency_tracking
    def _set_model(self, model):
        self._model = model

    def trace(self):
        """The concrete signatures to save.

        Returns:
            dict: `serving_default` and `sample` to concrete functions.
        """
        greedy = self.continue_greedily.get_concrete_function()
        self.model_variables = list(greedy.variables)
        return {"serving_default": greedy,
                SAMPLE_SIGNATURE_KEY: self.sample.get_concrete_function()}

    @tf.function(input_signature=[_PROMPTS], autograph=False)
    def continue_greedily(self, prompts):
        """Greedy continuations (the `serving_default` signature).

        Args:
            prompts: `[B]` `tf.string`.

        Returns:
            dict: `continuations`, `scores`, `truncated` (each `[B]`).
        """
        return self._continue(prompts, samplers.GreedySampler(),
                              tf.constant(0, tf.int32))

    @tf.function(input_signature=[
        _PROMPTS, tf.TensorSpec([], tf.float32, name="temperature"),
        tf.TensorSpec([], tf.float32, name="top_p"),
        tf.TensorSpec([], tf.int32, name="seed")], autograph=False)
    def sample(self, prompts, temperature, top_p, seed):
        """Top-p sampled continuations (the `sample` signature).

        Args:
            prompts: `[B]` `tf.string`.
            temperature: float32 scalar > 0.
            top_p: float32 scalar in (0, 1].
            seed: int32 scalar.

        Returns:
            dict: `continuations`, `scores`, `truncated` (each `[B]`).
        """
        checks = [
            tf.debugging.assert_positive(
                temperature, message="sample: temperature must be > 0"),
            tf.debugging.assert_positive(
                top_p, message="sample: top_p must be in (0, 1]"),
            tf.debugging.assert_less_equal(
                top_p, 1.0, message="sample: top_p must be in (0, 1]")]
        with tf.control_dependencies(checks):
            temperature = tf.identity(temperature)
        return self._continue(prompts, _TensorTopP(top_p, temperature), seed)

    def _continue(self, prompts, sampler, seed):
        prompts = contract.utf8_checked(tf.ensure_shape(
            prompts, [None], name="prompts_must_be_a_vector_of_strings"))
        pieces = self.tokenizer.tokenize(prompts)
        batch = tf.shape(prompts)[0]
        rows = tf.concat([tf.fill([batch, 1], BOS_ID), pieces], axis=1)
        lengths = tf.cast(rows.row_lengths(), tf.int32)
        truncated = lengths > self._width
        lengths = tf.minimum(lengths, self._width)
        left = _left_padded(rows, lengths, self._width)
        ids, scores = self._model.search(
            left[:, :-1], left[:, -1], lengths, tf.fill([batch], self._new),
            seed, self._new, sampler, EOS_ID)
        return {"continuations": self.tokenizer.detokenize(ids),
                "scores": tf.cast(scores, tf.float32),
                "truncated": truncated}


def _left_padded(rows, lengths, width):
    """The last `lengths[b]` ids of each ragged row, left-padded with 0 to
    `width` columns: int32 [B, width]."""
    # Right-aligned: column j holds the row's id at j - (width - length).
    ends = tf.cast(rows.row_lengths(), tf.int32)
    dense = rows.to_tensor(default_value=0)
    dense = tf.pad(dense, [[0, 0], [0, width]])
    columns = tf.range(width)[None, :]
    source = columns - (width - lengths[:, None]) + (ends - lengths)[:, None]
    valid = columns >= (width - lengths[:, None])
    picked = tf.gather(dense, tf.maximum(source, 0), batch_dims=1)
    return tf.where(valid, picked, 0)


def export_language_model(model, tokenizer, export_dir, max_new_tokens=50,
                          overwrite=False):
    """Writes the SavedModel of a `CausalLM`, atomically (as
    `export_translator`: built beside `export_dir`, renamed when complete).

    Args:
        model: a built `tfattn.CausalLM`.
        tokenizer: its `SubwordTokenizer` (or the SentencePiece bytes).
        export_dir: str or path-like. Local directory to create.
        max_new_tokens: int >= 1, below the model's `max_length`. Pieces
            per continuation at most. Defaults to `50`.
        overwrite: bool. Replace an existing `export_dir`.

    Returns:
        str, the absolute `export_dir`.

    Raises:
        FileExistsError: `export_dir` exists and `overwrite` is False.
        ValueError: an invalid argument (the message names it).
    """
    if not isinstance(overwrite, bool):
        raise invalid_argument("overwrite", "a Python bool", overwrite,
                               _CONTEXT)
    if not getattr(model, "built", False) or not hasattr(model, "search"):
        raise invalid_argument("model", "a built tfattn.CausalLM",
                               type(model).__name__, _CONTEXT)
    model_proto = model_proto_of(tokenizer)
    export_dir = files.local_directory("export_dir", export_dir, _CONTEXT)
    module = LanguageModelExport(model, model_proto, max_new_tokens)
    write_export(module, model, model_proto, export_dir, overwrite)
    return export_dir


def write_export(module, model, model_proto, export_dir, overwrite):
    """Writes `module`'s SavedModel (its `trace()` signatures), `spm.model`
    and `model.keras` into `export_dir`, atomically: built beside it,
    renamed when complete.

    Args:
        module: a `tf.Module` with a `trace()` method (the signatures).
        model: the Keras model, saved as `model.keras`.
        model_proto: bytes. The SentencePiece model.
        export_dir: str. The checked local directory.
        overwrite: bool. Replace an existing `export_dir`.
    """
    with files.directory_written_atomically(export_dir, overwrite) as tmp:
        tf.saved_model.save(module, tmp, signatures=module.trace())
        with open(os.path.join(tmp, "spm.model"), "wb") as f:
            f.write(model_proto)
        model.save(os.path.join(tmp, "model.keras"))


def causal_lm_to_ctranslate2(model, tokenizer, path, quantization=None,
                             overwrite=False):
    """Writes a CTranslate2 `Generator` directory of a `CausalLM`,
    atomically (as `to_ctranslate2`), with its `spm.model`.

    Args:
        model: a built `tfattn.CausalLM` (flavour `paper` or
            `reference_2019`).
        tokenizer: its `SubwordTokenizer` (or the SentencePiece bytes).
        path: str or path-like. Local directory to create.
        quantization: None (float32) or a CTranslate2 weight type
            (`tfattn.export.ctranslate2.QUANTIZATIONS`).
        overwrite: bool. Replace an existing `path`.

    Returns:
        str, the absolute `path`.

    Raises:
        NotExportable: a part of the model does not map exactly.
        FileExistsError: `path` exists and `overwrite` is False.
        ValueError: an invalid argument (the message names it).
    """
    from tfattn.export import ctranslate2 as ct2_export
    from tfattn.export import ctranslate2_spec

    context = "causal_lm_to_ctranslate2"
    if not isinstance(overwrite, bool):
        raise invalid_argument("overwrite", "a Python bool", overwrite,
                               context)
    if quantization is not None and (
            quantization not in ct2_export.QUANTIZATIONS):
        raise invalid_argument(
            "quantization", "None or one of "
            + ", ".join(ct2_export.QUANTIZATIONS), quantization, context)
    model_proto = model_proto_of(tokenizer)
    path = files.local_directory("path", path, context)
    ct2_export._require_ctranslate2()
    spec = ctranslate2_spec.decoder_only_spec(
        model, ct2_export._pieces(model_proto))
    with files.directory_written_atomically(path, overwrite) as tmp_dir:
        model_dir = os.path.join(tmp_dir, "model")
        ct2_export._save_spec(spec, model_dir, quantization)
        for name in os.listdir(model_dir):
            os.replace(os.path.join(model_dir, name),
                       os.path.join(tmp_dir, name))
        os.rmdir(model_dir)
        with open(os.path.join(tmp_dir, "spm.model"), "wb") as f:
            f.write(model_proto)
    return path
