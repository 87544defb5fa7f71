"""Reference tables generated from the code when the site is built, so that
they cannot drift from it.

A page asks for a table with an otherwise empty directive block,

    ```{tfattn-generated} NAME
    ```

which the `source-read` hook replaces by the Markdown of `GENERATORS[NAME]`
before MyST reads the page (an unknown NAME fails the build, and so does a
block this extension did not replace: MyST knows no such directive):

- `hparams-fields`: every `tfattn.config.HParams` field, its type and the
  comment above it in tfattn/config/hparams.py (`hparams_fields_markdown`);
- `hparams-sets`: every set of the repository's `hparams` package and the
  value of every field in it (`hparams_sets_markdown`);
- `train-flags`: every flag `tfattn.cli.flags.define_flags` gives
  `train.py`, its default and help text (`train_flags_markdown`);
- `package-exports`: the names `import tfattn` offers, each linked to the
  page that documents it (`package_exports_markdown`).
"""

import ast
import contextlib
import dataclasses
import importlib
import inspect
import os
import re
import typing

MARKER = re.compile(
    r"^```\{tfattn-generated\}[ \t]+(?P<name>[\w-]+)[ \t]*\n```[ \t]*$",
    re.MULTILINE)
_SECTION = "# ---"
# `--name` or `--name=value` (a value's closing period is the sentence's).
_FLAG = re.compile(r"(?<![\w-])(--[A-Za-z][\w-]*(?:=[^\s,;)]*[^\s,;).])?)")


def escape(text):
    """`text` as literal Markdown in a table cell: code spans (between
    backticks) are kept, the characters Markdown would read elsewhere are
    escaped.

    Args:
        text: str.

    Returns:
        str.
    """
    parts = text.split("`")
    for i in range(0, len(parts), 2):  # outside the code spans
        parts[i] = re.sub(r"([\\*_<>\[\]|{}$#])", r"\\\1", parts[i])
    for i in range(1, len(parts), 2):
        parts[i] = parts[i].replace("|", "\\|")
    return "`".join(parts)


def flags_as_code(text):
    """`text` with each `--flag` or `--flag=value` (outside code spans) made
    code, so that it reads as one and `--` stays two hyphens.

    Args:
        text: str.

    Returns:
        str.
    """
    parts = text.split("`")
    for i in range(0, len(parts), 2):
        parts[i] = _FLAG.sub(r"`\1`", parts[i])
    return "`".join(parts)


def code(value):
    """A value as inline code, with `None` and the empty string shown."""
    text = '""' if value == "" else str(value)
    return "`" + text.replace("|", "\\|") + "`"


def _table(header, rows):
    lines = ["| " + " | ".join(header) + " |",
             "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def type_text(annotation):
    """A field's type as a reader writes it: `int`, `float or None`.

    Args:
        annotation: a type, a `typing` form or a string.

    Returns:
        str.
    """
    if annotation is type(None):
        return "None"
    if typing.get_origin(annotation) is typing.Union:
        names = [type_text(arg) for arg in typing.get_args(annotation)]
        names.sort(key=lambda name: name == "None")
        return " or ".join(names)
    if isinstance(annotation, type):
        return annotation.__name__
    return str(annotation)


def hparams_fields():
    """Every `HParams` field with its section, type and comment.

    The comment is the block of `#` lines right above the field in
    tfattn/config/hparams.py; a `# --- Title (note).` line there starts a
    section.

    Returns:
        list of (section, name, type, description) str tuples, in the
        class's order.
    """
    from tfattn.config import hparams

    lines, first = inspect.getsourcelines(hparams.HParams)
    tree = ast.parse("".join(lines))
    types = {field.name: field.type
             for field in dataclasses.fields(hparams.HParams)}
    rows, section = [], ""
    for node in tree.body[0].body:
        if not (isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)):
            continue
        comment = []
        index = node.lineno - 2
        while index >= 0 and lines[index].strip().startswith("#"):
            text = lines[index].strip()
            if text.startswith(_SECTION):
                section = text[len(_SECTION):].strip()
                break
            comment.insert(0, text.lstrip("#").strip())
            index -= 1
        name = node.target.id
        rows.append((section, name, type_text(types[name]),
                     flags_as_code(" ".join(comment))))
    return rows


def _section_title(section):
    """("Model", "The arguments of ..."), from "Model (the arguments of
    ...)."."""
    title, _, note = section.rstrip(".").partition(" (")
    note = note[:-1] if note.endswith(")") else note
    return title.strip(), (note[:1].upper() + note[1:] + ".") if note else ""


def hparams_fields_markdown():
    """The `hparams-fields` tables: one per section of `HParams`.

    Returns:
        str. Markdown: a heading, a note and a Field / Type / Description
        table per section, then the fields a resumed run may change.
    """
    from tfattn import config

    out, sections = [], {}
    for section, name, kind, description in hparams_fields():
        sections.setdefault(section, []).append(
            [f"`{name}`", escape(kind), escape(description)])
    for section, rows in sections.items():
        title, note = _section_title(section)
        out += [f"### {title} fields", ""]
        if note:
            out += [escape(note), ""]
        out += _table(["Field", "Type", "Description"], rows) + [""]
    out += ["A resumed run (the same `--model_dir`) may change only these "
            "fields; every other one must equal the saved value: "
            + ", ".join(f"`{name}`" for name in config.RESUMABLE_FIELDS)
            + ".", ""]
    return "\n".join(out)


def _summary(module):
    """The first paragraph of a module's docstring, on one line."""
    doc = inspect.getdoc(module) or ""
    return " ".join(doc.split("\n\n")[0].split())


def hparams_sets_markdown(sets=None):
    """The `hparams-sets` tables: what each set is, then the value of every
    field in every set (sets as columns; translation sets, then language
    models).

    Args:
        sets: the sets' registry (an object with `names()` and `get(name)`,
            the set modules in `REGISTRY`), or None for the repository's
            `hparams` package.

    Returns:
        str. Markdown.
    """
    if sets is None:
        sets = importlib.import_module("hparams")
    names = list(sets.names())
    out = _table(["Set", "Task", "What it is"], [
        [f"`{name}`", code(sets.get(name).task),
         escape(_summary(sets.REGISTRY[name]))] for name in names]) + [""]
    groups = {}
    for name in names:
        group = ("Translation sets" if sets.get(name).task == "translation"
                 else "Language-model sets")
        groups.setdefault(group, []).append(name)
    for group, members in groups.items():
        out += [f"### {group}", ""]
        rows, current = [], None
        for section, field, _, _ in hparams_fields():
            if section != current:
                current = section
                title = _section_title(section)[0]
                rows.append([f"**{title}**"] + [""] * len(members))
            rows.append([f"`{field}`"] + [
                code(getattr(sets.get(name), field)) for name in members])
        out += _table(["Field"] + [f"`{name}`" for name in members], rows)
        out.append("")
    return "\n".join(out)


@contextlib.contextmanager
def train_flags():
    """The flags `tfattn.cli.flags.define_flags` defines for `train.py`.

    Defines them on `absl.flags.FLAGS` with the repository's `hparams` sets
    when they are not defined yet, and removes them again on leaving, so a
    later `import train` can define them.

    Yields:
        list of absl `Flag`, in the order they are defined.
    """
    from absl import flags

    from tfattn.cli import flags as cli_flags

    module = cli_flags.__name__
    defined = flags.FLAGS.get_flags_for_module(module)
    if defined:
        yield list(defined)
        return
    cli_flags.define_flags(importlib.import_module("hparams"))
    defined = list(flags.FLAGS.get_flags_for_module(module))
    try:
        yield defined
    finally:
        for flag in defined:
            if flag.name in flags.FLAGS:
                delattr(flags.FLAGS, flag.name)


def _flag_kind(flag):
    """"bool", "int, at least 1", "one of: a, b", ..."""
    parser = flag.parser
    if getattr(parser, "enum_values", None):
        return "one of " + ", ".join(f"`{v}`" for v in parser.enum_values)
    kind = flag.flag_type()
    bounds = []
    if getattr(parser, "lower_bound", None) is not None:
        bounds.append(f"≥ {parser.lower_bound}")
    if getattr(parser, "upper_bound", None) is not None:
        bounds.append(f"≤ {parser.upper_bound:,}")
    return kind + (" " + ", ".join(bounds) if bounds else "")


def _flag_help(flag):
    """The help text on one line, without the `<a|b|c>: ` absl puts ahead
    of an enum's (the Type column lists the choices)."""
    text = " ".join(flag.help.split())
    if getattr(flag.parser, "enum_values", None):
        text = re.sub(r"^<[^>]*>: ", "", text)
    return flags_as_code(text)


def train_flags_markdown():
    """The `train-flags` table: Flag / Type / Default / Help of every flag
    of `train.py`, in the order `define_flags` defines them.

    Returns:
        str. Markdown.
    """
    with train_flags() as defined:
        rows = [[f"`--{flag.name}`", escape(_flag_kind(flag)),
                 code(flag.default), escape(_flag_help(flag))]
                for flag in defined]
    return "\n".join(_table(["Flag", "Type", "Default", "Help"], rows)
                     + [""])


def documented_name(package, name):
    """Where the API pages document `package.name`: the shortest module
    under `package` whose `__all__` has the same object, e.g.
    `tfattn.layers.MultiHeadAttention` for `tfattn.MultiHeadAttention`.

    Args:
        package: module. The package that re-exports `name`.
        name: str.

    Returns:
        str. A full dotted name.
    """
    value = getattr(package, name)
    if inspect.ismodule(value):
        return value.__name__
    parts = value.__module__.split(".")
    for end in range(2, len(parts) + 1):
        module = importlib.import_module(".".join(parts[:end]))
        if (name in getattr(module, "__all__", ())
                and getattr(module, name, None) is value):
            return f"{module.__name__}.{name}"
    return f"{value.__module__}.{name}"


def package_exports_markdown():
    """The `package-exports` table: each name of `tfattn.__all__`, linked
    to its documentation, with the first sentence of its docstring.

    Returns:
        str. Markdown.
    """
    import tfattn

    rows = []
    for name in tfattn.__all__:
        value = getattr(tfattn, name)
        role = ("py:mod" if inspect.ismodule(value) else
                "py:class" if inspect.isclass(value) else "py:func")
        target = documented_name(tfattn, name)
        first = (inspect.getdoc(value) or "").split("\n\n")[0]
        summary = " ".join(first.split())
        rows.append([f"{{{role}}}`tfattn.{name} <{target}>`",
                     escape(summary)])
    return "\n".join(_table(["Name", "What it is"], rows) + [""])


GENERATORS = {
    "hparams-fields": hparams_fields_markdown,
    "hparams-sets": hparams_sets_markdown,
    "train-flags": train_flags_markdown,
    "package-exports": package_exports_markdown,
}


def expand(text):
    """`text` with each `tfattn-generated` block replaced by its table.

    Args:
        text: str. A page's Markdown.

    Returns:
        str.

    Raises:
        ValueError: a block names no known generator.
    """
    def replace(match):
        name = match.group("name")
        if name not in GENERATORS:
            raise ValueError(
                f"Unknown tfattn-generated table {name!r}; known: "
                + ", ".join(GENERATORS))
        return GENERATORS[name]()
    return MARKER.sub(replace, text)


def _source_read(app, docname, source):
    if MARKER.search(source[0]):
        source[0] = expand(source[0])


def _generated_pages(app, env, added, changed, removed):
    """Pages with generated tables are read again on every build (the code
    they come from may have changed)."""
    pages = []
    for docname in env.found_docs:
        path = env.doc2path(docname)
        if str(path).endswith(".md") and os.path.exists(path):
            with open(path, encoding="utf-8") as handle:
                if MARKER.search(handle.read()):
                    pages.append(docname)
    return pages


def setup(app):
    """Registers the `source-read` hook.

    Args:
        app: the Sphinx application.

    Returns:
        dict. The extension's metadata.
    """
    app.connect("source-read", _source_read)
    app.connect("env-get-outdated", _generated_pages)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
