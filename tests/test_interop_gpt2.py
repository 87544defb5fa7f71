"""GPT-2 checkpoints in tfattn (`tfattn.interop.gpt2`): equal to keras-hub
on the same weights, from a Hugging Face directory and a keras-hub preset,
greedy continuations identical, round trips exact; the tokenizer's ids are
keras-hub's and Hugging Face tokenizers' plus the offset; and the
`CausalLM` options GPT-2 needs, each against NumPy from the formula.

The checkpoints are a tiny random GPT-2 (tests/gpt2_fixtures.py) that
keras-hub builds and saves, written here as Hugging Face files too; the
refusals are in tests/test_interop_gpt2_refusals.py.
"""

import os

import keras
import numpy as np
import pytest

from tests import bounds
from tests import gpt2_fixtures as fx
from tests.test_models_causal_lm import VOCAB
from tests.test_models_causal_lm import tiny_lm
from tests.test_models_causal_lm_references import _lm_params
from tfattn.decoding import samplers
from tfattn.interop import gpt2
from tfattn.interop.gpt2_tokenizer import GPT2Tokenizer
from tfattn.interop.gpt2_tokenizer import to_gpt2_ids
from tfattn.interop.gpt2_tokenizer import to_tfattn_ids

SAMPLE = ["The theatre in Berlin is there.", "Grüße aus Köln, Straße",
          "café naïve résumé Ærø", "emoji 😀🎉 and 👍🏽!",
          "東京とソウル 你好，世界",
          "a  b\n\n  c\t\td   ", "   leading and trailing  ", "",
          "<|endoftext|>the end<|endoftext|>", "don't, we'll 1234 x=y+1"]


def _gpt2_terms(length, vocab_size):
    """To one logit of the fixtures' GPT-2 over `length` tokens: the stack,
    its final layer norm (4·C), the tied projection and the vocabulary."""
    return 4 * fx.WIDTH + bounds.stack_terms(
        fx.LAYERS, fx.WIDTH, fx.FFN, length, vocab_size)


# To one logit of `tiny_lm` (2 pre-norm layers, width 16, FFN 32) over
# `_IDS`' 6 tokens: the stack, its final layer norm (4·C) and the vocabulary.
TINY_TERMS = 4 * 16 + bounds.stack_terms(2, 16, 32, 6, VOCAB)


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """(keras-hub GPT2CausalLM, its preset dir, a HF dir of its weights,
    the same sharded, the vocabulary size n)."""
    hub = fx.hub_model()
    root = tmp_path_factory.mktemp("gpt2")
    preset, hf, sharded = (str(root / name) for name in
                           ("preset", "hf", "sharded"))
    hub.save_to_preset(preset)
    vocab, merges = fx.vocabulary()
    tensors = fx.hf_tensors(hub.backbone)
    for directory, shards in ((hf, 1), (sharded, 3)):
        fx.write_huggingface(directory, tensors, fx.hf_config(len(vocab)),
                             vocab, merges, shards=shards)
    return hub, preset, hf, sharded, len(vocab)


@pytest.fixture(scope="module")
def preset_model(source):
    """(tfattn's model, its tokenizer) read from the keras-hub preset, for
    the tests that only read them (generate keeps its compiled searches on
    the model, so tests of the same shapes share them)."""
    return gpt2.from_keras_hub(source[1])


def _prompts(n):
    """Two GPT-2 prompts of equal length, starting with <|endoftext|>."""
    rng = np.random.default_rng(0)
    ids = rng.integers(0, n - 1, (2, 7))
    ids[:, 0] = n - 1
    return ids


def _hub_logits(hub, ids):
    return np.asarray(hub({"token_ids": ids,
                           "padding_mask": np.ones_like(ids)}))


def _ours(model, ids, n):
    return np.asarray(model(to_tfattn_ids(ids, n - 1)))


def _assert_equal_logits(ours, theirs, n):
    """tfattn's logits at ids >= 3 are GPT-2's (id g at g + 4, e at 3);
    the added ids are masked."""
    terms = _gpt2_terms(ours.shape[1], n)
    bounds.assert_close(ours[..., 4:], theirs[..., :n - 1], terms=terms,
                        scale=np.abs(theirs).max())
    bounds.assert_close(ours[..., 3], theirs[..., n - 1], terms=terms,
                        scale=np.abs(theirs).max())
    assert (ours[..., :3] == -1e9).all()
    assert np.abs(theirs).max() > 1.0  # not a vacuous comparison


# --------------------------------------------------------------------------
# Equal to keras-hub.

def test_keras_hub_preset_gives_keras_hub_logits(source, preset_model):
    hub, _, _, _, n = source
    model, tokenizer = preset_model
    assert tokenizer.vocab_size == model.vocab_size == n + 3
    ids = _prompts(n)
    _assert_equal_logits(_ours(model, ids, n), _hub_logits(hub, ids), n)


@pytest.mark.parametrize("which", ["single", "sharded"])
def test_huggingface_directory_gives_keras_hubs_logits(source, which):
    import keras_hub

    hub, _, hf, sharded, n = source
    directory = hf if which == "single" else sharded
    model, _ = gpt2.from_huggingface(directory)
    ids = _prompts(n)
    # keras-hub reads the same directory with its own converter.
    theirs = keras_hub.models.GPT2CausalLM.from_preset(hf)
    _assert_equal_logits(_ours(model, ids, n), _hub_logits(theirs, ids), n)
    _assert_equal_logits(_ours(model, ids, n), _hub_logits(hub, ids), n)


def _keras_hub_continuations(preset, ids, new, sampler):
    """keras-hub's `GPT2CausalLM` of `preset`: `new` tokens after each
    prompt row of `ids` (GPT-2 ids), with `sampler`, no stop token."""
    import keras_hub

    theirs = keras_hub.models.GPT2CausalLM.from_preset(preset)
    theirs.preprocessor = None
    theirs.compile(sampler=sampler, jit_compile=False)
    padded = np.pad(ids, [[0, 0], [0, new]])
    mask = np.arange(padded.shape[1]) < ids.shape[1]
    return theirs.generate({"token_ids": padded,
                            "padding_mask": padded * 0 + mask},
                           stop_token_ids=None)["token_ids"][:, ids.shape[1]:]


def test_greedy_continuations_are_keras_hubs(source, preset_model):
    import keras_hub

    _, preset, _, _, n = source
    model, _ = preset_model
    ids, new = _prompts(n), 8  # test_beam_search_is_keras_hubs' shapes
    out = _keras_hub_continuations(preset, ids, new,
                                   keras_hub.samplers.GreedySampler())
    ours, _ = model.generate(to_tfattn_ids(ids, n - 1), max_new_tokens=new,
                             stop_token_ids=None, jit_compile=False)
    np.testing.assert_array_equal(to_gpt2_ids(ours, n - 1), out)
    assert len(set(out.ravel().tolist())) > 2  # not one repeated token


def test_beam_search_is_keras_hubs(source, preset_model):
    """Beam 3 over fixed-length continuations (no stop token), where both
    searches rank by the sum of log-probabilities (tfattn's length penalty
    0): the best continuation of every row is keras-hub's."""
    import keras_hub

    _, preset, _, _, n = source
    model, _ = preset_model
    ids, new = _prompts(n), 8
    out = _keras_hub_continuations(preset, ids, new,
                                   keras_hub.samplers.BeamSampler(3))
    ours, _ = model.generate(to_tfattn_ids(ids, n - 1), max_new_tokens=new,
                             sampler=samplers.BeamSampler(3, alpha=0.0),
                             stop_token_ids=None, jit_compile=False)
    np.testing.assert_array_equal(to_gpt2_ids(ours, n - 1), out)
    greedy, _ = model.generate(to_tfattn_ids(ids, n - 1), max_new_tokens=new,
                               stop_token_ids=None, jit_compile=False)
    assert (np.asarray(greedy) != np.asarray(ours)).any()  # beam mattered


def test_generation_stops_at_end_of_text(preset_model):
    model, _ = preset_model
    ids, _ = model.generate([[2, 10, 11], [2, 200, 3]], max_new_tokens=16,
                            sampler="random", jit_compile=False)
    # The added ids are never emitted; a row stops after GPT-2's
    # <|endoftext|> (tfattn's EOS, the default stop token).
    assert not np.isin(ids, [1, 2]).any()
    for row in ids:
        stop = np.flatnonzero(row == 3)
        if stop.size:
            assert not row[stop[0] + 1:].any()


# --------------------------------------------------------------------------
# Round trips.

def _weights(model):
    return [np.asarray(w.numpy()) for w in model.weights]


def test_huggingface_round_trip_is_exact_and_keras_hub_reads_it(
        source, tmp_path):
    import keras_hub

    hub, _, hf, _, n = source
    model, tokenizer = gpt2.from_huggingface(hf)
    out = str(tmp_path / "out")
    gpt2.to_huggingface(model, tokenizer, out)
    back, back_tokenizer = gpt2.from_huggingface(out)
    for a, b in zip(_weights(model), _weights(back)):
        np.testing.assert_array_equal(a, b)
    config = dict(model.get_config(), name=None)
    assert dict(back.get_config(), name=None) == config
    assert back_tokenizer.vocabulary == tokenizer.vocabulary
    assert back_tokenizer.merges == tokenizer.merges
    ids = _prompts(n)
    theirs = keras_hub.models.GPT2CausalLM.from_preset(out)
    _assert_equal_logits(_ours(model, ids, n), _hub_logits(theirs, ids), n)
    import safetensors.numpy

    names = set(safetensors.numpy.load_file(
        os.path.join(out, "model.safetensors")))
    assert "transformer.h.1.attn.c_attn.weight" in names
    assert "lm_head.weight" not in names  # tied, as save_pretrained omits


def test_keras_hub_round_trip_is_exact_and_keras_hub_reads_it(
        source, preset_model, tmp_path):
    import keras_hub

    hub, _, _, _, n = source
    model, tokenizer = preset_model
    out = str(tmp_path / "preset")
    gpt2.to_keras_hub(model, tokenizer, out)
    back, _ = gpt2.from_keras_hub(out)
    for a, b in zip(_weights(model), _weights(back)):
        np.testing.assert_array_equal(a, b)
    theirs = keras_hub.models.GPT2CausalLM.from_preset(out)
    for a, b in zip(hub.backbone.weights, theirs.backbone.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert theirs.preprocessor.tokenizer("the theme").tolist() == (
        hub.preprocessor.tokenizer("the theme").tolist())


def test_a_tfattn_model_exports_and_reads_back_equal(source, tmp_path):
    """A GPT-2-shaped model trained in tfattn (random here): its never-read
    rows 0-2 are dropped by the export, its logits kept."""
    _, _, hf, _, n = source
    imported, tokenizer = gpt2.from_huggingface(hf)
    keras.utils.set_random_seed(5)
    model = type(imported).from_config(imported.get_config())
    model.build((None, None))
    assert np.abs(model.token_embedding.embeddings.numpy()[:3]).max() > 0
    out = str(tmp_path / "native")
    gpt2.to_huggingface(model, tokenizer, out)
    back, _ = gpt2.from_huggingface(out)
    ids = np.array([[2, 9, 40, 200, 3, 17]])
    bounds.assert_close(np.asarray(back(ids)), np.asarray(model(ids)),
                        terms=_gpt2_terms(ids.shape[1], n))


# --------------------------------------------------------------------------
# The tokenizer.

@pytest.fixture(scope="module")
def tokenizer():
    vocab, merges = fx.vocabulary()
    return GPT2Tokenizer(vocab, merges)


def test_tokenizer_ids_are_keras_hubs_plus_the_offset(tokenizer):
    import keras_hub

    vocab, merges = fx.vocabulary()
    e = len(vocab) - 1
    theirs = keras_hub.models.GPT2Tokenizer(vocabulary=vocab, merges=merges)
    ours = tokenizer.tokenize(SAMPLE)
    for row, text in enumerate(SAMPLE):
        want = [g + 4 if g != e else 3 for g in
                np.asarray(theirs(text)).tolist()]
        assert ours[row].numpy().tolist() == want, text
    # A scalar gives a 1-D tensor; in a tf.data pipeline, the same ids.
    assert tokenizer.tokenize(SAMPLE[0]).numpy().tolist() == (
        ours[0].numpy().tolist())
    import tensorflow as tf

    mapped = tf.data.Dataset.from_tensor_slices(SAMPLE).batch(4).map(
        tokenizer.tokenize)
    rows = [r.tolist() for batch in mapped for r in batch.numpy()]
    assert rows == [r.tolist() for r in ours.numpy()]


def test_tokenizer_ids_are_hugging_face_tokenizers_byte_level_bpe(
        tokenizer):
    """The reference: Hugging Face tokenizers' BPE with GPT-2's byte-level
    pre-tokenizer, as GPT-2's tokenizer.json configures it."""
    import tokenizers  # keras-hub's own dependency: always installed here
    vocab, merges = fx.vocabulary()
    reference = tokenizers.Tokenizer(tokenizers.models.BPE(
        vocab=vocab, merges=[tuple(m.split(" ")) for m in merges]))
    reference.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(
        add_prefix_space=False)
    reference.add_special_tokens(["<|endoftext|>"])
    ours = tokenizer.tokenize(SAMPLE)
    for row, text in enumerate(SAMPLE):
        want = to_tfattn_ids(np.array(reference.encode(text).ids, int),
                             len(vocab) - 1)
        assert ours[row].numpy().tolist() == want.tolist(), text


def test_detokenize_gives_the_text_back(tokenizer):
    ids = tokenizer.tokenize(SAMPLE[:8])
    texts = [t.decode("utf-8") for t in tokenizer.detokenize(ids).numpy()]
    assert texts == SAMPLE[:8]
    # Padding, UNK and BOS decode to nothing; EOS stops a row.
    row = [2] + tokenizer.tokenize("the end").numpy().tolist()
    assert tokenizer.detokenize(row + [3, 50, 0]).numpy() == b"the end"
    assert tokenizer.detokenize(row + [1, 3, 72], stop_at_eos=False).numpy(
    ) == b"the ende"  # GPT-2's id 68 is "e"


@pytest.mark.parametrize("texts", [SAMPLE, [""], []])
def test_eager_and_graph_paths_agree(tokenizer, texts):
    # Eagerly the tokenizer runs keras-hub op by op (no trace); in a graph,
    # its traced function: the same ids and texts, down to no text at all.
    import tensorflow as tf

    texts = tf.constant(texts, tf.string)
    eager = tokenizer.tokenize(texts)
    graph = tf.function(tokenizer.tokenize)(texts)
    assert isinstance(eager, tf.RaggedTensor) and eager.dtype == tf.int32
    assert eager.to_list() == graph.to_list()
    ids = graph.to_tensor()
    assert (tokenizer.detokenize(ids).numpy().tolist()
            == tf.function(tokenizer.detokenize)(ids).numpy().tolist())


def test_id_mapping_is_one_to_one_wherever_end_of_text_sits():
    g = np.arange(10)
    for e in (9, 4, 0):
        t = to_tfattn_ids(g, e)
        assert sorted(t.tolist()) == list(range(3, 13))  # n + 3 ids, 3..
        assert t[e] == 3
        np.testing.assert_array_equal(to_gpt2_ids(t, e), g)
        assert to_gpt2_ids(np.array([0, 1, 2]), e).tolist() == [-1, -1, e]


# --------------------------------------------------------------------------
# The CausalLM options GPT-2 needs, each against NumPy from the formula.

def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


def test_gelu_tanh_is_the_tanh_formula():
    from tests import reference_numpy_lm as ref
    from tfattn.models.layout import gelu_tanh

    x = np.linspace(-6, 6, 241).astype("float32")
    got = np.asarray(gelu_tanh(x))
    # 9 elementwise ops: x³ (2), · 0.044715, + x, · √(2/π), tanh, 1 +,
    # · x, · 0.5.
    bounds.assert_close(got, _gelu_tanh(x.astype(np.float64)), terms=9)
    assert np.abs(got - ref.gelu(x)).max() > 1e-4  # not the exact GELU


def _check_forward(lm, ids, **reference):
    from tests import reference_numpy_lm as ref

    lm.positions.embeddings.assign(
        np.random.default_rng(0).normal(0, 0.5, (48, 16)))
    want = ref.causal_lm(_lm_params(lm), ids, num_heads=2,
                         scale_embeddings=False, **reference)
    got = np.asarray(lm(ids))
    return got, want


_GPT2_LAYOUT = dict(positional_encoding="learned", scale_embeddings=False,
                    embeddings_initializer=keras.initializers.RandomNormal(
                        stddev=0.5))
_IDS = np.array([[2, 5, 6, 7, 8, 9], [2, 4, 5, 0, 0, 0]], "int32")


@pytest.mark.parametrize("option, reference", [
    (dict(activation="gelu_tanh"), dict(activation=_gelu_tanh)),
    (dict(layer_norm_epsilon=0.5), dict(epsilon=0.5)),
], ids=["gelu_tanh", "layer_norm_epsilon"])
def test_option_equals_numpy_from_the_formula(option, reference):
    from tests import reference_numpy_lm as ref

    lm = tiny_lm(seed=11, **_GPT2_LAYOUT, **option)
    got, want = _check_forward(lm, _IDS, **dict(
        dict(activation=ref.relu), **reference))
    real = _IDS > 0
    bounds.assert_close(got[real], want[real], terms=TINY_TERMS)
    # Without the option the model is another one: the test can fail.
    _, other = _check_forward(lm, _IDS, activation=ref.relu)
    assert np.abs(other[real] - want[real]).max() > 1e-3
    config = lm.get_config()
    assert {k: config[k] for k in option} == option
    assert type(lm).from_config(config).get_config() == config


def test_bos_is_eos_reads_bos_as_eos():
    lm = tiny_lm(seed=11, bos_is_eos=True, **_GPT2_LAYOUT)
    got, want = _check_forward(lm, np.where(_IDS == 2, 3, _IDS))
    real = _IDS > 0
    bounds.assert_close(got[real], want[real], terms=TINY_TERMS)
    plain = tiny_lm(seed=11, **_GPT2_LAYOUT)
    plain.set_weights(lm.get_weights())
    assert np.abs(np.asarray(plain(_IDS)) - got)[real].max() > 1e-3


def test_masked_output_ids_mask_those_logits_everywhere():
    lm = tiny_lm(seed=11, masked_output_ids=[2, 1], **_GPT2_LAYOUT)
    assert lm.masked_output_ids == (1, 2)
    got, want = _check_forward(lm, _IDS)
    scale = np.abs(want[..., 3:]).max()
    bounds.assert_close(got[..., 3:], want[..., 3:], terms=TINY_TERMS)
    bounds.assert_close(got[..., 0], want[..., 0], terms=TINY_TERMS,
                        scale=scale)
    assert (got[..., 1:3] == -1e9).all()
    ids, _ = lm.generate([[5, 6]], max_new_tokens=20, stop_token_ids=None,
                         sampler="random")
    assert not np.isin(ids, [0, 1, 2]).any()
    assert lm.get_config()["masked_output_ids"] == [1, 2]


@pytest.mark.parametrize("kwargs, name", [
    (dict(masked_output_ids=(1, 1)), "masked_output_ids"),
    (dict(masked_output_ids=(64,)), "masked_output_ids"),
    (dict(masked_output_ids=5), "masked_output_ids"),
    (dict(masked_output_ids=(True,)), "masked_output_ids"),
    (dict(bos_is_eos=1), "bos_is_eos"),
    (dict(layer_norm_epsilon=0), "layer_norm_epsilon"),
    (dict(activation="no_such_activation"), "activation"),
])
def test_option_refusals_name_the_argument(kwargs, name):
    from tfattn.models.causal_lm import CausalLM

    with pytest.raises(ValueError, match=f"`{name}`"):
        CausalLM(vocab_size=64, **kwargs)
