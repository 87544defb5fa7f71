"""Export a trained `CausalLM` as a SavedModel: prompts (strings) in,
continuations (strings) out.

Two signatures, each taking `prompts`, a `[batch]` `tf.string` tensor:

- `serving_default`: greedy continuations.
- `sample`: top-p sampling, with the inputs `temperature` (float32,
  finite and > 0), `top_p` (float32 in (0, 1]; 1 samples from the whole
  distribution) and `seed` (int64, any int in [-2**63, 2**63): the same
  seed and prompts give the same continuations, the same as
  `CausalLM.generate` with that seed and `TopPSampler(top_p, temperature)`).

Both return `continuations` (`[batch]` `tf.string`: the generated text
only, cut at the end-of-text piece), `scores` (`[batch]` float32, the
continuation's log-probability under the model) and `truncated` (`[batch]`
bool: the prompt was longer than the export's prompt length and only its
last pieces were read). Everything runs in the graph: tokenisation, the
prompt read as BOS + its pieces (an empty prompt continues from BOS alone:
unconditional text), left-padded to the request's longest prompt (not
the export's whole prompt length: the prefill and every step's attention
cost grow with the padded width), prefilled in one pass, the search in
one `tf.while_loop`, detokenisation.
A client needs TensorFlow and tensorflow-text::

    import tensorflow as tf, tensorflow_text  # noqa: F401
    lm = tf.saved_model.load("export_dir")
    lm.signatures["serving_default"](prompts=tf.constant(["a dog"]))
    lm.signatures["sample"](
        prompts=tf.constant(["a dog"]), temperature=tf.constant(0.8),
        top_p=tf.constant(0.9), seed=tf.constant(1, tf.int64))

`load_language_model(export_dir)` wraps the export for Python callers
under the serving contract of `tfattn.decoding.lm_serving` (the same
answers as `lm_evaluation.continue_details` and the CTranslate2 generator
of `tfattn.export.ctranslate2_generator`).

The SavedModel directory also holds `model.keras` and `spm.model`. Lengths
are fixed at export: `max_new_tokens` pieces per continuation at most, and
prompts of at most `model.max_length - max_new_tokens` pieces (BOS
included).
"""

import os

import tensorflow as tf

from tfattn.data.tokenizer import BOS_ID
from tfattn.data.tokenizer import EOS_ID
from tfattn.decoding import lm_serving
from tfattn.decoding import samplers
from tfattn.export import contract
from tfattn.export.saved_model import graph_tokenizer
from tfattn.export.saved_model import loaded_export
from tfattn.utils import files
from tfattn.utils.texts import checked_texts
from tfattn.utils.validation import check_positive_int
from tfattn.utils.validation import invalid_argument

__all__ = ["SAMPLE_SIGNATURE_KEY", "LanguageModelExport",
           "export_language_model", "write_export", "SavedModelLanguageModel",
           "load_language_model"]

_CONTEXT = "export_language_model"
SAMPLE_SIGNATURE_KEY = "sample"
_PROMPTS = tf.TensorSpec([None], tf.string, name="prompts")


class _TensorTopP(samplers.TokenSampler):
    """`TopPSampler` whose settings are graph tensors (the `sample`
    signature's inputs, checked in the graph): the same draw,
    `samplers.top_p_choice`."""

    draws = True

    def __init__(self, top_p, temperature):
        """Keeps the two scalar tensors."""
        self.top_p = top_p
        self.inverse = samplers.inverse_temperature(temperature)

    def _choose(self, log_probs, seed):
        return samplers.top_p_choice(log_probs, seed, self.top_p,
                                     self.inverse)


class LanguageModelExport(tf.Module):
    """The exported module: the model's variables, the tokenizer and the
    two signatures (see the module docstring).

    Args:
        model: a built `tfattn.CausalLM`.
        model_proto: bytes. Its serialized SentencePiece model (or another
            tokenizer that `saved_model.graph_tokenizer` accepts).
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
        self.tokenizer = graph_tokenizer(model_proto)[0]
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
                              tf.zeros([2], tf.int32))

    @tf.function(input_signature=[
        _PROMPTS, tf.TensorSpec([], tf.float32, name="temperature"),
        tf.TensorSpec([], tf.float32, name="top_p"),
        tf.TensorSpec([], tf.int64, name="seed")], autograph=False)
    def sample(self, prompts, temperature, top_p, seed):
        """Top-p sampled continuations (the `sample` signature).

        Args:
            prompts: `[B]` `tf.string`.
            temperature: float32 scalar, finite and > 0 (a subnormal
                below 1.2e-38 reads as 0 in TensorFlow's kernels and is
                refused: any T <= 1e-30 draws as 1e-30 does).
            top_p: float32 scalar in (0, 1].
            seed: int64 scalar: any int in [-2**63, 2**63); the same
                seed draws as `CausalLM.generate(seed=...)`.

        Returns:
            dict: `continuations`, `scores`, `truncated` (each `[B]`).
        """
        checks = [
            tf.debugging.assert_positive(
                temperature, message="sample: temperature must be finite "
                "and > 0", name="temperature_must_be_positive"),
            tf.debugging.assert_less(
                temperature, float("inf"), message="sample: temperature "
                "must be finite and > 0", name="temperature_must_be_finite"),
            tf.debugging.assert_positive(
                top_p, message="sample: top_p must be in (0, 1]",
                name="top_p_must_be_positive"),
            tf.debugging.assert_less_equal(
                top_p, 1.0, message="sample: top_p must be in (0, 1]",
                name="top_p_must_be_at_most_1")]
        with tf.control_dependencies(checks):
            temperature, top_p = tf.identity(temperature), tf.identity(top_p)
        return self._continue(prompts, _TensorTopP(top_p, temperature),
                              samplers.seed_words(seed, _CONTEXT))

    def _continue(self, prompts, sampler, seed):
        prompts = contract.utf8_checked(tf.ensure_shape(
            prompts, [None], name="prompts_must_be_a_vector_of_strings"),
            name="prompts")
        pieces = self.tokenizer.tokenize(prompts)
        batch = tf.shape(prompts)[0]
        rows = tf.concat([tf.fill([batch, 1], BOS_ID), pieces], axis=1)
        lengths = tf.cast(rows.row_lengths(), tf.int32)
        truncated = lengths > self._width
        lengths = tf.minimum(lengths, self._width)
        # At least 2 columns: the prefill (all but the last) is never empty.
        width = tf.maximum(tf.reduce_max(lengths), 2)
        left = _left_padded(rows, lengths, width)
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
        tokenizer: its `SubwordTokenizer` (or the SentencePiece bytes, or
            a pretrained checkpoint's `GPT2Tokenizer`:
            `saved_model.graph_tokenizer`).
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
    in_graph, model_proto = graph_tokenizer(tokenizer)
    export_dir = files.local_directory("export_dir", export_dir, _CONTEXT)
    module = LanguageModelExport(model, in_graph, max_new_tokens)
    write_export(module, model, model_proto, export_dir, overwrite)
    return export_dir


def write_export(module, model, model_proto, export_dir, overwrite):
    """Writes `module`'s SavedModel (its `trace()` signatures), `spm.model`
    and `model.keras` into `export_dir`, atomically: built beside it,
    renamed when complete.

    Args:
        module: a `tf.Module` with a `trace()` method (the signatures).
        model: the Keras model, saved as `model.keras`.
        model_proto: bytes or None. The SentencePiece model (None: the
            tokenizer lives in the graph only).
        export_dir: str. The checked local directory.
        overwrite: bool. Replace an existing `export_dir`.
    """
    with files.directory_written_atomically(export_dir, overwrite) as tmp:
        tf.saved_model.save(module, tmp, signatures=module.trace())
        if model_proto is not None:
            with open(os.path.join(tmp, "spm.model"), "wb") as f:
                f.write(model_proto)
        model.save(os.path.join(tmp, "model.keras"))


class SavedModelLanguageModel:
    """Prompts to continuations with an export of `export_language_model`,
    in Python, under the serving contract of `tfattn.decoding.lm_serving`:
    the prompts and settings are checked here, so a bad one is refused
    naming `prompts[i]`, `temperature`, `top_p` or `seed` before anything
    runs in the graph.

    Args:
        export_dir: str or path-like. The export directory.

    Attributes:
        module: the loaded SavedModel (`tf.saved_model.load`).
        signatures: its signatures (`serving_default`, `sample`).
        max_new_tokens: int. Pieces per continuation at most.
        max_prompt_length: int. Prompt ids read at most (BOS included).

    Raises:
        FileNotFoundError: `export_dir` holds no `saved_model.pb`.
    """

    def __init__(self, export_dir):
        """Loads the SavedModel and reads its lengths."""
        import tensorflow_text  # noqa: F401  (registers the SentencePiece ops)

        _, self.module = loaded_export(export_dir, "load_language_model",
                                       "export_language_model")
        self.signatures = self.module.signatures
        self.max_new_tokens = int(self.module.max_new_tokens.numpy())
        self.max_prompt_length = int(self.module.max_prompt_length.numpy())

    def continue_details(self, prompts):
        """Greedy continuations (the `serving_default` signature).

        Args:
            prompts: list or tuple of str.

        Returns:
            `lm_serving.Continuations`.

        Raises:
            ValueError: naming `prompts` or `prompts[i]`.
        """
        prompts = checked_texts(prompts, "SavedModelLanguageModel",
                                name="prompts")
        return self._answer(self.signatures["serving_default"], prompts)

    def sample_details(self, prompts, temperature=1.0, top_p=1.0, seed=0):
        """Top-p sampled continuations (the `sample` signature).

        Args:
            prompts: list or tuple of str.
            temperature: finite float > 0. Defaults to `1.0`.
            top_p: float in (0, 1]. Defaults to `1.0` (every token).
            seed: int in [-2**63, 2**63). Defaults to `0`.

        Returns:
            `lm_serving.Continuations`.

        Raises:
            ValueError: naming `prompts`, `prompts[i]` or the setting.
        """
        context = "SavedModelLanguageModel.sample"
        prompts = checked_texts(prompts, context, name="prompts")
        temperature, top_p, seed = lm_serving.checked_sampling(
            temperature, top_p, seed, context)
        # Below 1e-30 every temperature draws alike (1 / T is capped at
        # 1e30), and TensorFlow reads a float32 subnormal as 0.
        return self._answer(
            self.signatures[SAMPLE_SIGNATURE_KEY], prompts,
            temperature=tf.constant(max(temperature, 1e-30), tf.float32),
            top_p=tf.constant(top_p, tf.float32),
            seed=tf.constant(seed, tf.int64))

    @staticmethod
    def _answer(signature, prompts, **settings):
        if not prompts:
            return lm_serving.Continuations([], [], [])
        out = signature(prompts=tf.constant(prompts, tf.string,
                                            shape=[len(prompts)]), **settings)
        return lm_serving.Continuations(
            [t.decode("utf-8") for t in out["continuations"].numpy()],
            [float(x) for x in out["scores"].numpy()],
            [bool(x) for x in out["truncated"].numpy()])


def load_language_model(export_dir):
    """A `SavedModelLanguageModel` of the export at `export_dir`.

    Args:
        export_dir: str or path-like. The directory `export_language_model`
            wrote.

    Returns:
        `SavedModelLanguageModel`.
    """
    return SavedModelLanguageModel(export_dir)
