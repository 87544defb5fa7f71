"""Self-tests of the NumPy oracle (tests/reference_numpy.py) against the
golden facts of docs/reference.md section 5 (and 1.x / 2.x where cited)."""

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference_numpy as ref  # noqa: E402
from tests import bounds  # noqa: E402

N, T, C, H = 2, 5, 8, 2
D = C // H
# noam_2019: s = step + 1, w^0.5, w^-1.5, s · w^-1.5, s^-0.5, their
# minimum, and the two products: float64 elementwise ops.
NOAM_TERMS = 7
# noam_paper: d^-0.5, s^-0.5, w^-1.5, s · w^-1.5, the minimum, the product.
PAPER_TERMS = 6
# label_smoothing in float32: ε's cast, 1 - ε, · y, ε / V, the sum.
SMOOTHING_TERMS = 5
# An attention's weights: the projections (C), the scores (d), the
# softmax's sum (T_k).
WEIGHT_TERMS = C + D + T
# Its output: the weights, the weighted sum (T_k), then the paper's output
# projection (C) or the references' residual layer norm (4 C, the larger).
ATTENTION_TERMS = WEIGHT_TERMS + T + 4 * C
# A weight that differs: by a tenth of the probability mass, far beyond any
# rounding bound (about 1e-5 here); an output that differs: likewise, by a
# tenth of its unit scale.
DIFFERENT = 0.1


def _params(rng, c_in=C, c=C, paper=False, ln_random=True):
    p = {}
    for name in ("q", "k", "v"):
        p["w" + name] = rng.standard_normal((c_in, c)).astype(np.float32) * 0.5
        p["b" + name] = rng.standard_normal((c,)).astype(np.float32) * 0.1
    if paper:
        p["wo"] = rng.standard_normal((c, c)).astype(np.float32) * 0.5
        p["bo"] = rng.standard_normal((c,)).astype(np.float32) * 0.1
    else:
        p["gamma"] = (
            (1.0 + 0.1 * rng.standard_normal((c,))).astype(np.float32)
            if ln_random
            else np.ones((c,), np.float32)
        )
        p["beta"] = (
            (0.3 * rng.standard_normal((c,))).astype(np.float32)
            if ln_random
            else np.zeros((c,), np.float32)
        )
    return p


def _x(rng, n=N, t=T, c=C):
    return rng.standard_normal((n, t, c)).astype(np.float32)


def _logits_magnitude(p, queries, keys):
    """The scale of attention weights: the largest sum of the score terms'
    magnitudes, max over heads of sum_d |q_d k_d| / sqrt(d) (the logits the
    weights come from; |.| bounds the 2017 flavour's ReLU too)."""
    def heads(x, name):
        y = np.abs(np.asarray(x, np.float64) @ p["w" + name] + p["b" + name])
        return y.reshape(y.shape[0], y.shape[1], H, D)

    return float(np.einsum("nqhd,nkhd->nhqk", heads(queries, "q"),
                           heads(keys, "k")).max() / np.sqrt(D))


# ---------------------------------------------------------------- PE (1.3, 2.3)
def test_pe_2019_golden():
    tab = ref.sinusoid_2019(4, 8)
    assert tab.dtype == np.float32 and tab.shape == (4, 8)
    gold = ["0.841471", "0.540302", "0.099833", "0.995004", "0.01",
            "0.99995", "0.001", "1.0"]  # as printed in docs/reference.md
    bounds.assert_printed(tab[1], gold)
    np.testing.assert_array_equal(tab[0], [0, 1, 0, 1, 0, 1, 0, 1])


def test_pe_2017_golden():
    tab = ref.sinusoid_2017(4, 8)
    assert tab.dtype == np.float32 and tab.shape == (4, 8)
    gold = ["0.841471", "0.995004", "0.01", "1.0", "0.0001", "1.0", "1e-6",
            "1.0"]  # as printed in docs/reference.md
    bounds.assert_printed(tab[1], gold)
    assert np.all(ref.sinusoid_2017(4, 8, zero_pad=True)[0] == 0)
    # Two roundings to float32 (the table's, the scaled table's), each value
    # by its own magnitude.
    want = tab * np.sqrt(8)
    bounds.assert_close(
        ref.sinusoid_2017(4, 8, scale=True), want, terms=2,
        scale=np.abs(want),
    )


# ---------------------------------------------------------------- noam (2.8)
def test_noam_2019_golden():
    # step is 0-based: s = step + 1. 7.5e-8, 7.5e-5 and 3e-4 are the
    # formula's exact values (3e-4 · s / 4000); the last two are figures
    # rounded in docs/reference.md (§2.8, §5).
    for step, exact in ((0, 7.5e-8), (999, 7.5e-5), (3999, 3e-4)):
        bounds.assert_close(ref.noam_2019(3e-4, step, 4000), exact,
                            terms=NOAM_TERMS, dtype="float64")
    bounds.assert_printed(ref.noam_2019(3e-4, 10000, 4000), "1.8973e-4")
    bounds.assert_printed(ref.noam_2019(3e-4, 29146, 4000), "1.111e-4")
    # peak is at s == warmup
    lrs = ref.noam_2019(3e-4, np.arange(10000), 4000)
    assert int(np.argmax(lrs)) == 3999


def test_noam_paper_and_base_convention():
    # paper: d^-0.5 * min(s^-0.5, s * w^-1.5), s 1-based; peak at s == warmup
    bounds.assert_close(
        ref.noam_paper(512, 4000, 4000), 512**-0.5 * 4000**-0.5,
        terms=PAPER_TERMS, dtype="float64",
    )
    assert ref.noam_paper(512, 0, 4000) == 0.0
    s = np.arange(1, 20000)
    # noam_2019(step = s - 1) / noam_paper(s) is constant init_lr * sqrt(w * d)
    ratio = ref.noam_2019(3e-4, s - 1, 4000) / ref.noam_paper(512, s, 4000)
    bounds.assert_close(
        ratio, 3e-4 * np.sqrt(4000 * 512),
        terms=NOAM_TERMS + PAPER_TERMS + 1, dtype="float64",  # + the ratio
    )


# smoothing (1.6, 2.7)
def test_label_smoothing_golden():
    oh = np.zeros((32000,), np.float32)
    oh[5] = 1.0
    ys = ref.label_smoothing(oh, 0.1)
    # The exact values (1 - ε) + ε / V and ε / V, as docs/reference.md
    # prints them, computed in float32.
    bounds.assert_close(ys[5], 0.900003125, terms=SMOOTHING_TERMS)
    others = np.delete(ys, 5)
    bounds.assert_close(others, 3.125e-6, terms=SMOOTHING_TERMS)
    # Each value carries its own float32 error; the float64 sum of the
    # V values (magnitude 1 in all) adds nothing at that precision.
    bounds.assert_close(float(np.sum(ys, dtype=np.float64)), 1.0,
                        terms=SMOOTHING_TERMS, scale=1.0)


def test_smoothed_cross_entropy_excludes_pads():
    rng = np.random.default_rng(0)
    v = 7
    logits = rng.standard_normal((2, 4, v))
    labels = np.array([[3, 1, 0, 0], [2, 0, 0, 0]])
    got = ref.smoothed_cross_entropy(logits, labels, 0.1, pad_id=0)
    # manual, loop form
    tot, cnt = 0.0, 0
    for n in range(2):
        for t in range(4):
            if labels[n, t] == 0:
                continue
            z = logits[n, t]
            lp = z - np.log(np.sum(np.exp(z)))
            y = np.full(v, 0.1 / v)
            y[labels[n, t]] += 0.9
            tot += -np.sum(y * lp)
            cnt += 1
    # A log-softmax over V, the smoothed sum over V, the sum over the
    # tokens and the division by their count, all float64.
    terms = 2 * v + labels.size + 1
    bounds.assert_close(got, tot / cnt, terms=terms, dtype="float64")
    # pad positions' logits do not matter
    logits2 = logits.copy()
    logits2[labels == 0] += 100.0
    bounds.assert_close(ref.smoothed_cross_entropy(logits2, labels), got,
                        terms=terms, dtype="float64")
    # G2 denominator epsilon
    g2 = ref.smoothed_cross_entropy(logits, labels, denom_epsilon=1e-7)
    bounds.assert_close(g2, tot / (cnt + 1e-7), terms=terms + 1,
                        dtype="float64")  # + the denominator's sum


# constants (1.4, 5)
def test_mask_constant():
    assert ref.P.dtype == np.float32
    assert float(ref.P) == -4294967296.0
    assert np.float32(-(2**32) + 1) == np.float32(-4294967296.0)
    # Spec 5 states float32(P + s) == P for |s| < 256. Exact float32 fact:
    # true for -256 < s <= 128 (spacing is 512 below -2**32, 256 above it);
    # for 128 < s < 256 the sum is P + 256 (still a huge negative).
    s = np.linspace(-255.9, 128.0, 10001).astype(np.float32)
    assert np.all((ref.P + s).astype(np.float32) == ref.P)
    s = np.linspace(128.01, 255.9, 1001).astype(np.float32)
    assert np.all((ref.P + s).astype(np.float32) == ref.P + np.float32(256))
    # masked entries still get exactly zero weight next to an unmasked one
    row = np.array([ref.P + np.float32(255.0), np.float32(0.0)], np.float32)
    e = np.exp(row - row.max())
    assert e[0] == 0.0


# layer norm (1.1)
def test_layer_norm():
    rng = np.random.default_rng(0)
    x = _x(rng)
    g = rng.standard_normal(C).astype(np.float32)
    b = rng.standard_normal(C).astype(np.float32)
    y = ref.layer_norm(x, g, b)
    x64 = x.astype(np.float64)
    mu = x64.mean(-1, keepdims=True)
    var = ((x64 - mu) ** 2).mean(-1, keepdims=True)  # population variance
    # Mean and variance, each a sum of C terms, twice.
    bounds.assert_close(
        y, g * (x64 - mu) / np.sqrt(var + 1e-8) + b, terms=4 * C
    )
    z = np.zeros((3, C), np.float32)
    np.testing.assert_array_equal(
        ref.layer_norm(z, g, b), np.broadcast_to(b, (3, C))
    )


# G1 masking (1.4, 5)
def test_2017_zero_key_row_gets_zero_weight():
    rng = np.random.default_rng(0)
    p = _params(rng)
    q, k = _x(rng), _x(rng)
    k[0, 2, :] = 0.0
    k[1, 4, :] = 0.0
    _, w = ref.mha_reference_2017(q, k, p, H)
    assert w.shape == (N, H, T, T) and w.dtype == np.float32
    assert np.all(w[0, :, :, 2] == 0.0)
    assert np.all(w[1, :, :, 4] == 0.0)
    assert np.all(w[0, :, :, 4] > 0.0) and np.all(w[1, :, :, 2] > 0.0)
    # The softmax's sum over T_k, the query mask's product, this sum.
    bounds.assert_close(w.sum(-1), 1.0, terms=2 * T + 1)


def test_2017_sum_zero_but_nonzero_key_not_masked_in_g1b():
    rng = np.random.default_rng(0)
    p = _params(rng)
    q, k = _x(rng), _x(rng)
    k[0, 1, :] = np.array(
        [1, -1, 2, -2, 3, -3, 0.5, -0.5], np.float32
    )  # sum == 0
    _, w = ref.mha_reference_2017(q, k, p, H)
    assert np.all(w[0, :, :, 1] > 0.0)


def test_fully_masked_row_is_uniform():
    rng = np.random.default_rng(0)
    p = _params(rng)
    q, k = _x(rng), _x(rng)
    k[1] = 0.0  # every key of batch 1 masked
    _, w = ref.mha_reference_2017(q, k, p, H)
    np.testing.assert_array_equal(w[1], np.full((H, T, T), 1.0 / T, np.float32))
    # G2c additive key mask, all True
    km = np.zeros((N, T), bool)
    km[0] = True
    _, w2 = ref.mha_reference_2019(q, _x(rng), _x(rng), p, H, key_masks=km)
    bounds.assert_close(w2[0], 1.0 / T, terms=T)  # the softmax's sum


def test_2017_zero_query_row_output_is_beta():
    rng = np.random.default_rng(0)
    p = _params(rng)  # random non-zero beta
    q, k = _x(rng), _x(rng)
    q[0, 3, :] = 0.0
    out, w = ref.mha_reference_2017(q, k, p, H)
    assert np.all(w[0, :, 3, :] == 0.0)
    np.testing.assert_array_equal(out[0, 3], p["beta"])
    assert np.abs(out[0, 2] - p["beta"]).max() > DIFFERENT


def test_2017_dropout_mask_and_weights_before_dropout():
    rng = np.random.default_rng(0)
    p = _params(rng)
    q, k = _x(rng), _x(rng)
    out0, w0 = ref.mha_reference_2017(q, k, p, H)
    ones = np.ones((N, H, T, T), np.float32)
    out1, w1 = ref.mha_reference_2017(q, k, p, H, dropout_mask=ones)
    np.testing.assert_array_equal(out0, out1)
    dm = (rng.random((N, H, T, T)) > 0.5).astype(np.float32) * 2.0
    out2, w2 = ref.mha_reference_2017(q, k, p, H, dropout_mask=dm)
    np.testing.assert_array_equal(w0, w2)
    assert np.abs(out0 - out2).max() > DIFFERENT


# G2c masking (2.4, 5)
def test_2019_additive_mask_equals_replacement():
    rng = np.random.default_rng(0)
    p = _params(rng)
    q, k, v = _x(rng), _x(rng), _x(rng)
    km = np.zeros((N, T), bool)
    km[0, [1, 3]] = True
    km[1, 4] = True
    out, w = ref.mha_reference_2019(q, k, v, p, H, key_masks=km)
    assert (
        np.all(w[0, :, :, 1] == 0)
        and np.all(w[0, :, :, 3] == 0)
        and np.all(w[1, :, :, 4] == 0)
    )
    # replacement semantics == dropping the masked keys entirely
    for n in range(N):
        keep = ~km[n]
        o_n, w_n = ref.mha_reference_2019(
            q[n : n + 1], k[n : n + 1, keep], v[n : n + 1, keep], p, H
        )
        bounds.assert_close(out[n], o_n[0], terms=ATTENTION_TERMS)
        bounds.assert_close(
            w[n][..., keep], w_n[0], terms=WEIGHT_TERMS,
            scale=_logits_magnitude(p, q[n : n + 1], k[n : n + 1, keep]),
        )
    # no query mask in G2c: zero query rows still attend
    q2 = q.copy()
    q2[0, 0] = 0.0
    _, w3 = ref.mha_reference_2019(q2, k, v, p, H, key_masks=km)
    # The softmax's sum over T_k, then this sum.
    bounds.assert_close(w3[0, :, 0].sum(-1), 1.0, terms=2 * T)


# head layout / scale (1.4, 2.5, 5)
@pytest.mark.parametrize("variant", ["2017", "2019", "paper"])
def test_head0_independent_of_other_heads_channels(variant):
    rng = np.random.default_rng(0)
    p = _params(rng, paper=(variant == "paper"))
    q, k, v = _x(rng), _x(rng), _x(rng)
    if variant == "2017":
        q, k, v = (
            np.abs(q),
            np.abs(k),
            np.abs(k),
        )  # keep ReLU pre-activations mostly alive

    def run(pp):
        if variant == "2017":
            return ref.mha_reference_2017(q, k, pp, H)[1]
        if variant == "2019":
            return ref.mha_reference_2019(q, k, v, pp, H)[1]
        return ref.mha_paper(q, k, v, pp, H)[1]

    w0 = run(p)
    for wname in ("wq", "wk"):
        pp = dict(p)
        pp[wname] = p[wname].copy()
        pp[wname][:, D + 1] += 3.0  # channel of head 1
        w1 = run(pp)
        np.testing.assert_array_equal(w1[:, 0], w0[:, 0])
        assert np.abs(w1[:, 1] - w0[:, 1]).max() > DIFFERENT
        pp = dict(p)
        pp[wname] = p[wname].copy()
        pp[wname][:, 1] += 3.0  # channel of head 0
        w2 = run(pp)
        np.testing.assert_array_equal(w2[:, 1], w0[:, 1])
        assert np.abs(w2[:, 0] - w0[:, 0]).max() > DIFFERENT


def test_2019_weights_match_manual_per_head_and_paper_layout():
    rng = np.random.default_rng(0)
    p = _params(rng, paper=True)
    p["gamma"] = np.ones(C, np.float32)
    p["beta"] = np.zeros(C, np.float32)
    q, k, v = _x(rng), _x(rng), _x(rng)
    _, w19 = ref.mha_reference_2019(q, k, v, p, H)
    _, wp = ref.mha_paper(q, k, v, p, H)
    logits = _logits_magnitude(p, q, k)  # the weights' scale
    bounds.assert_close(w19, wp, terms=WEIGHT_TERMS, scale=logits)
    Q = q.astype(np.float64) @ p["wq"] + p["bq"]
    K = k.astype(np.float64) @ p["wk"] + p["bk"]
    for n in range(N):
        for i in range(H):
            sl = slice(i * D, (i + 1) * D)
            s = (
                Q[n, :, sl] @ K[n, :, sl].T / np.sqrt(D)
            )  # scale 1/sqrt(C/h), not 1/sqrt(C)
            e = np.exp(s - s.max(-1, keepdims=True))
            bounds.assert_close(
                w19[n, i], e / e.sum(-1, keepdims=True), terms=WEIGHT_TERMS,
                scale=logits,
            )


def test_2017_manual_full_forward():
    rng = np.random.default_rng(0)
    p = _params(rng)
    q, k = _x(rng), _x(rng)
    out, w = ref.mha_reference_2017(q, k, p, H)
    logits = _logits_magnitude(p, q, k)  # the weights' scale
    relu = lambda a: np.maximum(a, 0)  # noqa: E731
    Q = relu(q.astype(np.float64) @ p["wq"] + p["bq"])
    K = relu(k.astype(np.float64) @ p["wk"] + p["bk"])
    V = relu(k.astype(np.float64) @ p["wv"] + p["bv"])
    o = np.zeros((N, T, C))
    for n in range(N):
        for i in range(H):
            sl = slice(i * D, (i + 1) * D)
            s = Q[n, :, sl] @ K[n, :, sl].T / np.sqrt(D)
            e = np.exp(s - s.max(-1, keepdims=True))
            a = e / e.sum(-1, keepdims=True)
            bounds.assert_close(w[n, i], a, terms=WEIGHT_TERMS, scale=logits)
            o[n, :, sl] = a @ V[n, :, sl]
    o = o + q
    mu = o.mean(-1, keepdims=True)
    var = ((o - mu) ** 2).mean(-1, keepdims=True)
    expect = p["gamma"] * (o - mu) / np.sqrt(var + 1e-8) + p["beta"]
    bounds.assert_close(out, expect, terms=ATTENTION_TERMS)


def test_paper_attend_mask_polarity_and_output():
    rng = np.random.default_rng(0)
    p = _params(rng, paper=True)
    q, k, v = _x(rng), _x(rng), _x(rng)
    am = np.ones((N, T, T), bool)
    am[0, :, 2] = False  # True = may attend
    out, w = ref.mha_paper(q, k, v, p, H, attend_mask=am)
    assert np.all(w[0, :, :, 2] == 0) and np.all(w[1, :, :, 2] > 0)
    assert out.shape == (N, T, C)
    # no residual / no LN: output is linear in the head concatenation
    _, w_full = ref.mha_paper(q, k, v, p, H)
    V = v @ p["wv"] + p["bv"]
    cat = np.concatenate(
        [w_full[:, i] @ V[:, :, i * D : (i + 1) * D] for i in range(H)], axis=-1
    )
    out_full, _ = ref.mha_paper(q, k, v, p, H)
    # The same weights on both sides: the value projection (C), the
    # weighted sum (T_k), the output projection (C).
    bounds.assert_close(
        out_full, cat @ p["wo"] + p["bo"], terms=2 * C + T
    )


# causality (1.4.6, 2.4.3, 5)
@pytest.mark.parametrize("variant", ["2017", "2019", "paper"])
def test_causality_future_perturbation(variant):
    rng = np.random.default_rng(0)
    p = _params(rng, paper=(variant == "paper"))
    x = _x(rng)
    x[1, 3] = 0.0  # a zero (pad-like) row in G1 too
    km = np.zeros((N, T), bool)
    km[1, 3] = True

    def run(inp):
        if variant == "2017":
            return ref.mha_reference_2017(inp, inp, p, H, causality=True)
        if variant == "2019":
            return ref.mha_reference_2019(
                inp, inp, inp, p, H, key_masks=km, causality=True
            )
        return ref.mha_paper(inp, inp, inp, p, H, causality=True)

    out0, w0 = run(x)
    assert np.all(np.triu(np.ones((T, T)), 1)[None, None] * w0 == 0)
    for t in range(T - 1):
        x2 = x.copy()
        x2[:, t + 1 :] += rng.standard_normal(x2[:, t + 1 :].shape).astype(
            np.float32
        )
        out1, _ = run(x2)
        np.testing.assert_array_equal(out1[:, : t + 1], out0[:, : t + 1])
