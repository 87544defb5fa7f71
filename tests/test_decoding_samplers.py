"""The samplers at the extremes of their settings, on any backend (CI runs
this file under TensorFlow and again under JAX).

Log-probabilities are built as the models build them (`CausalLM` and
`Transformer` steps give padding, id 0, the logit `MASKED_LOGIT`, then the
search takes a float32 log-softmax). The reference is NumPy in float64
from the formulas: softmax((log_probs - best) / T) over the unmasked
tokens, the k largest for top-k, the sorted-cumulative-sum nucleus for
top-p (Holtzman et al., 2020). Frequencies are held to a 5-sigma binomial
bound; padding must be drawn zero times; the low end must be greedy row for
row. Each setting draws eagerly, and the extremes compiled too (XLA under
TensorFlow, `jax.jit` under JAX): one compiled program per temperature
holds the six samplers (`compiled_choices`), and every compiled draw
feeds it the same [DRAWS, VOCAB] shape, so each compiles once.

`generate` compiles once per model, bucketed shapes and settings (samplers
are equal by their settings; `generate_traces` counts the compilations):
the tests below share one prompt batch, one output length and one stop
setting per model, so that calls with equal settings share a compiled
search. They run the plain graph (`jit_compile=False`) unless XLA is the
point; the XLA path is compared with it in
`test_generate_at_tiny_temperature_is_greedy` (XLA draws at T = 1e-45
against plain greedy) and, for translation, in
`test_translation_at_tiny_temperature_is_greedy`; XLA draws at T = 1e10 in
`test_generate_at_huge_temperature_never_emits_padding`.
"""

import keras
import numpy as np
import pytest
from keras import ops

from tests import bounds
from tfattn.decoding import samplers
from tfattn.models.causal_lm import CausalLM

BACKEND = keras.config.backend()
VOCAB = 12  # padding + 11 real tokens
DRAWS = 4000
TEMPERATURES = [1e-45, 1e-9, 0.5, 1.0, 3.0, 1e3, 1e10, 1e38]
SAMPLERS = {
    "random": lambda t: samplers.RandomSampler(t),
    "top_k_3": lambda t: samplers.TopKSampler(3, temperature=t),
    "top_k_all": lambda t: samplers.TopKSampler(VOCAB, temperature=t),
    "top_p_0.6": lambda t: samplers.TopPSampler(0.6, temperature=t),
    "top_p_1": lambda t: samplers.TopPSampler(1.0, temperature=t),
    "top_p_0.8_k_4": lambda t: samplers.TopPSampler(0.8, temperature=t,
                                                    k=4),
}


def _np(x):
    return np.asarray(ops.convert_to_numpy(x))


def model_log_probs(logits):
    """What the searches hand a sampler: padding masked, log-softmax."""
    logits = ops.convert_to_tensor(np.asarray(logits, "float32"))
    not_pad = ops.not_equal(ops.arange(logits.shape[-1]), 0)
    logits = ops.where(not_pad[None, :], logits, samplers.MASKED_LOGIT)
    return ops.log_softmax(logits, axis=-1)


def _compiled(function):
    if BACKEND == "tensorflow":
        import tensorflow as tf

        return tf.function(function, jit_compile=True)
    if BACKEND == "jax":
        import jax

        return jax.jit(function)
    return function


_COMPILED = {}


def compiled_choices(temperature):
    """One compiled program (per temperature, made once) that draws with
    all six SAMPLERS: log_probs [DRAWS, VOCAB], seed -> {name: tokens}.
    Each sampler's draw is its own output, as if compiled alone."""
    if temperature not in _COMPILED:
        made = {name: make(temperature) for name, make in SAMPLERS.items()}
        _COMPILED[temperature] = _compiled(lambda lp, s: {
            name: sampler.choose(lp, s) for name, sampler in made.items()})
    return _COMPILED[temperature]


def choose(name, temperature, log_probs, seed, compiled):
    """SAMPLERS[name](temperature).choose, eagerly or compiled."""
    seed = ops.convert_to_tensor(seed, "int32")
    if compiled:
        assert tuple(log_probs.shape) == (DRAWS, VOCAB)  # One compilation.
        return _np(compiled_choices(temperature)(log_probs, seed)[name])
    return _np(SAMPLERS[name](temperature).choose(log_probs, seed))


def numpy_distribution(name, temperature, log_probs):
    """(the distribution the sampler should draw from, the set a bisected
    nucleus may add within its documented 2^-24 tolerance), float64."""
    lp = np.asarray(log_probs, np.float64)
    unmasked = lp > samplers.MASKED_THRESHOLD
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        scaled = np.where(unmasked, (lp - lp[unmasked].max()) / temperature,
                          -np.inf)
    kept = unmasked.copy()
    if "top_k" in name or "_k_" in name:
        k = {"top_k_3": 3, "top_k_all": VOCAB, "top_p_0.8_k_4": 4}[name]
        order = np.argsort(-scaled, kind="stable")
        kept = np.zeros_like(kept)
        kept[order[:k]] = True
        kept &= unmasked
    probs = np.where(kept, np.exp(scaled - scaled[kept].max()), 0.0)
    probs /= probs.sum()
    loose = probs > 0
    if "top_p" in name:
        p = float(name.split("_")[2])
        order = np.argsort(-probs, kind="stable")
        count = int(np.searchsorted(np.cumsum(probs[order]), p - 1e-7)) + 1
        nucleus = np.zeros_like(kept)
        nucleus[order[:count]] = True
        threshold = probs[order[count - 1]] - probs.max() * 2.0 ** -24
        loose = probs >= threshold
        probs = np.where(nucleus, probs, 0.0)
        probs /= probs.sum()
    return probs, loose


@pytest.fixture(scope="module")
def one_row():
    rng = np.random.default_rng(0)
    return model_log_probs(rng.normal(0.0, 2.0, (1, VOCAB)))


# Every setting eagerly; the extremes compiled too (`compiled_choices`).
CASES = ([(n, t, False) for n in SAMPLERS for t in TEMPERATURES]
         + [(n, t, True) for n in SAMPLERS for t in (1e-45, 1e10)])


@pytest.mark.parametrize("name, temperature, compiled", CASES)
def test_draws_follow_numpy_and_never_padding(name, temperature, compiled,
                                              one_row):
    log_probs = ops.repeat(one_row, DRAWS, axis=0)
    tokens = choose(name, temperature, log_probs, [7, 1], compiled)
    assert tokens.min() >= 0 and tokens.max() < VOCAB
    counts = np.bincount(tokens, minlength=VOCAB)
    assert counts[0] == 0, f"padding drawn {counts[0]} times"
    want, loose = numpy_distribution(name, temperature, _np(one_row)[0])
    got = counts / DRAWS
    support = got > 0
    if "top_p" in name and not np.array_equal(loose, want > 0):
        # Within the bisection's tolerance: draws stay in the loose set,
        # cover the exact nucleus, and are uniform enough over what they
        # use (here the probabilities differ by less than 2^-24).
        assert not (support & ~loose).any()
        assert (support | (want == 0)).all()
        want = np.where(support, 1.0 / support.sum(), 0.0)
    # Never outside the distribution's support; within 5 binomial standard
    # errors on it.
    np.testing.assert_array_equal(got[want == 0], 0.0)
    bounds.assert_sampled(got, want, DRAWS)


@pytest.mark.parametrize("name, temperature, compiled", [
    (n, t, False) for n in SAMPLERS for t in (1e-45, 1e-9)]
    + [(n, 1e-45, True) for n in SAMPLERS])
def test_the_low_end_is_greedy_row_for_row(name, temperature, compiled):
    # DRAWS random rows: the compiled draws' shape (`choose`).
    rng = np.random.default_rng(1)
    log_probs = model_log_probs(rng.normal(0.0, 2.0, (DRAWS, VOCAB)))
    greedy = _np(samplers.GreedySampler().choose(log_probs, None))
    got = choose(name, temperature, log_probs, [3, 9], compiled)
    np.testing.assert_array_equal(got, greedy)


@pytest.mark.parametrize("name", ["random", "top_k_3", "top_p_1"])
def test_the_high_end_is_uniform_over_the_real_vocabulary(name):
    # A peaked row: at T = 1e10 its shape must not matter.
    logits = np.full((1, VOCAB), -30.0, "float32")
    logits[0, 5] = 30.0
    log_probs = ops.repeat(model_log_probs(logits), DRAWS, axis=0)
    tokens = choose(name, 1e10, log_probs, [5, 5], False)
    counts = np.bincount(tokens, minlength=VOCAB)
    assert counts[0] == 0
    real = counts[1:] if name != "top_k_3" else counts[counts > 0]
    assert len(real) == (3 if name == "top_k_3" else VOCAB - 1)
    bounds.assert_sampled(real / DRAWS, np.full(len(real), 1.0 / len(real)),
                          DRAWS)


def test_a_row_of_one_real_token_always_draws_it():
    # DRAWS rows: the shape the eager draws above ran (JAX compiles each
    # eager operation once per shape).
    logits = np.zeros((DRAWS, VOCAB), "float32")
    logits[:, 2:] = samplers.MASKED_LOGIT  # only id 1 is real
    log_probs = model_log_probs(logits)
    for make in SAMPLERS.values():
        for temperature in (1e-45, 1.0, 1e38):
            got = _np(make(temperature).choose(log_probs, ops.convert_to_tensor(
                [1, 2], "int32")))
            assert (got == 1).all(), (make(temperature), got)


# --------------------------------------------------------------------------
# Seeds: int64-range ints, the same words from Python and from tensors.

@pytest.mark.parametrize("seed, words", [
    (0, [0, 0]), (1, [0, 1]), (-1, [-1, -1]), (2 ** 31, [0, -2 ** 31]),
    (2 ** 40 + 5, [256, 5]), (2 ** 63 - 1, [2 ** 31 - 1, -1]),
    (-2 ** 63, [-2 ** 31, 0]), (np.int64(7), [0, 7]),
])
def test_seed_words_are_the_two_halves(seed, words):
    np.testing.assert_array_equal(samplers.seed_words(seed, "t"), words)


@pytest.mark.parametrize("seed", [2 ** 63, -2 ** 63 - 1, 1.5, True, "1",
                                  None, [1, 2]])
def test_seeds_outside_int64_or_not_ints_are_refused(seed):
    with pytest.raises(ValueError, match=r"`seed`.*\[-2\*\*63, 2\*\*63\)"):
        samplers.seed_words(seed, "t")


# --------------------------------------------------------------------------
# Through CausalLM.generate.

@pytest.fixture(scope="module")
def lm():
    keras.utils.set_random_seed(0)
    model = CausalLM(vocab_size=VOCAB, num_layers=1, num_units=16,
                     num_heads=2, ffn_units=32, max_length=40,
                     dropout_rate=0.0)
    # Built (the weights a first call makes) without running it: JAX would
    # compile every eager operation.
    model.build((None, None))
    return model


PROMPTS = [[5, 6, 7], [4], [1, 2, 3, 4, 5, 6, 7, 8, 9]]
# The tests through CausalLM.generate share one compiled search per
# sampler: these prompts, NEW_TOKENS (one output bucket), no stop token
# and the plain graph.
NEW_TOKENS = 12
SHARED = dict(max_new_tokens=NEW_TOKENS, stop_token_ids=None,
              jit_compile=False)


@pytest.mark.parametrize("name, jit_compile", [
    ("random", False), ("top_k_all", False), ("top_p_1", False),
    ("top_p_1", True)])
def test_generate_at_huge_temperature_never_emits_padding(lm, name,
                                                          jit_compile):
    ids, scores = lm.generate(PROMPTS * 8, max_new_tokens=24,
                              sampler=SAMPLERS[name](1e10),
                              stop_token_ids=None, seed=2 ** 40,
                              jit_compile=jit_compile)
    assert (ids > 0).all(), ids
    assert np.all(scores > -1e6)
    # Uniform over the 11 real tokens: every one of them shows up.
    assert set(np.unique(ids)) == set(range(1, VOCAB))


@pytest.mark.parametrize("name, jit_compile", [
    (n, False) for n in SAMPLERS] + [("random", True), ("top_p_0.6", True)])
def test_generate_at_tiny_temperature_is_greedy(lm, name, jit_compile):
    # Greedy in the plain graph: the XLA cases compare XLA with it.
    new_tokens = NEW_TOKENS
    greedy, greedy_scores = lm.generate(PROMPTS, **SHARED)
    ids, scores = lm.generate(PROMPTS, max_new_tokens=new_tokens,
                              sampler=SAMPLERS[name](1e-45),
                              stop_token_ids=None, seed=5,
                              jit_compile=jit_compile)
    np.testing.assert_array_equal(ids, greedy)
    # The model's log-probabilities (its stack over the prompt and the new
    # tokens), summed over the new tokens.
    longest = max(len(p) for p in PROMPTS) + new_tokens
    bounds.assert_close(scores, greedy_scores, terms=bounds.stack_terms(
        lm.num_layers, lm.num_units, lm.ffn_units, longest, lm.vocab_size
    ) + new_tokens)


@pytest.mark.parametrize("seed", [2 ** 31, 2 ** 40, -2 ** 63, 2 ** 63 - 1])
def test_int64_seeds_repeat_and_differ_from_seed_zero(lm, seed):
    def sample(s):
        return lm.generate(PROMPTS, sampler="random", seed=s, **SHARED)[0]

    np.testing.assert_array_equal(sample(seed), sample(seed))
    assert not np.array_equal(sample(seed), sample(0))


@pytest.mark.parametrize("name, kind", [
    ("greedy", samplers.GreedySampler), ("random", samplers.RandomSampler),
    ("top_k", samplers.TopKSampler), ("top_p", samplers.TopPSampler),
    ("beam", samplers.BeamSampler)])
def test_every_sampler_name_works_without_arguments(lm, name, kind):
    assert type(samplers.get(name)) is kind
    # "greedy" and "random" share the searches of the tests above.
    ids, scores = lm.generate(PROMPTS, sampler=name, **SHARED)
    assert ids.shape == (3, NEW_TOKENS) and np.all(np.isfinite(scores))


@pytest.mark.parametrize("kwargs, match", [
    (dict(seed=2 ** 63), r"`seed`.*Received: seed=9223372036854775808"),
    (dict(seed=-2 ** 63 - 1), r"`seed`"),
    (dict(seed=1.0), r"`seed`.*seed=1.0"),
    (dict(seed=True), r"`seed`.*seed=True"),
    (dict(stop_token_ids=0), r"`stop_token_ids`.*\[1, 12\).*0 is padding"),
    (dict(stop_token_ids=(3, VOCAB)), r"`stop_token_ids`.*\(3, 12\)"),
    (dict(stop_token_ids=-1), r"`stop_token_ids`"),
    (dict(stop_token_ids="3"), r"`stop_token_ids`"),
    (dict(sampler=samplers.TopKSampler(VOCAB + 1)), r"`k`.*at most"),
    (dict(sampler=3), r"`sampler`.*sampler=3"),
    (dict(strip_prompt=1), r"`strip_prompt`"),
    (dict(jit_compile="yes"), r"`jit_compile`"),
    (dict(max_new_tokens=True), r"`max_new_tokens`"),
    (dict(max_new_tokens=2.0), r"`max_new_tokens`"),
])
def test_generate_refuses_bad_settings_by_name(lm, kwargs, match):
    args = dict(prompts=[[5, 6]], max_new_tokens=3)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        lm.generate(**args)


@pytest.mark.parametrize("make, match", [
    (lambda: samplers.RandomSampler(float("inf")), r"temperature=inf"),
    (lambda: samplers.RandomSampler(float("nan")), r"temperature=nan"),
    (lambda: samplers.RandomSampler(0.0), r"temperature=0.0"),
    (lambda: samplers.RandomSampler(-1e-45), r"temperature"),
    (lambda: samplers.RandomSampler("1"), r"temperature='1'"),
    (lambda: samplers.RandomSampler(True), r"temperature=True"),
    (lambda: samplers.TopKSampler(5, temperature=float("inf")),
     r"temperature=inf"),
    (lambda: samplers.TopKSampler(2.0), r"`k`"),
    (lambda: samplers.TopKSampler(True), r"`k`"),
    (lambda: samplers.TopPSampler(float("nan")), r"`p`.*p=nan"),
    (lambda: samplers.TopPSampler(0.5, k=0), r"`k`.*k=0"),
    (lambda: samplers.BeamSampler(0), r"`beam_size`"),
    (lambda: samplers.BeamSampler(2, alpha=float("inf")), r"`alpha`"),
    (lambda: samplers.BeamSampler(2, alpha=-0.1), r"`alpha`"),
    (lambda: samplers.get("greedy", k=3), r"`k`.*'greedy' sampler"),
    (lambda: samplers.get(samplers.GreedySampler(), k=3), r"`sampler`"),
])
def test_sampler_settings_are_refused_by_name(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_beam_sampler_owns_a_search_not_a_per_token_choice():
    from tfattn.decoding import sample_search

    beam = samplers.BeamSampler()
    assert not isinstance(beam, samplers.TokenSampler)
    assert not hasattr(beam, "choose")
    with pytest.raises(ValueError, match=r"`sampler`.*per-token sampler"):
        sample_search(lambda ids, i, c: (None, c), np.zeros(1, "int32"),
                      None, 3, 3, sampler=beam)


@pytest.mark.parametrize("make", [samplers.Sampler, samplers.TokenSampler])
def test_the_abstract_samplers_cannot_be_made(make):
    with pytest.raises(TypeError, match="abstract"):
        make()


# --------------------------------------------------------------------------
# Translation speaks the same dialect: every sampler through
# Transformer.generate.

@pytest.fixture(scope="module")
def translator():
    import tfattn

    keras.utils.set_random_seed(1)
    model = tfattn.Transformer(VOCAB, num_layers=1, num_units=16,
                               num_heads=2, ffn_units=32, max_length=32,
                               dropout_rate=0.0)
    model.build({"source": (None, None), "target_in": (None, 1)})
    return model


SOURCES = np.array([[5, 6, 7, 3, 0, 0], [4, 9, 10, 11, 8, 3]], "int32")
# The translation tests share one compiled search per sampler: SOURCES
# (one width bucket), each row's limit its length + 6 (12 tokens out), the
# default stop token and the plain graph.
PLAIN = dict(extra_length=6, jit_compile=False)


@pytest.mark.parametrize("name", ["greedy", "random", "top_k", "top_p",
                                  "beam"])
def test_translation_takes_every_sampler(translator, name):
    ids, scores = translator.generate(SOURCES, sampler=name, seed=3,
                                      **PLAIN)
    assert ids.shape == (2, 12) and ids.dtype == np.int32
    assert scores.shape == (2,) and np.all(np.isfinite(scores))
    again, _ = translator.generate(SOURCES, sampler=name, seed=3, **PLAIN)
    np.testing.assert_array_equal(ids, again)


def test_translation_defaults_to_the_papers_beam_search(translator):
    default = translator.generate(SOURCES, **PLAIN)
    explicit = translator.generate(
        SOURCES, sampler=samplers.BeamSampler(4, 0.6), **PLAIN)
    np.testing.assert_array_equal(default[0], explicit[0])
    np.testing.assert_array_equal(default[1], explicit[1])


def test_translation_samples_differ_by_seed_and_never_pad(translator):
    hot = samplers.RandomSampler(1e10)
    rows = np.repeat(SOURCES, 8, axis=0)
    first, scores = translator.generate(rows, sampler=hot, seed=1,
                                        stop_token_ids=None, **PLAIN)
    second, _ = translator.generate(rows, sampler=hot, seed=2,
                                    stop_token_ids=None, **PLAIN)
    assert not np.array_equal(first, second)
    # No stop token: every row runs to its own limit (source + 6) with no
    # padding before it.
    lengths = (rows > 0).sum(1) + 6
    for row, length in zip(first, lengths):
        assert (row[:length] > 0).all() and not row[length:].any()
    assert np.all(scores > -1e6)


def test_translation_at_tiny_temperature_is_greedy(translator):
    # XLA draws against greedy in the plain graph.
    greedy, _ = translator.generate(SOURCES, sampler="greedy", **PLAIN)
    cold, _ = translator.generate(
        SOURCES, sampler=samplers.TopPSampler(0.9, temperature=1e-45),
        seed=9, extra_length=6, jit_compile=True)
    np.testing.assert_array_equal(cold, greedy)


def test_translation_reuses_its_compiled_search(translator):
    # Greedy with PLAIN's settings (compiled here or by a test above).
    translator.generate(SOURCES, sampler="greedy", **PLAIN)
    traces = translator.generate_traces
    # Other source widths in the same bucket, the same settings (the
    # output width as SOURCES gives it).
    translator.generate(SOURCES[:, :4], sampler="greedy",
                        max_new_tokens=12, **PLAIN)
    translator.generate(SOURCES[:, :5], sampler="greedy",
                        max_new_tokens=12, **PLAIN)
    assert translator.generate_traces == traces
    # Another sampler is another search (settings no other test uses).
    translator.generate(SOURCES[:, :5], sampler="top_k", extra_length=4,
                        jit_compile=False)
    assert translator.generate_traces == traces + 1


@pytest.mark.parametrize("kwargs, match", [
    (dict(sampler="nope"), r"`sampler`"),
    (dict(seed=2 ** 63), r"`seed`"),
    (dict(stop_token_ids=0), r"`stop_token_ids`"),
    (dict(jit_compile=1), r"`jit_compile`"),
    (dict(extra_length=-1), r"`extra_length`.*extra_length=-1"),
    (dict(extra_length=1.5), r"`extra_length`"),
    (dict(max_new_tokens=0), r"`max_new_tokens`"),
    (dict(max_new_tokens=33), r"`max_new_tokens`.*max_length>=33"),
])
def test_translation_refuses_bad_settings_by_name(translator, kwargs, match):
    with pytest.raises(ValueError, match=match):
        translator.generate(SOURCES, **kwargs)
