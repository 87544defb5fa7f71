"""Backend-neutral tests of `tfattn.decoding` and `tfattn.Transformer`.

They use NumPy, Keras, `keras.ops` and tfattn only, and pass under the
backend Keras runs on (`KERAS_BACKEND=tensorflow` or `jax`):

- the searches on a toy model whose logits come from a fixed NumPy table (a
  second-order Markov chain), against NumPy searches written here: greedy
  as the argmax chain, beam search against an exhaustive search of every
  sequence (tiny vocabulary and length) under the same length penalty;
- the Transformer's logits against the NumPy composition of
  tests/reference_numpy.py; `generate` against a step-by-step argmax over
  the full, uncached forward pass (cache correctness), and beam scores
  against a rescoring by the full forward pass (beam reordering of the
  cache); `fit` on a tiny copy task; `jax.jit` of a decode (JAX only);
- a `.keras` file saved under the running backend loads under the other
  one with the same logits (in a subprocess).
"""

import importlib.util
import os
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
from keras import ops

import tfattn
from tests import bounds
from tests import reference_numpy as ref
from tests.harness import dense_params
from tests.harness import norm_params
from tfattn.decoding import beam_search
from tfattn.decoding import greedy_search
from tfattn.decoding import samplers
from tfattn.models.transformer import BOS_ID
from tfattn.models.transformer import EOS_ID
from tfattn.models.transformer import PAD_ID

BACKEND = keras.config.backend()
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A one-token target gives keras' "softmax over an axis of size 1" warning.
pytestmark = pytest.mark.filterwarnings(
    "ignore:You are using a softmax over axis"
)


def _np(x):
    return np.asarray(ops.convert_to_numpy(x))


def _jit(fn):
    """`fn` compiled whole: `jax.jit` or `tf.function(jit_compile=True)`."""
    if BACKEND == "jax":
        import jax

        return jax.jit(fn)
    if BACKEND == "tensorflow":
        import tensorflow as tf

        return tf.function(fn, jit_compile=True)
    pytest.skip(f"no whole-function compiler tested for {BACKEND}")


# --------------------------------------------------------------------------
# The searches on a Markov chain. Token 0 is the start / pad token, masked
# out of the outputs with a -1e9 logit; token 1 is EOS.

START, EOS, MASK = 0, 1, -1e9
VOCAB, LENGTH, ROWS = 4, 4, [0, 1, 2]
# Elementwise float operations of the GNMT length penalty and its use:
# 5 + n, / 6, ** alpha, then the score's division.
PENALTY_OPS = 4
# To a search's score on the chain: the logits' three terms summed (table,
# position, counter) and the EOS bonus, the log-softmax over the
# vocabulary, the sum over the LENGTH steps and the length penalty.
MARKOV_TERMS = 3 + VOCAB + LENGTH + PENALTY_OPS


def random_tables(seed, rows=3, vocab=VOCAB, length=LENGTH):
    """Logits `table[row, p2, p1] + pos[t] + cnt[c]` after tokens (p2, p1)
    at position t, where c is a call counter carried in the cache (equal to
    t when the cache is threaded correctly)."""
    rng = np.random.default_rng(seed)
    table = rng.normal(0.0, 1.5, (rows, vocab, vocab, vocab))
    table[..., START] = MASK
    pos = rng.normal(0.0, 0.3, (length, vocab))
    cnt = rng.normal(0.0, 0.3, (length, vocab))
    return tuple(t.astype("float32") for t in (table, pos, cnt))


def markov_model(tables, eos_at=None):
    """(step_fn, initial cache) of the chain; with `eos_at` [rows], row r
    gets a +20 EOS bonus from position eos_at[r] on. p2 comes from the
    cache, so a wrong beam reorder of the cache changes the result; the
    row index passes through unchanged (never gathered by beam search)."""
    table, pos, cnt = tables
    vocab = table.shape[-1]
    flat = ops.convert_to_tensor(table.reshape(-1, vocab))
    pos, cnt = ops.convert_to_tensor(pos), ops.convert_to_tensor(cnt)
    bonus = 20.0 * np.eye(vocab, dtype="float32")[EOS]

    def step_fn(ids, position, cache):
        prev2, count = cache["state"]
        index = (cache["row"] * vocab + prev2) * vocab + ids
        logits = (ops.take(flat, index, axis=0)
                  + ops.take(pos, position, axis=0)[None, :]
                  + ops.take(cnt, count, axis=0))
        if eos_at is not None:
            stops = ops.take(ops.convert_to_tensor(eos_at, "int32"),
                             cache["row"], axis=0)
            logits = logits + ops.where(
                (stops <= position)[:, None], bonus, 0.0)
        return logits, {"row": cache["row"], "state": (ids, count + 1)}

    rows = len(table) if eos_at is None else len(eos_at)
    row = ops.arange(rows, dtype="int32")
    zeros = ops.zeros((rows,), "int32")
    return step_fn, {"row": row, "state": (zeros, zeros)}


def logit_magnitude(tables):
    """The largest |logit| the chain can give (masked ones aside): the
    scale at which each step's log-probability rounds."""
    table, pos, cnt = tables
    return (np.abs(table[table > MASK / 2]).max() + np.abs(pos).max()
            + np.abs(cnt).max())


def np_log_probs(tables, row, prev2, prev1, t):
    table, pos, cnt = tables
    logits = (table[row, prev2, prev1] + pos[t] + cnt[t]).astype(np.float64)
    top = logits.max()
    return logits - top - np.log(np.sum(np.exp(logits - top)))


def length_penalty(length, alpha):
    return ((5.0 + length) / 6.0) ** alpha


def np_greedy(tables, row, limit):
    ids, score, prev2, prev1 = [], 0.0, START, START
    for t in range(limit):
        lp = np_log_probs(tables, row, prev2, prev1, t)
        tok = int(np.argmax(lp))
        ids.append(tok)
        score += lp[tok]
        if tok == EOS:
            break
        prev2, prev1 = prev1, tok
    return ids + [0] * (LENGTH - len(ids)), score


def np_best_beam(tables, row, limit, alpha):
    """The best of every sequence the chain can emit (EOS-ended, or cut at
    `limit`), by `log_prob / length_penalty`."""
    scored = []

    def walk(prefix, logp, prev2, prev1):
        lp = np_log_probs(tables, row, prev2, prev1, len(prefix))
        for tok in range(1, VOCAB):  # Token 0 is masked.
            seq, s = prefix + [tok], logp + lp[tok]
            if tok == EOS or len(seq) == limit:
                scored.append((s / length_penalty(len(seq), alpha), seq))
            else:
                walk(seq, s, prev1, tok)

    walk([], 0.0, START, START)
    scored.sort(key=lambda x: -x[0])
    # No near-tie for the best sequence: float32 could pick either.
    assert scored[0][0] - scored[1][0] > 1e-3
    best_score, best = scored[0]
    return best + [0] * (LENGTH - len(best)), best_score


@pytest.fixture(scope="module")
def tables():
    return random_tables(0)


def test_greedy_matches_numpy(tables):
    step_fn, cache = markov_model(tables)
    limits = [4, 2, 3]
    ids, scores = greedy_search(
        step_fn, ops.zeros((3,), "int32"), cache, LENGTH, EOS,
        max_lengths=np.array(limits, "int32"))
    assert keras.backend.standardize_dtype(ids.dtype) == "int32"
    assert keras.backend.standardize_dtype(scores.dtype) == "float32"
    assert tuple(ids.shape) == (3, LENGTH) and tuple(scores.shape) == (3,)
    for r, limit in zip(ROWS, limits):
        want_ids, want_score = np_greedy(tables, r, limit)
        np.testing.assert_array_equal(_np(ids)[r], want_ids)
        # Each of the n steps' log-probabilities at the logits' scale.
        n = int(np.sum(np.asarray(want_ids) != 0))
        bounds.assert_close(_np(scores)[r], want_score, terms=MARKOV_TERMS,
                            scale=n * logit_magnitude(tables))


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.5])
def test_exhaustive_beam_matches_brute_force(tables, alpha):
    # K = 32 keeps every one of the 31 sequences the chain can emit.
    step_fn, cache = markov_model(tables)
    limits = [4, 2, 3]
    ids, scores = beam_search(
        step_fn, ops.zeros((3,), "int32"), cache, LENGTH, EOS,
        beam_size=32, alpha=alpha, max_lengths=np.array(limits, "int32"))
    for r, limit in zip(ROWS, limits):
        want_ids, want_score = np_best_beam(tables, r, limit, alpha)
        np.testing.assert_array_equal(_np(ids)[r], want_ids)
        n = int(np.sum(np.asarray(want_ids) != 0))
        bounds.assert_close(
            _np(scores)[r], want_score, terms=MARKOV_TERMS,
            scale=n * logit_magnitude(tables) / length_penalty(n, alpha))


@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_max_lengths_clipped_and_eos_padding(search):
    # Rows 0-4: EOS never wins (-10), token 3 always does; limits are
    # clipped to [1, LENGTH] and no EOS is forced at the limit.
    # Rows 5-6: EOS wins from position 0 / 2 on; zeros follow it.
    table = np.zeros((7, VOCAB, VOCAB, VOCAB), "float32")
    table[..., START], table[..., EOS], table[..., 3] = MASK, -10.0, 1.0
    zeros = np.zeros((LENGTH, VOCAB), "float32")
    step_fn, cache = markov_model(
        (table, zeros, zeros), eos_at=[9, 9, 9, 9, 9, 0, 2])
    limits = np.array([2, 4, 3, 9, 0, 4, 4], "int32")
    args = (step_fn, ops.zeros((7,), "int32"), cache, LENGTH, EOS)
    if search == "greedy":
        ids, scores = greedy_search(*args, max_lengths=limits)
    else:
        ids, scores = beam_search(*args, beam_size=3, max_lengths=limits)
    clipped = np.clip(limits[:5], 1, LENGTH)
    want = (np.arange(LENGTH)[None, :] < clipped[:, None]) * 3
    np.testing.assert_array_equal(_np(ids)[:5], want)
    np.testing.assert_array_equal(
        _np(ids)[5:], [[1, 0, 0, 0], [3, 3, 1, 0]])
    step = 1.0 - np.log(np.exp(1.0) + 1.0 + np.exp(-10.0))
    want_scores = clipped * step
    scale = clipped * logit_magnitude((table, zeros, zeros))
    if search == "beam":
        want_scores = want_scores / length_penalty(clipped, 0.6)
        scale = scale / length_penalty(clipped, 0.6)
    bounds.assert_close(_np(scores)[:5], want_scores, terms=MARKOV_TERMS,
                        scale=scale)
    assert np.all(_np(scores)[5:] <= 0.0)


@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_searches_compile_whole(tables, search):
    """The whole search compiles as one function (`jax.jit`, or XLA under
    TensorFlow) and gives the eager result."""
    step_fn, cache = markov_model(tables)
    limits = np.array([4, 2, 3], "int32")

    def run(start, cache, limits):
        if search == "greedy":
            return greedy_search(step_fn, start, cache, LENGTH, EOS, limits)
        return beam_search(step_fn, start, cache, LENGTH, EOS, beam_size=3,
                           max_lengths=limits)

    start = ops.zeros((3,), "int32")
    want_ids, want_scores = run(start, cache, limits)
    ids, scores = _jit(run)(start, cache, ops.convert_to_tensor(limits))
    np.testing.assert_array_equal(_np(ids), _np(want_ids))
    # At most `limits` steps per row, each at the logits' scale.
    bounds.assert_close(_np(scores), _np(want_scores), terms=MARKOV_TERMS,
                        scale=limits * logit_magnitude(tables))


# --------------------------------------------------------------------------
# The Transformer (flavour reference_2019: tests/reference_numpy.py holds
# its whole-model NumPy composition).

V, C, H, F, N, L = 11, 8, 2, 16, 2, 8
SOURCE = np.array([[4, 5, 6, 7, 0], [8, 9, 10, 5, 4]], "int32")
TARGET_IN = np.array([[BOS_ID, 5, 6, 9, 0], [BOS_ID, 4, 7, 7, 10]], "int32")


def model_terms(length):
    """`bounds.assert_close` terms of one logit or log-probability of
    `tiny_transformer` over at most `length` keys: `bounds.stack_terms` of
    its N encoder and N decoder blocks and the decoder's N cross-attentions
    (each a block), the projection to the V logits and their log-softmax."""
    return bounds.stack_terms(3 * N, C, F, length, V)


# To a generation score: the log-probabilities over the L-long buffer,
# their sum over at most L steps and the length penalty.
SCORE_TERMS = model_terms(L) + L + PENALTY_OPS


def tiny_transformer(seed=1, scale=0.4, biases=True):
    """A built reference_2019 Transformer, its weights drawn from NumPy
    (biases and layer-norm betas zero unless `biases`)."""
    model = tfattn.Transformer(
        V, num_layers=N, num_units=C, num_heads=H, ffn_units=F,
        flavor="reference_2019", max_length=L, dropout_rate=0.0)
    model((SOURCE, TARGET_IN))
    rng = np.random.default_rng(seed)
    for w in model.weights:
        value = scale * rng.normal(size=w.shape).astype("float32")
        if not biases and w.path.endswith(("/bias", "/beta")):
            value = np.zeros_like(value)
        w.assign(value)
    return model


@pytest.fixture(scope="module")
def model():
    return tiny_transformer()


@pytest.fixture(scope="module")
def decoder_model():
    """Random biases and betas add a term to the logits that does not depend
    on the input, so every position of every row emits the same token.
    Without them (this seed) greedy ends its rows with EOS at positions 4
    and 2, and beam search (K=3) finds a longer first row than greedy."""
    return tiny_transformer(seed=2, scale=0.5, biases=False)


def _attention_params(attention):
    params = {}
    for key, name in (("q", "query"), ("k", "key"), ("v", "value")):
        dense = getattr(attention, f"{name}_dense")
        params["w" + key], params["b" + key] = dense_params(dense)
    params["gamma"], params["beta"] = norm_params(attention.layer_norm)
    return params


def _block_params(block):
    (w1, b1), (w2, b2) = (dense_params(block.feed_forward.inner_dense),
                          dense_params(block.feed_forward.outer_dense))
    gamma, beta = norm_params(block.feed_forward_layer_norm)
    params = {
        "self": _attention_params(block.self_attention),
        "ffn": dict(w1=w1, b1=b1, w2=w2, b2=b2, gamma=gamma, beta=beta),
    }
    if getattr(block, "cross_attention", None) is not None:
        params["cross"] = _attention_params(block.cross_attention)
    return params


def test_forward_pass_matches_numpy(model):
    params = {
        "encoder": [_block_params(b) for b in model.encoder.blocks],
        "decoder": [_block_params(b) for b in model.decoder.blocks],
        "embeddings": _np(model.source_embedding.embeddings),
    }
    want = ref.transformer_reference_2019(params, SOURCE, TARGET_IN, H)
    got = _np(model((SOURCE, TARGET_IN)))
    bounds.assert_close(got, want, terms=model_terms(SOURCE.shape[1]))


def _full_log_probs(model, source, target_in):
    """(log-softmax of the full forward pass's logits, float64, with the
    padding id excluded as `decode_step` excludes it; the largest |logit|
    at each position [B, T], the scale at which its log-probabilities
    round)."""
    logits = _np(model((source, target_in))).astype(np.float64)
    logits[..., PAD_ID] = -np.inf
    magnitudes = np.abs(np.delete(logits, PAD_ID, axis=-1)).max(-1)
    top = logits.max(axis=-1, keepdims=True)
    return logits - top - np.log(
        np.sum(np.exp(logits - top), axis=-1, keepdims=True)), magnitudes


def _logit_scale(model, source, ids, alpha):
    """The scale of each row's generation score: the sum of the logits'
    magnitudes over its tokens' steps (the full forward pass on [BOS] +
    ids), divided by its length penalty."""
    ids = _np(ids)
    target_in = np.concatenate(
        [np.full((len(ids), 1), BOS_ID, "int32"), ids[:, :-1]], axis=1)
    _, magnitudes = _full_log_probs(model, source, target_in)
    lengths = np.sum(ids != 0, axis=1)
    return np.sum(magnitudes * (ids != 0), axis=1) / length_penalty(
        lengths, alpha)


def naive_greedy(model, source, steps):
    """Greedy decoding by argmax over the uncached forward pass, re-run on
    the whole prefix at every position. The prefix sits in a fixed buffer
    of `steps` positions, padded after it (causal attention keeps the
    padding from the prefix's positions), so the call keeps one shape."""
    rows = len(source)
    target = np.zeros((rows, steps), "int32")
    target[:, 0] = BOS_ID
    ids = np.zeros((rows, steps), "int32")
    scores, done = np.zeros(rows), np.zeros(rows, bool)
    for t in range(steps):
        lp = _full_log_probs(model, source, target)[0][:, t]
        token = np.argmax(lp, axis=-1)
        top2 = np.sort(lp, axis=-1)[:, -2:]
        # No near-tie where it matters: float32 could pick either token.
        assert np.all((top2[:, 1] - top2[:, 0])[~done] > 1e-3)
        scores += np.where(done, 0.0, lp[np.arange(rows), token])
        ids[:, t] = np.where(done, 0, token)
        done |= token == EOS_ID
        if t + 1 < steps:
            target[:, t + 1] = np.where(done, EOS_ID, token)
    return ids, scores


# `generate` runs the plain graph under TensorFlow here (`jit_compile` is
# not the point; JAX compiles either way); test_generate_compiles_whole
# compares the compiled search with it, reusing its compiled searches.
PLAIN = dict(jit_compile=False)


def test_cached_greedy_equals_uncached_argmax(decoder_model):
    model = decoder_model
    ids, scores = model.generate(SOURCE, sampler="greedy", **PLAIN)
    want_ids, want_scores = naive_greedy(model, SOURCE, L)
    # Not a degenerate case: several tokens, and each row ends with EOS.
    assert len(set(want_ids[want_ids > 0])) > 1
    assert np.sum(want_ids == EOS_ID) == len(want_ids)
    np.testing.assert_array_equal(_np(ids), want_ids)
    bounds.assert_close(_np(scores), want_scores, terms=SCORE_TERMS,
                        scale=_logit_scale(model, SOURCE, want_ids, 0.0))


def test_beam_scores_are_their_full_forward_scores(decoder_model):
    model = decoder_model
    ids, scores = model.generate(SOURCE,
                                 sampler=samplers.BeamSampler(3, 0.6),
                                 **PLAIN)
    ids = _np(ids)
    # The full forward pass on [BOS] + ids; positions after the end are
    # padding, which causal attention keeps from earlier positions.
    target_in = np.concatenate(
        [np.full((len(ids), 1), BOS_ID, "int32"), ids[:, :-1]], axis=1)
    lp, _ = _full_log_probs(model, SOURCE, target_in)
    scale = _logit_scale(model, SOURCE, ids, 0.6)
    for r, row in enumerate(ids):
        n = int(np.sum(row != 0))
        assert np.all(row[:n] != 0) and np.all(row[n:] == 0)
        assert n == L or row[n - 1] == EOS_ID
        want = sum(lp[r, t, row[t]] for t in range(n)) / length_penalty(
            n, 0.6)
        bounds.assert_close(_np(scores)[r], want, terms=SCORE_TERMS,
                            scale=scale[r])


@pytest.mark.parametrize("beam_size", [1, 3])
def test_generate_compiles_whole(decoder_model, beam_size):
    """`search` compiled whole (XLA under TensorFlow) gives `generate`'s
    result (the plain graph under TensorFlow: XLA against plain)."""
    model = decoder_model
    sampler = samplers.for_beam_size(beam_size)
    want_ids, want_scores = model.generate(SOURCE, sampler=sampler, **PLAIN)
    width = want_ids.shape[1]
    ids, scores = _jit(lambda s: model.search(s, width, sampler))(
        ops.convert_to_tensor(SOURCE))
    np.testing.assert_array_equal(_np(ids), _np(want_ids))
    alpha = getattr(sampler, "alpha", 0.0)
    bounds.assert_close(_np(scores), _np(want_scores), terms=SCORE_TERMS,
                        scale=_logit_scale(model, SOURCE, want_ids, alpha))


def test_fit_lowers_the_loss_on_a_copy_task():
    # Unbuilt: `fit` builds the model from the first batch.
    model = tfattn.Transformer(
        V, num_layers=1, num_units=C, num_heads=H, ffn_units=F,
        max_length=L, dropout_rate=0.0)
    rng = np.random.default_rng(0)
    source = rng.integers(4, V, (32, 5)).astype("int32")
    target_in = np.concatenate(
        [np.full((32, 1), BOS_ID, "int32"), source[:, :-1]], axis=1)
    model.compile(
        optimizer=keras.optimizers.Adam(1e-2),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit((source, target_in), source, batch_size=16,
                        epochs=15, shuffle=False, verbose=0)
    losses = history.history["loss"]
    assert np.all(np.isfinite(losses))
    assert losses[-1] < 0.8 * losses[0]


def test_keras_file_loads_under_the_other_backend(tmp_path):
    other = "jax" if BACKEND == "tensorflow" else "tensorflow"
    if importlib.util.find_spec(other) is None:
        pytest.skip(f"{other} is not installed")
    model = tiny_transformer(seed=3)
    path = tmp_path / "tiny.keras"
    model.save(path)
    want = _np(model((SOURCE, TARGET_IN)))
    np.save(tmp_path / "source.npy", SOURCE)
    np.save(tmp_path / "target_in.npy", TARGET_IN)
    script = textwrap.dedent(f"""
        import keras
        import numpy as np
        import tfattn  # Registers tfattn>Transformer.

        assert keras.config.backend() == {other!r}
        model = keras.saving.load_model({str(path)!r})
        source = np.load({str(tmp_path / "source.npy")!r})
        target_in = np.load({str(tmp_path / "target_in.npy")!r})
        logits = keras.ops.convert_to_numpy(model((source, target_in)))
        np.save({str(tmp_path / "logits.npy")!r}, logits)
    """)
    if other == "jax":
        # As where TensorFlow is not installed: Keras's serialization asks
        # whether it is (`tf.available`), and would import it (3.4 s).
        script = "import sys\nsys.modules['tensorflow'] = None\n" + script
    env = dict(os.environ, KERAS_BACKEND=other, TF_CPP_MIN_LOG_LEVEL="2")
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    got = np.load(tmp_path / "logits.npy")
    # Same float32 weights and math; only the kernels' summation order
    # differs (oneDNN / Eigen against XLA).
    bounds.assert_close(got, want, terms=model_terms(SOURCE.shape[1]))
