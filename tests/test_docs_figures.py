"""The pages' figures equal their data: every block between
`<!-- figures: FILE#TABLE -->` and `<!-- /figures -->` in the repository's
pages is what `bench/figures.py` renders from bench/figures/FILE, a figure
changed by hand is caught (page and table named), a marker naming a
missing file or table is an error naming it, every table says when, at
which commit, on which CPU and with which command it was measured, and
README.md's Results and Hardware tables are all marked blocks."""

import decimal
import glob
import importlib.util
import json
import os
import re
import shutil
import subprocess

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIGURES_DIR = os.path.join(REPO, "bench", "figures")


def _load_figures():
    """bench/figures.py as a module (bench/ is not a package)."""
    spec = importlib.util.spec_from_file_location(
        "bench_figures", os.path.join(REPO, "bench", "figures.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


figures = _load_figures()


def _all_tables():
    """(file name, table id, table) for every table of bench/figures/."""
    found = []
    for name in sorted(os.listdir(FIGURES_DIR)):
        if name.endswith(".json"):
            with open(os.path.join(FIGURES_DIR, name), encoding="utf-8") as f:
                tables = json.load(f)["tables"]
            found += [(name, table_id, table)
                      for table_id, table in tables.items()]
    return found


TABLES = _all_tables()


def _copy_repository_pages(tmp_path, pages):
    """A root under tmp_path holding `pages` and bench/figures/."""
    for page in pages:
        os.makedirs(tmp_path / os.path.dirname(page), exist_ok=True)
        shutil.copy(os.path.join(REPO, page), tmp_path / page)
    shutil.copytree(FIGURES_DIR, tmp_path / "bench" / "figures")
    return str(tmp_path)


def _section(text, heading):
    """The text of `## heading` up to the next `## ` heading."""
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else len(text)]


# (1) Every marked block equals its rendering.


def test_every_marked_block_equals_its_rendering():
    assert figures.check(REPO) == []


def test_the_figure_pages_have_blocks_and_every_file_is_shown():
    shown = set()
    for page in figures.pages(REPO):
        with open(os.path.join(REPO, page), encoding="utf-8") as f:
            shown |= {source for source, *_ in figures.blocks(f.read())}
    for page in ("README.md", "docs/results.md", "docs/benchmarks.md"):
        with open(os.path.join(REPO, page), encoding="utf-8") as f:
            assert len(figures.blocks(f.read())) >= 2, page
    unshown = {name for name, _, _ in TABLES} - shown
    assert not unshown, f"bench/figures/ files no page shows: {unshown}"


@pytest.mark.parametrize("page", ["docs/results.md", "docs/benchmarks.md"])
def test_every_table_of_the_figure_pages_is_a_marked_block(page):
    """No table on these pages outside a block: each figure has data."""
    with open(os.path.join(REPO, page), encoding="utf-8") as f:
        text = f.read()
    inside = [range(start, end) for *_, start, end, _ in figures.blocks(text)]
    for match in re.finditer(r"^\|.*\|$", text, re.M):
        assert any(match.start() in r for r in inside), (
            f"{page}: a table line outside a figures block: "
            f"{match.group(0)[:60]}")


# (2) A figure changed by hand is caught.


def test_a_digit_changed_by_hand_is_caught_naming_page_and_table(
        tmp_path, capsys):
    root = _copy_repository_pages(tmp_path, ["docs/benchmarks.md"])
    page = os.path.join(root, "docs", "benchmarks.md")
    with open(page, encoding="utf-8") as f:
        text = f.read()
    source, table_id, start, end, _ = next(
        b for b in figures.blocks(text) if b[1] == "decoding")
    body = text[start:end]
    digit = re.search(r"\| [0-9,]*([0-9])", body)
    position = start + digit.start(1)
    changed = "1" if text[position] != "1" else "2"
    with open(page, "w", encoding="utf-8") as f:
        f.write(text[:position] + changed + text[position + 1:])

    problems = figures.check(root)
    assert len(problems) == 1
    assert problems[0].startswith("docs/benchmarks.md:")
    assert "decoding.json#decoding" in problems[0]
    assert figures.main(["--check", "--root", root]) == 1
    assert "docs/benchmarks.md" in capsys.readouterr().out

    assert figures.main(["--root", root]) == 0  # rewrites it from the data
    assert figures.check(root) == []
    with open(page, encoding="utf-8") as f:
        assert f.read() == text


def test_a_changed_data_cell_makes_the_page_differ(tmp_path):
    root = _copy_repository_pages(tmp_path, ["README.md"])
    path = os.path.join(root, "bench", "figures", "hardware.json")
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    data["tables"]["hardware"]["rows"][0][3] = "9.99x"
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f)
    (problem,) = figures.check(root)
    assert problem.startswith("README.md:")
    assert "hardware.json#hardware" in problem and "9.99x" in problem


# (3) Markers that name nothing, or are not closed, are errors.


@pytest.mark.parametrize("marker, named", [
    ("missing.json#table", "missing.json"),
    ("multi30k.json#no_such_table", "no_such_table"),
])
def test_a_marker_naming_a_missing_file_or_table_is_an_error(
        tmp_path, capsys, marker, named):
    root = _copy_repository_pages(tmp_path, [])
    with open(os.path.join(root, "page.md"), "w", encoding="utf-8") as f:
        f.write(f"# A page\n\n<!-- figures: {marker} -->\n<!-- /figures -->\n")
    with pytest.raises(figures.FigureError, match=named) as error:
        figures.check(root)
    assert str(error.value).startswith("page.md:3:")
    assert figures.main(["--check", "--root", root]) == 1
    assert named in capsys.readouterr().out
    with pytest.raises(figures.FigureError, match=named):
        figures.rewrite(root)


def test_a_marker_without_its_closing_marker_is_an_error(tmp_path):
    root = _copy_repository_pages(tmp_path, [])
    with open(os.path.join(root, "page.md"), "w", encoding="utf-8") as f:
        f.write("<!-- figures: loss.json#loss -->\n| a |\n")
    with pytest.raises(figures.FigureError, match="no <!-- /figures -->"):
        figures.check(root)


def test_a_marker_in_fenced_code_is_an_example_not_a_block():
    text = ("```markdown\n<!-- figures: missing.json#t -->\n"
            "<!-- /figures -->\n```\n")
    assert figures.blocks(text) == []


def test_a_view_of_a_missing_column_is_an_error(tmp_path):
    root = _copy_repository_pages(tmp_path, [])
    path = os.path.join(root, "bench", "figures", "multi30k.json")
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    data["tables"]["readme_after_fix"]["view"]["columns"].append("nope")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f)
    with pytest.raises(figures.FigureError, match="nope"):
        figures.find_table(root, "multi30k.json", "readme_after_fix")


def test_a_row_of_the_wrong_width_is_an_error():
    table = {"columns": ["a", "b"], "rows": [["1"]]}
    with pytest.raises(figures.FigureError, match="1 cells for 2 columns"):
        figures.render(table)


def test_an_empty_table_renders_no_runs_yet_and_its_provenance():
    table = {"columns": ["a"], "rows": [], "command": "python x.py"}
    assert figures.render(table) == (
        "\nNo runs yet.\n\nCommand: `python x.py`.\n\n")
    measured = {"date": "2026-12-07", "commit": "abc1234", "cpu": "a CPU",
                "command": "python y.py"}
    assert figures.render({"columns": ["a"], "align": "r", "rows": [["1"]],
                           "measured": measured}) == (
        "\n| a |\n|---:|\n| 1 |\n\nMeasured 2026-12-07 at commit abc1234 "
        "on a CPU: `python y.py`.\n\n")


# (4) Every table has provenance.


@pytest.mark.parametrize("name, table_id, table", TABLES,
                         ids=[f"{n}#{t}" for n, t, _ in TABLES])
def test_every_table_has_provenance(name, table_id, table):
    assert figures.provenance_problems(name, table_id, table) == []
    for source in table.get("compiled_from", []):
        file_name, other = source.split("#")
        figures.find_table(REPO, file_name, other)  # raises if missing


def test_provenance_problems_are_named():
    table = {"columns": ["a"], "rows": [["1"]],
             "measured": {"date": "yesterday", "commit": "abc1234",
                          "cpu": "a CPU"}}
    problems = figures.provenance_problems("f.json", "t", table)
    assert "f.json#t: measured has no 'command'" in problems
    assert "f.json#t: date 'yesterday' is not YYYY-MM-DD" in problems
    bare = {"columns": ["a", "date"], "rows": [["1", "2026-12-01"]]}
    (problem,) = figures.provenance_problems("f.json", "t", bare)
    assert "f.json#t" in problem and "commit" in problem


def _known(commit):
    return subprocess.run(["git", "cat-file", "-e", f"{commit}^{{commit}}"],
                          cwd=REPO, capture_output=True).returncode == 0


@pytest.mark.skipif(not os.path.isdir(os.path.join(REPO, ".git")),
                    reason="no .git: the commits cannot be looked up")
def test_every_commit_named_is_in_the_history():
    unknown = []
    for name, table_id, table in TABLES:
        for text in figures.commits(table):
            hashes = re.findall(r"\b[0-9a-f]{7,40}\b", text)
            assert hashes or text.startswith("unknown"), (name, table_id)
            unknown += [(name, table_id, h) for h in hashes if not _known(h)]
    assert unknown == []


# (5) README's Results and Hardware tables are marked blocks.


@pytest.mark.parametrize("heading", ["Results", "Hardware"])
def test_the_readme_tables_are_marked_blocks(heading):
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
        text = f.read()
    section = _section(text, heading)
    found = figures.blocks(section)
    assert found, f"README.md's {heading} has no figures block"
    inside = [range(start, end) for *_, start, end, _ in found]
    for match in re.finditer(r"^\|.*\|$", section, re.M):
        assert any(match.start() in r for r in inside), match.group(0)


# The Multi30k means are the means of their runs.


def _bleu_at(row, columns, penalty):
    """A before-fix run's test BLEU at one length penalty, or None."""
    penalties = row[columns.index("length penalty")].split(" / ")
    scores = row[columns.index("test BLEU, tokenised")].split(" / ")
    return decimal.Decimal(scores[penalties.index(penalty)]) if penalty in \
        penalties else None


def test_the_multi30k_means_are_the_means_of_their_runs():
    tables = figures.load_tables(REPO, "multi30k.json")
    runs, means = tables["translation_before_fix"], tables["before_fix_means"]
    columns = means["columns"]
    for row in means["rows"]:
        penalty = row[columns.index("length penalty")]
        seeds = row[columns.index("seeds")].split(", ")
        scores = [_bleu_at(run, runs["columns"], penalty)
                  for run in runs["rows"] if run[:2] == row[:2]
                  and run[2] in seeds]
        assert len(scores) == len(seeds) and None not in scores, row
        mean = (sum(scores) / len(scores)).quantize(
            decimal.Decimal("0.01"), rounding=decimal.ROUND_HALF_UP)
        shown = row[columns.index("test BLEU, tokenised: mean (range)")]
        want = f"{mean}" if len(scores) == 1 else (
            f"{mean} ({min(scores)}-{max(scores)})")
        assert shown == want, row


def test_the_data_files_keep_the_layout_dumps_writes():
    """A script that updates a figure (`figures.dumps`) rewrites only the
    lines it changes."""
    for path in sorted(glob.glob(os.path.join(REPO, "bench", "figures",
                                              "*.json"))):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        assert figures.dumps(json.loads(text)) == text, path
