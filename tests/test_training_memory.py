"""`tfattn.training.memory`: the training step's memory estimate and the
refusal of
hparams that cannot fit. (The estimate against measured peaks:
`bench/training_memory.py`.)"""

import dataclasses

import pytest
from absl import flags

import hparams
import train
from tests.test_cli_train import saved_flags  # noqa: F401 (autouse)
from tfattn.training import memory
from tfattn.training import run_dir

FLAGS = flags.FLAGS
GiB = 2**30


def _small(name, **changes):
    return dataclasses.replace(
        hparams.get(name),
        **dict(
            dict(
                num_layers=2,
                num_units=16,
                num_heads=2,
                ffn_units=24,
                max_length=10,
                max_train_length=10,
            ),
            **changes,
        ),
    )


@pytest.mark.parametrize(
    "name", ["tiny", "multi30k", "reference_2017", "reference_2019"]
)
def test_parameters_are_counted_as_the_model_has_them(name):
    """Every flavour, shared or separate tables, tied or not, learned or
    sinusoid positions, pre- or post-norm: the built model's own count."""
    hp = _small(name)
    assert (
        memory.count_parameters(hp, 50)
        == run_dir.build_model(hp, 50).count_params()
    )


def test_the_estimate_adds_its_parts_from_the_formulas():
    hp = _small("tiny")
    estimate = memory.training_memory(hp, 50, rows=3, length=7)
    tokens, c, f, h = 21, 16, 24, 2
    per_pair = (12 * c + 2 * f + 2 * h * 7) + (19 * c + 2 * f + 4 * h * 7)
    assert estimate.parameter_state == 16 * memory.count_parameters(hp, 50)
    assert estimate.logits == 13 * tokens * 50
    assert estimate.activations == 4 * tokens * 2 * per_pair
    assert estimate.total == (
        memory.RUNTIME_BYTES
        + estimate.parameter_state
        + estimate.logits
        + estimate.activations
    )


@pytest.mark.parametrize(
    "changes, length, replicas, shape",
    [
        (
            dict(batch_size=None, tokens_per_batch=4096, max_train_length=128),
            50,
            1,
            (81, 50),
        ),
        # The length is the data's longest row, at most max_train_length.
        (
            dict(batch_size=None, tokens_per_batch=4096, max_train_length=128),
            500,
            1,
            (32, 128),
        ),
        (
            dict(batch_size=None, tokens_per_batch=4096, max_train_length=128),
            50,
            2,
            (40, 50),
        ),
        (
            dict(batch_size=64, tokens_per_batch=None, max_train_length=100),
            30,
            2,
            (32, 30),
        ),
    ],
)
def test_the_largest_batch_of_one_replica(changes, length, replicas, shape):
    hp = dataclasses.replace(hparams.get("multi30k"), **changes)
    assert memory.batch_shape(hp, length, replicas) == shape


def test_a_step_that_cannot_fit_is_refused_naming_what_to_lower():
    hp = hparams.get("base")
    with pytest.raises(memory.InsufficientMemory) as info:
        memory.check_training_memory(hp, 37000, 256, available=8 * GiB)
    message = str(info.value)
    for part in (
        "GiB",
        "8.0 GiB",
        "logits",
        "activations",
        "for batches of 97 x 256 tokens",
        "tokens_per_batch=25000",
        "max_train_length=256",
        "vocab_size=37000",
        "num_layers=6",
        "num_units=512",
        "--hparams_overrides=tokens_per_batch=",
    ):
        assert part in message, (part, message)
    # The suggested budget fits.
    suggested = int(message.rsplit("tokens_per_batch=", 1)[1].rstrip("."))
    fitting = dataclasses.replace(hp, tokens_per_batch=suggested)
    memory.check_training_memory(fitting, 37000, 256, available=8 * GiB)
    # The same hparams with room to spare pass, and say what they need.
    estimate = memory.check_training_memory(
        hp, 37000, 256, available=1024 * GiB
    )
    assert 8 * GiB < estimate.total < 1024 * GiB


def test_train_py_refuses_before_writing_anything(tmp_path, monkeypatch):
    monkeypatch.setattr(memory, "physical_memory", lambda: GiB // 2)
    model_dir = tmp_path / "run"
    FLAGS.unparse_flags()
    FLAGS(
        [
            "train.py",
            "--hparams=tiny",
            f"--model_dir={model_dir}",
            "--samples=0",
            "--progress_bar=false",
        ]
    )
    with pytest.raises(SystemExit) as info:
        train.main(["train.py"])
    line = info.value.code
    assert isinstance(line, str) and "\n" not in line
    assert line.startswith("Error: Training these hparams needs about ")
    assert "more than this machine's 0.5 GiB" in line
    assert "Lower tokens_per_batch" in line
    assert not model_dir.exists()
