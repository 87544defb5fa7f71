"""Tests of tfattn.schedules.NoamSchedule (docs/reference.md §2.8, §3, §5).

The oracles are tests/reference_numpy.noam_2019 (0-based step, adds 1) and
noam_paper (1-based step_num), plus the spec's golden numbers.
"""

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests import bounds
from tests import reference_numpy as ref
from tfattn.schedules import NoamSchedule

STEPS = np.array([0, 1, 10, 999, 3998, 3999, 4000, 10000, 29146, 10**6])
# The Noam formula's elementwise float32 ops: the step's cast and + 1,
# rsqrt / s * w^-1.5, their minimum, and the product with the factor.
NOAM_TERMS = 5
# Keras's CosineDecay with warmup, elementwise float32 ops on the decay
# branch: cast, minimum, - w, / (T - w), * pi, cos, 1 +, 0.5 *,
# (1 - alpha) *, + alpha, * p (the warmup branch has 4 of them).
COSINE_TERMS = 11


def _values(schedule, steps=STEPS):
    return np.array([float(schedule(int(s))) for s in steps])


def test_reference_2019_golden_values():
    schedule = NoamSchedule(warmup_steps=4000, peak_learning_rate=3e-4)
    # s = step + 1: s=1 -> 7.5e-8, s=4000 -> 3e-4, s=10001 -> 1.8973e-4.
    # 7.5e-8, 7.5e-5 and 3e-4 are the formula's exact values; the last two
    # are figures rounded in docs/reference.md (§2.8, §5).
    bounds.assert_close(float(schedule(0)), 7.5e-8, terms=NOAM_TERMS)
    bounds.assert_close(float(schedule(999)), 7.5e-5, terms=NOAM_TERMS)
    bounds.assert_close(float(schedule(3999)), 3e-4, terms=NOAM_TERMS)
    bounds.assert_printed(float(schedule(10000)), "1.8973e-4")
    bounds.assert_printed(float(schedule(29146)), "1.111e-4")


@pytest.mark.parametrize("warmup", [4000, 100, 2.5])
def test_reference_2019_matches_numpy(warmup):
    schedule = NoamSchedule(warmup_steps=warmup, peak_learning_rate=3e-4)
    desired = ref.noam_2019(3e-4, STEPS, warmup)
    bounds.assert_close(
        _values(schedule), desired, terms=NOAM_TERMS, scale=np.abs(desired)
    )


def test_peak_is_reached_at_update_number_warmup():
    schedule = NoamSchedule(warmup_steps=50, peak_learning_rate=1e-3)
    values = _values(schedule, np.arange(200))
    assert int(np.argmax(values)) == 49  # 0-based step 49 = s 50
    bounds.assert_close(values.max(), 1e-3, terms=NOAM_TERMS)


@pytest.mark.parametrize("num_units", [512, 64])
def test_paper_schedule_matches_numpy(num_units):
    schedule = NoamSchedule(num_units=num_units, warmup_steps=4000)
    # The paper's step_num is 1-based: step_num = optimizer step + 1.
    desired = ref.noam_paper(num_units, STEPS + 1, 4000)
    bounds.assert_close(
        _values(schedule), desired, terms=NOAM_TERMS, scale=np.abs(desired)
    )
    bounds.assert_close(
        float(schedule(3999)), num_units**-0.5 * 4000**-0.5, terms=NOAM_TERMS
    )


def test_scale_multiplies_both_forms():
    for kwargs in ({}, dict(peak_learning_rate=3e-4)):
        plain = _values(NoamSchedule(**kwargs))
        scaled = _values(NoamSchedule(scale=2.5, **kwargs))
        bounds.assert_close(
            scaled, 2.5 * plain, terms=NOAM_TERMS, scale=np.abs(2.5 * plain)
        )


def test_tensor_steps_in_tf_function_and_xla():
    schedule = NoamSchedule(peak_learning_rate=3e-4)
    fn = tf.function(schedule, jit_compile=True)
    for dtype in (tf.int64, tf.int32, tf.float32):
        got = [float(fn(tf.constant(s, dtype))) for s in (0, 3999, 10000)]
        desired = ref.noam_2019(3e-4, [0, 3999, 10000])
        bounds.assert_close(
            got, desired, terms=NOAM_TERMS, scale=np.abs(desired)
        )
    assert fn(tf.constant(5, tf.int64)).dtype == tf.float32


def test_keras_optimizer_uses_iterations_as_zero_based_step():
    schedule = NoamSchedule(warmup_steps=10, peak_learning_rate=1e-2)
    var = keras.Variable(np.ones(3, "float32"))
    optimizer = keras.optimizers.SGD(learning_rate=schedule)
    optimizer.build([var])
    bounds.assert_close(
        float(optimizer.learning_rate), ref.noam_2019(1e-2, 0, 10),
        terms=NOAM_TERMS,
    )
    # The first update uses s = 1.
    optimizer.apply_gradients([(np.ones(3, "float32"), var)])
    # The schedule, then the update's product with the gradient and its
    # subtraction from 1.
    bounds.assert_close(
        var.numpy(), 1.0 - ref.noam_2019(1e-2, 0, 10), terms=NOAM_TERMS + 2
    )
    bounds.assert_close(
        float(optimizer.learning_rate), ref.noam_2019(1e-2, 1, 10),
        terms=NOAM_TERMS,
    )


def test_config_round_trip_and_optimizer_serialization():
    schedule = NoamSchedule(
        num_units=256, warmup_steps=800, peak_learning_rate=5e-4, scale=2.0
    )
    config = schedule.get_config()
    assert config == dict(
        num_units=256, warmup_steps=800, peak_learning_rate=5e-4, scale=2.0
    )
    assert NoamSchedule.from_config(config).get_config() == config
    revived = keras.saving.deserialize_keras_object(
        json.loads(json.dumps(keras.saving.serialize_keras_object(schedule)))
    )
    assert type(revived) is NoamSchedule and revived.get_config() == config
    optimizer = keras.optimizers.Adam(learning_rate=schedule)
    clone = keras.optimizers.deserialize(
        json.loads(json.dumps(keras.optimizers.serialize(optimizer)))
    )
    revived_schedule = clone._learning_rate  # Keras keeps the schedule object
    assert type(revived_schedule) is NoamSchedule
    assert revived_schedule.get_config() == config
    # The same formula on the same config: bit for bit.
    np.testing.assert_array_equal(
        _values(revived_schedule), _values(schedule)
    )


@pytest.mark.parametrize(
    "kwargs, pattern",
    [
        (
            dict(num_units=0),
            r"NoamSchedule.*argument `num_units`.*positive "
            r"integer.*num_units=0",
        ),
        (dict(num_units=512.0), r"argument `num_units`.*num_units=512.0"),
        (
            dict(warmup_steps=0),
            r"argument `warmup_steps`.*positive finite number.*warmup_steps=0",
        ),
        (
            dict(warmup_steps=-4000),
            r"argument `warmup_steps`.*warmup_steps=-4000",
        ),
        (
            dict(warmup_steps=True),
            r"argument `warmup_steps`.*warmup_steps=True",
        ),
        (
            dict(warmup_steps=float("inf")),
            r"argument `warmup_steps`.*warmup_steps=inf",
        ),
        (
            dict(peak_learning_rate=0.0),
            r"argument `peak_learning_rate`.*peak_learning_rate=0.0",
        ),
        (
            dict(peak_learning_rate="3e-4"),
            r"argument `peak_learning_rate`.*peak_learning_rate='3e-4'",
        ),
        (dict(scale=-1.0), r"argument `scale`.*scale=-1.0"),
        (dict(scale=float("nan")), r"argument `scale`.*scale=nan"),
    ],
)
def test_rejects_bad_arguments(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        NoamSchedule(**kwargs)


def test_cosine_hparams_schedule_matches_the_formula():
    """`learning_rate_schedule="cosine"`: Keras's CosineDecay with warmup,
    checked against lr(s) = p·s/w for s < w, then
    p·(1 + cos(π·(s - w)/(T - w)))/2, zero at s = T and after."""
    import dataclasses

    import hparams
    from tfattn.training import optimization

    hp = dataclasses.replace(
        hparams.get("tiny"),
        learning_rate_schedule="cosine",
        learning_rate=2e-3,
        warmup_steps=10,
        train_steps=110,
    )
    schedule = optimization.learning_rate_schedule(hp)
    steps = np.array([0, 1, 5, 10, 11, 35, 60, 100, 109, 110, 500])
    p, w, t = 2e-3, 10, 110
    expected = np.where(
        steps < w,
        p * steps / w,
        p * 0.5 * (1 + np.cos(np.pi * np.minimum(steps - w, t - w) / (t - w))),
    )
    # The terms summed: p·s/w itself in the warmup, p·(1 + cos)/2 with
    # |cos| <= 1 after it (magnitude p, whatever the cancellation).
    bounds.assert_close(
        _values(schedule, steps), expected, terms=COSINE_TERMS,
        scale=np.where(steps < w, np.abs(expected), p),
    )
    # `total_steps` (e.g. from train_epochs) replaces train_steps.
    longer = optimization.learning_rate_schedule(hp, total_steps=210)
    assert float(longer(60)) > 0.8 * p > float(schedule(60))
    with pytest.raises(ValueError, match="warmup_steps=10.*total_steps=10"):
        optimization.learning_rate_schedule(hp, total_steps=10)
