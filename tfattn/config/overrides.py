"""The `--hparams_overrides` parser: `parse_overrides`.

Override strings are `key=value` pairs separated by commas. A value is
parsed by the declared type of its field, never evaluated as code: an int
field takes `12`, a float field `0.1` or `1e-4`, a bool field `true` or
`false`, a str field a bare word or a quoted string (commas may stand inside
quotes), and an optional field also `none`. An unknown key fails with the
list of valid keys, and the resulting set is validated like any other.

Numbers are read by `ast.literal_eval`, which builds constants and runs no
code, after a check that the text holds only a decimal number's characters.
`tfattn.config` hands `parse_overrides` on.

Example::

    from tfattn.config import overrides

    hp = overrides.parse_overrides(hp, "num_heads=2,flavor='paper'")
"""

import ast
import dataclasses
import re
import typing

from tfattn.utils import validation

__all__ = ["optional_type", "parse_overrides"]

# The characters an unquoted string may hold; others need quotes.
_BARE_WORD = re.compile(r"[A-Za-z0-9_.:/+\-]+\Z")
_NONE_WORDS = ("none", "null")
_BOOL_WORDS = {"true": True, "false": False}
# Decimal only: Python also reads 0x10, 1_000 and 1j as numbers.
_NUMBER_CHARS = frozenset("0123456789.eE+-")
# Python refuses an int written 007; overrides have always read it as 7.
_LEADING_ZEROS = re.compile(r"\A([+-]?)0+(?=[0-9])")
# Python refuses to parse ints of over 4,300 digits; no field needs 19.
_MAX_INT_DIGITS = 18


def optional_type(annotation):
    """Splits a field annotation such as `int` or `typing.Optional[int]`.

    Args:
        annotation: a type, or `typing.Optional` of one.

    Returns:
        (the non-None type, whether None is allowed).
    """
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is typing.Union and type(None) in args:
        (inner,) = [a for a in args if a is not type(None)]
        return inner, True
    return annotation, False


def parse_overrides(hp, overrides):
    """Applies an override string such as `"num_heads=4,dropout_rate=0.2"`.

    Args:
        hp: HParams (any frozen dataclass whose fields are int, float, bool
            or str, each optionally None). The set to start from.
        overrides: str or None. Comma-separated `key=value` pairs; empty or
            None changes nothing.

    Returns:
        A new, validated HParams.

    Raises:
        ValueError: a malformed string, an unknown or repeated key (the
            message lists the valid keys), a value of the wrong type, or a
            resulting set that fails validation.
    """
    if overrides is not None and not isinstance(overrides, str):
        raise validation.invalid_argument(
            "overrides", "a string of key=value pairs", overrides,
            type(hp).__name__)
    if overrides is None or not overrides.strip():
        return hp
    names = [field.name for field in dataclasses.fields(hp)]
    types = typing.get_type_hints(type(hp))
    values = {}
    for item in _split_items(overrides):
        key, raw = _split_item(item, overrides)
        if key not in names:
            raise ValueError(
                f"Unknown hparams field {validation.echo(key)} in overrides. "
                "Valid fields: " + ", ".join(names)
            )
        if key in values:
            raise ValueError(
                f"Hparams field {key!r} is overridden twice in "
                f"{validation.echo(overrides)}."
            )
        values[key] = _parse_value(key, raw, types[key])
    return dataclasses.replace(hp, **values)


def _split_items(text):
    """Splits `text` on the commas outside single or double quotes.

    Raises:
        ValueError: a quote is left open.
    """
    items, current, quote = [], [], None
    for char in text:
        if quote:
            current.append(char)
            if char == quote:
                quote = None
        elif char in "'\"":
            quote = char
            current.append(char)
        elif char == ",":
            items.append("".join(current))
            current = []
        else:
            current.append(char)
    if quote:
        raise ValueError(
            f"Malformed hparams overrides {validation.echo(text)}: "
            f"unterminated {quote} quote."
        )
    items.append("".join(current))
    return items


def _split_item(item, overrides):
    """Splits one item `key=value` (`overrides` is the whole string, for
    messages) into the stripped key, an ASCII identifier, and the raw value.

    Raises:
        ValueError: an empty item, no `=`, or a key that is no identifier.
    """
    if not item.strip():
        raise ValueError(
            f"Malformed hparams overrides {validation.echo(overrides)}: an "
            "empty item (expected key=value pairs separated by single "
            "commas)."
        )
    key, sep, raw = item.partition("=")
    key = key.strip()
    if not sep or not (key.isascii() and key.isidentifier()):
        raise ValueError(
            f"Malformed hparams override {validation.echo(item.strip())} in "
            f"{validation.echo(overrides)}: expected key=value (e.g. "
            "num_heads=4)."
        )
    return key, raw


def _parse_value(name, raw, annotation):
    """The value of field `name` (declared `annotation`) that `raw` spells.

    Accepts, around optional spaces: a quoted string ('x' or "x", taken
    verbatim: no escapes) for a str field; `none` or `null` (any case) for
    an optional field; a decimal int of at most 18 digits (`8`, `+10`,
    `-3`, `007`) for an int field; a decimal number (`0.1`, `.5`, `1e-4`,
    `3`) for a float field; `true` or `false` (any case) for a bool field;
    a bare word of letters, digits and `_.:/+-` for a str field.

    Raises:
        ValueError: naming the field and the value (cut when long).
    """
    kind, optional = optional_type(annotation)

    def fail(why=""):
        return ValueError(
            f"Invalid value for hparams field `{name}` in overrides: expected "
            f"{_describe(kind, optional)}{why}. Received: {name}="
            f"{validation.echo(raw, as_repr=False)}"
        )

    text = raw.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        if kind is not str:
            raise fail(" (a quoted value is a string)")
        return text[1:-1]
    if optional and text.lower() in _NONE_WORDS:
        return None
    unsigned = text[1:] if text[:1] in ("+", "-") else text
    whole = unsigned.isascii() and unsigned.isdigit()
    if kind is int:
        if whole and len(unsigned) > _MAX_INT_DIGITS:
            raise fail(f" (at most {_MAX_INT_DIGITS} digits)")
        value = _read_number(text)
        if type(value) is not int:
            raise fail()
        return value
    if kind is float:
        # A float literal, as float() reads it: -0 keeps its sign, and 400
        # digits read as inf (refused later) rather than overflowing.
        value = _read_number(text + ".0" if whole else text)
        if type(value) is not float:
            raise fail()
        return value
    if kind is bool:
        if text.lower() not in _BOOL_WORDS:
            raise fail()
        return _BOOL_WORDS[text.lower()]
    if not _BARE_WORD.match(text):
        raise fail(" (quote strings holding other characters)")
    return text


def _read_number(text):
    """The int or float that the decimal literal `text` spells, with an
    optional sign and leading zeros (`8`, `-3`, `007`, `0.1`, `.5`,
    `1e-4`); None for any other text."""
    # A sign and an exponent's sign at most: Python's parser nests a chain
    # of signs, and a long one exhausts its memory.
    if not set(text) <= _NUMBER_CHARS or text.count("+") + text.count("-") > 2:
        return None
    try:
        value = ast.literal_eval(_LEADING_ZEROS.sub(r"\1", text))
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    return value if type(value) in (int, float) else None


def _describe(kind, optional):
    text = {
        int: "an int such as 8",
        float: "a float such as 0.1 or 1e-4",
        bool: "true or false",
        str: "a string (a bare word or quoted)",
    }[kind]
    return text + (" or none" if optional else "")
