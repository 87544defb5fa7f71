"""`MultiHeadAttention`: the paper's attention and both referenced versions."""

import inspect
import math

import keras
from keras import ops
from keras.src import backend as keras_backend

from tfattn.utils import validation
from tfattn.layers import attention_arguments as arguments
from tfattn.layers import attention_axes as axes_lib
from tfattn.layers import attention_flavors
from tfattn.layers.attention_arguments import CONTEXT
from tfattn.layers.attention_cache import AttentionCacheMixin
from tfattn.layers.attention_flavors import FLAVORS
from tfattn.layers.initializers import fresh_initializers
from tfattn.layers.quantization import with_sublayer_policies
from tfattn.ops import attention as attention_ops
from tfattn.ops import masking

__all__ = ["MultiHeadAttention"]

_INPUT_NAMES = ("queries", "keys", "values", "query", "key", "value")


@keras.saving.register_keras_serializable(package="tfattn")
class MultiHeadAttention(AttentionCacheMixin, keras.layers.Layer):
    """Multi-head attention: the paper's, or Kyubyong/transformer's, exactly.

    Shapes: B = batch, T_q = query length, T_k = key length, C = `num_units`,
    H = `num_heads`, d = C / H. Head i owns output channels [i·d, (i+1)·d) of
    each projection.

    Flavours:

    - `"paper"` ("Attention Is All You Need"): Q, K, V linear projections with
      bias, softmax(Q Kᵀ / sqrt(d)) V per head, heads concatenated and
      projected by `output_dense`. No residual or norm inside (the block adds
      them). With the same weights and masks, its outputs equal
      `keras.layers.MultiHeadAttention`'s at every query that sees at least
      one key (every valid position of padded inputs), and its weights equal
      those Keras returns; at a query that sees no key its output differs
      from that of Keras's default call (below).
    - `"reference_2017"`: `multihead_attention` of the 2017 code, final state
      ed2deb8 (docs/reference.md §1.4, "G1b"). ReLU projections with bias, V
      projected from the *keys*; keys and queries whose input rows are all
      zeros are masked (scores replaced by -2**32+1, query rows zeroed after
      the softmax); no output projection; residual with the raw queries, then
      layer norm with epsilon 1e-8.
    - `"reference_2019"`: `multihead_attention` of the 2019 code, master
      fb023bb (§2.4-2.5, "G2c"). Linear projections with bias; `key_masks`
      (True = padding) added as `key_masks * (-2**32+1)`; no query mask; no
      output projection; residual and layer norm with epsilon 1e-8.

    Each flavour is a class of steps (`attention_flavors`): `PaperFlavor`,
    and `Reference2017Flavor` / `Reference2019Flavor` overriding the steps
    their reference changes (key mask, score and query masks, the ending,
    the projections' activation). The constructor picks the class once;
    the layer stays this one class for every flavour, so its config (with
    `flavor`), serialization and `.keras` files are unchanged.

    Masks. `attention_mask` uses the Keras polarity (True = may attend) in
    every flavour. `key_masks` belongs to `reference_2019` and keeps *that
    reference's* polarity (True = padding), because it mirrors its signature.
    The paper flavour also reads Keras implicit masks (for example from
    `Embedding(mask_zero=True)`) on queries and keys/values, as Keras does;
    `reference_2019` reads the keys' implicit mask when `key_masks` is not
    given; `reference_2017` ignores implicit masks, since the reference finds
    padding from zero rows. `padding_mask` (True = real key) is accepted by
    every flavour and combined with the rest. `causality=True` lets position
    t see keys <= t.
    Masks are broadcast, never expanded to [B, H, T_q, T_k] beforehand.

    A query whose keys are all masked (a padded query, in the paper flavour,
    which masks padded queries as Keras does; an all-False row of
    `attention_mask`) gets all-zero weights in the paper flavour, always, so
    its output is the output projection's bias. Keras 3.15's layer gives
    that only on its explicit path (`return_attention_scores=True`,
    `dropout > 0`, or inputs of rank > 3); its default, fused path
    (`ops.dot_product_attention`) gives such a query uniform weights 1/T_k,
    so its output is the output projection of the mean of the projected
    values (times the gate, with `use_gate`). The reference flavours give
    it uniform weights, as the referenced code does (spec §5).

    Precision: masking and softmax run in float32, so the layer stays finite
    under `mixed_float16` and `mixed_bfloat16`, and float32 keeps the
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
        query_chunk_size: "auto", int or None. Attend in chunks of this many
            queries, recomputing each chunk's scores in the backward pass, so
            that long sequences need one chunk's [B, H, chunk, T_k] scores in
            memory instead of all of them; same numbers. "auto" chunks by 512
            once T_q·T_k >= 2048²; None never chunks. Not used while
            dropout is active. Defaults to `"auto"`.
        sliding_window: int or None. Keras's local attention: query i sees
            only keys j with abs(i - j) < sliding_window (a symmetric band; with
            `causality=True`, the last `sliding_window` positions). Paper
            flavour only. Defaults to `None` (every key).
        key_dim, value_dim: int or None. Keras's per-head widths (paper
            flavour): queries and keys are projected to H·key_dim, values to
            H·value_dim (default key_dim), and `num_heads` need not divide
            the input width. None (default): every head is num_units / H.
        attention_axes: None, an int or a tuple of ints (paper flavour).
            Keras's axes of [B, d_1, ..., d_n, C] inputs to attend over,
            jointly; the other axes act as batch axes. None (default): every
            axis between batch and features (axis 1 of [B, T, C]). Rank > 3
            inputs are folded to [B', T, C] (`attention_axes.Fold`);
            `causality` and `sliding_window` then act on the flattened
            attention positions, and there is no `cache`.
        use_gate: bool. Keras's gated attention (paper flavour): the heads'
            output is multiplied by ``sigmoid(gate_dense(queries))``, [B,
            T_q, H·value_dim], before the output projection. Defaults to
            `False`.
        output_shape: int, a tuple of ints, or None. Shape that replaces the
            output's last axis (paper flavour), as in Keras: `(3, 4)` gives
            [B, T_q, 3, 4] from a projection to 12 units. Defaults to the
            query width when `key_dim` is given, else `num_units`.
        use_bias: bool. Biases in the projections (paper flavour; the
            references have them). Defaults to `True`.
        kernel_initializer: as in `keras.layers.Dense`, applied to every
            projection. Defaults to `"glorot_uniform"`.
        bias_initializer: likewise. Defaults to `"zeros"`.
        kernel_regularizer, bias_regularizer: likewise. Defaults to None.
        kernel_constraint, bias_constraint: likewise. Defaults to None.
        **kwargs: base `keras.layers.Layer` arguments (`name`, `dtype`,
            `activity_regularizer`, ...).

    Call arguments:
        - queries: [B, T_q, C_q] (or [B, d_1, ..., d_n, C_q], paper flavour).
        - keys: [B, T_k, C_k], of the queries' rank. Defaults to `queries`
          (self-attention).
        - values: [B, T_k, C_v]. Defaults to `keys`. Not accepted by
          `reference_2017`, whose V is projected from the keys.
        - key_masks: bool [B, T_k], True = padding (`reference_2019` only).
        - attention_mask: bool, True = may attend: [T_q, T_k], [B or 1, T_q,
          T_k] or [B or 1, H or 1, T_q, T_k], broadcast as Keras does.
        - padding_mask: bool [B, T_k], True = a real key (Keras polarity), in
          every flavour; combined with the flavour's own masks. The stacks
          pass their padding through it.
        - training: bool. Dropout is active only when True.
        - return_attention_scores: bool. Also return the weights.
        - cache: dict or None. For incremental decoding: from `init_cache`
          (self-attention, with `cache_index`) or from `precompute_cache`
          (keys and values projected once, `cache_index=None`).
        - cache_index: scalar int tensor or None. Where the first query sits;
          its keys and values are written into the cache there, and each
          query sees the cached keys up to its own position. Needs
          `causality=True`.

    Returns:
        output [B, T_q, C]; with `return_attention_scores=True` also the
        weights [B, H, T_q, T_k] (float32, before dropout; for rank > 3,
        Keras's [B, batch axes..., H, query axes..., key axes...]); with a
        `cache` also the updated cache, last: `output`, `(output, weights)`,
        `(output, cache)` or `(output, weights, cache)`.

    Example::

        x = keras.random.normal((2, 5, 16))
        paper = tfattn.MultiHeadAttention(num_heads=4)
        y = paper(x, x)                                   # [2, 5, 16]
        ref = tfattn.MultiHeadAttention(num_heads=4, flavor="reference_2019",
                                        causality=True)
        y = ref(x, key_masks=ops.zeros((2, 5), "bool"))  # [2, 5, 16]
    """

    def __init__(
        self,
        num_units=None,
        num_heads=8,
        dropout_rate=0.0,
        causality=False,
        flavor="paper",
        seed=None,
        query_chunk_size="auto",
        key_dim=None,
        value_dim=None,
        sliding_window=None,
        output_shape=None,
        use_bias=True,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        kernel_regularizer=None,
        bias_regularizer=None,
        kernel_constraint=None,
        bias_constraint=None,
        attention_axes=None,
        use_gate=False,
        **kwargs,
    ):
        """Checks the arguments; the projections are created when built."""
        num_heads = validation.check_positive_int(
            "num_heads", num_heads, CONTEXT)
        flavor = validation.check_choice("flavor", flavor, FLAVORS, CONTEXT)
        steps = attention_flavors.of(flavor)
        output_shape, use_bias, dense_options = arguments.check_projections(
            steps.check_paper_only, num_units, num_heads, key_dim, value_dim,
            output_shape, use_bias, kernel_initializer=kernel_initializer,
            bias_initializer=bias_initializer,
            kernel_regularizer=kernel_regularizer,
            bias_regularizer=bias_regularizer,
            kernel_constraint=kernel_constraint,
            bias_constraint=bias_constraint,
        )
        if query_chunk_size not in (None, "auto"):
            validation.check_positive_int(
                "query_chunk_size", query_chunk_size, CONTEXT
            )
        if num_units is not None:
            num_units = validation.check_positive_int(
                "num_units", num_units, CONTEXT
            )
            arguments.check_divisible(num_units, num_heads)
        dropout_rate = validation.check_rate(
            "dropout_rate", dropout_rate, CONTEXT)
        causality = validation.check_bool("causality", causality, CONTEXT)
        if sliding_window is not None:
            validation.check_positive_int("sliding_window", sliding_window,
                                          CONTEXT)
            steps.check_paper_only(
                "sliding_window", sliding_window, None,
                " (the referenced code attends over every key)")
        attention_axes = axes_lib.check_attention_axes(attention_axes, flavor)
        use_gate = validation.check_bool("use_gate", use_gate, CONTEXT)
        steps.check_paper_only("use_gate", use_gate, False,
                               " (the referenced code has no gate)")
        super().__init__(**kwargs)
        self.attention_axes = attention_axes
        self.use_gate = use_gate
        self.key_dim = key_dim
        self.value_dim = value_dim
        self.output_shape_ = output_shape
        self.use_bias = use_bias
        for name, value in dense_options.items():
            setattr(self, name, value)
        self.num_units = num_units
        self.num_heads = num_heads
        self.dropout_rate = dropout_rate
        self.causality = causality
        self.flavor = flavor
        # The flavour's steps (`attention_flavors`), chosen once here.
        self._flavor_steps = steps
        self.seed = seed
        self.query_chunk_size = query_chunk_size
        self.sliding_window = sliding_window
        self.supports_masking = True

    def __call__(self, *args, **kwargs):
        # The inputs' dtype is checked before Keras builds the layer from
        # their shapes, so a tensor of strings is refused for its dtype,
        # naming its argument, not for a rank or a Dense error. Ints and
        # bools are cast, as keras.layers.MultiHeadAttention casts them.
        # Inputs may come by position or by name (Keras's own names too,
        # for subclasses with Keras's call signature).
        inputs = dict(zip(("queries", "keys", "values"), args[:3]))
        inputs.update((name, kwargs[name]) for name in _INPUT_NAMES
                      if kwargs.get(name) is not None)
        for name, x in inputs.items():
            _check_numeric(name, x)
        return super().__call__(*args, **kwargs)

    def build(self, queries_shape, keys_shape=None, values_shape=None):
        keys_shape = queries_shape if keys_shape is None else keys_shape
        if values_shape is not None:
            self._flavor_steps.check_values_allowed(values_shape)
        else:
            values_shape = keys_shape
        self.input_rank = self._check_shapes(queries_shape, keys_shape,
                                             values_shape)
        units, value_units, output_units = self._widths(queries_shape)
        arguments.check_divisible(units, self.num_heads)
        self._flavor_steps.check_widths(units, queries_shape, self.num_units)
        self.units = units
        self.value_units = value_units
        self.query_dense = self._projection(units, "query_dense")
        self.query_dense.build(queries_shape)
        self.key_dense = self._projection(units, "key_dense")
        self.key_dense.build(keys_shape)
        self.value_dense = self._projection(value_units, "value_dense")
        self.value_dense.build(values_shape)
        if self.use_gate:
            self.gate_dense = keras.layers.Dense(
                value_units, name="gate_dense", use_bias=self.use_bias,
                activation="sigmoid", dtype=self.dtype_policy,
                **self._dense_options())
            self.gate_dense.build(queries_shape)
        # The flavour's ending, kept as `output_dense` or `layer_norm`.
        ending = self._flavor_steps.build_ending(
            self, queries_shape, value_units, output_units)
        setattr(self, self._flavor_steps.ending, ending)
        self.attention_dropout = keras.layers.Dropout(
            self.dropout_rate,
            seed=self.seed,
            dtype=self.dtype_policy,
            name="attention_dropout",
        )
        self.built = True

    def _projection(self, width, name):
        """A Dense projection to `width` of the flavour's activation."""
        return keras.layers.Dense(
            width, name=name, use_bias=self.use_bias,
            activation=self._flavor_steps.projection_activation,
            dtype=self.dtype_policy, **self._dense_options())

    def call(
        self,
        queries,
        keys=None,
        values=None,
        key_masks=None,
        attention_mask=None,
        padding_mask=None,
        training=None,
        return_attention_scores=False,
        cache=None,
        cache_index=None,
    ):
        if values is not None:
            self._flavor_steps.check_values_allowed(values.shape)
        keys = queries if keys is None else keys
        values = keys if values is None else values
        rank = self._check_shapes(queries.shape, keys.shape, values.shape)
        if rank > 3:
            if cache is not None or cache_index is not None:
                raise validation.invalid_argument(
                    "cache", "None for inputs of rank > 3 (incremental "
                    "decoding works on [B, T, C])", "<a cache>", CONTEXT)
            fold = axes_lib.Fold(
                rank, axes_lib.resolve(self.attention_axes, rank))
            return self._output_shaped(fold.attend(
                self._attend, self.num_heads, queries, keys, values,
                attention_mask, padding_mask, training,
                return_attention_scores))
        arguments.check_inputs(
            self, queries, keys, values, key_masks, attention_mask,
            padding_mask, cache, cache_index,
        )
        return self._output_shaped(self._attend(
            queries, keys, values, key_masks, attention_mask, padding_mask,
            training, return_attention_scores, cache, cache_index))

    def _output_shaped(self, result):
        """The output (first result) with Keras's multi-axis output_shape."""
        if not self.output_shape_ or len(self.output_shape_) == 1:
            return result
        results = result if isinstance(result, tuple) else (result,)
        output = ops.reshape(results[0], tuple(ops.shape(results[0])[:-1])
                             + self.output_shape_)
        return (output,) + results[1:] if isinstance(result, tuple) else output

    def _attend(self, queries, keys, values, key_masks, attention_mask,
                padding_mask, training, return_attention_scores, cache,
                cache_index):
        """Attention over [B, T, C] inputs whose arguments are checked.

        Returns `call`'s results for these inputs: the output [B, T_q, O],
        then the weights [B, H, T_q, T_k] if asked, then the cache if given.
        """
        query = attention_ops.split_heads(self.query_dense(queries),
                                          self.num_heads)
        key, value, key_keep, cache, query_offset = self._keys_and_values(
            keys, values, key_masks, padding_mask, cache, cache_index)
        positions = self._position_mask(
            ops.shape(query)[2], ops.shape(key)[2], query_offset)
        mask, bias, probs_multiplier = self._flavor_steps.score_masks(
            queries, key_keep, attention_mask, positions)
        dropout = None
        if (self.dropout_rate > 0 and training is not None
                and training is not False):
            dropout = lambda w: self.attention_dropout(  # noqa: E731
                w, training=training)
        output, weights = attention_ops.scaled_dot_product_attention(
            query,
            key,
            value,
            mask=mask,
            bias=bias,
            probs_multiplier=probs_multiplier,
            dropout=dropout,
            query_chunk_size=self.query_chunk_size,
            return_weights=return_attention_scores,
            fully_masked=self._flavor_steps.fully_masked,
        )
        output = self._flavor_steps.output(
            self, attention_ops.merge_heads(output), queries)
        results = (output,)
        if return_attention_scores:
            results += (weights,)
        if cache is not None:
            results += (cache,)
        return results[0] if len(results) == 1 else results

    def _position_mask(self, query_length, key_length, query_offset):
        """The [T_q, T_k] keep-mask of positions (causal, sliding band), or
        None."""
        causal = None
        if self.causality:
            causal = masking.causal_mask(query_length, key_length, query_offset)
        if self.sliding_window is not None:
            band = masking.sliding_window_mask(
                query_length, key_length, self.sliding_window, query_offset)
            causal = band if causal is None else ops.logical_and(causal, band)
        return causal

    def _widths(self, queries_shape):
        """(query/key width H·d_k, value width H·d_v, output width)."""
        if self.key_dim is not None:
            units = self.num_heads * self.key_dim
            value_units = self.num_heads * (self.value_dim or self.key_dim)
            output = queries_shape[-1]
        else:
            units = value_units = self.num_units or queries_shape[-1]
            output = units
        if self.output_shape_:
            output = math.prod(self.output_shape_)
        return units, value_units, output

    def _dense_options(self):
        """The projections' options; a fresh initializer per projection: one
        Keras initializer object with seed=None draws the same values at
        every call, so sharing it would give every projection one kernel."""
        return fresh_initializers(
            {name: getattr(self, name) for name in arguments.DENSE_OPTIONS})

    def compute_output_shape(self, queries_shape, keys_shape=None,
                             values_shape=None):
        keys_shape = queries_shape if keys_shape is None else keys_shape
        values_shape = keys_shape if values_shape is None else values_shape
        self._check_shapes(queries_shape, keys_shape, values_shape)
        return tuple(queries_shape[:-1]) + (
            self.output_shape_ or (self._widths(queries_shape)[2],))

    def compute_output_spec(self, *args, **kwargs):
        # Traced from `call`, so that symbolic calls return the scores and
        # the cache too (`compute_output_shape` gives the output alone).
        if not self.built:
            self._build_from_call_arguments(args, kwargs)
        return keras_backend.compute_output_spec(self.call, *args, **kwargs)

    def _build_from_call_arguments(self, args, kwargs):
        """Builds from the shapes of a call's inputs, as Keras's `__call__`
        does: each input `x` of `call` gives `build` its `x_shape` (so a
        subclass with Keras's names, query/value/key, is built too)."""
        bound = inspect.signature(self.call).bind_partial(*args, **kwargs)
        wanted = inspect.signature(self.build).parameters
        self.build(**{
            f"{name}_shape": tuple(value.shape)
            for name, value in bound.arguments.items()
            if f"{name}_shape" in wanted and value is not None})

    def _check_shapes(self, queries_shape, keys_shape, values_shape):
        """Keys and values agree (Keras's check and message), ranks (3, or
        more in the paper flavour), attention axes."""
        shapes = {"queries": validation.shape_of(queries_shape),
                  "keys": validation.shape_of(keys_shape),
                  "values": validation.shape_of(values_shape)}
        keys, values = shapes["keys"], shapes["values"]
        if len(keys) != len(values) or any(
                None not in (k, v) and k != v
                for k, v in zip(keys[1:-1], values[1:-1])):
            raise ValueError(
                f"{CONTEXT}: All dimensions of `values` and `keys`, except "
                "the last one, must be equal. Received: values_shape="
                f"{values} and keys_shape={keys}")
        rank = axes_lib.check_input_ranks(self.flavor, shapes)
        axes_lib.resolve(self.attention_axes, rank)
        return rank

    def get_config(self):
        config = super().get_config()
        config.update(
            num_units=self.num_units,
            num_heads=self.num_heads,
            dropout_rate=self.dropout_rate,
            causality=self.causality,
            flavor=self.flavor,
            seed=self.seed,
            query_chunk_size=self.query_chunk_size,
            key_dim=self.key_dim,
            sliding_window=self.sliding_window,
            value_dim=self.value_dim,
            output_shape=self.output_shape_,
            use_bias=self.use_bias,
            attention_axes=self.attention_axes,
            use_gate=self.use_gate,
        )
        config.update(arguments.serialize_dense_options(self._dense_options()))
        return with_sublayer_policies(self, config)


def _check_numeric(name, x):
    if x is None or not hasattr(x, "dtype"):
        return
    dtype = str(getattr(x.dtype, "name", x.dtype))
    if dtype in ("string", "object") or dtype.startswith(("<U", "str")):
        raise validation.invalid_argument(
            name, "a numeric tensor (floating point; ints and bools are "
            "cast, as keras.layers.MultiHeadAttention casts them)",
            f"<tensor of dtype {dtype} and shape "
            f"{validation.shape_of(x)}>", CONTEXT)
