"""The optimizer of `train.py`: Adam with the hparams' learning-rate schedule.

- `learning_rate_schedule(hp, total_steps)`: a constant, the Noam schedule
  (`tfattn.schedules.NoamSchedule`, the paper's or the 2019 reference's
  form) or Keras's `CosineDecay` with a linear warmup, by
  `hp.learning_rate_schedule`.
- `build_optimizer(hp, model, mixed_precision, total_steps)`: Adam with the
  hparams' betas and epsilon, wrapped for loss scaling under
  `mixed_float16`, built for the model's variables.
"""

import keras

from tfattn import schedules

__all__ = [
    "learning_rate_schedule",
    "build_optimizer",
    "current_learning_rate",
]


def learning_rate_schedule(hp, total_steps=None):
    """The hparams' learning rate: a float, a `NoamSchedule`, or Keras's
    `CosineDecay` from 0 with a linear warmup to `hp.learning_rate` over
    `warmup_steps`, then down to 0 at `total_steps` (default
    `hp.train_steps`).

    Args:
        hp: HParams. Its `learning_rate_schedule` picks the form.
        total_steps: int or None. Where the cosine schedule ends.

    Returns:
        float (constant), `NoamSchedule` (noam) or `CosineDecay` (cosine).

    Raises:
        ValueError: a cosine schedule with no more training steps than
            `warmup_steps`.
    """
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


def build_optimizer(hp, model, mixed_precision=None, total_steps=None):
    """Adam with the hparams' betas, epsilon and schedule, built for `model`.

    Under `mixed_float16` it is wrapped in a `LossScaleOptimizer`.

    Args:
        hp: HParams.
        model: a built `keras.Model`. The optimizer is built for its
            trainable variables.
        mixed_precision: str or None. The Keras dtype policy name.
        total_steps: int or None. Where the cosine schedule ends.

    Returns:
        keras.optimizers.Optimizer.
    """
    optimizer = keras.optimizers.Adam(
        learning_rate=learning_rate_schedule(hp, total_steps),
        beta_1=hp.adam_beta1, beta_2=hp.adam_beta2, epsilon=hp.adam_epsilon)
    if mixed_precision == "mixed_float16":
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    optimizer.build(model.trainable_variables)
    return optimizer


def current_learning_rate(optimizer):
    """The optimizer's learning rate now, as a float.

    Args:
        optimizer: a Keras optimizer, or a `LossScaleOptimizer` around one.

    Returns:
        float.
    """
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    rate = inner.learning_rate
    return float(rate.numpy() if hasattr(rate, "numpy") else rate)
