"""`train.py --init_from=DIR`: a training run that starts from a pretrained
checkpoint (`tfattn.interop.pretrained`: a Hugging Face GPT-2, Marian or
BERT masked-LM directory, a keras-hub GPT-2 or BertMaskedLM preset) instead
of a random model and a new SentencePiece vocabulary.

- The model is the checkpoint's (its architecture and weights), the
  vocabulary its tokenizer; the hparams set gives the training fields, and
  its architecture fields are replaced by the checkpoint's
  (`pretrained.architecture_fields`): an explicit `--hparams_overrides`
  value that differs is refused (`checks.check_init_from`).
- The run directory keeps the checkpoint's tokenizer and architecture
  (`pretrained.save_to_run`), so the run resumes (with or without
  `--init_from`), evaluates and exports like any other.

- `checkpoint_hparams(command)`: the command with the checkpoint's fields
  in its hparams, after the refusals.
- `start_of(command)`: what the run starts from, or None.
- `prepare(command, strategy, start)`: the `preparation.PreparedRun`.
- `training(command, start)`: the context the training loop runs in.
"""

import collections
import contextlib
import dataclasses

import keras
import tensorflow as tf

from tfattn.cli import checks
from tfattn.data import training_input
from tfattn.data.sources import check_dataset
from tfattn.data.sources import load_split
from tfattn.interop import pretrained
from tfattn.training import checkpoints
from tfattn.training import memory
from tfattn.training import model_io
from tfattn.training import precision
from tfattn.training import preparation
from tfattn.training import run_dir
from tfattn.training.distribute import is_chief
from tfattn.training.distribute import per_replica_batch

__all__ = ["Start", "checkpoint_hparams", "start_of", "prepare", "training"]

Start = collections.namedtuple(
    "Start", ["architecture", "tokenizer", "weights", "kind", "source"])
Start.__doc__ = """What a run from a checkpoint starts with: the model's
Keras config, its tokenizer, its weights (None when the run directory's
checkpoint is restored over them), the checkpoint's kind and directory."""


def _describe(directory):
    try:
        return pretrained.describe(directory)
    except ValueError as error:
        return str(error)


def checkpoint_hparams(command):
    """`command` with the checkpoint's architecture fields in its hparams.

    Args:
        command: commands.Command. A training mode's, with `init_from`.

    Returns:
        commands.Command. Unchanged without `init_from` (or without a
        requested set: a resumed run's saved hparams hold the fields).

    Raises:
        errors.UsageError: `checks.check_init_from`'s refusals.
    """
    if not command.init_from:
        return command
    described = _describe(command.init_from)
    fields = {}
    if not isinstance(described, str):
        try:
            fields = pretrained.architecture_fields(
                pretrained.load(command.init_from)[0])
        except (ValueError, OSError) as error:
            described = str(error).rstrip(".")
    record = pretrained.load_from_run(command.model_dir)
    checks.check_init_from(command, described, fields,
                           record and record[2]["kind"])
    if command.hparams is None:
        return command
    try:
        hp = dataclasses.replace(command.hparams, **fields)
    except ValueError as error:
        fixed = ", ".join(f"{k}={v!r}" for k, v in fields.items())
        raise checks.errors.UsageError(
            f"{checks.flag_shown('init_from', command.init_from)}: with the "
            f"checkpoint's {fixed} the hparams do not hold ({error}); "
            "adjust --hparams_overrides.") from None
    return dataclasses.replace(command, hparams=hp)


def start_of(command):
    """What the run of `command` starts from, or None for a run that did
    not start from a checkpoint.

    Args:
        command: commands.Command.

    Returns:
        Start or None. With `--init_from`: the checkpoint's model and
        tokenizer (weights None once the run directory holds a
        checkpoint); without it, a run directory started from one: its
        recorded architecture and tokenizer.
    """
    record = pretrained.load_from_run(command.model_dir)
    resumed = checkpoints.exist(command.model_dir)
    source = command.init_from or (record and record[2]["source"])
    if not source:
        return None
    if record is not None and (resumed or not command.init_from):
        architecture, tokenizer, info = record
        weights = None
        if not resumed:  # Stopped before its first checkpoint.
            weights = pretrained.load(info["source"])[0].get_weights()
        return Start(architecture, tokenizer, weights, info["kind"], source)
    model, tokenizer = pretrained.load(source)
    return Start(keras.saving.serialize_keras_object(model), tokenizer,
                 None if resumed else model.get_weights(),
                 pretrained.describe(source).kind, source)


def prepare(command, strategy, start):
    """`preparation.prepare_training` with the checkpoint's tokenizer (no
    vocabulary is learnt); writes nothing.

    Args:
        command: commands.Command. The (checked) training command.
        strategy: tf.distribute.Strategy.
        start: Start. What `start_of` returned.

    Returns:
        preparation.PreparedRun. Its `resume` is True: the vocabulary is
        the checkpoint's, written by `training`, never learnt.
    """
    model_dir, seed = str(command.model_dir), command.seed
    dataset = command.dataset
    preparation.check_arguments(command.train_steps, command.train_epochs,
                                command.mixed_precision)
    hp = run_dir.resolve_hparams(model_dir, command.hparams)
    if command.train_steps or command.train_epochs:
        hp = dataclasses.replace(hp, train_steps=command.train_steps,
                                 train_epochs=command.train_epochs)
    replicas = strategy.num_replicas_in_sync
    per_replica_batch(hp, replicas)
    check_dataset(dataset)
    train_pairs = load_split(dataset, "train")
    validation_pairs = (training_input.validation_pairs(dataset, hp)
                        if hp.eval_every_steps and is_chief(strategy)
                        else None)
    keras.utils.set_random_seed(seed)
    # The seed clears the eager kernel cache, and with it tensorflow-text's
    # SentencePiece resource: Marian's tokenizer rebuilds its ops.
    getattr(start.tokenizer, "rebuild_graph_ops", lambda: None)()
    tokenizer = start.tokenizer
    lengths = training_input.sample_lengths(train_pairs, tokenizer,
                                            hp.max_train_length)
    static = command.jit_compile or isinstance(strategy,
                                               tf.distribute.TPUStrategy)
    longest = hp.max_train_length if static else lengths.longest
    given = command.mixed_precision
    memory.check_training_memory(
        hp, tokenizer.vocab_size, longest, replicas,
        policy=None if given == "auto" else given)
    choice = precision.resolve(given, hp, tokenizer.vocab_size,
                               lengths.mean, model_dir)
    estimate = memory.training_memory(
        hp, tokenizer.vocab_size,
        *memory.batch_shape(hp, longest, replicas), choice.policy)
    return preparation.PreparedRun(
        hp, dataset, model_dir, strategy, seed, train_pairs,
        validation_pairs, tokenizer, True, static, lengths, estimate, choice)


@contextlib.contextmanager
def training(command, start, chief=True):
    """Holds the model directory, writes the checkpoint's tokenizer and
    architecture there (a new run), and makes the training loop build the
    checkpoint's model (`model_io.pretrained_architecture`).

    Args:
        command: commands.Command.
        start: Start or None (then nothing is done).
        chief: bool. Whether this process writes the model directory.

    Yields:
        None.
    """
    if start is None:
        yield
        return
    with run_dir.hold(command.model_dir, chief):
        if chief and pretrained.load_from_run(command.model_dir) is None:
            pretrained.save_to_run(start.kind, start.source,
                                   start.architecture, start.tokenizer,
                                   command.model_dir)
        with model_io.pretrained_architecture(start.architecture,
                                              start.weights):
            yield

