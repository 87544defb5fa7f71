"""Tests of the training objectives (`tfattn.training.step`): the plain
label-smoothed cross-entropy and R-Drop's (Liang et al. 2021), each against
NumPy written from the formulas, and `hp.rdrop_alpha`'s checks."""

import dataclasses

import keras
import numpy as np
import pytest
import tensorflow as tf

import hparams
from tests import bounds
from tests import reference_numpy as ref
from tests.harness import uneven_translation_batches
from tfattn import config
from tfattn.training import memory
from tfattn import training
from tfattn.training import step as training_step

HP = config.parse_overrides(hparams.get("tiny"),
                            "num_layers=1,dropout_rate=0.1")
V = 11


class _FixedLogits:
    """A stand-in model: records what it was called with and returns given
    logits, so the objective's arithmetic is checked on known passes."""

    def __init__(self, logits):
        self.logits = tf.constant(logits)
        self.calls = []

    def __call__(self, inputs, training=False):
        self.calls.append((inputs, training))
        return self.logits


def _batch():
    inputs, labels = uneven_translation_batches(rows=4)
    labels = np.minimum(labels[0], V - 1)  # ids in [0, V)
    return {k: v[0] for k, v in inputs.items()}, labels


def test_objective_for_picks_the_variant_from_rdrop_alpha():
    assert type(training_step.objective_for(HP)) is \
        training_step.CrossEntropyObjective
    rdrop = training_step.objective_for(
        dataclasses.replace(HP, rdrop_alpha=0.5))
    assert isinstance(rdrop, training_step.RDropObjective)
    assert rdrop.alpha == 0.5 and rdrop.label_smoothing == HP.label_smoothing


def test_cross_entropy_objective_is_one_training_pass():
    inputs, labels = _batch()
    logits = np.random.default_rng(0).normal(size=labels.shape + (V,))
    model = _FixedLogits(logits.astype("float32"))
    sums = training_step.CrossEntropyObjective(HP)(model, inputs, labels)
    assert len(model.calls) == 1 and model.calls[0][1] is True
    keep = labels != 0
    assert float(sums.tokens) == keep.sum()  # a count: exact
    # A log-softmax over the V classes, then a sum over the tokens.
    bounds.assert_close(
        float(sums.loss) / keep.sum(),
        ref.smoothed_cross_entropy(logits, labels, HP.label_smoothing),
        terms=V + int(keep.sum()))


@pytest.mark.parametrize("alpha", [0.5, 5.0])
def test_rdrop_objective_matches_numpy(alpha):
    """½(CE_a + CE_b) + (α/2)·Σ½[KL(p_a‖p_b) + KL(p_b‖p_a)], the batch
    passed once stacked twice, the first copy's hits and token count."""
    inputs, labels = _batch()
    rows = labels.shape[0]
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(2 * rows,) + labels.shape[1:] + (V,))
    model = _FixedLogits(logits.astype("float32"))
    hp = dataclasses.replace(HP, rdrop_alpha=alpha)
    sums = training_step.RDropObjective(hp)(model, inputs, labels)

    (called, is_training), = model.calls
    assert is_training is True
    for name, value in inputs.items():
        np.testing.assert_array_equal(called[name], np.concatenate(
            [value, value]))
    keep = labels != 0
    tokens = keep.sum()
    first, second = logits[:rows], logits[rows:]
    eps = HP.label_smoothing
    want = (0.5 * tokens * (ref.smoothed_cross_entropy(first, labels, eps)
                            + ref.smoothed_cross_entropy(second, labels, eps))
            + 0.5 * alpha * ref.symmetric_kl_sum(first, second, labels))
    # The KL term's chain: a log-softmax over V, the sum over V, the sum
    # over the tokens, then the three operations adding it to the CEs.
    bounds.assert_close(float(sums.loss), want, terms=2 * V + int(tokens) + 3)
    assert float(sums.tokens) == tokens  # counts: exact
    top = (np.take_along_axis(first, labels[..., None], -1)[..., 0]
           >= first.max(-1))
    assert float(sums.correct) == (top & keep).sum()


def test_rdrop_train_step_counts_the_batch_once_and_learns():
    """A real model: the two stacked copies draw different dropout masks
    (equal outputs without training), the step reports the batch's own
    tokens, and the loss falls."""
    hp = dataclasses.replace(HP, rdrop_alpha=1.0, dropout_rate=0.3,
                             learning_rate_schedule="constant",
                             learning_rate=3e-3)
    inputs, labels = uneven_translation_batches()
    batch = ({k: v[0] for k, v in inputs.items()}, labels[0])
    keras.utils.set_random_seed(0)
    trainer = training.build_trainer(tf.distribute.get_strategy(), hp, 48,
                                     seed=0)
    doubled = {k: np.concatenate([v, v]) for k, v in batch[0].items()}
    first, second = np.split(trainer.model(doubled, training=True), 2)
    assert np.abs(first - second).max() > 0.1
    first, second = np.split(trainer.model(doubled, training=False), 2)
    # The same rows twice in one batch: the logits of one encoder and one
    # decoder stack.
    bounds.assert_close(first, second, terms=bounds.stack_terms(
        2 * hp.num_layers, hp.num_units, hp.ffn_units,
        max(v.shape[-1] for v in doubled.values()), 48))

    iterator = iter(tf.data.Dataset.from_tensors(batch).repeat())
    results = [trainer.train_step(iterator) for _ in range(25)]
    losses = [float(r[0]) for r in results]
    assert all(np.isfinite(losses))
    tokens = float((labels[0] > 0).sum())
    assert [float(r[1]) for r in results] == [tokens] * 25
    assert np.mean(losses[-5:]) < np.mean(losses[:5]) - 0.5


@pytest.mark.parametrize("overrides, pattern", [
    ("rdrop_alpha=-1.0", r"`rdrop_alpha`.*a float >= 0.*rdrop_alpha=-1.0"),
    ("rdrop_alpha=1.0,dropout_rate=0.0,attention_dropout_rate=0.0",
     r"`rdrop_alpha`.*0 when dropout_rate and attention_dropout_rate are 0"
     r".*rdrop_alpha=1.0"),
])
def test_bad_rdrop_alpha_is_refused(overrides, pattern):
    with pytest.raises(ValueError, match=pattern):
        config.parse_overrides(HP, overrides)


def test_rdrop_doubles_the_estimated_batch_and_adds_its_kl_term():
    plain = memory.training_memory(HP, 1000, rows=32, length=20)
    rdrop = memory.training_memory(
        dataclasses.replace(HP, rdrop_alpha=1.0), 1000, rows=32, length=20)
    assert rdrop.logits == 2 * plain.logits * (
        memory.LOGIT_BYTES + memory.KL_LOGIT_BYTES) // memory.LOGIT_BYTES
    assert rdrop.activations == 2 * plain.activations
    assert rdrop.parameter_state == plain.parameter_state
    assert rdrop.describe().endswith(
        "for batches of 32 x 20 tokens, each row run twice (R-Drop))")
    assert plain.describe().endswith("for batches of 32 x 20 tokens)")
