"""A seeded model's dropouts draw distinct masks, and the same ones every
time the model is built with that seed (`tfattn.utils.seeds`)."""

import itertools

import keras
import numpy as np
import pytest

import tfattn
from tests import bounds
from tfattn.utils.seeds import sublayer_seed

SIZES = dict(num_layers=2, num_units=16, num_heads=2, ffn_units=32,
             dropout_rate=0.5)


def test_sublayer_seed_is_stable_distinct_and_in_int32_range():
    assert sublayer_seed(None, "block_0") is None
    seeds = {sublayer_seed(seed, name) for seed in (0, 1, 2**40)
             for name in ("block_0", "block_1", "encoder", "decoder")}
    assert len(seeds) == 12
    assert all(0 <= s < 2**31 for s in seeds)
    # A hash of the text, not Python's salted hash(): the same in every
    # process (this value was computed once and must not change, or
    # checkpoints of seeded runs would resume with other masks).
    assert sublayer_seed(0, "encoder") == 1016590540
    assert sublayer_seed(0, "encoder") != sublayer_seed(1, "encoder")


def _models(seed):
    ids = np.array([[5, 6, 7, 0]], np.int32)
    causal = tfattn.CausalLM(vocab_size=50, seed=seed, **SIZES)
    causal(ids)
    translation = tfattn.Transformer(source_vocab_size=50, seed=seed, **SIZES)
    translation({"source": ids, "target_in": ids})
    masked = tfattn.models.MaskedLM(vocab_size=50, seed=seed, **SIZES)
    masked(ids)
    classifier = tfattn.models.SequenceClassifier(
        vocab_size=50, num_classes=2, seed=seed, **SIZES)
    classifier(ids)
    return {"CausalLM": causal, "Transformer": translation,
            "MaskedLM": masked, "SequenceClassifier": classifier}


def _dropout_masks(model):
    """Which entries each of the model's active dropouts keeps of a batch of
    ones, one draw per dropout layer."""
    x = np.ones((2, 6, 16), np.float32)
    layers = [layer for layer in model._flatten_layers()
              if isinstance(layer, keras.layers.Dropout) and layer.rate > 0]
    return [np.asarray(layer(x, training=True)) != 0 for layer in layers]


@pytest.mark.parametrize("name", ["CausalLM", "Transformer", "MaskedLM",
                                  "SequenceClassifier"])
def test_a_seeded_model_draws_a_different_mask_at_every_dropout(name):
    # Regression: every dropout of a model built with seed=0 used to start
    # from seed 0 and drop the same entries at every site and step.
    masks = _dropout_masks(_models(0)[name])
    assert len(masks) >= 5  # embeddings, attention and residual dropouts
    for first, second in itertools.combinations(masks, 2):
        agreement = float(np.mean(first == second))
        # Independent masks at rate 0.5 agree on about half the entries.
        assert agreement < 0.75, agreement


def test_the_same_seed_gives_the_same_training_forward_pass():
    ids = np.array([[5, 6, 7, 8, 0]], np.int32)
    outputs = []
    for _ in range(2):
        keras.utils.set_random_seed(3)  # the same weights
        model = tfattn.CausalLM(vocab_size=50, seed=7, **SIZES)
        outputs.append(np.asarray(model(ids, training=True)))
    keras.utils.set_random_seed(3)
    other = tfattn.CausalLM(vocab_size=50, seed=8, **SIZES)
    different = np.asarray(other(ids, training=True))
    np.testing.assert_array_equal(outputs[0], outputs[1])
    # Other masks move the logits by more than any rounding of the stack.
    rounding = bounds.bound(
        bounds.stack_terms(SIZES["num_layers"], SIZES["num_units"],
                           SIZES["ffn_units"], ids.shape[1], 50),
        np.abs(outputs[0]).max())
    assert np.abs(outputs[0] - different).max() > rounding
