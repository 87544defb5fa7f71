"""Keras's `attention_axes` for `MultiHeadAttention`: attention over inputs
of rank > 3, by folding them into the rank-3 case.

Keras (`keras.layers.MultiHeadAttention`) treats every axis of a
[B, d_1, ..., d_n, C] input that is not an attention axis (and not the
features) as a batch axis, and attends jointly over the attention axes: the
softmax runs over all key positions of those axes at once. That is the
rank-3 attention of the inputs transposed to [B, batch axes..., attention
axes..., C] and reshaped to [B·prod(batch axes), prod(attention axes), C],
which is what `Fold` does; the outputs are reshaped back, and the scores
take Keras's layout [B, batch axes..., H, query attention axes..., key
attention axes...].

Masks follow Keras: an `attention_mask` of lower rank than the scores gets
axes inserted where the heads sit until the ranks agree, then broadcasts;
padding-style masks (implicit Keras masks, `padding_mask`) have the input's
shape without the feature axis. `causality` and `sliding_window` act on the
flattened positions of the attention axes (row-major order).
"""

import math
import numbers

import keras
from keras import ops

from tfattn.utils import validation
from tfattn.layers import attention_arguments as arguments
from tfattn.layers.attention_arguments import CONTEXT
from tfattn.ops import masking

__all__ = ["Fold", "check_attention_axes", "check_input_ranks", "resolve"]


def check_attention_axes(attention_axes, flavor):
    """Checks Keras's `attention_axes` argument.

    Args:
        attention_axes: None, an int or a non-empty list/tuple of ints.
        flavor: str. The layer's flavour; only `"paper"` takes axes.

    Returns:
        None, or the axes as a tuple of ints (as Keras stores them).

    Raises:
        ValueError: another value, or axes in a reference flavour.
    """
    if attention_axes is None:
        return None
    axes = attention_axes
    if isinstance(axes, numbers.Integral) and not isinstance(axes, bool):
        axes = (axes,)
    if (not isinstance(axes, (list, tuple)) or not axes or any(
            isinstance(a, bool) or not isinstance(a, numbers.Integral)
            for a in axes)):
        raise validation.invalid_argument(
            "attention_axes", "None, an int or a non-empty list/tuple of "
            "ints", attention_axes, CONTEXT)
    if flavor != "paper":
        raise validation.invalid_argument(
            "attention_axes", f"None in flavor '{flavor}' (the referenced "
            "code attends over axis 1 of [B, T, C] inputs)", attention_axes,
            CONTEXT)
    return tuple(int(a) for a in axes)


def resolve(attention_axes, rank):
    """The attention axes of a rank-`rank` input, as non-negative axes.

    None means every axis between the batch and the features, as Keras.
    Negative axes count from the end of the input's axes.

    Args:
        attention_axes: None or a tuple of ints (`check_attention_axes`).
        rank: int. The inputs' rank.

    Returns:
        tuple of ints, each in [1, rank - 2].

    Raises:
        ValueError: repeated axes, or the batch or feature axis.
    """
    if attention_axes is None:
        return tuple(range(1, rank - 1))
    axes = tuple(a + rank if a < 0 else a for a in attention_axes)
    if len(set(axes)) != len(axes) or not all(1 <= a <= rank - 2 for a in axes):
        raise validation.invalid_argument(
            "attention_axes", f"distinct axes between 1 and {rank - 2} (or "
            f"-{rank - 1} and -2) for inputs of rank {rank}: neither the "
            "batch nor the feature axis", attention_axes, CONTEXT)
    return axes


def check_input_ranks(flavor, shapes):
    """Checks that queries, keys and values have one rank: 3, or more in
    the paper flavour (Keras's `attention_axes`).

    Args:
        flavor: str. The layer's flavour.
        shapes: dict. The shapes (tuples) of "queries", "keys", "values".

    Returns:
        int. The inputs' rank.

    Raises:
        ValueError: a rank below 3, above 3 in a reference flavour, or
            ranks that differ.
    """
    rank = len(shapes["queries"])
    if rank < 3 or (rank > 3 and flavor != "paper"):
        expected = "a rank-3 tensor [B, T, C]" + (
            " (or of rank > 3, attended over `attention_axes`)"
            if flavor == "paper" else f" in flavor '{flavor}'")
        raise validation.invalid_argument(
            "queries", expected, f"<tensor of shape {shapes['queries']}>",
            CONTEXT)
    for name, shape in shapes.items():
        if len(shape) != rank:
            raise validation.invalid_argument(
                name, f"a rank-{rank} tensor, as `queries`",
                f"<tensor of shape {shape}>", CONTEXT)
    return rank


class Fold:
    """How one call's [B, d_1, ..., d_n, C] inputs fold to [B', T, C].

    B' is B times the sizes of the batch axes, T the product of the sizes
    of the attention axes.

    Args:
        rank: int. The inputs' rank n + 2.
        axes: tuple of ints. The attention axes (`resolve`).
    """

    def __init__(self, rank, axes):
        """Computes the transposition that puts the attention axes last."""
        self.axes = axes
        self.batch_axes = tuple(a for a in range(rank - 1) if a not in axes)
        self.perm = self.batch_axes + axes + (rank - 1,)
        self.inverse = tuple(self.perm.index(a) for a in range(rank))

    def attend(self, attend, num_heads, queries, keys, values,
               attention_mask, padding_mask, training,
               return_attention_scores):
        """`attend` (rank-3 attention, `MultiHeadAttention._attend`) over
        the folded inputs and masks; outputs and scores unfolded.

        Args:
            attend: callable. The rank-3 attention, called with
                `MultiHeadAttention._attend`'s arguments.
            num_heads: int. The number of heads H.
            queries: tensor [B, d_1, ..., d_n, C_q].
            keys: tensor [B, d_1, ..., d_n, C_k], of the queries' rank.
            values: tensor [B, d_1, ..., d_n, C_v], of the keys' shape but
                the last axis.
            attention_mask: bool tensor or None (`fold_attention_mask`).
            padding_mask: bool tensor of the keys' shape without the
                features, or None.
            training: bool or None.
            return_attention_scores: bool.

        Returns:
            The output, of the queries' layout with the output width; with
            `return_attention_scores`, `(output, scores)`, the scores in
            Keras's layout (`scores_shape`).
        """
        if padding_mask is not None:
            arguments.check_mask("padding_mask", padding_mask,
                                 tuple(keys.shape[:-1]),
                                 "the keys' shape without the features")
        folded = []
        for x in (queries, keys, values):
            mask = self.fold_positions(masking.implicit_mask(x))
            folded.append(masking.with_implicit_mask(self.fold(x), mask))
        if attention_mask is not None:
            attention_mask = self.fold_attention_mask(
                attention_mask, queries, keys, num_heads)
        result = attend(
            *folded, None, attention_mask, self.fold_positions(padding_mask),
            training, return_attention_scores, None, None)
        if not return_attention_scores:
            return self.unfold(result, queries)
        return (self.unfold(result[0], queries),
                self.unfold_scores(result[1], queries, keys))

    def _sizes(self, x, axes):
        shape = ops.shape(x)
        return [shape[a] for a in axes]

    def fold(self, x):
        """[B, d_1, ..., d_n, C] -> [B', T, C].

        Args:
            x: tensor [B, d_1, ..., d_n, C].

        Returns:
            tensor [B', T, C].
        """
        width = ops.shape(x)[-1]
        x = ops.transpose(x, self.perm)
        length = math.prod(self._sizes(x, range(len(self.batch_axes),
                                                len(self.perm) - 1)))
        return ops.reshape(x, (-1, length, width))

    def fold_positions(self, mask):
        """A padding-style mask [B, d_1, ..., d_n] -> [B', T], or None.

        Args:
            mask: bool tensor [B, d_1, ..., d_n], or None.

        Returns:
            bool tensor [B', T], or None when `mask` is None.
        """
        if mask is None:
            return None
        mask = ops.transpose(mask, self.perm[:-1])
        length = math.prod(self._sizes(mask, range(len(self.batch_axes),
                                                   len(self.perm) - 1)))
        return ops.reshape(mask, (-1, length))

    def unfold(self, y, queries):
        """[B', T_q, O] -> the queries' layout with O features.

        Args:
            y: tensor [B', T_q, O].
            queries: tensor [B, d_1, ..., d_n, C_q], for the sizes.

        Returns:
            tensor [B, d_1, ..., d_n, O].
        """
        sizes = self._sizes(queries, self.batch_axes + self.axes)
        y = ops.reshape(y, sizes + [ops.shape(y)[-1]])
        return ops.transpose(y, self.inverse)

    def scores_shape(self, queries, keys, num_heads):
        """Keras's layout [B, batch axes..., H, q axes..., k axes...].

        Args:
            queries: tensor [B, d_1, ..., d_n, C_q].
            keys: tensor [B, d_1, ..., d_n, C_k].
            num_heads: int or scalar tensor. The number of heads H.

        Returns:
            list. The sizes of the scores' axes (ints or scalar tensors).
        """
        return (self._sizes(queries, self.batch_axes) + [num_heads]
                + self._sizes(queries, self.axes)
                + self._sizes(keys, self.axes))

    def unfold_scores(self, scores, queries, keys):
        """[B', H, T_q, T_k] -> Keras's layout.

        Args:
            scores: tensor [B', H, T_q, T_k].
            queries: tensor [B, d_1, ..., d_n, C_q], for the sizes.
            keys: tensor [B, d_1, ..., d_n, C_k], for the sizes.

        Returns:
            tensor of shape `scores_shape(queries, keys, H)`.
        """
        return ops.reshape(scores, self.scores_shape(queries, keys,
                                                     ops.shape(scores)[1]))

    def fold_attention_mask(self, mask, queries, keys, num_heads):
        """Keras's expansion of `attention_mask`, checked and folded to
        [B', 1 or H, T_q, T_k].

        Args:
            mask: bool tensor that broadcasts to the scores
                (`scores_shape`) once axes are inserted where the heads sit.
            queries: tensor [B, d_1, ..., d_n, C_q].
            keys: tensor [B, d_1, ..., d_n, C_k].
            num_heads: int. The number of heads H.

        Returns:
            bool tensor [B', 1 or H, T_q, T_k].

        Raises:
            ValueError: another dtype, or a shape that does not broadcast.
        """
        want = self.scores_shape(queries, keys, num_heads)
        static = tuple(validation.shape_of(mask))
        dtype = keras.backend.standardize_dtype(mask.dtype)
        expected = ("a bool tensor that broadcasts to the scores [B, batch "
                    "axes..., H, query axes..., key axes...] = "
                    f"{_static(want)} once axes are inserted where the heads "
                    "sit, as Keras does")
        received = f"<tensor of dtype {dtype} and shape {static}>"
        if dtype != "bool" or len(static) > len(want):
            raise validation.invalid_argument(
                "attention_mask", expected, received, CONTEXT)
        shape = list(static)
        while len(shape) < len(want):
            cut = max(len(shape) - 2 * len(self.axes), 0)
            mask = ops.expand_dims(mask, cut)
            shape.insert(cut, 1)
        for got, size in zip(shape, want):
            if got not in (None, 1) and isinstance(size, int) and got != size:
                raise validation.invalid_argument(
                    "attention_mask", expected, received, CONTEXT)
        heads = 1 if shape[len(self.batch_axes)] == 1 else num_heads
        full = list(want)
        full[len(self.batch_axes)] = heads
        mask = ops.broadcast_to(mask, full)
        q_length = math.prod(self._sizes(queries, self.axes))
        k_length = math.prod(self._sizes(keys, self.axes))
        return ops.reshape(mask, (-1, heads, q_length, k_length))


def _static(shape):
    return tuple(s if isinstance(s, int) else None for s in shape)
