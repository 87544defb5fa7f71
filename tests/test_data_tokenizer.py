"""Tests for the joint SentencePiece vocabulary and its in-graph tokenizer."""

import itertools
import os

import pytest
import tensorflow as tf

from tfattn.data import BOS_ID
from tfattn.data import EOS_ID
from tfattn.data import PAD_ID
from tfattn.data import UNK_ID
from tfattn.data import SubwordTokenizer
from tfattn.data import load_tokenizer
from tfattn.data import train_tokenizer
from tfattn.data import tokenizer as tokenizer_lib


def _capitalize(text):
    return text[0].upper() + text[1:]


def _corpus():
    """A few hundred short English and German sentences."""
    en_subjects = ["a man", "a woman", "two dogs", "the child", "three girls"]
    de_subjects = [
        "ein Mann",
        "eine Frau",
        "zwei Hunde",
        "das Kind",
        "drei Mädchen",
    ]
    en_verbs = ["runs", "sits", "plays", "waits", "jumps"]
    de_verbs = ["läuft", "sitzt", "spielt", "wartet", "springt"]
    en_places = [
        "in the park.",
        "on the street.",
        "near a river.",
        "at the beach.",
    ]
    de_places = ["im Park.", "auf der Straße.", "an einem Fluss.", "am Strand."]
    en, de = [], []
    for s, v, p in itertools.product(range(5), range(5), range(4)):
        en.append(_capitalize(f"{en_subjects[s]} {en_verbs[v]} {en_places[p]}"))
        de.append(_capitalize(f"{de_subjects[s]} {de_verbs[v]} {de_places[p]}"))
    return en + de  # 200 + 200 sentences.


SENTENCES = _corpus()


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    model_dir = tmp_path_factory.mktemp("spm")
    tokenizer = train_tokenizer(SENTENCES, model_dir, vocab_size=64)
    return tokenizer, model_dir


def test_files_written_without_leftovers(trained):
    tokenizer, model_dir = trained
    assert sorted(os.listdir(model_dir)) == ["spm.model", "spm.vocab"]
    with open(model_dir / "spm.vocab", encoding="utf-8") as f:
        vocab = f.read().splitlines()
    assert len(vocab) == tokenizer.vocab_size
    assert [line.split("\t")[0] for line in vocab[:4]] == [
        "<pad>",
        "<unk>",
        "<s>",
        "</s>",
    ]


def test_special_ids(trained):
    tokenizer, _ = trained
    assert (PAD_ID, UNK_ID, BOS_ID, EOS_ID) == (0, 1, 2, 3)
    assert (
        tokenizer.pad_id,
        tokenizer.unk_id,
        tokenizer.bos_id,
        tokenizer.eos_id,
    ) == (0, 1, 2, 3)
    assert [tokenizer.id_to_piece(i) for i in range(4)] == [
        "<pad>",
        "<unk>",
        "<s>",
        "</s>",
    ]
    ids = tokenizer.tokenize(SENTENCES).flat_values.numpy()
    assert ids.min() >= 4  # Plain text never yields pad, unk, bos or eos.
    assert ids.max() < tokenizer.vocab_size
    unseen = tokenizer.tokenize("a € sign").numpy()
    assert UNK_ID in unseen


def test_vocab_size_comes_from_the_model(trained):
    tokenizer, model_dir = trained
    assert tokenizer.vocab_size == 64
    assert load_tokenizer(model_dir).vocab_size == 64


def test_too_large_vocab_is_capped(tmp_path, caplog):
    tokenizer = train_tokenizer(SENTENCES, tmp_path, vocab_size=8000)
    assert 4 < tokenizer.vocab_size < 8000
    assert any("supports at most" in r.getMessage() for r in caplog.records)
    assert load_tokenizer(tmp_path).vocab_size == tokenizer.vocab_size


def test_too_small_vocab_is_an_error(tmp_path):
    with pytest.raises(
        ValueError, match="argument `vocab_size`, expected at least"
    ):
        train_tokenizer(SENTENCES, tmp_path, vocab_size=10)
    assert not os.listdir(tmp_path)


def test_round_trip(trained):
    tokenizer, model_dir = trained
    ids = tokenizer.tokenize(SENTENCES)
    assert isinstance(ids, tf.RaggedTensor) and ids.dtype == tf.int32
    text = [t.decode("utf-8") for t in tokenizer.detokenize(ids).numpy()]
    assert text == SENTENCES
    # Unseen combinations of seen words survive too.
    new = ["Zwei Hunde spielen am Fluss.", "The woman waits."]
    assert [
        t.decode()
        for t in load_tokenizer(model_dir)
        .detokenize(tokenizer.tokenize(new))
        .numpy()
    ] == new


def test_detokenize_dense_padding_and_eos(trained):
    tokenizer, _ = trained
    pieces = tokenizer.tokenize("A man runs in the park.").numpy().tolist()
    other = tokenizer.tokenize("Two dogs").numpy().tolist()
    width = len(pieces) + 4
    rows = [
        [BOS_ID] + pieces + [EOS_ID] + [PAD_ID] * 2,
        # Ids after the first eos are dropped.
        other + [EOS_ID] + pieces[: width - len(other) - 1],
    ]
    dense = tf.constant(rows, tf.int32)
    assert tokenizer.detokenize(dense).numpy().tolist() == [
        b"A man runs in the park.",
        b"Two dogs",
    ]
    kept = tokenizer.detokenize(dense, stop_at_eos=False).numpy()[1].decode()
    assert kept.startswith("Two dogs") and len(kept) > len("Two dogs")
    assert (
        tokenizer.detokenize(tf.constant(pieces)).numpy()
        == b"A man runs in the park."
    )


def test_works_in_graph(trained):
    tokenizer, _ = trained

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def round_trip(text):
        return tokenizer.detokenize(tokenizer.tokenize(text))

    out = round_trip(tf.constant(SENTENCES[:3]))
    assert [t.decode() for t in out.numpy()] == SENTENCES[:3]
    ds = tf.data.Dataset.from_tensor_slices(SENTENCES[:4]).map(
        tokenizer.tokenize
    )
    first = next(iter(ds))
    assert first.dtype == tf.int32 and first.shape.rank == 1


def test_saved_model_round_trip(trained, tmp_path):
    tokenizer, _ = trained
    module = tf.Module()
    module.tokenizer = tokenizer
    module.round_trip = tf.function(
        lambda text: tokenizer.detokenize(tokenizer.tokenize(text)),
        input_signature=[tf.TensorSpec([None], tf.string)],
    )
    tf.saved_model.save(module, str(tmp_path / "saved"))
    loaded = tf.saved_model.load(str(tmp_path / "saved"))
    out = loaded.round_trip(tf.constant(SENTENCES[:2]))
    assert [t.decode() for t in out.numpy()] == SENTENCES[:2]


def test_training_is_deterministic(trained, tmp_path):
    _, model_dir = trained
    train_tokenizer(SENTENCES, tmp_path, vocab_size=64)
    with (
        open(model_dir / "spm.model", "rb") as a,
        open(tmp_path / "spm.model", "rb") as b,
    ):
        assert a.read() == b.read()


def test_split_digits(tmp_path):
    tokenizer = train_tokenizer(
        ["4072", "four thousand seventy two", "4444 44"] * 20,
        tmp_path,
        vocab_size=40,
        split_digits=True,
    )
    pieces = [
        tokenizer.id_to_piece(i) for i in tokenizer.tokenize("4444").numpy()
    ]
    assert [p.lstrip("\u2581") for p in pieces if p != "\u2581"] == ["4"] * 4


def test_write_is_atomic(trained, tmp_path, monkeypatch):
    target = tmp_path / "model"
    train_tokenizer(SENTENCES, target, vocab_size=64)
    before = {n: (target / n).read_bytes() for n in ("spm.model", "spm.vocab")}
    real_gfile = tokenizer_lib.tf.io.gfile.GFile

    class FailingGFile(real_gfile):
        """Fails half-way through writing the vocab file."""

        def write(self, data):
            if ".vocab.tmp-" in self.name:
                super().write(data[: len(data) // 2])
                raise OSError("disk full")
            return super().write(data)

    monkeypatch.setattr(tokenizer_lib.tf.io.gfile, "GFile", FailingGFile)
    with pytest.raises(OSError, match="disk full"):
        train_tokenizer(SENTENCES, target, vocab_size=50)
    # Both old files are intact and no temporary file is left behind.
    for name, data in before.items():
        assert (target / name).read_bytes() == data
    assert sorted(os.listdir(target)) == ["spm.model", "spm.vocab"]

    def broken_rename(src, dst, overwrite=False):
        raise OSError("rename failed")

    monkeypatch.setattr(tokenizer_lib.tf.io.gfile, "GFile", real_gfile)
    monkeypatch.setattr(tokenizer_lib.tf.io.gfile, "rename", broken_rename)
    with pytest.raises(OSError, match="rename failed"):
        train_tokenizer(SENTENCES, target, vocab_size=50)
    assert (target / "spm.model").read_bytes() == before["spm.model"]
    assert sorted(os.listdir(target)) == ["spm.model", "spm.vocab"]


def test_load_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="spm.model: file not found"):
        load_tokenizer(tmp_path)
    (tmp_path / "spm.model").write_bytes(b"not a model")
    with pytest.raises(ValueError, match="spm.model: .*argument `model_proto`"):
        load_tokenizer(tmp_path)


def test_rejects_models_with_other_special_ids(tmp_path):
    import io

    import sentencepiece as spm

    writer = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(SENTENCES),
        model_writer=writer,
        vocab_size=60,
        minloglevel=2,  # Defaults: unk=0, bos=1, eos=2, no pad.
    )
    with pytest.raises(ValueError, match="pad=0, unk=1, bos=2, eos=3"):
        SubwordTokenizer(writer.getvalue())


def test_hparams_choices_are_the_tokenizers():
    # tfattn.config keeps its own copies so that it needs no TensorFlow.
    from tfattn import config

    assert config.TOKENIZER_MODEL_TYPES == tokenizer_lib.MODEL_TYPES
    assert config.TOKENIZER_NORMALIZATIONS == tokenizer_lib.NORMALIZATIONS


def test_case_folding_normalization(trained, tmp_path):
    default, _ = trained
    assert (default.normalization, default.folds_case) == ("nmt_nfkc", False)
    folded = train_tokenizer(
        SENTENCES, tmp_path, vocab_size=64, normalization="nmt_nfkc_cf"
    )
    assert (folded.normalization, folded.folds_case) == ("nmt_nfkc_cf", True)
    text = "Ein MANN Läuft in The Park."
    # The rule lives in spm.model: the reloaded tokenizer folds case too,
    # in-graph, and its output is the lowercased input.
    reloaded = load_tokenizer(tmp_path)
    assert reloaded.folds_case
    ids = reloaded.tokenize([text])
    assert reloaded.detokenize(ids).numpy()[0].decode() == text.lower()
    assert ids.to_list() == folded.tokenize([text.lower()]).to_list()
    cased = default.detokenize(default.tokenize([text])).numpy()[0].decode()
    assert cased != text.lower()


def test_invalid_arguments(tmp_path):
    with pytest.raises(ValueError, match="argument `vocab_size`"):
        train_tokenizer(SENTENCES, tmp_path, vocab_size=0)
    with pytest.raises(ValueError, match="argument `model_type`"):
        train_tokenizer(SENTENCES, tmp_path, model_type="wordpiece")
    with pytest.raises(ValueError, match="argument `sentences`"):
        train_tokenizer(["", "  "], tmp_path)
    with pytest.raises(ValueError, match="argument `sentences`"):
        train_tokenizer([1, 2], tmp_path)
    with pytest.raises(ValueError, match="argument `normalization`.*'nfc'"):
        train_tokenizer(SENTENCES, tmp_path, normalization="nfc")
    assert not os.listdir(tmp_path)


# Subword regularisation (`sampling_alpha`).

_SAMPLED_SENTENCE = "Three girls jump near a river."
_SAMPLES = 300


@pytest.fixture(scope="module", params=["bpe", "unigram"])
def sampling_model(request, tmp_path_factory):
    model_dir = tmp_path_factory.mktemp(f"spm_{request.param}")
    tokenizer = train_tokenizer(SENTENCES, model_dir, vocab_size=64,
                                model_type=request.param)
    return tokenizer


def _python_samples(tokenizer, alpha):
    """Piece counts of SentencePiece's own Python sampler: the reference."""
    import sentencepiece as spm
    processor = spm.SentencePieceProcessor(model_proto=tokenizer.model_proto)
    return [
        len(processor.encode(_SAMPLED_SENTENCE, enable_sampling=True,
                             alpha=alpha, nbest_size=-1))
        for _ in range(_SAMPLES)
    ]


def test_sampling_draws_segmentations_of_the_same_text(sampling_model):
    best = sampling_model.tokenize(_SAMPLED_SENTENCE).numpy().tolist()
    sampler = sampling_model.sampling(0.3)
    assert sampler.sampling_alpha == 0.3
    assert sampler.vocab_size == sampling_model.vocab_size
    # One batch of copies: each row draws its own segmentation (one call,
    # not one eager call per sample; separate calls drawing anew are
    # test_bpe_dropout_splits_more_as_alpha_grows's and, in a tf.data map,
    # test_no_sampling_by_default_and_in_graph's).
    samples = sampler.tokenize([_SAMPLED_SENTENCE] * _SAMPLES).to_list()
    assert len(samples) == _SAMPLES
    assert len({tuple(s) for s in samples}) > 1
    assert any(s != best for s in samples)
    # Every sample is a segmentation of the same text.
    texts = set(sampler.detokenize(tf.ragged.constant(samples)).numpy())
    assert texts == {_SAMPLED_SENTENCE.encode()}
    # The same distribution as SentencePiece's Python sampler: mean piece
    # counts within 5 standard errors of each other.
    ours = tf.constant([len(s) for s in samples], tf.float64)
    theirs = tf.constant(_python_samples(sampling_model, 0.3), tf.float64)
    spread = tf.sqrt((tf.math.reduce_variance(ours)
                      + tf.math.reduce_variance(theirs)) / _SAMPLES)
    gap = abs(float(tf.reduce_mean(ours) - tf.reduce_mean(theirs)))
    # (Equal piece counts throughout: spread 0, means equal exactly.)
    assert gap <= 5 * float(spread), (gap, float(spread))


def test_bpe_dropout_splits_more_as_alpha_grows(trained, tmp_path):
    bpe = train_tokenizer(SENTENCES, tmp_path, vocab_size=64,
                          model_type="bpe")
    best = len(bpe.tokenize(_SAMPLED_SENTENCE).numpy())
    means = []
    for alpha in (0.05, 0.5, 0.95):
        sampler = bpe.sampling(alpha)
        counts = [len(sampler.tokenize(_SAMPLED_SENTENCE).numpy())
                  for _ in range(100)]
        means.append(sum(counts) / len(counts))
    assert best <= means[0] < means[1] < means[2]
    # With nearly every merge dropped, nearly every character is a piece.
    assert means[2] > 0.8 * len(_SAMPLED_SENTENCE)


def test_no_sampling_by_default_and_in_graph(trained):
    tokenizer, _ = trained
    assert tokenizer.sampling_alpha == 0.0
    assert tokenizer.sampling(0.0) is tokenizer
    first = tokenizer.tokenize(_SAMPLED_SENTENCE).numpy().tolist()
    assert all(tokenizer.tokenize(_SAMPLED_SENTENCE).numpy().tolist() == first
               for _ in range(20))
    sampler = tokenizer.sampling(0.5)
    dataset = tf.data.Dataset.from_tensors(_SAMPLED_SENTENCE).repeat(40).map(
        sampler.tokenize)
    lengths = {int(tf.size(ids)) for ids in dataset}
    assert len(lengths) > 1


def test_sampling_alpha_errors(trained, tmp_path):
    tokenizer, _ = trained
    for bad in (-0.1, 1.0, "0.1", True, None):
        with pytest.raises(ValueError,
                           match=r"argument `sampling_alpha`.*"
                                 rf"Received: sampling_alpha={bad!r}"):
            SubwordTokenizer(tokenizer.model_proto, sampling_alpha=bad)
    char = train_tokenizer(SENTENCES, tmp_path, vocab_size=40,
                           model_type="char")
    with pytest.raises(ValueError, match=r"type 'char'.*sampling_alpha=0.1"):
        char.sampling(0.1)
