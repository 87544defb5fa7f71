"""Checks of text inputs shared by every serving path (translation, the
language models and fill-mask), so that each names the same argument with
the same message.

A Python caller passes a list or tuple of `str`. Anything else (one string
instead of a list, bytes, numbers, None, a NumPy array or a tensor) is
refused naming the argument (`texts`, `prompts`) or its item
(`texts[i]`); a `str` that is not valid Unicode (a lone surrogate such as
`"\\ud800"`, which no UTF-8 encoder accepts) is refused naming the item
and the character's position.
"""

from tfattn.utils.validation import invalid_argument

__all__ = ["checked_texts"]


def checked_texts(texts, context, name="texts"):
    """`texts` as a list of valid `str`, or a `ValueError` naming them.

    Args:
        texts: what the caller passed.
        context: str. The function or method named in the message.
        name: str. The argument's name: `"texts"` (translation,
            fill-mask) or `"prompts"` (language models).

    Returns:
        list of str.

    Raises:
        ValueError: naming `name` or `name[i]` (see the module docstring).
    """
    if isinstance(texts, (str, bytes)) or not isinstance(texts,
                                                         (list, tuple)):
        raise invalid_argument(name, "a list of strings", texts, context)
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise invalid_argument(f"{name}[{i}]", "a str", text, context)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as error:
            raise invalid_argument(
                f"{name}[{i}]",
                "valid Unicode (character "
                f"{error.start} is {text[error.start]!r}, a lone surrogate)",
                text, context) from None
    return list(texts)

