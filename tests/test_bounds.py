"""The suite's one bound (`tests/bounds.py`): its arithmetic at the edges,
its messages, and the rule that no other tolerance is written in tests/."""

import ast
import os

import numpy as np
import pytest

from tests import bounds

TESTS = os.path.dirname(os.path.abspath(__file__))
EPS = bounds.EPSILON["float32"]

# Calls that compare floats to a tolerance of their own. In tests/ only
# bounds.py may make them; everything else calls bounds.assert_close (or
# bounds.assert_sampled for sampled frequencies).
TOLERANCE_CALLS = frozenset({
    "allclose", "isclose", "assert_allclose", "approx",
    "assert_almost_equal", "assert_array_almost_equal",
    "assert_approx_equal", "assert_array_almost_equal_nulp",
    "assert_array_max_ulp", "assertAllClose", "assertAlmostEqual",
})
# A literal upper bound below this on a difference (`abs(a - b) < 1e-4`)
# is a tolerance written by hand.
SMALL = 1e-2


def _called_name(node):
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(
        func, "id", None)


def _is_difference(node):
    """Whether an expression measures a gap: a subtraction or abs()."""
    for part in ast.walk(node):
        if isinstance(part, ast.BinOp) and isinstance(part.op, ast.Sub):
            return True
        if isinstance(part, ast.Call) and _called_name(part) in (
                "abs", "fabs", "absolute"):
            return True
    return False


def _small_literal(node):
    return (isinstance(node, ast.Constant) and isinstance(node.value, float)
            and 0 < node.value < SMALL)


def _slack(node):
    """Whether an expression adds or subtracts a small literal slack
    (`want - 1e-5`)."""
    return isinstance(node, ast.BinOp) and isinstance(
        node.op, (ast.Add, ast.Sub)) and (
            _small_literal(node.left) or _small_literal(node.right))


def literal_tolerances(source):
    """(line, what) of each hand-written tolerance in a module's source: a
    call from TOLERANCE_CALLS, a difference bounded above by a small float
    literal (`<`/`<=` with the literal on the right, `>`/`>=` on the
    left), or an order comparison loosened by a small literal slack
    (`a >= b - 1e-5`)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and (
                _called_name(node) in TOLERANCE_CALLS):
            found.append((node.lineno, _called_name(node)))
        elif isinstance(node, ast.Compare):
            sides = [node.left] + node.comparators
            for op, left, right in zip(node.ops, sides, sides[1:]):
                upper = (isinstance(op, (ast.Lt, ast.LtE))
                         and _small_literal(right) and _is_difference(left))
                lower = (isinstance(op, (ast.Gt, ast.GtE))
                         and _small_literal(left) and _is_difference(right))
                ordered = isinstance(op, (ast.Lt, ast.LtE, ast.Gt, ast.GtE))
                if upper or lower or (ordered and (_slack(left)
                                                   or _slack(right))):
                    found.append((node.lineno, ast.unparse(node)))
                    break
    return found


def _test_sources():
    for folder, _, names in os.walk(TESTS):
        for name in sorted(names):
            path = os.path.join(folder, name)
            if name.endswith(".py") and path != bounds.__file__.replace(
                    ".pyc", ".py"):
                yield os.path.relpath(path, os.path.dirname(TESTS)), path


def test_no_comparison_in_tests_writes_its_own_tolerance():
    offenders = []
    for relative, path in _test_sources():
        with open(path, encoding="utf-8") as f:
            offenders += [f"{relative}:{line}: {what}"
                          for line, what in literal_tolerances(f.read())]
    assert not offenders, (
        "compare two computations with tests/bounds.py's assert_close "
        "(a bound derived from the terms summed), not a tolerance of "
        "their own:\n" + "\n".join(offenders))


@pytest.mark.parametrize("source", [
    "np.testing.assert_allclose(a, b, rtol=1e-5)",
    "assert np.allclose(a, b)",
    "assert math.isclose(a, b, rel_tol=1e-9)",
    "assert x == pytest.approx(y)",
    "np.testing.assert_array_almost_equal(a, b, decimal=5)",
    "assert abs(a - b) < 1e-4",
    "assert np.abs(a - b).max() <= 1e-6",
    "assert 1e-5 > np.max(np.abs(got - want))",
    "assert difference(a - b) < 2e-3",
    "assert (scores >= greedy - 1e-5).all()",
    "assert got <= want + 1e-6",
])
def test_the_scan_finds_each_form_of_a_literal_tolerance(source):
    assert [line for line, _ in literal_tolerances(source)] == [1]


@pytest.mark.parametrize("source", [
    "bounds.assert_close(a, b, terms=16)",
    "assert np.abs(a - b).max() > 1e-3",  # the two differ: not a tolerance
    "assert loss < 0.5",  # a learning threshold, no difference
    "assert abs(a - b) < 0.5",  # not small: a property, not a rounding
    "np.testing.assert_array_equal(a, b)",
])
def test_the_scan_leaves_other_assertions_alone(source):
    assert literal_tolerances(source) == []


# --------------------------------------------------------------------------
# assert_close


def test_a_difference_at_the_bound_passes_and_just_past_it_fails():
    desired = np.array([1.0, -2.0, 4.0])
    limit = 10 * EPS * 4.0  # terms x eps x max|desired|
    bounds.assert_close(desired + limit, desired, terms=10)
    with pytest.raises(AssertionError, match=r"1 of 3 values .* 10 terms x "
                       r"eps\(float32\).*index \(1,\)"):
        bounds.assert_close(desired + [0, 1.01 * limit, 0], desired,
                            terms=10)


@pytest.mark.parametrize("terms", [1, 10**6])
def test_the_bound_grows_with_the_terms_from_one_to_a_million(terms):
    desired = np.full(4, 3.0, np.float32)
    limit = terms * EPS * 3.0
    bounds.assert_close(desired + 0.99 * limit, desired, terms=terms)
    with pytest.raises(AssertionError):
        bounds.assert_close(desired + 1.01 * limit, desired, terms=terms)


def test_a_per_element_scale_bounds_each_value_by_its_own_magnitude():
    desired = np.array([1e-6, 1.0])
    bounds.assert_close(desired * (1 + 3 * EPS), desired, terms=4,
                        scale=np.abs(desired))
    # The small value moved by what the large one's scale allows: caught.
    with pytest.raises(AssertionError, match=r"index \(0,\)"):
        bounds.assert_close(desired + [2 * EPS, 0], desired, terms=4,
                            scale=np.abs(desired))


@pytest.mark.parametrize("dtype,eps", [("float64", 2.0**-52),
                                       ("float16", 2.0**-10),
                                       ("bfloat16", 2.0**-7)])
def test_the_dtype_sets_epsilon(dtype, eps):
    bounds.assert_close([1.0 + 2 * eps], [1.0], terms=2, dtype=dtype)
    with pytest.raises(AssertionError, match=f"eps\\({dtype}\\)"):
        bounds.assert_close([1.0 + 3 * eps], [1.0], terms=2, dtype=dtype)


def test_non_finite_values_must_match_exactly():
    bounds.assert_close([np.inf, np.nan, 1.0], [np.inf, np.nan, 1.0],
                        terms=1)
    for actual in ([-np.inf, np.nan, 1.0], [np.inf, 0.0, 1.0],
                   [1e30, np.nan, 1.0]):
        with pytest.raises(AssertionError, match="non-finite"):
            bounds.assert_close(actual, [np.inf, np.nan, 1.0], terms=1)


def test_all_zero_desired_values_allow_no_difference():
    bounds.assert_close(np.zeros(3), np.zeros(3), terms=100)
    with pytest.raises(AssertionError):
        bounds.assert_close([0.0, 1e-30, 0.0], np.zeros(3), terms=100)


def test_mismatched_shapes_fail_naming_both():
    with pytest.raises(AssertionError, match=r"actual \(2,\), desired \(3,\)"):
        bounds.assert_close(np.zeros(2), np.zeros(3), terms=1)


@pytest.mark.parametrize("terms", [0, -3, 2.5, True, None])
def test_terms_must_be_a_positive_int(terms):
    with pytest.raises(ValueError, match=f"terms={terms!r}"):
        bounds.assert_close([1.0], [1.0], terms=terms)


def test_an_unknown_dtype_is_refused_by_name():
    with pytest.raises(ValueError, match="dtype='int8'"):
        bounds.assert_close([1.0], [1.0], terms=1, dtype="int8")


def test_err_msg_is_carried():
    with pytest.raises(AssertionError, match="row 7"):
        bounds.assert_close([2.0], [1.0], terms=1, err_msg="row 7")


def test_the_log_records_each_comparison_s_share_of_its_bound(tmp_path,
                                                            monkeypatch):
    log = tmp_path / "bounds.jsonl"
    monkeypatch.setenv("TFATTN_BOUNDS_LOG", str(log))
    bounds.assert_close([1.0 + 5 * EPS], [1.0], terms=10)
    line, = log.read_text().splitlines()
    assert '"used": 0.5' in line


def test_stack_terms_counts_each_layer_and_the_output_layer():
    assert bounds.stack_terms(1, 8) == 73
    assert bounds.stack_terms(2, 8, ffn_units=32, length=5) == 2 * (
        72 + 32 + 5)
    assert bounds.stack_terms(1, 8, vocab_size=100) == 73 + 108


# --------------------------------------------------------------------------
# assert_sampled


def test_sampled_frequencies_within_five_standard_errors_pass():
    draws = 10_000
    p = np.array([0.5, 0.01, 0.0])
    error = 5 * np.sqrt(p * (1 - p) / draws) + 1 / draws
    bounds.assert_sampled(p + 0.99 * error, p, draws)
    with pytest.raises(AssertionError, match=r"index \(0,\)"):
        bounds.assert_sampled(p + [1.01 * error[0], 0, 0], p, draws)


def test_a_token_never_drawn_may_be_off_by_at_most_one_draw():
    with pytest.raises(AssertionError, match="probability 0 "):
        bounds.assert_sampled([2 / 100], [0.0], 100)


@pytest.mark.parametrize("draws", [0, -1, 1.5])
def test_draws_must_be_a_positive_int(draws):
    with pytest.raises(ValueError, match=f"draws={draws!r}"):
        bounds.assert_sampled([0.5], [0.5], draws)


# --------------------------------------------------------------------------
# assert_printed


@pytest.mark.parametrize("printed,resolution", [
    ("1.8973e-4", 0.5e-8), ("0.900003125", 0.5e-9), ("100", 0.5),
    ("99.61", 0.005), ("7.5E-8", 0.5e-9), ("-2.5", 0.05)])
def test_a_printed_figure_bounds_by_half_its_last_digit(printed, resolution):
    value = float(printed)
    bounds.assert_printed(value + 0.99 * resolution, printed)
    with pytest.raises(AssertionError, match=f"printed {printed}"):
        bounds.assert_printed(value + 1.01 * resolution + 1e-12 * abs(value),
                              printed)


def test_printed_figures_are_checked_one_by_one():
    bounds.assert_printed([0.1234, 5.0], ["0.1234", "5"])
    with pytest.raises(AssertionError, match="printed 0.1234"):
        bounds.assert_printed([0.12351, 5.0], ["0.1234", "5"])


def test_a_printed_figure_must_be_a_string():
    with pytest.raises(ValueError, match="received 0.5"):
        bounds.assert_printed(0.5, [0.5])


def test_a_printed_figure_s_rounding_allowance_follows_the_given_scale():
    # 0.099833 computed as (sqrt(8) + 0.0998334) - sqrt(8) in float32.
    got = 0.0998334 + 3 * EPS * 3.8
    with pytest.raises(AssertionError):
        bounds.assert_printed(got, "0.0998334", terms=1, dtype="float32")
    bounds.assert_printed(got, "0.0998334", terms=4, scale=3.8,
                          dtype="float32")
