"""Tests for the string -> string SavedModel export (`tfattn.export`).

One tiny, untrained Transformer (1 layer, width 16) and a tiny SentencePiece
vocabulary serve every test: they check the plumbing (signature, in-graph
tokenisation and beam search, atomic writes), not translation quality.
"""

import json
import os
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfattn
from tests import bounds
from tfattn import export
from tfattn.export import saved_model
from tfattn.data import numbers_splits
from tfattn.data import train_tokenizer
from tfattn.decoding.translate import translate_texts

BEAM = 2
EXTRA = 5
MAX_LENGTH = 32
# The last two are cut to max_source_length = 32 - 5 = 27 pieces (EOS
# included) and empty; both paths must treat them alike.
TEXTS = ["12", "345", "7", "1000", "99", "4072", "", "1" * 40]


def _logit_scale(weights):
    """The magnitude of the attention scores behind softmax `weights`
    [..., T_k]: a softmax is unchanged by a shift of its scores, which are
    thus, up to a shift, log w over the keys a row attends. The largest
    spread of log w in a row, or 1.0 where that is smaller."""
    w = np.asarray(weights, np.float64)
    logs = np.log(np.where(w > 0, w, np.nan))
    spread = np.nanmax(logs, -1) - np.nanmin(logs, -1)
    return max(1.0, float(np.nanmax(spread)))


def _build_model(vocab_size):
    model = tfattn.Transformer(
        vocab_size,
        num_layers=1,
        num_units=16,
        num_heads=2,
        ffn_units=32,
        dropout_rate=0.0,
        max_length=MAX_LENGTH,
        seed=7,
    )
    model((np.ones((1, 4), "int32"), np.ones((1, 3), "int32")))
    return model


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    # Seed first: reseeding clears the eager kernel cache, and with it the
    # SentencePiece resource of any tokenizer made before.
    keras.utils.set_random_seed(0)
    pairs = numbers_splits(max_value=1200, num_validation=20, num_test=20)[
        "train"
    ][:300]
    tokenizer = train_tokenizer(
        [s for pair in pairs for s in pair],
        tmp_path_factory.mktemp("spm"),
        vocab_size=40,
        split_digits=True,
    )
    return _build_model(tokenizer.vocab_size), tokenizer


@pytest.fixture(scope="module")
def exported(tiny, tmp_path_factory):
    model, tokenizer = tiny
    export_dir = tmp_path_factory.mktemp("exports") / "translator"
    export.export_translator(
        model, tokenizer, export_dir, beam_size=BEAM, extra_length=EXTRA
    )
    return export_dir


@pytest.fixture(scope="module")
def loaded(exported):
    """The export loaded once in this process (loading and the first call
    of each signature cost about 2 s): the tests only read it."""
    return export.load_translator(exported)


@pytest.fixture(scope="module")
def expected(tiny):
    model, tokenizer = tiny
    return translate_texts(
        model, tokenizer, TEXTS, beam_size=BEAM, extra_length=EXTRA
    )


def _run(args, timeout=300):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    result = subprocess.run(
        args, capture_output=True, text=True, env=env, timeout=timeout
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


@pytest.mark.slow
def test_export_layout(exported):
    names = set(os.listdir(exported))
    assert {"saved_model.pb", "variables", "model.keras", "spm.model"} <= names
    leftovers = [n for n in os.listdir(exported.parent) if n.startswith(".")]
    assert leftovers == []


@pytest.fixture(scope="module")
def fresh_process(exported):
    """One fresh process serves three tests: it loads the export with only
    tensorflow and tensorflow_text (a JSON line of its outputs), then runs
    `saved_model_cli show` and `saved_model_cli run` in the same process
    (their printed results; the `saved_model_cli` program is this `main`
    and nothing else, and a second process would add only TensorFlow's
    start-up)."""
    # saved_model_cli does not load tensorflow-text's op library itself, so
    # it runs with tensorflow_text imported first (TF Serving links the ops).
    script = textwrap.dedent(f"""
        import json, sys
        import tensorflow as tf
        import tensorflow_text  # noqa: F401
        loaded = tf.saved_model.load({str(exported)!r})
        fn = loaded.signatures["serving_default"]
        out = fn(sentences=tf.constant({TEXTS!r}))
        print(json.dumps(dict(
            translations=[t.decode("utf-8")
                          for t in out["translations"].numpy()],
            scores=[float(s) for s in out["scores"].numpy()],
            method=[t.decode("utf-8") for t in loaded.translate(
                tf.constant({TEXTS!r}))["translations"].numpy()],
            settings=[int(loaded.beam_size.numpy()),
                      int(loaded.max_source_length.numpy()),
                      int(loaded.max_length.numpy())],
            tfattn_loaded="tfattn" in sys.modules,
        )), flush=True)
        from tensorflow.python.tools.saved_model_cli import main
        common = ["--dir", {str(exported)!r}, "--tag_set", "serve",
                  "--signature_def", "serving_default"]
        print("SAVED_MODEL_CLI_SHOW", flush=True)
        sys.argv = ["saved_model_cli", "show", *common]
        try:
            main()
        except SystemExit as exit_:
            if exit_.code:
                raise
        print("SAVED_MODEL_CLI_RUN", flush=True)
        sys.argv = ["saved_model_cli", "run", *common,
                    "--input_exprs", 'sentences=["12"]']
        sys.exit(main())
    """)
    out = _run([sys.executable, "-c", script])
    loaded, rest = out.split("SAVED_MODEL_CLI_SHOW\n", 1)
    show, run = rest.split("SAVED_MODEL_CLI_RUN\n", 1)
    return json.loads(loaded.splitlines()[-1]), show, run


@pytest.mark.slow
def test_fresh_process_matches_translate_texts(fresh_process, expected):
    """Loaded with only tensorflow and tensorflow_text: in-process outputs."""
    out, _, _ = fresh_process
    assert not out["tfattn_loaded"]
    assert out["translations"] == expected
    assert out["method"] == expected
    assert len(out["scores"]) == len(TEXTS)
    assert all(np.isfinite(out["scores"])) and max(out["scores"]) <= 0
    # The serving contract: the empty text is "" with score 0.
    assert out["scores"][TEXTS.index("")] == 0.0
    assert out["translations"][TEXTS.index("")] == ""
    assert out["settings"] == [BEAM, MAX_LENGTH - EXTRA, MAX_LENGTH]


@pytest.mark.slow
def test_in_process_load_matches(loaded, expected):
    out = loaded.signatures["serving_default"](sentences=tf.constant(TEXTS))
    assert out["translations"].dtype == tf.string
    assert out["scores"].dtype == tf.float32
    assert [t.decode() for t in out["translations"].numpy()] == expected
    assert loaded.translate(TEXTS) == expected
    assert loaded.translate([]) == []


@pytest.mark.slow
def test_saved_model_cli_show(fresh_process):
    # `saved_model_cli show` (see `fresh_process`).
    _, out, _ = fresh_process
    assert "inputs['sentences']" in out
    assert "outputs['translations']" in out
    assert "outputs['scores']" in out
    assert out.count("DT_STRING") == 2 and "DT_FLOAT" in out


@pytest.mark.slow
def test_saved_model_cli_run(tiny, fresh_process):
    # `saved_model_cli run` in a fresh process with tensorflow_text
    # imported first (see `fresh_process`).
    _, _, out = fresh_process
    model, tokenizer = tiny
    [want] = translate_texts(
        model, tokenizer, ["12"], beam_size=BEAM, extra_length=EXTRA
    )
    assert "Result for output key translations:" in out
    assert "Result for output key scores:" in out
    assert repr([want.encode()]).replace(",", "") in out


@pytest.mark.slow
def test_keras_file_reloads_with_identical_logits(tiny, exported):
    model, _ = tiny
    reloaded = keras.saving.load_model(exported / "model.keras")
    source = np.array([[5, 6, 7, 3], [8, 3, 0, 0]], "int32")
    target = np.array([[2, 9, 10], [2, 11, 0]], "int32")
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(model((source, target))),
        keras.ops.convert_to_numpy(reloaded((source, target))),
    )


@pytest.mark.slow
def test_refuses_existing_dir(tiny, exported):
    model, tokenizer = tiny
    before = sorted(os.listdir(exported))
    with pytest.raises(FileExistsError, match=str(exported)):
        export.export_translator(model, tokenizer, exported)
    assert sorted(os.listdir(exported)) == before


def test_refuses_existing_keras_path(tiny, tmp_path):
    model, tokenizer = tiny
    keras_path = tmp_path / "model.keras"
    keras_path.write_bytes(b"old")
    with pytest.raises(FileExistsError, match="model.keras"):
        export.export_translator(
            model, tokenizer, tmp_path / "out", keras_path=keras_path
        )
    assert sorted(os.listdir(tmp_path)) == ["model.keras"]


def test_invalid_arguments(tiny, tmp_path):
    model, tokenizer = tiny
    with pytest.raises(ValueError, match="argument `max_source_length`"):
        export.export_translator(
            model, tokenizer, tmp_path / "a", max_source_length=MAX_LENGTH + 1
        )
    with pytest.raises(ValueError, match="argument `beam_size`"):
        export.export_translator(model, tokenizer, tmp_path / "a", beam_size=0)
    with pytest.raises(ValueError, match="argument `export_dir`"):
        export.export_translator(model, tokenizer, "gs://bucket/x")
    with pytest.raises(ValueError, match="argument `keras_path`"):
        export.export_translator(
            model, tokenizer, tmp_path / "a", keras_path=tmp_path / "m.h5"
        )
    with pytest.raises(ValueError, match="argument `tokenizer`"):
        export.export_translator(model, "spm.model", tmp_path / "a")
    assert os.listdir(tmp_path) == []


def test_forced_failure_leaves_nothing(tiny, tmp_path, monkeypatch):
    model, tokenizer = tiny

    def half_written(translator, directory):
        os.makedirs(directory, exist_ok=True)
        with open(os.path.join(directory, "saved_model.pb"), "wb") as f:
            f.write(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(saved_model, "_save_saved_model", half_written)
    with pytest.raises(OSError, match="disk full"):
        export.export_translator(model, tokenizer, tmp_path / "out")
    assert os.listdir(tmp_path) == []


@pytest.mark.slow
def test_attention_signature_equals_the_python_model(tiny, loaded):
    """The `attention` signature returns, for the same sentences, the
    translations, pieces and weights that the Python model and
    `tfattn.visualize.attention_maps` give."""
    from tfattn import visualize

    model, tokenizer = tiny
    sentences = ["4072", "12"]
    out = loaded.signatures["attention"](sentences=tf.constant(sentences))
    layers = len(model.encoder.blocks)
    for kind in ("encoder", "decoder", "cross"):
        assert out[kind].shape[:3] == (layers, 2, 2)  # layers, batch, heads
    for row, text in enumerate(sentences):
        maps = visualize.attention_maps(
            model, tokenizer, text, beam_size=BEAM, extra_length=EXTRA
        )
        assert out["translations"][row].numpy().decode() == maps.translation
        source = [t.decode() for t in out["source_tokens"][row].numpy()]
        target = [t.decode() for t in out["target_tokens"][row].numpy()]
        s, t = len(maps.source_tokens), len(maps.target_tokens)
        assert source[:s] == maps.source_tokens and not any(source[s:])
        assert target[:t] == maps.target_tokens and not any(target[t:])
        for kind, (q, k) in dict(
            encoder=(s, s), decoder=(t, t), cross=(t, s)
        ).items():
            # To a weight: the encoder's and the decoder's blocks
            # (cross-attention a block of its own) over the longer
            # sentence; a softmax moves by at most its scores' error.
            terms = bounds.stack_terms(
                3 * layers, model.num_units, model.ffn_units, max(s, t)
            )
            for layer in range(layers):
                want = maps.scores[kind][layer]
                bounds.assert_close(
                    out[kind][layer, row, :, :q, :k],
                    want,
                    terms=terms,
                    scale=_logit_scale(want),
                )


@pytest.mark.parametrize("shape", [(), (2, 2)])
def test_serving_refuses_inputs_that_are_not_a_vector(loaded, shape):
    """The signature declares [None] strings; a scalar or a matrix used to
    give 1 or 4 translations. Refused in the graph, naming the input."""
    sentences = tf.fill(shape, "12")
    for signature in ("serving_default", "attention"):
        with pytest.raises(
            tf.errors.InvalidArgumentError,
            match="sentences_must_be_a_vector_of_strings",
        ):
            loaded.signatures[signature](sentences=sentences)


def test_serving_flags_the_sources_it_truncated(loaded):
    """TEXTS[-1] has 40 digits: more than max_source_length = 27 pieces."""
    out = loaded.signatures["serving_default"](sentences=tf.constant(TEXTS))
    assert out["truncated"].dtype == tf.bool
    assert out["truncated"].numpy().tolist() == [False] * 7 + [True]
    attention = loaded.signatures["attention"](sentences=tf.constant(TEXTS))
    assert attention["truncated"].numpy().tolist() == [False] * 7 + [True]


def _save_a_trivial_saved_model(translator, directory):
    """Stands for `saved_model._save_saved_model` in a failing overwrite:
    a (trivial) SavedModel written where the export's goes, then the
    `.keras` save fails. What is under test is the directory's
    replacement, not what the SavedModel holds; the good overwrite below
    writes the real one (tracing the translator costs about 5 s of CPU)."""
    tf.saved_model.save(tf.Module(), directory)
    assert os.path.isfile(os.path.join(directory, "saved_model.pb"))


@pytest.mark.slow
def test_overwrite_then_an_xla_export_translates_as_the_python_xla_path(
        tiny, tmp_path, monkeypatch):
    """A failed overwrite keeps the old export; a good one replaces it.

    The good one is `jit_compile=True`: the SavedModel's search runs under
    XLA on sources padded to their length bucket, and translates as
    `translate_texts(jit_compile=True)` does."""
    model, tokenizer = tiny
    target = tmp_path / "out"
    target.mkdir()
    (target / "old.txt").write_text("old export")

    # A failure late in the export (after the SavedModel is written).
    def broken_save(model, path):
        raise RuntimeError("keras save failed")

    with monkeypatch.context() as patch:
        patch.setattr(saved_model, "_save_saved_model",
                      _save_a_trivial_saved_model)
        patch.setattr(saved_model, "_save_keras", broken_save)
        with pytest.raises(RuntimeError, match="keras save failed"):
            export.export_translator(
                model,
                tokenizer,
                target,
                overwrite=True,
                beam_size=BEAM,
                extra_length=EXTRA,
                jit_compile=True,
            )
    assert sorted(os.listdir(tmp_path)) == ["out"], "failed overwrite"
    assert os.listdir(target) == ["old.txt"], "failed overwrite"

    keras_path = tmp_path / "keras" / "tiny.keras"
    export.export_translator(
        model,
        tokenizer,
        target,
        overwrite=True,
        beam_size=BEAM,
        extra_length=EXTRA,
        keras_path=keras_path,
        jit_compile=True,
    )
    assert sorted(os.listdir(tmp_path)) == ["keras", "out"], "overwrite"
    assert os.listdir(tmp_path / "keras") == ["tiny.keras"], "keras_path"
    assert "old.txt" not in os.listdir(target), "overwrite"
    assert "model.keras" not in os.listdir(target), "keras_path"
    loaded = export.load_translator(target)
    assert loaded.settings["beam_size"] == BEAM, "the export's settings"
    out = loaded.signatures["serving_default"](sentences=tf.constant(TEXTS))
    want = translate_texts(
        model,
        tokenizer,
        TEXTS,
        beam_size=BEAM,
        extra_length=EXTRA,
        jit_compile=True,
        batch_size=len(TEXTS),
    )
    got = [t.decode() for t in out["translations"].numpy()]
    assert got == want, "the XLA export against translate_texts(XLA)"
    assert loaded.translate(TEXTS) == want, "SavedModelTranslator (XLA)"
    assert out["truncated"].numpy().tolist() == [False] * 7 + [True]
    with pytest.raises(ValueError, match="`jit_compile`.*jit_compile='yes'"):
        export.export_translator(
            model, tokenizer, tmp_path / "no", jit_compile="yes"
        )
