"""tfattn.optimization.Adam (one fused kernel a variable) against the Adam
formula in NumPy and against Keras's Adam: dense and sparse gradients, a
schedule, amsgrad, config and slot names."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfattn.optimization import Adam

BETA_1, BETA_2, EPSILON = 0.9, 0.98, 1e-9


def _numpy_adam(theta, gradients, rates):
    """θ after one Adam step per gradient, from the formula, float64."""
    theta = theta.astype("float64")
    m = np.zeros_like(theta)
    v = np.zeros_like(theta)
    for t, (g, lr) in enumerate(zip(gradients, rates), start=1):
        m += (g - m) * (1 - BETA_1)
        v += (g * g - v) * (1 - BETA_2)
        alpha = lr * np.sqrt(1 - BETA_2**t) / (1 - BETA_1**t)
        theta -= alpha * m / (np.sqrt(v) + EPSILON)
    return theta


def _run(optimizer, start, gradients, sparse_rows=None):
    variables = [tf.Variable(value) for value in start]
    optimizer.build(variables)

    @tf.function
    def apply(grads):
        if sparse_rows is not None:  # the first variable's, as an embedding
            grads = [tf.IndexedSlices(tf.gather(grads[0], sparse_rows),
                                      sparse_rows, tf.shape(grads[0]))
                     ] + grads[1:]
        optimizer.apply_gradients(zip(grads, variables))

    for step_grads in gradients:
        apply([tf.constant(g) for g in step_grads])
    return [v.numpy() for v in variables]


def _problem(steps=4, seed=0):
    rng = np.random.default_rng(seed)
    shapes = [(6, 4), (4,), (3, 2, 5)]
    start = [rng.normal(size=s).astype("float32") for s in shapes]
    gradients = [
        [rng.normal(size=s).astype("float32") for s in shapes]
        for _ in range(steps)
    ]
    return start, gradients


def test_equals_the_formula_and_kerass_adam_with_a_schedule():
    start, gradients = _problem()
    schedule = keras.optimizers.schedules.ExponentialDecay(0.01, 1, 0.5)
    kwargs = dict(beta_1=BETA_1, beta_2=BETA_2, epsilon=EPSILON)
    ours = _run(Adam(learning_rate=schedule, **kwargs), start, gradients)
    theirs = _run(keras.optimizers.Adam(learning_rate=schedule, **kwargs),
                  start, gradients)
    rates = [0.01 * 0.5**t for t in range(len(gradients))]
    for i, (a, b) in enumerate(zip(ours, theirs)):
        want = _numpy_adam(start[i], [g[i] for g in gradients], rates)
        np.testing.assert_allclose(a, want, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_a_sparse_gradient_updates_as_its_dense_form():
    start, gradients = _problem(seed=1)
    rows = tf.constant([0, 3, 3, 5])  # a repeated row sums, as a gather's
    dense = [[g.copy() for g in step] for step in gradients]
    for step in dense:
        taken = np.zeros_like(step[0])
        np.add.at(taken, rows.numpy(), step[0][rows.numpy()])
        step[0] = taken
    kwargs = dict(learning_rate=0.01, beta_1=BETA_1, beta_2=BETA_2,
                  epsilon=EPSILON)
    ours = _run(Adam(**kwargs), start, gradients, sparse_rows=rows)
    for i, got in enumerate(ours):
        want = _numpy_adam(start[i], [g[i] for g in dense],
                           [0.01] * len(dense))
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_amsgrad_runs_kerass_update():
    start, gradients = _problem(seed=2)
    ours = _run(Adam(learning_rate=0.01, amsgrad=True), start, gradients)
    theirs = _run(keras.optimizers.Adam(learning_rate=0.01, amsgrad=True),
                  start, gradients)
    for a, b in zip(ours, theirs):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("use_ema", [False, True])
def test_config_slots_and_serialization_are_kerass(use_ema):
    kwargs = dict(learning_rate=0.002, beta_2=0.98, use_ema=use_ema,
                  name="adam")
    ours, theirs = Adam(**kwargs), keras.optimizers.Adam(**kwargs)
    assert ours.get_config() == theirs.get_config()
    revived = keras.optimizers.deserialize(keras.optimizers.serialize(ours))
    assert type(revived) is Adam
    variables = [tf.Variable(np.ones((2, 3), "float32"))]
    ours.build(variables)
    theirs.build(variables)
    assert [v.path for v in ours.variables] == [
        v.path for v in theirs.variables
    ]
