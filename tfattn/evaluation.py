"""Batched translation, sacreBLEU scores and evaluation of a split.

- `translate_texts`: source strings -> translated strings with
  `Transformer.generate` (beam search or greedy), in fixed-size batches.
- `bleu`: corpus BLEU through sacreBLEU, with its signature.
- `evaluate`: translates an evaluation split, scores it and writes the
  translations and a metrics JSON into the model directory.

Two BLEU scores, and why both:

1. **Detokenised, cased sacreBLEU** (`tokenize='13a'`) of the model's plain
   output against the plain references. This is the score to report and to
   compare between runs: the tokenisation is sacreBLEU's own, recorded in
   its signature.
2. **Tokenised, lowercased BLEU**, the number that published Multi30k results
   quote (e.g. the 41.02 en->de of the data README). Those papers score
   Moses-tokenised, lowercased text (multi30k/dataset's `tok/*.lc.norm.tok.*`
   files, made by `lowercase.perl | normalize-punctuation.perl -l L |
   tokenizer.perl -l L`) with `multi-bleu.perl`. To compare with them, the
   hypotheses must be tokenised exactly like those references. sacremoses is
   not a dependency, so this module carries a small port of the two Moses
   scripts (`moses_normalize_punctuation`, `moses_tokenize`; default
   options, no aggressive hyphen splitting, XML escaping on) and
   `multi30k_tokenize` chains them as the tok/ files were made. Checked on
   the corpus itself: applied to the raw references it reproduces every
   line of the German and English tok/ files of the test and validation
   splits, and 57,998 of the 58,000 training lines (two English lines keep
   quirks of the older tokenizer.perl the files were made with). The
   hypotheses and the tok/ references are then scored with
   `tokenize='none'`, which is what `multi-bleu.perl` computes.

   Caveat: the obvious shortcut, sacreBLEU's `13a` tokeniser on lowercased
   plain text scored against the tok/ references, is *not* the same: on the
   German test split it scores the references' own plain text at 99.61
   instead of 100 (it does not escape quotes and apostrophes as `&quot;` /
   `&apos;`, and splits a few tokens differently), so it would shift any
   model's score by up to about 0.4 BLEU. Tokenised BLEU also remains
   sensitive to the reference tokenisation by construction; it is for
   comparing with published numbers, not a replacement for (1).
"""

import json
import os
import time
import uuid
import weakref

import numpy as np
import regex
import sacrebleu
import tensorflow as tf

from tfattn.data.tokenizer import EOS_ID
from tfattn.data.tokenizer import PAD_ID
from tfattn.data.tokenizer import SubwordTokenizer
from tfattn.validation import check_choice
from tfattn.validation import check_non_negative_float
from tfattn.validation import check_positive_int
from tfattn.validation import invalid_argument

_CONTEXT = "evaluation"
MOSES_LANGUAGES = ("de", "en")


# ----------------------------------------------------------------------
# Decoding lengths and source encoding, shared with `tfattn.export` so that
# the exported graph and `translate_texts` compute the same thing.


def decode_lengths(model, extra_length=50, max_source_length=None):
    """The source cap S and the static output buffer length L of a model.

    Args:
        model: a `tfattn.Transformer`.
        extra_length: int >= 0. An output may be this much longer than its
            source (the paper's input length + 50). Defaults to `50`.
        max_source_length: int or None. Longest source, in pieces with EOS;
            longer sources are truncated (their last piece replaced by EOS).
            `None` takes `model.max_length - extra_length`, or
            `model.max_length` when that is not positive. At most
            `model.max_length` (the positional table).

    Returns:
        `(max_source_length, max_length)`: Python ints, with
        `max_length = min(max_source_length + extra_length,
        model.max_length)`, the buffer `Transformer.generate` decodes into.
    """
    if isinstance(extra_length, bool) or not isinstance(
        extra_length, (int, np.integer)
    ) or extra_length < 0:
        raise invalid_argument(
            "extra_length", "a non-negative integer", extra_length, _CONTEXT
        )
    table = int(model.max_length)
    if max_source_length is None:
        max_source_length = table - extra_length
        if max_source_length < 1:
            max_source_length = table
    else:
        max_source_length = check_positive_int(
            "max_source_length", max_source_length, _CONTEXT
        )
        if max_source_length > table:
            raise invalid_argument(
                "max_source_length",
                f"at most the model's max_length={table} (its positional "
                "table)",
                max_source_length,
                _CONTEXT,
            )
    return int(max_source_length), int(min(max_source_length + extra_length,
                                            table))


def encode_for_translation(sp_tokenizer, sentences, max_source_length,
                           pad_to_length=False):
    """Strings -> int32 source ids `[B, S]`: pieces, EOS, 0-padding.

    A source longer than `max_source_length` (EOS included) keeps its first
    `max_source_length - 1` pieces, then EOS. Works eagerly and in graphs.

    Args:
        sp_tokenizer: anything whose `tokenize([B] strings)` returns a ragged
            `[B, None]` int tensor (a `SubwordTokenizer` or a
            `tensorflow_text.SentencepieceTokenizer`).
        sentences: `[B]` `tf.string` tensor.
        max_source_length: Python int.
        pad_to_length: bool. Pad to `max_source_length` columns (a static
            shape) instead of the longest row. Defaults to `False`.

    Returns:
        int32 `[B, S]` tensor.
    """
    ids = sp_tokenizer.tokenize(sentences)
    ids = tf.cast(ids, tf.int32)[:, : max_source_length - 1]
    eos = tf.fill([ids.nrows(), 1], tf.constant(EOS_ID, tf.int32))
    ids = tf.concat([ids, eos], axis=1)
    if pad_to_length:
        return ids.to_tensor(default_value=PAD_ID,
                             shape=[None, max_source_length])
    return ids.to_tensor(default_value=PAD_ID)


def model_proto_of(tokenizer):
    """The serialized SentencePiece model of a tokenizer (or the bytes)."""
    if isinstance(tokenizer, bytes):
        return tokenizer
    proto = getattr(tokenizer, "model_proto", None)
    if not isinstance(proto, bytes) or not proto:
        raise invalid_argument(
            "tokenizer",
            "a `tfattn.data.SubwordTokenizer` (or the bytes of its "
            "SentencePiece model)",
            type(tokenizer).__name__,
            _CONTEXT,
        )
    return proto


# ----------------------------------------------------------------------
# Translation.

# model -> {(beam_size, alpha, extra_length, max_length, jit): tf.function};
# weak, so a cached function never keeps a model alive.
_GENERATE_FNS = weakref.WeakKeyDictionary()


def _generate_fn(model, beam_size, alpha, extra_length, max_length,
                 jit_compile):
    key = (beam_size, alpha, extra_length, max_length, jit_compile)
    per_model = _GENERATE_FNS.setdefault(model, {})
    if key not in per_model:
        # The model is held weakly by the function too.
        model_ref = weakref.ref(model)

        def generate(source):
            return model_ref().generate(
                source, beam_size=beam_size, alpha=alpha,
                max_length=max_length, extra_length=extra_length,
            )

        # Without XLA the batch and source length are left free (one trace
        # for every batch shape); XLA compiles per shape, so its callers pad
        # to one shape.
        signature = None if jit_compile else [
            tf.TensorSpec([None, None], tf.int32, name="source")
        ]
        per_model[key] = tf.function(
            generate, input_signature=signature, jit_compile=jit_compile,
            reduce_retracing=False,
        )
    return per_model[key]


def translate_texts(model, tokenizer, texts, beam_size=4, alpha=0.6,
                    batch_size=64, extra_length=50, max_source_length=None,
                    jit_compile=False):
    """Translates source strings with `model.generate`, batch by batch.

    Every batch has the same number of rows: the last one is padded with
    empty strings (whose outputs are dropped), so it reuses the traced (or,
    with `jit_compile`, compiled) function of the others. The graph is cached
    per model and decoding setting, so later calls do not retrace.

    With the same arguments, the result equals the `translations` output of
    a SavedModel from `tfattn.export.export_translator` for the same batch:
    both truncate and encode the sources with `encode_for_translation` and
    decode into the same buffer length (`decode_lengths`).

    Args:
        model: a built `tfattn.Transformer`.
        tokenizer: the `tfattn.data.SubwordTokenizer` of the model (or the
            bytes of its SentencePiece model).
        texts: list of str (or bytes). Source sentences.
        beam_size: int. 1 = greedy search. Defaults to `4`.
        alpha: float. Length penalty of beam search. Defaults to `0.6`.
        batch_size: int. Rows per batch (at most `len(texts)` are used).
            Defaults to `64`.
        extra_length: int. Outputs stop at their source length plus this.
            Defaults to `50`.
        max_source_length: int or None. Source cap (see `decode_lengths`).
        jit_compile: bool. Run the search under XLA, with sources padded to
            `max_source_length` so that one compilation serves every batch.
            Faster for long runs on some hardware; results can differ from
            the non-XLA ones in the last float bits. Defaults to `False`.

    Returns:
        list of str, one translation per input, in order.
    """
    beam_size = check_positive_int("beam_size", beam_size, _CONTEXT)
    alpha = check_non_negative_float("alpha", alpha, _CONTEXT)
    batch_size = check_positive_int("batch_size", batch_size, _CONTEXT)
    if not isinstance(jit_compile, bool):
        raise invalid_argument("jit_compile", "a Python bool", jit_compile,
                               _CONTEXT)
    if isinstance(texts, (str, bytes)):
        raise invalid_argument(
            "texts", "a list of strings (not one string)", texts, _CONTEXT
        )
    texts = list(texts)
    for i, text in enumerate(texts):
        if not isinstance(text, (str, bytes)):
            raise invalid_argument(
                "texts",
                f"a list of str or bytes (item {i} is {type(text).__name__})",
                text,
                _CONTEXT,
            )
    if not texts:
        return []
    max_source_length, max_length = decode_lengths(
        model, extra_length, max_source_length
    )
    # A fresh in-graph tokenizer: tensorflow-text's SentencePiece resource
    # dies with the eager kernel cache, which `tf.random.set_seed` (and
    # `keras.utils.set_random_seed`) clears, so a tokenizer made before a
    # reseed fails with "Resource ... SentencepieceOp ... does not exist".
    tokenizer = SubwordTokenizer(model_proto_of(tokenizer))
    generate = _generate_fn(model, beam_size, alpha, int(extra_length),
                            max_length, jit_compile)
    rows = min(batch_size, len(texts))
    outputs = []
    for start in range(0, len(texts), rows):
        batch = texts[start:start + rows]
        real = len(batch)
        batch = batch + [""] * (rows - real)
        source = encode_for_translation(
            tokenizer, tf.constant(batch, tf.string), max_source_length,
            pad_to_length=jit_compile,
        )
        ids, _ = generate(source)
        decoded = tokenizer.detokenize(ids).numpy()[:real]
        outputs.extend(t.decode("utf-8") for t in decoded)
    return outputs


# ----------------------------------------------------------------------
# BLEU.


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


# ----------------------------------------------------------------------
# Moses-style tokenisation of hypotheses, as the Multi30k tok/ files were
# made (lowercase.perl | normalize-punctuation.perl | tokenizer.perl).

# Words that a final period does not split from (Moses'
# nonbreaking_prefix.de). Only the lowercase entries matter, since the text
# is lowercased first: single letters, ordinals 1-99, common abbreviations.
# The English file's entries are all capitalised (or NUMERIC_ONLY).
_NONBREAKING = {
    "de": frozenset(
        list("abcdefghijklmnopqrstuvwxyz")
        + [str(n) for n in range(1, 100)]
        + ["ca", "bzw", "usw", "vgl", "evtl", "ggf", "inkl"]
    ),
    "en": frozenset(),
}
_NUMERIC_ONLY = {"de": frozenset(), "en": frozenset(["pp"])}
_NBSP = "\u00a0"


def moses_normalize_punctuation(text, language):
    """A port of Moses' `normalize-punctuation.perl -l language`.

    Args:
        text: str. One line.
        language: `'de'` or `'en'`.

    Returns:
        str.
    """
    check_choice("language", language, MOSES_LANGUAGES, _CONTEXT)
    # Perl sees the line with its newline; one rule below depends on it.
    t = (text + "\n").replace("\r", "")
    t = regex.sub(r"\(", " (", t)
    t = regex.sub(r"\)", ") ", t)
    t = regex.sub(r" +", " ", t)
    t = regex.sub(r"\) ([\.\!\:\?\;\,])", r")\1", t)
    t = t.replace("( ", "(").replace(" )", ")")
    t = regex.sub(r"(\d) \%", r"\1%", t)
    t = t.replace(" :", ":").replace(" ;", ";")
    t = t.replace("`", "'").replace("''", ' " ')
    t = t.replace("„", '"').replace("“", '"').replace("”", '"')
    t = t.replace("–", "-").replace("—", " - ")
    t = regex.sub(r" +", " ", t)
    t = t.replace("´", "'")
    t = regex.sub(r"([a-zA-Z])‘([a-zA-Z])", r"\1'\2", t)
    t = regex.sub(r"([a-zA-Z])’([a-zA-Z])", r"\1'\2", t)
    t = t.replace("‘", '"').replace("‚", '"').replace("’", '"')
    t = t.replace("''", '"').replace("´´", '"').replace("…", "...")
    t = t.replace(" « ", ' "').replace("« ", '"').replace("«", '"')
    t = t.replace(" » ", '" ').replace(" »", '"').replace("»", '"')
    # Pseudo-spaces (no-break spaces) before punctuation and units.
    t = t.replace(_NBSP + "%", "%").replace("nº" + _NBSP, "nº ")
    t = t.replace(_NBSP + ":", ":").replace(_NBSP + "ºC", " ºC")
    t = t.replace(_NBSP + "cm", " cm").replace(_NBSP + "?", "?")
    t = t.replace(_NBSP + "!", "!").replace(_NBSP + ";", ";")
    t = t.replace("," + _NBSP, ", ")
    t = regex.sub(r" +", " ", t)
    if language == "en":
        t = regex.sub(r'"([,\.]+)', r'\1"', t)
    else:
        t = t.replace(',"', '",')
        t = regex.sub(r'(\.+)"(\s*[^<])', r'"\1\2', t)
    separator = "," if language == "de" else "."
    t = regex.sub(r"(\d)" + _NBSP + r"(\d)", r"\1" + separator + r"\2", t)
    return t[:-1] if t.endswith("\n") else t


def moses_tokenize(text, language):
    """A port of Moses' `tokenizer.perl -l language` (default options).

    No aggressive hyphen splitting; `& | < > ' " [ ]` are escaped as XML
    entities (`&apos;`, `&quot;`, ...), as in the Multi30k tok/ files.

    Args:
        text: str. One line.
        language: `'de'` or `'en'`.

    Returns:
        str, tokens separated by single spaces.
    """
    check_choice("language", language, MOSES_LANGUAGES, _CONTEXT)
    t = " " + text.rstrip("\n") + " "
    t = regex.sub(r"\s+", " ", t)
    t = regex.sub(r"[\x00-\x1f]", "", t)
    t = regex.sub(r"([^\p{IsAlnum}\s\.\'\`\,\-])", r" \1 ", t)
    t = regex.sub(r"\.([\.]+)", r" DOTMULTI\1", t)
    while "DOTMULTI." in t:
        t = regex.sub(r"DOTMULTI\.([^\.])", r"DOTDOTMULTI \1", t)
        t = t.replace("DOTMULTI.", "DOTDOTMULTI")
    t = regex.sub(r"([^\p{N}])[,]([^\p{N}])", r"\1 , \2", t)
    t = regex.sub(r"([\p{N}])[,]([^\p{N}])", r"\1 , \2", t)
    t = regex.sub(r"([^\p{N}])[,]([\p{N}])", r"\1 , \2", t)
    t = t.replace("`", "'").replace("''", ' " ')
    if language == "en":
        t = regex.sub(r"([^\p{IsAlpha}])[']([^\p{IsAlpha}])", r"\1 ' \2", t)
        t = regex.sub(r"([^\p{IsAlpha}\p{N}])[']([\p{IsAlpha}])",
                      r"\1 ' \2", t)
        t = regex.sub(r"([\p{IsAlpha}])[']([^\p{IsAlpha}])", r"\1 ' \2", t)
        t = regex.sub(r"([\p{IsAlpha}])[']([\p{IsAlpha}])", r"\1 '\2", t)
        t = regex.sub(r"([\p{N}])[']([s])", r"\1 '\2", t)
    else:
        t = t.replace("'", " ' ")
    words = t.split(" ")
    prefixes = _NONBREAKING[language]
    numeric_only = _NUMERIC_ONLY[language]
    for i, word in enumerate(words):
        match = regex.match(r"^(\S+)\.$", word)
        if not match:
            continue
        pre = match.group(1)
        following = words[i + 1] if i < len(words) - 1 else None
        if (
            ("." in pre and regex.search(r"\p{IsAlpha}", pre))
            or pre in prefixes
            or (following is not None
                and regex.match(r"^[\p{IsLower}]", following))
        ):
            continue
        if (pre in numeric_only and following is not None
                and regex.match(r"^[0-9]+", following)):
            continue
        words[i] = pre + " ."
    t = regex.sub(r" +", " ", " ".join(words)).strip(" ")
    t = regex.sub(r"\.\' ?$", " . ' ", t)
    while "DOTDOTMULTI" in t:
        t = t.replace("DOTDOTMULTI", "DOTMULTI.")
    t = t.replace("DOTMULTI", ".")
    for char, entity in (("&", "&amp;"), ("|", "&#124;"), ("<", "&lt;"),
                         (">", "&gt;"), ("'", "&apos;"), ('"', "&quot;"),
                         ("[", "&#91;"), ("]", "&#93;")):
        t = t.replace(char, entity)
    return t


def multi30k_tokenize(text, language):
    """Lowercase, normalise punctuation and Moses-tokenise, as Multi30k's
    `tok/*.lc.norm.tok.*` files were made.

    Args:
        text: str. One detokenised sentence (e.g. a model's output).
        language: `'de'` or `'en'`.

    Returns:
        str, comparable token for token with the tok/ references.
    """
    return moses_tokenize(
        moses_normalize_punctuation(text.lower(), language), language
    )


# ----------------------------------------------------------------------
# Evaluation of a split.


def _atomic_write_text(path, text):
    tmp = f"{path}.tmp-{uuid.uuid4().hex}"
    try:
        with tf.io.gfile.GFile(tmp, "w") as f:
            f.write(text)
        tf.io.gfile.rename(tmp, path, overwrite=True)
    finally:
        if tf.io.gfile.exists(tmp):
            tf.io.gfile.remove(tmp)


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
            `translate_texts`.

    Returns:
        dict: `split`, `num_sentences`, `beam_size`, `alpha`, `bleu` (cased
        detokenised sacreBLEU, 13a) and `bleu_signature`, `hyp_len`,
        `ref_len`, `seconds` (translation time), the two file paths, and with
        tokenised references also `bleu_tokenized_lowercased`, its signature,
        lengths and `tokenized_hypotheses` (how hypotheses were tokenised).
    """
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

    cased = bleu(hypotheses, references, tokenize="13a")
    model_dir = str(model_dir)
    translations_path = os.path.join(model_dir,
                                     f"translations_{split_name}.txt")
    metrics_path = os.path.join(model_dir, f"metrics_{split_name}.json")
    metrics = {
        "split": split_name,
        "num_sentences": len(pairs),
        "beam_size": int(beam_size),
        "alpha": float(alpha),
        "bleu": cased["score"],
        "bleu_signature": cased["signature"],
        "hyp_len": cased["hyp_len"],
        "ref_len": cased["ref_len"],
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
    _atomic_write_text(translations_path,
                       "".join(h + "\n" for h in hypotheses))
    _atomic_write_text(metrics_path,
                       json.dumps(metrics, indent=2, sort_keys=True) + "\n")
    return metrics
