"""Tests of tfattn.Decoder (N decoder blocks; GPT-style without
cross-attention).

References: a stack of keras_hub.layers.TransformerDecoder blocks (plus a
Keras LayerNormalization for pre-norm) with copied weights for the paper
flavour; causality and caching are checked as invariants.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfattn
from tests import bounds
from tests.harness import SETUPS
from tests.harness import CONTRACT_SETUPS
from tests.harness import run_layer_test
from tests.harness import assert_keras_file_round_trip
from tests.test_layers_decoder_block import keras_hub_decoder
from tests.harness import randomize_weights as _randomize

B, T, S, C, H, F, N = 2, 5, 6, 8, 2, 16, 2


def _terms(cross=True):
    """`bounds.stack_terms` of the N-block stack's output: a block's
    cross-attention counts as one more block, its keys the memory's S."""
    if cross:
        return bounds.stack_terms(2 * N, C, F, max(T, S))
    return bounds.stack_terms(N, C, F, T)


def _inputs(seed=0, length=T, width=C):
    return (
        np.random.default_rng(seed)
        .normal(size=(B, length, width))
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


def _decoder(flavor, normalize_first=False, cross=True, num_layers=N, width=C):
    decoder = tfattn.Decoder(
        num_layers=num_layers,
        num_heads=H,
        ffn_units=F,
        flavor=flavor,
        normalize_first=normalize_first,
        use_cross_attention=cross,
        dropout_rate=0.0,
    )
    x = _inputs(width=width)
    decoder(x, _inputs(1, S, width)) if cross else decoder(x)
    _randomize(decoder)
    return decoder


# The fast tier runs the contract of the first setup; the others are slow
# (about a second each: a traced predict and a fit step).


# --------------------------------------------------------------------------
# Layer contract.


@pytest.mark.parametrize("flavor,normalize_first", CONTRACT_SETUPS)
def test_layer_contract(flavor, normalize_first):
    per_block = 26 if flavor == "paper" else 22
    # Two blocks where the stack adds the most (pre-norm: a final LN), one
    # elsewhere to keep the suite fast.
    n = 2 if normalize_first else 1
    run_layer_test(
        tfattn.Decoder,
        dict(
            num_layers=n,
            num_heads=H,
            ffn_units=F,
            flavor=flavor,
            normalize_first=normalize_first,
            dropout_rate=0.1,
            seed=4,
        ),
        [_inputs(), _memory(zero_rows=flavor == "reference_2017")],
        expected_output_shape=(B, T, C),
        expected_num_trainable_weights=n * per_block + 2 * normalize_first,
    )


def test_layer_contract_gpt_style():
    run_layer_test(
        tfattn.Decoder,
        dict(
            num_layers=1,
            num_heads=H,
            ffn_units=F,
            normalize_first=True,
            use_cross_attention=False,
        ),
        _inputs(),
        expected_output_shape=(B, T, C),
        expected_num_trainable_weights=16 + 2,
    )


@pytest.mark.slow
def test_keras_file_round_trip():
    """The layer contract's `.keras` save and reload, once per configuration
    of the contract tests above (run_layer_test skips it)."""
    for flavor, normalize_first in SETUPS:
        n = 2 if normalize_first else 1
        assert_keras_file_round_trip(
            tfattn.Decoder,
            dict(
                num_layers=n,
                num_heads=H,
                ffn_units=F,
                flavor=flavor,
                normalize_first=normalize_first,
                dropout_rate=0.1,
                seed=4,
            ),
            [_inputs(), _memory(zero_rows=flavor == "reference_2017")],
        )
    assert_keras_file_round_trip(
        tfattn.Decoder,
        dict(
            num_layers=1,
            num_heads=H,
            ffn_units=F,
            normalize_first=True,
            use_cross_attention=False,
        ),
        _inputs(),
    )


def test_blocks_share_the_stack_arguments():
    decoder = _decoder("paper", True, cross=False)
    assert [b.name for b in decoder.blocks] == ["block_0", "block_1"]
    for block in decoder.blocks:
        assert isinstance(block, tfattn.DecoderBlock)
        assert not block.use_cross_attention and block.normalize_first
        assert not hasattr(block, "cross_attention")
    assert decoder.final_layer_norm.epsilon == 1e-6
    assert not hasattr(_decoder("reference_2019"), "final_layer_norm")


# --------------------------------------------------------------------------
# Numerical equality with keras-hub.


@pytest.mark.parametrize("cross", [True, False])
@pytest.mark.parametrize("normalize_first", [False, True])
def test_paper_matches_keras_hub_stack(normalize_first, cross):
    x, memory = _inputs(), _memory()
    keep, memory_keep = _keep(T, 1), _keep(S, 2)
    decoder = _decoder("paper", normalize_first, cross=cross)
    want = x
    for block in decoder.blocks:
        twin = keras_hub_decoder(block)
        if cross:
            want = twin(
                want,
                memory,
                decoder_padding_mask=keep,
                encoder_padding_mask=memory_keep,
            )
        else:
            want = twin(want, decoder_padding_mask=keep)
    if normalize_first:
        final = keras.layers.LayerNormalization(epsilon=1e-6)
        final.build((None, None, C))
        final.set_weights(
            [
                decoder.final_layer_norm.gamma.numpy(),
                decoder.final_layer_norm.beta.numpy(),
            ]
        )
        want = final(want)
    if cross:
        got = decoder(
            x, memory, padding_mask=keep, memory_padding_mask=memory_keep
        )
    else:
        got = decoder(x, padding_mask=keep)
    bounds.assert_close(got, want, terms=_terms(cross))


# --------------------------------------------------------------------------
# Causality and cached decoding.


@pytest.mark.parametrize("flavor,normalize_first", SETUPS)
def test_future_positions_do_not_leak(flavor, normalize_first):
    x, memory = _inputs(), _memory()
    decoder = _decoder(flavor, normalize_first)
    base = np.asarray(decoder(x, memory))
    for t in (0, 2):  # tokens after t change
        changed = x.copy()
        changed[:, t + 1 :] = np.random.default_rng(t).normal(
            size=changed[:, t + 1 :].shape
        )
        out = np.asarray(decoder(changed, memory))
        bounds.assert_close(out[:, : t + 1], base[:, : t + 1], terms=_terms())
        assert np.abs(out[:, t + 1 :] - base[:, t + 1 :]).max() > 1e-3


# Every flavour with and without cross-attention is covered block by block in
# test_layers_decoder_block.py; here the per-block caches of a two-block stack.
@pytest.mark.parametrize(
    "flavor,normalize_first,cross",
    [setup + (True,) for setup in SETUPS] + [("paper", True, False)],
)
def test_cached_steps_equal_the_full_pass(flavor, normalize_first, cross):
    x = _inputs()
    memory = _memory(zero_rows=flavor == "reference_2017")
    memory_keep = None if flavor == "reference_2017" else _keep(S, 2)
    decoder = _decoder(flavor, normalize_first, cross=cross)
    if cross:
        full = decoder(x, memory, memory_padding_mask=memory_keep)
        cache = decoder.init_cache(
            B, T, memory, memory_padding_mask=memory_keep
        )
    else:
        full = decoder(x)
        cache = decoder.init_cache(B, T)
    assert isinstance(cache, list) and len(cache) == N
    for t in range(T):
        out, cache = decoder(
            x[:, t : t + 1], cache=cache, cache_index=tf.constant(t)
        )
        bounds.assert_close(
            np.asarray(out)[:, 0], np.asarray(full)[:, t], terms=_terms(cross)
        )


def test_cached_steps_under_tf_function_trace_once():
    x, memory = _inputs(), _memory()
    decoder = _decoder("reference_2019")
    full = np.asarray(decoder(x, memory))
    step = tf.function(
        lambda token, cache, index: decoder(
            token, cache=cache, cache_index=index
        )
    )
    cache = decoder.init_cache(B, T, memory)
    for t in range(T):
        out, cache = step(x[:, t : t + 1], cache, tf.constant(t))
        bounds.assert_close(np.asarray(out)[:, 0], full[:, t], terms=_terms())
    assert step.experimental_get_tracing_count() == 1


@pytest.mark.slow
def test_gpt_style_decoder_trains():
    """Token embedding + positions + Decoder(use_cross_attention=False) +
    Dense, trained on next-token prediction (a causal language model)."""
    vocab, length = 12, 6
    keras.utils.set_random_seed(0)
    ids = keras.Input((length,), dtype="int32")
    x = tfattn.TokenEmbedding(vocab, 16)(ids)
    x = tfattn.PositionalEncoding(max_length=length)(x)
    x = tfattn.Decoder(
        num_layers=1,
        num_heads=H,
        ffn_units=32,
        dropout_rate=0.0,
        use_cross_attention=False,
    )(x)
    model = keras.Model(ids, keras.layers.Dense(vocab)(x))
    model.compile(
        keras.optimizers.Adam(1e-2),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    # Sequences start, step: the next token is predictable from the past.
    rng = np.random.default_rng(0)
    start, step = rng.integers(1, vocab, (32, 1)), rng.integers(1, 3, (32, 1))
    seq = 1 + (start + step * np.arange(length + 1)) % (vocab - 1)
    losses = [
        float(model.train_on_batch(seq[:, :-1], seq[:, 1:])) for _ in range(12)
    ]
    assert losses[-1] < 0.75 * losses[0], losses


# --------------------------------------------------------------------------
# Errors.


def test_memory_missing_with_cross_attention():
    decoder = _decoder("reference_2019")
    with pytest.raises(ValueError, match=r"`memory`.*Received: memory=None"):
        decoder(_inputs())
    with pytest.raises(ValueError, match=r"`memory`.*Received: memory=None"):
        decoder.init_cache(B, T)


def test_memory_unexpected_without_cross_attention():
    decoder = _decoder("paper", cross=False)
    with pytest.raises(
        ValueError,
        match=r"`memory`.*expected None.*"
        r"memory='<tensor of shape \(2, 6, 8\)>'",
    ):
        decoder(_inputs(), _memory())


def test_cache_of_wrong_length():
    decoder = _decoder("paper", cross=False)
    cache = decoder.init_cache(B, T)[:1]
    with pytest.raises(
        ValueError,
        match=r"`cache`.*list of 2 per-block caches.*"
        r"cache='<1 entries>'",
    ):
        decoder(_inputs(length=1), cache=cache, cache_index=tf.constant(0))
    with pytest.raises(ValueError, match=r"`cache`.*list of 2 per-block.*dict"):
        decoder(_inputs(length=1), cache=cache[0], cache_index=tf.constant(0))


def test_cache_too_short_for_the_position():
    decoder = _decoder("reference_2019", cross=False)
    cache = decoder.init_cache(B, 3)
    with pytest.raises(ValueError, match=r"`cache_index`.*<= 3.*cache_index=3"):
        decoder(_inputs(length=1), cache=cache, cache_index=tf.constant(3))


def test_cache_from_another_model_size():
    decoder = _decoder("paper", cross=False)
    cache = _decoder("paper", cross=False, width=2 * C).init_cache(B, T)
    with pytest.raises(
        ValueError,
        match=r"`cache`.*another model size.*"
        r"key shape \(2, 2, 5, 8\)",
    ):
        decoder(_inputs(length=1), cache=cache, cache_index=tf.constant(0))


def test_cache_without_cache_index():
    decoder = _decoder("paper", cross=False)
    with pytest.raises(ValueError, match=r"`cache_index`.*cache_index=None"):
        decoder(_inputs(length=1), cache=decoder.init_cache(B, T))


@pytest.mark.parametrize(
    "kwargs,pattern",
    [
        (dict(num_layers=0), r"Decoder.*`num_layers`.*num_layers=0"),
        (dict(use_cross_attention="no"), r"`use_cross_attention`.*='no'"),
        (
            dict(flavor="reference_2019", normalize_first=True),
            r"Decoder.*`normalize_first`.*normalize_first=True",
        ),
        (dict(attention_dropout_rate=2.0), r"`attention_dropout_rate`.*=2.0"),
    ],
)
def test_bad_constructor_arguments(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        tfattn.Decoder(**kwargs)
