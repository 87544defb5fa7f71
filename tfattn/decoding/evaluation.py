"""BLEU and the evaluation of a split.

- `bleu`: corpus BLEU through sacreBLEU, with its signature.
- `multi30k_tokenize`: a hypothesis lowercased, normalised and tokenised by
  sacremoses exactly as Multi30k's `tok/` references were made.
- `evaluate`: translates an evaluation split (`tfattn.decoding.translate`),
  scores it and writes the translations and a metrics JSON into the model
  directory.
- `greedy_bleu`: the cheap validation score that training logs.

Two BLEU scores, and why both:

1. **Detokenised, cased sacreBLEU** (`tokenize='13a'`) of the model's plain
   output against the plain references. This is the score to report and to
   compare between runs: the tokenisation is sacreBLEU's own, recorded in
   its signature.
2. **Tokenised, lowercased BLEU**, the number that published Multi30k results
   quote (e.g. the 41.02 en->de of the data README). Those papers score
   Moses-tokenised, lowercased text (multi30k/dataset's `tok/*.lc.norm.tok.*`
   files, made by `lowercase.perl | normalize-punctuation.perl -l L |
   tokenizer.perl -l L`) with `multi-bleu.perl`. The hypotheses go through
   the same three steps with sacremoses (`MosesPunctNormalizer(L,
   perl_parity=True)`, `MosesTokenizer(L)` with XML escaping), which
   reproduces all 62,028 lines of the tok/ files of the three splits from
   the raw files (`tests/test_decoding_evaluation.py`), and are scored
   against the tok/ references with `tokenize='none'`, which is what
   `multi-bleu.perl` computes.

   Caveat: the obvious shortcut, sacreBLEU's `13a` tokeniser on lowercased
   plain text scored against the tok/ references, is *not* the same: on the
   German test split it scores the references' own plain text at 99.61
   instead of 100 (it does not escape quotes and apostrophes as `&quot;` /
   `&apos;`, and splits a few tokens differently), so it would shift any
   model's score by up to about 0.4 BLEU.
"""

import functools
import json
import os
import time

import sacrebleu
import tensorflow as tf

from tfattn.utils.files import write_text_atomically
from tfattn.decoding.translate import translate_texts
from tfattn.utils.validation import check_choice
from tfattn.utils.validation import invalid_argument

__all__ = [
    "MOSES_LANGUAGES",
    "bleu",
    "multi30k_tokenize",
    "evaluate",
    "greedy_bleu",
]

_CONTEXT = "evaluation"
MOSES_LANGUAGES = ("de", "en")


def bleu(hypotheses, references, tokenize="13a", lowercase=False):
    """Corpus BLEU with sacreBLEU (the same as `sacrebleu.corpus_bleu`).

    Args:
        hypotheses: list of str.
        references: list of str (one reference per hypothesis), or a list of
            reference streams (lists of str, each as long as `hypotheses`).
        tokenize: str. A sacreBLEU tokeniser name; `'none'` for text that
            is already tokenised. Defaults to `'13a'` (sacreBLEU's default).
        lowercase: bool. Case-insensitive BLEU. Defaults to `False`.

    Returns:
        dict with `score` (float, 0-100), `signature` (sacreBLEU's
        reproducibility string, e.g. `nrefs:1|case:mixed|eff:no|tok:13a|
        smooth:exp|version:2.6.0`), `precisions` (four floats), `bp`,
        `hyp_len` and `ref_len` (tokens after tokenisation).
    """
    hypotheses = _string_list("hypotheses", hypotheses)
    references = list(references)
    if references and all(isinstance(r, str) for r in references):
        streams = [references]
    else:
        streams = [_string_list("references", r) for r in references]
    if not streams:
        raise invalid_argument("references", "at least one reference stream",
                               references, _CONTEXT)
    for stream in streams:
        if len(stream) != len(hypotheses):
            raise invalid_argument(
                "references",
                f"{len(hypotheses)} references per stream (one per "
                "hypothesis)",
                f"<stream of {len(stream)} lines>",
                _CONTEXT,
            )
    if not isinstance(lowercase, bool):
        raise invalid_argument("lowercase", "a Python bool", lowercase,
                               _CONTEXT)
    metric = sacrebleu.metrics.BLEU(tokenize=tokenize, lowercase=lowercase,
                                    force=tokenize == "none")
    score = metric.corpus_score(hypotheses, streams)
    return {
        "score": float(score.score),
        "signature": str(metric.get_signature()),
        "precisions": [float(p) for p in score.precisions],
        "bp": float(score.bp),
        "hyp_len": int(score.sys_len),
        "ref_len": int(score.ref_len),
    }


def _string_list(name, values):
    if isinstance(values, (str, bytes)):
        raise invalid_argument(name, "a list of strings (not one string)",
                               values, _CONTEXT)
    values = list(values)
    for i, value in enumerate(values):
        if not isinstance(value, str):
            raise invalid_argument(
                name, f"a list of str (item {i} is {type(value).__name__})",
                value, _CONTEXT,
            )
    return values


@functools.lru_cache(maxsize=None)
def _moses(language):
    from sacremoses import MosesPunctNormalizer
    from sacremoses import MosesTokenizer

    return (MosesPunctNormalizer(language, perl_parity=True),
            MosesTokenizer(language))


def multi30k_tokenize(text, language):
    """Lowercase, normalise punctuation and Moses-tokenise, as Multi30k's
    `tok/*.lc.norm.tok.*` files were made (`lowercase.perl |
    normalize-punctuation.perl -l L | tokenizer.perl -l L`).

    Args:
        text: str. One detokenised sentence (e.g. a model's output).
        language: `'de'` or `'en'`.

    Returns:
        str, comparable token for token with the tok/ references (like them,
        it may end in a space where the Perl tokenizer left one).
    """
    check_choice("language", language, MOSES_LANGUAGES, _CONTEXT)
    normalizer, tokenizer = _moses(language)
    # The Perl scripts read lines with their newline, and a few rules see it.
    normalized = normalizer.normalize(text.lower() + "\n")
    return tokenizer.tokenize(normalized, escape=True, return_str=True)


def _checked_inputs(split_name, pairs, tokenized_references,
                    tokenized_hypothesis_fn, target_language):
    """`evaluate`'s inputs checked (a ValueError naming the first bad one);
    returns (pairs, tokenized_references) as lists."""
    if not isinstance(split_name, str) or not split_name or any(
        c in split_name for c in "/\\"
    ):
        raise invalid_argument("split_name",
                               "a non-empty file-name-safe str", split_name,
                               _CONTEXT)
    pairs = list(pairs)
    for i, pair in enumerate(pairs):
        if (not isinstance(pair, (tuple, list)) or len(pair) != 2
                or not all(isinstance(s, str) for s in pair)):
            raise invalid_argument(
                "pairs", f"a list of (source, reference) str pairs (item {i} "
                "is not)", pair, _CONTEXT,
            )
    if not pairs:
        raise invalid_argument("pairs", "at least one pair", pairs, _CONTEXT)
    if tokenized_references is not None:
        tokenized_references = _string_list("tokenized_references",
                                            tokenized_references)
        if len(tokenized_references) != len(pairs):
            raise invalid_argument(
                "tokenized_references",
                f"one line per pair ({len(pairs)})",
                f"<{len(tokenized_references)} lines>",
                _CONTEXT,
            )
        if tokenized_hypothesis_fn is None:
            if target_language is None:
                raise invalid_argument(
                    "target_language",
                    "'de' or 'en' (the language of `tokenized_references`, "
                    "for the default Moses-style tokenisation), or pass "
                    "`tokenized_hypothesis_fn`",
                    target_language,
                    _CONTEXT,
                )
            check_choice("target_language", target_language,
                         MOSES_LANGUAGES, _CONTEXT)
        elif not callable(tokenized_hypothesis_fn):
            raise invalid_argument("tokenized_hypothesis_fn",
                                   "a callable str -> str",
                                   tokenized_hypothesis_fn, _CONTEXT)
    return pairs, tokenized_references


def evaluate(model, tokenizer, pairs, model_dir, split_name, beam_size=4,
             alpha=0.6, tokenized_references=None,
             tokenized_hypothesis_fn=None, target_language=None,
             batch_size=64, extra_length=50, max_source_length=None):
    """Translates an evaluation split, scores it, writes the results.

    Writes into `model_dir`, each file through a temporary name and a rename:

    - `translations_{split_name}.txt`: one detokenised translation per line,
      in the order of `pairs`;
    - `metrics_{split_name}.json`: the returned dict.

    Args:
        model: a built `tfattn.Transformer`.
        tokenizer: its `tfattn.data.SubwordTokenizer`.
        pairs: list of (source, reference) str pairs.
        model_dir: str or path-like. Created if missing.
        split_name: str. Names the files, e.g. `'test'`.
        beam_size: int. Defaults to `4`.
        alpha: float. Defaults to `0.6`.
        tokenized_references: list of str or None. Lowercased, tokenised
            references aligned with `pairs` (e.g. from
            `tfattn.data.load_tokenized_references`); adds the tokenised
            lowercased BLEU that published Multi30k numbers use.
        tokenized_hypothesis_fn: callable str -> str or None. Turns a
            translation into the tokenisation of `tokenized_references`.
            Defaults to `multi30k_tokenize(text, target_language)`.
        target_language: `'de'`, `'en'` or None. Needed by the default
            `tokenized_hypothesis_fn`.
        batch_size, extra_length, max_source_length: as in
            `tfattn.decoding.translate.translate_texts`.

    Returns:
        dict: `split`, `num_sentences`, `beam_size`, `alpha`, `bleu`
        (detokenised sacreBLEU, 13a; cased unless the tokenizer folds case:
        `bleu_lowercase` says which) and `bleu_signature`, `hyp_len`,
        `ref_len`, `seconds` (translation time), the two file paths, and with
        tokenised references also `bleu_tokenized_lowercased`, its signature,
        lengths and `tokenized_hypotheses` (how hypotheses were tokenised).
    """
    pairs, tokenized_references = _checked_inputs(
        split_name, pairs, tokenized_references, tokenized_hypothesis_fn,
        target_language)
    sources = [s for s, _ in pairs]
    references = [r for _, r in pairs]
    start = time.perf_counter()
    hypotheses = translate_texts(
        model, tokenizer, sources, beam_size=beam_size, alpha=alpha,
        batch_size=batch_size, extra_length=extra_length,
        max_source_length=max_source_length,
    )
    seconds = time.perf_counter() - start
    # One translation per line, whatever the pieces decode to.
    hypotheses = [" ".join(h.splitlines()) for h in hypotheses]

    # A case-folding vocabulary writes lowercase: its BLEU is caseless.
    lowercase = _folds_case(tokenizer)
    detokenized = bleu(hypotheses, references, tokenize="13a",
                       lowercase=lowercase)
    model_dir = str(model_dir)
    translations_path = os.path.join(model_dir,
                                     f"translations_{split_name}.txt")
    metrics_path = os.path.join(model_dir, f"metrics_{split_name}.json")
    metrics = {
        "split": split_name,
        "num_sentences": len(pairs),
        "beam_size": int(beam_size),
        "alpha": float(alpha),
        "bleu": detokenized["score"],
        "bleu_signature": detokenized["signature"],
        "bleu_lowercase": lowercase,
        "hyp_len": detokenized["hyp_len"],
        "ref_len": detokenized["ref_len"],
        "seconds": seconds,
        "translations_file": translations_path,
        "metrics_file": metrics_path,
    }
    if tokenized_references is not None:
        if tokenized_hypothesis_fn is None:
            method = f"multi30k_tokenize(language='{target_language}')"
            tokenized = [multi30k_tokenize(h, target_language)
                         for h in hypotheses]
        else:
            method = getattr(tokenized_hypothesis_fn, "__name__",
                             repr(tokenized_hypothesis_fn))
            tokenized = [tokenized_hypothesis_fn(h) for h in hypotheses]
        tok = bleu(tokenized, tokenized_references, tokenize="none",
                   lowercase=True)
        metrics.update(
            bleu_tokenized_lowercased=tok["score"],
            bleu_tokenized_lowercased_signature=tok["signature"],
            tokenized_hyp_len=tok["hyp_len"],
            tokenized_ref_len=tok["ref_len"],
            tokenized_hypotheses=method,
        )
    tf.io.gfile.makedirs(model_dir)
    write_text_atomically(translations_path,
                       "".join(h + "\n" for h in hypotheses))
    write_text_atomically(metrics_path,
                       json.dumps(metrics, indent=2, sort_keys=True) + "\n")
    return metrics


def greedy_bleu(model, tokenizer, pairs, batch_size=64, extra_length=50):
    """Cased sacreBLEU (13a) of greedy translations of `pairs`: the cheap
    score that training logs every `eval_every_steps` (a fixed subset of the
    validation split, so that the curve is comparable across steps; not the
    final beam-search score). Case-insensitive when the tokenizer folds case
    (its translations are lowercase).

    Args:
        model: a built `tfattn.Transformer`.
        tokenizer: its `SubwordTokenizer`.
        pairs: list of (source, reference) str pairs, at least one.
        batch_size, extra_length: as in `translate_texts`.

    Returns:
        float, the BLEU score.

    Raises:
        ValueError: `pairs` is empty.
    """
    if not pairs:
        raise invalid_argument("pairs", "at least one pair", pairs, _CONTEXT)
    hypotheses = translate_texts(
        model, tokenizer, [s for s, _ in pairs], beam_size=1,
        batch_size=batch_size, extra_length=extra_length)
    return bleu([" ".join(h.splitlines()) for h in hypotheses],
                [r for _, r in pairs],
                lowercase=_folds_case(tokenizer))["score"]


def _folds_case(tokenizer):
    return bool(getattr(tokenizer, "folds_case", False))
