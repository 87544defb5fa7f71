"""Tests of tfattn.MultiHeadAttention's refusals of bad arguments and
inputs: every error names the argument and echoes the value."""

import numpy as np
import pytest

import tfattn
from tests.mha_helpers import B
from tests.mha_helpers import C
from tests.mha_helpers import H
from tests.mha_helpers import T
from tests.mha_helpers import make_inputs


@pytest.mark.parametrize(
    "kwargs, pattern",
    [
        (
            dict(num_units=10, num_heads=4),
            r"argument `num_units`.*multiple of num_heads=4.*num_units=10",
        ),
        (dict(num_heads=0), r"argument `num_heads`.*num_heads=0"),
        (dict(num_heads=2.5), r"argument `num_heads`.*num_heads=2.5"),
        (
            dict(dropout_rate=1.0),
            r"argument `dropout_rate`.*\[0, 1\).*dropout_rate=1.0",
        ),
        (
            dict(dropout_rate=-0.1),
            r"argument `dropout_rate`.*dropout_rate=-0.1",
        ),
        (dict(flavor="2017"), r"argument `flavor`.*'paper'.*flavor='2017'"),
        (dict(causality="yes"), r"argument `causality`.*causality='yes'"),
    ],
)
def test_constructor_rejects_bad_arguments(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        tfattn.MultiHeadAttention(**kwargs)


def test_num_units_not_dividing_queries_width():
    layer = tfattn.MultiHeadAttention(num_heads=3)
    with pytest.raises(
        ValueError, match=r"`num_units`.*multiple of num_heads=3.*num_units=8"
    ):
        layer(make_inputs())


@pytest.mark.parametrize("flavor", ["reference_2017", "reference_2019"])
def test_reference_flavours_need_num_units_equal_to_queries_width(flavor):
    layer = tfattn.MultiHeadAttention(num_units=4, num_heads=2, flavor=flavor)
    with pytest.raises(
        ValueError, match=r"`num_units`.*queries' width 8.*num_units=4"
    ):
        layer(make_inputs())


@pytest.mark.parametrize(
    "args, kwargs, pattern",
    [
        (
            (np.zeros((B, C), "float32"),),
            {},
            r"`queries`.*rank-3.*shape \(2, 8\)",
        ),
        (
            (make_inputs(), np.zeros((B, T, C, 1), "float32")),
            {},
            r"`keys`.*rank-3.*\(2, 5, 8, 1\)",
        ),
        (
            (make_inputs(), make_inputs(batch=3)),
            {},
            r"`keys`.*same batch size as `queries` \(2\).*\(3, 5, 8\)",
        ),
        (
            (make_inputs(), make_inputs(), make_inputs(length=4)),
            {},
            r"`values` and `keys`, except the last one, must be "
            r"equal.*values_shape=\(2, 4, 8\) and keys_shape=\(2, 5, 8\)",
        ),
        (
            (make_inputs(),),
            dict(key_masks=np.zeros((B, T), bool)),
            r"`key_masks`.*outside flavor 'reference_2019'",
        ),
        (
            (make_inputs(),),
            dict(attention_mask=np.ones((B, T, T), "float32")),
            r"`attention_mask`.*bool.*dtype float32",
        ),
        (
            (make_inputs(),),
            dict(attention_mask=np.ones((B, T), bool)),
            r"`attention_mask`.*\[T_q, T_k\].*\(2, 2, 5, 5\).*shape \(2, 5\)",
        ),
    ],
)
def test_call_rejects_bad_inputs(args, kwargs, pattern):
    layer = tfattn.MultiHeadAttention(num_heads=H)
    with pytest.raises(ValueError, match=pattern):
        layer(*args, **kwargs)


@pytest.mark.parametrize(
    "kwargs, pattern",
    [
        (
            dict(key_masks=np.zeros((B, T + 1), bool)),
            r"`key_masks`.*\[B, T_k\].*shape \(2, 6\)",
        ),
        (
            dict(key_masks=np.zeros((B, T), "int32")),
            r"`key_masks`.*bool.*dtype int32",
        ),
    ],
)
def test_reference_2019_rejects_bad_key_masks(kwargs, pattern):
    layer = tfattn.MultiHeadAttention(num_heads=H, flavor="reference_2019")
    with pytest.raises(ValueError, match=pattern):
        layer(make_inputs(), **kwargs)


def test_reference_2017_rejects_values():
    layer = tfattn.MultiHeadAttention(num_heads=H, flavor="reference_2017")
    with pytest.raises(
        ValueError, match=r"`values`.*None in flavor 'reference_2017'"
    ):
        layer(make_inputs(), make_inputs(), make_inputs())


def test_query_chunk_size_is_checked():
    with pytest.raises(
        ValueError, match=r"argument `query_chunk_size`.*query_chunk_size=0"
    ):
        tfattn.MultiHeadAttention(query_chunk_size=0)
