"""The shared layer-test harness: every layer test calls `run_layer_test`.

It checks, for one layer configuration:
- `get_config` -> `from_config` -> `get_config` is the same JSON;
- `keras.saving.serialize_keras_object` -> JSON -> deserialize rebuilds the
  same class with the same config;
- a symbolic call on `keras.Input`s and an eager call agree on the output
  shape, and the trainable-weight count is as expected;
- one `fit` step runs and changes the trainable weights;
- with `run_saving=True`, a model holding the layer saves to `.keras` and
  reloads with identical outputs.

Saving costs a `.keras` write, a reload and two more traced predictions, so
it is opt-in: each layer class has one dedicated saving test that calls
`assert_keras_file_round_trip` on every configuration of its layer-contract
tests (as keras-hub keeps one saving test per layer).
"""

import json
import os
import tempfile

import keras
import numpy as np
import pytest

from tests import bounds

# The block and model configurations every layer test covers: (flavor,
# normalize_first). The contract tests run the first always, the rest with
# the slow tests.
SETUPS = [
    ("paper", False),
    ("paper", True),
    ("reference_2017", False),
    ("reference_2019", False),
]
CONTRACT_SETUPS = [SETUPS[0]] + [
    pytest.param(*setup, marks=pytest.mark.slow) for setup in SETUPS[1:]
]


def _as_list(x):
    return list(x) if isinstance(x, (list, tuple)) else [x]


def assert_config_round_trip(layer):
    config = layer.get_config()
    clone = layer.__class__.from_config(config)
    assert json.dumps(clone.get_config(), sort_keys=True) == json.dumps(
        config, sort_keys=True
    )
    serialized = json.loads(
        json.dumps(keras.saving.serialize_keras_object(layer))
    )
    revived = keras.saving.deserialize_keras_object(serialized)
    assert type(revived) is type(layer)
    assert json.dumps(revived.get_config(), sort_keys=True) == json.dumps(
        config, sort_keys=True
    )


def run_layer_test(
    layer_cls,
    init_kwargs,
    input_data,
    expected_output_shape,
    expected_num_trainable_weights=None,
    call_kwargs=None,
    run_fit=True,
    run_saving=False,
):
    """Runs the serialization, call, training and saving checks on a layer.

    Args:
        layer_cls: the layer class.
        init_kwargs: dict of constructor arguments.
        input_data: one array or a list of arrays, passed positionally.
        expected_output_shape: tuple, the eager output's shape.
        expected_num_trainable_weights: int or None.
        call_kwargs: dict of extra (non-tensor) call arguments.
        run_fit: bool. Run one `fit` step on an MSE loss.
        run_saving: bool. Save the (fitted) model to `.keras`, reload it and
            compare the predictions.

    Returns:
        The eager output of a fresh layer.
    """
    call_kwargs = call_kwargs or {}
    inputs = [np.asarray(x) for x in _as_list(input_data)]

    layer = layer_cls(**init_kwargs)
    assert_config_round_trip(layer)

    eager = layer(*inputs, **call_kwargs)
    assert tuple(eager.shape) == tuple(expected_output_shape), eager.shape
    if expected_num_trainable_weights is not None:
        assert len(layer.trainable_weights) == expected_num_trainable_weights
    assert_config_round_trip(layer)

    symbolic_inputs = [
        keras.Input(batch_shape=(None,) + x.shape[1:], dtype=str(x.dtype))
        for x in inputs
    ]
    model_layer = layer_cls(**init_kwargs)
    symbolic = model_layer(*symbolic_inputs, **call_kwargs)
    assert tuple(symbolic.shape[1:]) == tuple(expected_output_shape[1:])
    model = keras.Model(symbolic_inputs, symbolic)
    before = model.predict(inputs, verbose=0)
    assert before.shape == tuple(expected_output_shape)

    if run_fit and model.trainable_weights:
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
        start = [w.numpy().copy() for w in model.trainable_weights]
        model.fit(
            inputs,
            np.ones_like(before),
            batch_size=len(before),
            epochs=1,
            verbose=0,
        )
        moved = [
            not np.array_equal(a, w.numpy())
            for a, w in zip(start, model.trainable_weights)
        ]
        assert any(moved), "one fit step changed no trainable weight"
        if run_saving:
            before = model.predict(inputs, verbose=0)

    if run_saving:
        reloaded = _save_and_reload(model)
        after = reloaded.predict(inputs, verbose=0)
        # The same weights through the same kernels: bit for bit.
        np.testing.assert_array_equal(after, before)
    return eager


def _save_and_reload(model):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.keras")
        model.save(path)
        return keras.saving.load_model(path)


def assert_keras_file_round_trip(
    layer_cls, init_kwargs, input_data, call_kwargs=None, seed=1
):
    """A model holding the layer saves to `.keras` and reloads with
    identical outputs.

    The float weights are first set to random values, so a
    reload that re-initialised them (from the same seeded initializers)
    instead of reading them from the file would give other outputs. Both
    models run eagerly in inference mode.
    """
    call_kwargs = call_kwargs or {}
    inputs = [np.asarray(x) for x in _as_list(input_data)]
    symbolic_inputs = [
        keras.Input(batch_shape=(None,) + x.shape[1:], dtype=str(x.dtype))
        for x in inputs
    ]
    layer = layer_cls(**init_kwargs)
    model = keras.Model(symbolic_inputs, layer(*symbolic_inputs, **call_kwargs))
    rng = np.random.default_rng(seed)
    for w in model.weights:
        if "float" in str(w.dtype):  # not a dropout seed generator's state
            w.assign(0.5 * rng.normal(size=w.shape).astype(str(w.dtype)))
    before = keras.ops.convert_to_numpy(model(inputs, training=False))
    reloaded = _save_and_reload(model)
    assert type(reloaded.layers[-1]) is layer_cls
    assert len(reloaded.weights) == len(model.weights)
    for saved, loaded in zip(model.weights, reloaded.weights):
        np.testing.assert_array_equal(loaded.numpy(), saved.numpy())
    after = keras.ops.convert_to_numpy(reloaded(inputs, training=False))
    # The same weights through the same kernels: bit for bit.
    np.testing.assert_array_equal(after, before)


# --------------------------------------------------------------------------
# Weights for numerical comparisons against the NumPy oracle.


def randomize_weights(layer, seed=1):
    """Non-trivial weights everywhere (biases and layer norms included)."""
    rng = np.random.default_rng(seed)
    for w in layer.weights:
        w.assign(0.5 * rng.normal(size=w.shape).astype("float32"))


def dense_params(layer):
    """(kernel, bias) of a Dense layer as NumPy arrays."""
    return layer.kernel.numpy(), layer.bias.numpy()


def norm_params(layer):
    """(gamma, beta) of a LayerNormalization as NumPy arrays."""
    return layer.gamma.numpy(), layer.beta.numpy()


def ffn_numpy(x, feed_forward):
    """A `FeedForward` layer's ReLU network in NumPy, from its weights."""
    (w1, b1), (w2, b2) = (
        dense_params(feed_forward.inner_dense),
        dense_params(feed_forward.outer_dense),
    )
    return np.maximum(x @ w1 + b1, 0.0) @ w2 + b2


def attention_params(attention):
    """A MultiHeadAttention's weights in `tests/reference_numpy`'s names."""
    params = {}
    for key, dense in (
        ("q", attention.query_dense),
        ("k", attention.key_dense),
        ("v", attention.value_dense),
    ):
        params["w" + key], params["b" + key] = dense_params(dense)
    if attention.flavor == "paper":
        params["wo"], params["bo"] = dense_params(attention.output_dense)
    else:
        params["gamma"], params["beta"] = norm_params(attention.layer_norm)
    return params


def random_keras_attention(query, value, rng, scale=0.3, **kwargs):
    """A `keras.layers.MultiHeadAttention(**kwargs)` built on `query` and
    `value`, its weights drawn from `rng` (normal, times `scale`)."""
    theirs = keras.layers.MultiHeadAttention(**kwargs)
    theirs(query, value)
    for w in theirs.weights:
        w.assign(rng.normal(size=w.shape).astype("float32") * scale)
    return theirs


def attention_terms(query, value, units, key_length):
    """`bounds.assert_close` terms of an attention output: the query or key
    projection (C_q or C_v terms, the wider), the scores (`units`, the sum
    of all heads' widths at most), the softmax and the weighted sum over
    the `key_length` keys, and the output projection (`units`)."""
    width = max(np.shape(query)[-1], np.shape(value)[-1])
    return int(width + 2 * units + 2 * key_length)


def logit_scale(layer, queries, keys):
    """The scale of a `MultiHeadAttention`'s weights for `tests/bounds.py`
    (a softmax probability moves by at most its logits' error): a bound on
    its largest logit |q_h·k_h| / sqrt(d), max ||q_h|| · max ||k_h|| /
    sqrt(d) (Cauchy-Schwarz) from the layer's own projections, inputs of
    any rank, and at least 1."""
    heads = layer.num_heads
    norms = []
    for dense, x in ((layer.query_dense, queries), (layer.key_dense, keys)):
        projected = np.asarray(dense(x), np.float64)
        per_head = projected.reshape(projected.shape[:-1] + (heads, -1))
        norms.append(np.sqrt((per_head**2).sum(-1)).max())
    width = layer.units // heads
    return max(1.0, float(norms[0] * norms[1] / np.sqrt(width)))


def assert_same_attention(theirs, ours, query, value, **call):
    """Two attention layers give the same outputs and scores for one call,
    to `tests/bounds.py`'s bound (terms: `attention_terms`; the scores'
    scale: `logit_scale`); returns tfattn's (outputs, scores) as
    arrays."""
    want, want_scores = theirs(
        query, value, return_attention_scores=True, **call
    )
    got, scores = ours(query, value, return_attention_scores=True, **call)
    assert scores.shape == want_scores.shape
    axes = getattr(ours, "attention_axes", None)
    key_axes = len(axes) if axes else np.ndim(value) - 2
    keys = int(np.prod(np.shape(scores)[-key_axes:]))
    terms = attention_terms(query, value, ours.units, keys)
    bounds.assert_close(got, want, terms=terms)
    bounds.assert_close(scores, want_scores, terms=terms,
                        scale=logit_scale(ours, query, value))
    return np.asarray(got), np.asarray(scores)


def load_keras_attention_weights(ours, theirs):
    """tfattn's paper projections from a Keras MultiHeadAttention's
    EinsumDense weights, written from Keras's layout: kernels (C, H, d) ->
    (C, H·d), biases (H, d) -> (H·d), the output kernel (H, d_v, O) ->
    (H·d_v, O); the gate's as the value's."""
    pairs = [
        (ours.query_dense, theirs._query_dense),
        (ours.key_dense, theirs._key_dense),
        (ours.value_dense, theirs._value_dense),
        (ours.output_dense, theirs._output_dense),
    ]
    if ours.use_gate:
        pairs.append((ours.gate_dense, theirs._gate_dense))
    for mine, keras_part in pairs:
        mine.kernel.assign(
            np.reshape(keras_part.kernel.numpy(), mine.kernel.shape)
        )
        if mine.bias is not None:
            mine.bias.assign(np.reshape(keras_part.bias.numpy(), [-1]))


def copy_to_keras_attention(twin, attention):
    """Sets a built `keras.layers.MultiHeadAttention` (or keras-hub's) to a
    paper-flavour tfattn attention's weights: (C, H·d) kernels become
    (C, H, d), the output kernel (H·d, C) becomes (H, d, C)."""
    h = attention.num_heads
    d = attention.units // h
    weights = []
    for dense in (
        attention.query_dense,
        attention.key_dense,
        attention.value_dense,
    ):
        kernel, bias = dense_params(dense)
        weights += [kernel.reshape(-1, h, d), bias.reshape(h, d)]
    kernel, bias = dense_params(attention.output_dense)
    twin.set_weights(weights + [kernel.reshape(h, d, -1), bias])


def uneven_translation_batches(count=1, rows=8, seed=0):
    """`count` (inputs, labels) batches of `rows` rows for training steps.

    Rows hold 1-9 target tokens (ids 4-39, zero-padded to 9) so that two
    halves of a batch hold different token counts, as replicas must handle;
    sources (length 7) start with id 5. Returns numpy arrays of shape
    [count, rows, ...]: `{"source", "target_in"}`, labels.
    """
    rng = np.random.default_rng(seed)
    labels = np.zeros([count, rows, 9], np.int32)
    for batch in range(count):
        for row in range(rows):
            n = int(rng.integers(1, 10))
            labels[batch, row, :n] = rng.integers(4, 40, n)
    source = np.where(labels > 0, labels + 1, 0)[..., :7]
    source[..., 0] = 5
    return {"source": source, "target_in": labels}, labels

