"""The Noam learning-rate schedule: the paper's, or the 2019 reference's."""

import numbers

import keras
from keras import ops

from tfattn.utils import validation

__all__ = ["NoamSchedule"]

_CONTEXT = "NoamSchedule"


@keras.saving.register_keras_serializable(package="tfattn")
class NoamSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup, then inverse-square-root decay ("Noam" schedule).

    With s = `step` + 1 and w = `warmup_steps`:

    - `peak_learning_rate=None`, the paper (§5.3):
      lr = scale · num_units^-0.5 · min(s^-0.5, s · w^-1.5).
    - `peak_learning_rate=p`, the 2019 reference's `noam_scheme`
      (docs/reference.md §2.8):
      lr = scale · p · w^0.5 · min(s · w^-1.5, s^-0.5), which rises
      linearly to exactly `p` at s = w and then decays as p · sqrt(w / s).
      `num_units` is not used then (issue #89 of the reference asks why it
      replaces the paper's num_units^-0.5). For example p = 3e-4, w = 4000:
      s=1 -> 7.5e-8, s=4000 -> 3e-4, s=10001 -> 1.8973e-4.

    Step numbering: Keras optimizers call the schedule with their 0-based
    iteration count (`optimizer.iterations`: 0 on the first update), and the
    reference adds 1 to its 0-based `global_step` too; hence s = step + 1,
    so the first update uses s = 1 (the paper's step_num = 1, never 0) and
    the peak is reached on update number w.

    The schedule is plain `keras.ops` arithmetic in float32 on the step
    tensor, so it runs on every Keras backend, eagerly and compiled
    (`tf.function`, XLA, `jax.jit`).

    Args:
        num_units: int. Model width d_model of the paper's factor
            num_units^-0.5. Defaults to `512`.
        warmup_steps: positive number. Warmup length w. Defaults to `4000`.
        peak_learning_rate: positive float or None. The 2019 reference's
            `init_lr` (its `--lr`, 3e-4 by default there). Defaults to
            `None` (the paper's schedule).
        scale: positive float. Multiplies the result in both forms.
            Defaults to `1.0`.

    Example::

        schedule = tfattn.schedules.NoamSchedule(peak_learning_rate=3e-4)
        optimizer = keras.optimizers.Adam(schedule)
    """

    def __init__(
        self, num_units=512, warmup_steps=4000, peak_learning_rate=None,
        scale=1.0
    ):
        """Checks the arguments (see the class docstring)."""
        super().__init__()
        self.num_units = validation.check_positive_int(
            "num_units", num_units, _CONTEXT
        )
        warmup_steps = _check_positive("warmup_steps", warmup_steps)
        self.warmup_steps = (
            int(warmup_steps)
            if isinstance(warmup_steps, numbers.Integral)
            else float(warmup_steps)
        )
        if peak_learning_rate is not None:
            peak_learning_rate = float(
                _check_positive("peak_learning_rate", peak_learning_rate)
            )
        self.peak_learning_rate = peak_learning_rate
        self.scale = float(_check_positive("scale", scale))

    def __call__(self, step):
        s = ops.cast(step, "float32") + 1.0
        warmup = float(self.warmup_steps)
        ramp = ops.minimum(ops.rsqrt(s), s * warmup**-1.5)
        if self.peak_learning_rate is None:
            factor = self.scale * float(self.num_units) ** -0.5
        else:
            factor = self.scale * self.peak_learning_rate * warmup**0.5
        return factor * ramp

    def get_config(self):
        return {
            "num_units": self.num_units,
            "warmup_steps": self.warmup_steps,
            "peak_learning_rate": self.peak_learning_rate,
            "scale": self.scale,
        }


def _check_positive(name, value):
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Real)
        or not value > 0
        or value == float("inf")
    ):
        raise validation.invalid_argument(
            name, "a positive finite number", value, _CONTEXT
        )
    return value
