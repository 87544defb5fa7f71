"""The public API documents itself: every public module of `tfattn` declares
`__all__`, and every public function, method and class in it that takes
arguments says them (`Args:`) and, if it returns something, what
(`Returns:`), in the Google style the API reference renders (Sphinx's
napoleon, docs/conf.py)."""

import ast
import os

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(REPO, "tfattn")


def _modules():
    for root, _, names in os.walk(PACKAGE):
        for name in sorted(names):
            if not name.endswith(".py") or name == "__main__.py":
                continue
            path = os.path.join(root, name)
            relative = os.path.relpath(path, REPO)
            if any(part.startswith("_") and part != "__init__.py"
                   for part in relative.split(os.sep)):
                continue
            yield relative


MODULES = sorted(_modules())


def _tree(relative):
    with open(os.path.join(REPO, relative), encoding="utf-8") as f:
        return ast.parse(f.read())


def _all_names(tree):
    for node in tree.body:
        targets = (node.targets if isinstance(node, ast.Assign) else
                   [node.target] if isinstance(node, ast.AnnAssign) else [])
        for target in targets:
            if isinstance(target, ast.Name) and target.id == "__all__":
                return set(ast.literal_eval(node.value))
    return None


def _parameters(function):
    args = function.args
    names = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
    names += [a.arg for a in (args.vararg, args.kwarg) if a is not None]
    return [n for n in names if n not in ("self", "cls")]


def _returns_value(function):
    """A `return X` in the function's own body (not in nested ones)."""
    stack = list(function.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Return) and node.value is not None:
            if not (isinstance(node.value, ast.Constant)
                    and node.value.value is None):
                return True
        if isinstance(node, (ast.Yield, ast.YieldFrom)):
            return True
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                             ast.ClassDef, ast.Lambda)):
            continue
        stack.extend(ast.iter_child_nodes(node))
    return False


# Methods Keras (or Python) defines the contract of: their arguments are
# Keras's, documented there.
KERAS_METHODS = {
    "build", "call", "get_config", "from_config", "compute_output_shape",
    "compute_output_spec", "compute_mask", "get_build_config",
    "build_from_config", "__call__", "__init__", "__repr__", "__iter__",
    "__len__", "__getitem__", "__enter__", "__exit__", "__eq__", "__hash__",
    "__str__", "__getattr__", "on_epoch_end", "on_train_batch_end",
    "on_train_begin", "on_train_end", "on_epoch_begin", "result",
    "reset_state", "update_state", "get_initial_state",
}


def _missing(relative):
    tree = _tree(relative)
    problems = []
    exported = _all_names(tree)
    if exported is None:
        return [f"{relative}: no __all__"]

    def check(function, qualified, is_method):
        if function.name.startswith("_") and function.name != "__init__":
            return
        if is_method and function.name in KERAS_METHODS - {"__init__"}:
            return
        doc = ast.get_docstring(function) or ""
        if not doc:
            problems.append(f"{relative}: {qualified}: no docstring")
            return
        if function.name == "__init__":
            return
        decorators = {getattr(d, "id", getattr(d, "attr", ""))
                      for d in function.decorator_list}
        if "property" in decorators:
            return
        if _parameters(function) and "Args:" not in doc:
            problems.append(f"{relative}: {qualified}: no Args:")
        if (_returns_value(function) and "Returns:" not in doc
                and "Yields:" not in doc):
            problems.append(f"{relative}: {qualified}: no Returns:")

    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if node.name in exported:
                check(node, node.name, False)
        elif isinstance(node, ast.ClassDef) and node.name in exported:
            doc = ast.get_docstring(node) or ""
            init = next((n for n in node.body
                         if isinstance(n, ast.FunctionDef)
                         and n.name == "__init__"), None)
            if not doc:
                problems.append(f"{relative}: {node.name}: no docstring")
            elif init is not None and _parameters(init) and (
                    "Args:" not in doc
                    and "Args:" not in (ast.get_docstring(init) or "")):
                problems.append(f"{relative}: {node.name}: no Args:")
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    check(item, f"{node.name}.{item.name}", True)
    return problems


@pytest.mark.parametrize("relative", MODULES)
def test_public_module_documents_its_api(relative):
    assert _missing(relative) == []


def test_every_name_in_all_exists():
    import importlib

    for relative in MODULES:
        name = relative[:-3].replace(os.sep, ".")
        if name.endswith(".__init__"):
            name = name[: -len(".__init__")]
        module = importlib.import_module(name)
        missing = [n for n in getattr(module, "__all__", [])
                   if not hasattr(module, n)]
        assert missing == [], name
