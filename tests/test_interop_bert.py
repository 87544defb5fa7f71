"""BERT checkpoints in tfattn (`tfattn.interop.bert`): equal to keras-hub
on the same weights, from keras-hub presets and Hugging Face directories,
masked LM and classifier, segment ids exercised; round trips exact; the
tokenizer's ids are Hugging Face tokenizers' BERT ones (and keras-hub's
where keras-hub agrees) through the row permutation; and the model
options BERT needs, each against NumPy from the formula.

The checkpoints are a tiny random BERT (tests/bert_fixtures.py) that
keras-hub builds and saves, written here as Hugging Face files too; the
refusals are in tests/test_interop_bert_refusals.py.
"""

import keras
import numpy as np
import pytest
from scipy.special import erf

from tests import bert_fixtures as fx
from tests import bounds
from tfattn.interop import bert
from tfattn.interop.wordpiece_tokenizer import WordPieceTokenizer
from tfattn.interop.wordpiece_tokenizer import to_bert_ids
from tfattn.interop.wordpiece_tokenizer import to_tfattn_ids
from tfattn.models.classifier import SequenceClassifier
from tfattn.models.masked_lm import MaskedLM

SAMPLE = ["The quick brown fox jumps over the lazy dog.",
          "Grüße aus Köln, Straße und Berlin", "café naïve résumé CAFÉ",
          "emoji 😀🎉 and 👍🏽!", "東京と你好，世界", "a  b\n\n  c\t\td   ",
          "   hello   world  ", "", "unbelievable don't, we'll 1234 x=y+1",
          "[MASK] is there [SEP]", "zero\u200bwidth\u200d joiner\x00 ctl",
          "İstanbul ÅNGSTRÖM ﬁ"]

# The batch's length (`_batch`) and the classifier's classes.
LENGTH, CLASSES = 10, 3
# To one encoder vector: the embeddings' layer norm (4·C), then the stack.
ENCODER_TERMS = 4 * fx.WIDTH + bounds.stack_terms(
    fx.LAYERS, fx.WIDTH, fx.FFN, LENGTH)
# To one masked-LM logit: the encoder's terms, the head's Dense (C) and
# layer norm (4·C), then the tied projection and the vocabulary.
MLM_TERMS = 4 * fx.WIDTH + 5 * fx.WIDTH + bounds.stack_terms(
    fx.LAYERS, fx.WIDTH, fx.FFN, LENGTH, len(fx.vocabulary()))
# To one classifier logit: the encoder's terms, the pooler's Dense (C),
# then the output layer over the classes.
CLASSIFIER_TERMS = 4 * fx.WIDTH + fx.WIDTH + bounds.stack_terms(
    fx.LAYERS, fx.WIDTH, fx.FFN, LENGTH, CLASSES)


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """keras-hub tasks, their presets, and Hugging Face directories of
    their weights (a pretraining-style one, a sharded one)."""
    root = tmp_path_factory.mktemp("bert")
    mlm, classifier = fx.hub_masked_lm(), fx.hub_classifier()
    dirs = {k: str(root / k) for k in ("mlm", "cls", "hf", "hf_cls",
                                        "sharded")}
    mlm.save_to_preset(dirs["mlm"])
    classifier.save_to_preset(dirs["cls"])
    fx.write_huggingface(dirs["hf"], fx.hf_tensors(mlm, extras=True),
                         fx.hf_config())
    fx.write_huggingface(dirs["sharded"], fx.hf_tensors(mlm, extras=True),
                         fx.hf_config(), shards=3)
    fx.write_huggingface(dirs["hf_cls"], fx.hf_tensors(classifier),
                         fx.hf_config("BertForSequenceClassification"))
    return mlm, classifier, dirs


@pytest.fixture(scope="module")
def read(source):
    """read(reader, which): `bert.from_keras_hub` ("hub") or
    `bert.from_huggingface` ("hf") of `source`'s directory `which`, each
    read once: (model, tokenizer), which the tests only read."""
    _, _, dirs = source
    cache = {}

    def read(reader, which):
        if (reader, which) not in cache:
            load = (bert.from_keras_hub if reader == "hub"
                    else bert.from_huggingface)
            cache[reader, which] = load(dirs[which])
        return cache[reader, which]

    return read


def _batch():
    """BERT ids [2, 10] ([CLS] ... [SEP], the second row right-padded),
    segments 0 then 1, and masked positions at real tokens."""
    rng = np.random.default_rng(0)
    ids = rng.integers(9, len(fx.vocabulary()), (2, 10))
    ids[:, 0], ids[0, -1], ids[1, 7], ids[1, 8:] = 6, 7, 7, 0
    segments = np.zeros_like(ids)
    segments[:, 4:] = 1
    segments[1, 8:] = 0
    return ids, segments, np.array([[1, 3, 5], [2, 4, 6]])


def _ours(model, tokenizer, ids, segments, positions=None):
    inputs = {"token_ids": to_tfattn_ids(ids, tokenizer.order),
              "segment_ids": segments}
    if positions is not None:
        inputs["mask_positions"] = positions
    return np.asarray(model(inputs))


def _hub(task, ids, segments, positions=None):
    inputs = {"token_ids": ids, "segment_ids": segments,
              "padding_mask": (ids != 0).astype("int32")}
    if positions is not None:
        inputs["mask_positions"] = positions
    return np.asarray(task(inputs))


def _assert_mlm_equal(ours, theirs, order):
    """tfattn's logit at id t is BERT's at order[t]; column 0 ([PAD],
    tfattn's padding, a zero row) is left out."""
    bounds.assert_close(ours[..., 1:], theirs[..., order][..., 1:],
                        terms=MLM_TERMS)
    assert np.abs(theirs).max() > 1.0  # not a vacuous comparison


def _numpy_head(x, tensors, epsilon, order):
    """BERT's masked-LM head (transformers' BertLMPredictionHead) in
    NumPy on encoder vectors x [B, P, C], in tfattn's id order, with the
    fixtures' `hidden_act` ("gelu_new": the tanh GELU)."""
    p = "cls.predictions."
    y = x @ tensors[p + "transform.dense.weight"].T + tensors[
        p + "transform.dense.bias"]
    y = 0.5 * y * (1 + np.tanh(np.sqrt(2 / np.pi) * (y + 0.044715 * y**3)))
    y = (y - y.mean(-1, keepdims=True)) / np.sqrt(
        y.var(-1, keepdims=True) + epsilon)
    y = y * tensors[p + "transform.LayerNorm.weight"] + tensors[
        p + "transform.LayerNorm.bias"]
    table = tensors["bert.embeddings.word_embeddings.weight"]
    return (y @ table.T + tensors[p + "bias"])[..., order]


# --------------------------------------------------------------------------
# Equal to keras-hub.

def test_keras_hub_masked_lm_preset_gives_its_logits(source, read):
    mlm, _, _ = source
    model, tokenizer = read("hub", "mlm")
    assert isinstance(model, MaskedLM) and tokenizer.lowercase
    ids, segments, positions = _batch()
    _assert_mlm_equal(_ours(model, tokenizer, ids, segments, positions),
                      _hub(mlm, ids, segments, positions), tokenizer.order)


def test_keras_hub_classifier_preset_gives_its_logits(source, read):
    _, classifier, _ = source
    model, tokenizer = read("hub", "cls")
    assert isinstance(model, SequenceClassifier) and model.num_classes == 3
    ids, segments, _ = _batch()
    theirs = _hub(classifier, ids, segments)
    bounds.assert_close(_ours(model, tokenizer, ids, segments), theirs,
                        terms=CLASSIFIER_TERMS)
    # The segment ids matter: all zeros gives other logits.
    assert np.abs(_ours(model, tokenizer, ids, 0 * segments)
                  - theirs).max() > 1e-2


@pytest.mark.parametrize("which", ["hf", "sharded"])
def test_huggingface_masked_lm_equals_keras_hub_reading_it(source, read,
                                                          which):
    import keras_hub

    mlm, _, dirs = source
    model, tokenizer = read("hf", which)
    ids, segments, positions = _batch()
    # keras-hub reads the same directory with its own converter.
    backbone = keras_hub.models.BertBackbone.from_preset(dirs[which])
    vectors = np.asarray(backbone({
        "token_ids": ids, "segment_ids": segments,
        "padding_mask": (ids != 0).astype("int32")})["sequence_output"])
    ours = np.asarray(model.text_encoder(
        to_tfattn_ids(ids, tokenizer.order), segment_ids=segments))
    bounds.assert_close(ours[ids != 0], vectors[ids != 0],
                        terms=ENCODER_TERMS)
    at = np.take_along_axis(vectors, positions[..., None], axis=1)
    theirs = _numpy_head(at, fx.hf_tensors(mlm), 1e-12, tokenizer.order)
    bounds.assert_close(
        _ours(model, tokenizer, ids, segments, positions)[..., 1:],
        theirs[..., 1:], terms=MLM_TERMS)


def test_huggingface_classifier_equals_keras_hub(source, read):
    _, classifier, _ = source
    model, tokenizer = read("hf", "hf_cls")
    ids, segments, _ = _batch()
    bounds.assert_close(_ours(model, tokenizer, ids, segments),
                        _hub(classifier, ids, segments),
                        terms=CLASSIFIER_TERMS)


def test_exact_gelu_checkpoints_use_the_exact_gelu(source, tmp_path):
    """hidden_act "gelu" is erf's GELU (keras-hub's blocks always use the
    tanh one, so only the model's options are compared here)."""
    mlm, _, _ = source
    fx.write_huggingface(str(tmp_path), fx.hf_tensors(mlm),
                         fx.hf_config(hidden_act="gelu"))
    model, _ = bert.from_huggingface(str(tmp_path))
    assert model.activation == "gelu" and model.head_activation == "gelu"
    assert model.encoder_layer_norm_epsilon == model.layer_norm_epsilon
    assert model.layer_norm_epsilon == 1e-12


# --------------------------------------------------------------------------
# Round trips.

def _weights(model):
    return [np.asarray(w.numpy()) for w in model.weights]


def _assert_same(a, b):
    assert len(a.weights) == len(b.weights)
    for x, y in zip(_weights(a), _weights(b)):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("which", ["hf", "hf_cls"])
def test_huggingface_round_trip_is_exact(source, read, tmp_path, which):
    from tfattn.interop import hf_files

    _, _, dirs = source
    model, tokenizer = read("hf", which)
    bert.to_huggingface(model, tokenizer, str(tmp_path))
    again, again_tokenizer = bert.from_huggingface(str(tmp_path))
    _assert_same(model, again)
    assert again_tokenizer.vocabulary == tokenizer.vocabulary
    # Every tensor written is the source file's, under the same name.
    written = hf_files.read_tensors(str(tmp_path))
    original = hf_files.read_tensors(dirs[which])
    for name, array in written.items():
        np.testing.assert_array_equal(array, original[name])
    assert hf_files.read_config(str(tmp_path))["architectures"] == (
        hf_files.read_config(dirs[which])["architectures"])


@pytest.mark.parametrize("which", ["mlm", "cls"])
def test_keras_hub_round_trip_is_exact_and_keras_hub_reads_it(
        source, read, tmp_path, which):
    mlm, classifier, _ = source
    model, tokenizer = read("hub", which)
    bert.to_keras_hub(model, tokenizer, str(tmp_path))
    again, _ = bert.from_keras_hub(str(tmp_path))
    _assert_same(model, again)
    task = (mlm, classifier)[which == "cls"]
    cls = type(task)
    theirs = cls.from_preset(str(tmp_path))
    ids, segments, positions = _batch()
    positions = positions if which == "mlm" else None
    bounds.assert_close(_hub(theirs, ids, segments, positions),
                        _hub(task, ids, segments, positions),
                        terms=(MLM_TERMS, CLASSIFIER_TERMS)[which == "cls"])


def test_bert_model_reads_the_encoder_and_keeps_a_fresh_head(source, read,
                                                             tmp_path):
    mlm, _, _ = source
    tensors = {k: v for k, v in fx.hf_tensors(mlm, extras=True).items()
               if not k.startswith("cls.")}
    fx.write_huggingface(str(tmp_path), {
        k[len("bert."):] if k.startswith("bert.") else k: v
        for k, v in tensors.items()}, fx.hf_config("BertModel"))
    model, _ = bert.from_huggingface(str(tmp_path))
    reference, _ = read("hf", "hf")
    _assert_same(model.text_encoder, reference.text_encoder)


# --------------------------------------------------------------------------
# The tokenizer.

@pytest.fixture(scope="module")
def wordpiece():
    """The fixture vocabulary's (lowercasing) WordPieceTokenizer, built
    once: its graph functions trace once for the tests that share it."""
    return WordPieceTokenizer(fx.vocabulary())


@pytest.fixture(scope="module", params=[True, False])
def tokenizers_pair(request, wordpiece):
    import tokenizers

    lower = request.param
    vocab = {t: i for i, t in enumerate(fx.vocabulary())}
    reference = tokenizers.Tokenizer(tokenizers.models.WordPiece(
        vocab, unk_token="[UNK]"))
    reference.normalizer = tokenizers.normalizers.BertNormalizer(
        lowercase=lower, strip_accents=None if lower else False,
        clean_text=True, handle_chinese_chars=True)
    reference.pre_tokenizer = tokenizers.pre_tokenizers.BertPreTokenizer()
    ours = wordpiece if lower else WordPieceTokenizer(fx.vocabulary(),
                                                      lowercase=False)
    return ours, reference


def test_tokenizer_ids_are_hugging_face_tokenizers_bert_ids(
        tokenizers_pair):
    """The reference: Hugging Face tokenizers' BertNormalizer,
    BertPreTokenizer and WordPiece (BertTokenizerFast's pipeline)."""
    ours, reference = tokenizers_pair
    batch = ours.tokenize(SAMPLE)
    bert_ids = ours.bert_ids(SAMPLE).to_list()  # row by row, in one call
    for text, ids, direct in zip(SAMPLE, batch.to_list(), bert_ids):
        want = reference.encode(text, add_special_tokens=False).ids
        assert to_bert_ids(np.asarray(ids, int), ours.order).tolist() == want
        assert direct == want, text
    assert sum(len(r) for r in batch.to_list()) > 60


def test_tokenizer_ids_are_keras_hubs_where_keras_hub_agrees(wordpiece):
    """keras-hub's WordPiece (accents stripped, as BERT's uncased) agrees
    but for its NFKC case folding ("ß" -> "ss", "，" -> ","), and it keeps
    control characters."""
    import keras_hub

    ours = wordpiece
    hub = keras_hub.tokenizers.WordPieceTokenizer(
        vocabulary=fx.vocabulary(), lowercase=True, strip_accents=True)
    folded = {1, 4, 10, 11}
    for i, text in enumerate(SAMPLE):
        mine = to_bert_ids(ours.tokenize(text).numpy(), ours.order)
        theirs = np.asarray(hub(text))
        assert (mine.tolist() == theirs.tolist()) == (i not in folded), text


def test_id_mapping_puts_bert_specials_at_tfattn_ids(wordpiece):
    vocab = fx.vocabulary()
    tokenizer = wordpiece
    order = tokenizer.order
    assert [vocab[b] for b in order[:5]] == [
        "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert sorted(order.tolist()) == list(range(len(vocab)))
    bert_ids = np.arange(len(vocab))
    np.testing.assert_array_equal(
        to_bert_ids(to_tfattn_ids(bert_ids, order), order), bert_ids)
    import tensorflow as tf

    graph = to_tfattn_ids(tf.constant(bert_ids, tf.int32), order)
    np.testing.assert_array_equal(graph.numpy(),
                                  to_tfattn_ids(bert_ids, order))
    # "[MASK]" in the text is split like any text: "[", "mask", "]".
    tfattn_id = {vocab[b]: t for t, b in enumerate(order)}
    assert tokenizer.tokenize("[MASK]").numpy().tolist() == [
        tfattn_id["["], tokenizer.unk_id, tfattn_id["]"]]


def test_detokenize_joins_pieces_and_drops_specials(wordpiece):
    tokenizer = wordpiece
    ids = tokenizer.tokenize(["The fox jumped over Berlin!"]).to_tensor()
    framed = np.pad(ids.numpy(), [[0, 0], [1, 2]])
    framed[0, 0], framed[0, -2] = 2, 3  # [CLS] ... [SEP] [PAD]
    assert tokenizer.detokenize(framed).numpy()[0].decode() == (
        "the fox jumped over berlin !")
    assert tokenizer.detokenize(framed[0]).numpy().decode() == (
        "the fox jumped over berlin !")


def test_tokenizer_runs_from_a_saved_model(wordpiece, tmp_path):
    """In-graph: the tokenizer's functions survive `tf.saved_model`."""
    import tensorflow as tf

    tokenizer = wordpiece
    tf.saved_model.save(tokenizer, str(tmp_path))
    loaded = tf.saved_model.load(str(tmp_path))
    texts = tf.constant(SAMPLE[:5])
    assert loaded._tokenize(texts).to_list() == (
        tokenizer.tokenize(texts).to_list())


# --------------------------------------------------------------------------
# The model options BERT needs, each against NumPy.

def _tiny(cls=MaskedLM, **kwargs):
    model = cls(vocab_size=20, num_layers=1, num_units=8, num_heads=2,
                ffn_units=16, dropout_rate=0.0, max_length=12,
                positional_encoding="learned", scale_embeddings=False,
                **kwargs)
    model.build((None, None))
    return model


def _layer_norm(x, epsilon):
    return (x - x.mean(-1, keepdims=True)) / np.sqrt(
        x.var(-1, keepdims=True) + epsilon)


def test_segment_embeddings_add_a_row_per_segment():
    model = _tiny(type_vocab_size=3)
    encoder = model.text_encoder
    assert model.get_config()["type_vocab_size"] == 3
    ids = np.array([[5, 6, 7, 8]])
    segments = np.array([[0, 2, 1, 2]])
    table = encoder.segment_embedding.embeddings.numpy()
    with_segments = encoder.positions(encoder.token_embedding(ids)).numpy()
    expected = with_segments + table[segments]
    seen = []
    encoder.encoder.call = lambda x, **kw: seen.append(np.asarray(x)) or x
    encoder(ids, segment_ids=segments)
    encoder(ids)
    # Two elementwise sums: token + position, + segment.
    bounds.assert_close(seen[0], expected, terms=2)
    bounds.assert_close(seen[1], with_segments + table[0], terms=2)


def test_encoder_epsilon_reaches_every_layer_norm():
    model = _tiny(normalize_embeddings=True,
                  encoder_layer_norm_epsilon=1e-12)
    encoder = model.text_encoder
    block = encoder.encoder.blocks[0]
    epsilons = {encoder.embedding_layer_norm.epsilon,
                block.self_attention_layer_norm.epsilon,
                block.feed_forward_layer_norm.epsilon}
    assert epsilons == {1e-12}
    x = np.random.default_rng(0).normal(size=(2, 8)).astype("float32") * 1e-4
    bounds.assert_close(
        np.asarray(encoder.embedding_layer_norm(x)),
        _layer_norm(x, 1e-12) * encoder.embedding_layer_norm.gamma.numpy()
        + encoder.embedding_layer_norm.beta.numpy(),
        terms=4 * x.shape[-1] + 2)  # a layer norm over C, gamma and beta
    default = _tiny(normalize_embeddings=True)
    assert default.encoder_layer_norm_epsilon is None
    assert default.text_encoder.embedding_layer_norm.epsilon != 1e-12


def test_pooler_is_dense_tanh_on_the_first_token():
    model = _tiny(SequenceClassifier, pooling="pooler", num_classes=3)
    ids = np.array([[2, 5, 6, 3, 0]])
    vectors = np.asarray(model.text_encoder(ids))
    pooler, out = model.pooler_dense, model.output_dense
    pooled = np.tanh(vectors[:, 0] @ pooler.kernel.numpy()
                     + pooler.bias.numpy())
    expected = pooled @ out.kernel.numpy() + out.bias.numpy()
    width = vectors.shape[-1]
    # Two Dense layers over C; bias, tanh, bias.
    bounds.assert_close(np.asarray(model(ids)), expected,
                        terms=2 * width + 3)
    assert model.get_config()["pooling"] == "pooler"


def test_masked_lm_head_is_berts():
    """Dense + exact GELU + layer norm, then the tied table plus a bias."""
    model = _tiny(layer_norm_epsilon=1e-12, head_activation="gelu")
    model.head_bias.assign(np.linspace(-1, 1, 20).astype("float32"))
    ids = np.array([[2, 5, 6, 3]])
    x = np.asarray(model.text_encoder(ids))
    y = x @ model.head_dense.kernel.numpy() + model.head_dense.bias.numpy()
    y = 0.5 * y * (1 + erf(y / np.sqrt(2)))
    y = _layer_norm(y, 1e-12) * model.head_norm.gamma.numpy() + (
        model.head_norm.beta.numpy())
    table = model.token_embedding.embeddings.numpy().copy()
    table[0] = 0.0  # id 0 is padding: a zero row
    expected = y @ table.T + model.head_bias.numpy()
    width = x.shape[-1]
    # The Dense over C, its bias and the GELU (5 elementwise ops), the
    # layer norm (4·C, gamma, beta), the projection over C and its bias.
    bounds.assert_close(np.asarray(model(ids)), expected,
                        terms=width + 6 + 4 * width + 2 + width + 1)


def test_new_options_survive_get_config():
    model = _tiny(SequenceClassifier, pooling="pooler", type_vocab_size=2,
                  encoder_layer_norm_epsilon=1e-12)
    clone = SequenceClassifier.from_config(model.get_config())
    clone.build((None, None))
    assert clone.type_vocab_size == 2 and clone.pooling == "pooler"
    assert clone.encoder_layer_norm_epsilon == 1e-12
    assert len(clone.weights) == len(model.weights)
    assert keras.saving.serialize_keras_object(clone)
