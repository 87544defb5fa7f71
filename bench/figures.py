"""Render tfattn's published figures from bench/figures/*.json, or check them.

Every figure of the pages (README.md's Results and Hardware tables,
docs/results.md, docs/benchmarks.md) lives once, as data, in
bench/figures/<topic>.json:

    {"tables": {"<table_id>": {
        "columns": ["batch", "tfattn", ...],
        "align": "rl...",             # optional: one l or r per column
        "rows": [["1", "879"], ...],  # the exact strings the page shows
        "measured": {"date": "YYYY-MM-DD", "commit": "<short hash>",
                     "cpu": "<CPU in words>", "command": "python ..."},
        "note": "optional, for maintainers; not rendered"}}}

A table whose rows were measured at different times carries `date`,
`commit` and `CPU` columns and a table-level `command` instead of
`measured`; a table compiled from others names them in `compiled_from`;
a table may show some columns of another table of its file
(`"view": {"of": "<table_id>", "columns": [...]}`).

A page shows a table between two markers, which GitHub and the docs site
do not display:

    <!-- figures: causal_lm.json#generation -->
    (the table, then "Measured DATE at commit HASH on CPU: `COMMAND`.")
    <!-- /figures -->

    python bench/figures.py           # rewrite every block from the data
    python bench/figures.py --check   # exit 1 naming page, table and line
"""

import argparse
import json
import os
import re
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIGURES = os.path.join("bench", "figures")
OPEN = re.compile(r"^<!-- figures: (?P<source>\S+?)#(?P<table>\S+) -->\n",
                  re.M)
FENCE = re.compile(r"^(`{3,}|~{3,})[^\n]*\n.*?^\1[ \t]*$", re.M | re.S)
CLOSE = "<!-- /figures -->"
SKIPPED_DIRS = {".git", ".venv", "_build", "node_modules", "runs"}
PROVENANCE_COLUMNS = ("date", "commit", "CPU")
DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
NO_RUNS = "No runs yet."


class FigureError(ValueError):
    """A marker or a table that cannot be rendered (names the culprit)."""


def pages(root):
    """The Markdown pages under `root` that may hold marked blocks.

    Args:
        root: str, the repository's root.

    Returns:
        Sorted list of paths relative to `root` (README.md, docs/*.md,
        bench/README.md, ...), skipping virtual environments and builds.
    """
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in SKIPPED_DIRS
                   and not d.startswith(".") and not d.endswith(".egg-info")]
        found += [os.path.relpath(os.path.join(folder, name), root)
                  for name in files if name.endswith(".md")]
    return sorted(found)


def load_tables(root, source, cache=None):
    """The `tables` dict of bench/figures/<source>.

    Args:
        root: str, the repository's root.
        source: str, a file name under bench/figures/, e.g. "multi30k.json".
        cache: optional dict, source -> tables, filled as files are read.

    Returns:
        Dict of table id -> table.

    Raises:
        FigureError: the file is missing or holds no `tables` object.
    """
    cache = {} if cache is None else cache
    if source not in cache:
        path = os.path.join(root, FIGURES, source)
        if os.path.basename(source) != source or not os.path.isfile(path):
            raise FigureError(f"{FIGURES}/{source} does not exist")
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        if not isinstance(data, dict) or not isinstance(
                data.get("tables"), dict):
            raise FigureError(f"{FIGURES}/{source} has no \"tables\" object")
        cache[source] = data["tables"]
    return cache[source]


def find_table(root, source, table_id, cache=None):
    """One table, with a `view` resolved to the columns it shows.

    Args:
        root: str, the repository's root.
        source: str, the file name under bench/figures/.
        table_id: str, the table's id in that file.
        cache: optional dict shared across calls (see `load_tables`).

    Returns:
        The table dict; for a view, a new dict with the viewed table's
        provenance, the view's columns and the matching cells of its rows.

    Raises:
        FigureError: the file, the table, a viewed table or column is
            missing.
    """
    tables = load_tables(root, source, cache)
    if table_id not in tables:
        raise FigureError(f"{FIGURES}/{source} has no table {table_id!r}")
    table = tables[table_id]
    if "view" not in table:
        return table
    view = table["view"]
    base = find_table(root, source, view["of"], cache)
    missing = [c for c in view["columns"] if c not in base["columns"]]
    if missing:
        raise FigureError(f"{source}#{table_id} shows columns {missing} "
                          f"that {view['of']!r} lacks")
    picks = [base["columns"].index(c) for c in view["columns"]]
    align = base.get("align", "l" * len(base["columns"]))
    shown = {key: value for key, value in base.items() if key != "note"}
    shown.update(columns=list(view["columns"]),
                 align="".join(align[i] for i in picks),
                 rows=[[row[i] for i in picks] for row in base["rows"]])
    return shown


def markdown_table(table):
    """The table as GitHub Markdown lines (header, alignment row, rows).

    Args:
        table: dict with `columns`, `rows` and optionally `align`.

    Returns:
        List of str, one per line; ["No runs yet."] when there are no rows.
    """
    columns = table["columns"]
    if not table["rows"]:
        return [NO_RUNS]
    align = table.get("align", "l" * len(columns))
    if len(align) != len(columns):
        raise FigureError(f"align {align!r} does not have one letter for "
                          f"each of {len(columns)} columns")
    lines = ["| " + " | ".join(columns) + " |",
             "|" + "|".join("---:" if a == "r" else "---" for a in align)
             + "|"]
    for row in table["rows"]:
        if len(row) != len(columns):
            raise FigureError(f"row {row} has {len(row)} cells for "
                              f"{len(columns)} columns")
        lines.append("| " + " | ".join(row) + " |")
    return lines


def provenance_line(table):
    """The line under the table that says where its figures come from.

    Args:
        table: dict, a table of bench/figures/.

    Returns:
        str, or None when the rows carry their own provenance and no
        command is given.
    """
    measured = table.get("measured")
    if measured:
        return (f"Measured {measured['date']} at commit {measured['commit']}"
                f" on {measured['cpu']}: `{measured['command']}`.")
    if table.get("compiled_from"):
        return ("Compiled from the tables below, each with its date, "
                "commit, CPU and command.")
    if table.get("command"):
        return f"Command: `{table['command']}`."
    return None


def render(table):
    """The text between a block's two markers.

    Args:
        table: dict, a table of bench/figures/ (views resolved).

    Returns:
        str: a blank line, the table, and the provenance line, each
        followed by a blank line.
    """
    text = "\n" + "\n".join(markdown_table(table)) + "\n\n"
    line = provenance_line(table)
    return text + (line + "\n\n" if line else "")


def blocks(text, page="page"):
    """The marked blocks of one page's text (markers in fenced code are
    examples, not blocks).

    Args:
        text: str, the page.
        page: str, its name for error messages.

    Returns:
        List of (source, table_id, body_start, body_end, line) with
        text[body_start:body_end] the block's body and `line` the 1-based
        line of its opening marker.

    Raises:
        FigureError: a marker has no closing `<!-- /figures -->`.
    """
    found = []
    fenced = [range(*m.span()) for m in FENCE.finditer(text)]
    position = 0
    while True:
        match = OPEN.search(text, position)
        if not match:
            return found
        if any(match.start() in r for r in fenced):  # an example in code
            position = match.end()
            continue
        line = text.count("\n", 0, match.start()) + 1
        end = text.find(CLOSE, match.end())
        if end < 0 or OPEN.search(text[match.end():end]):
            raise FigureError(f"{page}:{line}: <!-- figures: "
                              f"{match['source']}#{match['table']} --> has "
                              f"no {CLOSE}")
        found.append((match["source"], match["table"], match.end(), end,
                      line))
        position = end + len(CLOSE)


def first_difference(have, want):
    """(index, have line, want line) of the first differing line, or None."""
    have_lines, want_lines = have.split("\n"), want.split("\n")
    for i in range(max(len(have_lines), len(want_lines))):
        a = have_lines[i] if i < len(have_lines) else "<end of block>"
        b = want_lines[i] if i < len(want_lines) else "<end of block>"
        if a != b:
            return i, a, b
    return None


def check_page(root, page, cache=None):
    """The blocks of one page that differ from their data.

    Args:
        root: str, the repository's root.
        page: str, the page's path relative to `root`.
        cache: optional dict shared across calls (see `load_tables`).

    Returns:
        List of str, one per differing block: page, line, table and the
        first differing line.

    Raises:
        FigureError: a marker names a missing file or table, or is not
            closed.
    """
    with open(os.path.join(root, page), encoding="utf-8") as f:
        text = f.read()
    problems = []
    for source, table_id, start, end, line in blocks(text, page):
        try:
            want = render(find_table(root, source, table_id, cache))
        except FigureError as error:
            raise FigureError(f"{page}:{line}: {error}") from None
        difference = first_difference(text[start:end], want)
        if difference:
            index, have_line, want_line = difference
            problems.append(
                f"{page}:{line + 1 + index}: {source}#{table_id} differs "
                f"from its data: the page has {have_line!r}, the data "
                f"gives {want_line!r}")
    return problems


def check(root=REPO):
    """Every differing block of every page under `root`.

    Args:
        root: str, the repository's root.

    Returns:
        List of str (see `check_page`); empty when every block matches.
    """
    cache = {}
    problems = []
    for page in pages(root):
        problems += check_page(root, page, cache)
    return problems


def rewrite(root=REPO):
    """Rewrites every marked block under `root` from the data.

    Args:
        root: str, the repository's root.

    Returns:
        List of the pages (relative paths) that changed.
    """
    cache = {}
    changed = []
    for page in pages(root):
        path = os.path.join(root, page)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        pieces, position = [], 0
        for source, table_id, start, end, line in blocks(text, page):
            try:
                table = find_table(root, source, table_id, cache)
            except FigureError as error:
                raise FigureError(f"{page}:{line}: {error}") from None
            pieces += [text[position:start], render(table)]
            position = end
        new = "".join(pieces) + text[position:]
        if new != text:
            with open(path, "w", encoding="utf-8") as f:
                f.write(new)
            changed.append(page)
    return changed


def provenance_problems(name, table_id, table):
    """What a table's provenance lacks (formats only; commits unchecked).

    Args:
        name: str, the file's name under bench/figures/.
        table_id: str.
        table: dict.

    Returns:
        List of str naming the table and what is missing or malformed.
    """
    where = f"{name}#{table_id}"
    if "view" in table or table.get("compiled_from"):
        return []
    if "measured" in table:
        got = table["measured"]
        problems = [f"{where}: measured has no {key!r}" for key in
                    ("date", "commit", "cpu", "command") if not got.get(key)]
        if got.get("date") and not DATE.search(got["date"]) and \
                got["date"] != "unknown":
            problems.append(f"{where}: date {got['date']!r} is not "
                            "YYYY-MM-DD")
        return problems
    missing = [c for c in PROVENANCE_COLUMNS if c not in table["columns"]]
    if missing or not table.get("command"):
        return [f"{where}: neither \"measured\" nor the columns "
                f"{list(PROVENANCE_COLUMNS)} and a \"command\" "
                f"(missing: {missing or 'command'})"]
    column = table["columns"].index("date")
    return [f"{where}: row {row[0]!r} has date {row[column]!r}, not "
            "YYYY-MM-DD" for row in table["rows"]
            if not DATE.search(row[column]) and row[column] != "unknown"]


def commits(table):
    """The commit strings a table names (its measured or its rows').

    Args:
        table: dict, a table of bench/figures/.

    Returns:
        List of str, each a hash, several hashes in words, or "unknown".
    """
    if "measured" in table:
        return [table["measured"]["commit"]]
    if "commit" in table.get("columns", []):
        column = table["columns"].index("commit")
        return [row[column] for row in table["rows"]]
    return []


def dumps(data):
    """`data` (a figures file's {"tables": ...}) as JSON in the files'
    layout: a table's keys one a line, each row and small object on one.

    Args:
        data: dict. {"tables": {table_id: table}}.

    Returns:
        str. The file's text, ending in a newline.
    """
    def one_line(value):
        return json.dumps(value, ensure_ascii=False)

    tables = []
    for table_id, table in data["tables"].items():
        lines = []
        for key, value in table.items():
            if key == "rows" and value:
                rows = ",\n".join(f"      {one_line(r)}" for r in value)
                lines.append(f'    "rows": [\n{rows}\n    ]')
            else:
                lines.append(f"    {one_line(key)}: {one_line(value)}")
        body = ",\n".join(lines)
        tables.append(f"  {one_line(table_id)}: {{\n{body}\n   }}")
    return '{"tables": {\n' + ",\n".join(tables) + "\n}}\n"


def parse_args(argv):
    parser = argparse.ArgumentParser(
        description="Render the pages' figures from bench/figures/*.json, "
                    "or check that the pages show them.")
    parser.add_argument("--check", action="store_true",
                        help="change nothing; exit 1 naming each page, table"
                             " and line that differs from its data")
    parser.add_argument("--root", default=REPO,
                        help="the repository's root (default: this "
                             "checkout)")
    return parser.parse_args(argv)


def main(argv=None):
    """Command line: rewrite the blocks, or with --check report them.

    Returns:
        int exit status: 0, or 1 when a block differs or cannot be rendered.
    """
    args = parse_args(argv)
    try:
        if args.check:
            problems = check(args.root)
            for problem in problems:
                print(problem)
            return 1 if problems else 0
        for page in rewrite(args.root):
            print(f"rewrote {page}")
    except FigureError as error:
        print(f"error: {error}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
