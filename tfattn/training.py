"""Training: one custom loop that serves every `tf.distribute` strategy.

`train(hparams, dataset, model_dir, strategy, ...)` trains a
`tfattn.Transformer` with the hparams' Adam and learning-rate schedule on a
label-smoothed loss, and keeps everything a run needs in `model_dir`:

    model_dir/hparams.json          the resolved hparams (reused on resume)
    model_dir/spm.model, spm.vocab  the joint SentencePiece vocabulary
    model_dir/ckpt-<step>.*         checkpoints (model, optimizer, step)
    model_dir/train/                TensorBoard scalars

Why a custom loop: Keras 3 `fit` fails under `MultiWorkerMirroredStrategy`
(TRAPS.md item 1), and one loop for every strategy is simpler than two. The
model and optimizer are built in `strategy.scope()`, each replica gets its
own bucketed batches (`strategy.distribute_datasets_from_function`), and a
`tf.function` runs the step with `strategy.run`. Every replica divides its
summed loss by the *global* number of non-padding target tokens (an
all-reduce of the label counts), and the optimizer sums the replicas'
gradients, so N replicas compute exactly the gradient of one device holding
the whole batch.

Resume: a run restarted with the same `model_dir` restores the latest
checkpoint and continues at its step; the saved hparams must match the
requested ones except in `hparams.RESUMABLE_FIELDS` (length, save and log
intervals, decoding). The data order restarts from a seed derived from the
step, so a resumed run does not replay the same batches; it does not
continue the interrupted run's exact order.

A non-finite loss stops training with `NonFiniteLossError` naming the step,
and nothing is saved after it, so the last checkpoint stays the last good
one. Weights are also checked before every save.

Preemption: SIGTERM (what schedulers and cloud VMs send before they kill a
job) makes the loop finish its current step, save a checkpoint there and
raise `TrainingPreempted`; `train.py` then exits with status 143 (128 +
SIGTERM). Under `MultiWorkerMirroredStrategy` the stop request travels in
the step's all-reduce, so every worker stops after the same step and they
save together. A SIGKILL cannot be caught: the run resumes from the last
periodic checkpoint, which TensorFlow writes atomically (the `checkpoint`
index file is replaced only after a save's files are complete).

Datasets are named by a spec string (`parse_dataset_spec`): `numbers` (the
generated task, offline), `multi30k` (with a manual directory of its files),
`tfds:NAME` (a TFDS translation dataset) or `textfiles:PREFIX` (a user's
parallel files). Bad input (unknown strategy, malformed TF_CONFIG, missing
data, differing hparams on resume) raises before anything is written.
"""

import dataclasses
import json
import os
import signal
import threading
import time
from typing import NamedTuple

import keras
import numpy as np
import tensorflow as tf
from absl import logging
from tensorflow.core.framework import summary_pb2

import hparams as hparams_lib
from tfattn import data as data_lib
from tfattn import losses
from tfattn import schedules
from tfattn.models import Transformer

STRATEGIES = ("default", "one_device", "mirrored", "multi_worker_mirrored",
              "tpu")
MIXED_PRECISION = (None, "mixed_float16", "mixed_bfloat16")
DATASET_KINDS = ("numbers", "multi30k", "tfds", "textfiles")
HPARAMS_FILENAME = "hparams.json"
SUMMARY_DIRNAME = "train"
CHECKPOINT_NAME = "ckpt"
# Sentences (of both languages together) the vocabulary is learnt from.
TOKENIZER_MAX_SENTENCES = 2_000_000
# Training pairs of the numbers task the vocabulary is learnt from.
NUMBERS_TOKENIZER_PAIRS = 20_000


class NonFiniteLossError(RuntimeError):
    """Training produced a NaN or infinite loss (or weights).

    Attributes:
        step: int. The step (1-based) whose loss was not finite.
        last_checkpoint: str or None. The last (good) checkpoint kept.
    """

    def __init__(self, step, what, last_checkpoint):
        self.step = step
        self.last_checkpoint = last_checkpoint
        kept = (f"The last good checkpoint, {last_checkpoint}, is kept"
                if last_checkpoint else "No checkpoint had been saved yet")
        super().__init__(
            f"Training stopped: non-finite {what} at step {step}. Nothing was "
            f"saved after it. {kept}. Lower the learning rate (e.g. "
            "--hparams_overrides=learning_rate_scale=0.5), or use float32 "
            "when --mixed_precision was on, then resume."
        )


class TrainingPreempted(RuntimeError):
    """Training stopped on SIGTERM after saving a checkpoint.

    Attributes:
        step: int. The step training stopped (and saved) at.
        checkpoint: str or None. The checkpoint saved there.
    """

    def __init__(self, step, checkpoint):
        self.step = step
        self.checkpoint = checkpoint
        super().__init__(
            f"Training stopped on SIGTERM at step {step} and saved "
            f"{checkpoint or 'a checkpoint (on the chief)'}. Run the same "
            "command again to resume from it.")


class _StopRequest:
    """Sets a flag on SIGTERM while training runs (main thread only).

    The previous handler comes back on exit. Outside the main thread (where
    Python allows no signal handlers) it only serves as a flag that stays
    False.
    """

    def __init__(self):
        self.requested = False
        self._previous = None

    def _handle(self, signum, frame):
        del frame
        logging.warning("Received signal %d: stopping after this step and "
                        "saving a checkpoint.", signum)
        self.requested = True

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._handle)
        return self

    def __exit__(self, *exc):
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
            self._previous = None
        return False


# ----------------------------------------------------------------------
# Strategies.

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
    """Whether this process writes files (the chief, or the only worker)."""
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return True
    resolver = strategy.cluster_resolver
    task_type, task_id = resolver.task_type, resolver.task_id
    if task_type is None:
        return True
    has_chief = "chief" in resolver.cluster_spec().as_dict()
    return task_type == "chief" or (
        task_type == "worker" and task_id == 0 and not has_chief)


# ----------------------------------------------------------------------
# Datasets.

@dataclasses.dataclass(frozen=True)
class DatasetSpec:
    """Where the training pairs come from (see `parse_dataset_spec`).

    Attributes:
        kind: str. `"numbers"`, `"multi30k"`, `"tfds"` or `"textfiles"`.
        name: str or None. The TFDS name or the text-file prefix.
        source_language, target_language: str or None. Feature keys (TFDS,
            Multi30k) or file suffixes (text files).
        data_dir: str or None. The TFDS data directory.
        manual_dir: str or None. The TFDS manual directory (Multi30k's
            `*.gz` files).
    """

    kind: str
    name: str | None = None
    source_language: str | None = None
    target_language: str | None = None
    data_dir: str | None = None
    manual_dir: str | None = None

    def __str__(self):
        text = self.kind + (f":{self.name}" if self.name else "")
        if self.source_language:
            text += f" ({self.source_language}->{self.target_language})"
        return text


def parse_dataset_spec(text, source_language=None, target_language=None,
                       data_dir=None, manual_dir=None):
    """Reads a dataset spec string and checks what it needs.

    Args:
        text: str. `"numbers"`, `"multi30k"`, `"tfds:NAME"` (e.g.
            `"tfds:wmt14_translate/de-en"`) or `"textfiles:PREFIX"` (files
            `PREFIX.train.SRC` and `PREFIX.train.TGT`, or `PREFIX.SRC` and
            `PREFIX.TGT`).
        source_language, target_language: str or None. Required for `tfds`
            and `textfiles`; `multi30k` takes `en`/`de` (default en->de);
            `numbers` takes none.
        data_dir: str or None. TFDS data directory (`multi30k`, `tfds`).
        manual_dir: str or None. TFDS manual directory (`multi30k`, `tfds`).

    Returns:
        A `DatasetSpec`.

    Raises:
        ValueError: a malformed spec or an impossible combination.
    """
    if not isinstance(text, str) or not text:
        raise ValueError(f"A dataset spec must be a non-empty string. "
                         f"Received: {text!r}")
    kind, sep, name = text.partition(":")
    usage = ("expected 'numbers', 'multi30k', 'tfds:NAME' or "
             "'textfiles:PREFIX'")
    if kind not in DATASET_KINDS:
        raise ValueError(f"Unknown dataset {text!r}: {usage}.")
    if kind in ("numbers", "multi30k") and sep:
        raise ValueError(f"Dataset {kind!r} takes no ':...' part: {usage}. "
                         f"Received: {text!r}")
    if kind in ("tfds", "textfiles") and not name:
        raise ValueError(f"Dataset {kind!r} needs a name after ':': {usage}. "
                         f"Received: {text!r}")
    languages = (source_language, target_language)
    if kind == "numbers":
        stray = [n for n, v in (("source_language", source_language),
                                ("target_language", target_language),
                                ("data_dir", data_dir),
                                ("manual_dir", manual_dir)) if v]
        if stray:
            raise ValueError("The generated 'numbers' dataset takes no "
                             + ", ".join(stray) + ".")
    elif kind == "multi30k":
        source_language = source_language or (
            "de" if target_language == "en" else "en")
        target_language = target_language or (
            "de" if source_language == "en" else "en")
        if {source_language, target_language} != {"en", "de"}:
            raise ValueError(
                "Multi30k translates between 'en' and 'de'. Received: "
                f"source_language={languages[0]!r}, "
                f"target_language={languages[1]!r}")
    else:
        if not source_language or not target_language:
            raise ValueError(
                f"Dataset {text!r} needs source_language and target_language "
                "(--source_language, --target_language).")
        if source_language == target_language:
            raise ValueError("source_language and target_language must "
                             f"differ. Received: {source_language!r} twice.")
        if kind == "textfiles" and (data_dir or manual_dir):
            raise ValueError("Text files take no data_dir or manual_dir; put "
                             "the path in 'textfiles:PREFIX'.")
    return DatasetSpec(kind, name or None, source_language, target_language,
                       data_dir or None, manual_dir or None)


def check_dataset(spec):
    """Raises FileNotFoundError when the spec's local data is missing.

    A cheap check, made before anything is written: the data and manual
    directories exist, Multi30k's manual directory holds its six files, and
    the text files exist.
    """
    for flag, path in (("data_dir", spec.data_dir),
                       ("manual_dir", spec.manual_dir)):
        if path and not tf.io.gfile.isdir(path):
            raise FileNotFoundError(
                f"{path}: the {flag} directory does not exist.")
    if spec.kind == "multi30k" and spec.manual_dir:
        missing = [n for n in data_lib.multi30k.FILENAMES if not
                   tf.io.gfile.exists(os.path.join(spec.manual_dir, n))]
        if missing:
            raise FileNotFoundError(
                f"{spec.manual_dir}: the Multi30k manual directory lacks "
                + ", ".join(missing))
    if spec.kind == "textfiles":
        _textfile_prefix(spec, "train")


def _textfile_prefix(spec, split):
    """`PREFIX.split` when its files exist, else `PREFIX` (train only)."""
    candidates = [f"{spec.name}.{split}"] + (
        [spec.name] if split == "train" else [])
    for prefix in candidates:
        paths = [f"{prefix}.{lang}" for lang in
                 (spec.source_language, spec.target_language)]
        if all(tf.io.gfile.exists(p) for p in paths):
            return prefix
    wanted = " or ".join(
        f"{p}.{{{spec.source_language},{spec.target_language}}}"
        for p in candidates)
    raise FileNotFoundError(f"No parallel text files for split {split!r}: "
                            f"expected {wanted}.")


def load_split(spec, split="train"):
    """One split of the dataset as `{'inputs', 'targets'}` string pairs.

    Args:
        spec: DatasetSpec.
        split: str. `"train"`, `"validation"` or `"test"`.

    Returns:
        A `tf.data.Dataset` of dicts with `'inputs'` (source) and
        `'targets'` (target) `tf.string` scalars.

    Raises:
        FileNotFoundError, ValueError: missing or malformed data.
    """
    check_dataset(spec)
    if spec.kind == "numbers":
        return data_lib.numbers_dataset(split)
    if spec.kind == "textfiles":
        return data_lib.parallel_dataset(
            _textfile_prefix(spec, split), spec.source_language,
            spec.target_language)
    if spec.kind == "multi30k":
        dataset = data_lib.load_multi30k(split, data_dir=spec.data_dir,
                                         manual_dir=spec.manual_dir)
    else:
        dataset = _load_tfds(spec, split)
    src, tgt = spec.source_language, spec.target_language
    return dataset.map(lambda ex: {"inputs": ex[src], "targets": ex[tgt]},
                       num_parallel_calls=tf.data.AUTOTUNE)


def _load_tfds(spec, split):
    import tensorflow_datasets as tfds

    try:
        builder = tfds.builder(spec.name, data_dir=spec.data_dir)
    except Exception as error:  # TFDS raises several kinds for bad names.
        raise ValueError(f"Unknown TFDS dataset {spec.name!r}: "
                         f"{error}") from None
    features = builder.info.features
    keys = list(features.keys()) if hasattr(features, "keys") else []
    missing = [k for k in (spec.source_language, spec.target_language)
               if k not in keys]
    if missing:
        raise ValueError(
            f"TFDS dataset {spec.name!r} has no feature(s) "
            f"{', '.join(map(repr, missing))}; its features are "
            f"{', '.join(map(repr, keys))} (use them as --source_language "
            "and --target_language).")
    if not builder.is_prepared():
        try:
            builder.download_and_prepare(
                download_config=tfds.download.DownloadConfig(
                    manual_dir=spec.manual_dir))
        except Exception as error:  # Network and manual-dir errors alike.
            raise FileNotFoundError(
                f"TFDS dataset {spec.name!r} is not prepared in "
                f"{spec.data_dir or 'the default TFDS data directory'} and "
                f"could not be downloaded or built ({type(error).__name__}: "
                f"{str(error)[:300]}). Prepare it with `tfds build "
                f"{spec.name}` and pass --data_dir.") from None
    if builder.info.splits and split not in builder.info.splits:
        raise ValueError(f"TFDS dataset {spec.name!r} has no split "
                         f"{split!r}; it has {', '.join(builder.info.splits)}.")
    return builder.as_dataset(split=split)


def build_tokenizer(spec, hp, train_pairs, model_dir, resume=False):
    """The joint vocabulary: loaded on resume, else learnt into `model_dir`.

    Learnt from the source and target sentences of `train_pairs` (at most
    `TOKENIZER_MAX_SENTENCES` sentences) with the hparams' size and model
    type; digits are split for the numbers task. Learning is deterministic,
    so every worker of a multi-worker run learns the same vocabulary.

    Args:
        spec: DatasetSpec.
        hp: HParams.
        train_pairs: the training split (`load_split`).
        model_dir: str. Where `spm.model` is read (resume) or written.
        resume: bool. Load `model_dir/spm.model` instead of learning it.
    """
    if resume:
        return data_lib.load_tokenizer(model_dir)

    def sentences():
        limit = TOKENIZER_MAX_SENTENCES // 2
        if spec.kind == "numbers":
            # Its 40-odd pieces all occur in a few thousand pairs; the
            # whole split would only slow the trainer down.
            limit = NUMBERS_TOKENIZER_PAIRS
        # Batched: iterating scalar elements costs about 1 ms each.
        for batch in train_pairs.take(limit).batch(4096).as_numpy_iterator():
            for source, target in zip(batch["inputs"], batch["targets"]):
                yield source.decode("utf-8")
                yield target.decode("utf-8")

    logging.info("Learning a %d-piece %s vocabulary from %s.",
                 hp.vocab_size, hp.tokenizer_model_type, spec)
    return data_lib.train_tokenizer(
        sentences(), model_dir, vocab_size=hp.vocab_size,
        model_type=hp.tokenizer_model_type,
        split_digits=spec.kind == "numbers")


# ----------------------------------------------------------------------
# Hparams on disk.

def hparams_path(model_dir):
    return os.path.join(str(model_dir), HPARAMS_FILENAME)


def load_saved_hparams(model_dir):
    """The hparams saved in `model_dir`, or None when there are none."""
    path = hparams_path(model_dir)
    if not tf.io.gfile.exists(path):
        return None
    with tf.io.gfile.GFile(path, "r") as f:
        try:
            return hparams_lib.from_json(f.read())
        except ValueError as error:
            raise ValueError(f"{path}: {error}") from None


def resolve_hparams(model_dir, requested=None):
    """The hparams a run in `model_dir` uses.

    - No checkpoint yet (nothing trained, nothing to lose): `requested`, or
      the saved ones when `requested` is None.
    - A checkpoint: the saved ones. `requested`, when given, must agree with
      them in every field outside `hparams.RESUMABLE_FIELDS`; the requested
      resumable fields (e.g. a longer `train_steps`) are taken.

    Raises:
        ValueError: no hparams at all, a checkpoint without saved hparams,
            or fields that differ (listed with both values).
    """
    model_dir = str(model_dir)
    saved = load_saved_hparams(model_dir)
    if tf.train.latest_checkpoint(model_dir) is None:
        if requested is None and saved is None:
            raise ValueError(
                f"{hparams_path(model_dir)} does not exist: name a hparams "
                "set for a new run (--hparams=NAME; known sets: "
                + ", ".join(hparams_lib.names()) + ").")
        return requested or saved
    if saved is None:
        raise ValueError(
            f"{model_dir} holds checkpoints but no {HPARAMS_FILENAME}: its "
            "hparams are unknown, so it cannot be resumed. Train in a new "
            "--model_dir.")
    if requested is None:
        return saved
    differing = hparams_lib.differences(
        saved, requested, ignore=hparams_lib.RESUMABLE_FIELDS)
    if differing:
        listed = "; ".join(
            f"{n}: saved {getattr(saved, n)!r}, requested "
            f"{getattr(requested, n)!r}" for n in differing)
        raise ValueError(
            f"The hparams requested for {model_dir} differ from those it was "
            f"trained with ({hparams_path(model_dir)}) in: {listed}. Resume "
            "with the saved hparams (omit --hparams, or pass the same set and "
            "overrides), or train in a new --model_dir.")
    changes = {n: getattr(requested, n) for n in hparams_lib.RESUMABLE_FIELDS}
    return dataclasses.replace(saved, **changes)


def _write_text(path, text):
    tmp = f"{path}.tmp"
    with tf.io.gfile.GFile(tmp, "w") as f:
        f.write(text)
    tf.io.gfile.rename(tmp, path, overwrite=True)


# ----------------------------------------------------------------------
# Model and optimizer.

def learning_rate_schedule(hp):
    """The hparams' learning rate: a float or a `NoamSchedule`."""
    if hp.learning_rate_schedule == "constant":
        return hp.learning_rate
    return schedules.NoamSchedule(
        num_units=hp.num_units, warmup_steps=hp.warmup_steps,
        peak_learning_rate=hp.learning_rate, scale=hp.learning_rate_scale)


def build_model(hp, vocab_size, seed=None, mixed_precision=None):
    """A built `Transformer` for the hparams (call it in a strategy scope)."""
    model = Transformer(**hparams_lib.model_kwargs(hp, vocab_size), seed=seed,
                        dtype=mixed_precision or "float32")
    dummy = tf.ones([1, 2], tf.int32)
    model({"source": dummy, "target_in": dummy}, training=False)
    return model


def build_optimizer(hp, model, mixed_precision=None):
    """Adam with the hparams' betas, epsilon and schedule, built for `model`.

    Under `mixed_float16` it is wrapped in a `LossScaleOptimizer`.
    """
    optimizer = keras.optimizers.Adam(
        learning_rate=learning_rate_schedule(hp), beta_1=hp.adam_beta1,
        beta_2=hp.adam_beta2, epsilon=hp.adam_epsilon)
    if mixed_precision == "mixed_float16":
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    optimizer.build(model.trainable_variables)
    return optimizer


def model_weights(model):
    """The model's weights by Keras path, for `tf.train.Checkpoint`.

    `tf.train.Checkpoint(model=model)` does not reach sublayers that a Keras
    3 layer holds in a list (the encoder's and decoder's blocks): Keras
    tracks such lists itself and hides them from TensorFlow's checkpoint
    graph, so those weights would be saved only through the optimizer's
    slots and lost when restoring the model alone. Checkpointing this dict
    names every weight explicitly, by its path below the model (without the
    model's own name, which Keras numbers per process: `transformer_1`).
    """
    return {weight.path.split("/", 1)[1]: weight for weight in model.weights}


def _current_learning_rate(optimizer):
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    rate = inner.learning_rate
    return float(rate.numpy() if hasattr(rate, "numpy") else rate)


def _weights_finite(model):
    return all(bool(tf.reduce_all(tf.math.is_finite(
        tf.convert_to_tensor(v)))) for v in model.trainable_variables)


# ----------------------------------------------------------------------
# Input.

def per_replica_batch(hp, replicas):
    """Each replica's share of the hparams' global batch.

    Args:
        hp: HParams with `batch_size` (sentences) or `tokens_per_batch`.
        replicas: int. `strategy.num_replicas_in_sync`.

    Returns:
        (batch_size, tokens_per_batch) for one replica; one of them is None.
        A token budget is divided and rounded down, but never below one
        sentence of `max_train_length` tokens.

    Raises:
        ValueError: `batch_size` is not a multiple of `replicas` (the
            replicas would not add up to the global batch).
    """
    if hp.batch_size:
        if hp.batch_size % replicas:
            raise ValueError(
                f"The global batch_size={hp.batch_size} is not divisible by "
                f"the strategy's {replicas} replicas. Choose a multiple of "
                f"{replicas}, e.g. --hparams_overrides=batch_size="
                f"{max(replicas, hp.batch_size // replicas * replicas)}.")
        return hp.batch_size // replicas, None
    return None, max(hp.max_train_length, hp.tokens_per_batch // replicas)


def _distributed_batches(strategy, hp, tokenizer, spec, seed, static_shapes):
    """Repeated, per-replica bucketed batches of the training split.

    Sharding policy: each input pipeline (one per worker) reads every
    `num_input_pipelines`-th pair from its `input_pipeline_id` on (a
    `Dataset.shard` of the records, so workers never share a pair), and
    each replica gets its `per_replica_batch` of the global batch.
    """
    batch_size, tokens = per_replica_batch(hp, strategy.num_replicas_in_sync)

    def dataset_fn(context):
        pairs = load_split(spec, "train")
        if context.num_input_pipelines > 1:
            pairs = pairs.shard(context.num_input_pipelines,
                                context.input_pipeline_id)
        return data_lib.make_batches(
            pairs.repeat(), tokenizer, max_length=hp.max_train_length,
            batch_size=batch_size, tokens_per_batch=tokens,
            shuffle_buffer_size=hp.shuffle_buffer_size,
            seed=seed + 1009 * context.input_pipeline_id,
            pad_to_max_length=static_shapes, drop_remainder=static_shapes)

    return strategy.distribute_datasets_from_function(dataset_fn)


def steps_per_epoch(hp, tokenizer, spec):
    """Batches in one pass over the training split (global batches)."""
    batches = data_lib.make_batches(
        load_split(spec, "train"), tokenizer, max_length=hp.max_train_length,
        batch_size=hp.batch_size, tokens_per_batch=hp.tokens_per_batch)
    return int(batches.reduce(np.int64(0), lambda n, _: n + 1))


# ----------------------------------------------------------------------
# The loop.

@dataclasses.dataclass
class TrainResult:
    """What `train` returns.

    Attributes:
        step: int. The step training ended at.
        start_step: int. The step it started (or resumed) from.
        loss: float or None. Mean loss over the last logging interval.
        accuracy: float or None. Token accuracy over that interval.
        tokens_per_second: float or None. Target tokens per second.
        checkpoint: str or None. The last checkpoint saved.
        hparams: HParams. The hparams used.
        model: Transformer. The trained model.
        tokenizer: SubwordTokenizer.
        seconds: float. Wall time of the training loop.
    """

    step: int
    start_step: int
    loss: float | None
    accuracy: float | None
    tokens_per_second: float | None
    checkpoint: str | None
    hparams: object
    model: object
    tokenizer: object
    seconds: float


def train(hparams, dataset, model_dir, strategy=None, steps=None,
          epochs=None, mixed_precision=None, jit_compile=False, seed=0,
          verbose=1, on_step_end=None):
    """Trains (or resumes training of) a Transformer in `model_dir`.

    Args:
        hparams: HParams or None. None resumes with `model_dir`'s saved
            hparams; otherwise they must agree with the saved ones (see
            `resolve_hparams`).
        dataset: DatasetSpec or spec string (`parse_dataset_spec`).
        model_dir: str. Checkpoints, vocabulary, hparams and logs.
        strategy: a `tf.distribute.Strategy` or None (the default one).
        steps: int or None. Train until this step; overrides the hparams'
            `train_steps` / `train_epochs`.
        epochs: int or None. Train for this many passes over the training
            split (counted in global batches); not with `steps`.
        mixed_precision: None, `"mixed_float16"` (with loss scaling) or
            `"mixed_bfloat16"`.
        jit_compile: bool. Compile the forward and backward pass with XLA;
            batches are then padded to `max_train_length` so shapes are
            static (also done on TPUs).
        seed: int. Weight initialisation, dropout and data order.
        verbose: int. 1 shows a progress bar; 0 logs only.
        on_step_end: callable(step, logs) or None. Called after every step
            (and after its checkpoint, if one is due); `logs` holds the
            step's `loss` tensor. Raising from it interrupts training.

    Returns:
        A `TrainResult`.

    Raises:
        ValueError, FileNotFoundError: bad arguments or missing data, before
            anything is written.
        NonFiniteLossError: the loss became NaN or infinite.
        TrainingPreempted: SIGTERM arrived; a checkpoint was saved at the
            step it stopped at.
    """
    started = time.time()
    model_dir = str(model_dir)
    strategy = strategy or tf.distribute.get_strategy()
    if isinstance(dataset, str):
        dataset = parse_dataset_spec(dataset)
    if mixed_precision not in MIXED_PRECISION:
        raise ValueError(
            "Received an invalid value for argument `mixed_precision`, "
            "expected one of None, 'mixed_float16', 'mixed_bfloat16'. "
            f"Received: mixed_precision={mixed_precision!r}")
    if steps is not None and epochs is not None:
        raise ValueError("Give at most one of `steps` and `epochs`. "
                         f"Received: steps={steps}, epochs={epochs}")
    for name, value in (("steps", steps), ("epochs", epochs)):
        if value is not None and (isinstance(value, bool) or not isinstance(
                value, int) or value < 1):
            raise ValueError(f"Received an invalid value for argument "
                             f"`{name}`, expected a positive int. Received: "
                             f"{name}={value!r}")
    # Everything that can fail on bad input fails here, before any write.
    hp = resolve_hparams(model_dir, hparams)
    if steps is not None or epochs is not None:
        hp = dataclasses.replace(hp, train_steps=steps, train_epochs=epochs)
    per_replica_batch(hp, strategy.num_replicas_in_sync)
    check_dataset(dataset)
    train_pairs = load_split(dataset, "train")
    latest = tf.train.latest_checkpoint(model_dir)
    chief = is_chief(strategy)
    write_dir = model_dir if chief else _worker_dir(model_dir, strategy)

    # Seed before the tokenizer exists: `tf.random.set_seed` clears the eager
    # kernel cache, which deletes the SentencePiece op's resource.
    keras.utils.set_random_seed(seed)
    tf.io.gfile.makedirs(write_dir)
    tokenizer = build_tokenizer(dataset, hp, train_pairs,
                                model_dir if latest else write_dir,
                                resume=latest is not None)
    if chief:
        _write_text(hparams_path(model_dir), hparams_lib.to_json(hp))
    total_steps = hp.train_steps or hp.train_epochs * steps_per_epoch(
        hp, tokenizer, dataset)

    model, optimizer, step, train_step = build_trainer(
        strategy, hp, tokenizer.vocab_size, seed, mixed_precision,
        jit_compile)
    checkpoint = tf.train.Checkpoint(model=model_weights(model),
                                     optimizer=optimizer, step=step)
    manager = tf.train.CheckpointManager(
        checkpoint, write_dir, max_to_keep=hp.keep_checkpoints,
        checkpoint_name=CHECKPOINT_NAME, step_counter=step)
    if latest:
        checkpoint.restore(latest).assert_existing_objects_matched()
        logging.info("Restored %s: resuming at step %d.", latest,
                     int(step.numpy()))
    start_step = int(step.numpy())
    if start_step >= total_steps:
        logging.info("Already trained to step %d (target %d): nothing to do.",
                     start_step, total_steps)
        return TrainResult(start_step, start_step, None, None, None, latest,
                           hp, model, tokenizer, time.time() - started)

    static = jit_compile or isinstance(strategy, tf.distribute.TPUStrategy)
    iterator = iter(_distributed_batches(
        strategy, hp, tokenizer, dataset, seed + start_step, static))
    writer = (tf.summary.create_file_writer(
        os.path.join(model_dir, SUMMARY_DIRNAME)) if chief
        else tf.summary.create_noop_writer())
    # Counts the steps of this session (a resumed run starts at 0).
    progbar = (keras.utils.Progbar(total_steps - start_step,
                                   stateful_metrics=["loss", "accuracy"])
               if verbose and chief else None)
    logging.info("Training %s on %s from step %d to %d in %s (%d replica(s), "
                 "%s).", hp.flavor, dataset, start_step, total_steps,
                 model_dir, strategy.num_replicas_in_sync,
                 mixed_precision or "float32")

    saved = latest
    pending = []  # (step, loss, tokens, correct) tensors not yet read.
    interval = dict(loss=0.0, tokens=0.0, correct=0.0, start=time.time())
    last = dict(loss=None, accuracy=None, tokens_per_second=None)

    def flush():
        """Reads pending results; raises on the first non-finite loss."""
        for at, loss, tokens, correct in pending:
            loss, tokens = float(loss), float(tokens)
            if not np.isfinite(loss):
                raise NonFiniteLossError(at, "loss", saved)
            interval["loss"] += loss * tokens
            interval["tokens"] += tokens
            interval["correct"] += float(correct)
        pending.clear()

    def log(at):
        flush()
        seconds = max(time.time() - interval["start"], 1e-9)
        tokens = max(interval["tokens"], 1.0)
        last.update(loss=interval["loss"] / tokens,
                    accuracy=interval["correct"] / tokens,
                    tokens_per_second=interval["tokens"] / seconds)
        rate = _current_learning_rate(optimizer)
        with writer.as_default(step=at):
            for tag in ("loss", "accuracy", "tokens_per_second"):
                _summary(tag, last[tag])
            _summary("learning_rate", rate)
        writer.flush()
        if progbar is not None:
            progbar.update(at - start_step, [
                ("loss", last["loss"]),
                ("accuracy", last["accuracy"])])
        else:
            logging.info("step %d: loss %.4f, accuracy %.4f, %.0f tokens/s, "
                         "learning rate %.3g", at, last["loss"],
                         last["accuracy"], last["tokens_per_second"], rate)
        interval.update(loss=0.0, tokens=0.0, correct=0.0, start=time.time())

    def save(at):
        nonlocal saved
        flush()
        if not _weights_finite(model):
            raise NonFiniteLossError(at, "weights", saved)
        path = manager.save(checkpoint_number=at)
        if chief:
            saved = path

    with writer.as_default(step=start_step):
        _summary("hparams", hparams_lib.to_json(hp), plugin="text")
    # Workers must agree on the step they stop at: they read the all-reduced
    # request (a host sync per step); one process reads its own flag.
    shared_stop = _num_workers(strategy) > 1
    at = start_step
    with _StopRequest() as stop_request:
        while at < total_steps:
            loss, tokens, correct, stop = train_step(
                iterator, tf.constant(float(stop_request.requested)))
            at += 1
            pending.append((at, loss, tokens, correct))
            stopping = (bool(stop > 0) if shared_stop
                        else stop_request.requested)
            if (at % hp.log_every_steps == 0 or at == total_steps
                    or stopping):
                log(at)
            if (at % hp.checkpoint_every_steps == 0 or at == total_steps
                    or stopping):
                save(at)
            if stopping:
                logging.warning("Stopped on SIGTERM at step %d; saved %s.",
                                at, saved)
                raise TrainingPreempted(at, saved if chief else None)
            if on_step_end is not None:
                on_step_end(at, {"loss": loss})
    flush()
    if not chief:
        tf.io.gfile.rmtree(write_dir)
        parent = os.path.dirname(write_dir)
        try:  # The last worker out removes the shared parent.
            if not tf.io.gfile.listdir(parent):
                tf.io.gfile.rmtree(parent)
        except tf.errors.OpError:
            pass  # Another worker removed it first.
    seconds = time.time() - started
    logging.info("Trained to step %d in %.1f s; last checkpoint %s.", at,
                 seconds, saved)
    return TrainResult(at, start_step, last["loss"], last["accuracy"],
                       last["tokens_per_second"], saved, hp, model,
                       tokenizer, seconds)


def load_pairs(spec, split, limit=None):
    """A split as a list of (source, target) str pairs (at most `limit`)."""
    dataset = load_split(spec, split)
    if limit is not None:
        dataset = dataset.take(limit)
    pairs = []
    # Batched: iterating scalar elements costs about 1 ms each.
    for batch in dataset.batch(4096).as_numpy_iterator():
        pairs += [(s.decode("utf-8"), t.decode("utf-8"))
                  for s, t in zip(batch["inputs"], batch["targets"])]
    return pairs


def restore_model(model_dir, average_last=1):
    """The model of `model_dir`'s latest checkpoint(s), for inference.

    Args:
        model_dir: str.
        average_last: int. Average the weights of the last this many
            checkpoints that `model_dir` keeps (the paper averages the last
            5 of a base run, §6.1); 1 takes the latest alone.

    Returns:
        (model, tokenizer, hparams): a built `Transformer` holding the
        checkpoint's (or average's) weights, its `SubwordTokenizer` and its
        HParams.

    Raises:
        FileNotFoundError: no hparams, vocabulary or checkpoint there.
        ValueError: `average_last` is not a positive int, or more than the
            checkpoints kept.
    """
    model_dir = str(model_dir)
    if (isinstance(average_last, bool) or not isinstance(average_last, int)
            or average_last < 1):
        raise ValueError(
            "Received an invalid value for argument `average_last`, expected "
            f"a positive int. Received: average_last={average_last!r}")
    hp = load_saved_hparams(model_dir)
    state = tf.train.get_checkpoint_state(model_dir)
    if hp is None or state is None or not state.model_checkpoint_path:
        raise FileNotFoundError(
            f"{model_dir} holds no trained model (hparams.json and a "
            "checkpoint); train one first (--mode=train).")
    paths = list(state.all_model_checkpoint_paths)
    if average_last > len(paths):
        raise ValueError(
            f"Cannot average the last {average_last} checkpoints: "
            f"{model_dir} keeps {len(paths)} ({', '.join(paths)}). Received: "
            f"average_last={average_last}")
    tokenizer = data_lib.load_tokenizer(model_dir)
    model = build_model(hp, tokenizer.vocab_size)
    checkpoint = tf.train.Checkpoint(model=model_weights(model))
    total = None
    for path in paths[-average_last:]:
        checkpoint.restore(path).assert_existing_objects_matched(
        ).expect_partial()
        values = [w.numpy().astype(np.float64) for w in model.weights]
        total = values if total is None else [
            t + v for t, v in zip(total, values)]
    if average_last > 1:
        for weight, value in zip(model.weights, total):
            weight.assign((value / average_last).astype(weight.dtype))
    logging.info("Restored the model of %s.", ", ".join(
        paths[-average_last:]) if average_last > 1 else paths[-1])
    return model, tokenizer, hp


def sample_translations(model, tokenizer, hp, spec, split="validation",
                        count=100):
    """Translates the first `count` pairs of a split with the hparams' search.

    Returns:
        (exact-match rate, list of (source, reference, hypothesis)).
    """
    from tfattn import evaluation

    pairs = load_pairs(spec, split, limit=count)
    hypotheses = evaluation.translate_texts(
        model, tokenizer, [s for s, _ in pairs], beam_size=hp.beam_size,
        alpha=hp.decode_alpha, extra_length=hp.decode_extra_length)
    rows = [(s, r, h) for (s, r), h in zip(pairs, hypotheses)]
    exact = float(np.mean([r == h for _, r, h in rows])) if rows else 0.0
    return exact, rows


def _summary(tag, value, plugin="scalars"):
    """Writes a TensorBoard scalar or text summary at the default step.

    `tf.summary.scalar` and `tf.summary.text` need the tensorboard package,
    which TensorFlow 2.21 no longer installs; the core `tf.summary.write`
    with the plugin's metadata writes the same event without it.
    """
    metadata = summary_pb2.SummaryMetadata(
        plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name=plugin))
    dtype = tf.string if plugin == "text" else tf.float32
    tf.summary.write(tag, tf.constant(value, dtype),
                     metadata=metadata.SerializeToString())


def _worker_dir(model_dir, strategy):
    """A scratch directory for a non-chief worker's collective saves."""
    resolver = strategy.cluster_resolver
    return os.path.join(model_dir, ".workers",
                        f"{resolver.task_type}_{resolver.task_id}")


class Trainer(NamedTuple):
    """What `build_trainer` returns."""

    model: Transformer
    optimizer: keras.optimizers.Optimizer
    step: tf.Variable
    train_step: object


def build_trainer(strategy, hp, vocab_size, seed=None, mixed_precision=None,
                  jit_compile=False):
    """The model, optimizer and step counter in `strategy`'s scope, and the
    distributed `train_step` over them (`make_train_step`).

    Returns:
        A `Trainer(model, optimizer, step, train_step)`.
    """
    with strategy.scope():
        model = build_model(hp, vocab_size, seed, mixed_precision)
        optimizer = build_optimizer(hp, model, mixed_precision)
        step = tf.Variable(
            0, dtype=tf.int64, trainable=False, name="step",
            aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
    return Trainer(model, optimizer, step, make_train_step(
        strategy, model, optimizer, step, hp, mixed_precision, jit_compile))


def make_train_step(strategy, model, optimizer, step, hp, mixed_precision,
                     jit_compile):
    """The distributed training step: `train_step(iterator, stop=None)`.

    `stop` is a float scalar tensor, > 0 where this worker was asked to
    stop. Returns the global mean loss, the global number of target tokens,
    the number of them predicted correctly (argmax) and the sum of the
    workers' `stop` values, as scalars: one all-reduce of the four.
    """
    loss_scaling = mixed_precision == "mixed_float16"
    variables = model.trainable_variables

    def forward_backward(inputs, labels, global_tokens):
        with tf.GradientTape() as tape:
            logits = model(inputs, training=True)
            total, _ = losses.smoothed_cross_entropy_sum(
                labels, logits, epsilon=hp.label_smoothing)
            # This replica's share of the global mean: replicas' gradients
            # are summed, giving the gradient of the mean over all tokens.
            loss = total / (global_tokens + hp.loss_denominator_epsilon)
            scaled = optimizer.scale_loss(loss) if loss_scaling else loss
        grads = tape.gradient(scaled, variables)
        hits = tf.logical_and(
            tf.equal(tf.argmax(logits, -1, output_type=tf.int32), labels),
            tf.not_equal(labels, data_lib.PAD_ID))
        return loss, grads, tf.reduce_sum(tf.cast(hits, tf.float32))

    if jit_compile:
        forward_backward = tf.function(forward_backward, jit_compile=True)

    def replica_step(inputs, labels, stop):
        context = tf.distribute.get_replica_context()
        tokens = tf.reduce_sum(tf.cast(
            tf.not_equal(labels, data_lib.PAD_ID), tf.float32))
        global_tokens = tf.maximum(
            context.all_reduce(tf.distribute.ReduceOp.SUM, tokens), 1.0)
        loss, grads, correct = forward_backward(inputs, labels, global_tokens)
        optimizer.apply_gradients(zip(grads, variables))
        return tf.stack([tf.cast(loss, tf.float32), tokens, correct, stop])

    @tf.function
    def train_step(iterator, stop=None):
        if stop is None:
            stop = tf.constant(0.0)
        inputs, labels = next(iterator)
        results = strategy.run(replica_step, args=(inputs, labels, stop))
        totals = strategy.reduce(tf.distribute.ReduceOp.SUM, results,
                                 axis=None)
        step.assign_add(1)
        return totals[0], totals[1], totals[2], totals[3]

    return train_step


def _num_workers(strategy):
    """Worker processes of a multi-worker strategy (1 for the others)."""
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return 1
    cluster = strategy.cluster_resolver.cluster_spec().as_dict()
    return sum(len(cluster.get(task_type, ()))
               for task_type in ("chief", "worker")) or 1
