"""Evaluating a masked language model (`tfattn.MaskedLM`): masked-token
accuracy and perplexity at the blanks, and filling blanks in text.

A text is read as training reads it (`<s> pieces </s>`), its blanks chosen
by BERT's rule (`tfattn.data.MaskGenerator`) from a fixed seed per batch, so
two evaluations of a checkpoint see the same blanks.

- Masked-token accuracy: the share of blanks whose top-1 prediction is the
  original piece (Model Garden's `masked_lm_accuracy`).
- Perplexity at the blanks: exp(mean negative log-likelihood of the
  original pieces at the blanks).

`fill_mask` takes texts with the mask piece `[MASK]` (one blank or
several) and returns each blank's top-k pieces and probabilities.
"""

import json
import math
import os

import numpy as np
import tensorflow as tf
from keras import ops

from tfattn.data.tokenizer import BOS_ID
from tfattn.data.tokenizer import EOS_ID
from tfattn.data.tokenizer import MASK_PIECE
from tfattn.utils import validation
from tfattn.utils.files import write_text_atomically

__all__ = ["masked_lm_scores", "fill_mask", "sample_fillings",
           "evaluate_masked_lm", "without_blank_spaces"]

_CONTEXT = "fill_mask"


def _rows(tokenizer, texts, max_length, blanks=False):
    """`<s> pieces </s>` rows [B, T] int32, right-padded, cut to fit; with
    `blanks`, `without_blank_spaces` first."""
    pieces = tokenizer.tokenize(list(texts)).to_list()
    if blanks:
        pieces = [without_blank_spaces(tokenizer, p) for p in pieces]
    width = min(max(len(p) for p in pieces) + 2, max_length)
    rows = np.zeros((len(pieces), width), np.int32)
    for row, ids in enumerate(pieces):
        ids = ([BOS_ID] + ids[:width - 2] + [EOS_ID])
        rows[row, :len(ids)] = ids
    return rows


def without_blank_spaces(tokenizer, pieces):
    """`pieces` without the lone word-start piece ("▁") that SentencePiece
    puts before a `[MASK]` written as a word ("a [MASK] dog" gives "▁a",
    "▁", "[MASK]", "▁dog"): in training a blank replaces a whole piece,
    word start included, so the text then reads as training's blanks do.

    Args:
        tokenizer: SubwordTokenizer. Learnt with the mask piece.
        pieces: list of int. One text's piece ids.

    Returns:
        list of int.
    """
    space, mask = tokenizer.piece_to_id("\u2581"), tokenizer.mask_id
    return [p for i, p in enumerate(pieces)
            if not (p == space and i + 1 < len(pieces)
                    and pieces[i + 1] == mask)]


def _log_softmax(logits):
    logits = np.asarray(logits, np.float64)
    top = logits.max(axis=-1, keepdims=True)
    return logits - top - np.log(np.exp(logits - top).sum(-1, keepdims=True))


def masked_lm_scores(model, tokenizer, texts, masker, seed=0, batch_size=64):
    """Masked-token accuracy and perplexity of `texts` under `model`.

    Args:
        model: MaskedLM.
        tokenizer: SubwordTokenizer. The model's vocabulary.
        texts: list of str. Non-empty texts.
        masker: MaskGenerator. Chooses the blanks.
        seed: int. Batch i's blanks come from the stateless seed
            `(seed, i)`.
        batch_size: int. Texts per forward pass. Defaults to `64`.

    Returns:
        dict: `masked_accuracy`, `masked_perplexity`, `blanks` (their
        number), `texts`.
    """
    nll, hits, blanks = 0.0, 0, 0
    for index, start in enumerate(range(0, len(texts), batch_size)):
        rows = _rows(tokenizer, texts[start:start + batch_size],
                     model.max_length)
        masked = masker(rows, seed=[seed, index])
        weights = masked["mask_weights"].numpy() > 0
        targets = masked["mask_ids"].numpy()
        logits = ops.convert_to_numpy(model(
            {"token_ids": masked["token_ids"],
             "mask_positions": masked["mask_positions"]}, training=False))
        log_probs = _log_softmax(logits)
        picked = np.take_along_axis(log_probs, targets[..., None], -1)[..., 0]
        nll -= float(picked[weights].sum())
        hits += int((log_probs.argmax(-1) == targets)[weights].sum())
        blanks += int(weights.sum())
    return {"masked_accuracy": hits / max(blanks, 1),
            "masked_perplexity": math.exp(nll / max(blanks, 1)),
            "blanks": blanks, "texts": len(texts)}


def fill_mask(model, tokenizer, texts, top_k=5):
    """The top-k fillings of every `[MASK]` in each text.

    Args:
        model: MaskedLM.
        tokenizer: SubwordTokenizer. Learnt with the mask piece.
        texts: list of str, each with at least one `[MASK]`.
        top_k: int >= 1, at most the vocabulary size.

    Returns:
        list (one per text) of lists (one per blank, left to right) of
        `(piece, probability)` pairs, most probable first. Pieces are
        SentencePiece pieces ("▁" marks a word start).

    Raises:
        ValueError: naming `texts` for an empty text or one without the
            mask piece, or `top_k` out of range.
    """
    texts = list(texts)
    validation.check_positive_int("top_k", top_k, _CONTEXT)
    if top_k > tokenizer.vocab_size:
        raise validation.invalid_argument(
            "top_k", f"at most the vocabulary's {tokenizer.vocab_size}",
            top_k, _CONTEXT)
    for text in texts:
        if not isinstance(text, str) or not text.strip():
            raise validation.invalid_argument(
                "texts", "non-empty strings", text, _CONTEXT)
        if MASK_PIECE not in text:
            raise validation.invalid_argument(
                "texts", f"texts with at least one {MASK_PIECE}", text,
                _CONTEXT)
    if not texts:
        return []
    rows = _rows(tokenizer, texts, model.max_length, blanks=True)
    mask_id = tokenizer.mask_id
    positions = [np.flatnonzero(row == mask_id) for row in rows]
    width = max(max(len(p) for p in positions), 1)
    padded = np.zeros((len(rows), width), np.int32)
    for row, found in enumerate(positions):
        padded[row, :len(found)] = found
    logits = ops.convert_to_numpy(model(
        {"token_ids": rows, "mask_positions": padded}, training=False))
    probs = np.exp(_log_softmax(logits))
    results = []
    for row, found in enumerate(positions):
        blanks = []
        for slot in range(len(found)):
            best = np.argsort(-probs[row, slot], kind="stable")[:top_k]
            blanks.append([(tokenizer.id_to_piece(int(i)),
                            float(probs[row, slot, i])) for i in best])
        results.append(blanks)
    return results


def sample_fillings(model, tokenizer, texts, count=5, top_k=3):
    """Blanks the middle word of the first `count` texts and fills it.

    Args:
        model: MaskedLM.
        tokenizer: SubwordTokenizer.
        texts: list of str.
        count: int. Texts used. Defaults to `5`.
        top_k: int. Fillings per blank. Defaults to `3`.

    Returns:
        list of (text with the blank, [(piece, probability)], the original
        text).
    """
    blanked = []
    for text in texts[:count]:
        words = text.split()
        middle = len(words) // 2
        blanked.append(" ".join(words[:middle] + [MASK_PIECE]
                                + words[middle + 1:]))
    if not blanked:
        return []
    filled = fill_mask(model, tokenizer, blanked, top_k=top_k)
    return [(b, f[0] if f else [], t)
            for b, f, t in zip(blanked, filled, texts[:count])]


def evaluate_masked_lm(model, tokenizer, texts, masker, model_dir, split,
                       samples=5):
    """Scores a split and writes `metrics_{split}.json` in `model_dir`.

    Args:
        model: MaskedLM.
        tokenizer: SubwordTokenizer.
        texts: list of str. The split's texts.
        masker: MaskGenerator. The run's masking (`masking.masker_for`).
        model_dir: str. Where the metrics are written.
        split: str. The split's name.
        samples: int. Texts of the split filled as examples.

    Returns:
        dict: `masked_lm_scores`' figures, `split`, `samples` (lists of
        [text with a blank, [[piece, probability], ...], original]) and
        `metrics_file`.
    """
    metrics = masked_lm_scores(model, tokenizer, texts, masker)
    metrics["split"] = split
    metrics["samples"] = [
        [b, [list(pair) for pair in f], t]
        for b, f, t in sample_fillings(model, tokenizer, texts, samples)]
    path = os.path.join(str(model_dir), f"metrics_{split}.json")
    metrics["metrics_file"] = path
    tf.io.gfile.makedirs(str(model_dir))
    write_text_atomically(path, json.dumps(metrics, indent=2,
                                           ensure_ascii=False) + "\n")
    return metrics
