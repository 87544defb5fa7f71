"""Tests of `tfattn.HardAttention` and `tfattn.losses.reinforce_loss`: the
choice is exactly a value row, sampling follows α, the REINFORCE surrogate
estimates the exact gradient, and both training routes learn a toy task."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfattn
from tests import bounds
from tests.harness import run_layer_test
from tfattn.losses import reinforce_loss

RNG = np.random.default_rng(11)


def _softmax(s):
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_max_returns_exactly_the_value_row_at_the_argmax():
    q = RNG.normal(size=(3, 4, 8)).astype("float32")
    k = RNG.normal(size=(3, 6, 8)).astype("float32")
    v = RNG.normal(size=(3, 6, 5)).astype("float32")
    layer = tfattn.HardAttention(score="dot")
    out, w, index, log_prob = layer(
        q, k, v, return_attention_scores=True, return_selection=True
    )
    scores = q.astype(np.float64) @ k.astype(np.float64).swapaxes(-1, -2)
    want_index = np.argmax(scores, -1)
    np.testing.assert_array_equal(index, want_index)
    np.testing.assert_array_equal(
        out, np.take_along_axis(v, want_index[..., None], 1)
    )
    # The dot product over the width, then the softmax's sum over the keys
    # and its division (or the log); probabilities and their logs move by
    # at most the logits' error.
    width, keys = q.shape[-1], k.shape[1]
    logits = max(1.0, np.abs(scores).max())
    bounds.assert_close(
        w, _softmax(scores), terms=width + keys + 1, scale=logits
    )
    bounds.assert_close(
        log_prob,
        np.log(
            np.take_along_axis(_softmax(scores), want_index[..., None], -1)[
                ..., 0
            ]
        ),
        terms=width + keys + 1,
        scale=logits,
    )


def test_sample_follows_alpha_and_is_reproducible():
    draws = 20_000
    q = np.repeat(RNG.normal(size=(1, 8)).astype("float32") * 0.6, draws, 0)
    k = np.repeat(RNG.normal(size=(1, 5, 8)).astype("float32"), draws, 0)
    keep = np.ones((draws, 5), bool)
    keep[:, 2] = False  # Never chosen.
    layer = tfattn.HardAttention(selection="sample", seed=5)
    out, w, index, _ = layer(
        q, k, mask=keep, return_attention_scores=True, return_selection=True
    )
    index = np.asarray(index)
    alpha = np.asarray(w)[0]
    assert alpha[2] == 0
    frequencies = np.bincount(index, minlength=5) / draws
    bounds.assert_sampled(frequencies, alpha, draws)
    np.testing.assert_array_equal(out, k[np.arange(draws), index])
    again = tfattn.HardAttention(selection="sample", seed=5)
    np.testing.assert_array_equal(
        again(q, k, mask=keep, return_selection=True)[1], index
    )


def test_fully_masked_query_chooses_nothing():
    q = RNG.normal(size=(2, 8)).astype("float32")
    k = RNG.normal(size=(2, 4, 8)).astype("float32")
    keep = np.array([[True] * 4, [False] * 4])
    for selection in ("max", "sample"):
        out, _, log_prob = tfattn.HardAttention(selection=selection, seed=0)(
            q, k, mask=keep, return_selection=True
        )
        assert np.all(np.asarray(out)[1] == 0)
        assert float(log_prob[1]) == 0.0 and np.isfinite(log_prob).all()


def test_reinforce_surrogate_gradient_is_the_exact_gradient_on_average():
    """∇ of the REINFORCE surrogate, averaged over many samples, equals
    -∇E[reward] = -∇ Σ_j α_j R_j (exact, by autodiff), within 5 standard
    errors estimated from 10 independent batches."""
    q = np.repeat(RNG.normal(size=(1, 4)).astype("float32"), 4000, 0)
    k = np.repeat(RNG.normal(size=(1, 5, 4)).astype("float32"), 4000, 0)
    rewards = np.array([1.0, 0.2, -0.5, 0.7, 0.0], "float32")
    layer = tfattn.HardAttention(score="bilinear", selection="sample", seed=3)
    layer(q[:1], k[:1])
    kernel = layer.bilinear_kernel
    with tf.GradientTape() as tape:
        _, alpha = layer(q[:1], k[:1], return_attention_scores=True)
        expected_reward = tf.reduce_sum(alpha * rewards)
    exact = -tape.gradient(expected_reward, kernel).numpy()
    estimates = []
    for _ in range(10):
        with tf.GradientTape() as tape:
            _, index, log_prob = layer(q, k, return_selection=True)
            loss = reinforce_loss(
                log_prob, tf.gather(rewards, index), baseline=0.3
            )
        estimates.append(tape.gradient(loss, kernel).numpy())
    estimates = np.array(estimates)
    standard_error = estimates.std(0, ddof=1) / np.sqrt(len(estimates))
    np.testing.assert_array_less(
        np.abs(estimates.mean(0) - exact), 5 * standard_error + 1e-4
    )
    assert np.abs(exact).max() > 10 * standard_error.max()  # A real check.


def test_reinforce_loss_values():
    log_prob = np.log(np.array([0.5, 0.25], "float32"))
    loss = reinforce_loss(log_prob, np.array([1.0, 3.0]), baseline=1.0)
    # The advantage, its product with log π, the mean over the 2 choices;
    # the terms summed are (reward - baseline)·log π.
    terms = 2 + len(log_prob)
    bounds.assert_close(
        float(loss),
        -(0 * log_prob[0] + 2 * log_prob[1]) / 2,
        terms=terms,
        scale=np.abs(2 * log_prob).max(),
    )
    bounds.assert_close(
        float(reinforce_loss(log_prob, 2.0)),
        -np.mean(2.0 * log_prob),
        terms=terms,
        scale=np.abs(2 * log_prob).max(),
    )


T, D = 5, 16
MIXING = np.random.default_rng(99).normal(size=(D, D)).astype("float32")


def _selection_batch(rng, n):
    """Pick the key that matches the query: the query is a fixed linear
    transform of the target key, so `bilinear` can learn W ∝ MIXING^-T."""
    keys = rng.normal(size=(n, T, D)).astype("float32")
    target = rng.integers(0, T, n)
    return keys[np.arange(n), target] @ MIXING, keys, target


@pytest.mark.slow
@pytest.mark.parametrize("route", ["reinforce", "straight_through"])
def test_hard_attention_learns_the_selection_task(route):
    rng = np.random.default_rng(0)
    keras.utils.set_random_seed(0)
    layer = tfattn.HardAttention(
        score="bilinear",
        selection="sample",
        straight_through=route == "straight_through",
        temperature=0.5,
        seed=0,
    )
    optimizer = keras.optimizers.Adam(0.05)
    one_hot = np.eye(T, dtype="float32")
    values = np.broadcast_to(one_hot, (128, T, T))
    for _ in range(150):
        query, keys, target = _selection_batch(rng, 128)
        with tf.GradientTape() as tape:
            out, index, log_prob = layer(
                query, keys, values, return_selection=True
            )
            if route == "reinforce":
                reward = tf.cast(tf.equal(index, target), tf.float32)
                loss = reinforce_loss(log_prob, reward, tf.reduce_mean(reward))
            else:  # Backpropagation through the straight-through choice.
                loss = tf.reduce_mean(
                    tf.reduce_sum((out - one_hot[target]) ** 2, -1)
                )
        grads = tape.gradient(loss, layer.trainable_variables)
        optimizer.apply_gradients(zip(grads, layer.trainable_variables))
    query, keys, target = _selection_batch(np.random.default_rng(1234), 2000)
    _, index, _ = layer(query, keys, return_selection=True)  # Sampled.
    assert np.mean(np.asarray(index) == target) >= 0.95


def test_straight_through_forward_is_the_hard_choice_and_has_gradients():
    q = RNG.normal(size=(4, 8)).astype("float32")
    k = RNG.normal(size=(4, 6, 8)).astype("float32")
    layer = tfattn.HardAttention(
        score="bilinear", selection="sample", straight_through=True, seed=2
    )
    with tf.GradientTape() as tape:
        out, index, _ = layer(q, k, return_selection=True)
        loss = tf.reduce_sum(out)
    np.testing.assert_array_equal(out, k[np.arange(4), np.asarray(index)])
    grad = tape.gradient(loss, layer.bilinear_kernel)
    assert grad is not None and np.abs(grad.numpy()).max() > 0


@pytest.mark.slow
def test_layer_contract_and_keras_file():
    q = RNG.normal(size=(2, 3, 12)).astype("float32")
    k = RNG.normal(size=(2, 5, 8)).astype("float32")
    # The max choice has no gradient: no fit step (the straight-through
    # variant below is fitted).
    run_layer_test(
        tfattn.HardAttention,
        dict(score="additive", units=6),
        [q, k],
        (2, 3, 8),
        expected_num_trainable_weights=3,
        run_fit=False,
        run_saving=True,
    )
    # Sampling draws anew at every call: no reload comparison of outputs.
    run_layer_test(
        tfattn.HardAttention,
        dict(
            score="additive",
            units=6,
            selection="sample",
            straight_through=True,
            temperature=0.7,
            seed=4,
        ),
        [q, k],
        (2, 3, 8),
        expected_num_trainable_weights=3,
    )


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(selection="soft"), "argument `selection`"),
        (dict(score="cosine"), "argument `score`"),
        (dict(units=-1), "argument `units`"),
        (dict(straight_through=True), "argument `straight_through`"),
        (
            dict(selection="sample", straight_through=True, temperature=0.0),
            "argument `temperature`",
        ),
        (dict(selection="sample", temperature=-1), "argument `temperature`"),
    ],
)
def test_bad_arguments_name_the_argument(kwargs, message):
    with pytest.raises(ValueError, match=message):
        tfattn.HardAttention(**kwargs)


def test_bad_call_inputs_name_the_argument():
    layer = tfattn.HardAttention()
    q, k = np.zeros((2, 8), "float32"), np.zeros((2, 4, 8), "float32")
    with pytest.raises(ValueError, match="argument `values`"):
        layer(q, k, np.zeros((2, 3, 8), "float32"))
    with pytest.raises(ValueError, match="argument `mask`"):
        layer(q, k, mask=np.ones((2, 4), "float32"))
    with pytest.raises(ValueError, match="argument `score`"):
        tfattn.HardAttention(score="dot")(np.zeros((2, 6), "float32"), k)
