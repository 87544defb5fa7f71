"""Export a trained `MaskedLM` as a SavedModel that fills blanks: texts
with the mask piece `[MASK]` in, the top-k fillings of each blank out.

One signature, `fill_mask`, taking `texts`, a `[batch]` `tf.string` tensor
in which every text holds at least one `[MASK]` or no piece at all (several
blanks are filled at once, each independently of the others' fillings, as
BERT predicts them). Texts are read by the rule of
`tfattn.decoding.mlm_evaluation` (its module docstring): `<s> pieces </s>`,
cut to the model's `max_length` keeping the first `max_length - 2` pieces.
It returns, with M the most blanks of one text in the batch (at least 1
when the batch has a text) and k the export's `top_k`:

- `fillings`: `[batch, M, k]` `tf.string`, each blank's candidate words,
  most probable first, as `mlm_evaluation.fill_mask` gives them (the
  string that replaces the blank: "▁hundred" is "hundred", "ty" stays
  "ty", a BERT checkpoint's "##ing" is "ing", special pieces kept as
  written, see `mlm_evaluation.filling_words`); rows with fewer blanks
  are padded with `""` (`blanks` says how many are real);
- `probabilities`: `[batch, M, k]` float32 (0 in the padding);
- `blanks`: `[batch]` int32, the blanks filled in each text;
- `truncated`: `[batch]` bool, the text was cut to `max_length`; blanks
  past the cut are not filled.

A text with no piece (empty, or whitespace only once normalised) has no
blank: `blanks` 0, not truncated, padding only. A batch of 0 texts gives
outputs of batch 0. A text with pieces but no `[MASK]` fails the call with
an `InvalidArgumentError` that names `texts` and the rows; so do a tensor
of another rank (`texts_must_be_a_vector_of_strings`) and bytes that are
not UTF-8 (`texts_must_be_utf8`). A client needs TensorFlow and
tensorflow-text::

    import tensorflow as tf, tensorflow_text  # noqa: F401
    mlm = tf.saved_model.load("export_dir")
    out = mlm.signatures["fill_mask"](
        texts=tf.constant(["a dog runs on the [MASK] ."]))
    out["fillings"][0, 0], out["probabilities"][0, 0]

In Python, `load_masked_lm(export_dir)` gives `fill_mask(texts)` and
`fill_mask_details(texts)` with the refusals and the structure of
`tfattn.decoding.mlm_evaluation.fill_mask` / `fill_mask_details`, and the
same words.

The directory also holds `model.keras` and the tokenizer's files:
`spm.model` (SentencePiece), or for a BERT checkpoint's WordPiece
tokenizer (`tfattn.interop.wordpiece_tokenizer`, which the graph runs)
`vocab.txt` and `tokenizer_config.json` (`do_lower_case`).
"""

import json
import os

import tensorflow as tf

from tfattn.data.tokenizer import BOS_ID
from tfattn.data.tokenizer import EOS_ID
from tfattn.data.tokenizer import SubwordTokenizer
from tfattn.decoding import mlm_evaluation
from tfattn.decoding.translate import model_proto_of
from tfattn.export import contract
from tfattn.export.saved_model import loaded_export
from tfattn.interop.wordpiece_tokenizer import WordPieceTokenizer
from tfattn.utils import files
from tfattn.utils.validation import check_positive_int
from tfattn.utils.texts import checked_texts
from tfattn.utils.validation import invalid_argument

__all__ = ["FILL_MASK_SIGNATURE_KEY", "MaskedLMExport", "SavedModelMaskedLM",
           "export_masked_lm", "load_masked_lm"]

_CONTEXT = "export_masked_lm"
FILL_MASK_SIGNATURE_KEY = "fill_mask"
_TEXTS = tf.TensorSpec([None], tf.string, name="texts")
_WORDPIECE_CONFIG = "tokenizer_config.json"


class MaskedLMExport(tf.Module):
    """The exported module: the model's variables, the tokenizer and the
    `fill_mask` signature (see the module docstring).

    Args:
        model: a built `tfattn.MaskedLM`.
        tokenizer: bytes (its SentencePiece model, with the mask piece: a
            `SubwordTokenizer` is made) or a `WordPieceTokenizer` (a BERT
            checkpoint's, used as it is).
        top_k: int >= 1, at most the vocabulary size.
        name: str or None. The module name.
    """

    def __init__(self, model, tokenizer, top_k, name=None):
        """Checks `top_k` and the vocabulary's mask piece; keeps the model
        (its variables only are saved)."""
        super().__init__(name=name)
        self.tokenizer = (tokenizer if isinstance(
            tokenizer, WordPieceTokenizer) else SubwordTokenizer(tokenizer))
        self._top_k = check_positive_int("top_k", top_k, _CONTEXT)
        if top_k > model.vocab_size:
            raise invalid_argument(
                "top_k", f"at most the vocabulary's {model.vocab_size}",
                top_k, _CONTEXT)
        mlm_evaluation.check_model_and_tokenizer(model, self.tokenizer,
                                                 _CONTEXT)
        self._mask_id = self.tokenizer.mask_id
        self._wordpiece = isinstance(tokenizer, WordPieceTokenizer)
        self._space_id = (None if self._wordpiece
                          else self.tokenizer.piece_to_id("\u2581"))
        self._max_length = model.max_length
        # Each id's word, built here by the Python path's own rule, so
        # that the signature and `fill_mask` give the same strings.
        self._words = tf.constant(mlm_evaluation.filling_words(
            self.tokenizer, range(model.vocab_size)), tf.string)
        self._set_model(model)
        self.top_k = tf.Variable(self._top_k, dtype=tf.int32,
                                 trainable=False)
        self.max_length = tf.Variable(model.max_length, dtype=tf.int32,
                                      trainable=False)

    @tf.__internal__.tracking.no_automatic_dependency_tracking
    def _set_model(self, model):
        self._model = model

    def trace(self):
        """The concrete signatures to save.

        Returns:
            dict: `fill_mask` to its concrete function.
        """
        fill = self.fill_mask.get_concrete_function()
        self.model_variables = list(fill.variables)
        return {FILL_MASK_SIGNATURE_KEY: fill}

    @tf.function(input_signature=[_TEXTS], autograph=False)
    def fill_mask(self, texts):
        """The top-k fillings of every blank (the `fill_mask` signature).

        Args:
            texts: `[B]` `tf.string`, each with at least one `[MASK]` or
                no piece.

        Returns:
            dict: `fillings`, `probabilities` (`[B, M, k]`), `blanks`,
            `truncated` (`[B]`).
        """
        texts = contract.utf8_checked(tf.ensure_shape(
            texts, [None], name="texts_must_be_a_vector_of_strings"),
            name="texts")
        if self._wordpiece:
            pieces = self.tokenizer.tokenize_with_blanks(texts)
        else:
            pieces = self._without_blank_spaces(
                self.tokenizer.tokenize(texts))
        batch = tf.shape(texts)[0]
        room = self._max_length - 2
        truncated = pieces.row_lengths() > room
        rows = tf.concat([tf.fill([batch, 1], BOS_ID),
                          pieces[:, :room],
                          tf.fill([batch, 1], EOS_ID)], axis=1)
        ids = tf.cast(rows.to_tensor(0), tf.int32)  # [B, T]
        is_blank = tf.equal(ids, self._mask_id)
        blanks = tf.reduce_sum(tf.cast(is_blank, tf.int32), axis=1)
        in_text = tf.reduce_sum(tf.cast(tf.equal(
            pieces, self._mask_id), tf.int32), axis=1)
        missing = tf.where(tf.logical_and(
            tf.equal(in_text, 0), pieces.row_lengths() > 0))[:, 0]
        check = tf.debugging.Assert(
            tf.equal(tf.size(missing), 0),
            ["fill_mask: texts with pieces but without [MASK] (an empty "
             "text is answered with no blank), at rows:", missing],
            summarize=20)
        with tf.control_dependencies([check]):
            ids = tf.identity(ids)
        positions, used = _blank_positions(is_blank)
        logits = self._model({"token_ids": ids, "mask_positions": positions},
                             training=False)  # [B, M, V]
        probs, best = tf.math.top_k(tf.nn.softmax(logits), k=self._top_k)
        words = tf.gather(self._words, best)
        used = used[..., None]
        return {"fillings": tf.where(used, words, ""),
                "probabilities": tf.where(used, probs, 0.0),
                "blanks": blanks, "truncated": truncated}

    def _without_blank_spaces(self, pieces):
        """`mlm_evaluation.without_blank_spaces` in the graph: drops the
        lone "▁" piece before each `[MASK]`."""
        flat = pieces.values
        rows = pieces.value_rowids()
        following = tf.concat([flat[1:], [-1]], axis=0)
        # The last piece of a row has no follower in its text.
        last = tf.not_equal(rows, tf.concat([rows[1:], [-1]], axis=0))
        following = tf.where(last, -1, tf.cast(following, tf.int32))
        drop = tf.logical_and(tf.equal(flat, self._space_id),
                              tf.equal(following, self._mask_id))
        return tf.ragged.boolean_mask(
            pieces, pieces.with_flat_values(tf.logical_not(drop)))


def _blank_positions(is_blank):
    """Blank positions, ascending, [B, M] int32 (0 where unused), and a
    bool [B, M] of the used ones."""
    length = tf.shape(is_blank)[1]
    index = tf.sort(tf.where(is_blank, tf.range(length)[None, :], length),
                    axis=1)
    width = tf.maximum(tf.reduce_max(tf.reduce_sum(
        tf.cast(is_blank, tf.int32), axis=1)), 1)
    index = index[:, :width]
    used = index < length
    return tf.where(used, index, 0), used


def export_masked_lm(model, tokenizer, export_dir, top_k=5,
                     overwrite=False):
    """Writes the fill-mask SavedModel of a `MaskedLM`, atomically (built
    beside `export_dir`, renamed when complete).

    Args:
        model: a built `tfattn.MaskedLM`.
        tokenizer: its `SubwordTokenizer` (or the SentencePiece bytes),
            learnt with the mask piece, or a BERT checkpoint's
            `WordPieceTokenizer` (`tfattn.interop.bert`).
        export_dir: str or path-like. Local directory to create.
        top_k: int >= 1. Fillings per blank. Defaults to `5`.
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
    if not getattr(model, "built", False) or not hasattr(
            model, "text_encoder") or not hasattr(model, "head_bias"):
        raise invalid_argument("model", "a built tfattn.MaskedLM",
                               type(model).__name__, _CONTEXT)
    if isinstance(tokenizer, WordPieceTokenizer):
        contents = {"vocab.txt": "".join(
            t + "\n" for t in tokenizer.vocabulary).encode("utf-8"),
                    _WORDPIECE_CONFIG: json.dumps(
                        {"do_lower_case": tokenizer.lowercase}).encode()}
        in_graph = tokenizer
    else:
        in_graph = model_proto_of(tokenizer)
        contents = {"spm.model": in_graph}
    export_dir = files.local_directory("export_dir", export_dir, _CONTEXT)
    module = MaskedLMExport(model, in_graph, top_k)
    with files.directory_written_atomically(export_dir, overwrite) as tmp:
        tf.saved_model.save(module, tmp, signatures=module.trace())
        for name, value in contents.items():
            with open(os.path.join(tmp, name), "wb") as f:
                f.write(value)
        model.save(os.path.join(tmp, "model.keras"))
    return export_dir


class SavedModelMaskedLM:
    """Fill-mask with an export of `export_masked_lm`, in Python.

    It answers as `tfattn.decoding.mlm_evaluation.fill_mask` and
    `fill_mask_details` do: the texts are checked here (naming `texts` or
    `texts[i]`, before anything runs in the graph), read by the same rule,
    and returned in the same structure, with the same words
    (`mlm_evaluation.filling_words`).

    Args:
        export_dir: str or path-like. The export directory.

    Attributes:
        module: the loaded SavedModel (`tf.saved_model.load`).
        signatures: its signatures (`fill_mask`, taking `texts`).
        top_k: int. The fillings per blank the export gives.
        max_length: int. The model's `max_length`.
        tokenizer: the export's `SubwordTokenizer` (`spm.model`) or
            `WordPieceTokenizer` (`vocab.txt`).

    Raises:
        FileNotFoundError: `export_dir` holds no `saved_model.pb`, or
            neither `spm.model` nor `vocab.txt` (with
            `tokenizer_config.json`).
    """

    def __init__(self, export_dir):
        """Loads the SavedModel, its settings and its tokenizer."""
        import tensorflow_text  # noqa: F401  (registers the SentencePiece ops)

        export_dir = files.checked_path("export_dir", export_dir,
                                        "load_masked_lm")
        vocab = os.path.join(export_dir, "vocab.txt")
        wordpiece = os.path.isfile(vocab) and not os.path.isfile(
            os.path.join(export_dir, "spm.model"))
        export_dir, self.module = loaded_export(
            export_dir, "load_masked_lm", "export_masked_lm",
            files_needed=("saved_model.pb", "vocab.txt", _WORDPIECE_CONFIG)
            if wordpiece else ("saved_model.pb", "spm.model"))
        self.signatures = self.module.signatures
        self.top_k = int(self.module.top_k.numpy())
        self.max_length = int(self.module.max_length.numpy())
        if wordpiece:
            with open(os.path.join(export_dir, _WORDPIECE_CONFIG),
                      encoding="utf-8") as f:
                lowercase = bool(json.load(f)["do_lower_case"])
            self.tokenizer = WordPieceTokenizer.from_file(
                vocab, lowercase=lowercase)
            return
        with open(os.path.join(export_dir, "spm.model"), "rb") as f:
            self.tokenizer = SubwordTokenizer(f.read())

    def fill_mask(self, texts):
        """The top-k words of every `[MASK]` in each text.

        Args:
            texts: list or tuple of str (as `mlm_evaluation.fill_mask`).

        Returns:
            list (per text) of lists (per blank) of `(word, probability)`
            pairs, the export's `top_k` of them, most probable first; the
            words are `mlm_evaluation.fill_mask`'s.

        Raises:
            ValueError: as `mlm_evaluation.fill_mask` (blanks past
                `max_length` included).
        """
        return self._run(texts, "SavedModelMaskedLM.fill_mask",
                         whole=True).fillings

    def fill_mask_details(self, texts):
        """`fill_mask` that also answers texts cut to `max_length`.

        Args:
            texts: list or tuple of str.

        Returns:
            `tfattn.decoding.mlm_evaluation.FillMaskResult`.

        Raises:
            ValueError: as `mlm_evaluation.fill_mask_details`.
        """
        return self._run(texts, "SavedModelMaskedLM.fill_mask_details",
                         whole=False)

    def _run(self, texts, context, whole):
        texts = checked_texts(texts, context)
        pieces = mlm_evaluation.text_pieces(self.tokenizer, texts, True)
        mlm_evaluation.check_blanks(
            texts, pieces, self.tokenizer.mask_id,
            self.max_length if whole else None, context)
        out = self.signatures[FILL_MASK_SIGNATURE_KEY](
            texts=tf.constant(texts, tf.string, shape=[len(texts)]))
        words = out["fillings"].numpy()
        probs = out["probabilities"].numpy()
        fillings = [
            [[(w.decode("utf-8"), float(p))
              for w, p in zip(words[row, slot], probs[row, slot])]
             for slot in range(count)]
            for row, count in enumerate(out["blanks"].numpy().tolist())]
        return mlm_evaluation.FillMaskResult(
            fillings, [bool(x) for x in out["truncated"].numpy()])


def load_masked_lm(export_dir):
    """A `SavedModelMaskedLM` of the export at `export_dir`.

    Args:
        export_dir: str or path-like. The directory `export_masked_lm`
            wrote.

    Returns:
        `SavedModelMaskedLM`: `.fill_mask(texts)` and
        `.fill_mask_details(texts)`, `.signatures` for the graph function.
    """
    return SavedModelMaskedLM(export_dir)
