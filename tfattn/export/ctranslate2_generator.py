"""Export a trained `CausalLM` to CTranslate2's `Generator`, and continue
prompts with it.

`causal_lm_to_ctranslate2` writes, atomically, a directory with the
CTranslate2 decoder-only model (`ctranslate2_spec.decoder_only_spec`),
`spm.model` (or, for a GPT-2 imported by `tfattn.interop.gpt2`, a
`pretrained/` folder with its `vocab.json` and `merges.txt`) and
`tfattn_generation.json` (the model's `max_length` and the export's
`max_new_tokens`). `load_ctranslate2_generator(path)` continues
text prompts under the serving contract of `tfattn.decoding.lm_serving`,
the one the SavedModel of `export_language_model` and
`lm_evaluation.continue_details` keep: the same prompt window, the same
greedy continuations and the same scores (the sum of the generated
pieces' log-probabilities, padding excluded from the vocabulary).
"""

import json
import os

from tfattn.data.tokenizer import EOS_ID
from tfattn.data.tokenizer import PAD_ID
from tfattn.decoding import lm_serving
from tfattn.decoding.translate import model_proto_of
from tfattn.export import _ctranslate2_text as text_side
from tfattn.export import ctranslate2 as ct2_export
from tfattn.export import ctranslate2_spec
from tfattn.utils import files
from tfattn.utils.texts import checked_texts
from tfattn.utils.validation import invalid_argument

__all__ = ["GENERATION_FILENAME", "CTranslate2Generator",
           "causal_lm_to_ctranslate2", "load_ctranslate2_generator"]

GENERATION_FILENAME = "tfattn_generation.json"


def causal_lm_to_ctranslate2(model, tokenizer, path, quantization=None,
                             overwrite=False, max_new_tokens=50):
    """Writes a CTranslate2 `Generator` directory of a `CausalLM`,
    atomically (as `to_ctranslate2`), with its `spm.model`.

    Args:
        model: a built `tfattn.CausalLM` (flavour `paper` or
            `reference_2019`).
        tokenizer: its `SubwordTokenizer` (or the SentencePiece bytes), or
            the `GPT2Tokenizer` of a model from `tfattn.interop.gpt2`.
        path: str or path-like. Local directory to create.
        quantization: None (float32) or a CTranslate2 weight type
            (`tfattn.export.ctranslate2.QUANTIZATIONS`).
        overwrite: bool. Replace an existing `path`.
        max_new_tokens: int in [1, model.max_length). Pieces per
            continuation at most, as `export_language_model`'s; the
            prompt window is `max_length - max_new_tokens` ids. Defaults
            to `50` (as `export_language_model`).

    Returns:
        str, the absolute `path`.

    Raises:
        NotExportable: a part of the model does not map exactly.
        FileExistsError: `path` exists and `overwrite` is False.
        ValueError: an invalid argument (the message names it).
    """
    context = "causal_lm_to_ctranslate2"
    if not getattr(model, "built", False) or not hasattr(model, "search"):
        raise invalid_argument("model", "a built tfattn.CausalLM",
                               type(model).__name__, context)
    max_new_tokens = lm_serving.checked_max_new_tokens(
        max_new_tokens, model.max_length, context)
    if not isinstance(overwrite, bool):
        raise invalid_argument("overwrite", "a Python bool", overwrite,
                               context)
    if quantization is not None and (
            quantization not in ct2_export.QUANTIZATIONS):
        raise invalid_argument(
            "quantization", "None or one of "
            + ", ".join(ct2_export.QUANTIZATIONS), quantization, context)
    checkpoint = text_side.is_checkpoint_tokenizer(tokenizer)
    if not checkpoint:
        model_proto_of(tokenizer)  # Refuses another tokenizer by name.
    path = files.local_directory("path", path, context)
    ct2_export._require_ctranslate2()
    spec = ctranslate2_spec.decoder_only_spec(
        model, ctranslate2_spec.checkpoint_pieces(tokenizer) if checkpoint
        else ct2_export._pieces(model_proto_of(tokenizer)))
    with files.directory_written_atomically(path, overwrite) as tmp_dir:
        ct2_export._save_spec_into(spec, tmp_dir, quantization)
        text_side.save(tokenizer, model, tmp_dir, path)
        with open(os.path.join(tmp_dir, GENERATION_FILENAME), "w") as f:
            json.dump({"max_length": model.max_length,
                       "max_new_tokens": max_new_tokens}, f)
    return path


class CTranslate2Generator:
    """Prompts to continuations with CTranslate2, under the serving
    contract of `tfattn.decoding.lm_serving`.

    Args:
        path: str or path-like. A directory of `causal_lm_to_ctranslate2`.
        device: str. `"cpu"` or `"cuda"`. Defaults to `"cpu"`.
        compute_type: str or None. CTranslate2's compute type (None: the
            one `load_ctranslate2` would choose for the weights).

    Attributes:
        generator: the `ctranslate2.Generator`.
        max_new_tokens: int. Pieces per continuation at most.
        max_prompt_length: int. Prompt ids read at most (BOS included).

    Raises:
        FileNotFoundError: `path` holds no `tfattn_generation.json`.
        ImportError: `ctranslate2` is not installed.
    """

    def __init__(self, path, device="cpu", compute_type=None):
        """Reads the export's lengths and vocabulary, and loads it."""
        ctranslate2 = ct2_export._require_ctranslate2()
        path = files.checked_path("path", path,
                                  "load_ctranslate2_generator")
        settings_path = os.path.join(path, GENERATION_FILENAME)
        if not os.path.isfile(settings_path):
            raise FileNotFoundError(
                f"{settings_path}: not found; {path} is not an export of "
                "tfattn.export.causal_lm_to_ctranslate2")
        with open(settings_path) as f:
            settings = json.load(f)
        self.max_new_tokens = settings["max_new_tokens"]
        self.max_prompt_length = (settings["max_length"]
                                  - self.max_new_tokens)
        self._text = text_side.load(path)
        self.generator = ctranslate2.Generator(
            path, device=device, compute_type=compute_type or "default")

    def continue_details(self, prompts):
        """Greedy continuations of `prompts`.

        Args:
            prompts: list or tuple of str.

        Returns:
            `lm_serving.Continuations`.

        Raises:
            ValueError: naming `prompts` or `prompts[i]`.
        """
        prompts = checked_texts(prompts, "CTranslate2Generator",
                                name="prompts")
        if not prompts:
            return lm_serving.Continuations([], [], [])
        rows, truncated = lm_serving.prompt_window(
            self._text.ids(prompts), self.max_prompt_length)
        continuations, scores = [""] * len(rows), [0.0] * len(rows)
        # CTranslate2 prefills a batch up to its shortest prompt and feeds
        # the rest token by token into the result: one call per length.
        for length in sorted({len(row) for row in rows}):
            batch = [b for b, row in enumerate(rows) if len(row) == length]
            results = self.generator.generate_batch(
                [[self._text.token(i) for i in rows[b]] for b in batch],
                max_length=self.max_new_tokens, sampling_topk=1,
                include_prompt_in_result=False, return_scores=True,
                length_penalty=0.0,  # The sum, as tfattn's engines give.
                # Padding is never emitted (tfattn masks it before the
                # softmax, so both score over the same distribution).
                suppress_sequences=[[self._text.token(PAD_ID)]],
                end_token=self._text.token(EOS_ID))
            for b, result in zip(batch, results):
                continuations[b] = self._text.text(result.sequences_ids[0])
                scores[b] = float(result.scores[0])
        return lm_serving.Continuations(continuations, scores, truncated)


def load_ctranslate2_generator(path, **kwargs):
    """A `CTranslate2Generator` of the export at `path`.

    Args:
        path: str or path-like. The directory `causal_lm_to_ctranslate2`
            wrote.
        **kwargs: `CTranslate2Generator`'s other arguments (`device`,
            `compute_type`).

    Returns:
        A `CTranslate2Generator`.
    """
    return CTranslate2Generator(path, **kwargs)
