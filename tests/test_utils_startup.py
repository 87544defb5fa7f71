"""TensorFlow's start-up lines in a user's own Python (`import tfattn`
first, `tfattn.utils.startup.start_quietly`): the lines a user cannot act
on held back by default, every line with `TFATTN_VERBOSE_IMPORT=1` or the
user's own `TF_CPP_MIN_LOG_LEVEL=0`, a level the user set never changed,
and a Python exception always shown."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from tfattn.utils import startup

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A user's script: tfattn imported first, a CausalLM generating with XLA
# (generate's default), then an error of the user's own.
SCRIPT = textwrap.dedent("""
    import os, sys
    import numpy as np
    import tfattn
    print("LEVEL", os.environ.get("TF_CPP_MIN_LOG_LEVEL"), flush=True)
    lm = tfattn.CausalLM(vocab_size=12, num_layers=1, num_units=8,
                         num_heads=2, ffn_units=16, max_length=8)
    lm.generate(np.array([[2, 5]], "int32"), max_new_tokens=2)
    {translator}
    print("GENERATED", flush=True)
    tfattn.CausalLM(vocab_size=0)
""")
# Before GENERATED where the held-back lines are checked: a Transformer's
# search under XLA too, whose Assert ops (none are built) XLA would warn of.
# (Where every line is shown, the CausalLM's compilation already logs the
# XLA lines checked.)
TRANSLATOR = textwrap.dedent("""
    translator = tfattn.Transformer(12, num_layers=1, num_units=8,
                                    num_heads=2, ffn_units=16, max_length=8)
    translator.generate(np.array([[5, 6, 3]], "int32"), max_new_tokens=3)
""")
# Lines that say nothing a user can act on. The CUDA ones are held back
# only where no NVIDIA driver is installed (with one, they may say why a
# GPU is missing).
BANNER = ["absl::InitializeLog", "oneDNN custom operations",
          "cpu_feature_guard"]
CUDA = ["cuInit", "cuda drivers"]
XLA = ["Compiled cluster using XLA!", "XLA service"]
# XLA drops assertion ops and warns for each: none are built for it.
ASSERTS = ["Ignoring Assert operator"]


def _run(translator=False, **env):
    environment = {k: v for k, v in os.environ.items()
                   if k not in ("TF_CPP_MIN_LOG_LEVEL",
                                "TFATTN_VERBOSE_IMPORT")}
    environment.update(env, KERAS_BACKEND="tensorflow", PYTHONPATH=REPO)
    script = SCRIPT.format(translator=TRANSLATOR if translator else "")
    out = subprocess.run([sys.executable, "-c", script], cwd=REPO,
                         capture_output=True, text=True, timeout=600,
                         env=environment)
    # The user's error is shown whatever the level: a Python exception.
    assert out.returncode == 1, out.stderr[-3000:]
    assert "GENERATED" in out.stdout
    assert "argument `vocab_size`" in out.stderr.splitlines()[-1]
    return out


@pytest.mark.slow
def test_the_lines_a_user_cannot_act_on_are_held_back():
    out = _run(translator=True)
    assert "LEVEL 1" in out.stdout  # set, as it was unset
    held = BANNER + XLA + ASSERTS
    if not os.path.exists("/dev/nvidiactl"):
        held += CUDA
    for line in held:
        assert line not in out.stderr, out.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("env", [
    dict(TFATTN_VERBOSE_IMPORT="1"), dict(TF_CPP_MIN_LOG_LEVEL="0"),
])
def test_every_line_is_shown_when_asked_for(env):
    out = _run(**env)
    if "TF_CPP_MIN_LOG_LEVEL" in env:
        assert "LEVEL 0" in out.stdout  # the user's, kept
    for line in ["absl::InitializeLog"] + XLA:
        assert line in out.stderr, out.stderr[-3000:]


def test_a_level_the_user_set_is_kept(monkeypatch):
    monkeypatch.setattr(startup, "import_tensorflow_quietly",
                        lambda write: None)
    monkeypatch.delitem(sys.modules, "tensorflow")
    monkeypatch.setenv("KERAS_BACKEND", "tensorflow")
    monkeypatch.delenv("TFATTN_VERBOSE_IMPORT", raising=False)
    for level in ("1", "2", "3"):
        monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", level)
        startup.start_quietly()
        assert os.environ["TF_CPP_MIN_LOG_LEVEL"] == level
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL")
    assert startup.start_quietly() is True
    assert os.environ["TF_CPP_MIN_LOG_LEVEL"] == "1"


@pytest.mark.parametrize("env, imported", [
    (dict(TFATTN_VERBOSE_IMPORT="1"), False),  # asked for every line
    (dict(KERAS_BACKEND="jax"), False),  # no TensorFlow to import
    (dict(), True),  # TensorFlow already imported: too late
])
def test_nothing_is_set_where_it_should_not_be(monkeypatch, env, imported):
    calls = []
    monkeypatch.setattr(startup, "import_tensorflow_quietly", calls.append)
    if not imported:
        monkeypatch.delitem(sys.modules, "tensorflow")
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
    monkeypatch.delenv("TFATTN_VERBOSE_IMPORT", raising=False)
    monkeypatch.setenv("KERAS_BACKEND", "tensorflow")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert startup.start_quietly() is False
    assert "TF_CPP_MIN_LOG_LEVEL" not in os.environ and calls == []


def test_verbose_is_the_switch_or_level_zero(monkeypatch):
    monkeypatch.delenv("TFATTN_VERBOSE_IMPORT", raising=False)
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
    assert not startup.verbose()
    for value in ("1", "2", "3"):
        monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", value)
        assert not startup.verbose()
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "0")
    assert startup.verbose()
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "1")
    monkeypatch.setenv("TFATTN_VERBOSE_IMPORT", "1")
    assert startup.verbose()
    monkeypatch.setenv("TFATTN_VERBOSE_IMPORT", "0")
    assert not startup.verbose()


def test_keras_backend_is_read_as_keras_reads_it(monkeypatch, tmp_path):
    monkeypatch.delenv("KERAS_BACKEND", raising=False)
    monkeypatch.setenv("KERAS_HOME", str(tmp_path))
    assert startup.keras_backend() == "tensorflow"  # no keras.json
    (tmp_path / "keras.json").write_text(json.dumps({"backend": "jax"}))
    assert startup.keras_backend() == "jax"
    monkeypatch.setenv("KERAS_BACKEND", "torch")  # over keras.json
    assert startup.keras_backend() == "torch"
    monkeypatch.delenv("KERAS_BACKEND")
    for text in ("not json", "[1, 2]", json.dumps({"backend": 3})):
        (tmp_path / "keras.json").write_text(text)
        assert startup.keras_backend() == "tensorflow"


def test_a_missing_standard_error_imports_without_capture(monkeypatch):
    def no_descriptor(fd):
        raise OSError(9, "Bad file descriptor")

    monkeypatch.delenv("TFATTN_VERBOSE_IMPORT", raising=False)
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
    monkeypatch.setattr(os, "dup", no_descriptor)
    written = []
    startup.import_tensorflow_quietly(written.append)
    assert written == []
