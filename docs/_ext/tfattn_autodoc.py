"""autodoc hooks of the API reference: real constructor signatures, and the
public methods a class inherits from tfattn's own bases.

- `constructor_signature(cls)`: what `cls(...)` takes. Keras's
  `Layer.__new__(cls, *args, **kwargs)` hides `__init__` from autodoc, so
  every layer and model would read `(*args, **kwargs)`; this is the class's
  own `__init__` without `self`, followed (keyword-only) by the arguments of
  the tfattn bases it hands `**kwargs` to unchanged (`Decoder` ->
  `Encoder` -> `BlockBase`).
- `process_signature`: the `autodoc-process-signature` hook that uses it for
  every tfattn class whose constructor autodoc cannot see.
- `drop_type_docstring`: the `autodoc-process-docstring` hook that keeps a
  constant without a docstring from showing its type's (`tuple`'s).
- `skip_inherited`: the `autodoc-skip-member` hook. conf.py asks autodoc for
  inherited members; this keeps, on a class, only the methods and
  properties defined in tfattn (`MultiHeadAttention.init_cache` from its
  cache mixin, `Transformer.generate` from its generation mixin) and drops
  the hundreds a Keras layer inherits from Keras, and those of `tuple`,
  `Exception` and `object`.
"""

import inspect
import re

PACKAGE = "tfattn"
# `super().__init__(**kwargs)`: the whole of `**kwargs`, and nothing else,
# goes to the base, so the base's arguments are arguments of the class.
_FORWARDS_KWARGS = re.compile(r"super\(\)\.__init__\(\s*\*\*kwargs\s*,?\s*\)")


def _in_package(module_name):
    return module_name == PACKAGE or str(module_name).startswith(
        PACKAGE + ".")


def _own_init(cls):
    """The class in `cls.__mro__` that defines the `__init__` it runs."""
    for klass in cls.__mro__:
        if "__init__" in vars(klass):
            return klass
    return object


def _forwards_kwargs(function):
    try:
        source = inspect.getsource(function)
    except (OSError, TypeError):
        return False
    return bool(_FORWARDS_KWARGS.search(source))


def _parameters(init):
    """`init`'s parameters without `self`, annotations removed (the site
    shows none: `autodoc_typehints = "none"`)."""
    parameters = list(inspect.signature(init).parameters.values())[1:]
    return [p.replace(annotation=inspect.Parameter.empty)
            for p in parameters]


def constructor_signature(cls):
    """What `cls(...)` takes, as autodoc should show it.

    Args:
        cls: a class defined in tfattn.

    Returns:
        inspect.Signature, without `self`: the arguments of the `__init__`
        the class runs; when that `__init__` hands `**kwargs` on unchanged to
        the `__init__` of a tfattn base, that base's other arguments follow
        as keyword-only ones (and so on down the bases), then `**kwargs`.
    """
    owner = _own_init(cls)
    parameters = _parameters(owner.__init__)
    names = {p.name for p in parameters}
    mro = cls.__mro__
    while (
        parameters
        and parameters[-1].kind is inspect.Parameter.VAR_KEYWORD
        and _forwards_kwargs(owner.__init__)
    ):
        base = _own_init(mro[mro.index(owner) + 1])
        if not _in_package(base.__module__):
            break
        var_keyword = parameters.pop()
        for parameter in _parameters(base.__init__):
            if parameter.kind in (inspect.Parameter.VAR_POSITIONAL,
                                  inspect.Parameter.VAR_KEYWORD):
                continue
            if parameter.name not in names:
                names.add(parameter.name)
                parameters.append(parameter.replace(
                    kind=inspect.Parameter.KEYWORD_ONLY))
        parameters.append(var_keyword)
        owner = base
    return inspect.Signature(parameters)


def _hidden_by_new(cls):
    """True where autodoc would show a foreign `__new__`'s signature instead
    of `__init__`'s: autodoc prefers a `__new__` defined in Python to
    `__init__`, and Keras's is `Layer.__new__(cls, *args, **kwargs)`."""
    for klass in cls.__mro__:
        if "__new__" in vars(klass):
            module = klass.__module__
            return module != "builtins" and not _in_package(module)
    return False


def process_signature(app, what, name, obj, options, signature,
                      return_annotation):
    """The `autodoc-process-signature` hook: a tfattn class whose `__new__`
    hides its constructor gets `constructor_signature(obj)`.

    Args:
        app: the Sphinx application (unused).
        what: str. The object's type ("class", "method", ...).
        name: str. Its full name.
        obj: the object.
        options: the directive's options (unused).
        signature: str or None. The signature autodoc found.
        return_annotation: str. The return annotation autodoc found.

    Returns:
        (signature, return_annotation), or None to keep autodoc's.
    """
    del app, name, options
    if what not in ("class", "exception") or not inspect.isclass(obj):
        return None
    if not _in_package(obj.__module__):
        return None
    if not _hidden_by_new(obj):
        return None
    return str(constructor_signature(obj)), return_annotation


def defining_module(member):
    """The module that defines a class member, or None where that cannot be
    told (a plain data attribute).

    Args:
        member: a value from a class's namespace (or inherited).

    Returns:
        str or None.
    """
    if isinstance(member, (classmethod, staticmethod)):
        member = member.__func__
    if isinstance(member, property):
        member = member.fget
    objclass = getattr(member, "__objclass__", None)
    if objclass is not None:  # a builtin's method or slot (tuple.count)
        return objclass.__module__
    if inspect.isroutine(member) or inspect.isclass(member):
        member = inspect.unwrap(member)
        return getattr(member, "__module__", None)
    return None


def skip_inherited(app, what, name, obj, skip, options):
    """The `autodoc-skip-member` hook: on a class, a member that autodoc
    would show but that tfattn does not define (Keras's, `tuple`'s,
    `Exception`'s) is skipped. Asking for inherited members makes autodoc
    list every member even under `:no-members:`; this hook keeps that
    option's meaning (no member).

    Args:
        app: the Sphinx application (unused).
        what: str. The type of the object that owns the member.
        name: str. The member's name.
        obj: the member.
        skip: bool. autodoc's own decision.
        options: the directive's options (unused).

    Returns:
        True to skip the member, or None to keep autodoc's decision.
    """
    del app, name
    if skip:
        return None
    if getattr(options, "members", None) is None:
        return True
    if what not in ("class", "exception"):
        return None
    module = defining_module(obj)
    if module is not None and not _in_package(module):
        return True
    return None


def drop_type_docstring(app, what, name, obj, options, lines):
    """The `autodoc-process-docstring` hook: a constant with no docstring of
    its own (`QUANTIZATIONS`, a tuple) shows its value only, not the
    docstring of its type (`tuple`'s, `dict`'s), which autodoc falls back
    on.

    Args:
        app: the Sphinx application (unused).
        what: str. The object's type ("data", "attribute", ...).
        name: str. Its full name (unused).
        obj: the object.
        options: the directive's options (unused).
        lines: list of str. The docstring's lines, changed in place.
    """
    del app, name, options
    if what not in ("data", "attribute") or not lines:
        return
    own = type(obj).__doc__
    if not isinstance(own, str):  # a descriptor, in some types
        return
    own = inspect.cleandoc(own)
    if own and inspect.cleandoc("\n".join(lines)) == own:
        lines[:] = []


def setup(app):
    """Connects the hooks.

    Args:
        app: the Sphinx application.

    Returns:
        dict. The extension's metadata.
    """
    app.setup_extension("sphinx.ext.autodoc")
    app.connect("autodoc-process-signature", process_signature)
    app.connect("autodoc-skip-member", skip_inherited)
    # Before napoleon (priority 500) rewrites the lines.
    app.connect("autodoc-process-docstring", drop_type_docstring,
                priority=400)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
