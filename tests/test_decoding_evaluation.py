"""Tests for batched translation, BLEU and split evaluation."""

import gzip
import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
import sacrebleu
import tensorflow as tf
from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

import tfattn
from tests import bounds
from tfattn.decoding import evaluation
from tfattn.decoding import samplers
from tfattn.decoding import translate
from tfattn.data import load_tokenized_references
from tfattn.data import numbers_splits
from tfattn.data import train_tokenizer

MULTI30K = Path(__file__).resolve().parents[1].parent / "shared/data/multi30k"
needs_corpus = pytest.mark.skipif(
    not (MULTI30K / "tok" / "test_2016_flickr.lc.norm.tok.de.gz").exists(),
    reason=f"Multi30k files not found under {MULTI30K}",
)
EXTRA = 5
# sacreBLEU's score from its counts: per order 100·c/t and its log (3
# operations), the sum over the 4 orders (4), then the division by 4, the
# exp and the brevity penalty's product (3).
BLEU_TERMS = 10


def assert_same_bleu(actual, desired):
    """Two float64 computations of one BLEU score agree to `bounds`'
    bound: BLEU_TERMS at the magnitude of the summed log-precisions (at most
    log 100), which the exp turns into a relative error of the score."""
    bounds.assert_close(actual, desired, terms=BLEU_TERMS,
                        scale=math.log(100.0) * abs(desired), dtype="float64")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    splits = numbers_splits(max_value=1200, num_validation=20, num_test=20)
    pairs = splits["train"][:300]
    tokenizer = train_tokenizer(
        [s for pair in pairs for s in pair],
        tmp_path_factory.mktemp("spm"),
        vocab_size=40,
        split_digits=True,
    )
    model = tfattn.Transformer(
        tokenizer.vocab_size,
        num_layers=1,
        num_units=16,
        num_heads=2,
        ffn_units=32,
        dropout_rate=0.0,
        max_length=32,
        seed=3,
    )
    model((np.ones((1, 4), "int32"), np.ones((1, 3), "int32")))
    return model, tokenizer, splits["test"][:7]


# ----------------------------------------------------------------------
# BLEU.


def test_bleu_identical_is_100():
    refs = ["A dog runs in the park.", "Two men play chess!"]
    result = evaluation.bleu(refs, refs)
    assert_same_bleu(result["score"], 100.0)
    assert result["signature"] == (
        "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:"
        f"{sacrebleu.__version__}"
    )


def test_bleu_hand_computed():
    # Same length (BP = 1); n-gram matches 5/6, 3/5, 2/4, 1/3.
    result = evaluation.bleu(
        ["the cat sat on the mat"], ["the cat sat on a mat"]
    )
    want = 100 * math.exp(
        sum(math.log(p) for p in (5 / 6, 3 / 5, 2 / 4, 1 / 3)) / 4
    )
    assert_same_bleu(result["score"], want)
    assert result["bp"] == 1.0
    assert (result["hyp_len"], result["ref_len"]) == (6, 6)


def test_bleu_matches_sacrebleu_cli_value():
    # `sacrebleu ref.txt -i hyp.txt -m bleu -w 4` (sacrebleu 2.6.0) prints
    # 45.2462 (87.0/65.0/41.2/21.4, BP = 0.957, hyp_len 23, ref_len 24).
    hyps = [
        "The cat sat on the mat.",
        "A dog runs in the park!",
        "There is a house, near the river.",
    ]
    refs = [
        "The cat sat on a mat.",
        "A dog is running in the park!",
        "There is a small house near the river.",
    ]
    result = evaluation.bleu(hyps, refs)
    bounds.assert_printed(result["score"], "45.2462")
    assert (result["hyp_len"], result["ref_len"]) == (23, 24)
    # Multiple reference streams and lowercasing are passed through.
    multi = evaluation.bleu(hyps, [refs, hyps], lowercase=True)
    assert_same_bleu(multi["score"], 100.0)
    assert "nrefs:2|case:lc" in multi["signature"]


def test_bleu_rejects_misaligned_references():
    with pytest.raises(ValueError, match="argument `references`"):
        evaluation.bleu(["a", "b"], ["a"])
    with pytest.raises(ValueError, match="argument `hypotheses`"):
        evaluation.bleu("a b", ["a b"])


# ----------------------------------------------------------------------
# Moses-style tokenisation.


@pytest.mark.parametrize(
    "text, language, want",
    [
        (
            "Ein Mann, der „Hallo“ sagt.",
            "de",
            "ein mann , der &quot; hallo &quot; sagt .",
        ),
        (
            "Ein Mädchen springt... (hoch) mit der Nummer 10.",
            "de",
            "ein mädchen springt ... ( hoch ) mit der nummer 10.",
        ),
        (
            "Zwei Hunde spielen im Schnee, z. B. im Park.",
            "de",
            "zwei hunde spielen im schnee , z. b. im park .",
        ),
        (
            "It's a dog's life & more [really]",
            "en",
            "it &apos;s a dog &apos;s life &amp; more &#91; really &#93;",
        ),
        ("A boy, age 5, runs.", "en", "a boy , age 5 , runs ."),
    ],
)
def test_multi30k_tokenize(text, language, want):
    assert evaluation.multi30k_tokenize(text, language) == want


@needs_corpus
@pytest.mark.parametrize(
    "stem",
    [pytest.param("train", marks=pytest.mark.slow), "val", "test_2016_flickr"],
)
def test_multi30k_tokenize_reproduces_tok_files(stem):
    """Raw lines -> multi30k_tokenize == the published tok/ lines, byte for
    byte (trailing spaces included): 62,028 lines over the three splits."""
    for language in ("de", "en"):
        lines = {}
        for kind, name in (
            ("raw", f"{stem}.{language}.gz"),
            ("tok", f"{stem}.lc.norm.tok.{language}.gz"),
        ):
            with gzip.open(MULTI30K / kind / name, "rt", encoding="utf-8") as f:
                lines[kind] = f.read().split("\n")[:-1]
        assert len(lines["raw"]) == len(lines["tok"]) > 0
        ours = [evaluation.multi30k_tokenize(r, language) for r in lines["raw"]]
        assert ours == lines["tok"]


@needs_corpus
def test_multi30k_tokenized_reference_length():
    tok = load_tokenized_references("test", "de", MULTI30K / "tok")
    assert len(tok) == 1000
    assert sum(len(line.split()) for line in tok) == 12103  # data README
    result = evaluation.bleu(tok, tok, tokenize="none")
    assert result["ref_len"] == 12103
    assert_same_bleu(result["score"], 100.0)
    assert "tok:none" in result["signature"]
    # The shortcut the evaluation docstring warns about: sacreBLEU's 13a on
    # lowercased plain text is not the tok/ tokenisation (99.61, not 100).
    with gzip.open(
        MULTI30K / "raw" / "test_2016_flickr.de.gz", "rt", encoding="utf-8"
    ) as f:
        raw = f.read().splitlines()
    tokenizer_13a = Tokenizer13a()
    shortcut = evaluation.bleu(
        [tokenizer_13a(r.lower()) for r in raw], tok, tokenize="none"
    )
    bounds.assert_printed(shortcut["score"], "99.61")


# ----------------------------------------------------------------------
# Translation and evaluation.


class _CaseFolding:
    """A tokenizer that says it folds case, delegating everything else."""

    folds_case = True

    def __init__(self, tokenizer):
        self._tokenizer = tokenizer

    def __getattr__(self, name):
        return getattr(self._tokenizer, name)


def test_bleu_is_caseless_for_a_case_folding_tokenizer(
    tiny, tmp_path, monkeypatch
):
    model, tokenizer, pairs = tiny
    # Lowercase translations, as a case-folding vocabulary writes them,
    # against cased references: a caseless score is 100, a cased one less.
    written = [
        f"a dog number {i} runs across the green park ." for i in range(7)
    ]
    monkeypatch.setattr(
        evaluation, "translate_texts", lambda *args, **kwargs: list(written)
    )
    cased_pairs = [
        (s, "A Dog " + t[len("a dog ") :]) for (s, _), t in zip(pairs, written)
    ]
    assert not tokenizer.folds_case
    cased = evaluation.greedy_bleu(model, tokenizer, cased_pairs)
    assert cased < 90.0
    folding = _CaseFolding(tokenizer)
    assert_same_bleu(evaluation.greedy_bleu(model, folding, cased_pairs),
                     100.0)
    metrics = evaluation.evaluate(model, folding, cased_pairs, tmp_path, "val")
    assert metrics["bleu_lowercase"] is True
    assert "case:lc" in metrics["bleu_signature"]
    assert_same_bleu(metrics["bleu"], 100.0)
    plain = evaluation.evaluate(model, tokenizer, cased_pairs, tmp_path, "val")
    assert plain["bleu_lowercase"] is False
    assert_same_bleu(plain["bleu"], cased)


@pytest.mark.slow
def test_translate_texts_partial_last_batch(tiny):
    model, tokenizer, pairs = tiny
    texts = [s for s, _ in pairs]  # 7 sources: batches of 3, 3, 1 (+2 pad)
    full = translate.translate_texts(
        model, tokenizer, texts, beam_size=2, extra_length=EXTRA, batch_size=64
    )
    batched = translate.translate_texts(
        model, tokenizer, texts, beam_size=2, extra_length=EXTRA, batch_size=3
    )
    assert len(batched) == len(texts)
    assert all(isinstance(t, str) for t in batched)
    assert batched == full
    # One trace serves every batch shape of these calls (the buffer is
    # sized in the graph).
    fn = translate.generate_fn(model, samplers.BeamSampler(2, 0.6), EXTRA,
                               None, False)
    assert fn.experimental_get_tracing_count() == 1
    assert translate.translate_texts(model, tokenizer, []) == []


def test_translate_texts_rejects_bad_input(tiny):
    model, tokenizer, _ = tiny
    with pytest.raises(ValueError, match="argument `texts`"):
        translate.translate_texts(model, tokenizer, "12")
    with pytest.raises(ValueError, match="argument `batch_size`"):
        translate.translate_texts(model, tokenizer, ["12"], batch_size=0)
    with pytest.raises(ValueError, match="argument `max_source_length`"):
        translate.translate_texts(
            model, tokenizer, ["12"], max_source_length=33
        )


@pytest.mark.slow
def test_evaluate_writes_files(tiny, tmp_path):
    model, tokenizer, pairs = tiny
    references = [t for _, t in pairs]
    metrics = evaluation.evaluate(
        model,
        tokenizer,
        pairs,
        tmp_path,
        "test",
        beam_size=2,
        alpha=0.6,
        tokenized_references=references,
        target_language="en",
        batch_size=4,
        extra_length=EXTRA,
    )
    assert sorted(os.listdir(tmp_path)) == [
        "metrics_test.json",
        "translations_test.txt",
    ]
    with open(tmp_path / "translations_test.txt", encoding="utf-8") as f:
        lines = f.read().splitlines()
    assert lines == translate.translate_texts(
        model,
        tokenizer,
        [s for s, _ in pairs],
        beam_size=2,
        extra_length=EXTRA,
        batch_size=4,
    )
    with open(tmp_path / "metrics_test.json", encoding="utf-8") as f:
        assert json.load(f) == metrics
    assert metrics["split"] == "test"
    assert metrics["num_sentences"] == len(pairs)
    assert_same_bleu(metrics["bleu"],
                     evaluation.bleu(lines, references)["score"])
    assert "tok:13a" in metrics["bleu_signature"]
    assert 0 <= metrics["bleu_tokenized_lowercased"] <= 100
    assert "tok:none" in metrics["bleu_tokenized_lowercased_signature"]
    assert metrics["tokenized_hypotheses"] == (
        "multi30k_tokenize(language='en')"
    )
    assert metrics["tokenized_ref_len"] == sum(
        len(r.split()) for r in references
    )


@pytest.mark.slow
def test_evaluate_with_own_tokenizer_and_errors(tiny, tmp_path):
    model, tokenizer, pairs = tiny
    pairs = pairs[:2]
    with pytest.raises(ValueError, match="argument `target_language`"):
        evaluation.evaluate(
            model,
            tokenizer,
            pairs,
            tmp_path,
            "val",
            tokenized_references=["a", "b"],
        )
    with pytest.raises(ValueError, match="argument `tokenized_references`"):
        evaluation.evaluate(
            model,
            tokenizer,
            pairs,
            tmp_path,
            "val",
            tokenized_references=["a"],
            target_language="en",
        )
    assert os.listdir(tmp_path) == []
    metrics = evaluation.evaluate(
        model,
        tokenizer,
        pairs,
        tmp_path,
        "val",
        beam_size=1,
        tokenized_references=[t for _, t in pairs],
        tokenized_hypothesis_fn=str.lower,
        extra_length=EXTRA,
    )
    assert metrics["tokenized_hypotheses"] == "lower"
    assert metrics["beam_size"] == 1
    assert "bleu_tokenized_lowercased" in metrics


def test_translate_texts_survives_reseeding(tiny):
    """A tokenizer made before `tf.random.set_seed` still translates."""
    import tensorflow as tf

    from tfattn.data import SubwordTokenizer

    model, tokenizer, pairs = tiny
    stale = SubwordTokenizer(tokenizer.model_proto)
    before = translate.translate_texts(
        model, stale, ["12"], beam_size=1, extra_length=EXTRA
    )
    tf.random.set_seed(1)  # Clears the eager kernel cache.
    after = translate.translate_texts(
        model, stale, ["12"], beam_size=1, extra_length=EXTRA
    )
    assert after == before


@pytest.mark.slow
def test_translate_texts_takes_any_sampler(tiny):
    model, tokenizer, pairs = tiny
    texts = [s for s, _ in pairs]
    hot = samplers.RandomSampler(temperature=50.0)

    def sampled(seed):
        return translate.translate_texts(model, tokenizer, texts,
                                         extra_length=EXTRA, sampler=hot,
                                         seed=seed)

    assert sampled(1) == sampled(1)
    assert sampled(1) != sampled(2)
    # The default stays the hparams' beam search: beam_size and alpha.
    beam = translate.translate_texts(model, tokenizer, texts, beam_size=2,
                                     extra_length=EXTRA)
    assert beam == translate.translate_texts(
        model, tokenizer, texts, extra_length=EXTRA,
        sampler=samplers.BeamSampler(2, 0.6))
    with pytest.raises(ValueError, match=r"`seed`"):
        translate.translate_texts(model, tokenizer, texts, sampler=hot,
                                  seed=2 ** 64)


@pytest.mark.parametrize("width,cap,want", [
    (1, 462, 8), (8, 462, 8), (9, 462, 16), (300, 462, 462), (462, 462, 462),
    (1, 5, 5), (5, 5, 5)])
def test_pad_to_bucket_pads_to_the_next_bucket_within_the_cap(width, cap,
                                                              want):
    source = tf.fill([2, width], 7)
    padded = translate.pad_to_bucket(source, cap)
    assert padded.shape == (2, want)
    np.testing.assert_array_equal(padded[:, :width], source)
    assert not np.any(padded[:, width:])
    graph = tf.function(lambda s: translate.pad_to_bucket(s, cap),
                        input_signature=[tf.TensorSpec([None, None],
                                                       tf.int32)])
    assert graph(source).shape == (2, want)
