"""The serving contract of the language models (`tfattn.CausalLM`).

The Python path (`lm_evaluation.continue_details`), the SavedModel
(`tfattn.export.load_language_model`) and the CTranslate2 generator
(`tfattn.export.load_ctranslate2_generator`) answer the same input the
same way; `tests/test_decoding_lm_serving.py` runs one table of cases
against each engine.

Input, from Python: `prompts`, a list or tuple of `str`.

- Batch 0 (`[]`): empty outputs.
- A prompt is read as `<s>` (BOS) followed by its pieces. An empty or
  whitespace-only prompt is `<s>` alone: the model continues from nothing
  (unconditional text).
- The window: at most `max_prompt_length = max_length - max_new_tokens`
  ids are read (BOS included). A longer prompt keeps its *last*
  `max_prompt_length` ids, the text next to the continuation (BOS then
  drops out), and `truncated` is True for it (`prompt_window`).
- A `str` that is not valid Unicode (a lone surrogate): `ValueError`
  naming `prompts[i]`; anything else (one string, bytes, None, numbers, a
  tensor): `ValueError` naming `prompts` or `prompts[i]`.
- Sampling settings: `temperature` finite and > 0, `top_p` in (0, 1],
  `seed` an int in [-2**63, 2**63) (`checked_sampling`); else a
  `ValueError` naming the setting.

Output, row by row (`Continuations`): the continuation (the generated text
only, ended by the end-of-text piece, which is not shown), its score (the
sum of the model's log-probabilities of the generated pieces, end-of-text
included where emitted, over the vocabulary less padding, which no engine
emits; float32 engines agree to about 1e-5) and `truncated`. Greedy
continuations are the same text in every engine; sampled ones are the same
in Python (without XLA, `continue_details`' default) and the SavedModel
for the same seed (XLA and CTranslate2 have random streams of their own).

The SavedModel's signatures take `prompts`, a `[B]` `tf.string` tensor,
from any client: another rank, or bytes that are not UTF-8, fail in the
graph with an `InvalidArgumentError` whose message names `prompts`
(`prompts_must_be_a_vector_of_strings`, `prompts_must_be_utf8`); a
temperature, top_p or seed out of range likewise names it. Tensors of the
wrong dtype are refused by TensorFlow before the graph runs; the loaders'
Python methods refuse them first, naming the argument.
"""

import math
import numbers
from typing import NamedTuple

from tfattn.data.tokenizer import BOS_ID
from tfattn.decoding.draws import seed_words
from tfattn.utils.validation import check_positive_int
from tfattn.utils.validation import invalid_argument

__all__ = ["Continuations", "prompt_window", "checked_max_new_tokens",
           "checked_sampling"]


class Continuations(NamedTuple):
    """What a language model's `continue_details` returns, row by row:
    `continuations` (str, the generated text only), `scores` (float) and
    `truncated` (bool, the prompt was cut to the window)."""

    continuations: list
    scores: list
    truncated: list


def prompt_window(pieces, max_prompt_length):
    """The ids each prompt is read as, and whether it was cut.

    Args:
        pieces: list of B int lists. Each prompt's SentencePiece ids.
        max_prompt_length: int >= 1. Ids read at most, BOS included.

    Returns:
        `(rows, truncated)`: rows, B lists of ids (`[BOS] + pieces`, its
        last `max_prompt_length` ids when longer); truncated, B bools.
    """
    rows, truncated = [], []
    for row in pieces:
        ids = [BOS_ID] + list(row)
        truncated.append(len(ids) > max_prompt_length)
        rows.append(ids[-max_prompt_length:])
    return rows, truncated


def checked_max_new_tokens(max_new_tokens, max_length, context):
    """`max_new_tokens` as an int in [1, max_length): the window must keep
    at least BOS.

    Args:
        max_new_tokens: what the caller passed.
        max_length: int. The model's positions.
        context: str. Prefixes the message.

    Returns:
        int.

    Raises:
        ValueError: naming `max_new_tokens`.
    """
    check_positive_int("max_new_tokens", max_new_tokens, context)
    if max_new_tokens >= max_length:
        raise invalid_argument(
            "max_new_tokens", f"less than the model's max_length="
            f"{max_length} (the prompt needs one position at least)",
            max_new_tokens, context)
    return int(max_new_tokens)


def checked_sampling(temperature, top_p, seed, context):
    """The `sample` settings checked as the signature checks them.

    Args:
        temperature: finite number > 0.
        top_p: number in (0, 1].
        seed: int in [-2**63, 2**63).
        context: str. Prefixes the message.

    Returns:
        `(temperature, top_p, seed)` as float, float, int.

    Raises:
        ValueError: naming the setting that is out of range or of the
            wrong type.
    """
    for name, value, ok, expected in (
            ("temperature", temperature,
             lambda v: 0 < v < math.inf, "a finite number > 0"),
            ("top_p", top_p, lambda v: 0 < v <= 1, "a number in (0, 1]")):
        if (isinstance(value, bool) or not isinstance(value, numbers.Real)
                or not ok(value)):
            raise invalid_argument(name, expected, value, context)
    if isinstance(seed, (bool, float)) or not isinstance(
            seed, numbers.Integral):
        raise invalid_argument("seed", "an int in [-2**63, 2**63)", seed,
                               context)
    seed_words(seed, context)
    return float(temperature), float(top_p), int(seed)
