"""The suite's one bound for two computations of the same numbers.

Every comparison of two ways of computing the same quantity (tfattn against
a NumPy oracle or a peer with copied weights, the SavedModel or CTranslate2
against Python, XLA against the plain graph, batched against row by row,
cached against uncached, TensorFlow against JAX, an imported checkpoint
against its source) goes through `assert_close`. Its bound is derived, not
chosen: two computations of a sum of n float terms that round in other
places (another summation order: oneDNN blocks its sums by instruction set,
AVX2, AVX-512 or AMX; XLA fuses; a peer orders its own; NumPy sums in
float64) differ by at most about

    n · ε · S

where ε is the dtype's machine epsilon (2 units in the last place) and S
the magnitude of the terms: each side's error is at most γ_n·Σ|x_i| with
γ_n ≈ n·u = n·ε/2 (Higham, *Accuracy and Stability of Numerical
Algorithms*, 2nd ed., §3.1, eq. 3.5). For a chain of operations n is the
sum of the reduction lengths along it (`stack_terms` counts a Transformer
stack's) plus one per elementwise operation; S defaults to the largest
magnitude of the desired values (the scale of the outputs, which the
chain's intermediate values share in these models: unit-variance
activations after each layer norm).

The worst case n·ε grows linearly where rounding errors of random sign
grow like √n, so the bound holds with margin on every CPU the project
has met (AVX2-only and AVX-512 BF16 EPYCs, an AMX Xeon; measured errors
were 5-100x below it); a bound tuned on one CPU's observed error (a bare
`rtol=1e-5`) does not, which is why `tests/test_bounds.py` fails on a new
comparison written with a literal tolerance.

Two other comparisons have bounds of their own kind, also here: a value
against a figure printed with few digits (a golden value of
docs/reference.md, a published score) differs by at most half a unit of
the figure's last digit (`assert_printed`), and sampled frequencies
differ from their probabilities by a few binomial standard errors
(`assert_sampled`).
"""

import json
import os

import numpy as np

__all__ = ["EPSILON", "assert_close", "assert_printed", "assert_sampled",
           "bound", "stack_terms"]

# Machine epsilon (the gap between 1 and the next number) of each dtype a
# computation may run in.
EPSILON = {
    "float64": float(np.finfo(np.float64).eps),
    "float32": float(np.finfo(np.float32).eps),
    "float16": float(np.finfo(np.float16).eps),
    "bfloat16": 2.0 ** -7,
}


def stack_terms(num_layers, units, ffn_units=0, length=1, vocab_size=0):
    """The terms on the longest chain of sums through a Transformer stack.

    Per layer: the query/key/value projection (C terms), the scores (at
    most C across heads), the weighted sum over the keys (T), the output
    projection (C), the feed-forward network (C, then F) and two layer
    norms (mean and variance over C, each twice), so 9·C + F + T; then a
    projection to `vocab_size` logits (C) and a log-softmax over them (V).

    Args:
        num_layers: int. Blocks on the chain (an encoder and a decoder
            stack: their sum; cross-attention counts as a block).
        units: int. The model width C.
        ffn_units: int. The feed-forward width F (0: no feed-forward).
        length: int. The longest key length T attended over.
        vocab_size: int. V, when the compared values are logits or
            log-probabilities (0: hidden states).

    Returns:
        int. n for `assert_close(..., terms=n)`.
    """
    per_layer = 9 * units + ffn_units + length
    head = units + vocab_size if vocab_size else 0
    return int(num_layers * per_layer + head)


def _scale_of(desired, scale):
    if scale is not None:
        return np.asarray(scale, np.float64)
    finite = np.abs(desired[np.isfinite(desired)])
    return np.float64(finite.max() if finite.size else 0.0)


def bound(terms, scale, dtype="float32"):
    """n · ε(dtype) · S, the largest difference `assert_close` accepts."""
    if not isinstance(terms, (int, np.integer)) or isinstance(terms, bool) \
            or terms < 1:
        raise ValueError(
            f"assert_close: `terms` must be a positive int (the terms summed "
            f"on the longest chain); received terms={terms!r}")
    if dtype not in EPSILON:
        raise ValueError(f"assert_close: `dtype` must be one of "
                         f"{sorted(EPSILON)}; received dtype={dtype!r}")
    return int(terms) * EPSILON[dtype] * np.asarray(scale, np.float64)


def _record(difference, limit):
    """With TFATTN_BOUNDS_LOG=FILE, appends the comparison's largest
    fraction of its bound (and the test's id) to FILE, one JSON line each:
    how close each comparison comes to its bound on this CPU."""
    path = os.environ.get("TFATTN_BOUNDS_LOG")
    if not path or not difference.size:
        return
    with np.errstate(divide="ignore", invalid="ignore"):
        used = np.where(limit > 0, difference / limit,
                        np.where(difference > 0, np.inf, 0.0))
    with open(path, "a") as log:
        log.write(json.dumps({
            "test": os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0],
            "used": float(used.max())}) + "\n")


def assert_close(actual, desired, *, terms, scale=None, dtype="float32",
                 err_msg=""):
    """Asserts two computations of the same numbers agree to n·ε·S.

    Elementwise: |actual - desired| <= terms · EPSILON[dtype] · scale.
    Non-finite values must match exactly (the same infinities and NaNs in
    the same places).

    Args:
        actual: array-like. One computation (the path under test).
        desired: array-like, broadcastable to `actual`'s shape. The other
            (the reference).
        terms: positive int. n, the terms summed on the longest chain of
            operations from the inputs to one compared value: the sum of
            the reduction lengths it passes (a dot product over C: C; a
            softmax over T_k then a weighted sum: 2·T_k; a stack:
            `stack_terms`), plus one per elementwise operation.
        scale: float or array broadcastable to `actual`, or None. S, the
            magnitude of the terms summed. None: the largest finite
            |desired|. An array gives a per-element scale (e.g.
            `np.abs(desired)` for values of many magnitudes, as a
            learning-rate schedule's).
        dtype: str. The arithmetic of the less precise side: "float32"
            (default), "bfloat16", "float16" or "float64".
        err_msg: str. Added to the failure message.

    Raises:
        AssertionError: a value outside the bound (the message gives the
            bound's parts, the worst element and how far past it lies),
            mismatched shapes or non-finite values.
    """
    actual = np.asarray(actual, np.float64)
    desired = np.asarray(desired, np.float64)
    try:
        actual, desired = np.broadcast_arrays(actual, desired)
    except ValueError:
        raise AssertionError(
            f"assert_close: shapes differ: actual {actual.shape}, desired "
            f"{desired.shape}. {err_msg}") from None
    finite = np.isfinite(desired)
    same_nonfinite = np.array_equal(np.isfinite(actual), finite) and (
        np.array_equal(actual[~finite], desired[~finite], equal_nan=True))
    if not same_nonfinite:
        raise AssertionError(
            f"assert_close: non-finite values differ (actual has "
            f"{int(np.sum(~np.isfinite(actual)))}, desired "
            f"{int(np.sum(~finite))}). {err_msg}")
    scale = _scale_of(desired, scale)
    limit = np.broadcast_to(bound(terms, scale, dtype), actual.shape)
    with np.errstate(invalid="ignore"):
        difference = np.where(finite, np.abs(actual - desired), 0.0)
    _record(difference, limit)
    outside = difference > limit
    if not outside.any():
        return
    worst = np.unravel_index(
        np.argmax(np.where(outside, difference - limit, -np.inf)),
        actual.shape)
    where = worst if actual.ndim else ()
    times = (f"{difference[where] / limit[where]:.3g}x the bound"
             if limit[where] > 0 else "the bound is 0")
    raise AssertionError(
        f"assert_close: {int(outside.sum())} of {actual.size} values differ "
        f"by more than n·ε·S = {terms} terms x eps({dtype}) "
        f"{EPSILON[dtype]:.3g} x scale "
        f"{np.broadcast_to(scale, actual.shape)[where]:.4g} = "
        f"{limit[where]:.3g} (tests/bounds.py: two roundings of the same "
        f"sums). Worst at index {tuple(int(i) for i in where)}: actual "
        f"{actual[where]!r}, desired {desired[where]!r}, difference "
        f"{difference[where]:.3g} ({times}). {err_msg}".rstrip())


def _printed_resolution(text):
    """Half a unit in the last digit of a number written as `text`."""
    mantissa, _, exponent = text.strip().lower().partition("e")
    decimals = len(mantissa.partition(".")[2])
    return 0.5 * 10.0 ** (int(exponent or 0) - decimals)


def assert_printed(actual, printed, *, terms=1, scale=None,
                   dtype="float64", err_msg=""):
    """Asserts values equal figures printed with few digits.

    Elementwise: |actual - float(printed)| <= half a unit in the printed
    figure's last digit + terms · EPSILON[dtype] · scale (the
    computation's own rounding; the default, one float64 rounding at the
    figure's magnitude, is negligible beside any printed digit).

    Args:
        actual: float or array-like. The computed values.
        printed: str or list of str. The figures as printed: "1.8973e-4",
            "0.900003125", "100" (an integer figure: half a unit).
        terms: positive int. As in `assert_close`.
        scale: float or array, or None. The magnitude at which the
            computation rounded (e.g. a value computed as a - b from
            larger a and b); None: |printed|.
        dtype: str. As in `assert_close`.
        err_msg: str. Added to the failure message.
    """
    texts = [printed] if isinstance(printed, str) else list(printed)
    for text in texts:
        if not isinstance(text, str):
            raise ValueError(
                "assert_printed: `printed` must hold the figures as strings "
                f"(their digits set the bound); received {text!r}")
    values = np.array([float(t) for t in texts])
    resolution = np.array([_printed_resolution(t) for t in texts])
    actual = np.asarray(actual, np.float64).reshape(values.shape)
    limit = resolution + bound(
        terms, np.abs(values) if scale is None else scale, dtype)
    difference = np.abs(actual - values)
    _record(difference, limit)
    if (difference <= limit).all():
        return
    i = int(np.argmax(difference - limit))
    raise AssertionError(
        f"assert_printed: {actual[i]!r} is not the printed {texts[i]} "
        f"(apart by {difference[i]:.3g}, more than half its last digit "
        f"{resolution[i]:.3g} + {terms} x eps({dtype}) x its scale). "
        f"{err_msg}".rstrip())


def assert_sampled(frequencies, probabilities, draws, *, sigmas=5.0,
                   err_msg=""):
    """Asserts sampled frequencies match their probabilities.

    Elementwise: |f - p| <= sigmas · sqrt(p·(1 - p) / draws) + 1 / draws,
    the binomial standard error (plus one draw, for p near 0 or 1). At 5
    sigmas a correct sampler fails about once in 1.7 million per value.

    Args:
        frequencies: array-like. Observed fractions of `draws` draws.
        probabilities: array-like of the same shape. The distribution
            sampled from.
        draws: positive int. The number of draws behind each frequency.
        sigmas: float. Standard errors allowed.
        err_msg: str. Added to the failure message.
    """
    f = np.asarray(frequencies, np.float64)
    p = np.asarray(probabilities, np.float64)
    if not isinstance(draws, (int, np.integer)) or draws < 1:
        raise ValueError("assert_sampled: `draws` must be a positive int; "
                         f"received draws={draws!r}")
    limit = sigmas * np.sqrt(p * (1.0 - p) / draws) + 1.0 / draws
    difference = np.abs(f - p)
    if (difference <= limit).all():
        return
    worst = np.unravel_index(np.argmax(difference - limit), difference.shape)
    raise AssertionError(
        f"assert_sampled: frequency {f[worst]:.4g} of {draws} draws against "
        f"probability {p[worst]:.4g} at index {tuple(int(i) for i in worst)}"
        f": {difference[worst]:.3g} apart, more than {sigmas} standard "
        f"errors + 1/draws = {limit[worst]:.3g}. {err_msg}".rstrip())
