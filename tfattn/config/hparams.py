"""The hyperparameter schema of a training run: `HParams`, its field
groups, its checks and its JSON form.

One frozen `HParams` holds every hyperparameter of a run: the model's fields
first (`MODEL_FIELDS`), then the training fields, then the decoding fields
(`DECODING_FIELDS`). The named sets (`tiny`, `base`, `big`, `reference_2017`,
`reference_2019`, `multi30k`) are the application's, in `hparams/` at the
repository root; this module knows none of them. `tfattn.config` hands
these names on, with `parse_overrides` (`tfattn.config.overrides`).
"""

import dataclasses
import json
import typing

from tfattn.config._checks import _check_embeddings
from tfattn.config._checks import _check_exactly_one
from tfattn.config._checks import _check_flavor_layout
from tfattn.config._checks import _check_learning_rate
from tfattn.config._checks import _check_limits
from tfattn.config._checks import _check_num_heads
from tfattn.config._checks import _check_ranges
from tfattn.config._checks import _check_type
from tfattn.config._checks import _invalid
from tfattn.layers.attention_flavors import FLAVORS

__all__ = [
    "TASKS", "ACTIVATIONS", "POSITIONAL_ENCODINGS", "TOKENIZER_MODEL_TYPES",
    "TOKENIZER_NORMALIZATIONS",
    "LEARNING_RATE_SCHEDULES", "EMBEDDINGS_INITIALIZERS",
    "KERNEL_INITIALIZERS", "HParams",
    "MODEL_FIELDS", "DECODING_FIELDS", "BATCH_FIELDS", "RESUMABLE_FIELDS",
    "ADDED_FIELDS", "field_names", "training_fields", "model_kwargs",
    "embeddings_initializer", "kernel_initializer", "to_dict", "to_json",
    "from_json",
    "differences", "decoding_kwargs",
]

POSITIONAL_ENCODINGS = ("sinusoid", "sinusoid_2017", "learned")
TOKENIZER_MODEL_TYPES = ("unigram", "bpe", "char", "word")
# SentencePiece's normalisation rules (tfattn.data.tokenizer.NORMALIZATIONS;
# kept here so that reading hparams needs no TensorFlow).
TOKENIZER_NORMALIZATIONS = ("nmt_nfkc", "nfkc", "nmt_nfkc_cf", "nfkc_cf",
                            "identity")
LEARNING_RATE_SCHEDULES = ("noam", "constant", "cosine")
TASKS = ("translation", "language_model", "masked_lm")
# The models' feed-forward activations (GELU: GPT's and BERT's).
ACTIVATIONS = ("relu", "gelu")
# "glorot_uniform": Keras's default; "scaled_normal": N(0, num_units^-0.5),
# as tensor2tensor and fairseq (rows times sqrt(num_units) have unit scale);
# "normal_0.02" (GPT-2's) and "truncated_normal_0.02" (BERT's) as below.
EMBEDDINGS_INITIALIZERS = ("glorot_uniform", "scaled_normal", "normal_0.02",
                           "truncated_normal_0.02")
# The language models' Dense kernels: "glorot_uniform" (Keras's default),
# "normal_0.02" (N(0, 0.02): GPT-2's) or "truncated_normal_0.02" (the same
# truncated at two standard deviations: BERT's).
KERNEL_INITIALIZERS = ("glorot_uniform", "normal_0.02",
                       "truncated_normal_0.02")


@dataclasses.dataclass(frozen=True)
class HParams:
    """Every hyperparameter of one training run; see the module docstring.

    Build a variant with `dataclasses.replace(hp, field=value)` or
    `parse_overrides(hp, "field=value")`; both validate the result.
    """

    # --- Model (the arguments of `tfattn.Transformer`, plus the vocabulary).
    # What to train: "translation" (a `tfattn.Transformer` on sentence
    # pairs), "language_model" (a GPT-style `tfattn.CausalLM` on the
    # target side of the dataset, or on monolingual text) or "masked_lm"
    # (a BERT-style `tfattn.MaskedLM` on the same text).
    task: str
    # Which model to build: "paper", "reference_2017" or "reference_2019".
    flavor: str
    # Blocks in the encoder and in the decoder (the paper's N).
    num_layers: int
    # Model width d_model (the references' hidden_units / d_model).
    num_units: int
    # Attention heads h; num_units must be a multiple of it.
    num_heads: int
    # Width of the feed-forward sublayer's hidden layer (d_ff).
    ffn_units: int
    # Dropout rate at the model's dropout sites (embeddings, residuals).
    dropout_rate: float
    # Dropout rate on the attention weights.
    attention_dropout_rate: float
    # Pre-norm blocks (paper flavour only); False is the paper's post-norm.
    normalize_first: bool
    # "sinusoid", "sinusoid_2017" (the 2017 code's formula) or "learned".
    positional_encoding: str
    # Positions the positional table holds; also caps decoding lengths.
    max_length: int
    # One embedding table for source and target (the vocabulary is joint).
    share_embeddings: bool
    # Output projection = the target embedding transposed (no extra weights).
    tie_output: bool
    # Token table initialisation: "glorot_uniform" or "scaled_normal"
    # (N(0, num_units^-0.5), tensor2tensor's and fairseq's).
    embeddings_initializer: str
    # Requested size of the joint SentencePiece vocabulary, specials included
    # (a small corpus may support fewer; the trained size is used).
    vocab_size: int
    # SentencePiece model type: "unigram", "bpe", "char" or "word".
    tokenizer_model_type: str
    # SentencePiece normalisation rule; "nmt_nfkc_cf" also lowercases, so
    # the model reads and writes lowercased text.
    tokenizer_normalization: str
    # The feed-forward activation of the language models: "relu" or "gelu"
    # (GPT's and BERT's); translation's Transformer keeps the paper's ReLU.
    activation: str
    # The language models' Dense kernels: "glorot_uniform" (Keras's),
    # "normal_0.02" (GPT-2's) or "truncated_normal_0.02" (BERT's); the
    # translation Transformer keeps glorot_uniform.
    kernel_initializer: str
    # A layer norm over the token + position embeddings (BERT's); masked
    # language models only.
    normalize_embeddings: bool
    # The token rows times sqrt(num_units) (the paper's §3.4); False for
    # GPT-2's and BERT's unscaled tables (language models only, paper
    # flavour).
    scale_embeddings: bool
    # The learned position table of a masked LM: one of KERNEL_INITIALIZERS
    # (BERT's: "truncated_normal_0.02").
    positions_initializer: str

    # --- Training.
    # Subword regularisation of the training batches: SentencePiece's
    # sampling `alpha` (tokenizer.SubwordTokenizer). For a BPE vocabulary
    # the probability of skipping each merge (BPE-dropout, Provilkov et al.
    # 2020: 0.1); for a unigram one Kudo (2018)'s smoothing. 0 = always the
    # one best segmentation. Evaluation and export never sample.
    tokenizer_sampling_alpha: float
    # Sentence pairs per step, over all replicas; None = use tokens_per_batch.
    batch_size: typing.Optional[int]
    # About this many tokens per step over all replicas; None = batch_size.
    tokens_per_batch: typing.Optional[int]
    # Training pairs whose source or target (with BOS/EOS) is longer are
    # dropped.
    max_train_length: int
    # Pairs in the shuffle buffer ahead of length bucketing.
    shuffle_buffer_size: int
    # "noam" (warmup then 1/sqrt(step) decay), "constant", or "cosine"
    # (warmup to learning_rate, then a cosine decay to 0 at the last step).
    learning_rate_schedule: str
    # noam: the peak rate, reached at warmup_steps (the 2019 code's form),
    # or None for the paper's num_units^-0.5 factor; constant: the rate.
    learning_rate: typing.Optional[float]
    # Multiplies the noam schedule (1.0 in the paper).
    learning_rate_scale: float
    # Linear warmup steps of the noam schedule.
    warmup_steps: int
    # Adam beta_1.
    adam_beta1: float
    # Adam beta_2.
    adam_beta2: float
    # Adam epsilon.
    adam_epsilon: float
    # Label smoothing epsilon, spread over the whole vocabulary.
    label_smoothing: float
    # R-Drop's weight α of the symmetric KL between two dropout passes of
    # each batch (Liang et al. 2021; the authors' fairseq --reg-alpha);
    # 0 = one pass, the plain cross-entropy. A step then runs every row
    # twice, about the cost of a batch twice as large.
    rdrop_alpha: float
    # Added to the token count that divides the summed loss (2019: 1e-7).
    loss_denominator_epsilon: float
    # Training length in optimizer steps; exactly one of train_steps and
    # train_epochs is set.
    train_steps: typing.Optional[int]
    # Training length in passes over the training split.
    train_epochs: typing.Optional[int]
    # Save a checkpoint every this many steps (and always at the end).
    checkpoint_every_steps: int
    # Checkpoints kept on disk (the oldest are deleted).
    keep_checkpoints: int
    # Write TensorBoard scalars and update the progress bar this often.
    log_every_steps: int
    # Every this many steps (and at the end), translate the first
    # `eval_sentences` validation pairs greedily and log their BLEU (to
    # TensorBoard as `validation_bleu`); 0 = never.
    eval_every_steps: int
    # Validation pairs of that score (a fixed subset, the split's first).
    eval_sentences: int
    # Masked LM (BERT's masking, `tfattn.data.MaskGenerator`): the share of
    # each text's pieces chosen as blanks...
    mask_selection_rate: float
    # ...of which this share becomes the mask piece...
    mask_token_rate: float
    # ...and this share a random piece (the rest stay as they are).
    random_token_rate: float
    # Choose whole words (all the pieces of a word, or none).
    whole_word_masking: bool

    # --- Decoding (evaluation and export).
    # Beam width; 1 = greedy search.
    beam_size: int
    # Length penalty alpha of beam search.
    decode_alpha: float
    # Each output may be this many tokens longer than its source.
    decode_extra_length: int
    # Evaluate and export the average of the last this many checkpoints
    # (at most keep_checkpoints; train.py's --average_checkpoints wins).
    average_checkpoints: int


    def __post_init__(self):
        for field in dataclasses.fields(self):
            value = _check_type(field.name, getattr(self, field.name),
                                _field_types()[field.name])
            object.__setattr__(self, field.name, value)
        _check_values(self)


# The fields that shape the model or its vocabulary (the rest is training
# and decoding); `model_kwargs` turns them into `tfattn.Transformer`'s.
MODEL_FIELDS = (
    "task", "flavor", "num_layers", "num_units", "num_heads", "ffn_units",
    "dropout_rate", "attention_dropout_rate", "normalize_first",
    "positional_encoding", "max_length", "share_embeddings", "tie_output",
    "embeddings_initializer", "vocab_size", "tokenizer_model_type",
    "tokenizer_normalization", "activation", "kernel_initializer",
    "normalize_embeddings", "scale_embeddings", "positions_initializer",
)
DECODING_FIELDS = ("beam_size", "decode_alpha", "decode_extra_length",
                   "average_checkpoints")
# The batch: what a run that ran out of memory lowers to resume.
BATCH_FIELDS = ("batch_size", "tokens_per_batch", "max_train_length")
# Fields a resumed run may change: how long to train, how often to save and
# log, the batch, and how to decode. Every other field must equal the saved
# one.
RESUMABLE_FIELDS = (
    "train_steps", "train_epochs", "checkpoint_every_steps",
    "keep_checkpoints", "log_every_steps", "eval_every_steps",
    "eval_sentences",
) + BATCH_FIELDS + DECODING_FIELDS
# Fields added after runs were saved, with the value that reproduces those
# runs: a saved hparams.json without them still loads.
ADDED_FIELDS = dict(task="translation",
                    embeddings_initializer="glorot_uniform",
                    eval_every_steps=0, eval_sentences=200,
                    average_checkpoints=1,
                    tokenizer_normalization="nmt_nfkc",
                    tokenizer_sampling_alpha=0.0, rdrop_alpha=0.0,
                    activation="relu", mask_selection_rate=0.15,
                    mask_token_rate=0.8, random_token_rate=0.1,
                    whole_word_masking=False,
                    kernel_initializer="glorot_uniform",
                    normalize_embeddings=False, scale_embeddings=True,
                    positions_initializer="glorot_uniform")


def field_names():
    """All field names, in declaration order.

    Returns:
        tuple of str.
    """
    return tuple(f.name for f in dataclasses.fields(HParams))


def training_fields():
    """The training fields: neither model nor decoding fields.

    Returns:
        tuple of str, in declaration order.
    """
    return tuple(n for n in field_names()
                 if n not in MODEL_FIELDS and n not in DECODING_FIELDS)


def model_kwargs(hp, vocab_size):
    """The model's keyword arguments for `hp` and a trained vocabulary:
    `tfattn.Transformer`'s (task "translation"), `tfattn.CausalLM`'s
    (task "language_model") or `tfattn.MaskedLM`'s (task "masked_lm").

    Args:
        hp: HParams.
        vocab_size: int. The trained tokenizer's size (used for source and
            target: the vocabulary is joint).

    Returns:
        dict of constructor arguments (without `seed` and `dtype`).
    """
    common = dict(
        num_layers=hp.num_layers,
        num_units=hp.num_units,
        num_heads=hp.num_heads,
        ffn_units=hp.ffn_units,
        dropout_rate=hp.dropout_rate,
        attention_dropout_rate=hp.attention_dropout_rate,
        flavor=hp.flavor,
        normalize_first=hp.normalize_first,
        max_length=hp.max_length,
        positional_encoding=hp.positional_encoding,
        tie_output=hp.tie_output,
        embeddings_initializer=embeddings_initializer(hp),
    )
    language_model = dict(
        vocab_size=vocab_size, activation=hp.activation,
        kernel_initializer=kernel_initializer(hp.kernel_initializer),
        scale_embeddings=hp.scale_embeddings, **common)
    if hp.task == "language_model":
        return language_model
    if hp.task == "masked_lm":
        language_model.pop("tie_output")  # BERT's head is always tied.
        return dict(language_model,
                    normalize_embeddings=hp.normalize_embeddings,
                    positions_initializer=kernel_initializer(
                        hp.positions_initializer))
    return dict(source_vocab_size=vocab_size, target_vocab_size=vocab_size,
                share_embeddings=hp.share_embeddings, **common)


def embeddings_initializer(hp):
    """The Keras initializer (config dict) named by
    `hp.embeddings_initializer`.

    Args:
        hp: HParams.

    Returns:
        dict or str. A `RandomNormal` config of stddev `num_units ** -0.5`
        for `"scaled_normal"`, else `kernel_initializer`'s.
    """
    if hp.embeddings_initializer == "scaled_normal":
        return {"class_name": "RandomNormal", "config": {
            "mean": 0.0, "stddev": hp.num_units ** -0.5, "seed": None}}
    return kernel_initializer(hp.embeddings_initializer)


def kernel_initializer(name):
    """The Keras initializer (config dict or name) of a
    `KERNEL_INITIALIZERS` name.

    Args:
        name: str, one of `KERNEL_INITIALIZERS`.

    Returns:
        dict or str. A `RandomNormal` or `TruncatedNormal` config of stddev
        0.02, or `"glorot_uniform"`.
    """
    kinds = {"normal_0.02": "RandomNormal",
             "truncated_normal_0.02": "TruncatedNormal"}
    if name in kinds:
        return {"class_name": kinds[name], "config": {
            "mean": 0.0, "stddev": 0.02, "seed": None}}
    return name


# ----------------------------------------------------------------------
# Type and value checks.

def _field_types():
    return typing.get_type_hints(HParams)


def _check_values(hp):
    """Raises the ValueError of the first value `hp` may not hold."""
    # In this order: a set with several faults reports the same one as ever.
    for check in (_check_choices, _check_ranges, _check_exactly_one,
                  _check_num_heads, _check_learning_rate,
                  _check_flavor_layout, _check_embeddings, _check_limits):
        check(hp)


def _check_choices(hp):
    for name, choices in (
            ("task", TASKS),
            ("flavor", FLAVORS),
            ("positional_encoding", POSITIONAL_ENCODINGS),
            ("tokenizer_model_type", TOKENIZER_MODEL_TYPES),
            ("tokenizer_normalization", TOKENIZER_NORMALIZATIONS),
            ("learning_rate_schedule", LEARNING_RATE_SCHEDULES),
            ("embeddings_initializer", EMBEDDINGS_INITIALIZERS),
            ("kernel_initializer", KERNEL_INITIALIZERS),
            ("positions_initializer", KERNEL_INITIALIZERS),
            ("activation", ACTIVATIONS)):
        if getattr(hp, name) not in choices:
            raise _invalid(name, "one of " + ", ".join(map(repr, choices)),
                           getattr(hp, name))


# ----------------------------------------------------------------------
# JSON.

def to_dict(hp):
    """The fields as a plain dict, in declaration order.

    Args:
        hp: HParams.

    Returns:
        dict of field name to value.
    """
    return {name: getattr(hp, name) for name in field_names()}


def to_json(hp):
    """The set as an indented JSON object (one key per field).

    Args:
        hp: HParams.

    Returns:
        str. The JSON text, ending with a newline.
    """
    return json.dumps(to_dict(hp), indent=2) + "\n"


def from_json(text):
    """Reads `to_json`'s output back into a validated HParams.

    Fields missing from `text` that `ADDED_FIELDS` names take its values.

    Args:
        text: str. A JSON object of field: value.

    Returns:
        HParams.

    Raises:
        ValueError: invalid JSON, missing or unknown fields, wrong types.
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"Hparams JSON is not valid JSON: {error}") from None
    if not isinstance(data, dict):
        raise ValueError("Hparams JSON must be an object of field: value.")
    names = field_names()
    data = {**{k: v for k, v in ADDED_FIELDS.items() if k not in data},
            **data}
    unknown = sorted(set(data) - set(names))
    missing = [n for n in names if n not in data]
    if unknown or missing:
        raise ValueError(
            "Hparams JSON does not match HParams: "
            + (f"unknown fields {unknown}; " if unknown else "")
            + (f"missing fields {missing}; " if missing else "")
            + "valid fields: " + ", ".join(names)
        )
    return HParams(**data)


def differences(saved, requested, ignore=()):
    """Names of the fields whose values differ, in declaration order.

    Args:
        saved: HParams. One set.
        requested: HParams. The other.
        ignore: container of str. Field names left out. Defaults to none.

    Returns:
        list of str.
    """
    return [n for n in field_names() if n not in ignore
            and getattr(saved, n) != getattr(requested, n)]


def decoding_kwargs(hp):
    """The hparams' decoding settings as the keyword arguments of
    `tfattn.decoding.translate.translate_texts`, `evaluation.evaluate` and
    `export.export_translator`: `beam_size`, `alpha`, `extra_length`.

    Args:
        hp: HParams.

    Returns:
        dict. `beam_size`, `alpha` (`hp.decode_alpha`) and `extra_length`
        (`hp.decode_extra_length`).
    """
    return dict(beam_size=hp.beam_size, alpha=hp.decode_alpha,
                extra_length=hp.decode_extra_length)
