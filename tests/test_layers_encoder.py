"""Tests of tfattn.Encoder (N encoder blocks; BERT-style on its own).

References: a stack of keras_hub.layers.TransformerEncoder blocks (plus a
Keras LayerNormalization for pre-norm) with copied weights for the paper
flavour, and a NumPy composition of tests/reference_numpy.py for the 2019
flavour.
"""

import keras
import numpy as np
import pytest
from keras import ops

import tfattn
from tests import bounds
from tests import reference_numpy as ref
from tests.harness import SETUPS
from tests.harness import CONTRACT_SETUPS
from tests.harness import run_layer_test
from tests.harness import assert_keras_file_round_trip
from tests.test_layers_encoder_block import keras_hub_encoder
from tests.harness import randomize_weights as _randomize
from tests.harness import dense_params as _dense
from tests.harness import norm_params as _ln

B, T, C, H, F, N = 2, 5, 8, 2, 16, 2
# The N-block stack's output (tests/bounds.py), its keys the T positions.
TERMS = bounds.stack_terms(N, C, F, T)


def _inputs(seed=0, length=T, zero_rows=False):
    x = (
        np.random.default_rng(seed)
        .normal(size=(B, length, C))
        .astype("float32")
    )
    if zero_rows:
        x[0, -2:] = 0.0
    return x


def _keep(length=T):
    keep = np.ones((B, length), bool)
    keep[0, -2:] = False
    return keep


def _encoder(flavor, normalize_first=False, num_layers=N, **kwargs):
    kwargs.setdefault("dropout_rate", 0.0)
    encoder = tfattn.Encoder(
        num_layers=num_layers,
        num_heads=H,
        ffn_units=F,
        flavor=flavor,
        normalize_first=normalize_first,
        **kwargs,
    )
    encoder(_inputs())
    _randomize(encoder)
    return encoder


# The fast tier runs the contract of the first setup; the others are slow
# (about a second each: a traced predict and a fit step).


# --------------------------------------------------------------------------
# Layer contract.


@pytest.mark.parametrize("flavor,normalize_first", CONTRACT_SETUPS)
def test_layer_contract(flavor, normalize_first):
    # Per block 16 (paper) or 14 (reference) weights; pre-norm adds the
    # final layer norm's gamma and beta.
    per_block = 16 if flavor == "paper" else 14
    # Two blocks where the stack adds the most (pre-norm: a final LN), one
    # elsewhere to keep the suite fast.
    n = 2 if normalize_first else 1
    run_layer_test(
        tfattn.Encoder,
        dict(
            num_layers=n,
            num_heads=H,
            ffn_units=F,
            flavor=flavor,
            normalize_first=normalize_first,
            dropout_rate=0.1,
            seed=4,
        ),
        _inputs(zero_rows=flavor == "reference_2017"),
        expected_output_shape=(B, T, C),
        expected_num_trainable_weights=n * per_block + 2 * normalize_first,
    )


@pytest.mark.slow
def test_keras_file_round_trip():
    """The layer contract's `.keras` save and reload, once per configuration
    of the contract tests above (run_layer_test skips it)."""
    for flavor, normalize_first in SETUPS:
        n = 2 if normalize_first else 1
        assert_keras_file_round_trip(
            tfattn.Encoder,
            dict(
                num_layers=n,
                num_heads=H,
                ffn_units=F,
                flavor=flavor,
                normalize_first=normalize_first,
                dropout_rate=0.1,
                seed=4,
            ),
            _inputs(zero_rows=flavor == "reference_2017"),
        )


def test_blocks_share_the_stack_arguments():
    encoder = _encoder(
        "paper",
        True,
        dropout_rate=0.2,
        attention_dropout_rate=0.05,
        layer_norm_epsilon=1e-5,
    )
    assert [b.name for b in encoder.blocks] == ["block_0", "block_1"]
    for block in encoder.blocks:
        assert isinstance(block, tfattn.EncoderBlock)
        assert block.normalize_first and block.flavor == "paper"
        assert block.dropout_rate == 0.2
        assert block.self_attention.dropout_rate == 0.05
        assert block.feed_forward_layer_norm.epsilon == 1e-5
    assert encoder.final_layer_norm.epsilon == 1e-5
    assert not hasattr(_encoder("paper"), "final_layer_norm")


# --------------------------------------------------------------------------
# Numerical equality with independent references.


@pytest.mark.parametrize("normalize_first", [False, True])
def test_paper_matches_keras_hub_stack(normalize_first):
    x, keep = _inputs(), _keep()
    encoder = _encoder("paper", normalize_first)
    want = x
    for block in encoder.blocks:
        want = keras_hub_encoder(block)(want, padding_mask=keep)
    if normalize_first:
        # Pre-norm stacks end with a layer norm (otherwise the output would
        # be an un-normalised residual sum).
        final = keras.layers.LayerNormalization(epsilon=1e-6)
        final.build((None, None, C))
        final.set_weights(_ln(encoder.final_layer_norm))
        want = final(want)
    got = encoder(x, padding_mask=keep)
    bounds.assert_close(got, want, terms=TERMS)


def test_pre_norm_output_is_layer_normalised():
    x = _inputs() * 10.0
    encoder = _encoder("paper", True)
    encoder.final_layer_norm.set_weights(
        [np.ones(C, "float32"), np.zeros(C, "float32")]
    )
    out = np.asarray(encoder(x))
    # Whatever the stack's rounding, the final layer norm (4·C) centres and
    # scales its output; then a mean over C of values of out's magnitude.
    bounds.assert_close(
        out.mean(-1), 0.0, terms=4 * C + C, scale=np.abs(out).max()
    )
    # The layer norm, then the mean and the variance over C (a sum of
    # squares of out) and the square root.
    bounds.assert_close(
        out.std(-1), 1.0, terms=4 * C + 2 * C + 1, scale=np.abs(out).max() ** 2
    )
    last_block = np.asarray(encoder.blocks[1](encoder.blocks[0](x)))
    assert np.abs(last_block.std(-1) - 1.0).max() > 0.1


def _numpy_2019_block(x, keep, block):
    params = {}
    att = block.self_attention
    for key, dense in (
        ("q", att.query_dense),
        ("k", att.key_dense),
        ("v", att.value_dense),
    ):
        params["w" + key], params["b" + key] = _dense(dense)
    params["gamma"], params["beta"] = _ln(att.layer_norm)
    h, _ = ref.mha_reference_2019(x, x, x, params, H, key_masks=~keep)
    (w1, b1), (w2, b2) = (
        _dense(block.feed_forward.inner_dense),
        _dense(block.feed_forward.outer_dense),
    )
    ff = np.maximum(h @ w1 + b1, 0.0) @ w2 + b2
    return ref.layer_norm(
        h + ff, *_ln(block.feed_forward_layer_norm), epsilon=1e-8
    )


def test_reference_2019_matches_numpy_stack():
    x, keep = _inputs(), _keep()
    encoder = _encoder("reference_2019")
    want = x
    for block in encoder.blocks:
        want = _numpy_2019_block(want, keep, block)
    bounds.assert_close(encoder(x, padding_mask=keep), want, terms=TERMS)


# --------------------------------------------------------------------------
# Behaviour.


@pytest.mark.parametrize("flavor,normalize_first", SETUPS)
def test_bidirectional(flavor, normalize_first):
    x = _inputs()
    encoder = _encoder(flavor, normalize_first)
    changed = x.copy()
    # Not a constant shift: layer norm (pre-norm) would erase it.
    changed[:, -1] = np.random.default_rng(9).normal(size=(B, C))
    diff = np.abs(np.asarray(encoder(changed)) - np.asarray(encoder(x)))
    assert diff[:, 0].max() > 1e-3  # the first position sees the last


@pytest.mark.parametrize(
    "flavor,normalize_first",
    [("paper", False), ("paper", True), ("reference_2019", False)],
)
def test_padding_does_not_change_real_positions(flavor, normalize_first):
    x = _inputs()
    padded = np.concatenate(
        [x, np.random.default_rng(5).normal(size=(B, 3, C)).astype("float32")],
        axis=1,
    )
    keep = np.ones((B, T + 3), bool)
    keep[:, T:] = False
    encoder = _encoder(flavor, normalize_first)
    got = np.asarray(encoder(padded, padding_mask=keep))[:, :T]
    # The padded stack sums over T + 3 keys.
    terms = bounds.stack_terms(N, C, F, T + 3)
    bounds.assert_close(got, encoder(x), terms=terms)


@pytest.mark.slow
def test_bert_style_encoder_trains():
    """Token embedding + positions + Encoder + Dense, on a task that needs
    both directions (output position t = input token at T-1-t)."""
    vocab, length = 12, 6
    keras.utils.set_random_seed(0)
    ids = keras.Input((length,), dtype="int32")
    x = tfattn.TokenEmbedding(vocab, 16)(ids)
    x = tfattn.PositionalEncoding(max_length=length)(x)
    x = tfattn.Encoder(
        num_layers=1, num_heads=H, ffn_units=32, dropout_rate=0.0
    )(x, padding_mask=ops.not_equal(ids, 0))
    model = keras.Model(ids, keras.layers.Dense(vocab)(x))
    model.compile(
        keras.optimizers.Adam(1e-2),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    data = np.random.default_rng(0).integers(1, vocab, size=(32, length))
    losses = [
        float(model.train_on_batch(data, data[:, ::-1])) for _ in range(12)
    ]
    assert losses[-1] < 0.75 * losses[0], losses


# --------------------------------------------------------------------------
# Errors.


@pytest.mark.parametrize("value", [0, -1, 1.0, True])
def test_bad_num_layers(value):
    with pytest.raises(
        ValueError, match=rf"Encoder.*`num_layers`.*num_layers={value}"
    ):
        tfattn.Encoder(num_layers=value)


@pytest.mark.parametrize("flavor", ["reference_2017", "reference_2019"])
def test_normalize_first_needs_the_paper_flavour(flavor):
    with pytest.raises(ValueError, match=r"Encoder.*`normalize_first`.*=True"):
        tfattn.Encoder(flavor=flavor, normalize_first=True)


def test_bad_block_arguments_are_reported_by_the_encoder():
    with pytest.raises(ValueError, match=r"Encoder.*`num_heads`.*num_heads=0"):
        tfattn.Encoder(num_heads=0)
    with pytest.raises(ValueError, match=r"Encoder.*`flavor`.*flavor='bert'"):
        tfattn.Encoder(flavor="bert")
