"""Evaluating a masked language model (`tfattn.MaskedLM`): masked-token
accuracy and perplexity at the blanks, and filling blanks in text.

How a text is read (the one rule; `fill_mask`, `fill_mask_details`,
`masked_lm_scores` and the fill-mask SavedModel,
`tfattn.export.export_masked_lm`, all follow it): the text's pieces
(SentencePiece's, for fill-mask without the lone "▁" before each
`[MASK]`, see `without_blank_spaces`; or a BERT checkpoint's WordPiece
tokens, for fill-mask with each `[MASK]` read as the mask id) are read as
`<s> pieces </s>` (BERT's `[CLS] tokens [SEP]`); a text of more than
`max_length - 2` pieces (the model's `max_length`) keeps its first
`max_length - 2` pieces and is *truncated*. A text with no piece (empty, or
whitespace only once normalised) reads as `<s> </s>`: it has no blank.

A text's blanks (for the scores) are chosen by BERT's rule
(`tfattn.data.MaskGenerator`) from a fixed seed per batch, so two
evaluations of a checkpoint see the same blanks.

- Masked-token accuracy: the share of blanks whose top-1 prediction is the
  original piece (Model Garden's `masked_lm_accuracy`).
- Perplexity at the blanks: exp(mean negative log-likelihood of the
  original pieces at the blanks).

`fill_mask` takes texts with the mask piece `[MASK]` (one blank or
several) and returns each blank's top-k words and probabilities; it
refuses a text whose blanks fall past `max_length`, which
`fill_mask_details` answers (the blanks that fit, and `truncated`).

A filling is the word as a user reads it, the same string in the
SavedModel: the string that replaces `[MASK]` in the text. SentencePiece's
"▁hundred" is "hundred", "ty" (the rest of a word) stays "ty"; WordPiece's
"##ing" is "ing" ("jump[MASK]" reads "jumping"); special pieces are kept
as written ("</s>", "[SEP]"); the whole rule, for byte pieces too, is in
`filling_words`.
"""

import json
import math
import numbers
import os
import re
from typing import NamedTuple

import numpy as np
import tensorflow as tf
from keras import ops

from tfattn.data.tokenizer import BOS_ID
from tfattn.data.tokenizer import EOS_ID
from tfattn.data.tokenizer import MASK_PIECE
from tfattn.decoding._mlm_words import filling_words
from tfattn.decoding._mlm_words import is_wordpiece
from tfattn.decoding._mlm_words import text_pieces
from tfattn.decoding._mlm_words import without_blank_spaces
from tfattn.utils import validation
from tfattn.utils.files import write_text_atomically
from tfattn.utils.texts import checked_texts

__all__ = ["FillMaskResult", "masked_lm_scores", "fill_mask",
           "fill_mask_details", "filling_words", "sample_fillings",
           "evaluate_masked_lm", "without_blank_spaces", "text_pieces"]

_CONTEXT = "fill_mask"
_SPLIT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


class FillMaskResult(NamedTuple):
    """What `fill_mask_details` returns, text by text: `fillings` (as
    `fill_mask` returns them: per blank that fits, its `(word,
    probability)` pairs) and `truncated` (bool: the text was cut to the
    model's `max_length`, see the module docstring)."""

    fillings: list
    truncated: list


def _rows(pieces, max_length):
    """The reading rule (module docstring): `<s> pieces </s>` rows [B, T]
    int32, right-padded, each cut to `max_length`; and the truncated flags.

    Args:
        pieces: list of lists of int. Each text's pieces.
        max_length: int >= 3. The model's positions.

    Returns:
        `(rows, truncated)`: int32 [B, T] and a list of B bools.
    """
    room = max_length - 2
    width = min(max((len(p) for p in pieces), default=0), room) + 2
    rows = np.zeros((len(pieces), width), np.int32)
    for row, ids in enumerate(pieces):
        ids = [BOS_ID] + list(ids[:room]) + [EOS_ID]
        rows[row, :len(ids)] = ids
    return rows, [len(p) > room for p in pieces]


def _log_softmax(logits):
    logits = np.asarray(logits, np.float64)
    top = logits.max(axis=-1, keepdims=True)
    return logits - top - np.log(np.exp(logits - top).sum(-1, keepdims=True))


def check_model_and_tokenizer(model, tokenizer, context, blanks=True):
    """Checks a `MaskedLM` and its tokenizer (and, with `blanks`, the mask
    piece that fill-mask looks for).

    Args:
        model: should be a `tfattn.models.MaskedLM` with `max_length >= 3`.
        tokenizer: should be its `SubwordTokenizer` (or, for a BERT
            checkpoint, its `WordPieceTokenizer`).
        context: str. Who checks; prefixes the messages.
        blanks: bool. Also require the mask piece, the model's
            `mask_token_id`.

    Raises:
        ValueError: naming `model` or `tokenizer`.
    """
    # Duck-typed (decoding sits below models): a MaskedLM's encoder and
    # head bias.
    if not (hasattr(model, "text_encoder") and hasattr(model, "head_bias")
            and hasattr(model, "max_length")):
        raise validation.invalid_argument(
            "model", "a tfattn.models.MaskedLM", f"<{type(model).__name__}>",
            context)
    if model.max_length < 3:
        raise validation.invalid_argument(
            "model", "a MaskedLM with max_length >= 3 (<s>, a piece, </s>)",
            f"<MaskedLM with max_length={model.max_length}>", context)
    if not all(hasattr(tokenizer, name) for name in (
            "tokenize", "vocab_size", "mask_id", "id_to_piece")) or not (
                hasattr(tokenizer, "model_proto") or is_wordpiece(tokenizer)):
        raise validation.invalid_argument(
            "tokenizer", "a tfattn.data.SubwordTokenizer (or a BERT "
            "checkpoint's WordPieceTokenizer)",
            f"<{type(tokenizer).__name__}>", context)
    if tokenizer.vocab_size > model.vocab_size:
        raise validation.invalid_argument(
            "tokenizer", "the model's vocabulary (at most "
            f"{model.vocab_size} pieces)",
            f"<tokenizer of {tokenizer.vocab_size} pieces>", context)
    if blanks and tokenizer.mask_id is None:
        raise validation.invalid_argument(
            "tokenizer", f"a vocabulary with the mask piece {MASK_PIECE} "
            "(train_tokenizer(..., mask_piece=True))",
            f"<tokenizer without {MASK_PIECE}>", context)
    if blanks and tokenizer.mask_id != model.mask_token_id:
        raise validation.invalid_argument(
            "tokenizer", f"the model's mask id {model.mask_token_id} for "
            f"{MASK_PIECE}", f"<tokenizer whose {MASK_PIECE} is id "
            f"{tokenizer.mask_id}>", context)


def check_blanks(texts, pieces, mask_id, max_length, context):
    """Refuses a text with pieces but no blank; with `max_length`, also a
    text whose blanks fall past it (the reading rule cuts them).

    Args:
        texts: list of str.
        pieces: list of lists of int. Their pieces (`without_blank_spaces`).
        mask_id: int. The mask piece's id.
        max_length: int or None. The model's `max_length` (None: blanks
            past it are allowed, as `fill_mask_details` fills those that
            fit).
        context: str. Who checks; prefixes the messages.

    Raises:
        ValueError: naming `texts[i]`.
    """
    for i, (text, ids) in enumerate(zip(texts, pieces)):
        if ids and mask_id not in ids:
            raise validation.invalid_argument(
                f"texts[{i}]", f"a text with at least one {MASK_PIECE} (or "
                "an empty one, which has no blank)", text, context)
        lost = 0 if max_length is None else list(
            ids[max_length - 2:]).count(mask_id)
        if lost:
            raise validation.invalid_argument(
                f"texts[{i}]", f"every {MASK_PIECE} within the model's "
                f"max_length={max_length} (its first {max_length - 2} "
                f"pieces); {lost} of its {list(ids).count(mask_id)} blanks "
                "fall past it (fill_mask_details fills the blanks that fit "
                "and flags the text as truncated)", text, context)


def _check_top_k(top_k, tokenizer, context):
    validation.check_positive_int("top_k", top_k, context)
    if top_k > tokenizer.vocab_size:
        raise validation.invalid_argument(
            "top_k", f"at most the vocabulary's {tokenizer.vocab_size}",
            top_k, context)


def masked_lm_scores(model, tokenizer, texts, masker, seed=0, batch_size=64):
    """Masked-token accuracy and perplexity of `texts` under `model`.

    Texts are read by the module's rule (pieces past `max_length` are not
    scored; `truncated` counts the texts cut).

    Args:
        model: MaskedLM.
        tokenizer: SubwordTokenizer or WordPieceTokenizer. The model's
            vocabulary.
        texts: list of str, giving at least one blank in all.
        masker: MaskGenerator (or a callable `masker(rows [B, T], seed=[2])`
            with its outputs). Chooses the blanks.
        seed: int in [-2^31, 2^31). Batch i's blanks come from the
            stateless seed `(seed, i)`.
        batch_size: int >= 1. Texts per forward pass. Defaults to `64`.

    Returns:
        dict: `masked_accuracy`, `masked_perplexity`, `blanks` (their
        number), `texts`, `truncated` (texts cut to `max_length`).

    Raises:
        ValueError: naming the argument; `texts` when they give no blank.
    """
    context = "masked_lm_scores"
    texts = checked_texts(texts, context)
    check_model_and_tokenizer(model, tokenizer, context, blanks=False)
    if not callable(masker):
        raise validation.invalid_argument(
            "masker", "a tfattn.data.MaskGenerator", masker, context)
    if (isinstance(seed, bool) or not isinstance(seed, numbers.Integral)
            or not -2**31 <= seed < 2**31):
        raise validation.invalid_argument(
            "seed", "an int in [-2^31, 2^31)", seed, context)
    batch_size = validation.check_positive_int("batch_size", batch_size,
                                               context)
    nll, hits, blanks, cut = 0.0, 0, 0, 0
    for index, start in enumerate(range(0, len(texts), batch_size)):
        rows, truncated = _rows(text_pieces(
            tokenizer, texts[start:start + batch_size], False),
            model.max_length)
        cut += sum(truncated)
        masked = masker(rows, seed=[seed, index])
        weights = np.asarray(masked["mask_weights"]) > 0
        targets = np.asarray(masked["mask_ids"])
        logits = ops.convert_to_numpy(model(
            {"token_ids": masked["token_ids"],
             "mask_positions": masked["mask_positions"]}, training=False))
        log_probs = _log_softmax(logits)
        picked = np.take_along_axis(log_probs, targets[..., None], -1)[..., 0]
        nll -= float(picked[weights].sum())
        hits += int((log_probs.argmax(-1) == targets)[weights].sum())
        blanks += int(weights.sum())
    if not blanks:
        raise validation.invalid_argument(
            "texts", "texts with at least one piece to blank",
            f"<{len(texts)} texts giving no blank>", context)
    return {"masked_accuracy": hits / blanks,
            "masked_perplexity": math.exp(nll / blanks),
            "blanks": blanks, "texts": len(texts), "truncated": cut}


def _read_blanks(model, tokenizer, texts, top_k, context, whole):
    """Checks the arguments and reads the texts: `(texts, pieces, rows,
    truncated)`; with `whole`, refuses blanks past `max_length`."""
    texts = checked_texts(texts, context)
    check_model_and_tokenizer(model, tokenizer, context)
    _check_top_k(top_k, tokenizer, context)
    pieces = text_pieces(tokenizer, texts, True)
    check_blanks(texts, pieces, tokenizer.mask_id,
                 model.max_length if whole else None, context)
    rows, truncated = _rows(pieces, model.max_length)
    return texts, pieces, rows, truncated


def _fill(model, tokenizer, rows, top_k):
    """Each row's blanks' top-k `(word, probability)` pairs
    (`filling_words`)."""
    mask_id = tokenizer.mask_id
    positions = [np.flatnonzero(row == mask_id) for row in rows]
    width = max((len(p) for p in positions), default=0)
    if not width:
        return [[] for _ in positions]
    padded = np.zeros((len(rows), width), np.int32)
    for row, found in enumerate(positions):
        padded[row, :len(found)] = found
    logits = ops.convert_to_numpy(model(
        {"token_ids": rows, "mask_positions": padded}, training=False))
    probs = np.exp(_log_softmax(logits))
    best = np.argsort(-probs, axis=-1, kind="stable")[..., :top_k]
    words = np.array(filling_words(tokenizer, best.ravel()),
                     object).reshape(best.shape)  # [B, M, k]
    return [[[(str(w), float(probs[row, slot, i]))
              for w, i in zip(words[row, slot], best[row, slot])]
             for slot in range(len(found))]
            for row, found in enumerate(positions)]


def fill_mask(model, tokenizer, texts, top_k=5):
    """The top-k fillings of every `[MASK]` in each text.

    Texts are read by the module's rule; a text whose blanks fall past the
    model's `max_length` is refused (`fill_mask_details` fills the blanks
    that fit and says which texts were cut).

    Args:
        model: MaskedLM.
        tokenizer: SubwordTokenizer (learnt with the mask piece) or
            WordPieceTokenizer.
        texts: list or tuple of str, each with at least one `[MASK]`, or
            empty (no piece once normalised: no blank, `[]`).
        top_k: int >= 1, at most the vocabulary size.

    Returns:
        list (one per text) of lists (one per blank, left to right) of
        `(word, probability)` pairs, most probable first. A word is the
        piece as a user reads it (`filling_words`, the module docstring):
        "▁hundred" is "hundred", "ty" (the rest of a word) stays "ty";
        special pieces are kept as written ("</s>", "<unk>").

    Raises:
        ValueError: naming `texts` (not a list of str), `texts[i]` (not
            valid Unicode, pieces but no mask piece, blanks past
            `max_length`), `model`, `tokenizer` (no mask piece) or `top_k`.
    """
    _, _, rows, _ = _read_blanks(model, tokenizer, texts, top_k, _CONTEXT,
                                 whole=True)
    return _fill(model, tokenizer, rows, top_k)


def fill_mask_details(model, tokenizer, texts, top_k=5):
    """`fill_mask` that also answers texts cut to `max_length`: the blanks
    that fit are filled, and `truncated` says which texts were cut (the
    module's reading rule; the SavedModel's `truncated` output).

    Args:
        model, tokenizer, texts, top_k: as `fill_mask`.

    Returns:
        `FillMaskResult(fillings, truncated)`: `fillings` as `fill_mask`
        returns them (past the cut, a text's blanks are absent), and a
        bool per text.

    Raises:
        ValueError: as `fill_mask`, except for blanks past `max_length`.
    """
    _, _, rows, truncated = _read_blanks(
        model, tokenizer, texts, top_k, "fill_mask_details", whole=False)
    return FillMaskResult(_fill(model, tokenizer, rows, top_k), truncated)


def sample_fillings(model, tokenizer, texts, count=5, top_k=3):
    """Blanks the middle word of the first `count` texts that have a word
    and fills it.

    Args:
        model: MaskedLM.
        tokenizer: SubwordTokenizer or WordPieceTokenizer.
        texts: list of str.
        count: int >= 0. Texts used. Defaults to `5`.
        top_k: int >= 1. Fillings per blank. Defaults to `3`.

    Returns:
        list of (text with the blank, [(word, probability)], the original
        text); the pairs are `[]` where the blank falls past `max_length`.
    """
    context = "sample_fillings"
    texts = checked_texts(texts, context)
    if (isinstance(count, bool) or not isinstance(count, numbers.Integral)
            or count < 0):
        raise validation.invalid_argument("count", "an int >= 0", count,
                                          context)
    originals = [t for t in texts if t.split()][:count]
    blanked = []
    for text in originals:
        words = text.split()
        middle = len(words) // 2
        blanked.append(" ".join(words[:middle] + [MASK_PIECE]
                                + words[middle + 1:]))
    if not blanked:
        return []
    filled = fill_mask_details(model, tokenizer, blanked, top_k=top_k)
    return [(b, f[0] if f else [], t)
            for b, f, t in zip(blanked, filled.fillings, originals)]


def evaluate_masked_lm(model, tokenizer, texts, masker, model_dir, split,
                       samples=5):
    """Scores a split and writes `metrics_{split}.json` in `model_dir`.

    Args:
        model: MaskedLM.
        tokenizer: SubwordTokenizer or WordPieceTokenizer.
        texts: list of str. The split's texts.
        masker: MaskGenerator. The run's masking (`masking.masker_for`).
        model_dir: str or path-like. Where the metrics are written.
        split: str. The split's name (letters, digits, `_`, `.`, `-`;
            it names the file).
        samples: int >= 0. Texts of the split filled as examples.

    Returns:
        dict: `masked_lm_scores`' figures, `split`, `samples` (lists of
        [text with a blank, [[word, probability], ...], original]) and
        `metrics_file`.

    Raises:
        ValueError: naming the argument.
    """
    context = "evaluate_masked_lm"
    if isinstance(model_dir, bytes) or not isinstance(model_dir, (
            str, os.PathLike)) or not str(model_dir):
        raise validation.invalid_argument(
            "model_dir", "a directory (str or path-like)", model_dir, context)
    if not isinstance(split, str) or not _SPLIT.fullmatch(split):
        raise validation.invalid_argument(
            "split", "a split name (letters, digits, '_', '.', '-')", split,
            context)
    if (isinstance(samples, bool) or not isinstance(samples, numbers.Integral)
            or samples < 0):
        raise validation.invalid_argument("samples", "an int >= 0", samples,
                                          context)
    metrics = masked_lm_scores(model, tokenizer, texts, masker)
    metrics["split"] = split
    metrics["samples"] = [
        [b, [list(pair) for pair in f], t]
        for b, f, t in sample_fillings(model, tokenizer, texts, samples)]
    model_dir = os.fspath(model_dir)
    path = os.path.join(model_dir, f"metrics_{split}.json")
    metrics["metrics_file"] = path
    tf.io.gfile.makedirs(model_dir)
    write_text_atomically(path, json.dumps(metrics, indent=2,
                                           ensure_ascii=False) + "\n")
    return metrics
