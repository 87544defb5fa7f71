"""Label-smoothed cross-entropy over non-padding targets (both references).

Shapes: B = batch, T = length, V = vocabulary size (the last axis of the
logits). Labels may have any shape [...] with logits [..., V].

Per target token, with smoothed targets y_s = (1 - ε)·onehot(label) + ε/V
over the **full** vocabulary, specials included (docs/reference.md §1.6, §2.7):

    CE = -Σ_v y_s[v] · log_softmax(z)[v]
       = logsumexp(z) - (1 - ε)·z[label] - ε·mean_v(z)

The closed form on the right is what is computed: it needs one softmax (for
the logsumexp), one gather and one mean over V, so the forward pass builds
no [B, T, V] one-hot (or smoothed-target) tensor; the gradient,
softmax(z) - y_s, is written out from the same softmax rather than
differentiated through the gather (the one-hot it builds there was faster
on CPU than shifting by ε/V and scattering at the labels: 84.6 against
89.9 ms, `bench/loss.py`). Everything runs
in float32, whatever the logits' dtype (float16 and bfloat16 logits are
cast first), so the loss stays finite and accurate under mixed precision.
On TensorFlow the gradient above is written out (`tf.custom_gradient`); the
other backends differentiate the same closed form (logsumexp, label gather,
mean), which gives the same softmax(z) - y_s.

The mean is taken over the non-padding targets only (§1.7, §2.9):
loss = Σ CE · [label != pad_id] / (Σ [label != pad_id] + denominator_epsilon).
`denominator_epsilon=0.0` is the 2017 code; the 2019 code uses 1e-7. A batch
with no real target gives 0 (not NaN) when `denominator_epsilon` is 0.
"""

import numbers
from typing import Any
from typing import NamedTuple

import keras
from keras import ops

from tfattn.ops import _backend
from tfattn.utils import validation

__all__ = ["LabelSmoothedCrossEntropy", "LossSums", "reinforce_loss",
           "smoothed_cross_entropy", "smoothed_cross_entropy_sum",
           "smoothed_cross_entropy_sums", "symmetric_kl_sum"]

_CONTEXT = "smoothed_cross_entropy"
_KL_CONTEXT = "symmetric_kl_sum"


class LossSums(NamedTuple):
    """What `smoothed_cross_entropy_sums` returns: float32 scalars."""

    loss: Any  # Σ CE over the counted targets (times their weights).
    tokens: Any  # The counted targets (their summed weights).
    correct: Any  # Those whose logit is the largest (weighted).


def smoothed_cross_entropy_sums(
    labels, logits, epsilon=0.1, pad_id=0, weights=None
):
    """Summed label-smoothed cross-entropy, token count and top-1 hits.

    For data-parallel training: every replica returns its local sums;
    summing them over replicas and dividing gives the exact mean over the
    *global* number of non-padding tokens, which averaging per-replica
    means does not when replicas hold different numbers of pads. For
    example, under a `tf.distribute` strategy::

        sums = smoothed_cross_entropy_sums(labels, logits)
        global_count = replica_ctx.all_reduce("sum", sums.tokens)
        loss = sums.loss / global_count  # per-replica share; gradients sum

    `correct` counts the targets whose logit equals the row's largest (a
    tie at the top counts as a hit, where `argmax` would take the first
    index). It reuses the maximum the loss computes anyway, so the token
    accuracy costs no extra pass over the [..., V] logits; it carries no
    gradient.

    Args:
        labels: integer tensor [...], the target ids.
        logits: float tensor [..., V] (any float dtype).
        epsilon: float in [0, 1). Label smoothing ε. Defaults to `0.1`.
        pad_id: int or None. Targets equal to it are not counted. `None`
            counts every target. Defaults to `0`.
        weights: optional float tensor, a weight per target multiplied onto
            the three sums. Broadcast against `labels`; a lower-rank weight
            such as [B] is expanded on the right first.

    Returns:
        A `LossSums(loss, tokens, correct)` of float32 scalars.
    """
    per_token, top, keep = _per_token(labels, logits, epsilon, pad_id)
    keep = _apply_weights(keep, weights)
    return LossSums(
        ops.sum(per_token * keep), ops.sum(keep), ops.sum(top * keep))


def smoothed_cross_entropy_sum(
    labels, logits, epsilon=0.1, pad_id=0, weights=None
):
    """`(sum_loss, num_tokens)`: the first two of
    `smoothed_cross_entropy_sums` (same arguments), for callers that need
    no accuracy.

    Args:
        labels: integer tensor [...], the target ids.
        logits: float tensor [..., V] (any float dtype).
        epsilon: float in [0, 1). Label smoothing ε. Defaults to `0.1`.
        pad_id: int or None. Targets equal to it are not counted. `None`
            counts every target. Defaults to `0`.
        weights: optional float tensor, a weight per target (see
            `smoothed_cross_entropy_sums`).

    Returns:
        `(sum_loss, num_tokens)`, two float32 scalars.
    """
    sums = smoothed_cross_entropy_sums(labels, logits, epsilon, pad_id,
                                       weights)
    return sums.loss, sums.tokens


def smoothed_cross_entropy(
    labels, logits, epsilon=0.1, pad_id=0, denominator_epsilon=0.0
):
    """Mean label-smoothed cross-entropy over the non-padding targets.

    The training loss of both references: 2017 (§1.6-1.7,
    `denominator_epsilon=0.0`) and 2019 (§2.7, §2.9,
    `denominator_epsilon=1e-7`). See the module docstring for the formula.

    Args:
        labels: integer tensor [...], the target ids (e.g. [B, T]).
        logits: float tensor [..., V] (e.g. [B, T, V]), any float dtype.
        epsilon: float in [0, 1). Label smoothing ε, spread uniformly over
            all V classes. Defaults to `0.1`.
        pad_id: int or None. Targets equal to it are excluded. `None`
            counts every target. Defaults to `0`.
        denominator_epsilon: float >= 0. Added to the token count.
            Defaults to `0.0`.

    Returns:
        A float32 scalar.
    """
    denominator_epsilon = validation.check_non_negative_float(
        "denominator_epsilon", denominator_epsilon, _CONTEXT
    )
    total, count = smoothed_cross_entropy_sum(labels, logits, epsilon, pad_id)
    return _divide(total, count, denominator_epsilon)


def symmetric_kl_sum(labels, logits_a, logits_b, pad_id=0):
    """Σ over the counted targets of ½·[KL(p_a ‖ p_b) + KL(p_b ‖ p_a)].

    The consistency term of R-Drop (Liang et al. 2021): p_a and p_b are the
    softmax of two forward passes of the same batch under independent
    dropout masks. Per target token, in the closed form computed here,

        ½·[KL(p_a ‖ p_b) + KL(p_b ‖ p_a)]
            = ½·Σ_v (p_a - p_b)·(log p_a - log p_b),

    in float32 whatever the logits' dtype; both passes get gradients, as in
    the paper (neither side is held constant).

    Args:
        labels: integer tensor [...] (e.g. [B, T]): only which targets
            count (`!= pad_id`) is read.
        logits_a: float tensor [..., V], the first pass.
        logits_b: float tensor of the same shape, the second pass.
        pad_id: int or None. Targets equal to it are not counted. `None`
            counts every target. Defaults to `0`.

    Returns:
        A float32 scalar.
    """
    pad_id = _check_pad_id(pad_id, _KL_CONTEXT)
    labels, logits_a = _check_tensors(labels, logits_a, "logits_a",
                                      _KL_CONTEXT)
    labels, logits_b = _check_tensors(labels, logits_b, "logits_b",
                                      _KL_CONTEXT)
    if validation.shape_of(logits_a) != validation.shape_of(logits_b):
        raise validation.invalid_argument(
            "logits_b", f"a tensor of the shape of `logits_a`, "
            f"{validation.shape_of(logits_a)}",
            f"<tensor of shape {validation.shape_of(logits_b)}>", _KL_CONTEXT)
    log_a = ops.log_softmax(ops.cast(logits_a, "float32"), axis=-1)
    log_b = ops.log_softmax(ops.cast(logits_b, "float32"), axis=-1)
    per_token = 0.5 * ops.sum(
        (ops.exp(log_a) - ops.exp(log_b)) * (log_a - log_b), axis=-1)
    if pad_id is None:
        return ops.sum(per_token)
    keep = ops.cast(ops.cast(labels, "int32") != pad_id, "float32")
    return ops.sum(per_token * keep)


def _divide(total, count, denominator_epsilon):
    if denominator_epsilon:
        return total / (count + denominator_epsilon)
    return ops.divide_no_nan(total, count)


def _per_token(labels, logits, epsilon, pad_id):
    """Returns (CE [...] float32, top [...] float32 with 1 where the label's
    logit is the largest, keep [...] float32 with 1 = counted)."""
    epsilon = _check_epsilon(epsilon)
    pad_id = _check_pad_id(pad_id)
    labels, logits = _check_tensors(labels, logits)
    logits = ops.cast(logits, "float32")  # [..., V]
    labels = ops.cast(labels, "int32")
    keep = ops.ones_like(labels, "bool") if pad_id is None else labels != pad_id
    # Pad targets may hold ids outside [0, V) (e.g. -100): read class 0.
    safe = ops.where(keep, labels, ops.zeros_like(labels))
    ce, top = _smoothed_cross_entropy(logits, safe, epsilon)
    return ce, top, ops.cast(keep, "float32")


def _smoothed_cross_entropy(logits, labels, epsilon):
    """CE [...] of float32 logits [..., V] against int32 labels [...], and
    top [...]: 1.0 where the label's logit is the largest, else 0.0 (no
    gradient).

    One fused softmax gives both the loss and its gradient: logsumexp(z) =
    max(z) - log(max(softmax(z))), exact to rounding and never log(0), as
    the largest probability is at least 1/V; the gradient,
    dCE/dz = softmax(z) - y_s, reuses that softmax instead of recomputing
    exp(z - logsumexp(z)). With the gradient written out, the loss runs
    faster than the logsumexp form on CPU, which itself beats
    differentiating the label gather (a scatter into a dense [..., V] zero
    tensor); `bench/loss.py` times the three. That is TensorFlow's
    path; the other backends differentiate `_keras_cross_entropy`.
    """
    if not _backend.is_tensorflow():
        return _keras_cross_entropy(logits, labels, epsilon)
    tf = _backend.tensorflow()
    vocab_size = logits.shape[-1] or tf.shape(logits)[-1]
    off_value = epsilon / tf.cast(vocab_size, tf.float32)
    on_value = 1.0 - epsilon + off_value

    @tf.custom_gradient
    def loss_and_gradient(logits):
        softmax = tf.nn.softmax(logits)
        max_logit = tf.reduce_max(logits, axis=-1)
        log_z = max_logit - tf.math.log(tf.reduce_max(softmax, axis=-1))
        label_logit = tf.gather(logits, labels, batch_dims=labels.shape.rank)
        top = tf.cast(label_logit >= max_logit, tf.float32)
        ce = log_z - (1.0 - epsilon) * label_logit
        if epsilon:
            ce = ce - epsilon * tf.reduce_mean(logits, axis=-1)

        def gradient(upstream, _):  # `top` is a count: no gradient.
            smoothed = tf.one_hot(
                labels, vocab_size, on_value=on_value, off_value=off_value
            )
            return upstream[..., None] * (softmax - smoothed)

        return (ce, top), gradient

    ce, top = loss_and_gradient(logits)
    return ce, tf.stop_gradient(top)


def _keras_cross_entropy(logits, labels, epsilon):
    """`_smoothed_cross_entropy` in `keras.ops`, differentiated by the
    backend: d(logsumexp)/dz is softmax(z), and the gather and the mean
    give -(1 - ε)·onehot - ε/V."""
    max_logit = ops.max(logits, axis=-1)
    label_logit = ops.take_along_axis(
        logits, ops.expand_dims(labels, -1), axis=-1)[..., 0]
    ce = ops.logsumexp(logits, axis=-1) - (1.0 - epsilon) * label_logit
    if epsilon:
        ce = ce - epsilon * ops.mean(logits, axis=-1)
    top = ops.cast(label_logit >= max_logit, "float32")
    return ce, ops.stop_gradient(top)


def _apply_weights(keep, weights):
    """keep * weights, with [B]-style weights expanded on the right."""
    if weights is None:
        return keep
    weights = ops.cast(weights, "float32")
    while len(weights.shape) < len(keep.shape):
        weights = ops.expand_dims(weights, -1)
    return keep * weights


def _check_epsilon(epsilon):
    if (
        isinstance(epsilon, bool)
        or not isinstance(epsilon, numbers.Real)
        or not 0 <= epsilon < 1
    ):
        raise validation.invalid_argument(
            "epsilon", "a float in [0, 1)", epsilon, _CONTEXT
        )
    return float(epsilon)


def _check_pad_id(pad_id, context=_CONTEXT):
    if pad_id is None:
        return None
    if isinstance(pad_id, bool) or not isinstance(pad_id, numbers.Integral):
        raise validation.invalid_argument(
            "pad_id", "an integer or None", pad_id, context
        )
    return int(pad_id)


def _check_tensors(labels, logits, logits_name="logits", context=_CONTEXT):
    logits = ops.convert_to_tensor(logits)
    labels = ops.convert_to_tensor(labels)
    logits_dtype = keras.backend.standardize_dtype(logits.dtype)
    logits_shape = validation.shape_of(logits)
    if "float" not in logits_dtype or not logits_shape:
        raise validation.invalid_argument(
            logits_name,
            "a float tensor of shape [..., V]",
            f"<tensor of dtype {logits_dtype} and shape {logits_shape}>",
            context,
        )
    labels_dtype = keras.backend.standardize_dtype(labels.dtype)
    labels_shape = validation.shape_of(labels)
    expected = logits_shape[:-1]
    compatible = len(labels_shape) == len(expected) and all(
        a is None or b is None or a == b for a, b in zip(labels_shape, expected)
    )
    if "int" not in labels_dtype or not compatible:
        raise validation.invalid_argument(
            "labels",
            f"an integer tensor of shape {expected}, the logits' shape "
            f"{logits_shape} without the vocabulary axis",
            f"<tensor of dtype {labels_dtype} and shape {labels_shape}>",
            context,
        )
    return labels, logits


@keras.saving.register_keras_serializable(package="tfattn")
class LabelSmoothedCrossEntropy(keras.losses.Loss):
    """Keras loss: label-smoothed cross-entropy, mean over non-pad targets.

    `loss(y_true, y_pred)` equals `smoothed_cross_entropy(y_true, y_pred,
    epsilon, pad_id, denominator_epsilon)`: y_true holds integer target ids
    [B, T] and y_pred the logits [B, T, V] (not probabilities). The
    reduction is fixed, the token mean of the references; Keras' `reduction`
    argument is therefore not offered.

    - `sample_weight` (broadcastable to [B, T], e.g. [B, 1] per sequence)
      weights both the summed loss and the token count.
    - A Keras mask carried by y_pred (True = keep) further excludes targets.
    - The ids are read as integers, never cast to float.

    Under a distribution strategy each replica's value is its own token
    mean; for the exact global token mean use `smoothed_cross_entropy_sum`.

    Args:
        epsilon: float in [0, 1). Defaults to `0.1`.
        pad_id: int or None. Defaults to `0`.
        denominator_epsilon: float >= 0. Defaults to `0.0` (2017; the 2019
            code uses `1e-7`).
        name: str. Defaults to `"label_smoothed_cross_entropy"`.
        dtype: dtype of the returned loss. Defaults to `None`
            (`keras.backend.floatx()`); the computation is float32 anyway.
    """

    def __init__(
        self,
        epsilon=0.1,
        pad_id=0,
        denominator_epsilon=0.0,
        name="label_smoothed_cross_entropy",
        dtype=None,
    ):
        """Checks the arguments (see the class docstring)."""
        epsilon = _check_epsilon(epsilon)
        pad_id = _check_pad_id(pad_id)
        denominator_epsilon = validation.check_non_negative_float(
            "denominator_epsilon", denominator_epsilon, _CONTEXT
        )
        # `__call__` reduces to the token mean itself; Keras' reduction is
        # unused.
        super().__init__(name=name, reduction="sum", dtype=dtype)
        self.epsilon = epsilon
        self.pad_id = pad_id
        self.denominator_epsilon = denominator_epsilon

    def __call__(self, y_true, y_pred, sample_weight=None):
        keras_mask = getattr(y_pred, "_keras_mask", None)
        with keras.name_scope(self.name):
            per_token, _, keep = _per_token(
                y_true, y_pred, self.epsilon, self.pad_id
            )
            keep = _apply_weights(keep, sample_weight)
            keep = _apply_weights(keep, keras_mask)
            loss = _divide(
                ops.sum(per_token * keep),
                ops.sum(keep),
                self.denominator_epsilon
            )
            return ops.cast(loss, self.dtype)

    def call(self, y_true, y_pred):
        """Per-target losses [B, T], float32, 0 at the padding targets."""
        per_token, _, keep = _per_token(
            y_true, y_pred, self.epsilon, self.pad_id)
        return per_token * keep

    def get_config(self):
        return {
            "name": self.name,
            "epsilon": self.epsilon,
            "pad_id": self.pad_id,
            "denominator_epsilon": self.denominator_epsilon,
            "dtype": self.dtype,
        }


def reinforce_loss(log_prob, reward, baseline=None):
    """The REINFORCE surrogate loss of a sampled choice (hard attention).

    loss = -mean((reward - baseline) · log_prob), with the reward and the
    baseline held constant (`stop_gradient`), so that ∇loss is the
    REINFORCE (score-function) estimate of -∇E[reward]: minimising it
    raises the expected reward. A baseline (e.g. the mean reward, or a
    learned value trained on its own loss) leaves the estimate unbiased and
    cuts its variance.

    Args:
        log_prob: float tensor [...], log π(choice) of each sampled choice
            (`HardAttention(..., return_selection=True)`'s log-probability).
        reward: float tensor broadcastable to `log_prob`.
        baseline: float tensor broadcastable to `log_prob`, or None (0).

    Returns:
        A float32 scalar.
    """
    log_prob = ops.cast(log_prob, "float32")
    advantage = ops.cast(reward, "float32")
    if baseline is not None:
        advantage = advantage - ops.cast(baseline, "float32")
    advantage = ops.stop_gradient(advantage)
    return -ops.mean(advantage * log_prob)
