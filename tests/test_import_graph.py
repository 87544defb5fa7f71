"""The import graph of `tfattn`: its subpackages are layered, without cycles.

Every module under tfattn/ is parsed (not imported) with `ast`, and every
import in it is read: at the top and inside functions, `import x` and
`from x import y`, absolute or relative. Each module belongs to a unit: a
subpackage (`tfattn.training`), a loose module (`tfattn.losses`), the
package face (`tfattn`, tfattn/__init__.py), or a program (a `__main__`
module, run with `python -m` and imported by nothing). `LAYERS` states the
order of the units, lowest first: a module imports from its own unit and
from units on lower levels only, never from a unit on its own level or
above. Programs sit above every level. The imports that still go against
this are listed, each with who removes it, in `ALLOWED_UPWARD`; the graph
without them has no cycle between units. And every package's `__init__.py`
only hands names on: the code lives in modules named for what they hold.
"""

import ast
import os

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "tfattn"

# Lowest first. Units on one level import none of each other.
LAYERS = [
    ("tfattn.utils",),
    ("tfattn.ops",),
    ("tfattn.layers", "tfattn.losses", "tfattn.schedules"),
    ("tfattn.functional",),
    ("tfattn.data", "tfattn.config"),
    # The searches (greedy, beam, sampling) that the models' `generate`
    # runs, and the evaluations built on data.
    ("tfattn.decoding",),
    ("tfattn.models",),
    # Checkpoints of other code (TF1, Keras, keras-hub, Hugging Face) into
    # the models: training starts from them, the exports serve them.
    ("tfattn.interop",),
    ("tfattn.training",),
    ("tfattn.export",),
    ("tfattn.visualize",),
    ("tfattn.cli",),
    # The package face: imports what `import tfattn` offers.
    ("tfattn",),
]

# (importing module, imported module) pairs that break the layering today.
# Imports that go up a level, each with who removes it. None today: keep it
# so.
ALLOWED_UPWARD = set()


# ----------------------------------------------------------------------
# Reading the graph.

def module_name(relative):
    """The dotted name of the module at `relative` (a path under REPO).

    Args:
        relative: str. Such as `tfattn/training/loop.py`.

    Returns:
        str. Such as `tfattn.training.loop` (`tfattn.training` for its
        `__init__.py`).
    """
    parts = relative[:-len(".py")].split(os.sep)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def package_modules():
    """Every module under tfattn/.

    Returns:
        dict of module name to (path relative to REPO, is a package).
    """
    found = {}
    for root, dirs, names in os.walk(os.path.join(REPO, PACKAGE)):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(names):
            if name.endswith(".py"):
                relative = os.path.relpath(os.path.join(root, name), REPO)
                found[module_name(relative)] = (relative,
                                                name == "__init__.py")
    return found


def imports_of(name, is_package, source, modules):
    """The modules of `modules` that the code `source` of module `name`
    imports, anywhere in it.

    Args:
        name: str. The importing module's dotted name.
        is_package: bool. Whether it is a package's `__init__.py` (a
            relative import then starts from the package itself).
        source: str. Its code.
        modules: container of str. The module names that exist; `from p
            import x` imports the module `p.x` if it exists, else `p`.

    Returns:
        list of (imported module name, line number), for the imports of
        names under `PACKAGE` only.
    """
    package = name if is_package else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                anchor = ".".join(parts[:len(parts) - node.level + 1])
                base = f"{anchor}.{base}" if base else anchor
            for alias in node.names:
                child = f"{base}.{alias.name}"
                found.append((child if child in modules else base,
                              node.lineno))
    return [(target, line) for target, line in found
            if target == PACKAGE or target.startswith(PACKAGE + ".")]


def unit_of(module):
    """The unit `module` belongs to.

    Args:
        module: str. A dotted module name under `PACKAGE`.

    Returns:
        str. The module itself for a program (`...__main__`); else
        `PACKAGE` for the face, or the first two name parts (the
        subpackage or loose module).
    """
    if module.endswith(".__main__"):
        return module
    return ".".join(module.split(".")[:2])


def module_edges():
    """Every import between two modules of the package.

    Returns:
        list of (importing module, imported module, "path:line").
    """
    modules = package_modules()
    edges = []
    for name, (relative, is_package) in sorted(modules.items()):
        with open(os.path.join(REPO, relative), encoding="utf-8") as f:
            source = f.read()
        for target, line in imports_of(name, is_package, source, modules):
            if target != name:
                edges.append((name, target, f"{relative}:{line}"))
    return edges


# ----------------------------------------------------------------------
# Checking it.

def find_cycle(graph):
    """A cycle of a directed graph, if it has one.

    Args:
        graph: dict of node to an iterable of the nodes it points to.

    Returns:
        list of nodes `[a, b, ..., a]` around a cycle (the first found,
        visiting nodes in sorted order), or None.
    """
    nodes = sorted(set(graph) | {m for ns in graph.values() for m in ns})
    state = {node: "new" for node in nodes}
    for start in nodes:
        if state[start] != "new":
            continue
        path = [start]
        state[start] = "open"
        stack = [iter(sorted(graph.get(start, ())))]
        while stack:
            following = next(stack[-1], None)
            if following is None:
                state[path.pop()] = "done"
                stack.pop()
            elif state[following] == "open":
                return path[path.index(following):] + [following]
            elif state[following] == "new":
                state[following] = "open"
                path.append(following)
                stack.append(iter(sorted(graph.get(following, ()))))
    return None


def unit_graph(edges, allowed=()):
    """The graph between units of module `edges`, less the `allowed` ones.

    Args:
        edges: iterable of (importing module, imported module, where).
        allowed: container of (importing module, imported module) pairs
            left out.

    Returns:
        dict of unit to the set of units it imports (itself left out).
    """
    graph = {}
    for source, target, _ in edges:
        if (source, target) in allowed:
            continue
        a, b = unit_of(source), unit_of(target)
        graph.setdefault(a, set())
        if a != b:
            graph[a].add(b)
    return graph


def level_of(unit, layers):
    """The level of `unit` in `layers` (programs: above every level).

    Args:
        unit: str. A unit (`unit_of`).
        layers: list of tuples of units, lowest first.

    Returns:
        int, or None for a unit `layers` does not name.
    """
    if unit.endswith(".__main__"):
        return len(layers)
    for level, units in enumerate(layers):
        if unit in units:
            return level
    return None


def layering_violations(edges, layers, allowed=()):
    """The imports that do not go down `layers`.

    Args:
        edges: iterable of (importing module, imported module, where).
        layers: list of tuples of units, lowest first.
        allowed: container of (importing module, imported module) pairs
            let through.

    Returns:
        list of str, one line per import (and per unit `layers` lacks).
    """
    problems = []
    for source, target, where in edges:
        a, b = unit_of(source), unit_of(target)
        if a == b or (source, target) in allowed:
            continue
        low, high = level_of(b, layers), level_of(a, layers)
        if low is None or high is None:
            missing = a if high is None else b
            problems.append(f"{where}: unit {missing} is not in LAYERS")
        elif low >= high:
            problems.append(f"{where}: {source} imports {target} "
                            f"({a} may not import {b})")
    return problems


@pytest.fixture(scope="module")
def edges():
    return module_edges()


# ----------------------------------------------------------------------
# The package.

def test_the_units_have_no_import_cycle(edges):
    cycle = find_cycle(unit_graph(edges, ALLOWED_UPWARD))
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_every_import_goes_down_the_layers(edges):
    assert layering_violations(edges, LAYERS, ALLOWED_UPWARD) == []


def test_every_unit_is_in_the_layers():
    units = {unit_of(m) for m in package_modules()}
    missing = sorted(u for u in units if level_of(u, LAYERS) is None)
    assert missing == []
    listed = [u for level in LAYERS for u in level]
    assert len(listed) == len(set(listed))
    assert set(listed) <= units, "LAYERS names a unit that is gone"


def test_every_allowed_upward_import_still_exists(edges):
    """Once an import is removed, its entry goes too."""
    present = {(source, target) for source, target, _ in edges}
    assert sorted(ALLOWED_UPWARD - present) == []


def face_problems(relative, source):
    """What a package's `__init__.py` holds besides handing names on.

    A face may hold its docstring, imports, `__all__`, `__version__`,
    private constants, the TensorFlow-backend check and a module
    `__getattr__` (names loaded on first use).

    Args:
        relative: str. The file's path, for the messages.
        source: str. Its code.

    Returns:
        list of str, one per other statement.
    """
    problems = []
    for node in ast.parse(source).body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) \
                and getattr(node.value.func, "id", None) == \
                "require_tensorflow_backend":
            continue
        if isinstance(node, ast.Assign) and all(
                isinstance(t, ast.Name) and t.id.startswith("_")
                for t in node.targets):
            continue
        if isinstance(node, ast.FunctionDef) and node.name == "__getattr__":
            continue
        problems.append(f"{relative}:{node.lineno}: "
                        f"{type(node).__name__} {getattr(node, 'name', '')}"
                        .rstrip())
    return problems


def test_package_faces_only_hand_names_on():
    problems = []
    for relative, is_package in package_modules().values():
        if is_package:
            with open(os.path.join(REPO, relative), encoding="utf-8") as f:
                problems += face_problems(relative, f.read())
    assert problems == []


# ----------------------------------------------------------------------
# The checks themselves, on hand-made graphs and code.

def test_find_cycle_finds_a_synthetic_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"a"}}) == ["a", "b", "a"]


def test_find_cycle_passes_a_graph_without_one():
    # A diamond: two paths to one node are no cycle.
    graph = {"a": {"b", "c"}, "b": {"d"}, "c": {"d"}, "d": set()}
    assert find_cycle(graph) is None
    assert find_cycle({}) is None


def test_the_unit_checks_fail_on_a_synthetic_cycle():
    edges = [("tfattn.ops.attention", "tfattn.utils.validation", "x:1"),
             ("tfattn.utils.files", "tfattn.ops.masking", "y:2")]
    layers = [("tfattn.utils",), ("tfattn.ops",)]
    assert find_cycle(unit_graph(edges)) == [
        "tfattn.ops", "tfattn.utils", "tfattn.ops"]
    assert layering_violations(edges, layers) == [
        "y:2: tfattn.utils.files imports tfattn.ops.masking "
        "(tfattn.utils may not import tfattn.ops)"]
    allowed = {("tfattn.utils.files", "tfattn.ops.masking")}
    assert find_cycle(unit_graph(edges, allowed)) is None
    assert layering_violations(edges, layers, allowed) == []


def test_layering_refuses_peers_and_unknown_units():
    layers = [("tfattn.data", "tfattn.config")]
    edges = [("tfattn.data.sources", "tfattn.config.hparams", "z:3"),
             ("tfattn.new.thing", "tfattn.data", "w:4")]
    assert layering_violations(edges, layers) == [
        "z:3: tfattn.data.sources imports tfattn.config.hparams "
        "(tfattn.data may not import tfattn.config)",
        "w:4: unit tfattn.new is not in LAYERS"]


def test_imports_are_read_everywhere_and_resolved():
    source = (
        "import os\n"
        "import tfattn.utils.files as files\n"
        "from tfattn import config, layers\n"
        "from tfattn.training import loop\n"
        "from . import sibling\n"
        "from .sibling import name\n"
        "from .. import ops\n"
        "def f():\n"
        "    from tfattn.cli.errors import describe\n"
        "class C:\n"
        "    def g(self):\n"
        "        import tfattn.data\n"
    )
    modules = {"tfattn.utils.files", "tfattn.config", "tfattn.layers",
               "tfattn.training", "tfattn.training.loop", "tfattn.a",
               "tfattn.a.sibling", "tfattn.ops", "tfattn.cli.errors",
               "tfattn.data"}
    found = sorted(imports_of("tfattn.a.b", False, source, modules))
    assert found == sorted([
        ("tfattn.utils.files", 2), ("tfattn.config", 3),
        ("tfattn.layers", 3), ("tfattn.training.loop", 4),
        ("tfattn.a.sibling", 5), ("tfattn.a.sibling", 6), ("tfattn.ops", 7),
        ("tfattn.cli.errors", 9), ("tfattn.data", 12)])
    # In a package's __init__.py, "." is the package itself.
    assert imports_of("tfattn.a", True, "from . import sibling\n",
                      modules) == [("tfattn.a.sibling", 1)]


def test_face_problems_name_the_code_a_face_holds():
    source = (
        '"""Doc."""\n'
        "from tfattn.utils.backend import require_tensorflow_backend\n"
        "require_tensorflow_backend('x')\n"
        "__all__ = ['f']\n"
        "_LAZY = ('a',)\n"
        "def __getattr__(name):\n"
        "    raise AttributeError(name)\n"
        "def f():\n"
        "    return 1\n"
        "class C:\n"
        "    pass\n"
        "LIMIT = 3\n"
    )
    assert face_problems("p/__init__.py", source) == [
        "p/__init__.py:8: FunctionDef f", "p/__init__.py:10: ClassDef C",
        "p/__init__.py:12: Assign"]


def test_units():
    assert unit_of("tfattn.training.loop") == "tfattn.training"
    assert unit_of("tfattn.losses") == "tfattn.losses"
    assert unit_of("tfattn") == "tfattn"
    assert unit_of("tfattn.visualize.__main__") == "tfattn.visualize.__main__"
    assert level_of("tfattn.visualize.__main__", LAYERS) == len(LAYERS)


# Test files that belong to no one subpackage: the loose modules
# (functional, losses, schedules) and the repository-wide checks; the
# documentation's own checks are test_docs_*.py.
UNPREFIXED_TESTS = {
    "test_functional.py", "test_losses.py", "test_schedules.py",
    "test_docstrings.py", "test_readme.py", "test_import_graph.py",
    "test_bench_scripts.py", "test_cpu_limits.py", "test_backend_guard.py",
    "test_reference_numpy.py", "test_bounds.py",
}


def test_test_files_mirror_the_package():
    """tests/test_<subpackage>_<what>.py for every subpackage's tests, so
    the tests of `tfattn.X` sort together (issue 58)."""
    subpackages = sorted(
        name for name in os.listdir(os.path.join(REPO, PACKAGE))
        if os.path.isfile(os.path.join(REPO, PACKAGE, name, "__init__.py")))
    tests = sorted(name for name in os.listdir(os.path.join(REPO, "tests"))
                   if name.startswith("test_") and name.endswith(".py"))
    strays = [name for name in tests if name not in UNPREFIXED_TESTS
              and not name.startswith("test_docs_")
              and not any(name.startswith(f"test_{p}_") for p in subpackages)]
    assert not strays, f"name them test_<subpackage>_...: {strays}"
    assert len(tests) > len(UNPREFIXED_TESTS)
