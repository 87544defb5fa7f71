"""train.py's language-model task (hparams `gpt_tiny`): training on one
side of the data, evaluation by perplexity (checked against a NumPy
rescoring of each text on its own, unbatched), sample continuations,
monolingual text files streamed and checked, and one-line errors."""

import contextlib
import io
import json
import math
import re

import numpy as np
import pytest
from absl import flags

import hparams
from tests import bounds
from tests.test_cli_train import saved_flags  # noqa: F401 (autouse)
from tests.test_cli_train_errors import _main
from tfattn import config
from tfattn.data import sources
from tfattn.data.tokenizer import BOS_ID
from tfattn.data.tokenizer import EOS_ID
from tfattn.decoding import lm_evaluation
from tfattn.decoding import lm_serving
from tfattn.models import CausalLM
from tfattn.training import run_dir

FLAGS = flags.FLAGS
TEXTS = ["the cat sat on the mat", "a dog ran in the park",
         "the bird sang in the tree", "a cat ran to the tree"] * 8


def _write(path, text):
    mode = "wb" if isinstance(text, bytes) else "w"
    with open(path, mode) as f:
        f.write(text)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """gpt_tiny trained 60 steps on text files (batches of 8 texts, a
    shuffle buffer of 64: the default 10,000 would tokenize 10,000
    texts of the repeated corpus before the first step), then
    evaluated on the test split and exported, in one in-process
    `--mode=all` invocation: (the data's root, the model directory, what
    the run printed)."""
    root = tmp_path_factory.mktemp("lm")
    _write(root / "text.train.txt", "\n".join(TEXTS) + "\n")
    _write(root / "text.validation.txt", "\n".join(TEXTS[:4]) + "\n")
    _write(root / "text.test.txt", "\n".join(TEXTS[:6]) + "\n")
    model_dir = root / "run"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status, line = _main(
            "--hparams=gpt_tiny", f"--dataset=textfiles:{root}/text",
            "--hparams_overrides=vocab_size=40,num_layers=1,"
            "checkpoint_every_steps=30,log_every_steps=30,warmup_steps=20,"
            "batch_size=8,shuffle_buffer_size=64",
            "--train_steps=60", "--mode=all", f"--model_dir={model_dir}")
    FLAGS.unparse_flags()
    assert status == 0, line
    return root, model_dir, out.getvalue()


@pytest.fixture(scope="module")
def trained(run):
    """(the data's root, the model directory)."""
    return run[:2]


@pytest.fixture(scope="module")
def restored(trained):
    """The run's model, tokenizer and hparams, restored once: the tests
    only read them, and share the model's compiled searches."""
    return run_dir.restore_model(str(trained[1]))


def test_training_writes_a_causal_lm_with_its_task(trained, restored):
    _, model_dir = trained
    saved = run_dir.load_saved_hparams(str(model_dir))
    assert saved.task == "language_model"
    model, tokenizer, _ = restored
    assert isinstance(model, CausalLM)
    assert model.output_dense is None  # tied to the token embedding


def _numpy_nll(model, tokenizer, text):
    """The text's negative log-likelihood, scored alone (no padding); its
    token count; and the largest |logit| or |log p| on it (the scale of
    its log-probabilities' rounding)."""
    pieces = tokenizer.tokenize([text]).to_list()[0]
    inputs = np.asarray([[BOS_ID] + pieces], "int32")
    labels = pieces + [EOS_ID]
    logits = np.asarray(model(inputs), np.float64)[0]
    largest = np.abs(logits).max()
    logits -= logits.max(-1, keepdims=True)
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    picked = [log_probs[t, label] for t, label in enumerate(labels)]
    return -sum(picked), len(labels), max(largest, np.abs(picked).max())


def _log_prob_terms(hp, length, vocab_size):
    """To one log-probability of the run's CausalLM over `length` tokens:
    the stack, its final layer norm (4·C: pre-norm blocks) and the
    log-softmax over the vocabulary."""
    return 4 * hp.num_units + bounds.stack_terms(
        hp.num_layers, hp.num_units, hp.ffn_units, length, vocab_size)


def _continuation_scales(model, tokenizer, prompts, max_new_tokens):
    """The scale of each greedy continuation score's rounding (a sum of
    log-probabilities): the sum over its tokens of the largest |logit|
    where each is chosen; and the longest prompt and continuation."""
    rows, _ = lm_serving.prompt_window(
        tokenizer.tokenize(prompts).to_list(),
        model.max_length - max_new_tokens)
    ids, _ = model.generate(rows, max_new_tokens=max_new_tokens,
                            jit_compile=False)
    scales, longest = [], 0
    for row, new in zip(rows, np.asarray(ids).tolist()):
        new = new[:new.index(EOS_ID) + 1] if EOS_ID in new else new
        logits = np.asarray(model(np.array([row + new], "int32")))[0]
        steps = np.abs(logits[len(row) - 1:-1])
        scales.append(np.where(steps < 1e8, steps, 0).max(-1).sum())
        longest = max(longest, len(row) + len(new))
    return np.array(scales), longest


def test_eval_reports_perplexity_equal_to_a_numpy_rescoring(run, restored):
    # The evaluation of the `--mode=all` run (train, eval, export).
    _, model_dir, out = run
    assert "Perplexity on the test split:" in out
    with open(model_dir / "metrics_test.json") as f:
        metrics = json.load(f)
    model, tokenizer, hp = restored
    texts = TEXTS[:6]
    scored = [_numpy_nll(model, tokenizer, t) for t in texts]
    total = sum(nll for nll, _, _ in scored)
    subwords = sum(n for _, n, _ in scored)
    words = sum(len(t.split()) + 1 for t in texts)
    assert metrics["subwords"] == subwords and metrics["words"] == words
    # float32 log-probabilities (the stack, the log-softmax over the
    # vocabulary) summed over the split's tokens, divided (1) and
    # exponentiated (1): the perplexity moves by itself times the mean's
    # error, whose terms have the logits' magnitude.
    terms = subwords + 2 + _log_prob_terms(
        hp, max(n for _, n, _ in scored), tokenizer.vocab_size)
    largest = max(z for _, _, z in scored)
    for name, count in (("perplexity_per_subword", subwords),
                        ("perplexity_per_word", words)):
        want = math.exp(total / count)
        bounds.assert_close(metrics[name], want, terms=terms,
                            scale=want * largest * subwords / count)
    # A model trained on these texts beats the uniform distribution.
    assert metrics["perplexity_per_subword"] < tokenizer.vocab_size / 2
    assert len(metrics["samples"]) == 5


def test_continuations_start_with_their_prompts(restored):
    model, tokenizer, hp = restored
    # The prompts and length of `continue_details` in
    # test_export_continues_greedily_as_python_does: the same compiled
    # search (the fourth prompt is cut to its window, the third empty).
    continued = lm_evaluation.continue_texts(
        model, tokenizer, PROMPTS, max_new_tokens=hp.decode_extra_length)
    assert continued[0].startswith("the cat")
    assert continued[1].startswith("a dog ran in")
    # Words were added after a prompt (2 and 4 words).
    assert len(continued[0].split()) > 2 or len(continued[1].split()) > 4


def test_numbers_and_multi30k_read_one_side():
    numbers = sources.parse_dataset_spec("numbers", monolingual=True)
    record = next(iter(sources.load_split(numbers, "validation")))
    assert record["inputs"].numpy() == b""
    assert not any(c.isdigit() for c in record["targets"].numpy().decode())
    spec = sources.parse_dataset_spec("multi30k", target_language="de",
                                      monolingual=True)
    assert (spec.target_language, spec.source_language) == ("de", None)
    assert str(spec) == "multi30k (de)"


@pytest.mark.parametrize("content, message", [
    ("one line\n\nthird line\n", r"text\.train\.txt:2: empty line"),
    (b"ok\n\xff\xfe bad\n", r"text\.train\.txt:2: invalid UTF-8"),
    ("", r"text\.train\.txt: the file is empty"),
])
def test_bad_text_files_are_one_line_naming_file_and_line(
        tmp_path, content, message):
    _write(tmp_path / "text.train.txt", content)
    status, line = _main("--hparams=gpt_tiny",
                         f"--dataset=textfiles:{tmp_path}/text",
                         f"--model_dir={tmp_path}/run", "--train_steps=2")
    assert status == 1 and "\n" not in line
    assert line.startswith("Error: ") and re.search(
        message, line), line
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("args, message", [
    (["--dataset=textfiles:/no/such/text"],
     r"No text file for split 'train': expected /no/such/text\.train\.txt"),
])
def test_bad_language_model_runs_are_refused(tmp_path, args, message):
    base = ["--hparams=gpt_tiny", "--dataset=numbers",
            f"--model_dir={tmp_path}/run", "--train_steps=2"]
    given = {a.split("=")[0] for a in args}
    base = [a for a in base if a.split("=")[0] not in given]
    status, line = _main(*base, *args)
    assert status in (1, 2) and line is not None and "\n" not in line
    assert re.search(message, line), line
    assert not (tmp_path / "run").exists()


def test_a_source_language_is_refused_at_flag_parsing(tmp_path):
    with pytest.raises(flags.IllegalFlagValueError,
                       match="give --target_language only"):
        _main("--hparams=gpt_tiny", "--dataset=multi30k",
              "--source_language=en", "--target_language=de",
              f"--model_dir={tmp_path}/run")
    assert not (tmp_path / "run").exists()


def test_eval_every_steps_is_refused_for_a_language_model():
    with pytest.raises(ValueError, match="eval_every_steps=10"):
        config.parse_overrides(hparams.get("gpt_tiny"), "eval_every_steps=10")


@pytest.fixture(scope="module")
def exported(run):
    """The run's export, written by its `--mode=all`."""
    _, model_dir, out = run
    assert "Exported a prompt-to-continuation language model" in out
    import tensorflow as tf
    import tensorflow_text  # noqa: F401

    return tf.saved_model.load(str(model_dir / "export"))


PROMPTS = ["the cat", "a dog ran in", "", "the " * 30]


def test_export_continues_greedily_as_python_does(restored, exported):
    import tensorflow as tf

    out = exported.signatures["serving_default"](prompts=tf.constant(PROMPTS))
    continuations = [c.decode() for c in out["continuations"].numpy()]
    assert out["truncated"].numpy().tolist() == [False, False, False, True]
    model, tokenizer, hp = restored
    # All four prompts, the long one too: both read the same window.
    python = lm_evaluation.continue_details(
        model, tokenizer, PROMPTS, max_new_tokens=hp.decode_extra_length)
    assert continuations == python.continuations
    assert python.truncated == [False, False, False, True]
    # The scores are those of CausalLM.generate on the same prompts (under
    # XLA, its default: the export's plain graph against XLA): sums of at
    # most decode_extra_length log-probabilities, at the magnitude of their
    # logits.
    rows = [[BOS_ID] + p for p in tokenizer.tokenize(PROMPTS[:3]).to_list()]
    _, scores = model.generate(rows, hp.decode_extra_length)
    scales, longest = _continuation_scales(model, tokenizer, PROMPTS,
                                           hp.decode_extra_length)
    terms = hp.decode_extra_length + _log_prob_terms(
        hp, longest, tokenizer.vocab_size)
    bounds.assert_close(out["scores"].numpy()[:3], scores, terms=terms,
                        scale=scales[:3])
    bounds.assert_close(out["scores"].numpy(), python.scores, terms=terms,
                        scale=scales)


def test_sample_signature_repeats_with_its_seed(exported):
    import tensorflow as tf

    def sample(seed, top_p=0.9, temperature=1.0):
        out = exported.signatures["sample"](
            prompts=tf.constant(PROMPTS[:3]),
            temperature=tf.constant(temperature), top_p=tf.constant(top_p),
            seed=tf.constant(seed, tf.int64))
        return out["continuations"].numpy().tolist()

    first = sample(1)
    assert first == sample(1)
    assert first != sample(2) or first != sample(3)
    with pytest.raises(tf.errors.InvalidArgumentError, match="temperature"):
        sample(1, temperature=0.0)
    with pytest.raises(tf.errors.InvalidArgumentError, match="top_p"):
        sample(1, top_p=1.5)


def test_ctranslate2_generator_equals_the_model(trained, restored):
    """CTranslate2's decoder-only engine on the export, float32: the
    per-token log-probabilities of tfattn's forward pass to the rounding
    bound of tests/bounds.py (two float32 engines summing in different
    orders over widths of 64), and the same greedy continuations."""
    import ctranslate2

    root, model_dir = trained
    status, line = _main(f"--model_dir={model_dir}", "--mode=export",
                         "--export_format=ctranslate2",
                         f"--dataset=textfiles:{root}/text")
    FLAGS.unparse_flags()
    assert status == 0, line
    generator = ctranslate2.Generator(str(model_dir / "ctranslate2"),
                                      device="cpu")
    model, tokenizer, hp = restored
    prompts = []
    for text in TEXTS[:4]:
        ids = [BOS_ID] + tokenizer.tokenize([text]).to_list()[0]
        tokens = [tokenizer.id_to_piece(i) for i in ids]
        scored = generator.score_batch([tokens])[0].log_probs
        logits = np.asarray(model(np.array([ids], "int32")), np.float64)[0]
        largest = np.abs(logits).max()
        logits -= logits.max(-1, keepdims=True)
        log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
        want = [log_probs[t, ids[t + 1]] for t in range(len(ids) - 1)]
        bounds.assert_close(
            scored, want,
            terms=_log_prob_terms(hp, len(ids), tokenizer.vocab_size),
            scale=max(largest, np.abs(want).max()))
        prompts.append(ids[:3])
    # The four greedy continuations in one batch (rows are independent),
    # in a plain graph (XLA's generate is compared with the export's
    # plain graph in test_export_continues_greedily_as_python_does).
    generated, _ = model.generate(prompts, 6, jit_compile=False)
    for prompt, row in zip(prompts, generated):
        ours = [tokenizer.id_to_piece(int(i)) for i in row if i]
        theirs = generator.generate_batch(
            [[tokenizer.id_to_piece(i) for i in prompt]], max_length=6,
            sampling_topk=1, include_prompt_in_result=False)[0].sequences[0]
        # CTranslate2 leaves the end token out of its result.
        assert [t for t in ours if t != "</s>"] == theirs


def test_attention_maps_of_a_language_model_are_causal(trained, tmp_path):
    from tfattn.visualize import cli

    _, model_dir = trained
    maps, paths = cli.run(str(model_dir), "the cat sat", str(tmp_path))
    assert set(maps.scores) == {"decoder"} and maps.source_tokens == []
    assert maps.target_tokens[0] == "<s>"
    for weights in maps.scores["decoder"]:  # [H, T, T] per layer
        assert weights.shape[1] == weights.shape[2] == len(maps.target_tokens)
        np.testing.assert_array_equal(np.triu(weights, k=1), 0.0)
        # A softmax over T keys (2·T), then the sum of its T weights (T),
        # each at most 1.
        keys = weights.shape[-1]
        bounds.assert_close(weights.sum(-1), 1.0, terms=2 * keys + keys,
                            scale=1.0)
    assert any(p.endswith("decoder_layer0.png") for p in paths)


def test_gpt_tiny_is_a_language_model_set():
    hp = hparams.get("gpt_tiny")
    assert hp.task == "language_model"
    kwargs = config.model_kwargs(hp, 50)
    model = CausalLM(**kwargs)
    assert model.vocab_size == 50 and model.num_layers == hp.num_layers
