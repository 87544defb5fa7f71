"""The `--hparams_overrides` parser (`tfattn.config.overrides`): the number
spellings `ast.literal_eval` reads and those overrides refuse."""

import math
import time

import pytest

import hparams
from tfattn import config
from tfattn.config import overrides


def _parse(text):
    return overrides.parse_overrides(hparams.get("tiny"), text)


def test_config_reexports_the_parser():
    assert config.parse_overrides is overrides.parse_overrides


@pytest.mark.parametrize(
    "payload",
    [
        "__import__('os').system('touch {marker}')",
        'exec(\'open("{marker}","w")\')',
        "[open('{marker}','w')]",
        "(lambda:open('{marker}','w'))()",
    ],
)
def test_code_is_refused_not_run(tmp_path, payload):
    marker = tmp_path / "pwned"
    payload = payload.format(marker=marker)
    for field in (
        "num_layers",
        "dropout_rate",
        "normalize_first",
        "flavor",
        "learning_rate",
        "batch_size",
    ):
        for text in (f"{field}={payload}", f"{field}='{payload}'"):
            try:
                _parse(text)
            except ValueError as error:
                assert f"`{field}`" in str(error) or "Malformed" in str(error)
            else:
                raise AssertionError(f"{text!r} was accepted")
    assert not marker.exists()


@pytest.mark.parametrize(
    "text",
    [
        # Numbers Python reads but overrides never took: decimal only.
        "num_heads=0x4",
        "num_heads=0o4",
        "num_heads=0b100",
        "num_heads=4_0",
        "num_heads=4j",
        "num_heads=(4)",
        "num_heads=- 4",
        "num_heads=True",
        "num_heads=+-4",
        "num_heads=--4",
        "num_heads=2+2",
        "dropout_rate=0x1",
        "dropout_rate=1_0.5",
        "dropout_rate=1j",
        "dropout_rate=1+0j",
        "dropout_rate=...",
        "dropout_rate=True",
        "dropout_rate=None",
        "dropout_rate=1e",
        "dropout_rate=e5",
        "learning_rate=0.1-0.1",
    ],
)
def test_python_only_number_spellings_are_refused(text):
    field = text.partition("=")[0]
    with pytest.raises(
        ValueError, match=f"Invalid value for hparams field `{field}`"
    ):
        _parse(text)


def test_decimal_spellings_read_as_before():
    hp = _parse(
        "num_heads=004,warmup_steps=+10,dropout_rate=00.5,"
        "attention_dropout_rate=.25,learning_rate=1e-9,"
        "adam_epsilon=1E+2,label_smoothing=0"
    )
    assert (
        hp.num_heads,
        hp.warmup_steps,
        hp.dropout_rate,
        hp.attention_dropout_rate,
        hp.learning_rate,
        hp.adam_epsilon,
        hp.label_smoothing,
    ) == (4, 10, 0.5, 0.25, 1e-9, 100.0, 0.0)
    assert isinstance(hp.label_smoothing, float)
    # float("-0") keeps the sign; Python's int -0 has none.
    assert math.copysign(1.0, _parse("dropout_rate=-0").dropout_rate) == -1.0


@pytest.mark.parametrize(
    "text, message",
    [
        ("num_heads=" + "0" * 18 + "4", "at most 18 digits"),
        ("num_heads=-" + "9" * 19, "at most 18 digits"),
        # Beyond a float's range: inf, refused as not finite (no OverflowError).
        ("dropout_rate=" + "1" * 400, "expected a finite float"),
        ("dropout_rate=" + "9" * 5000, "expected a finite float"),
    ],
)
def test_long_numbers_are_refused_with_the_reason(text, message):
    with pytest.raises(ValueError, match=message):
        _parse(text)


def test_words_in_any_case():
    hp = _parse("learning_rate=NULL,normalize_first=True")
    assert hp.learning_rate is None and hp.normalize_first is True
    hp = _parse("learning_rate=None,normalize_first=fAlSe")
    assert hp.learning_rate is None and hp.normalize_first is False


@pytest.mark.parametrize(
    "text",
    [
        r"flavor='pap\x65r'",
        "flavor='pa' 'per'",
        "flavor='''paper'''",
        r"flavor='paper\n'",
    ],
)
def test_quoted_strings_are_verbatim(text):
    """No escapes and no concatenation: none of these is 'paper'."""
    with pytest.raises(ValueError, match="`flavor`"):
        _parse(text)


def test_hostile_values_are_refused_quickly_with_one_short_line():
    for value in (
        "9" * 20000 + "x",
        "-" * 100000 + "1",
        "1-" * 100000 + "1",
        "(" * 100000,
    ):
        start = time.perf_counter()
        with pytest.raises(ValueError) as error:
            _parse("dropout_rate=" + value)
        assert time.perf_counter() - start < 5
        message = str(error.value)
        assert "\n" not in message and len(message) < 400
        assert "`dropout_rate`" in message


def test_a_long_unknown_key_is_cut_in_the_message():
    with pytest.raises(ValueError, match="Unknown hparams field") as error:
        _parse("a" * 5000 + "=1")
    assert "(5,002 characters)" in str(error.value)
    assert len(str(error.value)) < 2000


@pytest.mark.parametrize("value", [5, b"", b"num_heads=2", ["num_heads=2"]])
def test_overrides_that_are_no_string_are_refused(value):
    with pytest.raises(ValueError, match="`overrides`, expected a string"):
        _parse(value)
