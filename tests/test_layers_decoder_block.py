"""Tests of tfattn.DecoderBlock.

References: keras_hub.layers.TransformerDecoder with copied weights for the
paper flavour (post-norm and pre-norm), and NumPy compositions of
tests/reference_numpy.py (attention and layer norm, written from
docs/reference.md) plus a NumPy feed-forward for the reference flavours.
"""

import numpy as np
import pytest
import tensorflow as tf

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

B, T, S, C, H, F = 2, 5, 6, 8, 2, 16


def _terms(cross=True):
    """`bounds.stack_terms` of one block's output: its cross-attention
    counts as a second block, its keys the memory's S."""
    if cross:
        return bounds.stack_terms(2, C, F, max(T, S))
    return bounds.stack_terms(1, C, F, T)


def _inputs(seed=0, length=T):
    return (
        np.random.default_rng(seed)
        .normal(size=(B, length, C))
        .astype("float32")
    )


def _memory(zero_rows=False):
    memory = _inputs(1, S)
    if zero_rows:
        memory[0, -2:] = 0.0
    return memory


def _keep(length, pads=2):
    keep = np.ones((B, length), bool)
    keep[0, -pads:] = False
    return keep


def _block(flavor, normalize_first=False, cross=True, **kwargs):
    kwargs.setdefault("dropout_rate", 0.0)
    block = tfattn.DecoderBlock(
        num_heads=H,
        ffn_units=F,
        flavor=flavor,
        normalize_first=normalize_first,
        use_cross_attention=cross,
        **kwargs,
    )
    block(_inputs(), _memory()) if cross else block(_inputs())
    _randomize(block)
    return block


# The fast tier runs the contract of the first setup; the others are slow
# (about a second each: a traced predict and a fit step).


# --------------------------------------------------------------------------
# Layer contract.


@pytest.mark.parametrize("flavor,normalize_first", CONTRACT_SETUPS)
def test_layer_contract_with_cross_attention(flavor, normalize_first):
    # paper: 2 attentions x 8 + 3 LN x 2 + FF 4 = 26; reference: 2 x 8 + 4 + 2
    # = 22.
    run_layer_test(
        tfattn.DecoderBlock,
        dict(
            num_heads=H,
            ffn_units=F,
            flavor=flavor,
            normalize_first=normalize_first,
            dropout_rate=0.1,
            seed=2,
        ),
        [_inputs(), _memory(zero_rows=flavor == "reference_2017")],
        expected_output_shape=(B, T, C),
        expected_num_trainable_weights=26 if flavor == "paper" else 22,
    )


@pytest.mark.parametrize("flavor,normalize_first", [("reference_2019", False)])
def test_layer_contract_gpt_style(flavor, normalize_first):
    run_layer_test(
        tfattn.DecoderBlock,
        dict(
            num_heads=H,
            ffn_units=F,
            flavor=flavor,
            normalize_first=normalize_first,
            use_cross_attention=False,
        ),
        _inputs(),
        expected_output_shape=(B, T, C),
        expected_num_trainable_weights=16 if flavor == "paper" else 14,
    )


@pytest.mark.slow
def test_keras_file_round_trip():
    """The layer contract's `.keras` save and reload, once per configuration
    of the contract tests above (run_layer_test skips it)."""
    for flavor, normalize_first in SETUPS:
        assert_keras_file_round_trip(
            tfattn.DecoderBlock,
            dict(
                num_heads=H,
                ffn_units=F,
                flavor=flavor,
                normalize_first=normalize_first,
                dropout_rate=0.1,
                seed=2,
            ),
            [_inputs(), _memory(zero_rows=flavor == "reference_2017")],
        )
    assert_keras_file_round_trip(
        tfattn.DecoderBlock,
        dict(
            num_heads=H,
            ffn_units=F,
            flavor="reference_2019",
            normalize_first=False,
            use_cross_attention=False,
        ),
        _inputs(),
    )


# --------------------------------------------------------------------------
# Numerical equality with independent references.


def test_reference_2019_matches_numpy_composition():
    x, memory = _inputs(), _memory()
    keep, memory_keep = _keep(T, 1), _keep(S, 2)
    block = _block("reference_2019")
    got = block(x, memory, padding_mask=keep, memory_padding_mask=memory_keep)
    # §2.9 decode step 5: causal self-attention, vanilla attention over the
    # memory, then ff; residual + LN (eps 1e-8) after each.
    h, _ = ref.mha_reference_2019(
        x,
        x,
        x,
        _reference_params(block.self_attention),
        H,
        key_masks=~keep,
        causality=True,
    )
    h, _ = ref.mha_reference_2019(
        h,
        memory,
        memory,
        _reference_params(block.cross_attention),
        H,
        key_masks=~memory_keep,
    )
    want = ref.layer_norm(
        h + _ffn(h, block.feed_forward),
        *_ln(block.feed_forward_layer_norm),
        epsilon=1e-8,
    )
    bounds.assert_close(got, want, terms=_terms())


def test_reference_2017_matches_numpy_composition():
    x, memory = _inputs(), _memory(zero_rows=True)
    x[1, -1] = 0.0
    block = _block("reference_2017")
    got = block(x, memory)
    h, _ = ref.mha_reference_2017(
        x, x, _reference_params(block.self_attention), H, causality=True
    )
    h, _ = ref.mha_reference_2017(
        h, memory, _reference_params(block.cross_attention), H
    )
    want = ref.layer_norm(
        h + _ffn(h, block.feed_forward),
        *_ln(block.feed_forward_layer_norm),
        epsilon=1e-8,
    )
    bounds.assert_close(got, want, terms=_terms())


def keras_hub_decoder(block):
    """keras_hub TransformerDecoder holding a paper-flavour block's weights."""
    import keras_hub

    twin = keras_hub.layers.TransformerDecoder(
        intermediate_dim=F,
        num_heads=H,
        dropout=0.0,
        layer_norm_epsilon=block.self_attention_layer_norm.epsilon,
        normalize_first=block.normalize_first,
    )
    twin.build(
        (None, None, C), (None, None, C) if block.use_cross_attention else None
    )
    copy_to_keras_attention(twin._self_attention_layer, block.self_attention)
    twin._self_attention_layer_norm.set_weights(
        _ln(block.self_attention_layer_norm)
    )
    if block.use_cross_attention:
        copy_to_keras_attention(
            twin._cross_attention_layer, block.cross_attention
        )
        twin._cross_attention_layer_norm.set_weights(
            _ln(block.cross_attention_layer_norm)
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
def test_paper_matches_keras_hub_transformer_decoder(normalize_first):
    x, memory = _inputs(), _memory()
    keep, memory_keep = _keep(T, 1), _keep(S, 2)
    block = _block("paper", normalize_first)
    assert block.cross_attention_layer_norm.epsilon == 1e-6  # paper default
    twin = keras_hub_decoder(block)
    got = block(x, memory, padding_mask=keep, memory_padding_mask=memory_keep)
    want = twin(
        x, memory, decoder_padding_mask=keep, encoder_padding_mask=memory_keep
    )
    bounds.assert_close(got, want, terms=_terms())
    bounds.assert_close(block(x, memory), twin(x, memory), terms=_terms())


def _paper_params(attention):
    params = {}
    for key, dense in (
        ("q", attention.query_dense),
        ("k", attention.key_dense),
        ("v", attention.value_dense),
        ("o", attention.output_dense),
    ):
        params["w" + key], params["b" + key] = _dense(dense)
    return params


def test_paper_matches_numpy_composition():
    """Post-norm wiring without keras-hub (which the test extra lacks)."""
    x, memory = _inputs(), _memory()
    keep, memory_keep = _keep(T, 1), _keep(S, 2)
    block = _block("paper")
    got = block(x, memory, padding_mask=keep, memory_padding_mask=memory_keep)
    a, _ = ref.mha_paper(
        x,
        x,
        x,
        _paper_params(block.self_attention),
        H,
        attend_mask=np.broadcast_to(keep[:, None, :], (B, T, T)),
        causality=True,
    )
    h = ref.layer_norm(
        x + a, *_ln(block.self_attention_layer_norm), epsilon=1e-6
    )
    a, _ = ref.mha_paper(
        h,
        memory,
        memory,
        _paper_params(block.cross_attention),
        H,
        attend_mask=np.broadcast_to(memory_keep[:, None, :], (B, T, S)),
    )
    h = ref.layer_norm(
        h + a, *_ln(block.cross_attention_layer_norm), epsilon=1e-6
    )
    want = ref.layer_norm(
        h + _ffn(h, block.feed_forward),
        *_ln(block.feed_forward_layer_norm),
        epsilon=1e-6,
    )
    bounds.assert_close(got, want, terms=_terms())


def test_paper_gpt_style_matches_keras_hub_decoder_without_encoder():
    x = _inputs()
    block = _block("paper", cross=False)
    twin = keras_hub_decoder(block)
    bounds.assert_close(block(x), twin(x), terms=_terms(cross=False))


# --------------------------------------------------------------------------
# Causality and cached decoding.


@pytest.mark.parametrize("cross", [True, False])
@pytest.mark.parametrize("flavor,normalize_first", SETUPS)
def test_future_positions_do_not_leak(flavor, normalize_first, cross):
    x, memory = _inputs(), _memory()
    block = _block(flavor, normalize_first, cross=cross)
    run = (
        (lambda a: np.asarray(block(a, memory)))
        if cross
        else (lambda a: np.asarray(block(a)))
    )
    base = run(x)
    for t in (0, 2):  # tokens after t change
        changed = x.copy()
        changed[:, t + 1 :] = np.random.default_rng(t).normal(
            size=changed[:, t + 1 :].shape
        )
        out = run(changed)
        bounds.assert_close(
            out[:, : t + 1], base[:, : t + 1], terms=_terms(cross)
        )
        assert np.abs(out[:, t + 1 :] - base[:, t + 1 :]).max() > 1e-3


@pytest.mark.parametrize("cross", [True, False])
@pytest.mark.parametrize("flavor,normalize_first", SETUPS)
def test_cached_steps_equal_the_full_pass(flavor, normalize_first, cross):
    x = _inputs()
    memory = _memory(zero_rows=flavor == "reference_2017")
    memory_keep = None if flavor == "reference_2017" else _keep(S, 2)
    keep = None if flavor == "reference_2017" else np.ones((B, T), bool)
    block = _block(flavor, normalize_first, cross=cross)
    if cross:
        full = block(
            x, memory, padding_mask=keep, memory_padding_mask=memory_keep
        )
        cache = block.init_cache(
            B, T + 2, memory, memory_padding_mask=memory_keep
        )
    else:
        full = block(x, padding_mask=keep)
        cache = block.init_cache(B, T + 2)
        assert set(cache) == {"self"}
    for t in range(T):
        step_keep = None if keep is None else keep[:, t : t + 1]
        out, cache = block(
            x[:, t : t + 1],
            padding_mask=step_keep,
            cache=cache,
            cache_index=tf.constant(t),
        )
        bounds.assert_close(
            np.asarray(out)[:, 0], np.asarray(full)[:, t], terms=_terms(cross)
        )
    assert tuple(cache["self"]["key"].shape) == (B, H, T + 2, C // H)


# --------------------------------------------------------------------------
# Errors.


def test_memory_missing_with_cross_attention():
    block = _block("paper")
    with pytest.raises(
        ValueError,
        match=r"`memory`.*use_cross_attention=False.*"
        r"Received: memory=None",
    ):
        block(_inputs())
    with pytest.raises(ValueError, match=r"`memory`.*Received: memory=None"):
        block.init_cache(B, T)


def test_memory_unexpected_without_cross_attention():
    block = _block("reference_2019", cross=False)
    with pytest.raises(
        ValueError,
        match=r"`memory`.*expected None.*"
        r"memory='<tensor of shape \(2, 6, 8\)>'",
    ):
        block(_inputs(), _memory())


def test_cache_without_cache_index():
    block = _block("paper", cross=False)
    cache = block.init_cache(B, T)
    with pytest.raises(ValueError, match=r"`cache_index`.*cache_index=None"):
        block(_inputs(length=1), cache=cache)


@pytest.mark.parametrize("index", [3, 5, -1])
def test_cache_too_short_for_the_position(index):
    # An out-of-range write would be clamped onto the last slot silently.
    block = _block("paper")
    cache = block.init_cache(B, 4, _memory())
    tokens = _inputs(length=2)
    with pytest.raises(
        ValueError, match=rf"`cache_index`.*<= 4.*cache_index={index}"
    ):
        block(tokens, cache=cache, cache_index=tf.constant(index))
    out, _ = block(tokens, cache=cache, cache_index=2)  # the last two slots
    assert tuple(out.shape) == (B, 2, C)


def test_cache_from_another_model_size():
    block = _block("reference_2019", cross=False)
    wider = tfattn.DecoderBlock(
        num_heads=H,
        ffn_units=F,
        flavor="reference_2019",
        use_cross_attention=False,
    )
    wider(np.zeros((B, T, 2 * C), "float32"))
    cache = wider.init_cache(B, T)
    with pytest.raises(
        ValueError,
        match=r"`cache`.*another model size.*"
        r"key shape \(2, 2, 5, 8\)",
    ):
        block(_inputs(length=1), cache=cache, cache_index=tf.constant(0))


@pytest.mark.parametrize("flavor", ["reference_2017", "reference_2019"])
def test_normalize_first_needs_the_paper_flavour(flavor):
    with pytest.raises(
        ValueError, match=r"`normalize_first`.*normalize_first=True"
    ):
        tfattn.DecoderBlock(flavor=flavor, normalize_first=True)


@pytest.mark.parametrize(
    "kwargs,pattern",
    [
        (
            dict(use_cross_attention=1),
            r"`use_cross_attention`.*use_cross_attention=1",
        ),
        (dict(num_heads=1.5), r"`num_heads`.*num_heads=1.5"),
        (dict(ffn_units=0), r"`ffn_units`.*ffn_units=0"),
        (dict(dropout_rate=-0.5), r"`dropout_rate`.*dropout_rate=-0.5"),
        (dict(flavor="gpt"), r"`flavor`.*flavor='gpt'"),
    ],
)
def test_bad_constructor_arguments(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        tfattn.DecoderBlock(**kwargs)


def test_keras_hub_mask_arguments():
    """keras-hub's `decoder_attention_mask`, `encoder_padding_mask` and
    `encoder_attention_mask`: equal to keras-hub's TransformerDecoder with
    the same weights and masks; `encoder_padding_mask` beside
    `memory_padding_mask` is refused."""
    x, memory = _inputs(), _memory()
    keep, memory_keep = _keep(T, 1), _keep(S, 2)
    block = _block("paper", False)
    twin = keras_hub_decoder(block)
    rng = np.random.default_rng(6)
    self_mask = rng.random((x.shape[0], T, T)) > 0.3
    self_mask[..., 0] = True
    cross_mask = rng.random((x.shape[0], T, S)) > 0.3
    cross_mask[..., 0] = True
    got = block(
        x,
        memory,
        padding_mask=keep,
        encoder_padding_mask=memory_keep,
        decoder_attention_mask=self_mask,
        encoder_attention_mask=cross_mask,
    )
    want = twin(
        x,
        memory,
        decoder_padding_mask=keep,
        encoder_padding_mask=memory_keep,
        decoder_attention_mask=self_mask,
        encoder_attention_mask=cross_mask,
    )
    bounds.assert_close(got, want, terms=_terms())
    plain = block(x, memory, padding_mask=keep, memory_padding_mask=memory_keep)
    assert np.abs(np.asarray(got) - np.asarray(plain)).max() > 1e-3
    with pytest.raises(
        ValueError,
        match="`encoder_padding_mask`.*None when `memory_padding_mask`",
    ):
        block(
            x,
            memory,
            memory_padding_mask=memory_keep,
            encoder_padding_mask=memory_keep,
        )


@pytest.mark.parametrize("cross", [True, False])
@pytest.mark.parametrize("normalize_first", [False, True])
def test_porting_from_keras_hub_and_back(cross, normalize_first):
    """`interop.from_keras_hub` gives a block equal to keras-hub's (random
    weights, padding masks); `to_keras_hub` gives back identical weights.
    The encoder block goes the same way."""
    import keras_hub

    x, memory = _inputs(), _memory()
    keep, memory_keep = _keep(T, 1), _keep(S, 2)
    rng = np.random.default_rng(9)
    theirs = keras_hub.layers.TransformerDecoder(
        intermediate_dim=F, num_heads=H, normalize_first=normalize_first
    )
    theirs.build((None, None, C), (None, None, C) if cross else None)
    for w in theirs.weights:
        w.assign(rng.normal(size=w.shape).astype("float32") * 0.3)
    ours = tfattn.interop.from_keras_hub(theirs)
    assert ours.use_cross_attention == cross
    if cross:
        got = ours(
            x, memory, padding_mask=keep, memory_padding_mask=memory_keep
        )
        want = theirs(
            x,
            memory,
            decoder_padding_mask=keep,
            encoder_padding_mask=memory_keep,
        )
    else:
        got, want = (
            ours(x, padding_mask=keep),
            theirs(x, decoder_padding_mask=keep),
        )
    bounds.assert_close(got, want, terms=_terms(cross))
    back = tfattn.interop.to_keras_hub(ours)
    for a, b in zip(back.get_weights(), theirs.get_weights()):
        np.testing.assert_array_equal(a, b)

    encoder = keras_hub.layers.TransformerEncoder(
        intermediate_dim=F, num_heads=H, normalize_first=normalize_first
    )
    encoder.build((None, None, C))
    for w in encoder.weights:
        w.assign(rng.normal(size=w.shape).astype("float32") * 0.3)
    mine = tfattn.interop.from_keras_hub(encoder)
    bounds.assert_close(
        mine(x, padding_mask=keep),
        encoder(x, padding_mask=keep),
        terms=_terms(cross=False),
    )
    for a, b in zip(
        tfattn.interop.to_keras_hub(mine).get_weights(), encoder.get_weights()
    ):
        np.testing.assert_array_equal(a, b)


def test_porting_blocks_refuses_what_it_cannot_carry():
    import keras
    import keras_hub

    with pytest.raises(ValueError, match="`block`.*TransformerEncoder.*Dense"):
        tfattn.interop.from_keras_hub(keras.layers.Dense(2))
    with pytest.raises(ValueError, match="`block`.*a built block"):
        tfattn.interop.from_keras_hub(
            keras_hub.layers.TransformerEncoder(intermediate_dim=F, num_heads=H)
        )
    with pytest.raises(ValueError, match="flavor 'paper'.*'reference_2019'"):
        tfattn.interop.to_keras_hub(_block("reference_2019"))


def test_cross_attention_decided_by_the_first_call_as_keras_hub():
    """Default `use_cross_attention=None`: keras-hub's TransformerDecoder
    behaviour. Built with memory -> cross-attention (a later call without
    memory is refused); built without -> GPT-style (a later call with memory
    is refused); the implicit mask of the input propagates either way; the
    resolved value travels in the config."""
    x, memory = _inputs(), _memory()
    with_memory = tfattn.DecoderBlock(num_heads=H, ffn_units=F)
    assert with_memory.use_cross_attention is None
    with_memory(x, memory)
    assert with_memory.use_cross_attention is True
    assert len(with_memory.trainable_weights) == 26  # keras-hub's count
    with pytest.raises(ValueError, match=r"`memory`.*Received: memory=None"):
        with_memory(x)
    alone = tfattn.DecoderBlock(num_heads=H, ffn_units=F)
    masked = tf.identity(x)
    masked._keras_mask = tf.constant(_keep(T))
    out = alone(masked)
    assert alone.use_cross_attention is False
    assert len(alone.trainable_weights) == 16  # keras-hub's count
    np.testing.assert_array_equal(out._keras_mask, _keep(T))
    with pytest.raises(
        ValueError,
        match=r"`memory`.*first called without "
        r"memory.*\(2, 6, 8\)",
    ):
        alone(x, memory)
    clone = tfattn.DecoderBlock.from_config(alone.get_config())
    assert clone.use_cross_attention is False
