"""Evaluating a language model (`tfattn.CausalLM`) on texts: perplexity per
subword and per word, and sample continuations.

A text is scored as training reads it: the model sees `[BOS] + pieces` and
predicts `pieces + [EOS]`, so the end of the text is predicted too.

- Perplexity per subword: exp(total negative log-likelihood / predicted
  pieces, EOS included). It depends on the vocabulary.
- Perplexity per word: exp(the same total / words), words = the text's
  whitespace-separated words plus one end-of-text per text (the <eos>
  convention of word-level language modelling), so models with different
  vocabularies compare on the same denominator.
"""

import json
import math
import os

import numpy as np
import tensorflow as tf
from keras import ops

from tfattn.data.tokenizer import BOS_ID
from tfattn.data.tokenizer import EOS_ID
from tfattn.decoding import lm_serving
from tfattn.utils.files import write_text_atomically
from tfattn.utils.texts import checked_texts

__all__ = ["perplexity", "continue_texts", "continue_details",
           "sample_continuations",
           "evaluate_language_model"]


def _encoded(tokenizer, texts, max_length):
    """(inputs [B, T], labels [B, T]) int32, right-padded, T <= max_length,
    and the number of texts cut to fit (their first pieces are scored)."""
    pieces = tokenizer.tokenize(list(texts)).to_list()
    width = min(max(len(p) for p in pieces) + 1, max_length)
    inputs = np.zeros((len(pieces), width), np.int32)
    labels = np.zeros((len(pieces), width), np.int32)
    cut = sum(len(p) + 1 > width for p in pieces)
    for row, ids in enumerate(pieces):
        ids = ids[:width - 1]
        inputs[row, :len(ids) + 1] = [BOS_ID] + ids
        labels[row, :len(ids) + 1] = ids + [EOS_ID]
    return inputs, labels, cut


def perplexity(model, tokenizer, texts, batch_size=64):
    """Perplexity of `texts` under `model` (see the module docstring).

    Args:
        model: CausalLM.
        tokenizer: SubwordTokenizer. The model's vocabulary.
        texts: list of str. Non-empty texts.
        batch_size: int. Texts per forward pass. Defaults to `64`.

    Returns:
        dict: `perplexity_per_subword`, `perplexity_per_word`,
        `negative_log_likelihood` (the total, in nats), `subwords`,
        `words`, `texts`, `cut_texts` (texts longer than the model's
        `max_length`, scored on their first pieces).
    """
    total, subwords, words, cut = 0.0, 0, 0, 0
    for start in range(0, len(texts), batch_size):
        chunk = texts[start:start + batch_size]
        inputs, labels, chunk_cut = _encoded(tokenizer, chunk,
                                             model.max_length)
        logits = ops.convert_to_numpy(model(inputs, training=False))
        log_probs = logits - _logsumexp(logits)
        picked = np.take_along_axis(log_probs, labels[..., None], -1)[..., 0]
        kept = labels > 0
        total -= float(picked[kept].astype(np.float64).sum())
        subwords += int(kept.sum())
        words += sum(len(t.split()) + 1 for t in chunk)
        cut += chunk_cut
    return {
        "perplexity_per_subword": math.exp(total / max(subwords, 1)),
        "perplexity_per_word": math.exp(total / max(words, 1)),
        "negative_log_likelihood": total,
        "subwords": subwords,
        "words": words,
        "texts": len(texts),
        "cut_texts": cut,
    }


def _logsumexp(x):
    top = x.max(axis=-1, keepdims=True)
    return top + np.log(np.exp(x - top).sum(axis=-1, keepdims=True))


def continue_details(model, tokenizer, prompts, max_new_tokens=None,
                     sampler="greedy", seed=0, jit_compile=False):
    """Continues text prompts with `model.generate`, under the serving
    contract of `tfattn.decoding.lm_serving` (the exports answer the same).

    Args:
        model: CausalLM.
        tokenizer: SubwordTokenizer.
        prompts: list or tuple of str. Each is read as the start of a text
            (BOS, then its pieces); a prompt longer than the window
            (`max_length - max_new_tokens` ids) keeps its last ids.
        max_new_tokens: int in [1, model.max_length), or None: 32, at
            most half the model's `max_length`. Pieces generated at most.
        sampler: a sampler or its name (`CausalLM.generate`).
        seed: int in [-2**63, 2**63). The draws' seed.
        jit_compile: bool. Generate under XLA. Defaults to `False`, the
            SavedModel's path: XLA draws from another random stream, so
            only without it do a seed's samples equal the export's.

    Returns:
        `lm_serving.Continuations`: the generated text only, its
        log-probability, and whether the prompt was cut.

    Raises:
        ValueError: naming `prompts`, `prompts[i]`, `max_new_tokens`,
            `sampler` or `seed`.
    """
    rows, ids, scores, truncated = _generate(
        model, tokenizer, prompts, max_new_tokens, sampler, seed,
        "continue_details", strip_prompt=True, jit_compile=jit_compile)
    if not rows:
        return lm_serving.Continuations([], [], [])
    return lm_serving.Continuations(
        _decoded(tokenizer, ids), [float(s) for s in scores], truncated)


def continue_texts(model, tokenizer, prompts, max_new_tokens=None,
                   sampler="greedy", seed=0, jit_compile=False):
    """Each prompt followed by its continuation (`continue_details`),
    decoded together (a continuation may go on with the prompt's last
    word).

    Args:
        model: CausalLM.
        tokenizer: SubwordTokenizer.
        prompts: list or tuple of str.
        max_new_tokens: int in [1, model.max_length), or None (32, at
            most half the model's `max_length`).
        sampler: a sampler or its name (`CausalLM.generate`).
        seed: int in [-2**63, 2**63). The draws' seed.
        jit_compile: bool. Generate under XLA (`continue_details`).
            Defaults to `False`.

    Returns:
        list of str: the prompt as read (its window, see
        `lm_serving.prompt_window`) and its continuation; the end-of-text
        piece ends it.
    """
    rows, ids, _, _ = _generate(
        model, tokenizer, prompts, max_new_tokens, sampler, seed,
        "continue_texts", strip_prompt=False, jit_compile=jit_compile)
    return _decoded(tokenizer, ids) if rows else []


def _generate(model, tokenizer, prompts, max_new_tokens, sampler, seed,
              context, strip_prompt, jit_compile):
    """(windowed rows, generated ids, scores, truncated) of `prompts`."""
    prompts = checked_texts(prompts, context, name="prompts")
    if max_new_tokens is None:
        max_new_tokens = min(32, max(1, model.max_length // 2))
    max_new_tokens = lm_serving.checked_max_new_tokens(
        max_new_tokens, model.max_length, context)
    if not prompts:
        return [], None, None, []
    pieces = tokenizer.tokenize(prompts).to_list()
    rows, truncated = lm_serving.prompt_window(
        pieces, model.max_length - max_new_tokens)
    ids, scores = model.generate(rows, max_new_tokens=max_new_tokens,
                                 sampler=sampler, seed=seed,
                                 strip_prompt=strip_prompt,
                                 jit_compile=jit_compile)
    return rows, ids, scores, truncated


def _decoded(tokenizer, ids):
    texts = tokenizer.detokenize(tf.constant(ids, tf.int32)).numpy()
    return [t.decode("utf-8") for t in texts]


def sample_continuations(model, tokenizer, texts, count=5, **kwargs):
    """Continues the first half of the words of the first `count` texts.

    Args:
        model: CausalLM.
        tokenizer: SubwordTokenizer.
        texts: list of str.
        count: int. Texts used. Defaults to `5`.
        **kwargs: `continue_texts`' arguments.

    Returns:
        list of (prompt, continued text, the whole original text).
    """
    texts = texts[:count]
    prompts = []
    for text in texts:
        words = text.split()
        prompts.append(" ".join(words[:max(1, len(words) // 2)]))
    if not prompts:
        return []
    continued = continue_texts(model, tokenizer, prompts, **kwargs)
    return list(zip(prompts, continued, texts))


def evaluate_language_model(model, tokenizer, texts, model_dir, split,
                            samples=5):
    """Scores a split and writes `metrics_{split}.json` in `model_dir`.

    Args:
        model: CausalLM.
        tokenizer: SubwordTokenizer.
        texts: list of str. The split's texts.
        model_dir: str. Where the metrics are written.
        split: str. The split's name.
        samples: int. Continuations of the split's first texts to add.

    Returns:
        dict: `perplexity`'s figures, `split`, `samples` (a list of
        [prompt, continued, original]) and `metrics_file`.
    """
    metrics = perplexity(model, tokenizer, texts)
    metrics["split"] = split
    metrics["samples"] = [list(row) for row in sample_continuations(
        model, tokenizer, texts, count=samples)]
    path = os.path.join(str(model_dir), f"metrics_{split}.json")
    metrics["metrics_file"] = path
    tf.io.gfile.makedirs(str(model_dir))
    write_text_atomically(path, json.dumps(metrics, indent=2,
                                           ensure_ascii=False) + "\n")
    return metrics
