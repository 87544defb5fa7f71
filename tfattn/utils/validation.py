"""Argument checks with one error format for the whole library.

Every message names the argument, says what was expected and echoes the
value received, in the Keras format:
"Received an invalid value for argument `x`, expected .... Received: x=...".
"""

import numbers

__all__ = [
    "echo",
    "invalid_argument",
    "check_positive_int",
    "check_non_negative_float",
    "check_rate",
    "check_bool",
    "check_seed",
    "check_choice",
    "shape_of",
    "check_rank",
]

# Longest echo of a received value in a message.
_MAX_ECHO = 100


def echo(value, as_repr=True):
    """`value` (its repr, or the string itself) for a message, cut to about
    100 characters with its full length said.

    Args:
        value: any. The value to show.
        as_repr: bool. Show `repr(value)` (the default), else `str(value)`.

    Returns:
        str. The text, its first 100 characters followed by
        `... (N characters)` when longer.
    """
    text = repr(value) if as_repr else str(value)
    if len(text) <= _MAX_ECHO:
        return text
    return f"{text[:_MAX_ECHO]}... ({len(text):,} characters)"


_echo = echo


def invalid_argument(name, expected, received, context=None):
    """Returns the ValueError for argument `name` (raise it at the call
    site).

    Args:
        name: str. The argument's name.
        expected: str. What was expected, e.g. `"a positive integer"`.
        received: any. The value received (echoed, see `echo`).
        context: str or None. Who checks; prefixes the message.

    Returns:
        ValueError. Its message in the module's format.
    """
    prefix = f"{context}: " if context else ""
    return ValueError(
        f"{prefix}Received an invalid value for argument `{name}`, expected "
        f"{expected}. Received: {name}={_echo(received)}"
    )


def check_positive_int(name, value, context=None):
    """Checks that `value` is an integer >= 1 (not a bool).

    Args:
        name: str. The argument's name, for the error message.
        value: any. The value to check.
        context: str or None. Who checks; prefixes the error message.

    Returns:
        int. `value` as a Python int.

    Raises:
        ValueError: `value` is not an integer >= 1.
    """
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Integral)
        or value < 1
    ):
        raise invalid_argument(name, "a positive integer", value, context)
    return int(value)


def check_non_negative_float(name, value, context=None):
    """Checks that `value` is a real number >= 0 (not a bool, not NaN).

    Args:
        name: str. The argument's name, for the error message.
        value: any. The value to check.
        context: str or None. Who checks; prefixes the error message.

    Returns:
        float. `value` as a Python float.

    Raises:
        ValueError: `value` is not a real number >= 0.
    """
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Real)
        or not value >= 0
    ):
        raise invalid_argument(name, "a number >= 0", value, context)
    return float(value)


def check_rate(name, value, context=None):
    """Checks a dropout-style rate in [0, 1).

    Args:
        name: str. The argument's name, for the error message.
        value: any. The value to check.
        context: str or None. Who checks; prefixes the error message.

    Returns:
        float. `value` as a Python float.

    Raises:
        ValueError: `value` is not a real number in [0, 1) (or is a bool).
    """
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Real)
        or not 0 <= value < 1
    ):
        raise invalid_argument(name, "a float in [0, 1)", value, context)
    return float(value)


def check_bool(name, value, context=None):
    """Checks that `value` is a Python bool.

    Args:
        name: str. The argument's name, for the error message.
        value: any. The value to check.
        context: str or None. Who checks; prefixes the error message.

    Returns:
        bool. `value`.

    Raises:
        ValueError: `value` is not a Python bool.
    """
    if not isinstance(value, bool):
        raise invalid_argument(name, "a Python bool", value, context)
    return value


def check_seed(seed, context=None):
    """Checks a layer's or model's seed: None or an int (not a bool, not a
    float).

    Args:
        seed: any. The value to check.
        context: str or None. Who checks; prefixes the message.

    Returns:
        The seed.

    Raises:
        ValueError: naming `seed`.
    """
    if seed is not None and (
            isinstance(seed, bool) or type(seed).__name__ == "bool_"
            or not isinstance(seed, numbers.Integral)):
        raise invalid_argument("seed", "None or an int", seed, context)
    return seed


def check_choice(name, value, choices, context=None):
    """Checks that `value` is one of `choices`.

    Args:
        name: str. The argument's name, for the error message.
        value: any. The value to check.
        choices: sequence. The values allowed.
        context: str or None. Who checks; prefixes the error message.

    Returns:
        `value`.

    Raises:
        ValueError: `value` is not in `choices`.
    """
    if value not in choices:
        expected = "one of " + ", ".join(repr(c) for c in choices)
        raise invalid_argument(name, expected, value, context)
    return value


def shape_of(x):
    """The static shape of a tensor or a shape tuple, as a tuple.

    Args:
        x: a tensor (anything with a `shape`) or a shape.

    Returns:
        tuple or None. The shape (None when it is unknown).
    """
    shape = getattr(x, "shape", x)
    return tuple(shape) if shape is not None else None


def check_rank(name, x, rank, meaning, context=None):
    """Checks the static rank of a tensor (or shape); `meaning` names the
    axes.

    Args:
        name: str. The argument's name, for the error message.
        x: a tensor or a shape.
        rank: int. The rank expected.
        meaning: str. The axes, e.g. `"[B, T]"`, for the error message.
        context: str or None. Who checks; prefixes the error message.

    Returns:
        tuple. The static shape of `x`.

    Raises:
        ValueError: the shape of `x` is unknown or not of rank `rank`.
    """
    shape = shape_of(x)
    if shape is None or len(shape) != rank:
        raise invalid_argument(
            f"{name}",
            f"a rank-{rank} tensor of shape {meaning}",
            f"<tensor of shape {shape}>",
            context,
        )
    return shape
