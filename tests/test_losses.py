"""Tests of tfattn.losses (docs/reference.md §1.6-1.7, §2.7, §2.9, §5).

The oracle is tests/reference_numpy.py (float64, with an explicit smoothed
one-hot); the code under test uses a closed form without one-hots.
"""

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests import bounds
from tests import reference_numpy as ref
from tfattn.losses import LabelSmoothedCrossEntropy
from tfattn.losses import smoothed_cross_entropy
from tfattn.losses import smoothed_cross_entropy_sum
from tfattn.losses import smoothed_cross_entropy_sums
from tfattn.losses import symmetric_kl_sum

B, T, V = 3, 6, 13
# `bounds.assert_close` terms of the symmetric KL sum: a log-softmax over
# the V classes, the sum over them, then the sum over the B·T targets.
KL_TERMS = 2 * V + B * T
# Of y_s read back from a float32 gradient: the softmax over V equal logits
# (V terms of 1/V: one unit at scale 1), on_value = 1 - ε + ε/V (three
# operations) and softmax - y_s (one).
READ_BACK_TERMS = 5


def _data(seed=0, scale=3.0, vocab=V):
    rng = np.random.default_rng(seed)
    logits = (scale * rng.normal(size=(B, T, vocab))).astype("float32")
    labels = rng.integers(1, vocab, size=(B, T)).astype("int32")
    labels[0, -2:] = 0  # padding
    labels[2, -4:] = 0
    return labels, logits


def _loss_terms(vocab=V):
    """`bounds.assert_close` terms of a token-mean cross-entropy: a
    log-softmax over the `vocab` classes, then a sum over the B·T targets."""
    return vocab + B * T


# --------------------------------------------------------------------------
# Agreement with the NumPy oracle.


@pytest.mark.parametrize("epsilon", [0.0, 0.1, 0.5])
@pytest.mark.parametrize("denominator_epsilon", [0.0, 1e-7])
def test_matches_reference(epsilon, denominator_epsilon):
    labels, logits = _data()
    got = smoothed_cross_entropy(
        labels, logits, epsilon=epsilon, denominator_epsilon=denominator_epsilon
    )
    want = ref.smoothed_cross_entropy(
        logits, labels, epsilon=epsilon, denom_epsilon=denominator_epsilon
    )
    assert got.dtype == "float32" and got.shape == ()
    bounds.assert_close(float(got), want, terms=_loss_terms())


@pytest.mark.parametrize("scale", [40.0, 1e4])
def test_matches_reference_with_other_pad_id_and_large_logits(scale):
    # At 1e4 the labels' probabilities underflow float32 (exp(-1e4) = 0):
    # the logsumexp must not go through log(softmax[label]).
    labels, logits = _data(1, scale=scale)
    labels[1, 0] = 4
    got = smoothed_cross_entropy(labels, logits, pad_id=4)
    want = ref.smoothed_cross_entropy(logits, labels, pad_id=4)
    bounds.assert_close(float(got), want, terms=_loss_terms())


def test_per_token_loss_equals_explicit_smoothed_targets():
    """CE = -Σ label_smoothing(onehot)·log_softmax, token by token."""
    labels, logits = _data(2)
    per_token = np.asarray(
        LabelSmoothedCrossEntropy(pad_id=None).call(labels, logits)
    )
    one_hot = np.eye(V, dtype="float32")[labels]
    y_s = ref.label_smoothing(one_hot, 0.1)
    log_sm = logits - np.log(np.sum(np.exp(logits), -1, keepdims=True))
    # Both in float32: the log-softmax's sum over V, then the sum over V.
    bounds.assert_close(per_token, -np.sum(y_s * log_sm, -1), terms=2 * V)


@pytest.mark.parametrize("jit_compile", [False, True])
@pytest.mark.parametrize("epsilon", [0.0, 0.1])
def test_gradient_matches_numpy(epsilon, jit_compile):
    """The written-out gradient: (softmax(z) - y_s) · counted / count.

    Pad targets with an id outside [0, V), per-sequence weights and a
    dynamic vocabulary size under XLA are in the batch.
    """
    labels, logits = _data(3)
    labels[labels == 0] = -100
    weights = np.array([1.0, 0.5, 2.0], "float32")
    spec = tf.TensorSpec((None, None, None), tf.float32)

    @tf.function(jit_compile=jit_compile, reduce_retracing=True)
    def gradient(labels, logits):
        with tf.GradientTape() as tape:
            tape.watch(logits)
            total, count = smoothed_cross_entropy_sum(
                labels, logits, epsilon=epsilon, pad_id=-100, weights=weights
            )
            loss = total / count
        return tape.gradient(loss, logits)

    got = gradient.get_concrete_function(
        tf.TensorSpec((None, None), tf.int32), spec
    )(tf.constant(labels), tf.constant(logits))
    z = logits.astype("float64")
    softmax = np.exp(z - z.max(-1, keepdims=True))
    softmax /= softmax.sum(-1, keepdims=True)
    counted = (labels != -100) * weights[:, None]
    y_s = ref.label_smoothing(np.eye(V)[np.clip(labels, 0, None)], epsilon)
    want = (softmax - y_s) * counted[..., None] / counted.sum()
    # The softmax over V (and the count, a sum over the B·T targets).
    bounds.assert_close(np.asarray(got), want, terms=_loss_terms())


@pytest.mark.parametrize("shape", [(), (5,), (2, 3, 2)])
def test_gradient_for_labels_of_any_rank(shape):
    rng = np.random.default_rng(3)
    logits = tf.constant(rng.normal(size=shape + (V,)).astype("float32"))
    labels = tf.constant(rng.integers(1, V, size=shape).astype("int32"))
    with tf.GradientTape() as tape:
        tape.watch(logits)
        total, _ = smoothed_cross_entropy_sum(labels, logits, epsilon=0.1)
    z = logits.numpy().astype("float64")
    softmax = np.exp(z - z.max(-1, keepdims=True))
    softmax /= softmax.sum(-1, keepdims=True)
    targets = np.eye(V)[labels.numpy()] * 0.9 + 0.1 / V
    # The softmax over V, then the subtraction of the targets.
    bounds.assert_close(
        tape.gradient(total, logits).numpy(), softmax - targets, terms=V + 1)


def test_implied_smoothed_targets_match_spec_golden_values():
    """∂CE/∂z = softmax(z) - y_s, so y_s is read back from the gradient."""
    vocab = 32000
    logits = tf.zeros((1, 1, vocab))
    labels = np.array([[7]])
    with tf.GradientTape() as tape:
        tape.watch(logits)
        loss = smoothed_cross_entropy(labels, logits, epsilon=0.1)
    y_s = 1.0 / vocab - np.asarray(tape.gradient(loss, logits), "float64")[0, 0]
    bounds.assert_printed(y_s[7], "0.900003125", terms=READ_BACK_TERMS,
                          dtype="float32")
    # The others: the softmax's V terms and two subtractions, at the
    # probabilities' magnitude 1/V.
    bounds.assert_close(np.delete(y_s, 7), 3.125e-6, terms=vocab + 2,
                        scale=1.0 / vocab)
    one_hot = np.zeros(vocab, "float32")
    one_hot[7] = 1.0
    golden = ref.label_smoothing(one_hot, 0.1)
    bounds.assert_close(y_s, golden, terms=READ_BACK_TERMS)


def test_pads_are_excluded():
    labels, logits = _data(3)
    base = float(smoothed_cross_entropy(labels, logits))
    changed = logits.copy()
    changed[labels == 0] = 100.0 * np.random.default_rng(0).normal(
        size=changed[labels == 0].shape
    )
    bounds.assert_close(float(smoothed_cross_entropy(labels, changed)), base,
                        terms=_loss_terms())
    # Only the real targets are counted in the denominator.
    total, count = smoothed_cross_entropy_sum(labels, logits)
    assert float(count) == np.sum(labels != 0)
    # The same sums: only the division differs (float64 here, float32 there).
    bounds.assert_close(float(total) / float(count), base, terms=1)


def test_pad_id_none_counts_everything_and_out_of_vocab_pads_are_fine():
    labels, logits = _data(4)
    all_tokens = smoothed_cross_entropy(labels, logits, pad_id=None)
    want = ref.smoothed_cross_entropy(
        logits, labels, pad_id=-1
    )  # no label is -1
    bounds.assert_close(float(all_tokens), want, terms=_loss_terms())
    ignored = np.where(labels == 0, -100, labels)
    bounds.assert_close(
        float(smoothed_cross_entropy(ignored, logits, pad_id=-100)),
        ref.smoothed_cross_entropy(logits, labels),
        terms=_loss_terms(),
    )


def test_all_padding_batch_gives_zero_not_nan():
    _, logits = _data()
    labels = np.zeros((B, T), "int32")
    assert float(smoothed_cross_entropy(labels, logits)) == 0.0
    assert (
        float(smoothed_cross_entropy(labels, logits, denominator_epsilon=1e-7))
        == 0.0
    )


def test_sum_variant_with_weights_gives_the_global_token_mean():
    labels, logits = _data(5)
    # Two "replicas" holding different numbers of pads.
    parts = [
        smoothed_cross_entropy_sum(labels[:1], logits[:1]),
        smoothed_cross_entropy_sum(labels[1:], logits[1:]),
    ]
    total = sum(float(t) for t, _ in parts)
    count = sum(float(c) for _, c in parts)
    bounds.assert_close(
        total / count, ref.smoothed_cross_entropy(logits, labels),
        terms=_loss_terms(),
    )
    weights = np.array([1.0, 0.0, 1.0], "float32")  # per sequence, [B]
    t_w, c_w = smoothed_cross_entropy_sum(labels, logits, weights=weights)
    keep = [0, 2]
    bounds.assert_close(
        float(t_w) / float(c_w),
        ref.smoothed_cross_entropy(logits[keep], labels[keep]),
        terms=_loss_terms(),
    )


def test_sums_count_the_argmax_hits_over_the_counted_targets():
    labels, logits = _data(7)
    labels[1, :3] = np.argmax(logits[1, :3], -1)  # some hits for sure
    weights = np.array([1.0, 2.0, 0.5], "float32")
    sums = smoothed_cross_entropy_sums(labels, logits, weights=weights)
    keep = (labels != 0) * weights[:, None]
    hits = (np.argmax(logits, -1) == labels) * keep
    # Sums over the B·T targets.
    bounds.assert_close(float(sums.correct), hits.sum(), terms=B * T)
    assert float(sums.correct) >= 3 * 2.0
    bounds.assert_close(float(sums.tokens), keep.sum(), terms=B * T)
    total, count = smoothed_cross_entropy_sum(labels, logits, weights=weights)
    assert float(total) == float(sums.loss)
    assert float(count) == float(sums.tokens)


def test_a_tie_at_the_top_counts_as_a_hit_and_hits_carry_no_gradient():
    logits = tf.constant([[[2.0, 5.0, 5.0, 1.0]]])  # label 2 ties label 1
    labels = tf.constant([[2]])
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(logits)
        sums = smoothed_cross_entropy_sums(labels, logits)
        total, _ = smoothed_cross_entropy_sum(labels, logits)
    assert float(sums.correct) == 1.0
    assert tape.gradient(sums.correct, logits) is None
    # The same kernels on the same logits: bit for bit.
    np.testing.assert_array_equal(
        tape.gradient(sums.loss, logits).numpy(),
        tape.gradient(total, logits).numpy(),
    )


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_logits_are_finite_and_float32(dtype):
    labels, logits = _data(6, scale=60.0, vocab=257)
    half = tf.cast(logits, dtype)
    with tf.GradientTape() as tape:
        tape.watch(half)
        loss = smoothed_cross_entropy(labels, half, denominator_epsilon=1e-7)
    grad = tape.gradient(loss, half)
    assert loss.dtype == "float32"
    assert np.isfinite(float(loss))
    assert np.all(np.isfinite(np.asarray(tf.cast(grad, "float32"))))
    rounded = np.asarray(tf.cast(half, "float32"))
    want = ref.smoothed_cross_entropy(rounded, labels, denom_epsilon=1e-7)
    bounds.assert_close(float(loss), want, terms=_loss_terms(257))


def test_jit_compile_and_dynamic_shapes():
    labels, logits = _data(7)
    fn = tf.function(
        lambda y, z: smoothed_cross_entropy(y, z, denominator_epsilon=1e-7),
        input_signature=[
            tf.TensorSpec((None, None), tf.int32),
            tf.TensorSpec((None, None, None), tf.float32),
        ],
        jit_compile=True,
    )
    bounds.assert_close(
        float(fn(labels, logits)),
        ref.smoothed_cross_entropy(logits, labels, denom_epsilon=1e-7),
        terms=_loss_terms(),
    )


# --------------------------------------------------------------------------
# The Keras loss class.


def test_loss_class_equals_function_and_serializes():
    labels, logits = _data(8)
    loss = LabelSmoothedCrossEntropy(
        epsilon=0.2, pad_id=0, denominator_epsilon=1e-7
    )
    want = ref.smoothed_cross_entropy(logits, labels, 0.2, denom_epsilon=1e-7)
    bounds.assert_close(float(loss(labels, logits)), want,
                        terms=_loss_terms())
    config = loss.get_config()
    assert config == dict(
        name="label_smoothed_cross_entropy",
        epsilon=0.2,
        pad_id=0,
        denominator_epsilon=1e-7,
        dtype="float32",
    )
    clone = LabelSmoothedCrossEntropy.from_config(config)
    assert clone.get_config() == config
    revived = keras.saving.deserialize_keras_object(
        json.loads(json.dumps(keras.saving.serialize_keras_object(loss)))
    )
    assert type(revived) is LabelSmoothedCrossEntropy
    assert revived.get_config() == config


def test_loss_class_sample_weight_and_keras_mask():
    labels, logits = _data(9)
    loss = LabelSmoothedCrossEntropy()
    weights = np.array([[1.0], [0.0], [1.0]], "float32")  # [B, 1]
    keep = [0, 2]
    want = ref.smoothed_cross_entropy(logits[keep], labels[keep])
    bounds.assert_close(
        float(loss(labels, logits, sample_weight=weights)), want,
        terms=_loss_terms(),
    )
    bounds.assert_close(
        float(loss(labels, logits, sample_weight=weights[:, 0])),
        want,
        terms=_loss_terms(),
    )
    masked = tf.constant(logits)
    masked._keras_mask = tf.constant(np.arange(B)[:, None] != 1) & tf.ones(
        (B, T), bool
    )
    bounds.assert_close(float(loss(labels, masked)), want,
                        terms=_loss_terms())


def test_loss_class_per_token_call():
    labels, logits = _data(10)
    per_token = np.asarray(LabelSmoothedCrossEntropy().call(labels, logits))
    assert per_token.shape == (B, T)
    assert np.all(per_token[labels == 0] == 0)
    bounds.assert_close(
        per_token.sum() / np.sum(labels != 0),
        ref.smoothed_cross_entropy(logits, labels),
        terms=_loss_terms(),
    )


def test_loss_class_trains_a_model_with_integer_targets():
    labels, logits = _data(11)
    inp = keras.Input((T, V))
    model = keras.Model(inp, keras.layers.Dense(V)(inp))
    model.compile(
        optimizer=keras.optimizers.SGD(0.1), loss=LabelSmoothedCrossEntropy()
    )
    history = model.fit(
        logits, labels.astype("int64"), batch_size=B, epochs=2, verbose=0
    )
    losses = history.history["loss"]
    assert np.all(np.isfinite(losses)) and losses[1] < losses[0]
    out = model.predict(logits, verbose=0)
    # `evaluate` runs the Dense over its V inputs again, then the loss.
    bounds.assert_close(
        model.evaluate(logits, labels, batch_size=B, verbose=0),
        ref.smoothed_cross_entropy(out, labels),
        terms=V + _loss_terms(),
    )


# --------------------------------------------------------------------------
# Bad input.


@pytest.mark.parametrize(
    "kwargs, pattern",
    [
        (dict(epsilon=1.0), r"argument `epsilon`.*\[0, 1\).*epsilon=1.0"),
        (dict(epsilon=-0.1), r"argument `epsilon`.*epsilon=-0.1"),
        (dict(epsilon="0.1"), r"argument `epsilon`.*epsilon='0.1'"),
        (dict(pad_id=0.0), r"argument `pad_id`.*integer or None.*pad_id=0.0"),
        (
            dict(denominator_epsilon=-1e-7),
            r"argument `denominator_epsilon`.*>= 0.*denominator_epsilon=-1e-07",
        ),
    ],
)
def test_rejects_bad_arguments(kwargs, pattern):
    labels, logits = _data()
    with pytest.raises(ValueError, match=pattern):
        smoothed_cross_entropy(labels, logits, **kwargs)
    with pytest.raises(ValueError, match=pattern):
        LabelSmoothedCrossEntropy(**kwargs)


def test_sum_variant_rejects_bad_epsilon():
    labels, logits = _data()
    with pytest.raises(ValueError, match=r"argument `epsilon`.*epsilon=2"):
        smoothed_cross_entropy_sum(labels, logits, epsilon=2)


@pytest.mark.parametrize(
    "labels, logits, pattern",
    [
        (
            np.ones((B, T), "float32"),
            np.ones((B, T, V), "float32"),
            r"argument `labels`.*integer tensor of shape \(3, 6\).*dtype "
            r"float32 and shape \(3, 6\)",
        ),
        (
            np.ones((B, T + 1), "int32"),
            np.ones((B, T, V), "float32"),
            r"argument `labels`.*\(3, 6\).*logits' shape \(3, 6, 13\).*shape "
            r"\(3, 7\)",
        ),
        (
            np.ones((B, T, 1), "int32"),
            np.ones((B, T, V), "float32"),
            r"argument `labels`.*shape \(3, 6, 1\)",
        ),
        (
            np.ones((B, T), "int32"),
            np.ones((B, T, V), "int32"),
            r"argument `logits`.*float tensor of shape \[..., V\].*dtype int32",
        ),
        (
            np.ones((), "int32"),
            np.float32(1.0),
            r"argument `logits`.*shape \(\)",
        ),
    ],
)
def test_rejects_bad_tensors(labels, logits, pattern):
    with pytest.raises(ValueError, match=pattern):
        smoothed_cross_entropy(labels, logits)
    with pytest.raises(ValueError, match=pattern):
        LabelSmoothedCrossEntropy()(labels, logits)


# --------------------------------------------------------------------------
# R-Drop's consistency term.


@pytest.mark.parametrize("pad_id", [0, None])
def test_symmetric_kl_sum_matches_numpy(pad_id):
    labels, logits_a = _data(0)
    _, logits_b = _data(1)
    got = symmetric_kl_sum(labels, logits_a, logits_b, pad_id=pad_id)
    want = ref.symmetric_kl_sum(logits_a, logits_b, labels, pad_id)
    assert got.dtype == "float32" and got.shape == ()
    assert want > 1.0  # Different logits: a term far from 0.
    bounds.assert_close(float(got), want, terms=KL_TERMS)


def test_symmetric_kl_sum_is_zero_for_equal_passes_and_symmetric():
    labels, logits_a = _data(0)
    _, logits_b = _data(1)
    # Both passes through the same kernels on the same logits: exactly 0.
    assert float(symmetric_kl_sum(labels, logits_a, logits_a)) == 0.0
    bounds.assert_close(
        float(symmetric_kl_sum(labels, logits_a, logits_b)),
        float(symmetric_kl_sum(labels, logits_b, logits_a)), terms=KL_TERMS)


def test_symmetric_kl_sum_gradient_matches_numpy():
    # d/dz_a of ½Σ(p-q)(log p - log q) = ½[p⊙(g - Σp⊙g) + (p - q)], with
    # g = log p - log q, from the softmax Jacobian; float64 NumPy.
    labels, logits_a = _data(2, scale=1.0)
    _, logits_b = _data(3, scale=1.0)
    a = tf.Variable(logits_a)
    with tf.GradientTape() as tape:
        loss = symmetric_kl_sum(labels, a, tf.constant(logits_b))
    got = tape.gradient(loss, a).numpy()
    za, zb = logits_a.astype(np.float64), logits_b.astype(np.float64)
    p = np.exp(za - za.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    q = np.exp(zb - zb.max(-1, keepdims=True))
    q /= q.sum(-1, keepdims=True)
    g = np.log(p) - np.log(q)
    want = 0.5 * (p * (g - (p * g).sum(-1, keepdims=True)) + (p - q))
    want *= (labels != 0)[..., None]
    # The log-softmax's forward and backward sums over V, and the four
    # elementwise operations between them.
    bounds.assert_close(got, want, terms=2 * V + 4)


def test_symmetric_kl_sum_of_bfloat16_logits_is_float32_and_close():
    labels, logits_a = _data(0)
    _, logits_b = _data(1)
    half_a = tf.cast(logits_a, tf.bfloat16)
    half_b = tf.cast(logits_b, tf.bfloat16)
    got = symmetric_kl_sum(labels, half_a, half_b)
    assert got.dtype == "float32"
    want = ref.symmetric_kl_sum(tf.cast(half_a, tf.float32),
                                tf.cast(half_b, tf.float32), labels)
    bounds.assert_close(float(got), want, terms=KL_TERMS)


@pytest.mark.parametrize(
    "logits_b, kwargs, pattern",
    [
        (np.ones((B, T, V + 1), "float32"), {},
         r"symmetric_kl_sum.*argument `logits_b`.*shape of `logits_a`, "
         r"\(3, 6, 13\).*shape \(3, 6, 14\)"),
        (np.ones((B, T, V), "int32"), {},
         r"symmetric_kl_sum.*argument `logits_b`.*float tensor.*int32"),
        (np.ones((B, T, V), "float32"), dict(pad_id=0.5),
         r"symmetric_kl_sum.*argument `pad_id`.*pad_id=0.5"),
    ],
)
def test_symmetric_kl_sum_rejects_bad_arguments(logits_b, kwargs, pattern):
    labels, logits_a = _data()
    with pytest.raises(ValueError, match=pattern):
        symmetric_kl_sum(labels, logits_a, logits_b, **kwargs)
