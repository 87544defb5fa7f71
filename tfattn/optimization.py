"""The optimizer of `train.py`: Adam with the hparams' learning-rate schedule.

- `learning_rate_schedule(hp, total_steps)`: a constant, the Noam schedule
  (`tfattn.schedules.NoamSchedule`, the paper's or the 2019 reference's
  form) or Keras's `CosineDecay` with a linear warmup, by
  `hp.learning_rate_schedule`.
- `Adam`: Keras's Adam whose update of a variable is TensorFlow's one fused
  kernel (`ResourceApplyAdam`) instead of about a dozen ops.
- `build_optimizer(hp, model, mixed_precision, total_steps)`: that Adam with
  the hparams' betas and epsilon, wrapped for loss scaling under
  `mixed_float16`, built for the model's variables.
"""

import keras
import tensorflow as tf

from tfattn import schedules


def learning_rate_schedule(hp, total_steps=None):
    """The hparams' learning rate: a float, a `NoamSchedule`, or Keras's
    `CosineDecay` from 0 with a linear warmup to `hp.learning_rate` over
    `warmup_steps`, then down to 0 at `total_steps` (default
    `hp.train_steps`)."""
    if hp.learning_rate_schedule == "constant":
        return hp.learning_rate
    if hp.learning_rate_schedule == "cosine":
        total_steps = total_steps or hp.train_steps
        if total_steps is None or total_steps <= hp.warmup_steps:
            raise ValueError(
                "The cosine learning-rate schedule needs more training steps "
                f"than warmup_steps={hp.warmup_steps}. Received: "
                f"total_steps={total_steps}")
        return keras.optimizers.schedules.CosineDecay(
            0.0, total_steps - hp.warmup_steps, alpha=0.0,
            warmup_target=hp.learning_rate, warmup_steps=hp.warmup_steps)
    return schedules.NoamSchedule(
        num_units=hp.num_units, warmup_steps=hp.warmup_steps,
        peak_learning_rate=hp.learning_rate, scale=hp.learning_rate_scale)


@keras.saving.register_keras_serializable(package="tfattn")
class Adam(keras.optimizers.Adam):
    """`keras.optimizers.Adam` updating each variable with one fused kernel.

    Same arguments, config, slots (`momentum`, `velocity`) and update:

        m += (g - m)(1 - β1);  v += (g² - v)(1 - β2)
        θ -= lr·sqrt(1 - β2^t)/(1 - β1^t) · m / (sqrt(v) + ε)

    computed by TensorFlow's `ResourceApplyAdam` (what tf.keras 2's Adam
    ran), one op a variable where Keras 3 builds the same formula from
    about a dozen: 0.6x the time of Keras's update for the multi30k set's
    2.35M parameters on CPU (`bench/adam.py`). Sparse gradients are made
    dense first, as the formula reads every element anyway.
    `amsgrad=True` runs Keras's own update.
    """

    def update_step(self, gradient, variable, learning_rate):
        if self.amsgrad or not hasattr(variable, "handle"):
            return super().update_step(gradient, variable, learning_rate)
        dtype = variable.dtype
        index = self._get_variable_index(variable)
        step = tf.cast(self.iterations + 1, dtype)
        beta_1 = tf.cast(self.beta_1, dtype)
        beta_2 = tf.cast(self.beta_2, dtype)
        tf.raw_ops.ResourceApplyAdam(
            var=variable.handle,
            m=self._momentums[index].value.handle,
            v=self._velocities[index].value.handle,
            beta1_power=tf.pow(beta_1, step),
            beta2_power=tf.pow(beta_2, step),
            lr=tf.cast(learning_rate, dtype),
            beta1=beta_1,
            beta2=beta_2,
            epsilon=tf.cast(self.epsilon, dtype),
            grad=tf.cast(tf.convert_to_tensor(gradient), dtype),
        )


def build_optimizer(hp, model, mixed_precision=None, total_steps=None):
    """Adam with the hparams' betas, epsilon and schedule, built for `model`.

    Under `mixed_float16` it is wrapped in a `LossScaleOptimizer`.
    """
    optimizer = Adam(
        learning_rate=learning_rate_schedule(hp, total_steps),
        beta_1=hp.adam_beta1, beta_2=hp.adam_beta2, epsilon=hp.adam_epsilon)
    if mixed_precision == "mixed_float16":
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    optimizer.build(model.trainable_variables)
    return optimizer


def current_learning_rate(optimizer):
    """The optimizer's learning rate now, as a float."""
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    rate = inner.learning_rate
    return float(rate.numpy() if hasattr(rate, "numpy") else rate)
