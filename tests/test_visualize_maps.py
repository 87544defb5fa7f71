"""Tests of `tfattn.visualize`: heatmaps, the maps of a sentence, the CLI
and the TensorBoard images of an eval run."""

import json
import os
import re
import struct
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

import hparams
from tests import bounds
from tfattn import config
from tfattn import training
from tfattn import visualize
from tfattn.visualize.cli import run as run_cli

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == PNG_SIGNATURE
    return struct.unpack(">II", head[16:24])


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A model dir as train.py leaves it: tiny hparams, 40 steps."""
    model_dir = tmp_path_factory.mktemp("viz") / "run"
    hp = config.parse_overrides(
        hparams.get("tiny"), "num_layers=2,num_heads=2,log_every_steps=20"
    )
    result = training.train(hp, "numbers", model_dir, steps=40, verbose=0)
    return str(model_dir), result


def test_plot_attention_writes_a_png_that_grows_with_the_heads(tmp_path):
    rng = np.random.default_rng(0)
    weights = rng.random((4, 3, 5)).astype("float32")
    queries, keys = ["a", "b", "c"], ["v", "w", "x", "y", "z"]
    one = visualize.plot_attention(
        weights[0], queries, keys, path=tmp_path / "one.png", title="one"
    )
    four = visualize.plot_attention(
        weights, queries, keys, path=tmp_path / "four.png"
    )
    assert len(four.axes) >= 4 and len(one.axes) == 1
    w1, h1 = _png_size(tmp_path / "one.png")
    w4, h4 = _png_size(tmp_path / "four.png")
    assert w4 * h4 > 2 * w1 * h1
    assert sorted(os.listdir(tmp_path)) == ["four.png", "one.png"]


@pytest.mark.parametrize(
    "weights, queries, keys, message",
    [
        (np.zeros((3, 5)), ["a", "b"], list("vwxyz"), "query_tokens"),
        (np.zeros((3, 5)), ["a", "b", "c"], list("vwxy"), "key_tokens"),
        (np.zeros((1, 1, 3, 5)), ["a", "b", "c"], list("vwxyz"), "weights"),
        (np.zeros((3, 5)), "abc", list("vwxyz"), "query_tokens"),
    ],
)
def test_plot_attention_rejects_mismatched_shapes(
    weights, queries, keys, message, tmp_path
):
    with pytest.raises(ValueError, match=f"argument `{message}`"):
        visualize.plot_attention(
            weights, queries, keys, path=tmp_path / "x.png"
        )
    assert not os.listdir(tmp_path)


@pytest.mark.slow
def test_attention_maps_of_a_sentence(trained):
    model_dir, result = trained
    maps = visualize.attention_maps(
        result.model,
        result.tokenizer,
        "4072",
        **config.decoding_kwargs(result.hparams),
    )
    s, t = len(maps.source_tokens), len(maps.target_tokens)
    assert maps.source_tokens[-1] == "</s>" and s >= 2 and t >= 1
    assert sorted(maps.scores) == ["cross", "decoder", "encoder"]
    for kind, shape in dict(
        encoder=(2, s, s), decoder=(2, t, t), cross=(2, t, s)
    ).items():
        assert [w.shape for w in maps.scores[kind]] == [shape] * 2
        for w in maps.scores[kind]:
            # A softmax over T_k keys (2·T_k), then the sum of its T_k
            # weights (T_k), each at most 1.
            keys = w.shape[-1]
            bounds.assert_close(w.sum(-1), 1.0, terms=2 * keys + keys,
                                scale=1.0)
    assert np.all(np.triu(maps.scores["decoder"][0], 1) == 0)
    with pytest.raises(ValueError, match="argument `text`"):
        visualize.attention_maps(result.model, result.tokenizer, "  ")


@pytest.mark.slow
def test_cli_writes_the_page_the_pictures_and_the_scores(trained, tmp_path):
    model_dir, _ = trained
    out = tmp_path / "attention"
    maps, paths = run_cli(model_dir, "4072", str(out), layers="1", heads="0")
    names = sorted(os.listdir(out))
    assert names == [
        "cross_layer1.png",
        "decoder_layer1.png",
        "encoder_layer1.png",
        "index.html",
        "scores.npz",
    ]
    assert sorted(os.path.basename(p) for p in paths) == names
    with np.load(out / "scores.npz") as scores:
        assert scores["encoder_1"].shape[0] == 1  # One head kept.
        # The same array, written and read back.
        np.testing.assert_array_equal(
            scores["cross_1"], maps.scores["cross"][1][[0]]
        )
        assert list(scores["source_tokens"]) == maps.source_tokens
    page = (out / "index.html").read_text(encoding="utf-8")
    data = json.loads(
        re.search(
            r'<script type="application/json" id="attn-data">(.*?)</script>',
            page,
            re.S,
        ).group(1)
    )
    assert data["source"] == maps.source_tokens
    assert data["target"] == maps.target_tokens


@pytest.mark.slow
@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(text=" "), "--text is empty"),
        (dict(layers="2"), r"--layers='2'.*valid: 0-1"),
        (dict(heads="0,5"), r"--heads='0,5'.*valid: 0-1"),
        (dict(layers="x"), "comma-separated integers"),
    ],
)
def test_cli_refuses_bad_input_and_writes_nothing(
    trained, tmp_path, kwargs, message
):
    model_dir, _ = trained
    arguments = dict(
        model_dir=model_dir, text="12", output_dir=str(tmp_path / "out")
    )
    arguments.update(kwargs)
    with pytest.raises(ValueError, match=message):
        run_cli(**arguments)
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_cli_refuses_an_output_file_and_an_untrained_dir(trained, tmp_path):
    model_dir, _ = trained
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    with pytest.raises(ValueError, match="not a directory"):
        run_cli(model_dir, "12", str(a_file))
    with pytest.raises(FileNotFoundError, match="holds no trained model"):
        run_cli(str(tmp_path), "12", str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


# `python -m tfattn.visualize` twice in one fresh process: the module's
# `main` under `app.run`, as `-m` runs it (a second process would add only
# TensorFlow's start-up). Each run's status and output, between markers;
# then whether the library's modules imported `hparams`, the application's
# sets (train.py's; `pip install` does not install them).
_LIBRARY = ("tfattn", "tfattn.training", "tfattn.decoding.evaluation",
            "tfattn.export", "tfattn.decoding.translate",
            "tfattn.training.run_dir", "tfattn.training.model_io",
            "tfattn.training.distribute", "tfattn.config",
            "tfattn.data.sources", "tfattn.cli.flags", "tfattn.cli.exits")
_PROGRAM = textwrap.dedent(f"""
    import importlib, json, sys
    from absl import app
    from tfattn.visualize import __main__ as program
    for argv in json.loads(sys.argv[1]):
        for stream in (sys.stdout, sys.stderr):
            print("RUN", flush=True, file=stream)
        try:
            app.run(program.main, argv=argv)
        except SystemExit as exit_:
            print(f"STATUS {{exit_.code or 0}}", flush=True)
    for name in {_LIBRARY!r}:
        importlib.import_module(name)
    print("LIBRARY IMPORTED HPARAMS", "hparams" in sys.modules, flush=True)
""")


def _program_runs(*argvs):
    """(status, stdout, stderr) of each `python -m tfattn.visualize ARGV`,
    run in one fresh process; and whether `hparams` was imported there."""
    argvs = [["python -m tfattn.visualize", *argv] for argv in argvs]
    done = subprocess.run(
        [sys.executable, "-c", _PROGRAM, json.dumps(argvs)],
        capture_output=True, text=True, timeout=300,
        env=dict(os.environ, PYTHONPATH=REPO), cwd=REPO,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    stdout, library = done.stdout.rsplit("LIBRARY IMPORTED HPARAMS ", 1)
    outs = stdout.split("RUN\n")[1:]
    errs = done.stderr.split("RUN\n")[1:]
    assert len(outs) == len(errs) == len(argvs), done.stderr[-2000:]
    runs = []
    for out, err in zip(outs, errs):
        *lines, status = out.splitlines()
        runs.append((int(status.removeprefix("STATUS ")), "\n".join(lines),
                     err))
    return runs, library.strip() == "True"


@pytest.mark.slow
def test_cli_as_a_program(trained, tmp_path):
    """The program prints the translation and the files; a failure is one
    line. Its process also imports the library's modules: none imports
    the hparams sets (the fresh process the library's import check
    needs, shared)."""
    model_dir, _ = trained
    # A failure ends as one line, status 1, nothing written: here a
    # vocabulary that TensorFlow cannot read (a directory where spm.model
    # should be: its own FailedPreconditionError, which the boundary
    # before errors.command_line_failure let through as a traceback). Bad
    # indices are refused in process (test_cli_refuses_bad_input_...).
    import shutil

    corrupt = tmp_path / "corrupt"
    shutil.copytree(model_dir, corrupt)
    (corrupt / "spm.model").unlink()
    (corrupt / "spm.model").mkdir()
    runs, hparams_imported = _program_runs(
        [f"--model_dir={model_dir}", "--text=315",
         f"--output_dir={tmp_path / 'out'}"],
        [f"--model_dir={corrupt}", "--text=315",
         f"--output_dir={tmp_path / 'c'}"],
    )
    (status, out, err), (broken, _, broken_err) = runs
    assert status == 0, err[-2000:]
    assert "Translation:" in out and "index.html" in out
    assert (tmp_path / "out" / "index.html").exists()
    assert broken == 1, broken_err[-2000:]
    assert "Traceback" not in broken_err
    assert re.search(r"^Error: .*spm.model; Is a directory$", broken_err,
                     re.M)
    assert not (tmp_path / "c").exists()
    assert not hparams_imported, (
        "the library imported hparams, the application's sets")


@pytest.mark.slow
def test_eval_images_in_tensorboard(trained, tmp_path):
    _, result = trained
    log_dir = tmp_path / "eval"
    count = visualize.write_attention_summaries(
        result.model, result.tokenizer, ["12", "4072"], log_dir, step=40
    )
    assert count == 4
    tags = set()
    for event_file in tf.io.gfile.glob(str(log_dir / "events*")):
        for event in tf.compat.v1.train.summary_iterator(event_file):
            for value in event.summary.value:
                tags.add(value.tag)
                assert event.step == 40
    assert tags == {
        f"attention/{kind}/sentence_{i}"
        for kind in ("encoder", "cross")
        for i in (0, 1)
    }


@pytest.mark.slow
def test_cli_refuses_a_model_dir_without_its_vocabulary(trained, tmp_path):
    import shutil

    model_dir, _ = trained
    copy = tmp_path / "run"
    shutil.copytree(model_dir, copy)
    for name in os.listdir(copy):
        if name.startswith("spm."):
            os.remove(copy / name)
    with pytest.raises(FileNotFoundError, match="spm.model"):
        run_cli(str(copy), "12", str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def test_missing_matplotlib_names_the_extra(monkeypatch, tmp_path):
    import builtins

    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    with pytest.raises(ImportError, match=r"tfattn\[viz\]"):
        visualize.plot_attention(
            np.ones((2, 2)), ["a", "b"], ["c", "d"], path=tmp_path / "x.png"
        )
    assert not os.listdir(tmp_path)


def test_training_curve_from_event_files(tmp_path):
    """`curves.read_scalars` returns what `tf.summary.scalar` wrote, sorted by
    step, the later value winning at a repeated step (a resumed run);
    `plot_curve` writes a PNG and names the tags it could not find."""
    import tensorflow as tf

    from tfattn.visualize import curves

    pytest.importorskip("matplotlib")
    writer = tf.summary.create_file_writer(str(tmp_path))
    with writer.as_default():
        for step, value in ((200, 5.0), (100, 2.5), (300, 7.25), (200, 6.0)):
            tf.summary.scalar("validation_bleu", value, step=step)
            tf.summary.scalar("loss", 10.0 / step, step=step)
    writer.flush()
    steps, values, times = curves.read_scalars(tmp_path, "validation_bleu")
    assert steps.tolist() == [100, 200, 300]
    assert values.tolist() == [2.5, 6.0, 7.25]
    assert len(times) == 3
    assert curves.read_scalars(tmp_path, "absent")[0].size == 0
    assert curves.available_tags(tmp_path) == ["loss", "validation_bleu"]
    out = tmp_path / "curve.png"
    drawn = curves.plot_curve(tmp_path, out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert set(drawn) == {"validation_bleu", "loss"}
    with pytest.raises(ValueError, match="found: loss, validation_bleu"):
        curves.plot_curve(tmp_path, tmp_path / "x.png", tags=["bleu"])
    with pytest.raises(ValueError, match="log_dir"):
        curves.read_scalars(tmp_path / "missing", "loss")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match="events.out.tfevents"):
        curves.read_scalars(empty, "loss")
    assert not (tmp_path / "x.png").exists()
