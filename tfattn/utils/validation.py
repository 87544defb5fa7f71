"""Argument checks with one error format for the whole library.

Every message names the argument, says what was expected and echoes the
value received, in the Keras format:
"Received an invalid value for argument `x`, expected .... Received: x=...".
"""

import numbers

# The model flavours: the paper's attention and the two reference codes.
FLAVORS = ("paper", "reference_2017", "reference_2019")
# Longest echo of a received value in a message.
_MAX_ECHO = 100


def echo(value, as_repr=True):
    """`value` (its repr, or the string itself) for a message, cut to about
    100 characters with its full length said."""
    text = repr(value) if as_repr else str(value)
    if len(text) <= _MAX_ECHO:
        return text
    return f"{text[:_MAX_ECHO]}... ({len(text):,} characters)"


_echo = echo


def invalid_argument(name, expected, received, context=None):
    """Returns the ValueError for argument `name` (raise it at the call
    site)."""
    prefix = f"{context}: " if context else ""
    return ValueError(
        f"{prefix}Received an invalid value for argument `{name}`, expected "
        f"{expected}. Received: {name}={_echo(received)}"
    )


def check_positive_int(name, value, context=None):
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Integral)
        or value < 1
    ):
        raise invalid_argument(name, "a positive integer", value, context)
    return int(value)


def check_non_negative_float(name, value, context=None):
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Real)
        or not value >= 0
    ):
        raise invalid_argument(name, "a number >= 0", value, context)
    return float(value)


def check_rate(name, value, context=None):
    """A dropout-style rate in [0, 1)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Real)
        or not 0 <= value < 1
    ):
        raise invalid_argument(name, "a float in [0, 1)", value, context)
    return float(value)


def check_bool(name, value, context=None):
    if not isinstance(value, bool):
        raise invalid_argument(name, "a Python bool", value, context)
    return value


def check_choice(name, value, choices, context=None):
    if value not in choices:
        expected = "one of " + ", ".join(repr(c) for c in choices)
        raise invalid_argument(name, expected, value, context)
    return value


def shape_of(x):
    """The static shape of a tensor or a shape tuple, as a tuple."""
    shape = getattr(x, "shape", x)
    return tuple(shape) if shape is not None else None


def check_rank(name, x, rank, meaning, context=None):
    """Checks the static rank of a tensor (or shape); `meaning` names the
    axes."""
    shape = shape_of(x)
    if shape is None or len(shape) != rank:
        raise invalid_argument(
            f"{name}",
            f"a rank-{rank} tensor of shape {meaning}",
            f"<tensor of shape {shape}>",
            context,
        )
    return shape
