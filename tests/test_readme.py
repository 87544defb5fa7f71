"""The README and the guides work as pasted: every Python snippet of
README.md and docs/guides/*.md runs on its own (imports included), and
`train.py --help` exits 0 without TensorFlow's banner."""

import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(REPO, "README.md")
# The snippet that loads the run command's export.
EXPORT = "runs/tiny_numbers/export"
# The snippet that loads its CTranslate2 export.
EXPORT_CT2 = "runs/tiny_numbers/ctranslate2"
# The snippet that continues text with the language-model command's run.
LM_RUN = "runs/gpt_tiny_numbers"
# The snippet that fills blanks and fine-tunes with the masked-LM run.
MLM_RUN = "runs/bert_tiny_numbers"
# The pretrained guide's checkpoint directories.
CHECKPOINTS = "checkpoints"


GUIDES = os.path.join(REPO, "docs", "guides")


def python_snippets():
    """(page, snippet) for every Python block of the README and guides."""
    pages = [README] + sorted(
        os.path.join(GUIDES, name) for name in os.listdir(GUIDES)
        if name.endswith(".md"))
    snippets = []
    for page in pages:
        with open(page, encoding="utf-8") as f:
            text = f.read()
        name = os.path.relpath(page, REPO)
        snippets += [(name, s) for s in
                     re.findall(r"```python\n(.*?)```", text, re.S)]
    return snippets


SNIPPETS = python_snippets()


def test_the_readme_and_guides_have_python_snippets():
    readme = [s for page, s in SNIPPETS if page == "README.md"]
    assert len(readme) >= 4 and len(SNIPPETS) >= 14
    assert any(EXPORT in s for s in readme)


# What a snippet reads is built once per module (each is the same for every
# snippet that reads it) and copied into each snippet's own directory, so
# that no snippet sees what another wrote.


@pytest.fixture(scope="module")
def export_of_the_run_command(tmp_path_factory):
    """What the README's run command leaves in runs/tiny_numbers/export
    (and the CTranslate2 export command in runs/tiny_numbers/ctranslate2),
    from a small untrained model (the snippet only has to run)."""
    import tfattn
    from tfattn import export
    from tfattn.data import numbers_splits
    from tfattn.data import train_tokenizer

    root = tmp_path_factory.mktemp("run_command")
    pairs = numbers_splits(max_value=300, num_validation=5, num_test=5)["train"]
    tokenizer = train_tokenizer(
        [s for pair in pairs for s in pair],
        tmp_path_factory.mktemp("spm"),
        vocab_size=40,
        split_digits=True,
    )
    model = tfattn.Transformer(
        tokenizer.vocab_size,
        num_layers=1,
        num_units=16,
        num_heads=2,
        ffn_units=32,
        max_length=32,
        seed=0,
    )
    model((np.ones((1, 3), "int32"), np.ones((1, 2), "int32")))
    export.export_translator(
        model, tokenizer, str(root / EXPORT), beam_size=1, extra_length=5
    )
    export.to_ctranslate2(
        model, tokenizer, str(root / EXPORT_CT2), beam_size=1, extra_length=5
    )
    return root


@pytest.fixture(scope="module")
def checkpoints_of_the_pretrained_guide(tmp_path_factory):
    """What the pretrained guide's download leaves in checkpoints/: tiny
    random OPUS-MT, GPT-2 and BERT directories in the same formats (the
    snippets only have to run)."""
    from tests import bert_fixtures
    from tests import gpt2_fixtures
    from tests import marian_fixtures

    root = tmp_path_factory.mktemp("pretrained_guide") / CHECKPOINTS
    marian_dir = marian_fixtures.write_checkpoint(tmp_path_factory)[0]
    shutil.copytree(marian_dir, root / "opus-mt-en-de")
    hub = gpt2_fixtures.hub_model()
    vocab, merges = gpt2_fixtures.vocabulary()
    gpt2_fixtures.write_huggingface(
        str(root / "gpt2"), gpt2_fixtures.hf_tensors(hub.backbone),
        gpt2_fixtures.hf_config(len(vocab)), vocab, merges)
    bert_fixtures.write_huggingface(
        str(root / "bert-base-uncased"),
        bert_fixtures.hf_tensors(bert_fixtures.hub_masked_lm(), extras=True),
        bert_fixtures.hf_config())
    return root.parent


def _trained_run(tmp_path_factory, name, task_of_the_text, run):
    """`run` (relative) as `train.py --hparams=NAME --dataset=numbers`
    leaves it, after 2 steps of a 1-layer model; the directory above."""
    import hparams
    from tfattn import config
    from tfattn import training
    from tfattn.data import sources

    root = tmp_path_factory.mktemp(task_of_the_text)
    hp = config.parse_overrides(hparams.get(name),
                                "num_layers=1,checkpoint_every_steps=2")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(root)  # The run's files name it as the command does.
        training.train(hp, sources.parse_dataset_spec("numbers",
                                                      monolingual=True),
                       run, steps=2, verbose=0)
    return root


@pytest.fixture(scope="module")
def run_of_the_language_model_command(tmp_path_factory):
    """What `train.py --hparams=gpt_tiny --dataset=numbers` leaves in
    runs/gpt_tiny_numbers, after 2 steps (the snippet only has to run)."""
    return _trained_run(tmp_path_factory, "gpt_tiny", "language_model",
                        LM_RUN)


@pytest.fixture(scope="module")
def run_of_the_masked_lm_command(tmp_path_factory):
    """What `train.py --hparams=bert_tiny --dataset=numbers` leaves in
    runs/bert_tiny_numbers, after 2 steps (the snippet only has to run)."""
    return _trained_run(tmp_path_factory, "bert_tiny", "masked_lm", MLM_RUN)


def snippet_id(index):
    """`README-0`, `task_translation-0`, ...: `-k task_` selects a page's."""
    page = os.path.splitext(os.path.basename(SNIPPETS[index][0]))[0]
    return f"{page}-{sum(p == SNIPPETS[index][0] for p, _ in SNIPPETS[:index])}"


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(SNIPPETS)), ids=snippet_id)
def test_python_snippet_runs_as_pasted(index, tmp_path, monkeypatch, request):
    page, snippet = SNIPPETS[index]
    if EXPORT in snippet or EXPORT_CT2 in snippet:
        files = request.getfixturevalue("export_of_the_run_command")
    elif LM_RUN in snippet:
        files = request.getfixturevalue("run_of_the_language_model_command")
    elif MLM_RUN in snippet:
        files = request.getfixturevalue("run_of_the_masked_lm_command")
    elif f"{CHECKPOINTS}/" in snippet:
        files = request.getfixturevalue("checkpoints_of_the_pretrained_guide")
    else:
        files = None
    if files is not None:  # This snippet's own copy.
        shutil.copytree(files, tmp_path, dirs_exist_ok=True)
    monkeypatch.chdir(tmp_path)
    if 'os.environ["KERAS_BACKEND"]' in snippet:
        # A snippet that chooses its backend needs a process whose Keras
        # has not been imported yet.
        done = subprocess.run(
            [sys.executable, "-c", snippet], cwd=tmp_path, capture_output=True,
            text=True, timeout=600, env=dict(os.environ, PYTHONPATH=REPO))
        assert done.returncode == 0, done.stderr[-3000:]
        return
    # A fresh namespace each: no snippet may lean on another's names.
    exec(
        compile(snippet, f"{page} python snippet {index}", "exec"),
        {"__name__": "__readme__"},
    )


@pytest.mark.slow
def test_help_exits_zero_without_the_tensorflow_banner():
    out = subprocess.run(
        [sys.executable, "train.py", "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, PYTHONPATH=REPO),
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "--hparams" in out.stdout and "--model_dir" in out.stdout
    for banner in (
        "oneDNN custom operations",
        "cuInit",
        "cuda drivers",
        "absl::InitializeLog",
    ):
        assert banner not in out.stderr + out.stdout
