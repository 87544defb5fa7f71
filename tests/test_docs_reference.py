"""The API reference is complete and shows what the code does: constructor
signatures (docs/_ext/tfattn_autodoc.py), the generated hparams and flag
tables (docs/_ext/tfattn_tables.py), and an API page for every public module
and every public name. No Sphinx build: the hooks and generators are called
directly, the pages read as text."""

import ast
import dataclasses
import inspect
import os
import re
import sys
import types

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
API = os.path.join(REPO, "docs", "api")
sys.path.insert(0, os.path.join(REPO, "docs", "_ext"))

import tfattn_autodoc  # noqa: E402
import tfattn_tables  # noqa: E402

# Internals: on the pages under the index's "Internals" heading.
INTERNAL_PACKAGES = ("tfattn.utils", "tfattn.cli")
INTERNAL_PAGES = ("cli.md", "utils.md")
_DIRECTIVE = re.compile(
    r"^\.\. auto(?P<kind>\w+):: (?P<name>[\w.]+)\n(?P<options>(?:   :.*\n)*)",
    re.MULTILINE)


def _parameters(signature):
    return [(p.name, p.kind, p.default)
            for p in signature.parameters.values()]


@pytest.mark.parametrize("name", [
    "MultiHeadAttention", "FeedForward", "Transformer", "CausalLM",
    "MaskedLM", "Dropout",
])
def test_signature_hook_gives_the_constructor_arguments(name):
    import tfattn

    cls = getattr(tfattn, name)
    init = inspect.signature(cls.__init__)
    expected = [(p.name, p.kind, p.default)
                for p in list(init.parameters.values())[1:]]
    assert _parameters(tfattn_autodoc.constructor_signature(cls)) == expected
    shown, _ = tfattn_autodoc.process_signature(
        None, "class", f"tfattn.{name}", cls, None, "(*args, **kwargs)", "")
    assert shown == str(inspect.Signature(
        list(init.parameters.values())[1:]))
    assert shown != "(*args, **kwargs)"


def test_signature_hook_follows_kwargs_to_the_tfattn_bases():
    from tfattn.layers import Decoder

    shown = str(tfattn_autodoc.constructor_signature(Decoder))
    assert shown.startswith("(use_cross_attention=True, *, num_layers=6, "
                            "num_heads=8, ffn_units=2048,")
    assert shown.endswith("bias_initializer='zeros', **kwargs)")
    assert shown.count("num_heads") == 1


def test_signature_hook_leaves_other_objects_alone():
    import tfattn
    from tfattn.config import HParams

    assert tfattn_autodoc.process_signature(
        None, "class", "tfattn.config.HParams", HParams, None, "(a)",
        "") is None
    assert tfattn_autodoc.process_signature(
        None, "method", "tfattn.Transformer.generate",
        tfattn.Transformer.generate, None, "(source)", "") is None


def test_skip_hook_keeps_tfattn_methods_and_drops_keras_and_builtins():
    import keras
    import tfattn

    options = types.SimpleNamespace(members=True)
    mha = tfattn.MultiHeadAttention
    for member in (mha.init_cache, mha.precompute_cache,
                   tfattn.Transformer.generate, tfattn.Transformer.search):
        assert tfattn_autodoc.skip_inherited(
            None, "class", member.__name__, member, False, options) is None
    for name, member in (("add_weight", keras.layers.Layer.add_weight),
                         ("count", tuple.count),
                         ("with_traceback", ValueError.with_traceback),
                         ("trainable", vars(keras.layers.Layer).get(
                             "trainable", keras.layers.Layer.add_loss))):
        assert tfattn_autodoc.skip_inherited(
            None, "class", name, member, False, options) is True
    # autodoc's own decision stands, and `:no-members:` lists nothing.
    assert tfattn_autodoc.skip_inherited(
        None, "class", "x", mha.init_cache, True, options) is None
    assert tfattn_autodoc.skip_inherited(
        None, "module", "x", mha.init_cache, False,
        types.SimpleNamespace(members=None)) is True


def test_a_constant_does_not_show_its_types_docstring():
    lines = inspect.getdoc(tuple).splitlines()
    tfattn_autodoc.drop_type_docstring(None, "data", "X", (1, 2), None,
                                       lines)
    assert lines == []
    own = ["The choices."]
    tfattn_autodoc.drop_type_docstring(None, "data", "X", (1, 2), None, own)
    assert own == ["The choices."]


def _table_rows(markdown):
    """The first cell of each table row (the header and rules excluded),
    and the header cells."""
    rows = [line for line in markdown.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in row.strip("|").split(" | ")]
            for row in rows if not row.startswith("|---")]


def test_hparams_fields_table_lists_every_field_with_its_comment():
    from tfattn.config import HParams

    rows = tfattn_tables.hparams_fields()
    assert [row[1] for row in rows] == [
        field.name for field in dataclasses.fields(HParams)]
    assert all(description for _, _, _, description in rows)
    assert {section.split(" ")[0] for section, _, _, _ in rows} == {
        "Model", "Training.", "Decoding"}
    shown = [row[0] for row in _table_rows(
        tfattn_tables.hparams_fields_markdown())
        if row[0].startswith("`")]
    assert shown == [f"`{field.name}`"
                     for field in dataclasses.fields(HParams)]
    types_shown = {row[1]: row[2] for row in rows}
    assert types_shown["batch_size"] == "int or None"
    assert types_shown["num_units"] == "int"


def test_hparams_sets_table_lists_every_set_and_its_values():
    import hparams
    from tfattn.config import HParams

    markdown = tfattn_tables.hparams_sets_markdown()
    tables = _table_rows(markdown)
    headers = [row for row in tables if row[0] == "Field"]
    columns = [cell.strip("`") for row in headers for cell in row[1:]]
    assert sorted(columns) == sorted(hparams.names())
    fields = [field.name for field in dataclasses.fields(HParams)]
    # Every field once in each values table, with each set's value.
    for header in headers:
        start = tables.index(header)
        body = tables[start + 1:start + 1 + len(fields) + 3]
        values = {row[0].strip("`"): row[1:] for row in body
                  if row[0].startswith("`")}
        assert list(values) == fields
        for column, name in enumerate(cell.strip("`")
                                      for cell in header[1:]):
            hp = hparams.get(name)
            for field in fields:
                expected = tfattn_tables.code(getattr(hp, field))
                assert values[field][column] == expected, (name, field)
    summaries = [row[0].strip("`") for row in tables
                 if len(row) == 3 and row[0] != "Set"]
    assert summaries == list(hparams.names())


def _defined_flag_names():
    """The flags tfattn/cli/flags.py defines, read from its source."""
    path = os.path.join(REPO, "tfattn", "cli", "flags.py")
    with open(path, encoding="utf-8") as handle:
        tree = ast.parse(handle.read())
    return [node.args[0].value for node in ast.walk(tree)
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr.startswith("DEFINE_")]


def test_flag_table_lists_every_flag_of_train_py():
    from absl import flags

    defined_before = "hparams_overrides" in flags.FLAGS
    rows = _table_rows(tfattn_tables.train_flags_markdown())
    assert rows[0] == ["Flag", "Type", "Default", "Help"]
    shown = [row[0].strip("`") for row in rows[1:]]
    expected = [f"--{name}" for name in _defined_flag_names()]
    assert len(expected) > 20
    assert sorted(shown) == sorted(expected)
    by_flag = {row[0].strip("`"): row[1:] for row in rows[1:]}
    assert by_flag["--dataset"][1] == "`numbers`"
    assert by_flag["--mode"][0].startswith("one of `train`")
    assert not by_flag["--mode"][2].startswith("<")
    assert all(help_text for _, _, help_text in by_flag.values())
    # A later `import train` can still define them.
    assert ("hparams_overrides" in flags.FLAGS) == defined_before


def test_an_unknown_generated_table_is_an_error():
    text = "```{tfattn-generated} no-such-table\n```\n"
    with pytest.raises(ValueError, match="no-such-table"):
        tfattn_tables.expand(text)


def test_flags_and_escapes_keep_markdown_literal():
    assert tfattn_tables.flags_as_code("with --strategy=tpu.") == (
        "with `--strategy=tpu`.")
    assert tfattn_tables.escape("a *.gz | b `x|y`") == (
        "a \\*.gz \\| b `x\\|y`")


def _public_modules():
    for root, _, names in os.walk(os.path.join(REPO, "tfattn")):
        for name in sorted(names):
            if not name.endswith(".py"):
                continue
            parts = os.path.relpath(
                os.path.join(root, name), REPO)[:-3].split(os.sep)
            if parts[-1] == "__init__":
                parts.pop()
            if not any(part.startswith("_") for part in parts):
                yield ".".join(parts)


def _directives():
    """(page, kind, full name, options) of every autodoc directive."""
    for page in sorted(os.listdir(API)):
        if page.endswith(".md"):
            with open(os.path.join(API, page), encoding="utf-8") as handle:
                for match in _DIRECTIVE.finditer(handle.read()):
                    yield (page, match["kind"], match["name"],
                           match["options"])


def test_every_public_module_has_an_api_page():
    pages = {}
    for page, kind, name, _ in _directives():
        if kind == "module":
            pages.setdefault(name, page)
    modules = list(_public_modules())
    assert "tfattn.visualize.curves" in modules
    missing = [name for name in modules if name not in pages]
    assert not missing, f"Modules on no docs/api page: {missing}"
    internal = [name for name in modules
                if name.startswith(INTERNAL_PACKAGES)]
    assert {pages[name] for name in internal} <= set(INTERNAL_PAGES)
    with open(os.path.join(API, "index.md"), encoding="utf-8") as handle:
        index = handle.read()
    internals = index.split("## Internals", 1)[1]
    assert "not a stable API" in internals
    for page in INTERNAL_PAGES:
        assert f"\n{page[:-3]}\n" in internals


def _module_names(module):
    """A module's `__all__` and where each of its names comes from, read
    from its source: {name: "origin.module.name"}."""
    parts = module.split(".")
    path = os.path.join(REPO, *parts)
    path = (os.path.join(path, "__init__.py") if os.path.isdir(path)
            else path + ".py")
    with open(path, encoding="utf-8") as handle:
        tree = ast.parse(handle.read())
    exported, origins = None, {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                origins[alias.asname or alias.name] = (
                    f"{node.module}.{alias.name}")
        elif (isinstance(node, (ast.Assign, ast.AnnAssign))
              and "__all__" in [getattr(target, "id", None) for target in (
                  node.targets if isinstance(node, ast.Assign)
                  else [node.target])]):
            exported = ast.literal_eval(node.value)
        elif (isinstance(node, ast.Assign) and len(node.targets) == 1
              and isinstance(node.targets[0], ast.Name)
              and isinstance(node.value, ast.Attribute)
              and isinstance(node.value.value, ast.Name)
              and node.value.value.id in origins):
            # `NotExportable = ctranslate2_spec.NotExportable`
            origins[node.targets[0].id] = (
                f"{origins[node.value.value.id]}.{node.value.attr}")
    assert exported is not None, f"{module} has no literal __all__"
    return {name: origins.get(name, f"{module}.{name}") for name in exported}


def _origin(full_name, cache):
    """Follows re-exports to the module that defines a name."""
    module, _, name = full_name.rpartition(".")
    if module not in cache:
        try:
            cache[module] = _module_names(module)
        except (OSError, AssertionError):
            cache[module] = {}
    origin = cache[module].get(name, full_name)
    return full_name if origin == full_name else _origin(origin, cache)


def test_every_public_name_is_documented_on_an_api_page():
    cache, documented = {}, set()
    for _, kind, name, options in _directives():
        if kind != "module":
            documented.add(_origin(name, cache))
        elif ":no-members:" not in options:
            documented |= {_origin(f"{name}.{member}", cache)
                           for member in _module_names(name)}
    missing = [f"{module}.{name}"
               for module in _public_modules() if module != "tfattn"
               for name in _module_names(module)
               if _origin(f"{module}.{name}", cache) not in documented]
    assert not missing, f"Public names on no docs/api page: {missing}"
