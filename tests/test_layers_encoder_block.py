"""Tests of tfattn.EncoderBlock.

References: keras_hub.layers.TransformerEncoder with copied weights for the
paper flavour (post-norm and pre-norm), and NumPy compositions of
tests/reference_numpy.py (attention and layer norm, written from
docs/reference.md) plus a NumPy feed-forward for the reference flavours.
"""

import keras
import numpy as np
import pytest

import tfattn
from tests import bounds
from tests import reference_numpy as ref
from tests.harness import SETUPS
from tests.harness import CONTRACT_SETUPS
from tests.harness import copy_to_keras_attention
from tests.harness import run_layer_test
from tests.harness import assert_keras_file_round_trip
from tests.harness import randomize_weights as _randomize
from tests.harness import dense_params as _dense
from tests.harness import norm_params as _ln
from tests.harness import ffn_numpy as _ffn
from tests.harness import attention_params as _reference_params

B, T, C, H, F = 2, 5, 8, 2, 16
# One block's output (tests/bounds.py), its keys the T positions.
TERMS = bounds.stack_terms(1, C, F, T)


def _inputs(seed=0, length=T, zero_rows=False):
    x = (
        np.random.default_rng(seed)
        .normal(size=(B, length, C))
        .astype("float32")
    )
    if zero_rows:
        x[0, -2:] = 0.0  # padding rows, as the 2017 reference finds them
    return x


def _keep(length=T):
    keep = np.ones((B, length), bool)
    keep[0, -2:] = False
    return keep


def _block(flavor, normalize_first=False, x=None, **kwargs):
    kwargs.setdefault("dropout_rate", 0.0)
    block = tfattn.EncoderBlock(
        num_heads=H,
        ffn_units=F,
        flavor=flavor,
        normalize_first=normalize_first,
        **kwargs,
    )
    block(_inputs() if x is None else x)
    _randomize(block)
    return block


# The fast tier runs the contract of the first setup; the others are slow
# (about a second each: a traced predict and a fit step).


# --------------------------------------------------------------------------
# Layer contract.


@pytest.mark.parametrize("flavor,normalize_first", CONTRACT_SETUPS)
def test_layer_contract(flavor, normalize_first):
    # paper: attention 4 Dense (8) + 2 LN (4) + FF 2 Dense (4) = 16;
    # reference: attention 3 Dense + its LN (8) + FF (4) + FF LN (2) = 14.
    run_layer_test(
        tfattn.EncoderBlock,
        dict(
            num_heads=H,
            ffn_units=F,
            flavor=flavor,
            normalize_first=normalize_first,
            dropout_rate=0.1,
            seed=2,
        ),
        _inputs(zero_rows=flavor == "reference_2017"),
        expected_output_shape=(B, T, C),
        expected_num_trainable_weights=16 if flavor == "paper" else 14,
    )


def test_layer_contract_with_padding_mask_input():
    run_layer_test(
        tfattn.EncoderBlock,
        dict(num_heads=H, ffn_units=F, flavor="reference_2019"),
        [_inputs(), _keep()],
        expected_output_shape=(B, T, C),
    )


@pytest.mark.slow
def test_keras_file_round_trip():
    """The layer contract's `.keras` save and reload, once per configuration
    of the contract tests above (run_layer_test skips it)."""
    for flavor, normalize_first in SETUPS:
        assert_keras_file_round_trip(
            tfattn.EncoderBlock,
            dict(
                num_heads=H,
                ffn_units=F,
                flavor=flavor,
                normalize_first=normalize_first,
                dropout_rate=0.1,
                seed=2,
            ),
            _inputs(zero_rows=flavor == "reference_2017"),
        )
    assert_keras_file_round_trip(
        tfattn.EncoderBlock,
        dict(num_heads=H, ffn_units=F, flavor="reference_2019"),
        [_inputs(), _keep()],
    )


# --------------------------------------------------------------------------
# Numerical equality with independent references.


def test_reference_2019_matches_numpy_composition():
    x, keep = _inputs(), _keep()
    block = _block("reference_2019")
    got = block(x, padding_mask=keep)
    # §2.9 step 5: MHA (residual + LN inside, key_masks True = pad), then
    # ff (§2.6): LN(x + Dense(ReLU(Dense(x)))), both LN eps 1e-8.
    h, _ = ref.mha_reference_2019(
        x, x, x, _reference_params(block.self_attention), H, key_masks=~keep
    )
    want = ref.layer_norm(
        h + _ffn(h, block.feed_forward),
        *_ln(block.feed_forward_layer_norm),
        epsilon=1e-8,
    )
    bounds.assert_close(got, want, terms=TERMS)
    assert block.feed_forward_layer_norm.epsilon == 1e-8


def test_reference_2017_matches_numpy_composition():
    x = _inputs(zero_rows=True)
    block = _block("reference_2017", x=x)
    got = block(x)
    h, _ = ref.mha_reference_2017(
        x, x, _reference_params(block.self_attention), H
    )
    want = ref.layer_norm(
        h + _ffn(h, block.feed_forward),
        *_ln(block.feed_forward_layer_norm),
        epsilon=1e-8,
    )
    bounds.assert_close(got, want, terms=TERMS)


def keras_hub_encoder(block):
    """keras_hub TransformerEncoder holding a paper-flavour block's weights."""
    import keras_hub

    twin = keras_hub.layers.TransformerEncoder(
        intermediate_dim=F,
        num_heads=H,
        dropout=0.0,
        layer_norm_epsilon=block.self_attention_layer_norm.epsilon,
        normalize_first=block.normalize_first,
    )
    twin.build((None, None, C))
    copy_to_keras_attention(twin._self_attention_layer, block.self_attention)
    twin._self_attention_layer_norm.set_weights(
        _ln(block.self_attention_layer_norm)
    )
    twin._feedforward_intermediate_dense.set_weights(
        _dense(block.feed_forward.inner_dense)
    )
    twin._feedforward_output_dense.set_weights(
        _dense(block.feed_forward.outer_dense)
    )
    twin._feedforward_layer_norm.set_weights(_ln(block.feed_forward_layer_norm))
    return twin


@pytest.mark.parametrize("normalize_first", [False, True])
def test_paper_matches_keras_hub_transformer_encoder(normalize_first):
    x, keep = _inputs(), _keep()
    block = _block("paper", normalize_first)
    assert block.self_attention_layer_norm.epsilon == 1e-6  # paper default
    twin = keras_hub_encoder(block)
    bounds.assert_close(
        block(x, padding_mask=keep), twin(x, padding_mask=keep), terms=TERMS
    )
    bounds.assert_close(block(x), twin(x), terms=TERMS)
    # The padding mask matters.
    diff = np.abs(
        np.asarray(block(x, padding_mask=keep)) - np.asarray(block(x))
    )
    assert diff[0].max() > 1e-3


def test_paper_matches_numpy_composition():
    """Post-norm wiring, independent of keras-hub: LN(x + MHA(x)),
    LN(h + FF(h))."""
    x, keep = _inputs(), _keep()
    block = _block("paper")
    att = block.self_attention
    params = {}
    for key, dense in (
        ("q", att.query_dense),
        ("k", att.key_dense),
        ("v", att.value_dense),
        ("o", att.output_dense),
    ):
        params["w" + key], params["b" + key] = _dense(dense)
    a, _ = ref.mha_paper(
        x,
        x,
        x,
        params,
        H,
        attend_mask=np.broadcast_to(keep[:, None, :], (B, T, T)),
    )
    h = ref.layer_norm(
        x + a, *_ln(block.self_attention_layer_norm), epsilon=1e-6
    )
    want = ref.layer_norm(
        h + _ffn(h, block.feed_forward),
        *_ln(block.feed_forward_layer_norm),
        epsilon=1e-6,
    )
    bounds.assert_close(block(x, padding_mask=keep), want, terms=TERMS)


# --------------------------------------------------------------------------
# Behaviour.


def test_layer_norm_epsilon_defaults_and_override():
    assert _block("paper").feed_forward_layer_norm.epsilon == 1e-6
    assert _block("reference_2019").feed_forward_layer_norm.epsilon == 1e-8
    block = _block("paper", layer_norm_epsilon=1e-3)
    assert block.self_attention_layer_norm.epsilon == 1e-3
    assert block.feed_forward_layer_norm.epsilon == 1e-3
    assert block.get_config()["layer_norm_epsilon"] == 1e-3


@pytest.mark.parametrize("flavor", ["reference_2017", "reference_2019"])
def test_reference_flavours_have_no_residual_dropout(flavor):
    # §1.7 / §2.9: dropout sites are the embedding and the attention weights
    # only, so with attention dropout off, training changes nothing.
    x = _inputs(zero_rows=flavor == "reference_2017")
    block = _block(flavor, x=x, dropout_rate=0.5, attention_dropout_rate=0.0)
    bounds.assert_close(
        block(x, training=True), block(x, training=False), terms=TERMS
    )
    assert block.self_attention.dropout_rate == 0.0


def test_paper_residual_dropout_acts_only_when_training():
    x = _inputs()
    block = _block(
        "paper", dropout_rate=0.5, attention_dropout_rate=0.0, seed=3
    )
    assert block.self_attention.dropout_rate == 0.0
    bounds.assert_close(block(x), block(x, training=False), terms=TERMS)
    assert (
        np.abs(
            np.asarray(block(x, training=True))
            - np.asarray(block(x, training=False))
        ).max()
        > 1e-3
    )


def test_attention_dropout_rate_defaults_to_dropout_rate():
    assert _block("paper", dropout_rate=0.2).self_attention.dropout_rate == 0.2
    assert (
        _block(
            "paper", dropout_rate=0.2, attention_dropout_rate=0.05
        ).self_attention.dropout_rate
        == 0.05
    )


@pytest.mark.parametrize("flavor,normalize_first", SETUPS)
def test_padding_does_not_change_real_positions(flavor, normalize_first):
    x = _inputs()
    keep = np.ones((B, T + 2), bool)
    keep[:, T:] = False
    padded = np.concatenate([x, np.zeros((B, 2, C), "float32")], axis=1)
    block = _block(flavor, normalize_first)
    if flavor == "reference_2017":  # padding = zero rows, no mask argument
        got, want = block(padded), block(x)
    else:
        got, want = block(padded, padding_mask=keep), block(x)
    # The padded block sums over T + 2 keys.
    terms = bounds.stack_terms(1, C, F, T + 2)
    bounds.assert_close(np.asarray(got)[:, :T], want, terms=terms)


# --------------------------------------------------------------------------
# Errors.


@pytest.mark.parametrize("flavor", ["reference_2017", "reference_2019"])
def test_normalize_first_needs_the_paper_flavour(flavor):
    with pytest.raises(
        ValueError, match=r"`normalize_first`.*normalize_first=True"
    ):
        tfattn.EncoderBlock(num_heads=H, flavor=flavor, normalize_first=True)


@pytest.mark.parametrize(
    "kwargs,pattern",
    [
        (dict(num_heads=0), r"`num_heads`.*num_heads=0"),
        (dict(ffn_units=-4), r"`ffn_units`.*ffn_units=-4"),
        (dict(dropout_rate=1.0), r"`dropout_rate`.*dropout_rate=1.0"),
        (dict(attention_dropout_rate=-0.1), r"`attention_dropout_rate`.*=-0.1"),
        (dict(flavor="bert"), r"`flavor`.*flavor='bert'"),
        (
            dict(normalize_first="yes"),
            r"`normalize_first`.*normalize_first='yes'",
        ),
        (
            dict(layer_norm_epsilon=0.0),
            r"`layer_norm_epsilon`.*layer_norm_epsilon=0.0",
        ),
    ],
)
def test_bad_constructor_arguments(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        tfattn.EncoderBlock(**kwargs)


def test_width_not_divisible_by_heads():
    block = tfattn.EncoderBlock(num_heads=3, ffn_units=F)
    with pytest.raises(
        ValueError, match=r"`num_units`.*multiple of num_heads=3"
    ):
        block(_inputs())


def test_keras_mask_from_embedding_is_used_by_the_paper_flavour():
    ids = np.array([[3, 4, 5, 0, 0], [6, 7, 8, 9, 2]])
    block = _block("paper")
    embed = keras.layers.Embedding(12, C, mask_zero=True)
    masked = block(embed(ids))
    explicit = block(embed(ids), padding_mask=ids != 0)
    bounds.assert_close(
        np.asarray(masked)[0, :3], np.asarray(explicit)[0, :3], terms=TERMS
    )


@pytest.mark.parametrize("block_class", ["EncoderBlock", "DecoderBlock"])
def test_kernel_and_bias_initializers_reach_every_dense(block_class):
    """keras-hub's `kernel_initializer` / `bias_initializer`: every Dense of
    the block (attention projections, feed-forward) uses them, each drawing
    its own values; config and `from_config` keep them; a bad name is a
    ValueError naming the argument."""
    cls = getattr(tfattn, block_class)
    kwargs = dict(
        num_heads=H,
        ffn_units=F,
        dropout_rate=0.0,
        kernel_initializer=keras.initializers.RandomNormal(stddev=0.5),
        bias_initializer="ones",
    )
    if block_class == "DecoderBlock":
        kwargs["use_cross_attention"] = False
    block = cls(**kwargs)
    block(_inputs())
    dense = [
        layer
        for layer in block._flatten_layers()
        if isinstance(layer, keras.layers.Dense)
    ]
    assert len(dense) == 6  # q, k, v, output, inner, outer
    kernels = [d.kernel.numpy() for d in dense]
    for d, kernel in zip(dense, kernels):
        assert np.all(d.bias.numpy() == 1.0), d.name
        # The sample std of n normal draws has std about 0.5 / sqrt(2n).
        assert abs(kernel.std() - 0.5) < 6 * 0.5 / np.sqrt(2 * kernel.size), (
            d.name
        )
    for i in range(len(kernels)):
        for j in range(i):
            if kernels[i].shape == kernels[j].shape:
                assert np.abs(kernels[i] - kernels[j]).max() > 1e-3
    config = block.get_config()
    assert config["bias_initializer"]["class_name"] == "Ones"
    clone = cls.from_config(config)
    assert isinstance(clone.kernel_initializer, keras.initializers.RandomNormal)
    with pytest.raises(ValueError, match=r"`kernel_initializer`.*'nope'"):
        cls(num_heads=H, kernel_initializer="nope")


def test_attention_mask_as_keras_hub():
    """keras-hub's `attention_mask` [B, T, T], with the padding mask too:
    equal to keras-hub's TransformerEncoder with the same weights."""
    x, keep = _inputs(), _keep()
    block = _block("paper", False)
    twin = keras_hub_encoder(block)
    attend = (
        np.random.default_rng(2).random((x.shape[0], x.shape[1], x.shape[1]))
        > 0.3
    )
    attend[..., 0] = True
    bounds.assert_close(
        block(x, padding_mask=keep, attention_mask=attend),
        twin(x, padding_mask=keep, attention_mask=attend),
        terms=TERMS,
    )
    assert (
        np.abs(
            np.asarray(block(x, attention_mask=attend)) - np.asarray(block(x))
        ).max()
        > 1e-3
    )
