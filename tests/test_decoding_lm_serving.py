"""The language models' serving contract (`tfattn.decoding.lm_serving`),
one table of cases run against every engine: the Python path
(`lm_evaluation.continue_details`), the SavedModel (`load_language_model`)
and the CTranslate2 generator (`load_ctranslate2_generator`) of the same
`CausalLM`; then the sampled signature against `CausalLM.generate` with
the same seed, at the extremes of its settings."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfattn
from tests import bounds
from tfattn import export
from tfattn.data import numbers_splits
from tfattn.data import train_tokenizer
from tfattn.data.tokenizer import BOS_ID
from tfattn.decoding import lm_evaluation
from tfattn.decoding import lm_serving
from tfattn.decoding import samplers

pytest.importorskip("ctranslate2")

MAX_LENGTH = 24
NEW = 8
WINDOW = MAX_LENGTH - NEW  # prompt ids read, BOS included
BLANKS = ["", "   ", "\t\n "]


def _score_terms(lm):
    """`bounds.assert_close` terms of a continuation's score: the model's
    stack over the window (MAX_LENGTH keys at most) to its log-probabilities,
    then their sum over the NEW tokens."""
    return bounds.stack_terms(lm.num_layers, lm.num_units, lm.ffn_units,
                              MAX_LENGTH, lm.vocab_size) + NEW


@pytest.fixture(scope="module")
def lm_and_tokenizer():
    keras.utils.set_random_seed(3)
    pairs = numbers_splits(max_value=1200, num_validation=20,
                           num_test=20)["train"][:300]
    tokenizer = train_tokenizer([target for _, target in pairs], None,
                                vocab_size=50)
    lm = tfattn.CausalLM(vocab_size=tokenizer.vocab_size, num_layers=1,
                         num_units=16, num_heads=2, ffn_units=32,
                         dropout_rate=0.0, max_length=MAX_LENGTH)
    lm(np.ones((1, 4), "int32"))
    return lm, tokenizer


@pytest.fixture(scope="module")
def engines(lm_and_tokenizer, tmp_path_factory):
    lm, tokenizer = lm_and_tokenizer
    root = tmp_path_factory.mktemp("lm_engines")
    saved = export.load_language_model(export.export_language_model(
        lm, tokenizer, root / "saved_model", max_new_tokens=NEW))
    ct2 = export.load_ctranslate2_generator(export.causal_lm_to_ctranslate2(
        lm, tokenizer, root / "ct2", max_new_tokens=NEW))
    return {
        "python": lambda prompts: lm_evaluation.continue_details(
            lm, tokenizer, prompts, max_new_tokens=NEW),
        "saved_model": saved.continue_details,
        "ctranslate2": ct2.continue_details,
        "loaded": saved,
    }


@pytest.fixture(params=["python", "saved_model", "ctranslate2"])
def engine(request, engines):
    return engines[request.param]


def _long(tokenizer, extra):
    """A prompt read as WINDOW + extra ids (BOS included)."""
    words = "one two three four five six seven eight nine".split()
    text = ""
    for i in range(200):
        candidate = (text + " " + words[i % 9]).strip()
        if len(tokenizer.tokenize([candidate]).to_list()[0]) + 1 > (
                WINDOW + extra):
            break
        text = candidate
    assert len(tokenizer.tokenize([text]).to_list()[0]) + 1 == WINDOW + extra
    return text


def test_batch_zero_gives_empty_outputs(engine):
    assert engine([]) == lm_serving.Continuations([], [], [])
    assert engine(()) == lm_serving.Continuations([], [], [])


def test_blank_prompts_continue_from_bos_alone(engine):
    out = engine(BLANKS)
    assert out.truncated == [False] * 3
    assert len(set(out.continuations)) == 1
    assert len(set(np.round(out.scores, 4))) == 1


def test_the_window_keeps_each_prompts_last_ids(engine, lm_and_tokenizer):
    _, tokenizer = lm_and_tokenizer
    at, over, far = (_long(tokenizer, e) for e in (0, 1, 7))
    out = engine([at, over, far, "one hundred"])
    assert out.truncated == [False, True, True, False]


@pytest.mark.parametrize("prompts, match", [
    ("one", r"argument `prompts`, expected a list of strings"),
    (None, r"argument `prompts`"),
    (b"one", r"argument `prompts`"),
    ([12], r"argument `prompts\[0\]`, expected a str"),
    (["one", b"two"], r"argument `prompts\[1\]`, expected a str"),
    (["one", None], r"argument `prompts\[1\]`"),
    (["ok", "ab\ud800"], r"`prompts\[1\]`.*character 2 is '\\ud800'"),
    (tf.constant(["one"]), r"argument `prompts`"),
    (np.array(["one"]), r"argument `prompts`"),
])
def test_bad_prompts_are_refused_naming_the_argument(engine, prompts, match):
    with pytest.raises(ValueError, match=match):
        engine(prompts)


def test_the_engines_agree(engines, lm_and_tokenizer):
    lm, tokenizer = lm_and_tokenizer
    prompts = ["one hundred", "", "seven thousand and", "   ",
               _long(tokenizer, 0), _long(tokenizer, 1), _long(tokenizer, 9),
               "twenty", "😀 ünïcode"]
    python = engines["python"](prompts)
    for name in ("saved_model", "ctranslate2"):
        other = engines[name](prompts)
        assert other.continuations == python.continuations, name
        assert other.truncated == python.truncated, name
        # The same sum of log-probabilities; float32 engines, other orders.
        bounds.assert_close(other.scores, python.scores,
                            terms=_score_terms(lm), err_msg=name)
    assert all(np.isfinite(python.scores))


def test_the_window_rule_is_the_last_ids():
    rows, truncated = lm_serving.prompt_window([[], [5, 6], [5, 6, 7, 8]], 3)
    assert rows == [[BOS_ID], [BOS_ID, 5, 6], [6, 7, 8]]
    assert truncated == [False, False, True]
    rows, truncated = lm_serving.prompt_window([[9]], 1)
    assert rows == [[9]] and truncated == [True]


@pytest.mark.parametrize("prompts, node", [
    (tf.constant("one"), "prompts_must_be_a_vector_of_strings"),
    (tf.constant([["one"]]), "prompts_must_be_a_vector_of_strings"),
    (tf.constant([b"one", b"\xff\xfe"]), "prompts_must_be_utf8"),
])
def test_the_signatures_name_prompts_for_any_client(engines, prompts, node):
    loaded = engines["loaded"]
    with pytest.raises(tf.errors.InvalidArgumentError, match=node):
        loaded.signatures["serving_default"](prompts=prompts)
    with pytest.raises(tf.errors.InvalidArgumentError, match=node):
        loaded.signatures["sample"](
            prompts=prompts, temperature=tf.constant(1.0),
            top_p=tf.constant(1.0), seed=tf.constant(0, tf.int64))


@pytest.mark.parametrize("setting, value", [
    ("temperature", 0.0), ("temperature", -1.0),
    ("temperature", float("inf")), ("temperature", float("nan")),
    ("top_p", 0.0), ("top_p", 1.5), ("top_p", float("nan")),
])
def test_the_sample_signature_checks_its_settings(engines, setting, value):
    settings = dict(temperature=1.0, top_p=1.0)
    settings[setting] = value
    with pytest.raises(tf.errors.InvalidArgumentError, match=setting):
        engines["loaded"].signatures["sample"](
            prompts=tf.constant(["one"]),
            temperature=tf.constant(settings["temperature"]),
            top_p=tf.constant(settings["top_p"]),
            seed=tf.constant(0, tf.int64))


@pytest.mark.parametrize("kwargs, match", [
    (dict(temperature=0.0), r"`temperature`.*temperature=0.0"),
    (dict(temperature=float("inf")), r"`temperature`.*temperature=inf"),
    (dict(temperature=float("nan")), r"`temperature`"),
    (dict(temperature="1"), r"`temperature`"),
    (dict(temperature=True), r"`temperature`"),
    (dict(top_p=0.0), r"`top_p`.*top_p=0.0"),
    (dict(top_p=1.01), r"`top_p`"),
    (dict(top_p=None), r"`top_p`"),
    (dict(seed=2 ** 63), r"`seed`.*\[-2\*\*63, 2\*\*63\)"),
    (dict(seed=1.0), r"`seed`"),
    (dict(seed=True), r"`seed`"),
    (dict(seed=tf.constant(1)), r"`seed`"),
    (dict(prompts="one"), r"`prompts`"),
])
def test_the_loader_refuses_bad_settings_by_name(engines, kwargs, match):
    args = dict(prompts=["one"], temperature=1.0, top_p=0.9, seed=0)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        engines["loaded"].sample_details(**args)


@pytest.mark.parametrize("temperature, top_p, seed", [
    (1e-45, 0.9, 0), (0.7, 0.9, 2 ** 40), (1.0, 1.0, -1),
    (1e10, 1.0, 2 ** 63 - 1), (1e10, 0.5, 5),
])
def test_the_sample_signature_draws_as_generate_does(
        engines, lm_and_tokenizer, temperature, top_p, seed):
    lm, tokenizer = lm_and_tokenizer
    prompts = ["one hundred", "", _long(tokenizer, 3), "seven"]
    exported = engines["loaded"].sample_details(
        prompts, temperature=temperature, top_p=top_p, seed=seed)
    python = lm_evaluation.continue_details(
        lm, tokenizer, prompts, max_new_tokens=NEW, seed=seed,
        sampler=samplers.TopPSampler(top_p, temperature=temperature))
    assert exported.continuations == python.continuations
    assert exported.truncated == python.truncated
    bounds.assert_close(exported.scores, python.scores,
                        terms=_score_terms(lm))
    # Padding (score -1e9) is never drawn, at any temperature.
    assert min(exported.scores) > -1e6
    if temperature == 1e-45:
        assert exported.continuations == engines["python"](
            prompts).continuations


def test_a_python_int_seed_reaches_the_signature_whole(engines):
    sample = engines["loaded"].signatures["sample"]

    def continuations(seed):
        return sample(prompts=tf.constant(["one", "two"]),
                      temperature=tf.constant(5.0), top_p=tf.constant(1.0),
                      seed=seed)["continuations"].numpy().tolist()

    # 2**40 and 0 agree in their low 32 bits: a wrapped seed would repeat.
    assert continuations(2 ** 40) == continuations(2 ** 40)
    assert continuations(2 ** 40) != continuations(0)
    assert continuations(2 ** 40) == [
        c.encode() for c in engines["loaded"].sample_details(
            ["one", "two"], temperature=5.0, top_p=1.0,
            seed=2 ** 40).continuations]


@pytest.mark.parametrize("max_new_tokens, match", [
    (0, r"`max_new_tokens`.*max_new_tokens=0"),
    (MAX_LENGTH, r"`max_new_tokens`.*less than the model's max_length=24"),
    (2.0, r"`max_new_tokens`"),
    (True, r"`max_new_tokens`"),
])
def test_python_refuses_a_budget_that_leaves_no_prompt(
        lm_and_tokenizer, max_new_tokens, match):
    lm, tokenizer = lm_and_tokenizer
    for function in (lm_evaluation.continue_details,
                     lm_evaluation.continue_texts):
        with pytest.raises(ValueError, match=match):
            function(lm, tokenizer, ["one"], max_new_tokens=max_new_tokens)


def test_the_exports_refuse_a_budget_that_leaves_no_prompt(
        lm_and_tokenizer, tmp_path):
    lm, tokenizer = lm_and_tokenizer
    with pytest.raises(ValueError, match=r"`max_new_tokens`"):
        export.export_language_model(lm, tokenizer, tmp_path / "a",
                                     max_new_tokens=MAX_LENGTH)
    with pytest.raises(ValueError, match=r"`max_new_tokens`"):
        export.causal_lm_to_ctranslate2(lm, tokenizer, tmp_path / "b",
                                        max_new_tokens=MAX_LENGTH)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_loading_a_directory_that_is_no_export_says_so(tmp_path):
    with pytest.raises(FileNotFoundError, match="export_language_model"):
        export.load_language_model(tmp_path)
    with pytest.raises(FileNotFoundError, match="causal_lm_to_ctranslate2"):
        export.load_ctranslate2_generator(tmp_path)


@pytest.mark.parametrize("load, name", [
    (export.load_language_model, "export_dir"),
    (export.load_ctranslate2_generator, "path"),
    (export.load_masked_lm, "export_dir"),
    (export.load_translator, "export_dir"),
    (export.load_ctranslate2, "path"),
])
@pytest.mark.parametrize("value", [None, 3, ""])
def test_loaders_refuse_what_is_not_a_path(load, name, value):
    with pytest.raises(ValueError, match=rf"`{name}`.*a directory path"):
        load(value)


def test_an_export_below_a_file_is_refused_by_name(lm_and_tokenizer,
                                                   tmp_path):
    lm, tokenizer = lm_and_tokenizer
    a_file = tmp_path / "file"
    a_file.write_text("x")
    with pytest.raises(ValueError, match=r"`export_dir`.*is a file"):
        export.export_language_model(lm, tokenizer, a_file / "export",
                                     max_new_tokens=NEW)
    assert a_file.read_text() == "x"
