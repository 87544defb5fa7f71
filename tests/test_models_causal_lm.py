"""`tfattn.models.CausalLM` and the samplers, on any backend (CI runs this
file under TensorFlow and again under JAX).

References, all independent of the code under test's cache and loop:
- generation against the uncached full forward pass re-run on the whole
  prefix at every step (each step's prefix a row of one batch; greedy: its
  argmax chain; scores: its log-probs), in every flavour,
  so the prefill, the left padding of short prompts and the per-row
  positions are checked against the plain model;
- the samplers against NumPy: the top-k and nucleus sets from a full sort
  and cumulative sum (Holtzman et al.), draw frequencies against softmax
  probabilities (a 5-sigma binomial bound);
- causality: logits at position t ignore the tokens after t.
"""

import keras
import numpy as np
import pytest
from keras import ops

from tests import bounds
from tfattn.decoding import samplers
from tfattn.models.causal_lm import CausalLM

BACKEND = keras.config.backend()
VOCAB = 40
PROMPTS = [[5, 6, 7, 8, 9, 10, 11, 12, 13], [4, 5], [7]]
# Elementwise float operations of the exact GELU, x·0.5·(1 + erf(x/√2)):
# the division, erf, the sum and the two products.
GELU_OPS = 5


def _np(x):
    return np.asarray(ops.convert_to_numpy(x))


def tiny_lm(seed=0, **kwargs):
    keras.utils.set_random_seed(seed)
    args = dict(vocab_size=VOCAB, num_layers=2, num_units=16, num_heads=2,
                ffn_units=32, max_length=48, dropout_rate=0.0)
    args.update(kwargs)
    lm = CausalLM(**args)
    lm(np.ones((1, 4), "int32"))
    return lm


@pytest.fixture(scope="module")
def lm():
    return tiny_lm()


def lm_terms(lm, length):
    """`bounds.assert_close` terms of one logit or log-probability of `lm`
    over `length` keys: its stack (`bounds.stack_terms`, the vocabulary's
    projection and log-softmax included) and the final layer norm (4·C)."""
    return 4 * lm.num_units + bounds.stack_terms(
        lm.num_layers, lm.num_units, lm.ffn_units, length, lm.vocab_size)


def score_terms(lm, steps):
    """Terms of a generation score, the sum of `steps` log-probabilities,
    each of the full forward pass over the `max_length` buffer."""
    return lm_terms(lm, lm.max_length) + steps


def _log_probs(lm, prefixes):
    """For each prefix: (the log-softmax (float64) of the full forward pass
    at its last position, padding excluded as `generate` excludes it; the
    largest |logit| there, the scale of the log-probabilities' rounding).
    Each prefix sits in its own row of a fixed buffer padded after it
    (causal attention keeps the padding out of the prefix's positions), so
    every row has one shape; the rows run as one batch (one forward pass
    for a whole chain of prefixes)."""
    buffer = np.zeros((len(prefixes), lm.max_length), "int32")
    for row, prefix in enumerate(prefixes):
        buffer[row, :len(prefix)] = prefix
    every = _np(lm(buffer)).astype(np.float64)
    out = []
    for row, prefix in enumerate(prefixes):
        logits = every[row, len(prefix) - 1]
        logits[0] = -np.inf
        top = logits.max()
        magnitude = np.abs(logits[1:]).max()
        out.append((logits - top - np.log(np.sum(np.exp(logits - top))),
                    magnitude))
    return out


def naive_greedy(lm, prompt, emitted, stop=3):
    """(tokens, score, scale) of the uncached argmax chain after `prompt`,
    its step t on the prefix `prompt + emitted[:t]` (`emitted`: the tokens
    under test), so that all its steps run in one batched forward pass.
    The chain runs `len(emitted)` steps, ends at `stop`, or ends with the
    first argmax that leaves `emitted` (the caller's comparison of the two
    then fails there). The score's scale is the sum over the steps of the
    logits' magnitudes (each step's log-probability rounds at its logits'
    scale)."""
    emitted = list(emitted)
    tokens, score, scale = [], 0.0, 0.0
    steps = _log_probs(lm, [list(prompt) + emitted[:t]
                            for t in range(len(emitted))])
    for t, (lp, magnitude) in enumerate(steps):
        token = int(np.argmax(lp))
        assert np.sort(lp)[-1] - np.sort(lp)[-2] > 1e-3  # no near-tie
        tokens.append(token)
        score += lp[token]
        scale += magnitude
        if token == stop or token != emitted[t]:
            break
    return tokens, score, scale


def _rescore(lm, prompt, tokens):
    """(score, scale) of `tokens` after `prompt` by the full forward pass
    (one batched pass over the prefixes), the scale as `naive_greedy`'s."""
    score, scale = 0.0, 0.0
    steps = _log_probs(lm, [list(prompt) + list(tokens[:t])
                            for t in range(len(tokens))])
    for token, (lp, magnitude) in zip(tokens, steps):
        score += lp[token]
        scale += magnitude
    return score, scale


@pytest.mark.parametrize("flavor, normalize_first", [
    ("paper", None), ("paper", False), ("reference_2019", None),
    ("reference_2017", None),
])
def test_greedy_and_beam_equal_the_full_forward_pass_in_every_flavour(
        lm, flavor, normalize_first):
    """Greedy is the uncached argmax chain, and beam search's scores are
    the full forward pass's (at length penalty 0, at least greedy's), in
    each flavour. The default one ("paper" pre-norm) is the module's `lm`,
    searched under XLA (generate's default); the others change the model's
    layers, not the search, and search in the plain graph (one XLA compile
    less each). Both paths are held to the same reference here; XLA's
    draws at T = 1e-45 are the plain graph's greedy in
    tests/test_decoding_samplers.py; under JAX, which CI runs this file on
    too, every flavour compiles."""
    default = (flavor, normalize_first) == ("paper", None)
    model = lm if default else tiny_lm(
        seed=1, flavor=flavor, normalize_first=normalize_first)
    ids, scores = model.generate(PROMPTS, max_new_tokens=6,
                                 jit_compile=default)
    assert ids.shape == (3, 6) and ids.dtype == np.int32
    terms = score_terms(model, 6)
    for row, prompt in enumerate(PROMPTS):
        got = ids[row].tolist()
        want, want_score, scale = naive_greedy(model, prompt, got)
        assert got[:len(want)] == want and not any(got[len(want):]), (
            "greedy is not the argmax chain", row)
        bounds.assert_close(scores[row], want_score, terms=terms,
                            scale=scale, err_msg="greedy's score")
    beam, beam_scores = model.generate(
        PROMPTS, 6, sampler=samplers.BeamSampler(3, 0.0),
        jit_compile=default)
    for row, prompt in enumerate(PROMPTS):
        tokens = [t for t in beam[row].tolist() if t]
        want, beam_scale = _rescore(model, prompt, tokens)
        bounds.assert_close(beam_scores[row], want, terms=terms,
                            scale=beam_scale, err_msg="beam's score")
        # alpha=0 ranks by log-prob: the best beam is at least greedy's, up
        # to the rounding of both scores.
        _, greedy_scale = _rescore(
            model, prompt, [t for t in ids[row].tolist() if t])
        assert beam_scores[row] >= scores[row] - (
            bounds.bound(terms, beam_scale)
            + bounds.bound(terms, greedy_scale)), ("beam below greedy", row)


def test_logits_ignore_the_future(lm):
    ids = np.array([[5, 6, 7, 8, 9]], "int32")
    changed = ids.copy()
    changed[0, 3:] = [20, 21]
    a, b = _np(lm(ids)), _np(lm(changed))
    np.testing.assert_array_equal(a[0, :3], b[0, :3])
    assert np.abs(a[0, 3:] - b[0, 3:]).max() > 1e-3


def test_padding_after_a_sequence_changes_nothing_before_it(lm):
    short = _np(lm(np.array([[5, 6, 7]], "int32")))
    padded = _np(lm(np.array([[5, 6, 7, 0, 0]], "int32")))
    bounds.assert_close(padded[:, :3], short, terms=lm_terms(lm, 5))


@pytest.mark.parametrize("sampler", [
    "random", samplers.TopKSampler(3), samplers.TopPSampler(0.8),
    samplers.RandomSampler(temperature=0.5),
])
def test_draws_repeat_with_their_seed_and_score_what_they_emit(lm, sampler):
    first, scores = lm.generate(PROMPTS, 8, sampler=sampler, seed=7,
                                stop_token_ids=())
    again, _ = lm.generate(PROMPTS, 8, sampler=sampler, seed=7,
                           stop_token_ids=())
    other, _ = lm.generate(PROMPTS, 8, sampler=sampler, seed=8,
                           stop_token_ids=())
    np.testing.assert_array_equal(first, again)
    assert (first != other).any()
    assert (first > 0).all()  # never padding
    for row, prompt in enumerate(PROMPTS):
        want, scale = _rescore(lm, prompt, first[row].tolist())
        bounds.assert_close(scores[row], want, terms=score_terms(lm, 8),
                            scale=scale)


def test_stop_tokens_end_each_row_on_its_own(lm):
    free, _ = lm.generate(PROMPTS, 8, stop_token_ids=())
    # Stop each row at a token it emits at a different step.
    stops = (int(free[0, 1]), int(free[1, 4]))
    ids, _ = lm.generate(PROMPTS, 8, stop_token_ids=stops)
    for row in range(3):
        expected = []
        for token in free[row].tolist():
            expected.append(token)
            if token in stops:
                break
        assert ids[row, :len(expected)].tolist() == expected
        assert not ids[row, len(expected):].any()


def test_strip_prompt_false_returns_prompt_then_continuation(lm):
    ids, _ = lm.generate(PROMPTS, 4, stop_token_ids=())
    full, _ = lm.generate(PROMPTS, 4, stop_token_ids=(), strip_prompt=False)
    assert full.shape == (3, 9 + 4)
    for row, prompt in enumerate(PROMPTS):
        n = len(prompt)
        assert full[row, :n].tolist() == prompt
        assert full[row, n:n + 4].tolist() == ids[row].tolist()
        assert not full[row, n + 4:].any()


def test_a_second_call_with_the_same_buckets_does_not_trace(lm):
    # PROMPTS' buckets (3 rows, prefill 8, buffer 8), which other tests of
    # this module's `lm` compile too.
    lm.generate(PROMPTS, 5)
    traces = lm.generate_traces
    lm.generate([p[::-1] for p in PROMPTS], 5)  # same shapes
    lm.generate([[9, 8, 7], [4], [6, 5]], 5)  # other lengths, same bucket
    lm.generate(PROMPTS, 7)  # another max_new_tokens, same bucket
    lm.generate(PROMPTS, 5, seed=3)  # the seed is an input
    assert lm.generate_traces == traces
    lm.generate([[9, 8, 7] * 4, [4], [7]], 5)  # a longer bucket traces once
    assert lm.generate_traces == traces + 1


def test_ids_as_a_right_padded_array(lm):
    ragged, _ = lm.generate(PROMPTS, 4)
    array = np.zeros((3, 9), "int32")
    for row, prompt in enumerate(PROMPTS):
        array[row, :len(prompt)] = prompt
    padded, _ = lm.generate(array, 4)
    np.testing.assert_array_equal(ragged, padded)


def test_tied_head_trains_with_fit():
    lm = tiny_lm(seed=3)
    rng = np.random.default_rng(0)
    ids = rng.integers(4, VOCAB, (16, 9)).astype("int32")
    ids[:, 1::2] = ids[:, 0::2][:, :4] % 7 + 4  # something to learn
    lm.compile(optimizer=keras.optimizers.Adam(1e-2),
               loss=keras.losses.SparseCategoricalCrossentropy(
                   from_logits=True, ignore_class=0))
    table = _np(lm.token_embedding.embeddings).copy()
    history = lm.fit(ids[:, :-1], ids[:, 1:], epochs=8, batch_size=8,
                     verbose=0)
    losses = history.history["loss"]
    assert losses[-1] < 0.8 * losses[0]
    # The output head is the table: it moved, and the logits read it now.
    new_table = _np(lm.token_embedding.embeddings)
    assert np.abs(new_table - table).max() > 1e-3
    assert lm.output_dense is None


def test_keras_file_round_trip(tmp_path, lm):
    path = str(tmp_path / "lm.keras")
    lm.save(path)
    loaded = keras.saving.load_model(path)
    ids = np.array([[5, 6, 7, 0]], "int32")
    np.testing.assert_array_equal(_np(loaded(ids)), _np(lm(ids)))
    assert loaded.get_config() == lm.get_config()
    np.testing.assert_array_equal(loaded.generate(PROMPTS, 4)[0],
                                  lm.generate(PROMPTS, 4)[0])


def test_untied_head_and_learned_positions():
    lm = tiny_lm(seed=4, tie_output=False, positional_encoding="learned")
    assert lm.output_dense is not None
    ids, scores = lm.generate(PROMPTS[:2], 4)
    for row, prompt in enumerate(PROMPTS[:2]):
        want, want_score, scale = naive_greedy(lm, prompt,
                                               ids[row].tolist())
        assert ids[row, :len(want)].tolist() == want
        bounds.assert_close(scores[row], want_score,
                            terms=score_terms(lm, 4), scale=scale)


def _numpy_gelu(x):
    """Exact GELU, x·Φ(x) (Hendrycks and Gimpel), Φ from math.erf."""
    from math import erf, sqrt
    return x * 0.5 * (1.0 + np.vectorize(erf)(x / sqrt(2.0)))


def test_gelu_feed_forward_is_numpy_gelu_and_round_trips(tmp_path):
    lm = tiny_lm(seed=5, activation="gelu")
    ffn = lm.decoder.blocks[0].feed_forward
    x = np.random.default_rng(0).normal(size=(2, 3, 16)).astype("float32")
    w1, b1 = (_np(w) for w in ffn.inner_dense.weights)
    w2, b2 = (_np(w) for w in ffn.outer_dense.weights)
    want = _numpy_gelu(x.astype(np.float64) @ w1 + b1) @ w2 + b2
    # The two Dense sums (C, then F terms), their biases and the GELU.
    bounds.assert_close(_np(ffn(x)), want,
                        terms=lm.num_units + lm.ffn_units + 2 + GELU_OPS)
    path = str(tmp_path / "gelu.keras")
    lm.save(path)
    loaded = keras.saving.load_model(path)
    assert loaded.get_config()["activation"] == "gelu"
    ids = np.array([[5, 6, 7]], "int32")
    np.testing.assert_array_equal(_np(loaded(ids)), _np(lm(ids)))


def test_gpt2_embeddings_are_the_table_rows_unscaled():
    lm = tiny_lm(seed=6, scale_embeddings=False, positional_encoding="learned",
                 embeddings_initializer=keras.initializers.RandomNormal(
                     stddev=0.02))
    ids = np.array([[5, 6, 7]], "int32")
    table = _np(lm.token_embedding.embeddings)
    np.testing.assert_array_equal(_np(lm.token_embedding(ids)), table[ids])
    config = lm.get_config()
    assert config["scale_embeddings"] is False
    rebuilt = CausalLM.from_config(config)
    rebuilt(ids)
    assert rebuilt.token_embedding.scale is False


def _kernels(model):
    return {w.path: _np(w) for w in model.weights
            if w.path.endswith("/kernel")}


def test_kernel_initializer_draws_every_dense_kernel(tmp_path):
    # GPT-2 draws every projection from N(0, 0.02); Keras's glorot_uniform
    # gives these 16x16 .. 16x40 kernels a std of 0.16 to 0.25.
    gpt2 = keras.initializers.RandomNormal(stddev=0.02)
    lm = tiny_lm(seed=2, tie_output=False, kernel_initializer=gpt2)
    lm(np.array([[5, 6, 7]], "int32"))
    kernels = _kernels(lm)
    assert any("output_dense" in path for path in kernels)
    assert len(kernels) >= 7  # 4 attention, 2 feed-forward, 1 head
    for path, kernel in kernels.items():
        assert 0.012 < kernel.std() < 0.028, (path, kernel.std())
    # Each kernel draws its own values from the one initializer.
    first, second = list(kernels.values())[:2]
    assert not np.array_equal(first, second)
    glorot = _kernels(tiny_lm(seed=2))
    assert min(k.std() for k in glorot.values()) > 0.1
    config = lm.get_config()
    assert config["kernel_initializer"]["class_name"] == "RandomNormal"
    path = str(tmp_path / "init.keras")
    lm.save(path)
    loaded = keras.saving.load_model(path)
    assert loaded.kernel_initializer.stddev == 0.02


def test_kernel_initializer_is_refused_by_name():
    with pytest.raises(ValueError, match="kernel_initializer='nope'"):
        CausalLM(vocab_size=VOCAB, kernel_initializer="nope")


# --------------------------------------------------------------------------
# Samplers against NumPy.

def _numpy_nucleus(probs, p):
    order = np.argsort(-probs, kind="stable")
    mass = np.cumsum(probs[order])
    count = int(np.searchsorted(mass, p - 1e-7)) + 1
    keep = np.zeros(probs.shape, bool)
    keep[order[:count]] = True
    return keep


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9, 0.99, 1.0])
def test_nucleus_is_the_sorted_cumulative_sum_set(p):
    rng = np.random.default_rng(int(p * 100))
    logits = rng.normal(0, 2.0, (6, 50)).astype("float32")
    probs = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    got = _np(samplers.nucleus(ops.convert_to_tensor(probs), p))
    for row in range(6):
        np.testing.assert_array_equal(got[row], _numpy_nucleus(probs[row], p))


def _frequencies(sampler, logits, draws):
    log_probs = ops.convert_to_tensor(np.repeat(logits[None], draws, 0))
    tokens = _np(sampler.choose(log_probs, ops.convert_to_tensor([11, 0])))
    return np.bincount(tokens, minlength=logits.size) / draws


def _softmax(logits):
    return np.exp(logits) / np.exp(logits).sum()


def _top3(logits):
    kept = np.where(logits >= np.sort(logits)[-3], np.exp(logits), 0.0)
    return kept / kept.sum()


@pytest.mark.parametrize("sampler, expected", [
    (samplers.RandomSampler(), _softmax),
    (samplers.RandomSampler(temperature=2.0), lambda x: _softmax(x / 2)),
    (samplers.TopKSampler(3), _top3),
    (samplers.TopPSampler(0.7), None),
])
def test_draw_frequencies_follow_the_distribution(sampler, expected):
    logits = np.log(np.array([0.05, 0.4, 0.25, 0.15, 0.1, 0.05], "float32"))
    if expected is None:  # the nucleus {0.4, 0.25, 0.15}, renormalised
        want = np.array([0, 0.4, 0.25, 0.15, 0, 0]) / 0.8
    else:
        want = expected(logits.astype(np.float64))
    draws = 20000
    got = _frequencies(sampler, logits, draws)
    bounds.assert_sampled(got, want, draws)


def test_greedy_sampler_takes_the_lowest_of_tied_ids():
    log_probs = ops.convert_to_tensor(np.array([[0.1, 0.5, 0.5, 0.2]],
                                               "float32"))
    assert _np(samplers.GreedySampler().choose(log_probs, None)).tolist() == [1]


# --------------------------------------------------------------------------
# Bad input: one ValueError naming the argument and the value.

@pytest.mark.parametrize("kwargs, match", [
    (dict(prompts=[[5] * 48]), "prompts.*48 tokens"),
    (dict(prompts=[[5, 6], []]), "prompts.*prompt 1: empty"),
    (dict(prompts=[[5, 0, 6]]), "prompts.*holding 0"),
    (dict(prompts=[[5, VOCAB]]), f"prompts.*holding {VOCAB}"),
    (dict(prompts="hello"), "prompts"),
    (dict(prompts=np.ones((2, 3), "float32")), "prompts.*float32"),
    (dict(max_new_tokens=0), "max_new_tokens=0"),
    (dict(max_new_tokens=-3), "max_new_tokens=-3"),
    (dict(max_new_tokens=46), "max_new_tokens.*at most 45"),
    (dict(sampler="nucleus"), "sampler='nucleus'"),
    (dict(seed="x"), "seed='x'"),
    (dict(stop_token_ids=(-1,)), "eos_id|stop_token_ids"),
])
def test_generate_refuses_bad_arguments(lm, kwargs, match):
    args = dict(prompts=[[5, 6, 7]], max_new_tokens=4)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        lm.generate(**args)


@pytest.mark.parametrize("make, match", [
    (lambda: samplers.RandomSampler(temperature=0), "temperature=0"),
    (lambda: samplers.RandomSampler(temperature=-1.0), "temperature=-1.0"),
    (lambda: samplers.TopPSampler(0.0), "`p`.*p=0.0"),
    (lambda: samplers.TopPSampler(1.5), "`p`.*p=1.5"),
    (lambda: samplers.TopKSampler(0), "`k`.*k=0"),
    (lambda: samplers.get("top_k", k=2, p=0.5), "p=0.5"),
    (lambda: samplers.get("beamz"), "sampler='beamz'"),
])
def test_samplers_refuse_bad_arguments(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_top_k_above_the_vocabulary_is_refused(lm):
    with pytest.raises(ValueError, match=f"at most the vocabulary's {VOCAB}"):
        lm.generate([[5, 6]], 3, sampler=samplers.TopKSampler(VOCAB + 1))


@pytest.mark.parametrize("kwargs, match", [
    (dict(vocab_size=0), "vocab_size=0"),
    (dict(num_units=15), "num_units.*multiple of num_heads"),
    (dict(normalize_first="yes"), "normalize_first='yes'"),
    (dict(flavor="reference_2019", tie_output=False), "tie_output"),
    (dict(activation="swirl"), "activation='swirl'"),
    (dict(scale_embeddings="no"), "scale_embeddings='no'"),
    (dict(flavor="reference_2019", scale_embeddings=False),
     "reference fixes.*scale_embeddings=False"),
    (dict(flavor="reference_2019", activation="gelu"),
     "reference fixes.*activation='gelu'"),
    (dict(tie_output=1), r"`tie_output`.*bool or None.*tie_output=1"),
    (dict(tie_output="no"), r"`tie_output`.*tie_output='no'"),
    (dict(seed=True), r"`seed`.*None or an int.*seed=True"),
    (dict(seed=2.5), r"`seed`.*seed=2.5"),
    (dict(seed=float("inf")), r"`seed`.*seed=inf"),
    (dict(seed=[1]), r"`seed`.*seed=\[1\]"),
])
def test_constructor_refuses_bad_arguments(kwargs, match):
    args = dict(vocab_size=VOCAB, num_layers=1, num_units=16, num_heads=2,
                ffn_units=32)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        CausalLM(**args)
