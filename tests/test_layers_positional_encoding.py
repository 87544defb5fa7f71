"""Tests of PositionalEncoding (docs/reference.md §1.3, §1.7, §2.3, §5).

Tables are compared against tests/reference_numpy.py and the spec's golden
numbers, never against the layer's own table functions.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests import bounds
from tests import reference_numpy as ref
from tests.harness import run_layer_test
from tests.harness import assert_keras_file_round_trip
from tfattn.layers.positional_encoding import PositionalEncoding
from tfattn.layers.token_embedding import TokenEmbedding

B, T, C, L = 2, 5, 8, 10
KINDS = ["sinusoid", "sinusoid_2017", "learned"]
MODES = [None, "reference_2019", "reference_2017"]
# x + table: the table's rounding to float32 and the sum with x.
PE_TERMS = 2


def _inputs(seed=0, length=T):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(B, length, C)).astype("float32")
    x[0, -2:] = 0.0  # pad rows, as zero_pad embeddings give
    return x


def _assert_sample_std(values, std):
    """A statistical bound, not a rounding one: the sample std of n draws
    has a relative standard error of sqrt((kurtosis - 1) / (4 n)); allows
    5 of them (the kurtosis is the sample's own)."""
    kurtosis = np.mean(values**4) / np.mean(values**2) ** 2
    error = 5 * np.sqrt((kurtosis - 1) / (4 * values.size))
    assert abs(values.std() - std) <= error * std, (values.std(), std)


def _table(layer):
    """The sinusoid table of `layer`'s kind, from the reference oracle."""
    if layer.kind == "learned":
        return layer.embeddings.numpy()
    if layer.kind == "sinusoid":
        return ref.sinusoid_2019(layer.max_length, C)
    return ref.sinusoid_2017(layer.max_length, C)


# --------------------------------------------------------------------------
# Layer contract.


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("padding_mode", MODES)
def test_layer_contract(kind, padding_mode):
    run_layer_test(
        PositionalEncoding,
        dict(kind=kind, max_length=L, padding_mode=padding_mode),
        _inputs(),
        expected_output_shape=(B, T, C),
        expected_num_trainable_weights=1 if kind == "learned" else 0,
    )


@pytest.mark.parametrize("kind", KINDS)
def test_layer_contract_with_start_index(kind):
    run_layer_test(
        PositionalEncoding,
        dict(kind=kind, max_length=L),
        _inputs(),
        expected_output_shape=(B, T, C),
        call_kwargs=dict(start_index=L - T),
    )


@pytest.mark.slow
def test_keras_file_round_trip():
    """The layer contract's `.keras` save and reload, once per configuration
    of the contract tests above (run_layer_test skips it)."""
    for kind in KINDS:
        for padding_mode in MODES:
            assert_keras_file_round_trip(
                PositionalEncoding,
                dict(kind=kind, max_length=L, padding_mode=padding_mode),
                _inputs(),
            )
        assert_keras_file_round_trip(
            PositionalEncoding,
            dict(kind=kind, max_length=L),
            _inputs(),
            call_kwargs=dict(start_index=L - T),
        )


@pytest.mark.parametrize("kind", ["sinusoid", "sinusoid_2017"])
def test_sinusoid_table_is_a_constant_not_a_weight(kind):
    layer = PositionalEncoding(kind=kind, max_length=512)
    layer(_inputs())
    assert layer.weights == []
    assert layer.non_trainable_weights == []


# --------------------------------------------------------------------------
# Golden values (spec §5) and the reference tables.


def test_sinusoid_matches_reference_2019_and_golden_row():
    layer = PositionalEncoding(max_length=L)
    pe = np.asarray(layer(np.zeros((1, L, C), "float32")))[0]
    bounds.assert_close(pe, ref.sinusoid_2019(L, C), terms=PE_TERMS)
    golden = ["0.841471", "0.540302", "0.099833", "0.995004", "0.01",
              "0.99995", "0.001", "1.0"]  # as printed in docs/reference.md
    bounds.assert_printed(pe[1], golden)
    np.testing.assert_array_equal(pe[0], [0, 1] * (C // 2))


def test_sinusoid_2017_matches_reference_and_golden_row():
    layer = PositionalEncoding(kind="sinusoid_2017", max_length=L)
    pe = np.asarray(layer(np.zeros((1, L, C), "float32")))[0]
    bounds.assert_close(pe, ref.sinusoid_2017(L, C), terms=PE_TERMS)
    golden = ["0.841471", "0.995004", "0.01", "1.0", "0.0001", "1.0", "1e-6",
              "1.0"]  # as printed in docs/reference.md
    bounds.assert_printed(pe[1], golden)
    # The 2017 formula really differs from the paper's.
    assert np.abs(pe - ref.sinusoid_2019(L, C)).max() > 0.1


@pytest.mark.parametrize("kind", ["sinusoid", "sinusoid_2017"])
def test_adds_the_table_to_the_inputs(kind):
    x = _inputs()
    want_table = (
        ref.sinusoid_2019(L, C)
        if kind == "sinusoid"
        else ref.sinusoid_2017(L, C)
    )
    out = PositionalEncoding(kind=kind, max_length=L)(x)
    bounds.assert_close(out, x + want_table[:T], terms=PE_TERMS)


def test_learned_adds_the_trainable_glorot_table():
    layer = PositionalEncoding(kind="learned", max_length=300)
    x = _inputs()
    out = np.asarray(layer(x))
    table = layer.embeddings.numpy()
    assert table.shape == (300, C)
    assert layer.embeddings.trainable
    bounds.assert_close(out, x + table[:T], terms=1)  # the sum with x
    limit = np.sqrt(6.0 / (300 + C))
    assert np.abs(table).max() <= limit
    _assert_sample_std(table, limit / np.sqrt(3))


def test_learned_table_draws_from_embeddings_initializer():
    # BERT's position table: truncated N(0, 0.02), cut at 2 std.
    layer = PositionalEncoding(
        kind="learned", max_length=300,
        embeddings_initializer=keras.initializers.TruncatedNormal(
            stddev=0.02))
    layer(_inputs())
    table = layer.embeddings.numpy()
    # Truncated at 2 std, then one float32 rounding of std * z.
    assert np.abs(table).max() <= 0.04 * (1 + bounds.EPSILON["float32"])
    _assert_sample_std(table, 0.02 * 0.8796)
    rebuilt = PositionalEncoding.from_config(layer.get_config())
    assert rebuilt.embeddings_initializer.stddev == 0.02


def test_learned_table_gets_gradient_only_at_used_positions():
    layer = PositionalEncoding(kind="learned", max_length=L)
    x = _inputs()
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(layer(x, start_index=2))
    grad = np.asarray(
        tf.convert_to_tensor(tape.gradient(loss, layer.embeddings.value))
    )
    np.testing.assert_array_equal(
        grad[2 : 2 + T], np.full((T, C), B, "float32")
    )
    assert np.all(grad[:2] == 0) and np.all(grad[2 + T :] == 0)


# --------------------------------------------------------------------------
# Padding modes.


@pytest.mark.parametrize("kind", KINDS)
def test_padding_mode_reference_2019_zeroes_pe_where_input_is_zero(kind):
    x = _inputs()
    x[1, 1, 3] = 0.0  # one real token with a single exact 0.0 element
    layer = PositionalEncoding(
        kind=kind, max_length=L, padding_mode="reference_2019"
    )
    out = np.asarray(layer(x))
    table = _table(layer)
    bounds.assert_close(
        out, x + np.where(x == 0, 0, table[:T]), terms=PE_TERMS
    )
    assert np.all(out[0, -2:] == 0)  # pad rows stay zero
    assert out[1, 1, 3] == 0  # the reference's element-wise quirk


@pytest.mark.parametrize("kind", KINDS)
def test_padding_mode_reference_2017_multiplies_by_row_sign(kind):
    x = _inputs()
    x[1, 2] = np.array([1, -1] * (C // 2), "float32")  # sums to 0, not padding
    layer = PositionalEncoding(
        kind=kind, max_length=L, padding_mode="reference_2017"
    )
    out = np.asarray(layer(x))
    table = _table(layer)
    m = np.sign(np.sum(np.abs(x), axis=-1, keepdims=True))  # G1b: abs first
    # x + table, then the product by the row's sign.
    bounds.assert_close(out, (x + table[:T]) * m, terms=PE_TERMS + 1)
    assert np.all(out[0, -2:] == 0)
    assert np.abs(out[1, 2]).max() > 0


def test_no_padding_mode_encodes_pad_rows_too():
    out = np.asarray(PositionalEncoding(max_length=L)(_inputs()))
    bounds.assert_close(
        out[0, -2:], ref.sinusoid_2019(L, C)[T - 2 : T], terms=PE_TERMS
    )


# --------------------------------------------------------------------------
# start_index: cached decoding one position at a time.


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("padding_mode", MODES)
def test_start_index_equals_slicing_the_full_result(kind, padding_mode):
    layer = PositionalEncoding(
        kind=kind, max_length=L, padding_mode=padding_mode
    )
    x = _inputs(length=L)
    full = np.asarray(layer(x))
    step = tf.function(lambda a, s: layer(a, start_index=s), jit_compile=True)
    for t in range(L):
        piece = x[:, t : t + 1]
        bounds.assert_close(
            layer(piece, start_index=t), full[:, t : t + 1], terms=PE_TERMS
        )
        bounds.assert_close(
            layer(piece, start_index=tf.constant(t)),
            full[:, t : t + 1],
            terms=PE_TERMS,
        )
        bounds.assert_close(
            step(piece, tf.constant(t, tf.int64)), full[:, t : t + 1],
            terms=PE_TERMS,
        )
    bounds.assert_close(
        layer(x[:, 3:7], start_index=3), full[:, 3:7], terms=PE_TERMS
    )


def test_tensor_start_index_keeps_static_shapes():
    layer = PositionalEncoding(max_length=L)

    @tf.function
    def step(x, start):
        out = layer(x, start_index=start)
        assert tuple(out.shape) == (B, 1, C)
        return out

    step(_inputs(length=1), tf.constant(4))


def test_dynamic_length_in_graph_mode():
    layer = PositionalEncoding(max_length=L)
    fn = tf.function(
        lambda x: layer(x), input_signature=[tf.TensorSpec((None, None, C))]
    )
    x = _inputs(length=7)
    bounds.assert_close(
        fn(x), x + ref.sinusoid_2019(L, C)[:7], terms=PE_TERMS
    )


def test_keras_mask_passes_through():
    ids = np.array([[3, 4, 0], [5, 0, 0]])
    embed = TokenEmbedding(7, C, mask_zero=True)
    out = PositionalEncoding(max_length=L, padding_mode="reference_2019")(
        embed(ids)
    )
    np.testing.assert_array_equal(out._keras_mask, ids != 0)
    np.testing.assert_array_equal(np.asarray(out)[ids == 0], 0.0)


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision(policy):
    layer = PositionalEncoding(max_length=L, dtype=policy)
    x = _inputs()
    out = layer(x)
    compute = policy.split("_")[1]
    assert out.dtype == compute
    table = ref.sinusoid_2019(L, C)[:T]
    # x's and the table's casts to the compute dtype, their sum; each
    # element by the magnitude of its two terms.
    bounds.assert_close(
        np.asarray(out, "float32"), x + table, terms=3,
        scale=np.abs(x) + np.abs(table), dtype=compute,
    )


# --------------------------------------------------------------------------
# Bad input.


@pytest.mark.parametrize(
    "kwargs, pattern",
    [
        (
            dict(kind="sinusoidal"),
            r"PositionalEncoding.*argument "
            r"`kind`.*'learned'.*kind='sinusoidal'",
        ),
        (
            dict(max_length=0),
            r"argument `max_length`.*positive integer.*max_length=0",
        ),
        (dict(max_length=10.0), r"argument `max_length`.*max_length=10.0"),
        (
            dict(embeddings_initializer="nope"),
            r"argument `embeddings_initializer`.*embeddings_initializer='nope'",
        ),
        (
            dict(padding_mode="zeros"),
            r"argument `padding_mode`.*'reference_2019'.*padding_mode='zeros'",
        ),
    ],
)
def test_constructor_rejects_bad_arguments(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        PositionalEncoding(**kwargs)


def test_too_long_static_sequence():
    layer = PositionalEncoding(max_length=L)
    with pytest.raises(
        ValueError,
        match=r"argument `x`.*the positional table holds max_length=10 "
        r"positions; "
        r"received a sequence of length 12\..*larger `max_length`.*"
        r"PositionalEncoding\(max_length=>=12\).*shape \(2, 12, 8\)",
    ):
        layer(_inputs(length=12))


def test_too_long_with_static_start_index():
    layer = PositionalEncoding(kind="learned", max_length=L)
    with pytest.raises(
        ValueError,
        match=r"max_length=10 positions; received a sequence of length 5 "
        r"starting at start_index=6.*PositionalEncoding\(max_length=>=11\)",
    ):
        layer(_inputs(), start_index=6)
    layer(_inputs(), start_index=5)  # exactly fits


def test_too_long_static_length_with_tensor_start_index():
    layer = PositionalEncoding(max_length=L)
    with pytest.raises(
        ValueError,
        match=r"max_length=10 positions; received a sequence of length 12 "
        r"starting at start_index",
    ):
        layer(_inputs(length=12), start_index=tf.constant(0))


def test_too_long_with_tensor_start_index_fails_the_assertion():
    layer = PositionalEncoding(max_length=L)
    with pytest.raises(
        tf.errors.InvalidArgumentError,
        match=r"(?s)max_length=10 positions.*larger `max_length`.*"
        r"start_index:.*6.*positions needed \(start_index \+ length\):.*11",
    ):
        layer(_inputs(), start_index=tf.constant(6))


def test_too_long_dynamic_length_fails_the_assertion():
    layer = PositionalEncoding(max_length=L)
    fn = tf.function(
        lambda x: layer(x), input_signature=[tf.TensorSpec((None, None, C))]
    )
    fn(_inputs(length=L))  # fits
    with pytest.raises(
        tf.errors.InvalidArgumentError,
        match=r"(?s)the positional table holds max_length=10 positions.*"
        r"PositionalEncoding\(max_length=>=start_index \+ length\).*"
        r"sequence length:.*12",
    ):
        fn(_inputs(length=12))


@pytest.mark.parametrize(
    "start_index, pattern",
    [
        (-1, r"argument `start_index`.*integer >= 0.*start_index=-1"),
        (
            1.0,
            r"argument `start_index`.*scalar integer tensor.*start_index=1.0",
        ),
        (True, r"argument `start_index`.*start_index=True"),
        (None, r"argument `start_index`.*start_index=None"),
        (
            tf.constant([[1, 2]]),
            r"argument `start_index`.*dtype int32 and shape \(1, 2\)",
        ),
        (
            tf.constant(1.0),
            r"argument `start_index`.*dtype float32 and shape \(\)",
        ),
    ],
)
def test_rejects_bad_start_index(start_index, pattern):
    with pytest.raises(ValueError, match=pattern):
        PositionalEncoding(max_length=L)(_inputs(), start_index=start_index)


@pytest.mark.parametrize("kind", ["sinusoid", "learned"])
def test_one_start_per_row_equals_each_row_at_its_own_start(kind):
    layer = PositionalEncoding(kind=kind, max_length=L)
    x = _inputs()
    starts = np.arange(B, dtype="int32") * 2 + 1
    got = np.asarray(layer(x, start_index=tf.constant(starts)))
    for row, start in enumerate(starts):
        want = np.asarray(layer(x[row:row + 1], start_index=int(start)))
        bounds.assert_close(got[row:row + 1], want, terms=PE_TERMS)


def test_negative_tensor_start_index_fails_the_assertion():
    with pytest.raises(
        tf.errors.InvalidArgumentError, match=r"`start_index`.*>= 0"
    ):
        PositionalEncoding(max_length=L)(_inputs(), start_index=tf.constant(-1))


def test_rejects_bad_inputs():
    layer = PositionalEncoding(max_length=L)
    with pytest.raises(
        ValueError, match=r"argument `x`.*rank-3.*\[B, T, C\].*shape \(2, 5\)"
    ):
        layer(np.zeros((B, T), "float32"))
    with pytest.raises(
        ValueError, match=r"argument `x`.*known width C.*\(None, None, None\)"
    ):
        PositionalEncoding().build((None, None, None))
    layer(_inputs())
    with pytest.raises(
        ValueError, match=r"argument `x`.*width C=8.*shape \(2, 5, 4\)"
    ):
        layer(np.zeros((B, T, 4), "float32"))


def test_save_load_sinusoid_in_a_model_with_symbolic_length(tmp_path):
    inp = keras.Input((None, C))
    model = keras.Model(
        inp,
        PositionalEncoding(max_length=L, padding_mode="reference_2019")(inp),
    )
    x = _inputs(length=7)
    path = str(tmp_path / "pe.keras")
    model.save(path)
    reloaded = keras.saving.load_model(path)
    # The same table and ops on the same inputs: bit for bit.
    np.testing.assert_array_equal(reloaded(x), model(x))
