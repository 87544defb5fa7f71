"""Independent NumPy reference (test oracle) for the ``tfattn`` library.

Written only from the referenced code's semantics (``docs/reference.md``,
sections 1.1-1.7, 2.1-2.9, 3 and 5) and the Transformer paper; it
deliberately does not import
TensorFlow or any ``tfattn`` code.

Conventions
-----------
* Attention math is done in float32, like the TF1 reference code, so the mask
  constant ``P = float32(-2**32 + 1)`` behaves exactly as in the original.
  Note: spec 1.4/5 say ``float32(P + s) == P`` for ``|s| < 256``; that holds
  only for ``-256 < s <= 128``. P = -2**32 exactly, and just above it (smaller
  magnitude) the float32 spacing is 256, so ``128 < s < 384`` gives
  ``P + 256``. Masked weights are still exactly 0 whenever some entry of the
  row is unmasked, but G2c's ADDITIVE mask equals replacement only for scores
  <= 128 (a fully masked row is uniform only then).
* Kernels in ``params`` are shaped ``(in_dim, num_units)``; biases
  ``(num_units,)``.
  A missing or ``None`` bias means "no bias".
* Head ``i`` always uses projection channels ``[i*d, (i+1)*d)`` with
  ``d = num_units // num_heads``.
* The MHA functions return ``(output, weights)`` with weights shaped
  ``[N, h, T_q, T_k]``.
"""

import numpy as np

#: Mask constant of both generations: float32(-2**32 + 1) == -4294967296.0.
P = np.float32(-(2.0**32) + 1)

#: Large negative used by the paper-style attention (Keras-like masking).
PAPER_NEG = np.float32(-1e9)


# ---------------------------------------------------------------------------
# small private helpers
# ---------------------------------------------------------------------------
def _f32(x):
    return np.asarray(x, dtype=np.float32)


def _dense(x, kernel, bias=None, relu=False):
    """x @ kernel (+ bias) (then ReLU), float32."""
    y = np.matmul(_f32(x), _f32(kernel))
    if bias is not None:
        y = y + _f32(bias)
    if relu:
        y = np.maximum(y, np.float32(0.0))
    return y.astype(np.float32)


def _softmax(s, axis=-1):
    """Numerically stable float32 softmax (max subtracted)."""
    s = _f32(s)
    m = np.max(s, axis=axis, keepdims=True)
    e = np.exp(s - m)
    return (e / np.sum(e, axis=axis, keepdims=True)).astype(np.float32)


def _split_heads_head_major(x, num_heads):
    """[N, T, C] -> [h*N, T, d]: split channels into h chunks, concat on axis 0.

    Literal np.split / np.concatenate (spec 1.4 step 2), row index i*N + n.
    """
    return np.concatenate(np.split(x, num_heads, axis=2), axis=0)


def _merge_heads_head_major(x, num_heads):
    """[h*N, T, d] -> [N, T, C]: inverse of the split (spec 1.4 step 11)."""
    return np.concatenate(np.split(x, num_heads, axis=0), axis=2)


def _stacked_to_nhqk(a, num_heads):
    """[h*N, T_q, T_k] (head-major) -> [N, h, T_q, T_k]."""
    return np.stack(np.split(a, num_heads, axis=0), axis=1)


def _nhqk_to_stacked(a):
    """[N, h, T_q, T_k] -> [h*N, T_q, T_k] (head-major)."""
    a = np.asarray(a)
    return np.concatenate([a[:, i] for i in range(a.shape[1])], axis=0)


def _causal_replace(s):
    """Replace entries above the diagonal of the last two axes by P (1.4.6 /
    2.4.3)."""
    t_q, t_k = s.shape[-2], s.shape[-1]
    tril = np.tril(np.ones((t_q, t_k), dtype=np.float32))
    return np.where(tril[None] == 0, P, s).astype(np.float32)


# ---------------------------------------------------------------------------
# 1.1 / 2.1 layer norm
# ---------------------------------------------------------------------------
def layer_norm(x, gamma, beta, epsilon=1e-8):
    """Layer norm per spec 1.1 (G1 ``normalize``) and 2.1 (G2 ``ln``).

    Statistics over the last axis only, population (biased) variance,
    epsilon added inside the sqrt:
    ``gamma * (x - mu) / sqrt(var + eps) + beta``. float32.
    An all-zero row maps exactly to ``beta``.
    """
    x = _f32(x)
    mu = np.mean(x, axis=-1, keepdims=True)
    xc = x - mu
    var = np.mean(xc * xc, axis=-1, keepdims=True)
    y = _f32(gamma) * (xc / np.sqrt(var + np.float32(epsilon))) + _f32(beta)
    return y.astype(np.float32)


# ---------------------------------------------------------------------------
# 1.4 G1b multihead attention (commit ed2deb8)
# ---------------------------------------------------------------------------
def mha_reference_2017(
    queries, keys, params, num_heads, causality=False, dropout_mask=None
):
    """G1b ``multihead_attention`` (spec 1.4, commit ed2deb8; also 3, 5).

    queries [N, T_q, C_q], keys [N, T_k, C_k]; V is projected from ``keys``.
    params: 'wq','bq','wk','bk','wv','bv' (ReLU dense projections to C),
    'gamma','beta' (LayerNorm, eps 1e-8). C must equal C_q (residual).

    Steps: ReLU projections with bias; head split by np.split on channels and
    np.concatenate on axis 0 (row i*N+n); S = Q K^T / sqrt(d); key mask
    sign(sum_c |keys|) tiled head-major, masked scores REPLACED by P; optional
    causal lower-triangular (diagonal kept) replacement by P; softmax; query
    mask sign(sum_c |queries|) multiplied after softmax; optional dropout;
    A V; merge heads; + raw queries; layer norm.

    dropout_mask: None (no dropout) or the already-scaled inverted-dropout
    multiplier (values 0 or 1/(1-rate)) shaped [N, h, T_q, T_k] or
    [h*N, T_q, T_k]; it is multiplied onto the weights before A V.

    Returns (output [N, T_q, C] float32, weights [N, h, T_q, T_k] float32);
    weights are the softmax weights after the query mask, before dropout.
    """
    queries = _f32(queries)
    keys = _f32(keys)
    h = int(num_heads)

    # 1. projections (ReLU, bias)
    q = _dense(queries, params["wq"], params.get("bq"), relu=True)
    k = _dense(keys, params["wk"], params.get("bk"), relu=True)
    v = _dense(keys, params["wv"], params.get("bv"), relu=True)

    # 2. head split, head-major
    q_ = _split_heads_head_major(q, h)
    k_ = _split_heads_head_major(k, h)
    v_ = _split_heads_head_major(v, h)

    # 3-4. scores and scale (d = last dim of K_)
    s = np.matmul(q_, np.transpose(k_, (0, 2, 1))).astype(np.float32)
    s = (s / np.float32(k_.shape[-1] ** 0.5)).astype(np.float32)

    # 5. key mask from the raw keys (G1b: sign of sum of abs), replace by P
    key_mask = np.sign(np.sum(np.abs(keys), axis=-1)).astype(
        np.float32
    )  # [N,T_k]
    key_mask = np.tile(key_mask, (h, 1))  # [hN,T_k]
    key_mask = np.broadcast_to(key_mask[:, None, :], s.shape)
    s = np.where(key_mask == 0, P, s).astype(np.float32)

    # 6. causality
    if causality:
        s = _causal_replace(s)

    # 7. softmax
    a = _softmax(s, axis=-1)

    # 8. query mask after softmax (raw queries, G1b sign of sum of abs)
    query_mask = np.sign(np.sum(np.abs(queries), axis=-1)).astype(
        np.float32
    )  # [N,T_q]
    query_mask = np.tile(query_mask, (h, 1))[:, :, None]  # [hN,T_q,1]
    a = (a * query_mask).astype(np.float32)
    weights = _stacked_to_nhqk(a, h)

    # 9. dropout
    if dropout_mask is not None:
        dm = _f32(dropout_mask)
        if dm.ndim == 4:
            dm = _nhqk_to_stacked(dm)
        a = (a * dm).astype(np.float32)

    # 10-11. weighted sum and head merge
    o_ = np.matmul(a, v_).astype(np.float32)
    o = _merge_heads_head_major(o_, h)

    # 12-14. no W^O; residual with raw queries; layer norm
    o = (o + queries).astype(np.float32)
    out = layer_norm(o, params["gamma"], params["beta"], epsilon=1e-8)
    return out, weights


# ---------------------------------------------------------------------------
# 2.4-2.5 G2c multihead attention (commit fb023bb)
# ---------------------------------------------------------------------------
def mha_reference_2019(
    queries, keys, values, params, num_heads, key_masks=None, causality=False
):
    """G2c ``multihead_attention`` + ``scaled_dot_product_attention``
    (spec 2.4-2.5, commit fb023bb; also 3, 5).

    queries [N, T_q, d_model], keys [N, T_k, C_k], values [N, T_k, C_v].
    params: 'wq','bq','wk','bk','wv','bv' (linear projections to d_model;
    a None/missing bias = G2b no-bias), 'gamma','beta' (LN eps 1e-8).

    Steps: linear projections (V from ``values``); head-major split;
    S = Q K^T / sqrt(d_k); key_masks (bool [N, T_k], True = padding) cast
    to float32, tiled h times on axis 0 (head-major), expanded to
    [h*N, 1, T_k] and applied ADDITIVELY: S = S + key_masks * P; causal
    future mask by REPLACEMENT with P; softmax; no query mask; A V; merge;
    + queries; layer norm. No dropout (inference reference).

    Returns (output [N, T_q, d_model] float32, weights [N, h, T_q, T_k]).
    """
    queries = _f32(queries)
    keys = _f32(keys)
    values = _f32(values)
    h = int(num_heads)

    q = _dense(queries, params["wq"], params.get("bq"))
    k = _dense(keys, params["wk"], params.get("bk"))
    v = _dense(values, params["wv"], params.get("bv"))

    q_ = _split_heads_head_major(q, h)
    k_ = _split_heads_head_major(k, h)
    v_ = _split_heads_head_major(v, h)

    d_k = q_.shape[-1]
    s = np.matmul(q_, np.transpose(k_, (0, 2, 1))).astype(np.float32)
    s = (s / np.float32(d_k**0.5)).astype(np.float32)

    if key_masks is not None:
        km = np.asarray(key_masks).astype(np.float32)  # [N, T_k]
        km = np.tile(km, (h, 1))[:, None, :]  # [hN, 1, T_k]
        s = (s + km * P).astype(np.float32)

    if causality:
        s = _causal_replace(s)

    a = _softmax(s, axis=-1)
    weights = _stacked_to_nhqk(a, h)

    o_ = np.matmul(a, v_).astype(np.float32)
    o = _merge_heads_head_major(o_, h)
    o = (o + queries).astype(np.float32)
    out = layer_norm(o, params["gamma"], params["beta"], epsilon=1e-8)
    return out, weights


# ---------------------------------------------------------------------------
# Paper multi-head attention (Vaswani et al. 2017; spec 3 "paper" column)
# ---------------------------------------------------------------------------
def mha_paper(
    queries, keys, values, params, num_heads, attend_mask=None, causality=False
):
    """Paper multi-head attention (spec 3, "paper" column; Vaswani et al. 3.2).

    Linear Q/K/V projections (with bias if given), per-head scaled dot
    product with 1/sqrt(d_k), softmax, heads concatenated (head i -> channels
    [i*d_v, (i+1)*d_v)), output projection 'wo' [h*d_v, out], 'bo'.
    No residual, no layer norm, no dropout.

    attend_mask: bool [N, T_q, T_k], True = may attend (Keras polarity);
    masked scores are set to -1e9 before the softmax. causality=True ANDs in
    a lower-triangular (diagonal included) mask.

    Implemented with reshape/transpose ([N, T, h, d] -> [N, h, T, d]),
    i.e. independently of the split/concat layout of the 2017/2019 oracles.

    Returns (output [N, T_q, out] float32, weights [N, h, T_q, T_k] float32).
    """
    queries = _f32(queries)
    keys = _f32(keys)
    values = _f32(values)
    h = int(num_heads)

    q = _dense(queries, params["wq"], params.get("bq"))
    k = _dense(keys, params["wk"], params.get("bk"))
    v = _dense(values, params["wv"], params.get("bv"))
    n, t_q, c_qk = q.shape
    t_k = k.shape[1]
    c_v = v.shape[2]
    d_k = c_qk // h
    d_v = c_v // h

    qh = q.reshape(n, t_q, h, d_k).transpose(0, 2, 1, 3)
    kh = k.reshape(n, t_k, h, d_k).transpose(0, 2, 1, 3)
    vh = v.reshape(n, t_k, h, d_v).transpose(0, 2, 1, 3)

    s = np.matmul(qh, np.swapaxes(kh, -1, -2)).astype(np.float32)
    s = (s / np.float32(np.sqrt(d_k))).astype(np.float32)  # [N, h, T_q, T_k]

    allowed = np.ones((n, t_q, t_k), dtype=bool)
    if attend_mask is not None:
        allowed &= np.broadcast_to(
            np.asarray(attend_mask, dtype=bool), (n, t_q, t_k)
        )
    if causality:
        allowed &= np.tril(np.ones((t_q, t_k), dtype=bool))[None]
    s = np.where(allowed[:, None, :, :], s, PAPER_NEG).astype(np.float32)

    a = _softmax(s, axis=-1)
    o = np.matmul(a, vh).astype(np.float32)  # [N, h, T_q, d_v]
    o = o.transpose(0, 2, 1, 3).reshape(n, t_q, h * d_v)
    out = _dense(o, params["wo"], params.get("bo"))
    return out, a


# ---------------------------------------------------------------------------
# Positional encodings
# ---------------------------------------------------------------------------
def sinusoid_2019(maxlen, E):
    """G2 ``positional_encoding`` table (spec 2.3; the paper's formula).

    angle(pos, j) = pos / 10000^((j - j mod 2) / E); even j -> sin, odd j ->
    cos. Returns float32 [maxlen, E]. Row 0 is [0, 1, 0, 1, ...].
    (The element-wise masking of spec 2.3 -- PE zeroed wherever the scaled
    embedding element is exactly 0 -- is the caller's job:
    ``np.where(emb == 0, 0, table[:T])``.)
    """
    pos = np.arange(maxlen, dtype=np.float64)[:, None]
    j = np.arange(E)
    expo = (j - j % 2).astype(np.float64) / float(E)
    angle = pos / np.power(10000.0, expo)[None, :]
    table = np.where(j % 2 == 0, np.sin(angle), np.cos(angle))
    return table.astype(np.float32)


def sinusoid_2017(T, C, zero_pad=False, scale=False):
    """G1 sinusoid table, final form a6f2fc3 (spec 1.3).

    angle(pos, j) = pos / 10000^(2*j / C) (2*j, NOT 2*floor(j/2): the G1
    deviation from the paper); even j -> sin, odd j -> cos.
    zero_pad zeroes row 0; scale multiplies by sqrt(C) (train.py uses
    neither). Returns float32 [T, C].
    """
    pos = np.arange(T, dtype=np.float64)[:, None]
    j = np.arange(C)
    angle = (
        pos / np.power(10000.0, 2.0 * j.astype(np.float64) / float(C))[None, :]
    )
    table = np.where(j % 2 == 0, np.sin(angle), np.cos(angle))
    if zero_pad:
        table[0, :] = 0.0
    if scale:
        table = table * np.sqrt(C)
    return table.astype(np.float32)


# ---------------------------------------------------------------------------
# Learning-rate schedules
# ---------------------------------------------------------------------------
def noam_2019(init_lr, step, warmup=4000.0):
    """G2 ``noam_scheme`` (spec 2.8).

    ``step`` is the 0-BASED TF global_step; internally s = step + 1:
    lr = init_lr * warmup^0.5 * min(s * warmup^-1.5, s^-0.5).
    Peak init_lr at s = warmup (step = warmup - 1). Works on scalars or
    arrays (float64).
    """
    s = np.asarray(step, dtype=np.float64) + 1.0
    w = float(warmup)
    return init_lr * w**0.5 * np.minimum(s * w**-1.5, s**-0.5)


def noam_paper(d_model, step, warmup=4000.0):
    """Paper schedule (Vaswani et al. 5.3; spec 3 "lr" row, issue #89 in 4.8).

    ``step`` is the paper's 1-BASED step_num (no +1 is added):
    lr = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5).
    step = 0 gives 0. Works on scalars or arrays (float64).
    """
    s = np.asarray(step, dtype=np.float64)
    w = float(warmup)
    with np.errstate(divide="ignore"):
        inv_sqrt = np.where(s > 0, s**-0.5, np.inf)
    return float(d_model) ** -0.5 * np.minimum(inv_sqrt, s * w**-1.5)


# ---------------------------------------------------------------------------
# Label smoothing and loss
# ---------------------------------------------------------------------------
def label_smoothing(one_hot, epsilon=0.1):
    """Label smoothing (spec 1.6 / 2.7): (1 - eps) * y + eps / V, V = last dim
    (the full vocab, specials included). float32 like the reference."""
    y = _f32(one_hot)
    v = y.shape[-1]
    return (
        (np.float32(1.0) - np.float32(epsilon)) * y
        + np.float32(epsilon) / np.float32(v)
    ).astype(np.float32)


def smoothed_cross_entropy(
    logits, labels, epsilon=0.1, pad_id=0, denom_epsilon=0.0
):
    """Pad-excluded mean of label-smoothed softmax cross-entropy
    (spec 1.7 "Metrics and loss" with 1.6, and 2.9 "train" with 2.7).

    logits [..., V], labels int [...]. Per token:
    CE = -sum_v label_smoothing(one_hot(label))_v * log_softmax(logits)_v.
    Returns sum(CE * (labels != pad_id))
    / (sum(labels != pad_id) + denom_epsilon)
    as a Python float. denom_epsilon = 0 is G1 (spec 1.7); G2 uses 1e-7
    (spec 2.9). Computed in float64 for accuracy.
    """
    logits = np.asarray(logits, dtype=np.float64)
    labels = np.asarray(labels)
    v = logits.shape[-1]
    one_hot = (labels[..., None] == np.arange(v)).astype(np.float64)
    y_s = (1.0 - epsilon) * one_hot + epsilon / v
    m = np.max(logits, axis=-1, keepdims=True)
    log_sm = (
        logits - m - np.log(np.sum(np.exp(logits - m), axis=-1, keepdims=True))
    )
    ce = -np.sum(y_s * log_sm, axis=-1)
    nonpad = (labels != pad_id).astype(np.float64)
    return float(np.sum(ce * nonpad) / (np.sum(nonpad) + denom_epsilon))


def symmetric_kl_sum(logits_a, logits_b, labels, pad_id=0):
    """R-Drop's consistency term (Liang et al. 2021): the sum over counted
    targets (labels != pad_id; every target if pad_id is None) of
    ½·[KL(p‖q) + KL(q‖p)], p and q the softmax of logits_a and logits_b
    [..., V], each KL summed term by term as Σ_v p_v·log(p_v / q_v).
    Float64; returns a Python float."""
    def log_softmax(z):
        z = np.asarray(z, np.float64)
        z = z - z.max(-1, keepdims=True)
        return z - np.log(np.exp(z).sum(-1, keepdims=True))
    log_p, log_q = log_softmax(logits_a), log_softmax(logits_b)
    kl_pq = (np.exp(log_p) * (log_p - log_q)).sum(-1)
    kl_qp = (np.exp(log_q) * (log_q - log_p)).sum(-1)
    labels = np.asarray(labels)
    keep = np.ones(labels.shape) if pad_id is None else labels != pad_id
    return float((0.5 * (kl_pq + kl_qp) * keep).sum())


# ---------------------------------------------------------------------------
# 1.7 / 2.9 whole models
# ---------------------------------------------------------------------------
# params of a block: 'self' (and 'cross' in the decoder): the MHA params
# above; 'ffn': 'w1','b1','w2','b2' (ReLU inner, linear outer) and
# 'gamma','beta' (the LN after the residual, eps 1e-8).
def _ffn_ln(x, ffn):
    inner = _dense(x, ffn["w1"], ffn["b1"], relu=True)
    return layer_norm(
        x + _dense(inner, ffn["w2"], ffn["b2"]),
        ffn["gamma"],
        ffn["beta"],
        epsilon=1e-8,
    )


def _scaled_lookup(table, ids):
    """E[ids] * sqrt(C) with row 0 read as zeros (zero_pad, spec 1.2 / 2.2)."""
    table = _f32(table)
    e = table[ids] * np.float32(np.sqrt(table.shape[1]))
    return np.where((ids == 0)[..., None], np.float32(0.0), e).astype(
        np.float32
    )


def transformer_reference_2017(params, source, target_in, num_heads):
    """G1b ``Graph`` logits (spec 1.7): separate scaled embeddings
    ('source_embeddings', 'target_embeddings'), learned positions
    ('source_positions', 'target_positions') added and re-zeroed at rows
    whose embedding is all zero, blocks 'encoder' / 'decoder' (lists),
    untied output 'output_kernel', 'output_bias'. Dropout off."""

    def embed(table, positions, ids):
        e = _scaled_lookup(table, ids)
        keep = np.sign(np.sum(np.abs(e), axis=-1, keepdims=True))
        return ((e + _f32(positions)[: ids.shape[1]]) * keep).astype(np.float32)

    x = embed(params["source_embeddings"], params["source_positions"], source)
    for block in params["encoder"]:
        x, _ = mha_reference_2017(x, x, block["self"], num_heads)
        x = _ffn_ln(x, block["ffn"])
    y = embed(
        params["target_embeddings"], params["target_positions"], target_in
    )
    for block in params["decoder"]:
        y, _ = mha_reference_2017(
            y, y, block["self"], num_heads, causality=True
        )
        y, _ = mha_reference_2017(y, x, block["cross"], num_heads)
        y = _ffn_ln(y, block["ffn"])
    return _dense(y, params["output_kernel"], params["output_bias"])


def transformer_reference_2019(params, source, target_in, num_heads):
    """G2c ``Transformer`` logits (spec 2.9): one table 'embeddings' for the
    source, the target and the output (logits = dec · Eᵀ with row 0 zero),
    the sinusoid zeroed where the scaled embedding element is 0, key masks
    from ids, blocks 'encoder' / 'decoder'. Dropout off."""
    table = _f32(params["embeddings"])
    pe = sinusoid_2019(max(source.shape[1], target_in.shape[1]), table.shape[1])

    def embed(ids):
        e = _scaled_lookup(table, ids)
        return (
            e + np.where(e == 0, np.float32(0.0), pe[: ids.shape[1]])
        ).astype(np.float32)

    x = embed(source)
    for block in params["encoder"]:
        x, _ = mha_reference_2019(
            x, x, x, block["self"], num_heads, key_masks=source == 0
        )
        x = _ffn_ln(x, block["ffn"])
    y = embed(target_in)
    for block in params["decoder"]:
        y, _ = mha_reference_2019(
            y,
            y,
            y,
            block["self"],
            num_heads,
            key_masks=target_in == 0,
            causality=True,
        )
        y, _ = mha_reference_2019(
            y, x, x, block["cross"], num_heads, key_masks=source == 0
        )
        y = _ffn_ln(y, block["ffn"])
    zero_padded = np.where(
        (np.arange(table.shape[0]) == 0)[:, None], np.float32(0.0), table
    )
    return np.matmul(y, zero_padded.T).astype(np.float32)
