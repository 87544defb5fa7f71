"""The task guides (docs/guides/task_*.md) say what the code does: their
`train.py` commands use flags, hparams sets and fields that exist, the
files they list are the ones `--dataset=textfiles:PREFIX` reads, and their
links point at pages that exist. Their Python blocks run in
tests/test_readme.py (slow tier)."""

import os
import re
import shlex

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GUIDES = os.path.join(REPO, "docs", "guides")
PAGES = ("task_translation.md", "task_causal_lm.md", "task_masked_lm.md")
# The task each page's commands train, as the hparams sets name it.
TASKS = {"task_translation.md": "translation",
         "task_causal_lm.md": "language_model",
         "task_masked_lm.md": "masked_lm"}


def _text(page):
    with open(os.path.join(GUIDES, page), encoding="utf-8") as f:
        return f.read()


def _blocks(text, language):
    return re.findall(rf"```{language}\n(.*?)```", text, re.S)


def _train_commands(text):
    """Each `python train.py ...` of the page's bash blocks, as a dict of
    its flags (`--name=value`)."""
    commands = []
    for block in _blocks(text, "bash"):
        for command in block.replace("\\\n", " ").splitlines():
            if not command.startswith("python train.py "):
                continue
            words = shlex.split(command)
            parsed = {}
            for word in words[2:]:
                assert word.startswith("--") and "=" in word, command
                name, value = word[2:].split("=", 1)
                parsed[name] = value
            commands.append(parsed)
    return commands


def _defined_flags():
    with open(os.path.join(REPO, "tfattn", "cli", "flags.py"),
              encoding="utf-8") as f:
        source = f.read()
    return set(re.findall(r'DEFINE_\w+\(\s*"(\w+)"', source))


@pytest.mark.parametrize("page", PAGES)
def test_the_page_has_both_routes_and_every_step(page):
    text = _text(page)
    assert len(_blocks(text, "python")) >= 1
    assert _train_commands(text), "no train.py command"
    headings = re.findall(r"^#+ (.*)$", text, re.M)
    assert any("command line" in h for h in headings), headings
    for step in ("1.", "5.", "7."):
        assert any(h.startswith(step) for h in headings), (step, headings)


@pytest.mark.parametrize("page", PAGES)
def test_the_train_commands_use_flags_sets_and_fields_that_exist(page):
    import hparams
    from tfattn import config

    defined = _defined_flags()
    commands = _train_commands(_text(page))
    for flags in commands:
        unknown = set(flags) - defined
        assert not unknown, f"{page}: unknown flags {unknown}"
        if "hparams" not in flags:
            continue
        hp = config.parse_overrides(hparams.get(flags["hparams"]),
                                    flags.get("hparams_overrides", ""))
        assert hp.task == TASKS[page]
    assert any(f.get("mode") == "all" for f in commands)


@pytest.mark.parametrize("page", PAGES)
def test_the_listed_files_are_what_textfiles_reads(page, tmp_path):
    from tfattn.data import sources

    text = _text(page)
    listing = next(b for b in _blocks(text, "text") if "train" in b)
    names = re.findall(r"data/\S+", listing)
    for name in names:
        path = tmp_path / name
        path.parent.mkdir(exist_ok=True)
        path.write_text("a text\n", encoding="utf-8")
    trained = [f for f in _train_commands(text) if "dataset" in f]
    for flags in trained:
        kind, _, prefix = flags["dataset"].partition(":")
        assert kind == "textfiles"
        spec = sources.parse_dataset_spec(
            f"textfiles:{tmp_path / prefix}",
            source_language=flags.get("source_language"),
            target_language=flags.get("target_language"),
            monolingual=TASKS[page] != "translation")
        sources.check_dataset(spec, ("train", "validation", "test"))
        # Every listed file is one that a split reads.
        for split in ("train", "validation", "test"):
            assert sources.load_split(spec, split) is not None
    (tmp_path / names[-1]).unlink()  # A missing split is named.
    with pytest.raises(FileNotFoundError,
                       match=re.escape(names[-1].rsplit(".", 1)[0])):
        sources.check_dataset(spec, ("train", "validation", "test"))


@pytest.mark.parametrize("page", PAGES)
def test_the_links_point_at_pages_that_exist(page):
    text = _text(page)
    links = re.findall(r"\]\(([^)#]+\.md)(?:#[^)]*)?\)", text)
    assert links
    for link in links:
        assert os.path.exists(os.path.normpath(os.path.join(GUIDES, link))), \
            f"{page}: {link}"


def test_the_python_blocks_are_found_by_the_snippet_test():
    from tests import test_readme

    pages = {page for page, _ in test_readme.SNIPPETS}
    for page in PAGES:
        assert os.path.join("docs", "guides", page) in pages
