"""Initializer arguments of the layers, checked once and copied per use.

A Keras 3 initializer object created with `seed=None` draws the same values
at every call, so one object shared by several Dense layers would give them
one kernel; `fresh_initializers` hands each sublayer its own copy (as
`keras.layers.MultiHeadAttention` does).
"""

import keras

from tfattn.utils import validation

__all__ = ["fresh_initializer", "fresh_initializers", "initializer_arguments"]


def initializer_arguments(context, **named):
    """Keras initializer objects for `name=value` arguments (names, configs
    or instances), or a ValueError naming the argument and its value.

    Args:
        context: str. Who checks; prefixes the error message.
        **named: the initializer arguments, by name.

    Returns:
        dict. The Keras initializer object of each argument, by name.

    Raises:
        ValueError: a value Keras cannot resolve to an initializer.
    """
    resolved = {}
    for name, value in named.items():
        try:
            initializer = keras.initializers.get(value)
        except (ValueError, TypeError):
            initializer = None
        if initializer is None:
            raise validation.invalid_argument(
                name, "a Keras initializer, its name or config", value,
                context)
        resolved[name] = initializer
    return resolved


def fresh_initializers(options):
    """`options` with each ``*_initializer`` replaced by a new object from
    its config (a seed of None stays None: each copy draws its own values).

    Args:
        options: dict. Layer arguments by name; those whose name ends in
            `_initializer` hold Keras initializer objects.

    Returns:
        dict. A copy of `options` with fresh initializer objects.
    """
    return {name: fresh_initializer(value)
            if name.endswith("_initializer") else value
            for name, value in options.items()}


def fresh_initializer(initializer):
    """A new Keras initializer object with `initializer`'s configuration,
    for one more sublayer (see `fresh_initializers`).

    Args:
        initializer: a Keras initializer object.

    Returns:
        A Keras initializer object.
    """
    return keras.initializers.get(keras.initializers.serialize(initializer))
