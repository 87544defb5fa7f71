"""Tests of tfattn.ops.masking."""

import numpy as np

from tfattn.ops import masking


def test_padding_mask_keeps_non_pad_ids():
    ids = np.array([[5, 3, 0, 0], [1, 0, 2, 0]])
    np.testing.assert_array_equal(masking.padding_mask(ids), ids != 0)
    np.testing.assert_array_equal(masking.padding_mask(ids, pad_id=1), ids != 1)


def test_nonzero_rows_uses_sum_of_abs_not_abs_of_sum():
    x = np.zeros((1, 3, 2), "float32")
    x[0, 1] = [1.0, -1.0]  # sums to zero but is not padding (G1b, not G1a)
    x[0, 2] = [0.0, 1e-30]
    np.testing.assert_array_equal(
        masking.nonzero_rows(x), [[False, True, True]]
    )


def test_causal_mask_is_lower_triangular_with_offset():
    np.testing.assert_array_equal(
        masking.causal_mask(3, 3), np.tril(np.ones((3, 3), bool))
    )
    np.testing.assert_array_equal(
        masking.causal_mask(2, 4), np.tril(np.ones((2, 4), bool))
    )
    # One query at absolute position 2 of a 4-slot cache sees keys 0..2.
    np.testing.assert_array_equal(
        masking.causal_mask(1, 4, query_offset=2), [[True, True, True, False]]
    )


def test_combine_masks_and_none():
    assert masking.combine_masks(None, None) is None
    a = np.array([[True, False]])
    b = np.array([[True], [False]])
    np.testing.assert_array_equal(masking.combine_masks(a, None, b), a & b)


def test_as_score_mask_broadcast_shapes():
    causal = masking.causal_mask(3, 3)
    assert tuple(masking.as_score_mask(causal=causal).shape) == (3, 3)
    pad = np.array([[True, True, False], [True, False, False]])
    combined = masking.as_score_mask(padding=pad, causal=causal)
    assert tuple(combined.shape) == (2, 1, 3, 3)
    want = pad[:, None, None, :] & np.tril(np.ones((3, 3), bool))
    np.testing.assert_array_equal(combined, want)
    attend = np.ones((2, 3, 3), bool)
    q = np.array([[True, True, False], [True, True, True]])
    full = masking.as_score_mask(padding=pad, query_padding=q, attention=attend)
    np.testing.assert_array_equal(
        full, pad[:, None, None, :] & q[:, None, :, None]
    )
    assert masking.as_score_mask() is None


def test_reference_key_mask_bias_is_additive_p():
    bias = np.asarray(
        masking.reference_key_mask_bias(np.array([[False, True]]))
    )
    assert bias.shape == (1, 1, 1, 2)
    assert bias[0, 0, 0, 0] == 0.0
    assert bias[0, 0, 0, 1] == np.float32(-4294967296.0)


def test_implicit_mask_reads_keras_mask():
    import keras

    e = keras.layers.Embedding(5, 2, mask_zero=True)(np.array([[1, 0]]))
    np.testing.assert_array_equal(masking.implicit_mask(e), [[True, False]])
    assert masking.implicit_mask(np.zeros(2)) is None
