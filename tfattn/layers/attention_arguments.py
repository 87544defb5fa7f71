"""Argument and input checks of `tfattn.MultiHeadAttention` (one place for
its masks, projection options and cache checks), and `CONTEXT`, the name
every message of its modules starts with."""

import keras

from tfattn.utils import validation
from tfattn.layers.initializers import initializer_arguments

__all__ = ["CONTEXT", "DENSE_OPTIONS", "check_attention_mask",
           "check_cache", "check_divisible", "check_inputs", "check_mask",
           "check_output_shape", "check_projections", "dense_options",
           "serialize_dense_options"]

# Who checks: the prefix of the error messages of `MultiHeadAttention` and
# of its modules (`attention_axes`, `attention_flavors`).
CONTEXT = "MultiHeadAttention"


def check_projections(check_paper_only, num_units, num_heads, key_dim,
                      value_dim, output_shape, use_bias, **options):
    """Checks the projection arguments of `MultiHeadAttention` (Keras's
    names and meanings) against each other and the flavour, whose
    `check_paper_only(name, value, default, why)` (`attention_flavors`)
    refuses what its reference fixes.

    Args:
        check_paper_only: callable. The flavour's `check_paper_only`.
        num_units: int or None. The layer's `num_units`.
        num_heads: int. The (checked) number of heads H.
        key_dim: int or None. Keras's per-head query/key width.
        value_dim: int or None. Keras's per-head value width; needs
            `key_dim`.
        output_shape: int, a tuple/list of ints, or None.
        use_bias: bool.
        **options: the six `DENSE_OPTIONS` (`kernel_initializer`, ...,
            `bias_constraint`), as the layer received them.

    Returns:
        (output_shape as a tuple of ints or None, use_bias, the resolved Keras
        initializers, regularizers and constraints by argument name).

    Raises:
        ValueError: an invalid or contradictory argument, or one the
            flavour's reference fixes.
    """
    for name, value in (("key_dim", key_dim), ("value_dim", value_dim)):
        if value is not None:
            validation.check_positive_int(name, value, CONTEXT)
    output_shape = check_output_shape(output_shape)
    use_bias = validation.check_bool("use_bias", use_bias, CONTEXT)
    resolved = dense_options(**options)
    for name, value, default in (
        ("key_dim", key_dim, None), ("value_dim", value_dim, None),
        ("output_shape", output_shape, None), ("use_bias", use_bias, True),
    ):
        check_paper_only(name, value, default, ", whose projections the "
                         "reference fixes (width C, with bias, no output "
                         "projection)")
    if value_dim is not None and key_dim is None:
        raise validation.invalid_argument(
            "value_dim", "None unless `key_dim` is given (without it, "
            "every head width is num_units / num_heads)", value_dim,
            CONTEXT)
    if key_dim is not None and num_units is not None and (
            num_units != num_heads * key_dim):
        raise validation.invalid_argument(
            "num_units", f"None or num_heads * key_dim = "
            f"{num_heads * key_dim} when `key_dim` is given", num_units,
            CONTEXT)
    return output_shape, use_bias, resolved


def serialize_dense_options(options):
    """`get_config` values of `dense_options`' result (None stays None).

    Args:
        options: dict. Keras initializers, regularizers and constraints by
            argument name (`DENSE_OPTIONS`).

    Returns:
        dict. The same names, each value serialized by Keras.
    """
    serializers = {"initializer": keras.initializers.serialize,
                   "regularizer": keras.regularizers.serialize,
                   "constraint": keras.constraints.serialize}
    return {name: None if value is None
            else serializers[name.split("_", 1)[1]](value)
            for name, value in options.items()}


def check_divisible(num_units, num_heads):
    """Checks that the heads split the projection width evenly.

    Args:
        num_units: int. The projection width C.
        num_heads: int. The number of heads H.

    Raises:
        ValueError: `num_units` is not a multiple of `num_heads`.
    """
    if num_units % num_heads:
        raise validation.invalid_argument(
            "num_units",
            f"a multiple of num_heads={num_heads}",
            num_units,
            CONTEXT,
        )


def check_mask(name, mask, expected_shape, meaning):
    """Checks that `mask` is a bool tensor of `expected_shape`.

    Args:
        name: str. The argument's name, for the error message.
        mask: tensor. The mask to check.
        expected_shape: tuple. The shape it must have; None entries (in
            either shape) match any size.
        meaning: str. The shape in words, e.g. `"[B, T_k]"`.

    Raises:
        ValueError: another dtype, rank or size.
    """
    shape = validation.shape_of(mask)
    dtype = keras.backend.standardize_dtype(mask.dtype)
    if dtype != "bool":
        raise validation.invalid_argument(
            name,
            f"a bool tensor of shape {meaning}",
            f"<tensor of dtype {dtype} and shape {shape}>",
            CONTEXT,
        )
    compatible = len(shape) == len(expected_shape) and all(
        a is None or b is None or a == b for a, b in zip(shape, expected_shape)
    )
    if not compatible:
        raise validation.invalid_argument(
            name,
            f"a bool tensor of shape {meaning} = {expected_shape}",
            f"<tensor of dtype bool and shape {shape}>",
            CONTEXT,
        )


def check_attention_mask(mask, scores_shape):
    """Checks that `mask` is a bool mask that broadcasts as Keras's: [T_q,
    T_k], [B or 1, T_q, T_k] or [B or 1, H or 1, T_q, T_k] against scores
    [B, H, T_q, T_k].

    Args:
        mask: tensor. The `attention_mask` to check.
        scores_shape: tuple. The scores' shape (B, H, T_q, T_k); None
            entries match any size.

    Raises:
        ValueError: another dtype, rank or shape.
    """
    shape = validation.shape_of(mask)
    dtype = keras.backend.standardize_dtype(mask.dtype)
    expected = ("a bool tensor of shape [T_q, T_k], [B or 1, T_q, T_k] or "
                "[B or 1, H or 1, T_q, T_k] that broadcasts to the scores "
                f"[B, H, T_q, T_k] = {tuple(scores_shape)}")
    if dtype != "bool" or len(shape) not in (2, 3, 4):
        raise validation.invalid_argument(
            "attention_mask", expected,
            f"<tensor of dtype {dtype} and shape {shape}>", CONTEXT)
    full = (1,) * (4 - len(shape)) + tuple(shape)
    if len(shape) == 3:
        full = (shape[0], 1, shape[1], shape[2])
    for axis, (got, want) in enumerate(zip(full, scores_shape)):
        ok = (got is None or want is None or got == want
              or (axis < 2 and got == 1))
        if not ok:
            raise validation.invalid_argument(
                "attention_mask", expected,
                f"<tensor of dtype bool and shape {shape}>", CONTEXT)


DENSE_OPTIONS = (
    "kernel_initializer", "bias_initializer", "kernel_regularizer",
    "bias_regularizer", "kernel_constraint", "bias_constraint",
)


def dense_options(**options):
    """Keras objects for the projections' initializers (`initializers.
    initializer_arguments`), regularizers and constraints (names, configs or
    instances, as Keras takes them; None for no regularizer/constraint).

    Args:
        **options: the `DENSE_OPTIONS` by name, as the layer received them.

    Returns:
        dict. The Keras object (or None) of each argument, by name.

    Raises:
        ValueError: a value Keras cannot resolve, naming its argument.
    """
    getters = {"regularizer": keras.regularizers.get,
               "constraint": keras.constraints.get}
    resolved = initializer_arguments(
        CONTEXT, **{k: v for k, v in options.items()
                     if k.endswith("_initializer")})
    for name, value in options.items():
        kind = name.split("_", 1)[1]
        if kind == "initializer":
            continue
        try:
            resolved[name] = getters[kind](value)
        except (ValueError, TypeError) as error:
            raise validation.invalid_argument(
                name, f"a Keras {kind}, its name or config (or None)",
                value, CONTEXT) from error
    return resolved


def check_output_shape(output_shape):
    """Checks Keras's `output_shape` argument.

    Args:
        output_shape: None, a positive int, or a list or tuple of positive
            ints, as Keras takes it.

    Returns:
        None, or the output's trailing shape as a tuple of positive ints.

    Raises:
        ValueError: any other value.
    """
    if output_shape is None:
        return None
    dims = output_shape
    if isinstance(dims, int) and not isinstance(dims, bool):
        dims = (dims,)
    if (not isinstance(dims, (tuple, list)) or not dims or any(
            isinstance(d, bool) or not isinstance(d, int) or d < 1
            for d in dims)):
        raise validation.invalid_argument(
            "output_shape", "None, a positive int, or a tuple/list of "
            "positive ints (the shape that replaces the output's last axis)",
            output_shape, CONTEXT)
    return tuple(dims)


def check_inputs(
    layer, queries, keys, values, key_masks, attention_mask, padding_mask,
    cache, cache_index,
):
    """Checks the ranks, batch and length agreement, masks and cache of a
    call of `layer` on [B, T, C] inputs.

    Args:
        layer: MultiHeadAttention. The (built) layer being called.
        queries: tensor [B, T_q, C_q].
        keys: tensor [B, T_k, C_k].
        values: tensor [B, T_k, C_v].
        key_masks: bool [B, T_k] or None (`reference_2019` only).
        attention_mask: bool tensor or None (see `check_attention_mask`).
        padding_mask: bool [B, T_k] or None.
        cache: dict or None (see `check_cache`).
        cache_index: scalar int tensor or None.

    Raises:
        ValueError: the first argument that does not fit, by name.
    """
    q_shape = validation.check_rank(
        "queries", queries, 3, "[B, T_q, C]", CONTEXT)
    k_shape = validation.check_rank("keys", keys, 3, "[B, T_k, C]", CONTEXT)
    v_shape = validation.check_rank(
        "values", values, 3, "[B, T_k, C]", CONTEXT)
    batch, t_q, t_k = q_shape[0], q_shape[1], k_shape[1]
    for name, shape in (("keys", k_shape), ("values", v_shape)):
        if None not in (batch, shape[0]) and shape[0] != batch:
            raise validation.invalid_argument(
                name,
                f"the same batch size as `queries` ({batch})",
                f"<tensor of shape {shape}>",
                CONTEXT,
            )
    if None not in (t_k, v_shape[1]) and v_shape[1] != t_k:
        raise validation.invalid_argument(
            "values",
            f"the same length as `keys` ({t_k})",
            f"<tensor of shape {v_shape}>",
            CONTEXT,
        )
    layer._flavor_steps.check_key_masks(key_masks, batch, t_k)
    if cache is not None:
        t_k = check_cache(layer, cache, cache_index, batch)
    if attention_mask is not None:
        check_attention_mask(
            attention_mask, (batch, layer.num_heads, t_q, t_k))
    if padding_mask is not None:
        check_mask(
            "padding_mask", padding_mask, (batch, k_shape[1]), "[B, T_k]")


def check_cache(layer, cache, cache_index, batch):
    """Checks a cache against this layer.

    Args:
        layer: MultiHeadAttention. The (built) layer being called.
        cache: dict. From `init_cache` or `precompute_cache`.
        cache_index: scalar int tensor or None.
        batch: int or None. The queries' batch size B.

    Returns:
        The cache's key length (int or None).

    Raises:
        ValueError: not a cache of this layer, or a `cache_index` for a
            layer with `causality=False`.
    """
    if not isinstance(cache, dict) or set(cache) != {"key", "value", "keep"}:
        raise validation.invalid_argument(
            "cache",
            "a dict with keys 'key', 'value', 'keep' from `init_cache` or "
            "`precompute_cache`",
            cache if not isinstance(cache, dict) else sorted(cache),
            CONTEXT,
        )
    shape = validation.shape_of(cache["key"])
    want = (batch, layer.num_heads, None, layer.units // layer.num_heads)
    if len(shape) != 4 or any(
        w is not None and s is not None and w != s for w, s in zip(want, shape)
    ):
        raise validation.invalid_argument(
            "cache",
            f"key/value tensors of shape [B, H, T, d] = {want} for this "
            "layer (a cache from another model size?)",
            f"<cache with key shape {shape}>",
            CONTEXT,
        )
    if cache_index is not None and not layer.causality:
        raise validation.invalid_argument(
            "cache_index",
            "None for a layer with causality=False: incremental decoding "
            "appends keys, which only a causal self-attention can do",
            cache_index,
            CONTEXT,
        )
    return shape[2]
