"""Export a trained `Transformer` to CTranslate2, and translate text with it.

CTranslate2 (OpenNMT's C++ inference engine, the `ctranslate2` wheel of the
`serve` extra) runs the same model on CPUs and GPUs, in float32 or with
int8/int16 weights. `to_ctranslate2` writes, atomically, a directory with

- `model.bin`, `config.json` and `shared_vocabulary.json`: the CTranslate2
  model, built by `ctranslate2_spec.transformer_spec` and saved by a
  `ctranslate2.converters.Converter` (with `quantization`);
- `spm.model`: the run's SentencePiece model, or for a model imported from
  a checkpoint (`tfattn.interop.marian`) a `pretrained/` folder with the
  checkpoint's tokenizer (`source.spm`, `target.spm`, `vocab.json`, ...),
  which then turns text into tokens and back;
- `tfattn_decoding.json`: the decoding defaults of the run (beam size,
  length penalty, extra and maximum lengths) that `load_ctranslate2`'s
  translator uses.

`load_ctranslate2(path).translate(texts)` keeps the serving contract of
`tfattn.export.contract` (the SavedModel's too): strings in, strings out,
sources cut to `max_source_length` pieces (EOS included; `truncated` says
which), each output at most its source length plus `extra_length` pieces.

`checkpoint_to_ctranslate2(model, tokenizer, path)` writes the CTranslate2
model alone of a model imported by `tfattn.interop.marian` (a
`ctranslate2.Translator`) or `tfattn.interop.gpt2` (a
`ctranslate2.Generator`), its vocabulary the token strings of tfattn's ids
(`ctranslate2_spec.checkpoint_pieces`): CTranslate2 then reads and writes
the ids the tfattn model does, and the checkpoint's tokenizer turns text
into them.

Where the two engines differ (say it before you compare them):

- Length penalty: tfattn divides a hypothesis's log-probability by
  `((5 + len) / 6) ** alpha`, CTranslate2 by `len ** length_penalty`; the
  translator passes `alpha` as CTranslate2's `length_penalty`. With beam 1,
  or `alpha = 0`, both rank alike.
- Lengths: CTranslate2 takes one `max_decoding_length` per batch; the
  translator gives it the longest row's limit and cuts each row to its own
  (exact for greedy search; a beam row near its limit may differ). Beam
  search at `alpha = 0` gives tfattn's best hypothesis for every row that
  ends in the end token; a row that reaches its limit unfinished may end
  in another beam, the engines choosing among unfinished beams
  differently (tests/test_export_ctranslate2_text_pretrained.py).
- Arithmetic: CTranslate2's float32 kernels sum in other orders than
  TensorFlow's; per-token log-probabilities agree to about 1e-5
  (tests/test_export_ctranslate2.py).
"""

import json
import os
from tfattn.utils import files
from tfattn.export import _ctranslate2_text as text_side
from tfattn.export import ctranslate2_spec
from tfattn.export.contract import Translations
from tfattn.export.contract import checked_texts
from tfattn.export.int8_cpu import int8_is_faithful
from tfattn.decoding.translate import decode_lengths
from tfattn.decoding.translate import model_proto_of
from tfattn.utils.validation import check_non_negative_float
from tfattn.utils.validation import check_positive_int
from tfattn.utils.validation import invalid_argument

__all__ = [
    "DECODING_FILENAME",
    "QUANTIZATIONS",
    "VOCAB_FILENAME",
    "CTranslate2Translator",
    "NotExportable",
    "checkpoint_to_ctranslate2",
    "load_ctranslate2",
    "to_ctranslate2",
]

_CONTEXT = "to_ctranslate2"
VOCAB_FILENAME = text_side.VOCAB_FILENAME
DECODING_FILENAME = "tfattn_decoding.json"
QUANTIZATIONS = ("float32", "int8", "int16", "int8_float32", "float16",
                 "bfloat16", "int8_float16", "int8_bfloat16")

NotExportable = ctranslate2_spec.NotExportable


def _require_ctranslate2():
    try:
        import ctranslate2
    except ImportError:
        raise ImportError(
            "CTranslate2 export and serving need the `ctranslate2` package: "
            "pip install 'tfattn[serve]' (or pip install ctranslate2)"
        ) from None
    return ctranslate2


def _pieces(model_proto):
    import sentencepiece as spm

    processor = spm.SentencePieceProcessor()
    processor.LoadFromSerializedProto(model_proto)
    return [processor.id_to_piece(i) for i in
            range(processor.get_piece_size())]


def to_ctranslate2(model, tokenizer, path, quantization=None, beam_size=4,
                   alpha=0.6, extra_length=50, max_source_length=None,
                   overwrite=False):
    """Writes a CTranslate2 model directory of `model`, atomically.

    As `export_translator`, the directory is built under a temporary
    sibling name and renamed into place once complete; a failure leaves
    nothing behind, and `overwrite=True` replaces an existing one only once
    the new one is whole.

    Args:
        model: a built `tfattn.Transformer` of flavour `paper` or
            `reference_2019` (see `ctranslate2_spec`).
        tokenizer: its `tfattn.data.SubwordTokenizer` (or the bytes of the
            SentencePiece model), or the `MarianTokenizer` of a model
            imported by `tfattn.interop.marian` (kept in the export; the
            translator then tokenizes as transformers' `MarianTokenizer`).
        path: str or path-like. Local directory to create.
        quantization: None (float32) or a CTranslate2 weight type: one of
            `QUANTIZATIONS` (`"int8"`, `"int16"`, ...). Defaults to `None`.
        beam_size, alpha, extra_length, max_source_length: the decoding
            defaults written to `tfattn_decoding.json` (see
            `export_translator`).
        overwrite: bool. Replace an existing `path`. Defaults to `False`.

    Returns:
        str, the absolute `path`.

    Raises:
        NotExportable: a part of the model does not map exactly.
        FileExistsError: `path` exists and `overwrite` is False.
        ImportError: `ctranslate2` is not installed.
        ValueError: an invalid argument (the message names it).
    """
    beam_size = check_positive_int("beam_size", beam_size, _CONTEXT)
    alpha = check_non_negative_float("alpha", alpha, _CONTEXT)
    if not isinstance(overwrite, bool):
        raise invalid_argument("overwrite", "a Python bool", overwrite,
                               _CONTEXT)
    if quantization is not None and quantization not in QUANTIZATIONS:
        raise invalid_argument("quantization",
                               f"None or one of {', '.join(QUANTIZATIONS)}",
                               quantization, _CONTEXT)
    checkpoint = text_side.is_checkpoint_tokenizer(tokenizer)
    if not checkpoint:
        model_proto_of(tokenizer)  # Refuses another tokenizer by name.
    if not getattr(model, "built", False) or not hasattr(model, "generate"):
        raise invalid_argument(
            "model", "a built tfattn.Transformer (call it once, or load it)",
            type(model).__name__, _CONTEXT)
    path = files.local_directory("path", path, _CONTEXT)
    max_source_length, max_length = decode_lengths(model, extra_length,
                                                   max_source_length)
    ctranslate2 = _require_ctranslate2()
    spec = ctranslate2_spec.transformer_spec(
        model, ctranslate2_spec.checkpoint_pieces(tokenizer) if checkpoint
        else _pieces(model_proto_of(tokenizer)))
    settings = dict(beam_size=beam_size, alpha=alpha,
                    extra_length=int(extra_length),
                    max_source_length=max_source_length,
                    max_length=max_length)
    with files.directory_written_atomically(path, overwrite) as tmp_dir:
        _save_spec_into(spec, tmp_dir, quantization)
        text_side.save(tokenizer, model, tmp_dir, path)
        with open(os.path.join(tmp_dir, DECODING_FILENAME), "w") as f:
            json.dump(dict(settings, quantization=quantization,
                           ctranslate2_version=ctranslate2.__version__),
                      f, indent=2)
    return path


def checkpoint_to_ctranslate2(model, tokenizer, path, quantization=None,
                              overwrite=False):
    """Writes, atomically, the CTranslate2 model of an imported checkpoint.

    A Marian `Transformer` gives a `ctranslate2.Translator` directory
    (`transformer_spec`: sources end in `</s>`, decoding starts from the
    Marian padding row, as tfattn's BOS), a GPT-2 `CausalLM` a
    `ctranslate2.Generator` one (`decoder_only_spec`: prompts start with
    tfattn's BOS, `<s>`, which reads as `<|endoftext|>`). Token strings in
    and out are `ctranslate2_spec.checkpoint_pieces(tokenizer)[id]`.

    Args:
        model: a built `Transformer` or `CausalLM` from `tfattn.interop`.
        tokenizer: its `MarianTokenizer` or `GPT2Tokenizer`.
        path: str or path-like. Local directory to create.
        quantization: None (float32) or one of `QUANTIZATIONS`.
        overwrite: bool. Replace an existing `path`. Defaults to `False`.

    Returns:
        str, the absolute `path`.

    Raises:
        NotExportable: a part of the model does not map exactly.
        FileExistsError: `path` exists and `overwrite` is False.
        ImportError: `ctranslate2` is not installed.
        ValueError: naming `model`, `tokenizer`, `quantization` or
            `overwrite`.
    """
    context = "checkpoint_to_ctranslate2"
    if not isinstance(overwrite, bool):
        raise invalid_argument("overwrite", "a Python bool", overwrite,
                               context)
    if quantization is not None and quantization not in QUANTIZATIONS:
        raise invalid_argument("quantization",
                               f"None or one of {', '.join(QUANTIZATIONS)}",
                               quantization, context)
    if not getattr(model, "built", False):
        raise invalid_argument("model", "a built Transformer or CausalLM",
                               type(model).__name__, context)
    pieces = ctranslate2_spec.checkpoint_pieces(tokenizer)
    path = files.local_directory("path", path, context)
    _require_ctranslate2()
    build = (ctranslate2_spec.transformer_spec if hasattr(model, "encoder")
             else ctranslate2_spec.decoder_only_spec)
    spec = build(model, pieces)
    with files.directory_written_atomically(path, overwrite) as tmp_dir:
        _save_spec_into(spec, tmp_dir, quantization)
    return path


def _save_spec(spec, directory, quantization):
    """Validates, quantizes and saves `spec` through CTranslate2's own
    `Converter` (its base class does all three)."""
    from ctranslate2.converters.converter import Converter

    class SpecConverter(Converter):
        def _load(self):
            return spec

    SpecConverter().convert(directory, quantization=quantization)


def _save_spec_into(spec, directory, quantization):
    """`_save_spec` into an existing `directory` (CTranslate2's converter
    writes a new directory: a subdirectory, whose files then move up)."""
    model_dir = os.path.join(directory, "model")
    _save_spec(spec, model_dir, quantization)
    for name in os.listdir(model_dir):
        os.replace(os.path.join(model_dir, name),
                   os.path.join(directory, name))
    os.rmdir(model_dir)


class CTranslate2Translator:
    """Text to text with an export of `to_ctranslate2`.

    Args:
        path: str or path-like. The export directory.
        device: `"cpu"` or `"cuda"`. Defaults to `"cpu"`.
        compute_type: None (the default), or CTranslate2's compute type
            (`"default"` keeps the export's weight type; `"auto"`,
            `"float32"`, `"int8"`, ...). None is `"default"`, except that
            an int8 export runs in float32 on a CPU whose int8 products
            would saturate (`int8_cpu.int8_is_faithful`): the 8-bit
            weights, dequantized at load.
        inter_threads, intra_threads: int. CTranslate2's threading
            (batches run in parallel, threads per batch; 0 = CTranslate2's
            default). Default to `1` and `0`.

    Attributes:
        translator: the `ctranslate2.Translator`.
        settings: dict, the export's decoding defaults.
        compute_type: str, the compute type asked of CTranslate2 (None
            resolved); `translator.compute_type` is the one it runs.

    Raises:
        FileNotFoundError: `path` holds no `tfattn_decoding.json`.
        ImportError: `ctranslate2` is not installed.
    """

    def __init__(self, path, device="cpu", compute_type=None,
                 inter_threads=1, intra_threads=0):
        """Reads the export's settings and vocabulary, and loads it."""
        ctranslate2 = _require_ctranslate2()
        path = files.checked_path("path", path, "load_ctranslate2")
        settings_path = os.path.join(path, DECODING_FILENAME)
        if not os.path.isfile(settings_path):
            raise FileNotFoundError(
                f"{settings_path}: not found; {path} is not an export of "
                "tfattn.export.to_ctranslate2")
        with open(settings_path) as f:
            self.settings = json.load(f)
        self._text = text_side.load(path)
        self.compute_type = _resolve_compute_type(
            compute_type, device, self.settings.get("quantization"))
        self.translator = ctranslate2.Translator(
            path, device=device, compute_type=self.compute_type,
            inter_threads=inter_threads, intra_threads=intra_threads)

    def tokenize(self, texts):
        """The pieces of `texts`, cut as the export's sources are.

        Args:
            texts: list or tuple of str.

        Returns:
            `(pieces, truncated)`: per row, its list of str pieces without
            EOS, cut to `max_source_length - 1`, and a bool, True where
            that cut dropped pieces.

        Raises:
            ValueError: `texts` breaks the serving contract
                (`contract.checked_texts`).
        """
        texts = checked_texts(texts, "CTranslate2Translator.translate")
        keep = self.settings["max_source_length"] - 1
        ids = self._text.ids(texts)
        return ([[self._text.token(i) for i in row[:keep]] for row in ids],
                [len(row) > keep for row in ids])

    def translate(self, texts, beam_size=None, alpha=None, max_batch_size=0):
        """List of str -> list of str (see `translate_details`).

        Args:
            texts: list or tuple of str.
            beam_size: int or None (the export's). 1 = greedy search.
            alpha: float or None (the export's). The length penalty.
            max_batch_size: int. CTranslate2 splits larger requests
                (0 = one batch).

        Returns:
            A list of str, the translations.
        """
        return self.translate_details(texts, beam_size, alpha,
                                      max_batch_size).translations

    def translate_details(self, texts, beam_size=None, alpha=None,
                          max_batch_size=0):
        """Translates `texts` (a list of str).

        Args:
            texts: list or tuple of str.
            beam_size: int or None (the export's). 1 = greedy search.
            alpha: float or None (the export's). CTranslate2's
                `length_penalty` (see the module docstring).
            max_batch_size: int. CTranslate2 splits larger requests
                (0 = one batch).

        Returns:
            `Translations`.

        Raises:
            ValueError: `texts` breaks the serving contract, or a bad
                `beam_size` or `alpha`.
        """
        context = "CTranslate2Translator.translate"
        beam_size = check_positive_int(
            "beam_size", self.settings["beam_size"] if beam_size is None
            else beam_size, context)
        alpha = check_non_negative_float(
            "alpha", self.settings["alpha"] if alpha is None else alpha,
            context)
        pieces, truncated = self.tokenize(texts)
        if not pieces:
            return Translations([], [], [])
        # Each row's limit, EOS included, as `Transformer.generate`'s.
        limits = [min(len(row) + 1 + self.settings["extra_length"],
                      self.settings["max_length"]) for row in pieces]
        results = self.translator.translate_batch(
            pieces, beam_size=beam_size, length_penalty=alpha,
            max_decoding_length=max(limits), max_input_length=0,
            # CTranslate2's default of 1 forbids EOS first; tfattn allows it.
            min_decoding_length=0,
            return_scores=True, max_batch_size=max_batch_size)
        outputs = [result.hypotheses[0][:limit] if row else []
                   for result, limit, row in zip(results, limits, pieces)]
        # The contract (`contract.py`): a text without pieces is "", 0.0.
        return Translations(
            [self._text.text([self._text.id_of(token) for token in row])
             for row in outputs],
            [float(result.scores[0]) if row else 0.0
             for result, row in zip(results, pieces)],
            truncated)


def _resolve_compute_type(compute_type, device, quantization):
    if compute_type is not None:
        return compute_type
    if (device == "cpu" and str(quantization).startswith("int8")
            and not int8_is_faithful()):
        return "float32"
    return "default"


def load_ctranslate2(path, **kwargs):
    """A `CTranslate2Translator` of the export at `path`.

    Args:
        path: str or path-like. The directory `to_ctranslate2` wrote.
        **kwargs: `CTranslate2Translator`'s other arguments (`device`,
            `compute_type`, `inter_threads`, `intra_threads`).

    Returns:
        A `CTranslate2Translator`.
    """
    return CTranslate2Translator(path, **kwargs)
