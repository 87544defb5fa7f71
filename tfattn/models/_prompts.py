"""`CausalLM.generate`'s prompts (private): ragged prompts checked and
packed into a left-padded, length-bucketed batch, and the continuations
unpacked.

Shapes: B = prompts, n_b = prompt b's length, Q = the prefill length (the
longest prompt less its last token, rounded up to a bucket), L = the
output buffer (`max_new_tokens` rounded up to a bucket).
"""

from typing import NamedTuple

import numpy as np

from tfattn.utils import validation
from tfattn.utils.buckets import bucket

__all__ = ["PackedPrompts", "pack", "with_prompts"]


class PackedPrompts(NamedTuple):
    """Prompts ready for the compiled search.

    Attributes:
        prefill: int32 [B, Q]. Each prompt but its last token, left-padded
            with 0 so that every prompt ends at column Q - 1.
        last: int32 [B]. Each prompt's last token (fed at step 0).
        lengths: int32 [B]. n_b, the prompts' lengths.
        prompts: list of B int lists. The prompts as given (no padding).
    """

    prefill: np.ndarray
    last: np.ndarray
    lengths: np.ndarray
    prompts: list


def pack(prompts, vocab_size, max_length, max_new_tokens, context):
    """Checks prompts and packs them (`PackedPrompts`).

    Args:
        prompts: a list of int lists (ragged), or an int array [B, P]
            right-padded with 0 (each row's zeros at its end are padding).
        vocab_size: int. Ids must lie in [1, vocab_size).
        max_length: int. The model's positions: n_b + max_new_tokens must
            not exceed it.
        max_new_tokens: int >= 1.
        context: str. Prefixes the messages.

    Returns:
        PackedPrompts.

    Raises:
        ValueError: naming `prompts` (not ids, empty, a padding id inside,
            an id out of range, too long) or `max_new_tokens`.
    """
    rows = _rows(prompts, context)
    for index, row in enumerate(rows):
        if not row:
            raise validation.invalid_argument(
                "prompts", "prompts of at least one token",
                f"<prompt {index}: empty>", context)
        bad = [t for t in row if not 0 < t < vocab_size]
        if bad:
            raise validation.invalid_argument(
                "prompts", f"token ids in [1, {vocab_size}) (0 is padding)",
                f"<prompt {index} holding {bad[0]}>", context)
    longest = max(len(row) for row in rows)
    if longest >= max_length:
        raise validation.invalid_argument(
            "prompts", f"prompts shorter than the model's max_length="
            f"{max_length} positions", f"<a prompt of {longest} tokens>",
            context)
    if longest + max_new_tokens > max_length:
        raise validation.invalid_argument(
            "max_new_tokens", f"at most {max_length - longest} (max_length="
            f"{max_length} less the longest prompt's {longest} tokens)",
            max_new_tokens, context)
    width = bucket(longest - 1)
    prefill = np.zeros((len(rows), width), np.int32)
    for b, row in enumerate(rows):
        if len(row) > 1:
            prefill[b, width - len(row) + 1:] = row[:-1]
    return PackedPrompts(
        prefill=prefill,
        last=np.asarray([row[-1] for row in rows], np.int32),
        lengths=np.asarray([len(row) for row in rows], np.int32),
        prompts=rows,
    )


def _rows(prompts, context):
    """The prompts as a list of int lists (a 2-D array loses its trailing
    zeros)."""
    expected = ("a non-empty list of token-id lists, or an int array "
                "[B, P] padded with 0")
    if hasattr(prompts, "shape") and hasattr(prompts, "dtype"):
        array = np.asarray(prompts)
        if array.ndim != 2 or array.dtype.kind not in "iu":
            raise validation.invalid_argument(
                "prompts", expected,
                f"<array of dtype {array.dtype} and shape {array.shape}>",
                context)
        rows = []
        for row in array.tolist():
            while row and row[-1] == 0:
                row.pop()
            rows.append(row)
    elif isinstance(prompts, (list, tuple)) and prompts and all(
            isinstance(row, (list, tuple, np.ndarray)) for row in prompts):
        rows = [list(row) for row in prompts]
        for row in rows:
            if any(isinstance(t, bool) or not isinstance(t, (int, np.integer))
                   for t in row):
                raise validation.invalid_argument(
                    "prompts", expected, prompts, context)
        rows = [[int(t) for t in row] for row in rows]
    else:
        raise validation.invalid_argument("prompts", expected, prompts,
                                          context)
    if not rows:
        raise validation.invalid_argument("prompts", expected, prompts,
                                          context)
    return rows


def with_prompts(packed, ids):
    """Each prompt followed by its continuation, right-padded with 0.

    Args:
        packed: PackedPrompts.
        ids: int32 [B, L]. The continuations (0 after a stop token).

    Returns:
        int32 [B, max n_b + L].
    """
    ids = np.asarray(ids)
    out = np.zeros((ids.shape[0], int(packed.lengths.max()) + ids.shape[1]),
                   np.int32)
    for b, row in enumerate(packed.prompts):
        out[b, :len(row)] = row
        out[b, len(row):len(row) + ids.shape[1]] = ids[b]
    return out
