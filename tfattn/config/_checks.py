"""The type and value checks of `tfattn.config.HParams` (private).

`_check_type` checks (and converts) the value of one field by its declared
type. Each other `_check_*` function takes a whole set and raises the
`ValueError` of the first value it finds that the set may not hold;
`HParams.__post_init__` runs them, in the order
`tfattn.config.hparams._check_values` fixes.
"""

import math

from tfattn.config.overrides import optional_type
from tfattn.utils.validation import invalid_argument

_CONTEXT = "HParams"


def _invalid(name, expected, received):
    return invalid_argument(name, expected, received, _CONTEXT)


def _check_type(name, value, annotation):
    kind, optional = optional_type(annotation)
    if value is None:
        if optional:
            return None
        raise _invalid(name, f"a {kind.__name__} (not None)", value)
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise _invalid(name, f"an int{' or None' if optional else ''}", value)
    if kind is float and not (isinstance(value, float)
                              and math.isfinite(value)):
        raise _invalid(name, f"a finite float{' or None' if optional else ''}",
                       value)
    if kind in (bool, str) and not isinstance(value, kind):
        raise _invalid(name, f"a {kind.__name__}", value)
    return value


def _check_ranges(hp):
    """Each field's own range: positive ints, rates in [0, 1), floats > 0 or
    >= 0, ints >= 0."""
    for name in ("num_layers", "num_units", "num_heads", "ffn_units",
                 "max_length", "vocab_size", "max_train_length",
                 "shuffle_buffer_size", "warmup_steps",
                 "checkpoint_every_steps", "keep_checkpoints",
                 "log_every_steps", "eval_sentences", "beam_size",
                 "average_checkpoints"):
        if getattr(hp, name) < 1:
            raise _invalid(name, "a positive int", getattr(hp, name))
    for name in ("batch_size", "tokens_per_batch", "train_steps",
                 "train_epochs"):
        if getattr(hp, name) is not None and getattr(hp, name) < 1:
            raise _invalid(name, "a positive int or None", getattr(hp, name))
    for name in ("dropout_rate", "attention_dropout_rate", "label_smoothing",
                 "adam_beta1", "adam_beta2", "tokenizer_sampling_alpha"):
        if not 0 <= getattr(hp, name) < 1.0:
            raise _invalid(name, "a float in [0, 1)", getattr(hp, name))
    for name in ("mask_selection_rate", "mask_token_rate",
                 "random_token_rate"):
        if not 0 <= getattr(hp, name) <= 1.0:
            raise _invalid(name, "a float in [0, 1]", getattr(hp, name))
    for name in ("adam_epsilon", "learning_rate_scale"):
        if not getattr(hp, name) > 0:
            raise _invalid(name, "a float > 0", getattr(hp, name))
    for name in ("loss_denominator_epsilon", "decode_alpha", "rdrop_alpha"):
        if getattr(hp, name) < 0:
            raise _invalid(name, "a float >= 0", getattr(hp, name))
    if hp.eval_every_steps < 0:
        raise _invalid("eval_every_steps", "an int >= 0 (0 = never)",
                       hp.eval_every_steps)
    if hp.decode_extra_length < 0:
        raise _invalid("decode_extra_length", "an int >= 0",
                       hp.decode_extra_length)


def _check_exactly_one(hp):
    """The batch's size and the training's length are each set one way."""
    for a, b in (("batch_size", "tokens_per_batch"),
                 ("train_steps", "train_epochs")):
        if (getattr(hp, a) is None) == (getattr(hp, b) is None):
            raise ValueError(
                f"{_CONTEXT}: exactly one of `{a}` and `{b}` must be set (the "
                f"other None). Received: {a}={getattr(hp, a)!r}, "
                f"{b}={getattr(hp, b)!r}"
            )


def _check_num_heads(hp):
    if hp.num_units % hp.num_heads:
        raise _invalid("num_units", f"a multiple of num_heads={hp.num_heads}",
                       hp.num_units)


def _check_learning_rate(hp):
    """A rate > 0 or None, set where the schedule needs it; cosine decays
    after its warmup."""
    if hp.learning_rate is not None and not hp.learning_rate > 0:
        raise _invalid("learning_rate", "a float > 0 or None",
                       hp.learning_rate)
    if (hp.learning_rate_schedule in ("constant", "cosine")
            and hp.learning_rate is None):
        raise _invalid("learning_rate",
                       "a float > 0 with learning_rate_schedule="
                       f"{hp.learning_rate_schedule!r}", hp.learning_rate)
    if (hp.learning_rate_schedule == "cosine" and hp.train_steps is not None
            and hp.train_steps <= hp.warmup_steps):
        raise _invalid("train_steps", "more than warmup_steps="
                       f"{hp.warmup_steps} with learning_rate_schedule="
                       "'cosine'", hp.train_steps)


def _check_flavor_layout(hp):
    """What the reference flavours fix: post-norm and the embedding layout."""
    if hp.normalize_first and hp.flavor != "paper":
        raise _invalid("normalize_first",
                       f"False in flavor {hp.flavor!r} (the reference is "
                       "post-norm)", hp.normalize_first)
    # The reference flavours fix their embedding layout (docs/reference.md §3).
    fixed = {"reference_2017": False, "reference_2019": True}.get(hp.flavor)
    if fixed is not None:
        for name in ("share_embeddings", "tie_output"):
            if getattr(hp, name) != fixed:
                raise _invalid(name, f"{fixed} in flavor {hp.flavor!r}, "
                               "which the reference fixes", getattr(hp, name))


def _check_embeddings(hp):
    """The language models' embedding options: each where its model has
    it, and not in the reference flavours, which fix their embeddings."""
    if hp.task != "masked_lm" and hp.normalize_embeddings:
        raise _invalid("normalize_embeddings", "False for "
                       f"task={hp.task!r} (only masked_lm's encoder has an "
                       "embedding layer norm)", hp.normalize_embeddings)
    if hp.normalize_embeddings and hp.flavor != "paper":
        raise _invalid("normalize_embeddings", f"False in flavor "
                       f"{hp.flavor!r}, which has no embedding layer norm",
                       hp.normalize_embeddings)
    if not hp.scale_embeddings and (hp.task == "translation"
                                    or hp.flavor != "paper"):
        raise _invalid("scale_embeddings", f"True for task={hp.task!r} in "
                       f"flavor {hp.flavor!r} (only the paper flavour's "
                       "language models may leave the rows unscaled)",
                       hp.scale_embeddings)
    if hp.task != "masked_lm" and hp.positions_initializer != (
            "glorot_uniform"):
        raise _invalid("positions_initializer", "'glorot_uniform' for "
                       f"task={hp.task!r} (only masked_lm's encoder takes "
                       "one)", hp.positions_initializer)


def _check_limits(hp):
    """Fields bounded by others: the average by the checkpoints kept, the
    training length by the positional table, sampling by the vocabulary's
    type, R-Drop by dropout."""
    if hp.task != "translation" and hp.eval_every_steps:
        raise _invalid(
            "eval_every_steps",
            f"0 for task={hp.task!r} (it scores translations with BLEU; "
            "--mode=eval reports a language model's perplexity)",
            hp.eval_every_steps)
    if hp.task == "translation" and hp.activation != "relu":
        raise _invalid("activation", "'relu' for task='translation' (the "
                       "Transformer keeps the paper's ReLU)", hp.activation)
    if hp.task == "translation" and hp.kernel_initializer != "glorot_uniform":
        raise _invalid("kernel_initializer", "'glorot_uniform' for "
                       "task='translation' (the Transformer keeps Keras's "
                       "default)", hp.kernel_initializer)
    if hp.activation != "relu" and hp.flavor != "paper":
        raise _invalid("activation", f"'relu' in flavor {hp.flavor!r}, "
                       "which the reference fixes", hp.activation)
    if hp.mask_token_rate + hp.random_token_rate > 1.0:
        raise _invalid("random_token_rate", "a rate whose sum with "
                       f"mask_token_rate={hp.mask_token_rate} is at most 1",
                       hp.random_token_rate)
    if (hp.tokenizer_sampling_alpha
            and hp.tokenizer_model_type not in ("bpe", "unigram")):
        raise _invalid(
            "tokenizer_sampling_alpha",
            f"0 with tokenizer_model_type={hp.tokenizer_model_type!r} (only "
            "'bpe' and 'unigram' vocabularies sample segmentations)",
            hp.tokenizer_sampling_alpha)
    if hp.rdrop_alpha and not (hp.dropout_rate or hp.attention_dropout_rate):
        raise _invalid(
            "rdrop_alpha",
            "0 when dropout_rate and attention_dropout_rate are 0 (R-Drop "
            "compares two dropout passes; without dropout they are equal)",
            hp.rdrop_alpha)
    if hp.average_checkpoints > hp.keep_checkpoints:
        raise _invalid("average_checkpoints",
                       f"at most keep_checkpoints={hp.keep_checkpoints}",
                       hp.average_checkpoints)
    if hp.max_train_length > hp.max_length:
        raise _invalid(
            "max_train_length",
            f"at most max_length={hp.max_length} (the positional table)",
            hp.max_train_length,
        )
