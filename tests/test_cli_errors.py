"""`tfattn.cli.errors.command_line_failure`: the one boundary that `train.py`
and `python -m tfattn.visualize` end their failures with."""

import pytest
import tensorflow as tf

from tfattn.cli import errors


class _Expected(RuntimeError):
    pass


@pytest.mark.parametrize(
    "error, line, status",
    [
        (errors.UsageError("unexpected arguments: x"),
         "Error: unexpected arguments: x", 2),
        (ValueError("--layers='9': out of range"),
         "Error: --layers='9': out of range", 1),
        (FileNotFoundError(2, "No such file or directory", "/no/model"),
         "Error: /no/model: No such file or directory", 1),
        (tf.errors.DataLossError(None, None, "Checksum does not match\n\n"
                                 "graph lines"),
         "Error: Checksum does not match", 1),
        (_Expected("loss is nan"), "Error: loss is nan", 1),
        (KeyError("spam"), "Error: unexpected KeyError: 'spam' (rerun with "
         "--debug for the traceback)", 1),
    ],
)
def test_each_failure_is_one_line_and_its_status(error, line, status):
    assert errors.command_line_failure(
        error, "drawing", "lower it", expected=(_Expected,)
    ) == (line, status)


def test_an_unlisted_type_is_a_bug_not_bad_input():
    line, status = errors.command_line_failure(
        _Expected("loss is nan"), "training", "lower it"
    )
    assert status == 1 and line.startswith("Error: unexpected _Expected")


@pytest.mark.parametrize(
    "error",
    [
        tf.errors.ResourceExhaustedError(
            None, None, "OOM when allocating tensor with shape[64,512,8000]"
        ),
        MemoryError("Unable to allocate array with shape [64, 512, 8000]"),
    ],
)
def test_out_of_memory_names_what_ran_the_tensor_and_the_advice(error):
    line, status = errors.command_line_failure(
        error, "running --mode=train", "lower tokens_per_batch"
    )
    assert status == 1
    assert line == (
        "Error: out of memory while running --mode=train (a tensor of shape "
        "[64, 512, 8000] did not fit): lower tokens_per_batch"
    )
