"""The serving contract that every tfattn translator keeps.

The SavedModel (`load_translator`), the CTranslate2 directory
(`load_ctranslate2`) and the Python path
(`tfattn.decoding.translate.translate_texts`)
answer the same input the same way; `tests/test_export_contract.py` runs one
set of cases against each engine.

Input, from Python: a list or tuple of `str`.

- Batch 0 (`[]`): empty outputs.
- An empty or whitespace-only text (no SentencePiece piece once normalised):
  translation `""`, score 0.0, not truncated, and nothing is decoded for it.
- A text longer than `max_source_length - 1` pieces: its first pieces, then
  EOS; `truncated` is True for it.
- A `str` that is not valid Unicode (a lone surrogate such as `"\\ud800"`):
  `ValueError` naming `texts[i]` and the character's position.
- Anything else (one string instead of a list, bytes, numbers, None, a
  tensor of another rank): `ValueError` naming `texts` or `texts[i]`.

The SavedModel's signatures take `sentences`, a `[B]` `tf.string` tensor, from
any client (TensorFlow Serving too): another rank, or bytes that are not
UTF-8, fail in the graph with an `InvalidArgumentError` whose message names
`sentences` (`sentences_must_be_a_vector_of_strings`,
`sentences_must_be_utf8`).
"""

from typing import NamedTuple

import tensorflow as tf

from tfattn.decoding.translate import empty_source_rows
from tfattn.utils.texts import checked_texts

__all__ = ["Translations", "checked_texts", "empty_source_rows",
           "utf8_checked"]


class Translations(NamedTuple):
    """What `translate_details` returns, row by row (the SavedModel's
    `serving_default` outputs): `translations` (str), `scores` (float, the
    engine's length-normalised log-probability; 0.0 for an empty text) and
    `truncated` (bool, the source was cut to `max_source_length`)."""

    translations: list
    scores: list
    truncated: list


def utf8_checked(sentences, name="sentences"):
    """`sentences`, after an in-graph check that every row is UTF-8.

    Args:
        sentences: `[B]` `tf.string` tensor.
        name: str. The signature input's name, in the message and the
            check's node name: `"sentences"` (the translator's, the
            default), `"texts"` (fill-mask) or `"prompts"`.

    Returns:
        The `[B]` `tf.string` tensor `sentences`, computed after the check.

    Raises:
        tf.errors.InvalidArgumentError: a row is not UTF-8 (raised when the
            graph runs; its message names `{name}_must_be_utf8`).
    """
    valid = tf.equal(
        tf.strings.unicode_transcode(sentences, "UTF-8", "UTF-8",
                                     errors="replace",
                                     replacement_char=0xFFFD),
        sentences)
    check = tf.debugging.assert_equal(
        valid, tf.ones_like(valid),
        message=f"{name}: every row must be UTF-8 text",
        name=f"{name}_must_be_utf8")
    with tf.control_dependencies([check]):
        return tf.identity(sentences)
