"""The flavours of `tfattn.MultiHeadAttention`, as classes of its steps.

`PaperFlavor` holds the steps of the paper's attention (and Keras's
`MultiHeadAttention`); `Reference2017Flavor` and `Reference2019Flavor`,
which reproduce Kyubyong/transformer's TF1 `multihead_attention`, subclass
it (through `ReferenceFlavor`) and override the few steps their reference
changes: the key mask (`key_keep`), the score and query masks
(`score_masks`), the ending (`build_ending`, `output`: residual and layer
norm instead of the output projection), the projections' activation (ReLU
in 2017) and the arguments each accepts.

A layer picks its flavour's class once, in its constructor (`of`), and
calls these steps; it stays one class, `MultiHeadAttention`, so its config
(with `flavor`), serialization and `.keras` files are those of one layer.
The flavour objects hold no state: a step that builds a sublayer returns
it, and the layer keeps it (under the flavour's `ending` attribute name);
a step that uses the layer's sublayers takes the layer.

`FLAVORS`, the names of the flavours (the values of the `flavor` argument
of the layers, blocks, models and hparams), is defined here, once.

Shapes: B = batch, T_q = query length, T_k = key length, C = width, H =
heads, d_v = per-head value width.
"""

from keras import ops

from tfattn.utils import validation
from tfattn.layers import attention_arguments as arguments
from tfattn.layers.attention_arguments import CONTEXT
from tfattn.layers.layer_normalization import LayerNormalization
from tfattn.ops import masking

__all__ = ["FLAVORS", "REFERENCE_EPSILON", "PaperFlavor", "ReferenceFlavor",
           "Reference2017Flavor", "Reference2019Flavor", "of"]

# The references' layer-norm epsilon, which they put inside the square root
# (docs/reference.md §1.1, §2.1): their attention's norm and, by default,
# their blocks' (`block_base.resolved_epsilon`).
REFERENCE_EPSILON = 1e-8


class PaperFlavor:
    """`flavor="paper"` ("Attention Is All You Need", as Keras's layer):
    linear projections, implicit masks on queries and keys/values, the heads
    through an output projection, and every Keras option (`key_dim`,
    `value_dim`, `output_shape`, `use_bias`, `sliding_window`,
    `attention_axes`, `use_gate`)."""

    name = "paper"
    projection_activation = None
    # The attribute (and sublayer name) under which the layer keeps what
    # `build_ending` returns.
    ending = "output_dense"
    # A query with no visible key: all-zero weights, as Keras 3.15's
    # explicit path (its fused default path gives uniform ones).
    fully_masked = "zero"

    def check_paper_only(self, name, value, default, why):
        """Refuses `value` != `default` for an argument only the paper
        flavour takes; every value passes here.

        Args:
            name: str. The argument's name.
            value: any. The value the layer received.
            default: any. The only value the reference flavours take.
            why: str. Appended to the error message (the reason).
        """

    def check_values_allowed(self, values_shape):
        """Refuses separate `values` where V comes from the keys; they pass
        here.

        Args:
            values_shape: tuple or TensorShape. The values' shape.
        """

    def check_key_masks(self, key_masks, batch, key_length):
        """`key_masks` belongs to `reference_2019`: refused here.

        Args:
            key_masks: bool tensor or None.
            batch: int or None. The batch size B.
            key_length: int or None. The key length T_k.

        Raises:
            ValueError: `key_masks` is not None.
        """
        if key_masks is not None:
            raise validation.invalid_argument(
                "key_masks",
                "None outside flavor 'reference_2019' (its True = padding "
                "polarity is that reference's; pass `attention_mask`, "
                "True = may attend, or Keras implicit masks instead)",
                f"<tensor of shape {validation.shape_of(key_masks)}>",
                CONTEXT)

    def check_widths(self, units, queries_shape, num_units):
        """Checks the projection width against the queries' (any width
        here).

        Args:
            units: int. The projection width H·d.
            queries_shape: tuple. The queries' shape [B, T_q, C_q].
            num_units: int or None. The layer's argument, for the message.
        """

    def build_ending(self, layer, queries_shape, value_units, output_units):
        """Builds the output projection of the heads, [B, T_q, H·d_v] ->
        [B, T_q, O]; the layer keeps it as `output_dense` (`ending`).

        Args:
            layer: MultiHeadAttention. The layer being built (its
                projections' options).
            queries_shape: tuple. The queries' shape [B, T_q, C_q].
            value_units: int. The heads' width H·d_v.
            output_units: int. The output width O.

        Returns:
            keras.layers.Dense. The built projection, named "output_dense".
        """
        dense = layer._projection(output_units, self.ending)
        dense.build(tuple(queries_shape[:-1]) + (value_units,))
        return dense

    def output(self, layer, heads, queries):
        """The heads [B, T_q, H·d_v] (times the gate) through the output
        projection.

        Args:
            layer: MultiHeadAttention. The built layer.
            heads: tensor [B, T_q, H·d_v]. The heads, merged.
            queries: tensor [B, T_q, C_q]. The gate's input.

        Returns:
            tensor [B, T_q, O].
        """
        if layer.use_gate:
            heads = heads * layer.gate_dense(queries)
        return layer.output_dense(heads)

    def key_keep(self, keys, values, key_masks, padding_mask):
        """The keys' keep-mask: the Keras implicit mask of the keys (else of
        the values) and `padding_mask`.

        Args:
            keys: tensor [B, T_k, C_k].
            values: tensor [B, T_k, C_v].
            key_masks: None here (`check_key_masks`).
            padding_mask: bool [B, T_k], True = a real key, or None.

        Returns:
            bool [B, T_k] (True = real key), or None when nothing masks.
        """
        keep = masking.implicit_mask(keys)
        if keep is None:
            keep = masking.implicit_mask(values)
        return masking.combine_masks(keep, padding_mask)

    def score_masks(self, queries, key_keep, attention_mask, positions):
        """The masks of the scores. Here (and in Keras) padded keys and the
        queries padded by their Keras implicit mask are masked.

        Args:
            queries: tensor [B, T_q, C_q] (its implicit mask is read).
            key_keep: bool [B, T_k] or None (`key_keep`).
            attention_mask: bool tensor (Keras's shapes) or None.
            positions: bool [T_q, T_k] causal/band keep-mask, or None.

        Returns:
            (bool mask broadcasting to the scores [B, H, T_q, T_k] or None,
            additive float32 score bias or None, multiplier of the weights
            or None).
        """
        mask = masking.as_score_mask(
            padding=key_keep, query_padding=masking.implicit_mask(queries),
            attention=attention_mask, causal=positions)
        return mask, None, None


class ReferenceFlavor(PaperFlavor):
    """What both references change (not a flavour itself): projections of
    width C = the queries' width, with bias; no output projection, but a
    residual with the raw queries and a layer norm with epsilon 1e-8; only
    rank-3 inputs [B, T, C] and none of Keras's options."""

    # The referenced code gives a query with no visible key uniform weights
    # (spec §5).
    fully_masked = "uniform"
    ending = "layer_norm"

    def check_paper_only(self, name, value, default, why):
        """Refuses `value` != `default`: the reference fixes it.

        Args:
            name: str. The argument's name.
            value: any. The value the layer received.
            default: any. The only value taken here.
            why: str. Appended to the error message (the reason).

        Raises:
            ValueError: `value` != `default`.
        """
        if value != default:
            raise validation.invalid_argument(
                name, f"{default} in flavor '{self.name}'{why}", value,
                CONTEXT)

    def check_widths(self, units, queries_shape, num_units):
        """Refuses a projection width other than the queries' (the residual
        adds the queries).

        Args:
            units: int. The projection width C.
            queries_shape: tuple. The queries' shape [B, T_q, C_q].
            num_units: int or None. The layer's argument, for the message.

        Raises:
            ValueError: `units` != C_q.
        """
        if units != queries_shape[-1]:
            raise validation.invalid_argument(
                "num_units",
                f"the queries' width {queries_shape[-1]} in flavor "
                f"'{self.name}', whose residual adds the queries",
                num_units,
                CONTEXT,
            )

    def build_ending(self, layer, queries_shape, value_units, output_units):
        """Builds the layer norm of the residual, over [B, T_q, C]; the
        layer keeps it as `layer_norm` (`ending`).

        Args:
            layer: MultiHeadAttention. The layer being built (its dtype
                policy).
            queries_shape: tuple. The queries' shape [B, T_q, C].
            value_units: int. Unused (no output projection).
            output_units: int. Unused (no output projection).

        Returns:
            LayerNormalization. The built norm, of epsilon
            `REFERENCE_EPSILON`, named "layer_norm".
        """
        norm = LayerNormalization(
            epsilon=REFERENCE_EPSILON, dtype=layer.dtype_policy,
            name=self.ending,
        )
        norm.build(queries_shape)
        return norm

    def output(self, layer, heads, queries):
        """LN(heads + queries).

        Args:
            layer: MultiHeadAttention. The built layer.
            heads: tensor [B, T_q, C]. The heads, merged.
            queries: tensor [B, T_q, C]. The residual.

        Returns:
            tensor [B, T_q, C].
        """
        return layer.layer_norm(heads + ops.cast(queries, heads.dtype))


class Reference2017Flavor(ReferenceFlavor):
    """`flavor="reference_2017"`: `multihead_attention` of the 2017 code,
    final state ed2deb8 (docs/reference.md §1.4, "G1b").

    ReLU projections with bias, V projected from the *keys* (no `values`);
    keys and queries whose input rows are all zeros are masked (scores
    replaced by -2**32+1, query rows zeroed after the softmax); Keras
    implicit masks are ignored, since the reference finds padding from zero
    rows; no output projection; residual with the raw queries, then layer
    norm with epsilon 1e-8.
    """

    name = "reference_2017"
    projection_activation = "relu"

    def check_values_allowed(self, values_shape):
        """Refuses separate `values`: V is projected from the keys.

        Args:
            values_shape: tuple or TensorShape. The values' shape.

        Raises:
            ValueError: always.
        """
        raise validation.invalid_argument(
            "values",
            "None in flavor 'reference_2017', whose V is projected from "
            "the keys as in the referenced code (use flavor "
            "'reference_2019' or 'paper' for separate values)",
            f"<tensor of shape {validation.shape_of(values_shape)}>",
            CONTEXT,
        )

    def key_keep(self, keys, values, key_masks, padding_mask):
        """Keys whose input rows are not all zeros, and `padding_mask`.

        Args:
            keys: tensor [B, T_k, C].
            values: unused (V is projected from the keys).
            key_masks: None (`check_key_masks`).
            padding_mask: bool [B, T_k], True = a real key, or None.

        Returns:
            bool [B, T_k] (True = real key).
        """
        return masking.combine_masks(masking.nonzero_rows(keys), padding_mask)

    def score_masks(self, queries, key_keep, attention_mask, positions):
        """Padded keys masked in the scores; queries whose input rows are
        all zeros zeroed after the softmax.

        Args:
            queries: tensor [B, T_q, C] (its all-zero rows are read).
            key_keep: bool [B, T_k] (`key_keep`).
            attention_mask: bool tensor (Keras's shapes) or None.
            positions: bool [T_q, T_k] causal keep-mask, or None.

        Returns:
            (bool mask broadcasting to the scores, None, float32
            multiplier [B, 1, T_q, 1]).
        """
        mask = masking.as_score_mask(
            padding=key_keep, attention=attention_mask, causal=positions)
        query_keep = ops.cast(masking.nonzero_rows(queries), "float32")
        return mask, None, query_keep[:, None, :, None]


class Reference2019Flavor(ReferenceFlavor):
    """`flavor="reference_2019"`: `multihead_attention` of the 2019 code,
    master fb023bb (§2.4-2.5, "G2c").

    Linear projections with bias; `key_masks` (bool [B, T_k], True =
    padding: that reference's polarity, as it mirrors its signature; else
    the keys' Keras implicit mask) added to the scores as
    `key_masks * (-2**32+1)`; no query mask; no output projection; residual
    and layer norm with epsilon 1e-8.
    """

    name = "reference_2019"

    def check_key_masks(self, key_masks, batch, key_length):
        """Checks `key_masks`: bool [B, T_k], or None.

        Args:
            key_masks: bool tensor or None.
            batch: int or None. The batch size B.
            key_length: int or None. The key length T_k.

        Raises:
            ValueError: another dtype or shape.
        """
        if key_masks is not None:
            arguments.check_mask("key_masks", key_masks, (batch, key_length),
                                 "[B, T_k]")

    def key_keep(self, keys, values, key_masks, padding_mask):
        """Not `key_masks` (else the keys' implicit mask), and
        `padding_mask`.

        Args:
            keys: tensor [B, T_k, C_k] (its implicit mask is read).
            values: unused.
            key_masks: bool [B, T_k], True = padding, or None.
            padding_mask: bool [B, T_k], True = a real key, or None.

        Returns:
            bool [B, T_k] (True = real key), or None when nothing masks.
        """
        if key_masks is not None:
            keep = ops.logical_not(key_masks)
        else:
            keep = masking.implicit_mask(keys)
        return masking.combine_masks(keep, padding_mask)

    def score_masks(self, queries, key_keep, attention_mask, positions):
        """Padded keys through the additive bias [B, 1, 1, T_k]: the 2019
        reference adds key_masks * P instead of replacing the scores.

        Args:
            queries: unused (no query mask).
            key_keep: bool [B, T_k] or None (`key_keep`).
            attention_mask: bool tensor (Keras's shapes) or None.
            positions: bool [T_q, T_k] causal keep-mask, or None.

        Returns:
            (bool mask broadcasting to the scores or None, float32 bias
            [B, 1, 1, T_k] or None, None).
        """
        bias = None
        if key_keep is not None:
            bias = masking.reference_key_mask_bias(ops.logical_not(key_keep))
        mask = masking.as_score_mask(attention=attention_mask, causal=positions)
        return mask, bias, None


_STEPS = {flavor.name: flavor() for flavor in (
    PaperFlavor, Reference2017Flavor, Reference2019Flavor)}

# The model flavours: the paper's attention and the two reference codes,
# ("paper", "reference_2017", "reference_2019").
FLAVORS = tuple(_STEPS)


def of(flavor):
    """The steps of `flavor`.

    Args:
        flavor: str. One of `FLAVORS` (a checked argument).

    Returns:
        The flavour's steps: a `PaperFlavor`, `Reference2017Flavor` or
        `Reference2019Flavor` (shared, stateless).
    """
    return _STEPS[flavor]
