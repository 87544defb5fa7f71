"""The model of a run: built from its hparams, checkpointed by weight path,
and restored from its model directory (`tfattn.training.run_dir`).

- `build_model`: a built `Transformer`, `CausalLM` or `MaskedLM` for the
  hparams' task.
- `model_weights`: the weights `tf.train.Checkpoint` saves and restores.
- `restore_model`: the model of the latest checkpoint, or the average of
  the last N, with its tokenizer and hparams.
- `pretrained_architecture(config, weights)`: while it is held,
  `build_model` builds a pretrained checkpoint's architecture (and loads
  its weights) instead of the hparams' (a run started from a checkpoint,
  `tfattn.interop.pretrained`).
"""

import contextlib

import keras
import numpy as np
import tensorflow as tf
from absl import logging

from tfattn import config
from tfattn.data.tokenizer import load_tokenizer
from tfattn.models import CausalLM
from tfattn.models import MaskedLM
from tfattn.models import Transformer
from tfattn.training import checkpoints
from tfattn.training.run_dir import load_saved_hparams

__all__ = [
    "pretrained_architecture",
    "build_model",
    "model_weights",
    "restore_model",
]


_architecture = []  # The held (config, weights or None), innermost last.


@contextlib.contextmanager
def pretrained_architecture(config, weights=None):
    """While held, `build_model` builds the model of a Keras config (a
    pretrained checkpoint's architecture, which HParams cannot express)
    and, given `weights`, sets them.

    Args:
        config: dict. `keras.saving.serialize_keras_object(model)`.
        weights: list of arrays or None. The checkpoint's weights, in the
            model's `weights` order; None keeps the new initialisation
            (a resumed run restores its checkpoint over it).

    Yields:
        None.
    """
    _architecture.append((config, weights))
    try:
        yield
    finally:
        _architecture.pop()


def _pretrained_model(vocab_size, mixed_precision):
    config, weights = _architecture[-1]
    config = dict(config, config=dict(config["config"]))
    config["config"]["dtype"] = mixed_precision or "float32"
    model = keras.saving.deserialize_keras_object(config)
    if model.get_config().get("vocab_size", model.get_config().get(
            "source_vocab_size")) != vocab_size:
        raise ValueError(
            f"The pretrained model's vocabulary differs from the tokenizer's "
            f"({vocab_size}). Received: vocab_size={vocab_size}")
    dummy = tf.ones([1, 2], tf.int32)
    if isinstance(model, MaskedLM):
        model({"token_ids": dummy, "mask_positions": dummy}, training=False)
    else:
        model({"source": dummy, "target_in": dummy}, training=False)
    if weights is not None:
        for variable, value in zip(model.weights, weights):
            variable.assign(tf.cast(value, variable.dtype))
    return model


def build_model(hp, vocab_size, seed=None, mixed_precision=None):
    """A built model for the hparams (call it in a strategy scope): a
    `Transformer` (task "translation"), a `CausalLM` ("language_model") or a
    `MaskedLM` ("masked_lm").

    Args:
        hp: HParams.
        vocab_size: int. The trained tokenizer's size (source and target).
        seed: int or None. Seeds the weight initialisation and dropout.
        mixed_precision: str or None. The Keras dtype policy name (e.g.
            `"mixed_bfloat16"`); None is float32.

    Returns:
        Transformer, CausalLM or MaskedLM. Built by a call on a dummy batch
        (inside `pretrained_architecture`: the pretrained model).
    """
    if _architecture:
        return _pretrained_model(vocab_size, mixed_precision)
    model_class = {"language_model": CausalLM,
                   "masked_lm": MaskedLM}.get(hp.task, Transformer)
    model = model_class(**config.model_kwargs(hp, vocab_size), seed=seed,
                        dtype=mixed_precision or "float32")
    dummy = tf.ones([1, 2], tf.int32)
    if hp.task == "masked_lm":
        model({"token_ids": dummy, "mask_positions": dummy}, training=False)
    else:
        model({"source": dummy, "target_in": dummy}, training=False)
    return model


def model_weights(model):
    """The model's weights by Keras path, for `tf.train.Checkpoint`.

    `tf.train.Checkpoint(model=model)` does not reach sublayers that a Keras
    3 layer holds in a list (the encoder's and decoder's blocks): Keras
    tracks such lists itself and hides them from TensorFlow's checkpoint
    graph, so those weights would be saved only through the optimizer's
    slots and lost when restoring the model alone. Checkpointing this dict
    names every weight explicitly, by its path below the model (without the
    model's own name, which Keras numbers per process: `transformer_1`).

    Args:
        model: a built `keras.Model`.

    Returns:
        dict of weight path (below the model) to variable.
    """
    return {weight.path.split("/", 1)[1]: weight for weight in model.weights}


def restore_model(model_dir, average_last=1):
    """The model of `model_dir`'s latest checkpoint(s), for inference.

    Args:
        model_dir: str.
        average_last: int. Average the weights of the last this many
            checkpoints that `model_dir` keeps (the paper averages the last
            5 of a base run, §6.1); 1 takes the latest alone.

    Returns:
        (model, tokenizer, hparams): a built `Transformer` holding the
        checkpoint's (or average's) weights, its `SubwordTokenizer` (a run
        started from a pretrained checkpoint: that checkpoint's
        architecture and tokenizer, `tfattn.interop.pretrained`) and its
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
    newest = checkpoints.latest(model_dir) if hp is not None else None
    if newest is None:
        raise FileNotFoundError(
            f"{model_dir} holds no trained model (hparams.json and a "
            "checkpoint); train one first (--mode=train).")
    paths = [p for p in checkpoints.all_checkpoints(model_dir)
             if checkpoints.step_of(p) <= checkpoints.step_of(newest)]
    if average_last > len(paths):
        raise ValueError(
            f"Cannot average the last {average_last} checkpoints: "
            f"{model_dir} keeps {len(paths)} ({', '.join(paths)}). Received: "
            f"average_last={average_last}")
    from tfattn.interop import pretrained
    started_from = pretrained.load_from_run(model_dir)
    if started_from is None:
        tokenizer = load_tokenizer(model_dir)
        model = build_model(hp, tokenizer.vocab_size)
    else:
        architecture, tokenizer, _ = started_from
        with pretrained_architecture(architecture):
            model = build_model(hp, tokenizer.vocab_size)
    checkpoint = tf.train.Checkpoint(model=model_weights(model))
    total = None
    for path in paths[-average_last:]:
        problem = path != newest and checkpoints.unreadable(path)
        if problem:
            raise ValueError(f"Cannot average the last {average_last} "
                             f"checkpoints: {path} does not read back "
                             f"({problem}). Received: average_last="
                             f"{average_last}")
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
