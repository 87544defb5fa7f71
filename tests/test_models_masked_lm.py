"""`tfattn.models.MaskedLM`, `TextEncoder` and `SequenceClassifier`, on any
backend (CI runs this file under TensorFlow and again under JAX).

References, independent of the code under test:
- the masked-LM head against NumPy from its formulas (Dense, GELU from
  `math.erf`, layer norm, tied projection plus bias), fed the encoder's own
  output, and the gathered positions against NumPy indexing of the full
  logits;
- the classifier's pooling against NumPy (the first row, the mean over the
  real tokens) followed by its Dense;
- bidirectionality and padding against the definition: a later token
  changes an earlier position's vector, padding changes no real token's;
- `load_encoder` against the weights it read (copied exactly).
"""

import math

import keras
import numpy as np
import pytest
from keras import ops

from tests import bounds
from tfattn.models import MaskedLM
from tfattn.models import SequenceClassifier
from tfattn.models import TextEncoder

VOCAB = 40
LAYERS, UNITS, FFN_UNITS = 2, 16, 32  # `tiny`'s sizes
IDS = np.array([[2, 5, 6, 7, 8, 3, 0, 0],
                [2, 9, 10, 11, 12, 13, 14, 3]], "int32")
# Elementwise float operations of the exact GELU, x·0.5·(1 + erf(x/√2)):
# the division, erf, the sum and the two products.
GELU_OPS = 5
# To one masked-LM logit from the encoder's output: the head's Dense (C
# terms) and bias, the GELU, the layer norm (4·C), the tied projection (C)
# and the output bias.
HEAD_TERMS = UNITS + 1 + GELU_OPS + 4 * UNITS + UNITS + 1
# The largest |value| of BERT's initializer, a normal truncated at 2 std
# (std 0.02), after the draw's two float32 roundings (× std, + mean).
TRUNCATED_MAX = 0.04 + bounds.bound(2, 0.04)


def _np(x):
    return np.asarray(ops.convert_to_numpy(x))


def tiny(cls=MaskedLM, seed=0, **kwargs):
    keras.utils.set_random_seed(seed)
    args = dict(vocab_size=VOCAB, num_layers=LAYERS, num_units=UNITS,
                num_heads=2, ffn_units=FFN_UNITS, max_length=16,
                dropout_rate=0.0)
    args.update(kwargs)
    model = cls(**args)
    model(IDS)
    return model


@pytest.fixture(scope="module")
def mlm():
    return tiny(activation="gelu")


@pytest.fixture(scope="module")
def classifiers():
    """{pooling: a SequenceClassifier with it}, built once (not mutated)."""
    return {pooling: tiny(SequenceClassifier, seed=2, num_classes=3,
                          pooling=pooling) for pooling in ("first", "mean")}


def _gelu(x):
    return x * 0.5 * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


def _numpy_head(mlm, x):
    kernel, bias = (_np(w).astype(np.float64)
                    for w in mlm.head_dense.weights)
    gamma, beta = (_np(w).astype(np.float64) for w in mlm.head_norm.weights)
    h = _gelu(x @ kernel + bias)
    mean = h.mean(-1, keepdims=True)
    var = ((h - mean) ** 2).mean(-1, keepdims=True)
    h = (h - mean) / np.sqrt(var + mlm.layer_norm_epsilon) * gamma + beta
    table = _np(mlm.token_embedding.embeddings).astype(np.float64)
    if mlm.token_embedding.zero_pad:  # padding's row is the zero vector
        table[0] = 0.0
    return h @ table.T + _np(mlm.head_bias)


def test_head_is_numpy_dense_gelu_norm_and_tied_projection(mlm):
    x = _np(mlm.text_encoder(IDS)).astype(np.float64)
    want = _numpy_head(mlm, x)
    bounds.assert_close(_np(mlm(IDS)), want, terms=HEAD_TERMS)


def test_mask_positions_gather_the_full_logits(mlm):
    positions = np.array([[1, 4, 0], [7, 2, 2]], "int32")
    full = _np(mlm(IDS))
    got = _np(mlm({"token_ids": IDS, "mask_positions": positions}))
    want = np.take_along_axis(full, positions[..., None], axis=1)
    # The same encoder output; the head runs on the gathered rows only.
    bounds.assert_close(got, want, terms=HEAD_TERMS)


def test_every_position_sees_both_sides_and_never_padding(mlm):
    changed = IDS.copy()
    changed[0, 4] = 20  # a later token changes an earlier vector
    a, b = _np(mlm.text_encoder(IDS)), _np(mlm.text_encoder(changed))
    assert np.abs(a[0, 1] - b[0, 1]).max() > 1e-4
    longer = np.concatenate([IDS, np.zeros((2, 4), "int32")], axis=1)
    c = _np(mlm.text_encoder(longer))
    bounds.assert_close(c[0, :6], a[0, :6], terms=bounds.stack_terms(
        LAYERS, UNITS, FFN_UNITS, longer.shape[1]))


def test_keras_file_round_trip(tmp_path, mlm):
    path = str(tmp_path / "mlm.keras")
    mlm.save(path)
    loaded = keras.saving.load_model(path)
    np.testing.assert_array_equal(_np(loaded(IDS)), _np(mlm(IDS)))
    assert loaded.get_config() == mlm.get_config()


@pytest.mark.parametrize("pooling", ["first", "mean"])
def test_classifier_pools_then_dense(classifiers, pooling):
    model = classifiers[pooling]
    x = _np(model.text_encoder(IDS)).astype(np.float64)
    if pooling == "first":
        pooled = x[:, 0]
    else:
        keep = (IDS != 0)[..., None]
        pooled = (x * keep).sum(1) / keep.sum(1)
    kernel, bias = (_np(w) for w in model.output_dense.weights)
    # The mean over the T tokens and its division, the Dense over C and
    # its bias.
    bounds.assert_close(_np(model(IDS)), pooled @ kernel + bias,
                        terms=IDS.shape[1] + 1 + UNITS + 1)


def test_from_masked_lm_copies_the_encoder_and_round_trips(tmp_path, mlm):
    model = SequenceClassifier.from_masked_lm(mlm, num_classes=2,
                                              pooling="mean")
    for got, want in zip(model.text_encoder.weights,
                         mlm.text_encoder.weights):
        np.testing.assert_array_equal(_np(got), _np(want))
    np.testing.assert_array_equal(_np(model.text_encoder(IDS)),
                                  _np(mlm.text_encoder(IDS)))
    path = str(tmp_path / "classifier.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    np.testing.assert_array_equal(_np(loaded(IDS)), _np(model(IDS)))
    assert loaded.get_config() == model.get_config()


def test_loading_an_encoder_of_other_shapes_is_refused_and_copies_nothing(
        mlm):
    model = tiny(SequenceClassifier, seed=3, num_units=32, ffn_units=32)
    before = [_np(w) for w in model.weights]
    with pytest.raises(ValueError, match="masked_lm.*shape"):
        model.load_encoder(mlm)
    for got, want in zip(model.weights, before):
        np.testing.assert_array_equal(_np(got), want)
    deeper = tiny(SequenceClassifier, seed=3, num_layers=3)
    with pytest.raises(ValueError, match="masked_lm.*3 layers"):
        deeper.load_encoder(mlm)
    with pytest.raises(ValueError, match="masked_lm.*a built"):
        SequenceClassifier.from_masked_lm(MaskedLM(vocab_size=VOCAB))


@pytest.mark.parametrize("cls, kwargs, match", [
    (SequenceClassifier, dict(num_classes=1), "num_classes=1"),
    (SequenceClassifier, dict(num_classes=2.0), "num_classes=2.0"),
    (SequenceClassifier, dict(pooling="max"), "pooling='max'"),
    (MaskedLM, dict(mask_token_id=40), "mask_token_id=40"),
    (MaskedLM, dict(head_activation="swirl"), "head_activation='swirl'"),
    (MaskedLM, dict(layer_norm_epsilon=0.0), "layer_norm_epsilon=0.0"),
    (MaskedLM, dict(num_units=15), "MaskedLM.*num_units"),
    (MaskedLM, dict(kernel_initializer=3), "kernel_initializer=3"),
    (SequenceClassifier, dict(kernel_initializer="nope"),
     "SequenceClassifier.*kernel_initializer='nope'"),
    (TextEncoder, dict(flavor="reference_2019", normalize_first=True),
     "normalize_first"),
    (MaskedLM, dict(normalize_embeddings="yes"),
     "MaskedLM.*normalize_embeddings='yes'"),
    # The 2017 reference finds padding from zero rows, which the norm's
    # beta would fill: padding would leak into every real token.
    (TextEncoder, dict(flavor="reference_2017", normalize_embeddings=True),
     "normalize_embeddings=True"),
    (MaskedLM, dict(flavor="reference_2019", normalize_embeddings=True),
     "MaskedLM.*normalize_embeddings=True"),
    (MaskedLM, dict(scale_embeddings=1), "MaskedLM.*scale_embeddings=1"),
    (TextEncoder, dict(flavor="reference_2019", scale_embeddings=False),
     "scale_embeddings=False"),
    (SequenceClassifier, dict(positions_initializer="nope"),
     "SequenceClassifier.*positions_initializer='nope'"),
])
def test_constructors_refuse_bad_arguments(cls, kwargs, match):
    args = dict(vocab_size=VOCAB, num_layers=1, num_units=16, num_heads=2,
                ffn_units=32)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        cls(**args)


def test_ids_out_of_the_vocabulary_are_refused_by_name(mlm):
    with pytest.raises(ValueError, match="ids"):
        mlm(np.array([[2, VOCAB, 3]], "int32"))
    with pytest.raises(ValueError, match="inputs.*token_ids"):
        mlm({"ids": IDS})


@pytest.mark.parametrize("cls", [MaskedLM, SequenceClassifier])
def test_kernel_initializer_draws_the_encoder_and_head_kernels(cls):
    # BERT draws every Dense kernel from a normal truncated at 2 std,
    # std 0.02; the heads (MLM transform, classifier output) included.
    bert = keras.initializers.TruncatedNormal(stddev=0.02)
    model = tiny(cls, seed=4, kernel_initializer=bert)
    model(IDS)
    kernels = {w.path: np.asarray(ops.convert_to_numpy(w))
               for w in model.weights if w.path.endswith("/kernel")}
    head = "head_dense" if cls is MaskedLM else "output_dense"
    assert any(head in path for path in kernels)
    for path, kernel in kernels.items():
        assert np.abs(kernel).max() <= TRUNCATED_MAX, path
        assert 0.01 < kernel.std() < 0.025, (path, kernel.std())
    rebuilt = cls.from_config(model.get_config())
    assert rebuilt.kernel_initializer.stddev == 0.02


@pytest.mark.parametrize("normalize_embeddings", [True, False])
def test_normalize_embeddings_makes_the_blocks_blind_to_the_tables_scale(
        tmp_path, normalize_embeddings):
    # BERT's layer norm over token + position embeddings: scaling both
    # (learned) tables by 7 scales their sum by 7, which a layer norm
    # removes (up to its epsilon); without it, the post-norm blocks'
    # attention logits grow 49-fold and the outputs change.
    # One post-norm block shows it (the stack is not the point).
    model = tiny(TextEncoder, seed=5, num_layers=1,
                 positional_encoding="learned",
                 normalize_embeddings=normalize_embeddings)
    before = _np(model(IDS))
    for layer in (model.token_embedding, model.positions):
        for weight in layer.weights:
            weight.assign(weight * 7.0)
    change = np.abs(_np(model(IDS)) - before).max()
    if normalize_embeddings:
        assert change < 1e-4
        mlm = tiny(seed=5, num_layers=1, normalize_embeddings=True)
        path = str(tmp_path / "mlm.keras")
        mlm.save(path)
        loaded = keras.saving.load_model(path)
        assert loaded.text_encoder.normalize_embeddings is True
        np.testing.assert_array_equal(_np(loaded(IDS)), _np(mlm(IDS)))
    else:
        assert change > 1e-2


def test_berts_embeddings_are_the_unscaled_rows_plus_positions_normalized(
        tmp_path):
    # keras-hub's BertBackbone: token row + position row (both drawn from
    # truncated N(0, 0.02), neither scaled), then a layer norm. Checked in
    # NumPy on the blocks' input (the stack swapped for the identity).
    bert = keras.initializers.TruncatedNormal(stddev=0.02)
    model = tiny(TextEncoder, seed=6, num_layers=1,
                 positional_encoding="learned", embeddings_initializer=bert,
                 positions_initializer=bert, scale_embeddings=False,
                 normalize_embeddings=True)
    tokens = _np(model.token_embedding.embeddings).astype(np.float64)
    positions = _np(model.positions.embeddings).astype(np.float64)
    for table in (tokens, positions):
        assert np.abs(table).max() <= TRUNCATED_MAX
        assert 0.01 < table.std() < 0.025
    if model.token_embedding.zero_pad:  # padding's row is the zero vector
        tokens[0] = 0.0
    x = tokens[IDS] + positions[:IDS.shape[1]]
    gamma, beta = (_np(w).astype(np.float64)
                   for w in model.embedding_layer_norm.weights)
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    expected = ((x - mean) / np.sqrt(var + model.embedding_layer_norm.epsilon)
                * gamma + beta)
    object.__setattr__(model, "encoder", lambda x, **_: x)
    # The sum of the two rows, then the layer norm over C (4·C).
    bounds.assert_close(_np(model(IDS)), expected, terms=1 + 4 * UNITS)
    mlm = tiny(seed=6, num_layers=1, positional_encoding="learned",
               positions_initializer=bert, scale_embeddings=False)
    path = str(tmp_path / "bert.keras")
    mlm.save(path)
    loaded = keras.saving.load_model(path)
    assert loaded.text_encoder.scale_embeddings is False
    assert loaded.text_encoder.positions_initializer.stddev == 0.02
    np.testing.assert_array_equal(_np(loaded(IDS)), _np(mlm(IDS)))
    # The classifier starts from the same encoder, embeddings included.
    classifier = SequenceClassifier.from_masked_lm(mlm)
    assert classifier.scale_embeddings is False
    np.testing.assert_array_equal(_np(classifier.text_encoder(IDS)),
                                  _np(mlm.text_encoder(IDS)))


@pytest.mark.parametrize("flavor", ["reference_2017", "reference_2019"])
def test_reference_flavours_build_and_round_trip(tmp_path, flavor):
    model = tiny(flavor=flavor, num_layers=1)  # the blocks are the flavour's
    path = str(tmp_path / "ref.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    np.testing.assert_array_equal(_np(loaded(IDS)), _np(model(IDS)))


def test_fit_at_the_blanks_lowers_the_loss():
    """Keras `fit` on every backend: blanks chosen in NumPy (the
    `tf.data` generator is TensorFlow's), loss over the blanks only."""
    rng = np.random.default_rng(0)
    ids = np.tile(np.arange(5, 17, dtype="int32"), (64, 1))  # one sentence
    positions = np.stack([rng.choice(np.arange(1, 12), 3, replace=False)
                          for _ in range(64)]).astype("int32")
    targets = np.take_along_axis(ids, positions, axis=1)
    masked = ids.copy()
    np.put_along_axis(masked, positions, 4, axis=1)
    # One block is enough to learn the sentence; building the optimizer's
    # slots first spares Keras a second trace of its train step.
    model = tiny(activation="gelu", num_layers=1)
    model.compile(keras.optimizers.Adam(1e-2),
                  keras.losses.SparseCategoricalCrossentropy(
                      from_logits=True))
    model.optimizer.build(model.trainable_variables)
    inputs = {"token_ids": masked, "mask_positions": positions}
    history = model.fit(inputs, targets, epochs=8, batch_size=16, verbose=0)
    losses = history.history["loss"]
    assert losses[-1] < 0.5 * losses[0], losses


@pytest.mark.parametrize("positions, match", [
    ([[-1], [0]], r"`mask_positions`, expected positions in \[0, T\) of "
     r"token_ids \(T=8\).*holding -1"),
    ([[1], [8]], r"`mask_positions`.*\(T=8\).*holding 8"),
    ([[40], [1]], r"`mask_positions`.*holding 40"),
    ([[1]], r"`mask_positions`, expected the batch size of token_ids \(2\)"),
    ([[1], [2], [3]], r"`mask_positions`, expected the batch size"),
    ([1, 2], r"`mask_positions`, expected int positions of shape \[B, P\]"),
    ([[1.0], [2.0]], r"`mask_positions`, expected int positions"),
])
def test_mask_positions_out_of_range_or_batch_are_refused(mlm, positions,
                                                          match):
    # Before: -1 read the last position, 8 failed in a gather, a batch of 1
    # broadcast against the ids' batch of 2.
    with pytest.raises(ValueError, match=match):
        mlm({"token_ids": IDS, "mask_positions": np.array(positions)})


@pytest.mark.skipif(keras.config.backend() != "tensorflow",
                    reason="in-graph assertions are TensorFlow's")
def test_mask_positions_are_checked_in_a_graph_with_the_same_message(mlm):
    import tensorflow as tf

    spec = tf.TensorSpec([None, None], tf.int32)

    @tf.function(input_signature=[spec, spec])
    def logits(ids, positions):
        return mlm({"token_ids": ids, "mask_positions": positions})

    assert tuple(logits(IDS, np.array([[1, 0], [7, 0]], "int32")).shape) == (
        2, 2, VOCAB)
    for positions, match in [
            ([[1], [8]], r"`mask_positions`, expected positions in \[0, T\)"),
            ([[-1], [0]], r"`mask_positions`, expected positions in \[0, T\)"),
            ([[1]], r"`mask_positions`, expected the batch size")]:
        with pytest.raises(tf.errors.InvalidArgumentError, match=match):
            logits(IDS, np.array(positions, "int32"))


def test_zero_length_ids(mlm, classifiers):
    # The encoder and the masked LM answer T = 0 with empty outputs; the
    # classifier has no token to pool and refuses (before: "slice index 0
    # of dimension 1 out of bounds").
    empty = np.zeros((2, 0), "int32")
    assert tuple(mlm.text_encoder(empty).shape) == (2, 0, 16)
    assert tuple(mlm(empty).shape) == (2, 0, VOCAB)
    with pytest.raises(ValueError, match="mask_positions.*holding 0"):
        mlm({"token_ids": empty, "mask_positions": np.zeros((2, 1), "int32")})
    for pooling in ("first", "mean"):
        classifier = classifiers[pooling]
        with pytest.raises(ValueError, match=r"SequenceClassifier.*`ids`, "
                           r"expected at least one token per row"):
            classifier(empty)


@pytest.mark.skipif(keras.config.backend() != "tensorflow",
                    reason="in-graph assertions are TensorFlow's")
def test_zero_length_ids_are_refused_in_a_graph(classifiers):
    import tensorflow as tf

    classifier = classifiers["first"]
    call = tf.function(classifier, input_signature=[
        tf.TensorSpec([None, None], tf.int32)])
    assert tuple(call(IDS).shape) == (2, 3)
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match="`ids`, expected at least one token"):
        call(np.zeros((2, 0), "int32"))


@pytest.mark.parametrize("cls", [TextEncoder, MaskedLM, SequenceClassifier])
@pytest.mark.parametrize("kwargs, match", [
    (dict(positional_encoding="rotary"), "positional_encoding='rotary'"),
    (dict(positional_encoding=True), "positional_encoding=True"),
    (dict(seed=True), "seed=True"),
    (dict(seed=2.0), "seed=2.0"),
    (dict(seed="3"), "seed='3'"),
    (dict(seed=float("nan")), "seed=nan"),
    (dict(seed=[1]), r"seed=\[1\]"),
    (dict(num_layers=0), "num_layers=0"),
    (dict(num_layers=True), "num_layers=True"),
    (dict(num_units=16.0), "num_units=16.0"),
    (dict(num_heads=0), "num_heads=0"),
    (dict(ffn_units=True), "ffn_units=True"),
    (dict(vocab_size=float("inf")), "vocab_size=inf"),
    (dict(max_length="16"), "max_length='16'"),
    (dict(dropout_rate=float("nan")), "dropout_rate=nan"),
    (dict(dropout_rate=1.0), "dropout_rate=1.0"),
    (dict(attention_dropout_rate=-0.1), "attention_dropout_rate=-0.1"),
    (dict(flavor=None), "flavor=None"),
    (dict(activation="swirl"), "activation='swirl'"),
    (dict(embeddings_initializer="nope"), "embeddings_initializer='nope'"),
])
def test_every_encoder_argument_is_refused_by_name(cls, kwargs, match):
    args = dict(vocab_size=VOCAB, num_layers=1, num_units=16, num_heads=2,
                ffn_units=32)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        cls(**args)


@pytest.mark.parametrize("cls, kwargs, match", [
    (MaskedLM, dict(layer_norm_epsilon=float("inf")),
     "layer_norm_epsilon=inf"),
    (MaskedLM, dict(layer_norm_epsilon=True), "layer_norm_epsilon=True"),
    (MaskedLM, dict(mask_token_id=True), "mask_token_id=True"),
    (MaskedLM, dict(mask_token_id=0), "mask_token_id=0"),
    (MaskedLM, dict(mask_token_id=4.0), "mask_token_id=4.0"),
    (SequenceClassifier, dict(num_classes=True), "num_classes=True"),
    (SequenceClassifier, dict(classifier_dropout_rate=float("nan")),
     "classifier_dropout_rate=nan"),
    (SequenceClassifier, dict(pooling=None), "pooling=None"),
])
def test_head_arguments_are_refused_by_name(cls, kwargs, match):
    args = dict(vocab_size=VOCAB, num_layers=1, num_units=16, num_heads=2,
                ffn_units=32)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        cls(**args)


def test_call_flags_are_refused_by_name(mlm, classifiers):
    for flags, match in [
            (dict(return_attention_scores="no"),
             "return_attention_scores='no'"),
            (dict(return_attention_scores=1), "return_attention_scores=1"),
            (dict(training="yes"), "training='yes'")]:
        with pytest.raises(ValueError, match=match):
            mlm(IDS, **flags)
        with pytest.raises(ValueError, match=match):
            mlm.text_encoder(IDS, **flags)
    with pytest.raises(ValueError, match="training='yes'"):
        classifiers["first"](IDS, training="yes")
