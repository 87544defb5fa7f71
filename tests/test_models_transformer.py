"""Tests of tfattn.Transformer: the (source, target_in) -> logits model.

References: docs/reference.md §1.7 / §2.9 / §5 (parameter counts computed here
from the spec's shapes), end-to-end NumPy compositions of
tests/reference_numpy.py for both reference flavours, and invariants
(caching, causality, padding, greedy == beam 1 == naive uncached greedy).
"""

import math
import os
import tempfile

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfattn
from tests import bounds
from tests import reference_numpy as ref
from tfattn.decoding import samplers
from tfattn.models.transformer import BOS_ID
from tfattn.models.transformer import EOS_ID
from tests.harness import SETUPS
from tests.harness import dense_params as _dense
from tests.harness import norm_params as _ln

# A one-token prefix gives keras' "softmax over an axis of size 1" warning.
pytestmark = pytest.mark.filterwarnings(
    "ignore:You are using a softmax over axis"
)

V, C, H, F, N, L = 13, 8, 2, 16, 2, 8
SOURCE = np.array([[4, 5, 6, 7, 0], [8, 9, 10, 11, 12]], "int32")
TARGET_IN = np.array([[BOS_ID, 5, 6, 9, 0], [BOS_ID, 4, 7, 7, 11]], "int32")
# Elementwise float operations of an embedding-stage value: sqrt(C), the
# row's product with it, the sinusoid's angle (a power and a product), its
# sine or cosine, and the sum.
EMBEDDING_OPS = 6
# Elementwise float operations of the GNMT length penalty and its use:
# 5 + n, / 6, ** alpha, then the score's division.
PENALTY_OPS = 4


def logit_terms(length, blocks=3 * N, final_norms=0, vocab_size=V):
    """`bounds.assert_close` terms of one logit or log-probability over at
    most `length` keys through `blocks` blocks (encoder and decoder
    blocks, each decoder's cross-attention a block of its own):
    `bounds.stack_terms` with the projection to the logits and their
    log-softmax, plus the final layer norms of `final_norms` pre-norm
    stacks (4·C each)."""
    return 4 * C * final_norms + bounds.stack_terms(
        blocks, C, F, length, vocab_size)


def _logit_scale(model, source, ids, alpha):
    """The scale of each row's generation score: the sum of the logits'
    magnitudes (the pad column aside) over its tokens' steps, from the
    full forward pass on [BOS] + ids, divided by its length penalty."""
    ids = np.asarray(ids)
    target_in = np.concatenate(
        [np.full((len(ids), 1), BOS_ID, "int32"), ids[:, :-1]], axis=1)
    logits = np.asarray(model((source, target_in)))
    magnitudes = np.abs(logits[..., 1:]).max(-1)
    real = ids != 0
    penalty = ((5.0 + real.sum(1)) / 6.0) ** alpha
    return (magnitudes * real).sum(1) / penalty


def _model(
    flavor="reference_2019",
    normalize_first=False,
    randomize=True,
    num_layers=N,
    num_units=C,
    **kwargs,
):
    kwargs.setdefault("dropout_rate", 0.0)
    model = tfattn.Transformer(
        V,
        num_layers=num_layers,
        num_units=num_units,
        num_heads=H,
        ffn_units=F,
        flavor=flavor,
        normalize_first=normalize_first,
        max_length=L,
        **kwargs,
    )
    model((SOURCE, TARGET_IN))
    if randomize:
        rng = np.random.default_rng(1)
        for w in model.weights:
            w.assign(0.4 * rng.normal(size=w.shape).astype("float32"))
    return model


@pytest.fixture(scope="module")
def models():
    """`_model` built once per module and configuration, for the tests
    that read a model and change nothing in it (its `generate` cache
    aside). Randomized weights come from a fixed NumPy seed: the same as a
    fresh `_model`."""
    built = {}

    def shared(flavor="reference_2019", normalize_first=False,
               randomize=True, num_layers=N):
        key = (flavor, normalize_first, randomize, num_layers)
        if key not in built:
            built[key] = _model(flavor, normalize_first, randomize,
                                num_layers)
        return built[key]

    return shared


def _np(x):
    return np.asarray(x)


# --------------------------------------------------------------------------
# Parameter counts (docs/reference.md §1.4, §1.5, §1.7, §2.5, §2.6, §2.9, §5).


def _attention_count(c, bias=True):
    return 3 * (c * c + c * bias) + 2 * c  # W_q, W_k, W_v (+ b) and LN


def _ff_ln_count(c, f):
    return (c * f + f) + (f * c + c) + 2 * c


@pytest.fixture(scope="module")
def reference_2019_defaults():
    model = tfattn.Transformer(32000, flavor="reference_2019")
    model.build(((1, 3), (1, 3)))
    return model


def test_spec_sublayer_counts_at_width_512(reference_2019_defaults):
    assert _attention_count(512) == 788_992
    assert _attention_count(512, bias=False) == 787_456
    assert _ff_ln_count(512, 2048) == 2_100_736
    enc = reference_2019_defaults.encoder.blocks[0]
    dec = reference_2019_defaults.decoder.blocks[5]
    for attention in (
        enc.self_attention,
        dec.self_attention,
        dec.cross_attention,
    ):
        assert attention.count_params() == 788_992
    for block in (enc, dec):
        assert (
            block.feed_forward.count_params()
            + block.feed_forward_layer_norm.count_params()
        ) == 2_100_736


def test_reference_2019_default_count(reference_2019_defaults):
    # §2.9: one shared [32000, 512] table, 6 + 6 blocks, tied output.
    per_enc = _attention_count(512) + _ff_ln_count(512, 2048)
    per_dec = 2 * _attention_count(512) + _ff_ln_count(512, 2048)
    assert 32000 * 512 + 6 * per_enc + 6 * per_dec == 55_794_688
    assert reference_2019_defaults.count_params() == 55_794_688


def test_reference_2017_count_from_the_spec_shapes():
    # §1.7 with maxlen T=10: separate source/target tables, two learned
    # [T, C] positional tables, 2017 attention (with bias), FF + LN,
    # untied output Dense(V_t) with bias. Width and depth reduced.
    v_s, v_t, c, f, n, maxlen = 30, 40, 32, 64, 2, 10
    model = tfattn.Transformer(
        v_s,
        v_t,
        num_layers=n,
        num_units=c,
        num_heads=4,
        ffn_units=f,
        flavor="reference_2017",
        max_length=maxlen,
    )
    model.build(((1, 3), (1, 3)))
    want = (
        v_s * c
        + v_t * c
        + 2 * maxlen * c
        + n * (_attention_count(c) + _ff_ln_count(c, f))
        + n * (2 * _attention_count(c) + _ff_ln_count(c, f))
        + c * v_t
        + v_t
    )
    assert model.count_params() == want == 40_616


def test_paper_pre_norm_count(models):
    # The paper's attention has W^O; post/pre-norm add an LN per sublayer
    # and pre-norm a final LN per stack. Output tied to the shared table.
    model = models("paper", True, randomize=False)
    attention = 4 * (C * C + C)
    ff = (C * F + F) + (F * C + C)
    ln = 2 * C
    want = (
        V * C
        + N * (attention + ff + 2 * ln)
        + ln
        + N * (2 * attention + ff + 3 * ln)
        + ln
    )
    assert model.count_params() == want


# --------------------------------------------------------------------------
# Embeddings and the output projection.


def test_reference_2019_one_embedding_variable_used_three_times(models):
    model = models("reference_2019", num_layers=1)
    assert model.source_embedding is model.target_embedding
    assert model.output_dense is None
    tables = [
        w for w in model.weights if w.path.endswith("embedding/embeddings")
    ]
    assert len(tables) == 1
    table = tables[0]
    # Gradients reach the table from the source (ids 8..12 only there), the
    # target input (id 2 only there) and the tied output (ids 1, 3 nowhere).
    source = np.array([[8, 9, 10, 11, 12]], "int32")
    target_in = np.array([[BOS_ID, BOS_ID, BOS_ID]], "int32")
    with tf.GradientTape() as tape:
        logits = model((source, target_in))
        loss = tf.reduce_sum(
            logits
            * np.random.default_rng(0)
            .normal(size=logits.shape)
            .astype("float32")
        )
    grad = tf.convert_to_tensor(tape.gradient(loss, table.value))
    row_norms = np.abs(_np(grad)).sum(-1)
    assert row_norms[0] == 0.0  # the padding row: constant zeros everywhere
    assert np.all(row_norms[1:] > 0)
    # The pad id's logit is exactly 0 (§2.9: E row 0 is zero).
    assert np.all(_np(model((SOURCE, TARGET_IN)))[..., 0] == 0.0)


def test_reference_2017_separate_embeddings_and_untied_output_with_bias():
    model = tfattn.Transformer(
        V,
        V + 4,
        num_layers=1,
        num_units=C,
        num_heads=H,
        ffn_units=F,
        flavor="reference_2017",
        max_length=L,
    )
    model((SOURCE, TARGET_IN))
    assert model.source_embedding is not model.target_embedding
    assert tuple(model.source_embedding.embeddings.shape) == (V, C)
    assert tuple(model.target_embedding.embeddings.shape) == (V + 4, C)
    assert tuple(model.output_dense.kernel.shape) == (C, V + 4)
    assert tuple(model.output_dense.bias.shape) == (V + 4,)
    assert model.source_positions is not model.target_positions
    assert model.source_positions.kind == "learned"
    assert tuple(model.target_positions.embeddings.shape) == (L, C)
    assert _np(model((SOURCE, TARGET_IN))).shape == (2, 5, V + 4)


def test_reference_2019_embedding_stage_golden_values():
    # §2.2-2.3: E[ids]·sqrt(C) plus the sinusoid, zeroed where the
    # embedding is 0; golden PE row for E=8, pos=1 from §5.
    model = _model("reference_2019", randomize=False)
    model.source_embedding.embeddings.assign(np.ones((V, C), "float32"))
    ids = np.array([[5, 5, 0]], "int32")
    x = _np(model.source_positions(model.source_embedding(ids)))
    golden = ["0.841471", "0.540302", "0.099833", "0.995004", "0.01",
              "0.99995", "0.001", "1.0"]
    bounds.assert_close(
        x[0, 0], math.sqrt(C) + np.array([0, 1] * 4), terms=EMBEDDING_OPS
    )
    # The float32 values rounded at sqrt(C) + 1, before sqrt(C) left.
    bounds.assert_printed(
        x[0, 1].astype(np.float64) - math.sqrt(C),
        golden,
        terms=EMBEDDING_OPS,
        scale=math.sqrt(C) + 1,
        dtype="float32",
    )
    np.testing.assert_array_equal(x[0, 2], np.zeros(C))


# --------------------------------------------------------------------------
# End-to-end NumPy compositions of the reference models.


def _attention_params(attention):
    params = {}
    for key, dense in (
        ("q", attention.query_dense),
        ("k", attention.key_dense),
        ("v", attention.value_dense),
    ):
        params["w" + key], params["b" + key] = _dense(dense)
    params["gamma"], params["beta"] = _ln(attention.layer_norm)
    return params


def _block_params(block):
    (w1, b1), (w2, b2) = (
        _dense(block.feed_forward.inner_dense),
        _dense(block.feed_forward.outer_dense),
    )
    gamma, beta = _ln(block.feed_forward_layer_norm)
    params = {
        "self": _attention_params(block.self_attention),
        "ffn": dict(w1=w1, b1=b1, w2=w2, b2=b2, gamma=gamma, beta=beta),
    }
    if getattr(block, "cross_attention", None) is not None:
        params["cross"] = _attention_params(block.cross_attention)
    return params


def reference_params(model):
    """A reference-flavour model's weights in tests/reference_numpy's
    whole-model layout."""
    params = {
        "encoder": [_block_params(b) for b in model.encoder.blocks],
        "decoder": [_block_params(b) for b in model.decoder.blocks],
    }
    if model.flavor == "reference_2019":
        params["embeddings"] = model.source_embedding.embeddings.numpy()
        return params
    params.update(
        source_embeddings=model.source_embedding.embeddings.numpy(),
        target_embeddings=model.target_embedding.embeddings.numpy(),
        source_positions=model.source_positions.embeddings.numpy(),
        target_positions=model.target_positions.embeddings.numpy(),
    )
    params["output_kernel"], params["output_bias"] = _dense(model.output_dense)
    return params


def test_reference_2019_matches_numpy_model(models):
    model = models("reference_2019")
    want = ref.transformer_reference_2019(
        reference_params(model), SOURCE, TARGET_IN, H
    )
    bounds.assert_close(
        model((SOURCE, TARGET_IN)), want, terms=logit_terms(SOURCE.shape[1])
    )


def test_reference_2017_matches_numpy_model():
    model = tfattn.Transformer(
        V,
        V + 4,
        num_layers=N,
        num_units=C,
        num_heads=H,
        ffn_units=F,
        flavor="reference_2017",
        max_length=L,
        dropout_rate=0.0,
    )
    model((SOURCE, TARGET_IN))
    rng = np.random.default_rng(2)
    for w in model.weights:
        w.assign(0.4 * rng.normal(size=w.shape).astype("float32"))
    want = ref.transformer_reference_2017(
        reference_params(model), SOURCE, TARGET_IN, H
    )
    bounds.assert_close(
        model((SOURCE, TARGET_IN)),
        want,
        terms=logit_terms(SOURCE.shape[1], vocab_size=V + 4),
    )


@pytest.mark.parametrize("flavor", ["reference_2017", "reference_2019"])
def test_reference_dropout_only_after_the_embedding_and_on_attention(flavor):
    model = _model(
        flavor, dropout_rate=0.5, attention_dropout_rate=0.0, num_layers=1
    )
    for block in model.encoder.blocks + model.decoder.blocks:
        assert not hasattr(block, "feed_forward_dropout")
        assert not hasattr(block, "self_attention_dropout")
    inputs = (SOURCE, TARGET_IN)
    assert (
        np.abs(_np(model(inputs, training=True)) - _np(model(inputs))).max()
        > 1e-3
    )
    model.embedding_dropout.rate = 0.0  # the one dropout site left
    bounds.assert_close(
        model(inputs, training=True),
        model(inputs),
        terms=logit_terms(SOURCE.shape[1], blocks=3),
    )


def test_paper_has_residual_dropout():
    model = _model(
        "paper", dropout_rate=0.5, attention_dropout_rate=0.0, num_layers=1
    )
    model.embedding_dropout.rate = 0.0
    inputs = (SOURCE, TARGET_IN)
    assert (
        np.abs(_np(model(inputs, training=True)) - _np(model(inputs))).max()
        > 1e-3
    )


# --------------------------------------------------------------------------
# Invariants.


@pytest.mark.parametrize("flavor,normalize_first", SETUPS)
def test_cached_decode_step_equals_decode_on_the_prefix(
    models, flavor, normalize_first
):
    model = models(flavor, normalize_first)
    memory, keep = model.encode(SOURCE)
    cache = model.init_decode_cache(memory, keep, L)
    for t in range(TARGET_IN.shape[1]):
        step_logits, cache = model.decode_step(
            TARGET_IN[:, t], tf.constant(t), cache
        )
        prefix_logits = model.decode(TARGET_IN[:, : t + 1], memory, keep)[:, -1]
        # decode_step masks the pad id (column 0) so that searches skip it.
        # One memory: the decoder's self- and cross-attention blocks only.
        bounds.assert_close(
            _np(step_logits)[:, 1:],
            _np(prefix_logits)[:, 1:],
            terms=logit_terms(
                L, blocks=2 * N, final_norms=int(normalize_first)
            ),
        )
        assert np.all(_np(step_logits)[:, 0] <= -1e8)


def _naive_greedy(model, source, steps):
    """Uncached greedy decoding: the whole model on the prefix each step."""
    prefix = np.full((source.shape[0], 1), BOS_ID, "int32")
    finished = np.zeros(source.shape[0], bool)
    out = np.zeros((source.shape[0], steps), "int32")
    for t in range(steps):
        logits = np.array(model((source, prefix)))[:, -1]
        logits[:, 0] = -np.inf  # never emit padding
        token = np.where(finished, 0, logits.argmax(-1))
        out[:, t] = token
        finished |= token == EOS_ID
        prefix = np.concatenate([prefix, np.maximum(token, 1)[:, None]], axis=1)
    return out


@pytest.mark.parametrize("flavor", ["paper", "reference_2019"])
def test_beam_size_1_equals_greedy(models, flavor):
    model = models(flavor, num_layers=1)
    steps = 6
    # The plain graph: XLA's search against it in
    # test_models_on_every_backend.py::test_generate_compiles_whole.
    greedy_ids, greedy_scores = model.generate(
        SOURCE, sampler="greedy", max_new_tokens=steps, jit_compile=False
    )
    np.testing.assert_array_equal(
        greedy_ids, _naive_greedy(model, SOURCE, steps)
    )
    memory, keep = model.encode(SOURCE)
    cache = model.init_decode_cache(memory, keep, steps)
    beam_ids, beam_scores = tfattn.decoding.beam_search(
        model.decode_step,
        tf.fill([2], BOS_ID),
        cache,
        steps,
        EOS_ID,
        beam_size=1,
        alpha=0.0,
    )
    np.testing.assert_array_equal(beam_ids, greedy_ids)
    # Each encodes on its own path: the whole model over at most L keys,
    # then the sum over the steps and the length penalty.
    bounds.assert_close(
        beam_scores,
        greedy_scores,
        terms=logit_terms(L, blocks=3) + steps + PENALTY_OPS,
        scale=_logit_scale(model, SOURCE, greedy_ids, 0.0),
    )


@pytest.mark.parametrize("sampler", [
    "greedy", pytest.param(samplers.BeamSampler(2), marks=pytest.mark.slow)])
def test_search_sizes_its_buffer_from_the_source(models, sampler):
    # `search(source, None)` decodes into S + extra_length positions, capped
    # at the positional table (L = 8): computed in the graph where S is
    # unknown (one trace for every width), a Python int under XLA; the same
    # tokens as `generate`, whose default width is the same.
    model = models("paper", num_layers=1)
    sampler = samplers.get(sampler)

    def search(source, extra_length):
        return model.search(source, None, sampler, EOS_ID,
                            tf.zeros([2], tf.int32), extra_length)

    graphs = {extra: tf.function(
        lambda s, extra=extra: search(s, extra), autograph=False,
        input_signature=[tf.TensorSpec([None, None], tf.int32)])
        for extra in (0, 50)}
    for extra, graph in graphs.items():
        for source in (SOURCE[:, :1], SOURCE):
            width = min(source.shape[1] + extra, L)
            want, _ = model.generate(source, sampler=sampler,
                                     extra_length=extra, jit_compile=False)
            assert want.shape[1] == width
            ids, _ = graph(source)
            np.testing.assert_array_equal(ids, want)
        assert graph.experimental_get_tracing_count() == 1
    xla = tf.function(lambda s: search(s, 0), jit_compile=True,
                      autograph=False)
    ids, _ = xla(SOURCE[:, :1])
    assert ids.shape == (2, 1)
    np.testing.assert_array_equal(ids, graphs[0](SOURCE[:, :1])[0])


@pytest.mark.parametrize("flavor,normalize_first", SETUPS)
def test_source_padding_does_not_change_logits(
    models, flavor, normalize_first
):
    # The 2017 flavour finds padding from zero rows; its pad rows stay zero
    # only while every bias and LN beta is 0 (at initialisation), as in the
    # reference (§1.7: deeper masks stop firing after training).
    model = models(
        flavor,
        normalize_first,
        randomize=flavor != "reference_2017",
        num_layers=1,
    )
    padded = np.concatenate([SOURCE, np.zeros((2, 3), "int32")], axis=1)
    bounds.assert_close(
        model((padded, TARGET_IN)),
        model((SOURCE, TARGET_IN)),
        terms=logit_terms(
            padded.shape[1], blocks=3, final_norms=2 * normalize_first
        ),
    )


@pytest.mark.parametrize("flavor,normalize_first", SETUPS)
def test_future_target_tokens_do_not_change_earlier_logits(
    models, flavor, normalize_first
):
    model = models(flavor, normalize_first, num_layers=1)
    base = _np(model((SOURCE, TARGET_IN)))
    for t in (0, 2):  # tokens after t change
        changed = TARGET_IN.copy()
        changed[:, t + 1 :] = np.random.default_rng(t).integers(
            1, V, changed[:, t + 1 :].shape
        )
        out = _np(model((SOURCE, changed)))
        bounds.assert_close(
            out[:, : t + 1],
            base[:, : t + 1],
            terms=logit_terms(
                SOURCE.shape[1], blocks=3, final_norms=2 * normalize_first
            ),
        )


def test_dict_and_tuple_inputs_agree(models):
    model = models("paper", num_layers=1)
    np.testing.assert_array_equal(
        model({"source": SOURCE, "target_in": TARGET_IN}),
        model((SOURCE, TARGET_IN)),
    )


# --------------------------------------------------------------------------
# Saving and compilation.


@pytest.mark.parametrize(
    "flavor,normalize_first",
    [("paper", True), ("reference_2017", False), ("reference_2019", False)],
)
def test_keras_file_round_trip(models, flavor, normalize_first):
    model = models(flavor, normalize_first, num_layers=1)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "transformer.keras")
        model.save(path)
        loaded = keras.saving.load_model(path)
    assert isinstance(loaded, tfattn.Transformer)
    assert loaded.get_config() == model.get_config()
    np.testing.assert_array_equal(
        loaded((SOURCE, TARGET_IN)), model((SOURCE, TARGET_IN))
    )
    assert (loaded.source_embedding is loaded.target_embedding) == (
        model.source_embedding is model.target_embedding
    )
    assert len(loaded.weights) == len(model.weights)


@pytest.mark.slow
def test_generate_compiles_once_per_shape_under_jit():
    # One XLA compilation (several seconds on CPU): beam search, the larger
    # graph; greedy decoding runs the same kind of loop.
    model = _model("reference_2019", num_layers=1)
    beam = samplers.BeamSampler(2, 0.6)
    fn = tf.function(lambda s: model.search(s, 5, beam), jit_compile=True)
    other = np.array([[5, 4, 3, 2, 1], [9, 9, 0, 0, 0]], "int32")
    for source in (SOURCE, other):
        ids, scores = fn(tf.constant(source))
        want_ids, want_scores = model.generate(
            source, sampler=beam, max_new_tokens=5
        )
        np.testing.assert_array_equal(ids, want_ids)
        bounds.assert_close(
            scores,
            want_scores,
            terms=logit_terms(L, blocks=3) + 5 + PENALTY_OPS,
            scale=_logit_scale(model, source, want_ids, beam.alpha),
        )
        assert tuple(ids.shape) == (2, 5)
    assert fn.experimental_get_tracing_count() == 1


# --------------------------------------------------------------------------
# Bad input.


@pytest.fixture(scope="module")
def small():
    return _model("reference_2019", randomize=False, num_layers=1)


def test_ids_of_the_wrong_dtype(small):
    with pytest.raises(
        ValueError, match=r"`source`.*dtype float32 and shape \(2, 5\)"
    ):
        small((SOURCE.astype("float32"), TARGET_IN))
    with pytest.raises(ValueError, match=r"`target_in`.*dtype float32"):
        small((SOURCE, TARGET_IN.astype("float32")))
    with pytest.raises(ValueError, match=r"`source`.*dtype float32"):
        small.generate(SOURCE.astype("float32"))


def test_ids_of_the_wrong_rank(small):
    with pytest.raises(
        ValueError, match=r"`source`.*shape \[B, T\].*shape \(5,\)"
    ):
        small((SOURCE[0], TARGET_IN))
    with pytest.raises(ValueError, match=r"`target_in`.*shape \(2, 5, 1\)"):
        small((SOURCE, TARGET_IN[..., None]))


def test_source_and_target_batch_mismatch(small):
    with pytest.raises(
        ValueError,
        match=r"`target_in`.*same batch size as `source` "
        r"\(2\).*shape \(1, 5\)",
    ):
        small((SOURCE, TARGET_IN[:1]))


def test_sequences_longer_than_the_positional_table(small):
    too_long = np.ones((2, L + 1), "int32")
    with pytest.raises(
        ValueError, match=rf"`target_in`.*max_length={L}.*shape \(2, 9\)"
    ):
        small((SOURCE, too_long))
    with pytest.raises(
        ValueError, match=rf"`source`.*max_length={L}.*shape \(2, 9\)"
    ):
        small((too_long, TARGET_IN))
    with pytest.raises(
        ValueError,
        match=r"`max_new_tokens`.*max_length>=9.*max_new_tokens=9",
    ):
        small.generate(SOURCE, max_new_tokens=L + 1)


@pytest.mark.parametrize(
    "flavor", ["paper", "reference_2017", "reference_2019"]
)
def test_decode_step_passes_the_encoder_cache_through(models, flavor):
    """The projected encoder keys/values come back as the same tensors (so
    beam search never reorders them; `decoding.beam._reorder_cache`),
    eagerly and in a graph (traced; its identities are the trace's, so the
    graph need not run); the self-attention buffers are new tensors."""
    model = models(flavor, randomize=False, num_layers=2)

    def flags():
        memory, keep = model.encode(SOURCE)
        cache = model.init_decode_cache(memory, keep, 4)
        _, new = model.decode_step(tf.fill([2], BOS_ID), tf.constant(0), cache)
        return [
            (
                all(
                    a is b
                    for a, b in zip(
                        tf.nest.flatten(old["cross"]),
                        tf.nest.flatten(now["cross"]),
                    )
                ),
                any(
                    a is b
                    for a, b in zip(
                        tf.nest.flatten(old["self"]),
                        tf.nest.flatten(now["self"]),
                    )
                ),
            )
            for old, now in zip(cache, new)
        ]

    assert flags() == [(True, False)] * 2
    seen = []
    # No autograph: the model's Python runs as written (as under JAX).
    tf.function(lambda: seen.append(flags()) or 0,
                autograph=False).get_concrete_function()
    assert seen == [[(True, False)] * 2]


def test_cache_from_another_model_size(small, models):
    deeper = models("reference_2019", randomize=False, num_layers=2)
    wider = _model(
        "reference_2019", randomize=False, num_layers=1, num_units=2 * C
    )
    step = tf.fill([2], BOS_ID)
    for other, pattern in (
        (deeper, r"`cache`.*another model size.*2 entries"),
        (wider, r"`cache`.*another model size.*key shape"),
    ):
        memory, keep = other.encode(SOURCE)
        cache = other.init_decode_cache(memory, keep, 4)
        with pytest.raises(ValueError, match=pattern):
            small.decode_step(step, tf.constant(0), cache)


@pytest.mark.parametrize("max_length", [0, -3])
def test_max_length_below_one(small, max_length):
    pattern = rf"`max_length`.*positive integer.*max_length={max_length}"
    with pytest.raises(ValueError, match=(
            rf"`max_new_tokens`.*max_new_tokens={max_length}")):
        small.generate(SOURCE, max_new_tokens=max_length)
    memory, keep = small.encode(SOURCE)
    with pytest.raises(ValueError, match=pattern):
        small.init_decode_cache(memory, keep, max_length)
    with pytest.raises(ValueError, match=pattern):
        tfattn.Transformer(V, max_length=max_length)


@pytest.mark.parametrize("beam_size", [0, -1])
def test_beam_size_below_one(small, beam_size):
    with pytest.raises(
        ValueError, match=rf"`beam_size`.*beam_size={beam_size}"
    ):
        small.generate(SOURCE, sampler=samplers.BeamSampler(beam_size))


def test_bad_inputs_container(small):
    with pytest.raises(
        ValueError, match=r"`inputs`.*'source'.*'target_in'.*'tgt'"
    ):
        small({"source": SOURCE, "tgt": TARGET_IN})


@pytest.mark.parametrize(
    "kwargs,pattern",
    [
        (dict(flavor="t5"), r"`flavor`.*flavor='t5'"),
        (
            dict(num_units=10, num_heads=4),
            r"`num_units`.*multiple of num_heads=4.*=10",
        ),
        (
            dict(target_vocab_size=20, share_embeddings=True),
            r"`share_embeddings`.*differ \(13 and 20\).*share_embeddings=True",
        ),
        (
            dict(flavor="reference_2019", tie_output=False),
            r"`tie_output`.*tie_output=False",
        ),
        (
            dict(flavor="reference_2017", share_embeddings=True),
            r"`share_embeddings`.*share_embeddings=True",
        ),
        (
            dict(flavor="reference_2017", normalize_first=True),
            r"`normalize_first`.*normalize_first=True",
        ),
        (dict(num_layers=0), r"`num_layers`.*num_layers=0"),
        (dict(share_embeddings=1), r"`share_embeddings`.*bool or None"),
        (dict(tie_output="yes"), r"`tie_output`.*tie_output='yes'"),
        (dict(seed=1.5), r"`seed`.*None or an int.*seed=1.5"),
        (dict(seed=True), r"`seed`.*seed=True"),
        (
            dict(source_vocab_size=0),
            r"`source_vocab_size`.*source_vocab_size=0",
        ),
    ],
)
def test_bad_constructor_arguments(kwargs, pattern):
    kwargs.setdefault("source_vocab_size", V)
    with pytest.raises(ValueError, match=pattern):
        tfattn.Transformer(**kwargs)


# --------------------------------------------------------------------------
# Attention weights of every layer and kind (return_attention_scores).


def _recorded_attention(model, monkeypatch):
    """Wraps every MultiHeadAttention of `model` to record the weights it
    computes in a plain forward pass: {(kind, layer): weights}. The
    wrappers go when the test ends (`monkeypatch`)."""
    recorded = {}
    pairs = [
        (("encoder", i), b.self_attention)
        for i, b in enumerate(model.encoder.blocks)
    ]
    for i, block in enumerate(model.decoder.blocks):
        pairs += [
            (("decoder", i), block.self_attention),
            (("cross", i), block.cross_attention),
        ]
    for key, attention in pairs:
        original = attention.call

        def call(*args, _original=original, _key=key, **kwargs):
            kwargs["return_attention_scores"] = True
            output, weights = _original(*args, **kwargs)
            recorded[_key] = np.asarray(weights)
            return output

        monkeypatch.setattr(attention, "call", call)
    return recorded


@pytest.mark.parametrize("flavor, normalize_first", SETUPS)
def test_returned_scores_are_those_of_each_attention_call(
    models, monkeypatch, flavor, normalize_first
):
    model = models(flavor, normalize_first)
    logits, scores = model((SOURCE, TARGET_IN), return_attention_scores=True)
    np.testing.assert_array_equal(logits, model((SOURCE, TARGET_IN)))
    assert sorted(scores) == ["cross", "decoder", "encoder"]
    recorded = _recorded_attention(model, monkeypatch)
    model((SOURCE, TARGET_IN))
    assert len(recorded) == 3 * N
    for kind, per_layer in scores.items():
        assert len(per_layer) == N
        for i, weights in enumerate(per_layer):
            assert weights.dtype == tf.float32
            # At most the whole stack's chain; probabilities: scale 1.
            bounds.assert_close(
                weights,
                recorded[(kind, i)],
                terms=bounds.stack_terms(3 * N, C, F, SOURCE.shape[1])
                + 8 * C * normalize_first,
                scale=1.0,
            )


def test_score_shapes_and_masks(models):
    model = models("paper")
    _, scores = model((SOURCE, TARGET_IN), return_attention_scores=True)
    b, s, t = SOURCE.shape[0], SOURCE.shape[1], TARGET_IN.shape[1]
    real_source = SOURCE != 0
    for weights in scores["encoder"]:
        weights = _np(weights)
        assert weights.shape == (b, H, s, s)
        assert np.all(
            weights[~real_source[:, None, None, :].repeat(s, 2).repeat(H, 1)]
            == 0
        )
    for weights in scores["decoder"]:
        weights = _np(weights)
        assert weights.shape == (b, H, t, t)
        assert np.all(np.triu(weights, 1) == 0)  # Causal: nothing above.
    for weights in scores["cross"]:
        weights = _np(weights)
        assert weights.shape == (b, H, t, s)
        assert np.all(weights[0, :, :, ~real_source[0]] == 0)
    for per_layer in scores.values():
        for weights in per_layer:
            # The softmax's normalisation and this sum, over the keys.
            keys = weights.shape[-1]
            bounds.assert_close(_np(weights).sum(-1), 1.0, terms=2 * keys)


def test_stacks_and_blocks_return_scores_too():
    x = np.random.default_rng(0).normal(size=(2, 5, C)).astype("float32")
    keep = np.array([[True] * 5, [True] * 3 + [False] * 2])
    encoder = tfattn.Encoder(num_layers=2, num_heads=H, ffn_units=F)
    out, weights = encoder(x, padding_mask=keep, return_attention_scores=True)
    np.testing.assert_array_equal(out, encoder(x, padding_mask=keep))
    assert [tuple(w.shape) for w in weights] == [(2, H, 5, 5)] * 2
    gpt = tfattn.Decoder(
        num_layers=2, num_heads=H, ffn_units=F, use_cross_attention=False
    )
    out, weights = gpt(x, return_attention_scores=True)
    assert sorted(weights) == ["decoder"] and len(weights["decoder"]) == 2
    block = tfattn.DecoderBlock(num_heads=H, ffn_units=F)
    out, weights = block(x, x[:, :4], return_attention_scores=True)
    assert tuple(weights["self"].shape) == (2, H, 5, 5)
    assert tuple(weights["cross"].shape) == (2, H, 5, 4)


@pytest.mark.parametrize(
    "name, bad, value",
    [
        ("source", np.array([[4, -1, 6]], "int32"), -1),
        ("source", np.array([[4, V, 6]], "int32"), V),
        ("target_in", np.array([[BOS_ID, V + 7]], "int64"), V + 7),
    ],
)
def test_ids_out_of_the_vocabulary_are_refused_at_the_door(
    small, name, bad, value
):
    """Eagerly a ValueError naming the argument and the id; in a graph the
    same message from in-graph assertions (no raw GatherV2 error)."""
    source = bad if name == "source" else SOURCE[:1]
    target = bad if name == "target_in" else TARGET_IN[:1]
    pattern = (
        rf"`{name}`, expected token ids in \[0, {V}\).*"
        rf"<ids holding {value}>"
    )
    with pytest.raises(ValueError, match=pattern):
        small((source, target))
    graph = tf.function(lambda s, t: small((s, t)), autograph=False)
    with pytest.raises(
        tf.errors.InvalidArgumentError,
        match=rf"`{name}`, expected token ids in \[0, {V}\)",
    ):
        graph(tf.constant(source), tf.constant(target))
    if name == "source":
        with pytest.raises(ValueError, match=pattern):
            small.generate(tf.constant(bad), sampler="greedy")


def test_generate_builds_a_model_never_called():
    model = tfattn.Transformer(
        V, num_layers=1, num_units=C, num_heads=H, ffn_units=F, max_length=L
    )
    assert not model.built
    ids, scores = model.generate(
        tf.constant(SOURCE[:, :3]), sampler=samplers.BeamSampler(2),
        max_new_tokens=4, jit_compile=False
    )
    assert model.built and ids.shape == (2, 4) and scores.shape == (2,)


@pytest.mark.parametrize("beam_size", [1, 4])
def test_generate_answers_a_batch_of_zero(small, beam_size):
    # Beam search used to reduce over an empty tensor ("Cannot compute the
    # min of an empty tensor"); the exports answer batch 0 with nothing.
    sampler = samplers.for_beam_size(beam_size)
    ids, scores = small.generate(np.zeros((0, 5), "int32"),
                                 sampler=sampler, extra_length=2)
    assert _np(ids).shape == (0, 7) and _np(scores).shape == (0,)
    # And a batch of rows is unchanged by the fix.
    ids, _ = small.generate(SOURCE, sampler=sampler, extra_length=2,
                            jit_compile=False)
    assert _np(ids).shape == (SOURCE.shape[0], 7)
