"""A training run prepared once, before anything is written.

`prepare_training(...)` does, in this order, everything that bad input or a
small machine can break, and returns a `PreparedRun` that
`training.train_prepared` runs:

1. the arguments (`steps`, `epochs`, `mixed_precision`);
2. the hparams, resolved against the model directory
   (`run_dir.resolve_hparams`: a resumed run keeps its saved ones);
3. the global batch divided among the replicas;
4. the dataset checked and its training (and validation) pairs opened;
5. the vocabulary learnt in memory, or loaded on resume;
6. the row lengths of a sample of the training pairs;
7. the memory a step needs, with the real vocabulary and lengths
   (`memory.check_training_memory`);
8. the compute precision: recorded, given, or measured
   (`precision.resolve`).
"""

import dataclasses
from typing import Optional

import keras
import tensorflow as tf

from tfattn.training import checkpoints
from tfattn.training import memory
from tfattn.training import precision
from tfattn.data import training_input
from tfattn.data.sources import build_tokenizer
from tfattn.data.sources import check_dataset
from tfattn.data.sources import load_split
from tfattn.data.sources import parse_dataset_spec
from tfattn.training.distribute import is_chief
from tfattn.training.distribute import per_replica_batch
from tfattn.training.run_dir import resolve_hparams

__all__ = [
    "MIXED_PRECISION",
    "PreparedRun",
    "check_arguments",
    "prepare_training",
]

MIXED_PRECISION = ("auto",) + precision.POLICIES


@dataclasses.dataclass(frozen=True)
class PreparedRun:
    """Everything a training run needs, checked (see the module docstring).

    Attributes:
        hparams: HParams. Resolved, with `steps` / `epochs` applied.
        dataset: DatasetSpec.
        model_dir: str.
        strategy: the `tf.distribute.Strategy`.
        seed: int.
        train_pairs: the training split (`sources.load_split`).
        validation_pairs: list of (source, target) or None. What training
            scores every `eval_every_steps` (the chief only).
        tokenizer: SubwordTokenizer. Learnt in memory, or loaded.
        resume: bool. The model directory holds checkpoints.
        static_shapes: bool. Batches padded to `max_train_length` (XLA,
            TPUs).
        lengths: training_input.LengthSample.
        memory: memory.MemoryEstimate of one replica's largest batch, in
            the chosen precision.
        precision: precision.PrecisionChoice.
    """

    hparams: object
    dataset: object
    model_dir: str
    strategy: object
    seed: int
    train_pairs: object
    validation_pairs: Optional[list]
    tokenizer: object
    resume: bool
    static_shapes: bool
    lengths: training_input.LengthSample
    memory: memory.MemoryEstimate
    precision: precision.PrecisionChoice


def check_arguments(steps, epochs, mixed_precision):
    """Raises ValueError naming a bad `steps`, `epochs` or
    `mixed_precision`.

    Args:
        steps: int or None. Must be a positive int when given.
        epochs: int or None. Must be a positive int when given; not with
            `steps`.
        mixed_precision: one of `MIXED_PRECISION` (`"auto"`, None or a
            Keras mixed policy name).

    Raises:
        ValueError: naming the first bad argument.
    """
    if mixed_precision not in MIXED_PRECISION:
        raise ValueError(
            "Received an invalid value for argument `mixed_precision`, "
            "expected one of 'auto', None, 'mixed_float16', "
            f"'mixed_bfloat16'. Received: mixed_precision={mixed_precision!r}")
    if steps is not None and epochs is not None:
        raise ValueError("Give at most one of `steps` and `epochs`. "
                         f"Received: steps={steps}, epochs={epochs}")
    for name, value in (("steps", steps), ("epochs", epochs)):
        if value is not None and (isinstance(value, bool) or not isinstance(
                value, int) or value < 1):
            raise ValueError(f"Received an invalid value for argument "
                             f"`{name}`, expected a positive int. Received: "
                             f"{name}={value!r}")


def prepare_training(hparams, dataset, model_dir, strategy=None, steps=None,
                     epochs=None, mixed_precision=None, jit_compile=False,
                     seed=0):
    """Prepares a training run (see the module docstring); writes nothing.

    Args:
        hparams: HParams or None. None resumes with `model_dir`'s saved
            hparams (see `run_dir.resolve_hparams`).
        dataset: DatasetSpec or spec string (`parse_dataset_spec`).
        model_dir: str or path-like. The run's directory.
        strategy: a `tf.distribute.Strategy` or None (the default one).
        steps: int or None. Train until this step.
        epochs: int or None. Train for this many passes; not with `steps`.
        mixed_precision: None, `"mixed_float16"`, `"mixed_bfloat16"` or
            `"auto"` (`precision.resolve`).
        jit_compile: bool. XLA; batches are then padded to
            `max_train_length`.
        seed: int. Seeds Keras, TensorFlow and NumPy here, and the run.

    Returns:
        A `PreparedRun`.

    Raises:
        ValueError, FileNotFoundError: bad arguments, hparams or data.
        memory.InsufficientMemory: the step cannot fit in this machine.
    """
    model_dir = str(model_dir)
    strategy = strategy or tf.distribute.get_strategy()
    if isinstance(dataset, str):
        dataset = parse_dataset_spec(dataset)
    check_arguments(steps, epochs, mixed_precision)
    hp = resolve_hparams(model_dir, hparams)
    if steps is not None or epochs is not None:
        hp = dataclasses.replace(hp, train_steps=steps, train_epochs=epochs)
    replicas = strategy.num_replicas_in_sync
    per_replica_batch(hp, replicas)
    check_dataset(dataset)
    train_pairs = load_split(dataset, "train")
    validation_pairs = (training_input.validation_pairs(dataset, hp)
                        if hp.eval_every_steps and is_chief(strategy)
                        else None)
    resume = checkpoints.exist(model_dir)
    # Seed before the tokenizer exists: `tf.random.set_seed` clears the eager
    # kernel cache, which deletes the SentencePiece op's resource.
    keras.utils.set_random_seed(seed)
    # Learnt in memory: a vocabulary the corpus cannot support fails here,
    # before anything is written.
    tokenizer = build_tokenizer(dataset, hp, train_pairs,
                                model_dir if resume else None, resume=resume)
    # Sized as training tokenizes: sampled segmentations are longer.
    lengths = training_input.sample_lengths(
        train_pairs, training_input.training_tokenizer(tokenizer, hp),
        hp.max_train_length)
    static = jit_compile or isinstance(strategy, tf.distribute.TPUStrategy)
    longest = hp.max_train_length if static else lengths.longest
    # Before the precision is chosen: float32's, unless one was given.
    memory.check_training_memory(
        hp, tokenizer.vocab_size, longest, replicas,
        policy=None if mixed_precision == "auto" else mixed_precision)
    choice = precision.resolve(mixed_precision, hp, tokenizer.vocab_size,
                               lengths.mean, model_dir)
    estimate = memory.training_memory(
        hp, tokenizer.vocab_size,
        *memory.batch_shape(hp, longest, replicas), choice.policy)
    return PreparedRun(hp, dataset, model_dir, strategy, seed, train_pairs,
                       validation_pairs, tokenizer, resume, static, lengths,
                       estimate, choice)
