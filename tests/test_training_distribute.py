"""Tests of `tfattn.training.distribute`: strategies by name, TF_CONFIG, TPUs
and
each replica's share of the batch."""

import pytest
import tensorflow as tf

import hparams
from tfattn import config
from tfattn.training import distribute


def test_unknown_strategy_is_refused():
    with pytest.raises(ValueError, match="Unknown strategy 'gpu'") as error:
        distribute.make_strategy("gpu")
    for name in distribute.STRATEGIES:
        assert name in str(error.value)
    with pytest.raises(ValueError, match="TPU address"):
        distribute.make_strategy("tpu")
    with pytest.raises(ValueError, match="TPU address"):
        distribute.make_strategy("mirrored", tpu="grpc://1.2.3.4:8470")


def test_default_strategies_build():
    assert distribute.make_strategy("default") is tf.distribute.get_strategy()
    one = distribute.make_strategy("one_device")
    assert one.num_replicas_in_sync == 1


@pytest.mark.parametrize(
    "config, message",
    [
        ("{", "not valid JSON"),
        ("[]", "not a JSON object"),
        ('{"task": {"type": "worker", "index": 0}}', '"cluster" is missing'),
        (
            '{"cluster": {"worker": "localhost:1"}, "task": {"type": "worker", '
            '"index": 0}}',
            "not a non-empty list",
        ),
        (
            '{"cluster": {"worker": ["localhost"]}, "task": {"type": "worker", '
            '"index": 0}}',
            "not a non-empty list",
        ),
        ('{"cluster": {"worker": ["localhost:1"]}}', '"task" is missing'),
        (
            '{"cluster": {"worker": ["localhost:1"]}, "task": '
            '{"type": "chief", '
            '"index": 0}}',
            "task type 'chief' is not in",
        ),
        (
            '{"cluster": {"worker": ["localhost:1"]}, "task": '
            '{"type": "worker", '
            '"index": 1}}',
            "task index 1",
        ),
    ],
)
def test_malformed_tf_config_is_refused(config, message, monkeypatch):
    with pytest.raises(ValueError, match="TF_CONFIG is malformed") as error:
        distribute.check_tf_config(config)
    assert message in str(error.value)
    monkeypatch.setenv("TF_CONFIG", config)
    with pytest.raises(ValueError, match="TF_CONFIG is malformed"):
        distribute.make_strategy("multi_worker_mirrored")


def test_valid_tf_config_passes():
    assert distribute.check_tf_config(None) is None
    config = distribute.check_tf_config(
        '{"cluster": {"worker": ["a:1", "b:2"]}, '
        '"task": {"type": "worker", "index": 1}}'
    )
    assert config["task"]["index"] == 1


@pytest.mark.parametrize(
    "overrides, replicas, expected",
    [
        ("batch_size=64", 1, (64, None)),
        ("batch_size=64", 8, (8, None)),
        ("batch_size=None,tokens_per_batch=4096", 3, (None, 1365)),
        # Never below one sentence of max_train_length tokens.
        (
            "batch_size=None,tokens_per_batch=100,max_train_length=32",
            4,
            (None, 32),
        ),
    ],
)
def test_per_replica_batch(overrides, replicas, expected):
    hp = config.parse_overrides(hparams.get("tiny"), overrides)
    assert distribute.per_replica_batch(hp, replicas) == expected


def test_tpu_strategy_wiring(monkeypatch):
    """--tpu reaches the resolver, which connects and builds the strategy."""
    calls = []

    class FakeResolver:
        def __init__(self, tpu):
            calls.append(("resolver", tpu))

    monkeypatch.setattr(
        tf.distribute.cluster_resolver, "TPUClusterResolver", FakeResolver
    )
    monkeypatch.setattr(
        tf.config,
        "experimental_connect_to_cluster",
        lambda r: calls.append(("connect", type(r))),
    )
    monkeypatch.setattr(
        tf.tpu.experimental,
        "initialize_tpu_system",
        lambda r: calls.append(("initialize", type(r))),
    )
    monkeypatch.setattr(
        tf.distribute, "TPUStrategy", lambda r: ("strategy", type(r))
    )
    assert distribute.make_strategy("tpu", tpu="grpc://10.0.0.2:8470") == (
        "strategy",
        FakeResolver,
    )
    assert calls == [
        ("resolver", "grpc://10.0.0.2:8470"),
        ("connect", FakeResolver),
        ("initialize", FakeResolver),
    ]


def test_unreachable_tpu_is_a_clear_error(monkeypatch):
    def unreachable(tpu):
        raise ValueError(f"Could not lookup TPU metadata from {tpu}")

    monkeypatch.setattr(
        tf.distribute.cluster_resolver, "TPUClusterResolver", unreachable
    )
    with pytest.raises(
        ValueError, match="Could not connect to the TPU 'my-tpu'"
    ):
        distribute.make_strategy("tpu", tpu="my-tpu")
