"""`MultiHeadAttention`: the paper's attention and both referenced versions."""

import keras
from keras import ops

from tfattn import validation
from tfattn.ops import attention as attention_ops
from tfattn.ops import masking

FLAVORS = ("paper", "reference_2017", "reference_2019")

_CONTEXT = "MultiHeadAttention"


@keras.saving.register_keras_serializable(package="tfattn")
class MultiHeadAttention(keras.layers.Layer):
    """Multi-head attention: the paper's, or Kyubyong/transformer's, exactly.

    Shapes: B = batch, T_q = query length, T_k = key length, C = `num_units`,
    H = `num_heads`, d = C / H. Head i owns output channels [i·d, (i+1)·d) of
    each projection.

    Flavours:

    - `"paper"` ("Attention Is All You Need"): Q, K, V linear projections with
      bias, softmax(Q Kᵀ / sqrt(d)) V per head, heads concatenated and
      projected by `output_dense`. No residual or norm inside (the block adds
      them). Equal to `keras.layers.MultiHeadAttention` with the same weights
      and masks.
    - `"reference_2017"`: `multihead_attention` of the 2017 code, final state
      ed2deb8 (REFERENCE_SPEC §1.4, "G1b"). ReLU projections with bias, V
      projected from the *keys*; keys and queries whose input rows are all
      zeros are masked (scores replaced by -2**32+1, query rows zeroed after
      the softmax); no output projection; residual with the raw queries, then
      layer norm with epsilon 1e-8.
    - `"reference_2019"`: `multihead_attention` of the 2019 code, master
      fb023bb (§2.4-2.5, "G2c"). Linear projections with bias; `key_masks`
      (True = padding) added as `key_masks * (-2**32+1)`; no query mask; no
      output projection; residual and layer norm with epsilon 1e-8.

    Masks. `attention_mask` uses the Keras polarity (True = may attend) in
    every flavour. `key_masks` belongs to `reference_2019` and keeps *that
    reference's* polarity (True = padding), because it mirrors its signature.
    The paper flavour also reads Keras implicit masks (for example from
    `Embedding(mask_zero=True)`) on queries and keys/values, as Keras does;
    `reference_2019` reads the keys' implicit mask when `key_masks` is not
    given; `reference_2017` ignores implicit masks, since the reference finds
    padding from zero rows. `causality=True` lets position t see keys <= t.
    Masks are broadcast, never expanded to [B, H, T_q, T_k] beforehand.

    Precision: masking and softmax run in float32, so the layer stays finite
    under `mixed_float16` and `mixed_bfloat16` (a query with every key masked
    gets uniform weights, as in the reference), and float32 keeps the
    reference's numbers.

    Args:
        num_units: int or None. Width C of every projection. Defaults to
            `None`, the queries' last dimension. The reference flavours need
            C equal to the queries' width (their residual adds the queries).
        num_heads: int. Number of heads H; must divide C. Defaults to `8`.
        dropout_rate: float in [0, 1). Dropout on the attention weights,
            active only when training. Defaults to `0.0`.
        causality: bool. Mask future keys. Defaults to `False`.
        flavor: one of `"paper"`, `"reference_2017"`, `"reference_2019"`.
            Defaults to `"paper"`.
        seed: int or None. Seed of the attention dropout. Defaults to `None`.
        **kwargs: base `keras.layers.Layer` arguments (`name`, `dtype`, ...).

    Call arguments:
        queries: [B, T_q, C_q].
        keys: [B, T_k, C_k]. Defaults to `queries` (self-attention).
        values: [B, T_k, C_v]. Defaults to `keys`. Not accepted by
            `reference_2017`, whose V is projected from the keys.
        key_masks: bool [B, T_k], True = padding (`reference_2019` only).
        attention_mask: bool [B, T_q, T_k], True = may attend.
        training: bool. Dropout is active only when True.
        return_attention_scores: bool. Also return the weights.

    Returns:
        output [B, T_q, C], or `(output, weights)` with weights
        [B, H, T_q, T_k] (float32, before dropout) when
        `return_attention_scores=True`.

    Example:

    ```python
    x = keras.random.normal((2, 5, 16))
    paper = tfattn.MultiHeadAttention(num_heads=4)
    y = paper(x, x)                                   # [2, 5, 16]
    ref = tfattn.MultiHeadAttention(num_heads=4, flavor="reference_2019",
                                    causality=True)
    y = ref(x, key_masks=ops.zeros((2, 5), "bool"))  # [2, 5, 16]
    ```
    """

    def __init__(
        self,
        num_units=None,
        num_heads=8,
        dropout_rate=0.0,
        causality=False,
        flavor="paper",
        seed=None,
        **kwargs,
    ):
        num_heads = validation.check_positive_int("num_heads", num_heads, _CONTEXT)
        if num_units is not None:
            num_units = validation.check_positive_int(
                "num_units", num_units, _CONTEXT
            )
            _check_divisible(num_units, num_heads)
        dropout_rate = validation.check_rate("dropout_rate", dropout_rate, _CONTEXT)
        causality = validation.check_bool("causality", causality, _CONTEXT)
        flavor = validation.check_choice("flavor", flavor, FLAVORS, _CONTEXT)
        super().__init__(**kwargs)
        self.num_units = num_units
        self.num_heads = num_heads
        self.dropout_rate = dropout_rate
        self.causality = causality
        self.flavor = flavor
        self.seed = seed
        self.supports_masking = True

    def build(self, queries_shape, keys_shape=None, values_shape=None):
        validation.check_rank("queries", queries_shape, 3, "[B, T_q, C]", _CONTEXT)
        keys_shape = queries_shape if keys_shape is None else keys_shape
        validation.check_rank("keys", keys_shape, 3, "[B, T_k, C]", _CONTEXT)
        if values_shape is not None:
            self._check_values_allowed(values_shape)
            validation.check_rank("values", values_shape, 3, "[B, T_k, C]", _CONTEXT)
        else:
            values_shape = keys_shape
        units = self.num_units or queries_shape[-1]
        _check_divisible(units, self.num_heads)
        if self.flavor != "paper" and units != queries_shape[-1]:
            raise validation.invalid_argument(
                "num_units",
                f"the queries' width {queries_shape[-1]} in flavor "
                f"'{self.flavor}', whose residual adds the queries",
                self.num_units,
                _CONTEXT,
            )
        self.units = units
        dense_kwargs = dict(
            units=units,
            activation="relu" if self.flavor == "reference_2017" else None,
            use_bias=True,
            kernel_initializer="glorot_uniform",
            bias_initializer="zeros",
            dtype=self.dtype_policy,
        )
        self.query_dense = keras.layers.Dense(name="query_dense", **dense_kwargs)
        self.query_dense.build(queries_shape)
        self.key_dense = keras.layers.Dense(name="key_dense", **dense_kwargs)
        self.key_dense.build(keys_shape)
        self.value_dense = keras.layers.Dense(name="value_dense", **dense_kwargs)
        self.value_dense.build(values_shape)
        if self.flavor == "paper":
            self.output_dense = keras.layers.Dense(
                units,
                use_bias=True,
                kernel_initializer="glorot_uniform",
                dtype=self.dtype_policy,
                name="output_dense",
            )
            self.output_dense.build(tuple(queries_shape[:-1]) + (units,))
        else:
            self.layer_norm = keras.layers.LayerNormalization(
                epsilon=1e-8, dtype=self.dtype_policy, name="layer_norm"
            )
            self.layer_norm.build(queries_shape)
        self.attention_dropout = keras.layers.Dropout(
            self.dropout_rate,
            seed=self.seed,
            dtype=self.dtype_policy,
            name="attention_dropout",
        )
        self.built = True

    def call(
        self,
        queries,
        keys=None,
        values=None,
        key_masks=None,
        attention_mask=None,
        training=None,
        return_attention_scores=False,
    ):
        if values is not None:
            self._check_values_allowed(values.shape)
        keys = queries if keys is None else keys
        values = keys if values is None else values
        self._check_inputs(queries, keys, values, key_masks, attention_mask)

        mask, bias, probs_multiplier = self._score_masks(
            queries, keys, values, key_masks, attention_mask
        )
        query = attention_ops.split_heads(self.query_dense(queries), self.num_heads)
        key = attention_ops.split_heads(self.key_dense(keys), self.num_heads)
        value = attention_ops.split_heads(self.value_dense(values), self.num_heads)
        output, weights = attention_ops.scaled_dot_product_attention(
            query,
            key,
            value,
            mask=mask,
            bias=bias,
            probs_multiplier=probs_multiplier,
            dropout=lambda w: self.attention_dropout(w, training=training),
        )
        output = attention_ops.merge_heads(output)
        if self.flavor == "paper":
            output = self.output_dense(output)
        else:
            output = self.layer_norm(output + ops.cast(queries, output.dtype))
        if return_attention_scores:
            return output, weights
        return output

    def _score_masks(self, queries, keys, values, key_masks, attention_mask):
        """Returns (keep-mask, additive bias, post-softmax multiplier)."""
        causal = None
        if self.causality:
            causal = masking.causal_mask(ops.shape(queries)[1], ops.shape(keys)[1])
        if self.flavor == "reference_2017":
            key_keep = masking.nonzero_rows(keys)
            query_keep = ops.cast(masking.nonzero_rows(queries), "float32")
            mask = masking.as_score_mask(
                padding=key_keep, attention=attention_mask, causal=causal
            )
            return mask, None, query_keep[:, None, :, None]
        if self.flavor == "reference_2019":
            if key_masks is None:
                implicit = masking.implicit_mask(keys)
                if implicit is not None:
                    key_masks = ops.logical_not(implicit)
            bias = None
            if key_masks is not None:
                bias = masking.reference_key_mask_bias(key_masks)
            mask = masking.as_score_mask(attention=attention_mask, causal=causal)
            return mask, bias, None
        key_keep = masking.implicit_mask(keys)
        if key_keep is None:
            key_keep = masking.implicit_mask(values)
        mask = masking.as_score_mask(
            padding=key_keep,
            query_padding=masking.implicit_mask(queries),
            attention=attention_mask,
            causal=causal,
        )
        return mask, None, None

    def _check_values_allowed(self, values_shape):
        if self.flavor == "reference_2017":
            raise validation.invalid_argument(
                "values",
                "None in flavor 'reference_2017', whose V is projected from "
                "the keys as in the referenced code (use flavor "
                "'reference_2019' or 'paper' for separate values)",
                f"<tensor of shape {validation.shape_of(values_shape)}>",
                _CONTEXT,
            )

    def _check_inputs(self, queries, keys, values, key_masks, attention_mask):
        q_shape = validation.check_rank("queries", queries, 3, "[B, T_q, C]", _CONTEXT)
        k_shape = validation.check_rank("keys", keys, 3, "[B, T_k, C]", _CONTEXT)
        v_shape = validation.check_rank("values", values, 3, "[B, T_k, C]", _CONTEXT)
        batch, t_q, t_k = q_shape[0], q_shape[1], k_shape[1]
        for name, shape in (("keys", k_shape), ("values", v_shape)):
            if None not in (batch, shape[0]) and shape[0] != batch:
                raise validation.invalid_argument(
                    name,
                    f"the same batch size as `queries` ({batch})",
                    f"<tensor of shape {shape}>",
                    _CONTEXT,
                )
        if None not in (t_k, v_shape[1]) and v_shape[1] != t_k:
            raise validation.invalid_argument(
                "values",
                f"the same length as `keys` ({t_k})",
                f"<tensor of shape {v_shape}>",
                _CONTEXT,
            )
        if key_masks is not None:
            if self.flavor != "reference_2019":
                raise validation.invalid_argument(
                    "key_masks",
                    "None outside flavor 'reference_2019' (its True = padding "
                    "polarity is that reference's; pass `attention_mask`, "
                    "True = may attend, or Keras implicit masks instead)",
                    f"<tensor of shape {validation.shape_of(key_masks)}>",
                    _CONTEXT,
                )
            _check_mask("key_masks", key_masks, (batch, t_k), "[B, T_k]")
        if attention_mask is not None:
            _check_mask(
                "attention_mask", attention_mask, (batch, t_q, t_k), "[B, T_q, T_k]"
            )

    def compute_output_shape(self, queries_shape, keys_shape=None, values_shape=None):
        units = self.num_units or queries_shape[-1]
        return tuple(queries_shape[:-1]) + (units,)

    def get_config(self):
        config = super().get_config()
        config.update(
            num_units=self.num_units,
            num_heads=self.num_heads,
            dropout_rate=self.dropout_rate,
            causality=self.causality,
            flavor=self.flavor,
            seed=self.seed,
        )
        return config


def _check_divisible(num_units, num_heads):
    if num_units % num_heads:
        raise validation.invalid_argument(
            "num_units",
            f"a multiple of num_heads={num_heads}",
            num_units,
            _CONTEXT,
        )


def _check_mask(name, mask, expected_shape, meaning):
    shape = validation.shape_of(mask)
    dtype = keras.backend.standardize_dtype(mask.dtype)
    if dtype != "bool":
        raise validation.invalid_argument(
            name,
            f"a bool tensor of shape {meaning}",
            f"<tensor of dtype {dtype} and shape {shape}>",
            _CONTEXT,
        )
    compatible = len(shape) == len(expected_shape) and all(
        a is None or b is None or a == b for a, b in zip(shape, expected_shape)
    )
    if not compatible:
        raise validation.invalid_argument(
            name,
            f"a bool tensor of shape {meaning} = {expected_shape}",
            f"<tensor of dtype bool and shape {shape}>",
            _CONTEXT,
        )
