"""The layers, ops and losses on whichever Keras backend runs the suite.

Every test here uses NumPy, Keras and tfattn only, so that the file passes
both as `python -m pytest tests/test_layers_on_every_backend.py`
(TensorFlow) and as `KERAS_BACKEND=jax python -m pytest
tests/test_layers_on_every_backend.py`. Outputs are compared with NumPy
formulas (tests/reference_numpy.py, or the closed forms written below),
never with tfattn's own code; gradients are taken by the running backend's
own autodiff (`_gradients`).

Bounds: tests/bounds.py's n · ε · S, with n the reduction lengths summed
along the computation (each count said where used) and S the magnitude of
the terms summed (the outputs' by default; the logits' for weights and
probabilities computed from them).
"""

import keras
import numpy as np
import pytest
from keras import ops

from tests import bounds
from tests import reference_numpy as ref
from tests.harness import assert_keras_file_round_trip
from tests.harness import attention_params
from tests.harness import ffn_numpy
from tfattn import losses
from tfattn.layers import attention_flavors
from tfattn.layers import Decoder
from tfattn.layers import DecoderBlock
from tfattn.layers import Dropout
from tfattn.layers import Encoder
from tfattn.layers import EncoderBlock
from tfattn.layers import LayerNormalization
from tfattn.layers import MultiHeadAttention
from tfattn.layers import PositionalEncoding
from tfattn.ops import dropout as dropout_ops
from tfattn.ops import normalization

BACKEND = keras.config.backend()
B, T, S, C, H, F, V = 2, 5, 4, 8, 2, 16, 11
D = C // H
FLAVORS = list(attention_flavors.FLAVORS)
# (flavor, normalize_first), as tests/harness.py's SETUPS.
SETUPS = [("paper", False), ("paper", True), ("reference_2017", False),
          ("reference_2019", False)]
# Attention's reductions: the projections (C terms), the scores (d), the
# softmax and the weighted sum (2 T_k), then the paper's output projection
# (C) or the reference flavours' residual layer norm (4 C, the larger).
ATTENTION_TERMS = C + D + 2 * T + 4 * C
# The weights: the projections, the scores and the softmax's sum.
WEIGHT_TERMS = C + D + T
# x + table: the table's rounding to float32 and the sum with x.
PE_TERMS = 2


def _np(x):
    return np.asarray(ops.convert_to_numpy(x))


def _inputs(length=T, seed=0, pad=2):
    """float32 [B, length, C] whose first row ends in `pad` all-zero rows
    (padding, as zero-padded embeddings give), and its keep-mask."""
    x = np.random.default_rng(seed).normal(size=(B, length, C))
    x = x.astype("float32")
    if pad:
        x[0, -pad:] = 0.0
    return x, np.abs(x).sum(-1) != 0


def _set_weights(layer, seed=1, scale=0.5):
    """Every float weight drawn from a NumPy generator (not the layer's
    initializers), so the comparisons see non-trivial biases and norms."""
    rng = np.random.default_rng(seed)
    for w in layer.weights:
        if "float" in str(w.dtype):
            w.assign((scale * rng.normal(size=w.shape)).astype("float32"))


def _gradients(fn, *args):
    """d fn / d args by the running backend's autodiff, as NumPy arrays.

    Args:
        fn: a function of tensors returning a scalar.
        *args: NumPy arrays, its arguments.

    Returns:
        list of NumPy arrays, one gradient per argument.
    """
    if BACKEND == "tensorflow":
        import tensorflow as tf

        tensors = [tf.convert_to_tensor(a) for a in args]
        with tf.GradientTape() as tape:
            tape.watch(tensors)
            y = fn(*tensors)
        return [_np(g) for g in tape.gradient(y, tensors)]
    if BACKEND == "jax":
        import jax

        # Compiled, as the JAX trainer runs it.
        grad = jax.jit(jax.grad(fn, argnums=tuple(range(len(args)))))
        return [_np(g) for g in grad(*args)]
    if BACKEND == "torch":
        import torch

        tensors = [torch.tensor(a, requires_grad=True) for a in args]
        return [_np(g) for g in torch.autograd.grad(fn(*tensors), tensors)]
    pytest.skip(f"no autodiff on the {BACKEND} backend")


def _logits_magnitude(layer, queries, keys):
    """The scale of attention weights: the largest sum of the score terms'
    magnitudes, max over heads of sum_d |q_d k_d| / sqrt(d) (the logits
    the weights come from; |.| bounds the 2017 flavour's ReLU too)."""
    params = attention_params(layer)

    def heads(x, name):
        bias = params.get("b" + name)
        y = np.abs(x @ params["w" + name] + (0.0 if bias is None else bias))
        return y.reshape(y.shape[0], y.shape[1], H, D)

    return float(np.einsum("bqhd,bkhd->bhqk", heads(queries, "q"),
                           heads(keys, "k")).max() / np.sqrt(D))


def _softmax64(z):
    z = np.asarray(z, np.float64)
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


# --------------------------------------------------------------------------
# MultiHeadAttention, each flavour, against tests/reference_numpy.py.


def _numpy_attention(layer, queries, keys, keep, causality):
    """The layer's attention in NumPy: (output, weights). `keep` is the
    keys' keep-mask given as `padding_mask` (key_masks in 2019's polarity);
    the 2017 flavour finds padding from zero rows instead."""
    params = attention_params(layer)
    if layer.flavor == "paper":
        attend = None if keep is None else keep[:, None, :]
        return ref.mha_paper(queries, keys, keys, params, H,
                             attend_mask=attend, causality=causality)
    if layer.flavor == "reference_2019":
        return ref.mha_reference_2019(
            queries, keys, keys, params, H,
            key_masks=None if keep is None else ~keep, causality=causality)
    return ref.mha_reference_2017(queries, keys, params, H,
                                  causality=causality)


@pytest.mark.parametrize("masks", ["none", "padding", "causal",
                                   "padding_causal"])
@pytest.mark.parametrize("flavor", FLAVORS)
def test_multi_head_attention_equals_numpy(flavor, masks):
    causality = "causal" in masks
    x, keep = _inputs(pad=2 if "padding" in masks else 0)
    layer = MultiHeadAttention(num_heads=H, flavor=flavor,
                               causality=causality)
    layer(x)
    _set_weights(layer)
    call = {}
    if "padding" in masks:
        call = ({"key_masks": ~keep} if flavor == "reference_2019" else
                {} if flavor == "reference_2017" else {"padding_mask": keep})
    out, weights = layer(x, return_attention_scores=True, **call)
    want, want_weights = _numpy_attention(
        layer, x, x, keep if "padding" in masks else None, causality)
    bounds.assert_close(_np(out), want, terms=ATTENTION_TERMS)
    # A weight moves by at most its logits' error.
    bounds.assert_close(_np(weights), want_weights, terms=WEIGHT_TERMS,
                        scale=_logits_magnitude(layer, x, x))


# --------------------------------------------------------------------------
# Layer normalization: forward and the closed-form gradient.


def _numpy_layer_norm_gradients(x, gamma, dy, epsilon):
    """(dx, dγ, dβ) of Σ dy · LN(x) in float64 (module docstring of
    tfattn.ops.normalization: the formulas, derived by hand)."""
    x, gamma, dy = (np.asarray(a, np.float64) for a in (x, gamma, dy))
    centered = x - x.mean(-1, keepdims=True)
    inv_std = 1.0 / np.sqrt((centered**2).mean(-1, keepdims=True) + epsilon)
    n = centered * inv_std
    axes = tuple(range(x.ndim - 1))
    g = dy * gamma
    dx = inv_std * (g - g.mean(-1, keepdims=True)
                    - n * (g * n).mean(-1, keepdims=True))
    return dx, (dy * n).sum(axes), dy.sum(axes)


def test_layer_normalization_forward_and_gradient_equal_numpy():
    rng = np.random.default_rng(0)
    x = (rng.normal(size=(3, 4, C)) * 2 + 1).astype("float32")
    gamma = (rng.normal(size=C) + 1).astype("float32")
    beta = rng.normal(size=C).astype("float32")
    dy = rng.normal(size=x.shape).astype("float32")
    epsilon = 1e-6

    layer = LayerNormalization(epsilon=epsilon)
    layer.build(x.shape)
    layer.gamma.assign(gamma)
    layer.beta.assign(beta)
    want = ref.layer_norm(x, gamma, beta, epsilon)
    # Mean and variance, each a sum of C terms, twice.
    bounds.assert_close(_np(layer(x)), want, terms=4 * C)

    def loss(x, gamma, beta):
        y = normalization.layer_normalization(x, gamma, beta, epsilon)
        return ops.sum(y * dy)

    got = _gradients(loss, x, gamma, beta)
    # The forward norm (4 C), then dx's two means over C (2 C) or dγ's and
    # dβ's sums over the rows.
    rows = x.size // C
    terms = 4 * C + max(2 * C, rows)
    for name, g, w in zip(("x", "gamma", "beta"), got,
                          _numpy_layer_norm_gradients(x, gamma, dy, epsilon)):
        bounds.assert_close(g, w, terms=terms, err_msg=name)


def test_layer_normalization_bfloat16_in_and_out():
    x, _ = _inputs(pad=0)
    y = normalization.layer_normalization(
        ops.cast(x, "bfloat16"), np.ones(C, "float32"),
        np.zeros(C, "float32"), 1e-6)
    assert keras.backend.standardize_dtype(y.dtype) == "bfloat16"
    want = ref.layer_norm(_np(ops.cast(ops.cast(x, "bfloat16"), "float32")),
                          np.ones(C), np.zeros(C), 1e-6)
    # Computed in float32: one rounding of each output to bfloat16.
    bounds.assert_close(_np(ops.cast(y, "float32")), want, terms=1,
                        scale=np.abs(want), dtype="bfloat16")


# --------------------------------------------------------------------------
# Label-smoothed cross-entropy and R-Drop's symmetric KL.


def test_label_smoothed_loss_and_gradient_equal_numpy():
    rng = np.random.default_rng(3)
    logits = (rng.normal(size=(B, T, V)) * 3).astype("float32")
    labels = rng.integers(1, V, size=(B, T)).astype("int32")
    labels[0, -2:] = 0
    epsilon = 0.1
    got = losses.smoothed_cross_entropy(labels, logits, epsilon=epsilon)
    want = ref.smoothed_cross_entropy(logits, labels, epsilon=epsilon)
    keep = (labels != 0)[..., None]
    # The terms: log-probabilities of the kept tokens.
    log_probs = np.abs(np.log(_softmax64(logits)) * keep).max()
    # A log-softmax over V logits per token, then a sum over B·T tokens.
    bounds.assert_close(float(_np(got)), want, terms=V + B * T,
                        scale=log_probs)

    (grad,) = _gradients(
        lambda z: losses.smoothed_cross_entropy(labels, z, epsilon=epsilon),
        logits)
    y_s = (1 - epsilon) * np.eye(V)[labels] + epsilon / V
    want_grad = (_softmax64(logits) - y_s) * keep / keep.sum()
    # softmax - y_s over V, divided by the token count: a probability moves
    # by at most its logits' error (logits' magnitude / the count).
    bounds.assert_close(grad, want_grad, terms=V + 2,
                        scale=np.abs(logits).max() / keep.sum())

    other = (rng.normal(size=logits.shape) * 3).astype("float32")
    kl = losses.symmetric_kl_sum(labels, logits, other)
    # Two log-softmaxes over V, the KL's sum over V, the sum over B·T
    # tokens; its terms: log-probabilities, summed over the kept tokens.
    log_q = np.abs(np.log(_softmax64(other)) * keep).max()
    bounds.assert_close(
        float(_np(kl)), ref.symmetric_kl_sum(logits, other, labels),
        terms=2 * V + B * T, scale=keep.sum() * max(log_probs, log_q))


# --------------------------------------------------------------------------
# Dropout: the rate applied, the scale, determinism.


def test_dropout_keep_rate_scale_and_seed():
    rate, n = 0.3, 20000
    x = np.ones((n // 100, 100), "float32")
    seed = keras.random.SeedGenerator(7).next()
    y = _np(dropout_ops.dropout(x, rate, seed))
    threshold = dropout_ops.drop_threshold(rate)
    scale = np.float32(65536 / (65536 - threshold))
    assert set(np.unique(y)) <= {0.0, scale}
    # Each element is kept with probability p = 1 - t/2^16: the kept count
    # is binomial(n, p); 5 standard deviations fail once in ~2·10^6 runs.
    p = 1 - threshold / 65536
    kept = np.mean(y != 0)
    assert abs(kept - p) <= 5 * np.sqrt(p * (1 - p) / n), kept
    np.testing.assert_array_equal(_np(dropout_ops.dropout(x, rate, seed)), y)
    other = keras.random.SeedGenerator(8).next()
    assert np.any(_np(dropout_ops.dropout(x, rate, other)) != y)
    shared = _np(dropout_ops.dropout(np.ones((4, 3, 16), "float32"), 0.5,
                                     seed, noise_shape=[None, 1, 16]))
    np.testing.assert_array_equal(shared, np.broadcast_to(shared[:, :1],
                                                          shared.shape))


def test_dropout_layer_is_deterministic_given_its_seed():
    x = np.ones((8, 32), "float32")
    a, b = Dropout(0.5, seed=3), Dropout(0.5, seed=3)
    first = _np(a(x, training=True))
    np.testing.assert_array_equal(_np(b(x, training=True)), first)
    assert np.any(_np(a(x, training=True)) != first)  # a new draw per call
    np.testing.assert_array_equal(_np(a(x, training=False)), x)


# --------------------------------------------------------------------------
# Positional encoding.


@pytest.mark.parametrize("kind,table", [("sinusoid", ref.sinusoid_2019),
                                        ("sinusoid_2017", ref.sinusoid_2017)])
def test_positional_encoding_tables(kind, table):
    layer = PositionalEncoding(kind=kind, max_length=10)
    zeros = np.zeros((1, 10, C), "float32")
    bounds.assert_close(_np(layer(zeros))[0], table(10, C), terms=PE_TERMS)
    x, _ = _inputs()
    full = _np(layer(x))
    start = ops.convert_to_tensor(np.int32(3))
    bounds.assert_close(_np(layer(x[:, 3:4], start_index=start)),
                        full[:, 3:4], terms=PE_TERMS)
    bounds.assert_close(_np(layer(x[:, 3:], start_index=3)),
                        full[:, 3:], terms=PE_TERMS)


def test_positional_encoding_padding_mode_and_too_long_inputs():
    x, _ = _inputs()
    layer = PositionalEncoding(max_length=6, padding_mode="reference_2019")
    pe = ref.sinusoid_2019(6, C)[:T]
    bounds.assert_close(_np(layer(x)), x + np.where(x == 0, 0, pe),
                        terms=PE_TERMS)
    with pytest.raises(ValueError, match="max_length=6"):
        layer(x, start_index=2)
    error = ValueError
    if BACKEND == "tensorflow":  # checked in the graph: TensorFlow's error
        import tensorflow as tf

        error = tf.errors.InvalidArgumentError
    with pytest.raises(error, match="max_length"):
        layer(x, start_index=ops.convert_to_tensor(np.int32(2)))


@pytest.mark.skipif(BACKEND != "jax", reason="JAX's compiled calls")
def test_positional_encoding_under_jax_jit_clips_positions():
    import jax

    layer = PositionalEncoding(max_length=6)
    x = np.zeros((1, 2, C), "float32")
    step = jax.jit(lambda x, s: layer(x, start_index=s))
    table = ref.sinusoid_2019(6, C)
    bounds.assert_close(_np(step(x, 3))[0], table[3:5], terms=PE_TERMS)
    # Not checkable under the trace: position 6 reads the last row.
    bounds.assert_close(_np(step(x, 5))[0], table[[5, 5]], terms=PE_TERMS)


# --------------------------------------------------------------------------
# Blocks against NumPy; stacks against their blocks and NumPy.


def _numpy_norm(norm, x):
    return ref.layer_norm(x, _np(norm.gamma), _np(norm.beta), norm.epsilon)


def _numpy_sublayer(block, prefix, x, memory, keep, causality):
    """One attention sublayer with the block's residual wiring."""
    attention = getattr(block, prefix)
    if block.flavor != "paper":  # residual and norm inside the attention
        keys = x if memory is None else memory
        return _numpy_attention(attention, x, keys, keep, causality)[0]
    norm = getattr(block, f"{prefix}_layer_norm")
    queries = _numpy_norm(norm, x) if block.normalize_first else x
    keys = queries if memory is None else memory
    x = x + _numpy_attention(attention, queries, keys, keep, causality)[0]
    return x if block.normalize_first else _numpy_norm(norm, x)


def _numpy_feed_forward(block, x):
    norm = block.feed_forward_layer_norm
    if block.flavor == "paper" and block.normalize_first:
        return x + ffn_numpy(_numpy_norm(norm, x), block.feed_forward)
    return _numpy_norm(norm, x + ffn_numpy(x, block.feed_forward))


def _numpy_block(block, x, keep, memory=None, memory_keep=None):
    decoder = isinstance(block, DecoderBlock)
    x = _numpy_sublayer(block, "self_attention", x, None, keep, decoder)
    if decoder:
        x = _numpy_sublayer(block, "cross_attention", x, memory, memory_keep,
                            False)
    return _numpy_feed_forward(block, x)


def _masks(flavor, keep, memory_keep=None):
    """The call's padding masks: the 2017 flavour reads zero rows."""
    if flavor == "reference_2017":
        return {}
    masks = {"padding_mask": keep}
    if memory_keep is not None:
        masks["memory_padding_mask"] = memory_keep
    return masks


def _block_args(flavor, normalize_first):
    return dict(num_heads=H, ffn_units=F, dropout_rate=0.0, flavor=flavor,
                normalize_first=normalize_first)


# One encoder block: tests/bounds.py's count of a Transformer layer.
BLOCK_TERMS = bounds.stack_terms(1, C, F, T)


def _stack_terms(blocks, normalize_first):
    """A stack's terms: its blocks (a decoder layer's cross-attention
    counts as a block of its own) and the pre-norm stacks' final layer
    norm (4 C)."""
    return bounds.stack_terms(blocks, C, F, T) + 4 * C * normalize_first


@pytest.mark.parametrize("flavor,normalize_first", SETUPS)
def test_encoder_stack_equals_its_blocks_and_numpy(flavor, normalize_first):
    x, keep = _inputs()
    encoder = Encoder(num_layers=2, **_block_args(flavor, normalize_first))
    encoder(x)
    _set_weights(encoder)
    masks = _masks(flavor, keep)
    got = _np(encoder(x, **masks))

    composed, numpy_out = x, x
    for block in encoder.blocks:
        bounds.assert_close(
            _np(block(composed, **masks)),
            _numpy_block(block, composed, keep), terms=BLOCK_TERMS)
        composed = _np(block(composed, **masks))
        numpy_out = _numpy_block(block, numpy_out, keep)
    if normalize_first:
        composed = _np(encoder.final_layer_norm(composed))
        numpy_out = _numpy_norm(encoder.final_layer_norm, numpy_out)
    terms = _stack_terms(2, normalize_first)
    bounds.assert_close(got, composed, terms=terms)
    bounds.assert_close(got, numpy_out, terms=terms)


@pytest.mark.parametrize("flavor,normalize_first", SETUPS)
def test_decoder_stack_equals_its_blocks_and_numpy(flavor, normalize_first):
    x, keep = _inputs()
    memory, memory_keep = _inputs(length=S, seed=1, pad=1)
    decoder = Decoder(num_layers=2, **_block_args(flavor, normalize_first))
    decoder(x, memory)
    _set_weights(decoder)
    masks = _masks(flavor, keep, memory_keep)
    got = _np(decoder(x, memory, **masks))

    composed, numpy_out = x, x
    for block in decoder.blocks:
        composed = _np(block(composed, memory, **masks))
        numpy_out = _numpy_block(block, numpy_out, keep, memory, memory_keep)
    if normalize_first:
        composed = _np(decoder.final_layer_norm(composed))
        numpy_out = _numpy_norm(decoder.final_layer_norm, numpy_out)
    # Two decoder blocks, each a self- and a cross-attention block.
    terms = _stack_terms(2 * 2, normalize_first)
    bounds.assert_close(got, composed, terms=terms)
    bounds.assert_close(got, numpy_out, terms=terms)


# --------------------------------------------------------------------------
# `.keras` files and a training step, under the running backend.


@pytest.mark.parametrize("layer_cls,kwargs,inputs", [
    (MultiHeadAttention, dict(num_heads=H, flavor="reference_2019"), 1),
    (MultiHeadAttention, dict(num_heads=H, causality=True), 1),
    (PositionalEncoding, dict(max_length=T), 1),
    (LayerNormalization, dict(epsilon=1e-6), 1),
    (DecoderBlock, _block_args("paper", True), 2),
])
def test_keras_file_round_trip(layer_cls, kwargs, inputs):
    data = [_inputs()[0], _inputs(length=S, seed=1)[0]][:inputs]
    assert_keras_file_round_trip(layer_cls, kwargs, data)


def test_a_model_trains_with_the_loss_dropout_and_norms():
    tokens = keras.Input((T, C))
    hidden = EncoderBlock(num_heads=H, ffn_units=F, dropout_rate=0.1,
                          seed=1)(tokens)
    model = keras.Model(tokens, keras.layers.Dense(V)(hidden))
    model.compile(optimizer=keras.optimizers.SGD(0.1),
                  loss=losses.LabelSmoothedCrossEntropy())
    x, _ = _inputs(pad=0)
    labels = np.random.default_rng(0).integers(1, V, size=(B, T))
    before = [_np(w).copy() for w in model.trainable_weights]
    history = model.fit(x, labels.astype("int32"), epochs=2, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
    moved = [not np.array_equal(a, _np(w))
             for a, w in zip(before, model.trainable_weights)]
    assert all(moved)
