"""Distribution: `tf.distribute` strategies, `TF_CONFIG`, the chief, and
each replica's share of a global batch.

- `make_strategy(name, tpu)`: `default`, `one_device`, `mirrored`,
  `multi_worker_mirrored` (configured by `TF_CONFIG`, checked first) or
  `tpu` (connected and initialised before `TPUStrategy` is built).
- `is_chief(strategy)`: whether this process writes files (only the chief
  does; other workers save into `worker_dir`, a scratch directory).
- `per_replica_batch(hp, replicas)`: the global `batch_size` or
  `tokens_per_batch` divided among the replicas.
"""

import json
import os

import tensorflow as tf
from tfattn.data.training_input import per_replica_batch  # noqa: F401 (handed on)

__all__ = [
    "STRATEGIES",
    "make_strategy",
    "check_tf_config",
    "is_chief",
    "num_workers",
    "worker_dir",
    "remove_worker_dir",
    "per_replica_batch",
]

STRATEGIES = ("default", "one_device", "mirrored", "multi_worker_mirrored",
              "tpu")


def make_strategy(name="default", tpu=None):
    """Builds a `tf.distribute.Strategy` by name.

    Args:
        name: str. One of `STRATEGIES`:

            - `"default"`: no distribution (the default strategy).
            - `"one_device"`: `OneDeviceStrategy` on the first GPU, or the
              CPU when there is none.
            - `"mirrored"`: `MirroredStrategy` over the local GPUs (or CPU).
            - `"multi_worker_mirrored"`: `MultiWorkerMirroredStrategy`,
              configured by the `TF_CONFIG` environment variable (checked
              first; without it, one local worker). Create it at program
              start, before other TensorFlow work.
            - `"tpu"`: `TPUStrategy` on the TPU at `tpu`.
        tpu: str or None. The TPU address (`grpc://...`, a TPU name, or
            `"local"` on a TPU VM); only with `name="tpu"`, and required
            there.

    Returns:
        A `tf.distribute.Strategy`.

    Raises:
        ValueError: an unknown name, a missing or stray `tpu`, or a
            malformed `TF_CONFIG`.
    """
    if name not in STRATEGIES:
        raise ValueError(
            f"Unknown strategy {name!r}. Known strategies: "
            + ", ".join(STRATEGIES)
        )
    if (name == "tpu") != bool(tpu):
        raise ValueError(
            "A TPU address (tpu=..., --tpu) is required with the 'tpu' "
            f"strategy and only there. Received: strategy={name!r}, "
            f"tpu={tpu!r}"
        )
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "one_device":
        gpus = tf.config.list_logical_devices("GPU")
        return tf.distribute.OneDeviceStrategy(gpus[0].name if gpus
                                               else "/cpu:0")
    if name == "mirrored":
        return tf.distribute.MirroredStrategy()
    if name == "multi_worker_mirrored":
        check_tf_config(os.environ.get("TF_CONFIG"))
        return tf.distribute.MultiWorkerMirroredStrategy()
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu)
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
    except (ValueError, RuntimeError, tf.errors.OpError) as error:
        raise ValueError(
            f"Could not connect to the TPU {tpu!r}: {error}"
        ) from None
    return tf.distribute.TPUStrategy(resolver)


def check_tf_config(text):
    """Checks a `TF_CONFIG` value (None or empty: fine, one local worker).

    It must be a JSON object with `"cluster"`, an object from task types to
    lists of `"host:port"` strings, and `"task"`, an object with a `"type"`
    that `"cluster"` names and an `"index"` into that type's list.

    Args:
        text: str or None. The `TF_CONFIG` value.

    Returns:
        The parsed dict, or None.

    Raises:
        ValueError: saying which part is malformed.
    """
    if not text:
        return None

    def bad(why):
        return ValueError(
            f"TF_CONFIG is malformed: {why}. Expected e.g. "
            '{"cluster": {"worker": ["host1:port", "host2:port"]}, '
            '"task": {"type": "worker", "index": 0}}. Received: '
            f"TF_CONFIG={text!r}"
        )

    try:
        config = json.loads(text)
    except json.JSONDecodeError as error:
        raise bad(f"not valid JSON ({error})") from None
    if not isinstance(config, dict):
        raise bad("not a JSON object")
    cluster, task = config.get("cluster"), config.get("task")
    if not isinstance(cluster, dict) or not cluster:
        raise bad('"cluster" is missing or not a non-empty object')
    for task_type, addresses in cluster.items():
        if (not isinstance(addresses, list) or not addresses or not all(
                isinstance(a, str) and ":" in a for a in addresses)):
            raise bad(f'cluster["{task_type}"] is not a non-empty list of '
                      '"host:port" strings')
    if not isinstance(task, dict):
        raise bad('"task" is missing or not an object')
    task_type, index = task.get("type"), task.get("index")
    if task_type not in cluster:
        raise bad(f'task type {task_type!r} is not in "cluster" '
                  f"({', '.join(cluster)})")
    if (isinstance(index, bool) or not isinstance(index, int)
            or not 0 <= index < len(cluster[task_type])):
        raise bad(f"task index {index!r} is not an index into "
                  f'cluster["{task_type}"]')
    return config


def is_chief(strategy):
    """Whether this process writes files (the chief, or the only worker).

    Under `MultiWorkerMirroredStrategy` the chief is the `chief` task, or
    worker 0 when the cluster has none.

    Args:
        strategy: tf.distribute.Strategy.

    Returns:
        bool.
    """
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return True
    resolver = strategy.cluster_resolver
    task_type, task_id = resolver.task_type, resolver.task_id
    if task_type is None:
        return True
    has_chief = "chief" in resolver.cluster_spec().as_dict()
    return task_type == "chief" or (
        task_type == "worker" and task_id == 0 and not has_chief)


def num_workers(strategy):
    """Worker processes of a multi-worker strategy (1 for the others).

    Args:
        strategy: tf.distribute.Strategy.

    Returns:
        int. The cluster's chief and worker tasks.
    """
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return 1
    cluster = strategy.cluster_resolver.cluster_spec().as_dict()
    return sum(len(cluster.get(task_type, ()))
               for task_type in ("chief", "worker")) or 1


def worker_dir(model_dir, strategy):
    """A scratch directory for a non-chief worker's collective saves.

    Args:
        model_dir: str. The run's directory.
        strategy: tf.distribute.MultiWorkerMirroredStrategy.

    Returns:
        str. `model_dir/.workers/TASKTYPE_TASKID`.
    """
    resolver = strategy.cluster_resolver
    return os.path.join(model_dir, ".workers",
                        f"{resolver.task_type}_{resolver.task_id}")


def remove_worker_dir(path):
    """Removes a non-chief worker's scratch directory (`worker_dir`) at the
    end of training, and the shared parent once the last worker is out.

    Args:
        path: str. What `worker_dir` returned.
    """
    tf.io.gfile.rmtree(path)
    parent = os.path.dirname(path)
    try:
        if not tf.io.gfile.listdir(parent):
            tf.io.gfile.rmtree(parent)
    except tf.errors.OpError:
        pass  # Another worker removed it first.
