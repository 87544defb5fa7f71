"""Tests for `tfattn.decoding` against brute-force NumPy searches.

The toy model is a second-order Markov chain: the logits of row r at
position t after tokens (p2, p1) are `table[r, p2, p1] + pos[t] + cnt[c]`,
where p2 comes from the cache (so a wrong beam reorder of the cache changes
the result) and c is a call counter carried in the cache (equal to t when
the cache is threaded correctly). Token 0 is the start / pad token and is
masked out of the outputs with a -1e9 logit; token 1 is EOS.
"""

import itertools

import numpy as np
import pytest
import tensorflow as tf

from tests import bounds
from tfattn.decoding import beam_search
from tfattn.decoding import greedy_search

EOS = 1
START = 0
MASK = -1e9


def make_model(table, pos, cnt, calls=None, logits_dtype=tf.float32):
    """Returns (step_fn, initial_cache_fn) for tables [R, V, V, V], [L, V]."""
    table = tf.constant(table, tf.float32)
    pos = tf.constant(pos, tf.float32)
    cnt = tf.constant(cnt, tf.float32)

    def step_fn(ids, position, cache):
        if calls is not None:
            calls.assign_add(1)
        prev2, count = cache["state"]
        logits = (
            tf.gather_nd(table, tf.stack([cache["row"], prev2, ids], axis=1))
            + tf.gather(pos, position)[None, :]
            + tf.gather(cnt, count)
        )
        new_cache = {"row": cache["row"], "state": (ids, count + 1)}
        return tf.cast(logits, logits_dtype), new_cache

    def initial_cache(rows):
        rows = tf.constant(rows, tf.int32)
        start = tf.fill(tf.shape(rows), START)
        return {"row": rows, "state": (start, tf.zeros_like(rows))}

    return step_fn, initial_cache


def random_tables(seed, rows, vocab, length, scale=1.5):
    rng = np.random.default_rng(seed)
    table = rng.normal(0.0, scale, (rows, vocab, vocab, vocab))
    table[..., START] = MASK
    pos = rng.normal(0.0, 0.3, (length, vocab))
    cnt = rng.normal(0.0, 0.3, (length, vocab))
    return (
        table.astype(np.float32),
        pos.astype(np.float32),
        cnt.astype(np.float32),
    )


def np_log_probs(tables, row, prev2, prev1, t):
    table, pos, cnt = tables
    logits = (table[row, prev2, prev1] + pos[t] + cnt[t]).astype(np.float64)
    return (
        logits - np.log(np.sum(np.exp(logits - logits.max()))) - (logits.max())
    )


def length_penalty(length, alpha):
    return ((5.0 + length) / 6.0) ** alpha


def np_greedy(tables, row, limit, length):
    ids, score, prev2, prev1 = [], 0.0, START, START
    for t in range(limit):
        lp = np_log_probs(tables, row, prev2, prev1, t)
        tok = int(np.argmax(lp))
        ids.append(tok)
        score += lp[tok]
        if tok == EOS:
            break
        prev2, prev1 = prev1, tok
    return ids + [0] * (length - len(ids)), score


def np_all_sequences(tables, row, limit):
    """Every (ids, log_prob) the model can emit: EOS-ended or truncated."""
    vocab = tables[0].shape[-1]
    out = []

    def walk(prefix, logp, prev2, prev1):
        t = len(prefix)
        lp = np_log_probs(tables, row, prev2, prev1, t)
        for tok in range(1, vocab):  # Token 0 is masked.
            seq, s = prefix + [tok], logp + lp[tok]
            if tok == EOS or len(seq) == limit:
                out.append((seq, s))
            else:
                walk(seq, s, prev1, tok)

    walk([], 0.0, START, START)
    return out


def np_best_beam(tables, row, limit, length, alpha):
    scored = sorted(
        (
            (s / length_penalty(len(seq), alpha), seq)
            for seq, s in np_all_sequences(tables, row, limit)
        ),
        key=lambda x: -x[0],
    )
    # The test tables must not have a near-tie for the best sequence.
    assert scored[0][0] - scored[1][0] > 1e-3
    best_score, best = scored[0]
    return best + [0] * (length - len(best)), best_score


def np_sequence_score(tables, row, ids, alpha):
    ids = [int(i) for i in ids]
    n = ids.index(EOS) + 1 if EOS in ids else len(ids)
    while n > 0 and ids[n - 1] == 0:
        n -= 1
    prev2, prev1, s = START, START, 0.0
    for t in range(n):
        s += np_log_probs(tables, row, prev2, prev1, t)[ids[t]]
        prev2, prev1 = prev1, ids[t]
    return s / length_penalty(n, alpha)


LENGTH = 4
VOCAB = 4
ROWS = [0, 1, 2]


def score_terms(length=LENGTH):
    """`bounds.assert_close` terms of a sequence score: the logits' two
    float32 additions, a log-softmax over the VOCAB logits at each step,
    the sum over the `length` steps, then the length penalty's four
    operations ((5 + n) / 6, ** alpha, the division)."""
    return 2 + VOCAB + length + 4


@pytest.fixture(scope="module")
def tables():
    return random_tables(0, len(ROWS), VOCAB, LENGTH)


def test_greedy_matches_numpy(tables):
    step_fn, init = make_model(*tables)
    ids, scores = greedy_search(
        step_fn, tf.fill([3], START), init(ROWS), LENGTH, EOS
    )
    for r in ROWS:
        want_ids, want_score = np_greedy(tables, r, LENGTH, LENGTH)
        np.testing.assert_array_equal(ids[r], want_ids)
        bounds.assert_close(scores[r], want_score, terms=score_terms())
    assert ids.dtype == tf.int32 and scores.dtype == tf.float32
    assert ids.shape == (3, LENGTH) and scores.shape == (3,)


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.5])
def test_exhaustive_beam_matches_brute_force(tables, alpha):
    # K = 32 keeps every one of the 31 possible sequences.
    step_fn, init = make_model(*tables)
    limits = [4, 2, 3]
    ids, scores = beam_search(
        step_fn,
        tf.fill([3], START),
        init(ROWS),
        LENGTH,
        EOS,
        beam_size=32,
        alpha=alpha,
        max_lengths=tf.constant(limits),
    )
    for r, limit in zip(ROWS, limits):
        want_ids, want_score = np_best_beam(tables, r, limit, LENGTH, alpha)
        np.testing.assert_array_equal(ids[r], want_ids)
        bounds.assert_close(scores[r], want_score, terms=score_terms())


@pytest.mark.parametrize("beam_size", [2, 3])
def test_small_beam_score_is_its_sequence_score(tables, beam_size):
    step_fn, init = make_model(*tables)
    ids, scores = beam_search(
        step_fn, tf.fill([3], START), init(ROWS), LENGTH, EOS, beam_size
    )
    for r in ROWS:
        want = np_sequence_score(tables, r, ids[r].numpy(), 0.6)
        bounds.assert_close(scores[r], want, terms=score_terms())
        # A beam is never worse than greedy's sequence under the same score
        # (up to the rounding of its own).
        greedy_ids, _ = np_greedy(tables, r, LENGTH, LENGTH)
        assert scores[r] >= np_sequence_score(
            tables, r, greedy_ids, 0.6
        ) - bounds.bound(score_terms(), abs(float(scores[r])))


def test_beam_beats_suboptimal_greedy():
    # First-order table: after START, token 2 (p=.5) beats 3 (p=.45), but
    # after 2 the best is EOS at p=.34, while after 3 EOS has p=.99.
    probs = np.full((VOCAB, VOCAB), 1e-9)
    probs[START, 1:] = [0.05, 0.5, 0.45]
    probs[2, 1:] = [0.34, 0.33, 0.33]
    probs[3, 1:] = [0.99, 0.005, 0.005]
    probs[1, 1:] = [1.0, 1e-9, 1e-9]
    table = np.broadcast_to(np.log(probs), (1, VOCAB, VOCAB, VOCAB)).copy()
    zeros = np.zeros((LENGTH, VOCAB), np.float32)
    step_fn, init = make_model(table, zeros, zeros)
    start = tf.fill([1], START)

    greedy_ids, greedy_scores = greedy_search(
        step_fn, start, init([0]), LENGTH, EOS
    )
    beam_ids, beam_scores = beam_search(
        step_fn, start, init([0]), LENGTH, EOS, beam_size=2, alpha=0.0
    )
    np.testing.assert_array_equal(greedy_ids, [[2, 1, 0, 0]])
    np.testing.assert_array_equal(beam_ids, [[3, 1, 0, 0]])
    # The table's rounding to float32 (one operation), a log-softmax over
    # VOCAB per step and the sum over the steps.
    terms = 1 + VOCAB + LENGTH
    bounds.assert_close(greedy_scores, np.log([0.5 * 0.34]), terms=terms)
    bounds.assert_close(beam_scores, np.log([0.45 * 0.99]), terms=terms)
    assert beam_scores[0] > greedy_scores[0]
    # With the paper's settings both have length 2: same ranking.
    ids, _ = beam_search(step_fn, start, init([0]), LENGTH, EOS)
    np.testing.assert_array_equal(ids, [[3, 1, 0, 0]])


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_beam_size_one_alpha_zero_equals_greedy(seed):
    length, rows = 6, list(range(5))
    tables = random_tables(seed, len(rows), VOCAB, length, scale=1.0)
    step_fn, init = make_model(*tables)
    start = tf.fill([len(rows)], START)
    limits = tf.constant([6, 1, 3, 5, 2])
    for max_lengths in (None, limits):
        g_ids, g_scores = greedy_search(
            step_fn, start, init(rows), length, EOS, max_lengths
        )
        b_ids, b_scores = beam_search(
            step_fn,
            start,
            init(rows),
            length,
            EOS,
            beam_size=1,
            alpha=0.0,
            max_lengths=max_lengths,
        )
        np.testing.assert_array_equal(b_ids, g_ids)
        bounds.assert_close(b_scores, g_scores, terms=score_terms(length))


def eos_at_model(stop_positions, length, calls):
    """Row r emits 2 before position stop_positions[r], then EOS."""
    rows = len(stop_positions)
    table = np.zeros((rows, VOCAB, VOCAB, VOCAB), np.float32)
    table[..., START] = MASK
    table[..., 2] = 5.0
    zeros = np.zeros((length, VOCAB), np.float32)
    step_fn, init = make_model(table, zeros, zeros, calls=calls)
    stops = tf.constant(stop_positions, tf.int32)

    def eos_step_fn(ids, position, cache):
        logits, new_cache = step_fn(ids, position, cache)
        eos_now = tf.gather(stops, cache["row"]) <= position
        bonus = tf.where(eos_now, 20.0, 0.0)[:, None] * tf.one_hot(EOS, VOCAB)
        return logits + bonus, new_cache

    return eos_step_fn, init(list(range(rows)))


def run_in_mode(fn, mode):
    if mode == "eager":
        return fn()
    return tf.function(fn, jit_compile=(mode == "jit"))()


@pytest.mark.parametrize(
    "mode",
    [
        "eager",
        pytest.param("graph", marks=pytest.mark.slow),
        pytest.param("jit", marks=pytest.mark.slow),
    ],
)
def test_greedy_early_stop_and_padding(mode):
    calls = tf.Variable(0, dtype=tf.int32)
    step_fn, cache = eos_at_model([0, 2], 8, calls)
    ids, scores = run_in_mode(
        lambda: greedy_search(step_fn, tf.fill([2], START), cache, 8, EOS),
        mode,
    )
    assert int(calls.numpy()) == 3  # Positions 0, 1, 2; not 8.
    np.testing.assert_array_equal(
        ids, [[1, 0, 0, 0, 0, 0, 0, 0], [2, 2, 1, 0, 0, 0, 0, 0]]
    )
    assert np.all(scores.numpy() <= 0.0)


@pytest.mark.parametrize(
    "mode",
    [
        "eager",
        pytest.param("graph", marks=pytest.mark.slow),
        pytest.param("jit", marks=pytest.mark.slow),
    ],
)
def test_beam_early_stop_and_padding(mode):
    calls = tf.Variable(0, dtype=tf.int32)
    step_fn, cache = eos_at_model([0, 2], 8, calls)
    ids, _ = run_in_mode(
        lambda: beam_search(step_fn, tf.fill([2], START), cache, 8, EOS),
        mode,
    )
    assert 3 <= int(calls.numpy()) < 8
    np.testing.assert_array_equal(
        ids, [[1, 0, 0, 0, 0, 0, 0, 0], [2, 2, 1, 0, 0, 0, 0, 0]]
    )


def no_eos_model(rows, length):
    table = np.zeros((rows, VOCAB, VOCAB, VOCAB), np.float32)
    table[..., START] = MASK
    table[..., EOS] = -10.0
    table[..., 3] = 1.0
    zeros = np.zeros((length, VOCAB), np.float32)
    step_fn, init = make_model(table, zeros, zeros)
    return step_fn, init(list(range(rows)))


@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_max_lengths_per_row(search):
    length, limits = 6, [2, 6, 3, 9, 0]
    step_fn, cache = no_eos_model(len(limits), length)
    args = (step_fn, tf.fill([len(limits)], START), cache, length, EOS)
    max_lengths = tf.constant(limits)
    if search == "greedy":
        ids, scores = greedy_search(*args, max_lengths=max_lengths)
    else:
        ids, scores = beam_search(*args, beam_size=3, max_lengths=max_lengths)
    # Limits are clipped to [1, max_length]; no EOS is forced at the limit.
    clipped = np.clip(limits, 1, length)
    want = (np.arange(length)[None, :] < clipped[:, None]) * 3
    np.testing.assert_array_equal(ids, want)
    step_log_prob = 1.0 - np.log(np.exp(1.0) + 1.0 + np.exp(-10.0))
    want_scores = clipped * step_log_prob
    if search == "beam":
        want_scores = want_scores / length_penalty(clipped, 0.6)
    # Each row's score: its own number of equal steps.
    bounds.assert_close(scores, want_scores, terms=score_terms(length),
                        scale=np.abs(want_scores))


@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16])
def test_half_precision_logits(tables, dtype):
    # The search must upcast before log-softmax: half logits give the same
    # result as the same (rounded) logits passed in float32. In float16 the
    # -1e9 mask logit becomes -inf, which must be handled too.
    step_half, init = make_model(*tables, logits_dtype=dtype)

    def step_rounded(ids, position, cache):
        logits, new_cache = step_half(ids, position, cache)
        return tf.cast(logits, tf.float32), new_cache

    start = tf.fill([3], START)
    for search in (greedy_search, beam_search):
        ids, scores = search(step_rounded, start, init(ROWS), LENGTH, EOS)
        ids16, scores16 = search(step_half, start, init(ROWS), LENGTH, EOS)
        assert scores16.dtype == tf.float32
        assert np.all(np.isfinite(scores16))
        np.testing.assert_array_equal(ids16, ids)
        bounds.assert_close(scores16, scores, terms=score_terms())


@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_eager_graph_and_jit_agree(tables, search):
    step_fn, init = make_model(*tables)
    limits = tf.constant([4, 2, 3])

    def run():
        if search == "greedy":
            return greedy_search(
                step_fn, tf.fill([3], START), init(ROWS), LENGTH, EOS, limits
            )
        return beam_search(
            step_fn,
            tf.fill([3], START),
            init(ROWS),
            LENGTH,
            EOS,
            beam_size=3,
            max_lengths=limits,
        )

    eager_ids, eager_scores = run_in_mode(run, "eager")
    for mode in ("graph", "jit"):
        ids, scores = run_in_mode(run, mode)
        np.testing.assert_array_equal(ids, eager_ids)
        bounds.assert_close(scores, eager_scores, terms=score_terms())


def test_jit_does_not_retrace_for_new_batches(tables):
    step_fn, _ = make_model(*tables)
    traces = []

    @tf.function(jit_compile=True)
    def decode(rows, start):
        traces.append(1)  # Python side effect: runs only when tracing.
        cache = {
            "row": rows,
            "state": (tf.fill(tf.shape(rows), START), tf.zeros_like(rows)),
        }
        return beam_search(step_fn, start, cache, LENGTH, EOS, beam_size=3)

    start = tf.fill([3], START)
    ids_a, _ = decode(tf.constant([0, 1, 2]), start)
    ids_b, _ = decode(tf.constant([2, 0, 1]), start)
    assert len(traces) == 1
    assert decode.experimental_get_tracing_count() == 1
    np.testing.assert_array_equal(ids_b, tf.gather(ids_a, [2, 0, 1]))


@pytest.mark.parametrize("search", [greedy_search, beam_search])
def test_unknown_batch_size_in_graph(tables, search):
    step_fn, init = make_model(*tables)
    spec = tf.TensorSpec([None], tf.int32)

    @tf.function(input_signature=[spec, spec])
    def decode(rows, limits):
        cache = {
            "row": rows,
            "state": (tf.fill(tf.shape(rows), START), tf.zeros_like(rows)),
        }
        start = tf.fill(tf.shape(rows), START)
        return search(step_fn, start, cache, LENGTH, EOS, max_lengths=limits)

    limits = tf.constant([4, 2, 3])
    ids, scores = decode(tf.constant(ROWS), limits)
    start = tf.fill([3], START)
    want_ids, want_scores = search(
        step_fn, start, init(ROWS), LENGTH, EOS, max_lengths=limits
    )
    np.testing.assert_array_equal(ids, want_ids)
    bounds.assert_close(scores, want_scores, terms=score_terms())


@pytest.mark.parametrize("search", [greedy_search, beam_search])
def test_buffer_sized_in_the_graph(tables, search):
    # A scalar tensor L (a buffer sized per call, as `Transformer.search`
    # sizes it from the source) decodes what the Python int L decodes, for
    # the smallest buffer (1) and the whole table.
    step_fn, init = make_model(*tables)

    @tf.function(input_signature=[tf.TensorSpec([], tf.int32)])
    def decode(length):
        start = tf.fill([len(ROWS)], START)
        return search(step_fn, start, init(ROWS), length, EOS)

    for length in (1, LENGTH):
        ids, scores = decode(tf.constant(length))
        want_ids, want_scores = search(
            step_fn, tf.fill([len(ROWS)], START), init(ROWS), length, EOS)
        assert ids.shape == (len(ROWS), length)
        np.testing.assert_array_equal(ids, want_ids)
        bounds.assert_close(scores, want_scores, terms=score_terms())
    assert decode.experimental_get_tracing_count() == 1


@pytest.mark.parametrize("search", [greedy_search, beam_search])
@pytest.mark.parametrize("spec", [tf.TensorSpec([], tf.float32),
                                  tf.TensorSpec([1], tf.int32)])
def test_graph_buffer_must_be_a_scalar_int(search, spec):
    def decode(length):
        return search(_step, tf.zeros([2], tf.int32), {}, length, EOS)

    with pytest.raises(ValueError, match="argument `max_length`") as e:
        tf.function(decode, input_signature=[spec]).get_concrete_function()
    assert "scalar int tensor" in str(e.value)
    assert f"dtype {spec.dtype.name}" in str(e.value)


def test_decodes_without_a_cache():
    table = tf.constant(np.log([[1e-9, 0.1, 0.6, 0.3]] * VOCAB), tf.float32)

    def step_fn(ids, position, cache):
        return tf.gather(table, ids), cache

    start = tf.fill([2], START)
    for search in (greedy_search, beam_search):
        ids, _ = search(step_fn, start, None, 3, EOS)
        np.testing.assert_array_equal(ids, [[2, 2, 2]] * 2)


def _step(ids, position, cache):
    return tf.zeros([tf.shape(ids)[0], VOCAB]), cache


GOOD = dict(
    step_fn=_step,
    initial_ids=tf.zeros([2], tf.int32),
    initial_cache={},
    max_length=3,
    eos_id=EOS,
)
INVALID = [
    ("max_length", 0),
    ("max_length", -2),
    ("max_length", 2.0),
    ("max_length", True),
    ("max_length", tf.constant(3)),
    ("eos_id", 1.0),
    ("eos_id", "1"),
    ("eos_id", -1),
    ("eos_id", None),
    ("initial_ids", tf.zeros([2, 1], tf.int32)),
    ("initial_ids", tf.zeros([], tf.int32)),
    ("initial_ids", tf.zeros([2], tf.float32)),
    ("initial_ids", ["a", "b"]),
    ("max_lengths", tf.zeros([2], tf.float32)),
    ("max_lengths", tf.zeros([3], tf.int32)),
    ("step_fn", None),
    ("initial_cache", {"x": tf.zeros([5, 2])}),
    ("initial_cache", {"x": tf.constant(1.0)}),
]
BEAM_INVALID = [
    ("beam_size", 0),
    ("beam_size", 1.5),
    ("alpha", -0.1),
    ("alpha", "0.6"),
    ("alpha", None),
]


@pytest.mark.parametrize(
    "search,name,value",
    [(s, n, v) for s, (n, v) in itertools.product(["greedy", "beam"], INVALID)]
    + [("beam", n, v) for n, v in BEAM_INVALID],
)
def test_invalid_arguments(search, name, value):
    fn = greedy_search if search == "greedy" else beam_search
    with pytest.raises(ValueError, match=f"argument `{name}`") as e:
        fn(**{**GOOD, name: value})
    assert f"Received: {name}=" in str(e.value)
    assert f"Received an invalid value for argument `{name}`" in str(e.value)


def test_max_length_message_echoes_value():
    with pytest.raises(ValueError) as e:
        greedy_search(**{**GOOD, "max_length": 0})
    assert str(e.value).endswith(
        "Received an invalid value for argument `max_length`, expected a "
        "positive integer. Received: max_length=0"
    )


def test_bad_step_fn_cache_is_reported():
    def bad_step(ids, position, cache):
        return tf.zeros([tf.shape(ids)[0], VOCAB]), {"x": cache["x"][:, :1]}

    with pytest.raises(ValueError, match="step_fn"):
        greedy_search(
            bad_step, tf.zeros([2], tf.int32), {"x": tf.zeros([2, 3])}, 3, EOS
        )


def _gather_ops(concrete):
    graph_def = concrete.graph.as_graph_def()
    nodes = list(graph_def.node) + [
        n for f in graph_def.library.function for n in f.node_def
    ]
    return sum(n.op in ("GatherV2", "ResourceGather") for n in nodes)


def test_beam_search_reorders_only_the_cache_the_step_changes(tables):
    """A cache tensor that `step_fn` returns unchanged (the same object) is
    tiled once and never gathered by parent beam: it is identical across a
    row's beams. The result is the same as when the step rewrites it."""
    step_fn, initial_cache = make_model(*tables)

    def rewriting(ids, position, cache):
        logits, new = step_fn(ids, position, cache)
        return logits, dict(new, row=tf.identity(new["row"]))

    start = tf.fill([len(ROWS)], START)
    traced = {}
    for name, fn in (("pass", step_fn), ("rewrite", rewriting)):
        search = tf.function(
            lambda s, c, fn=fn: beam_search(
                fn, s, c, LENGTH, EOS, beam_size=3, alpha=0.6
            )
        )
        traced[name] = search.get_concrete_function(start, initial_cache(ROWS))
        ids, scores = search(start, initial_cache(ROWS))
        traced[name + "_out"] = (ids.numpy(), scores.numpy())
    # One gather fewer per step: the "row" tensor's.
    assert _gather_ops(traced["rewrite"]) == _gather_ops(traced["pass"]) + 1
    np.testing.assert_array_equal(
        traced["pass_out"][0], traced["rewrite_out"][0]
    )
    np.testing.assert_array_equal(
        traced["pass_out"][1], traced["rewrite_out"][1]
    )
