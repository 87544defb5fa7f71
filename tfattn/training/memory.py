"""How much host memory a training step holds, and the check that refuses
hparams this machine cannot train.

`training_memory(hp, vocab_size, rows, length)` estimates the peak resident
memory of `train.py`'s training process for one batch of `rows` rows of
`length` tokens (source and target alike):

- the runtime: TensorFlow, the Python process and the input pipeline
  (`RUNTIME_BYTES`, measured after `import tensorflow` and a training
  split's first batches);
- the parameters' state: float32 weights, their gradients and Adam's two
  moments, 16 bytes per parameter;
- the logits and what their loss keeps: the [rows, length, vocabulary]
  logits, their softmax and their gradient in float32, with what the tied
  projection's gradient adds (`LOGIT_BYTES` per entry; with R-Drop the
  batch is stacked twice and its KL term adds `KL_LOGIT_BYTES`);
- the activations the backward pass keeps, per token and layer: the
  projections, residual sums, dropout masks and layer norms (a multiple of
  `num_units`), the feed-forward hidden layer before and after its
  activation (twice `ffn_units`), and each attention's scores and weights
  (twice `num_heads` x the keys' length), in 4-byte floats; in a 16-bit
  policy `ACTIVATION_SHARE_16BIT` of that (the projections and the
  feed-forward layer keep 16-bit tensors, the softmax and the layer norms
  float32 ones).

Measured against the peak RSS of real training steps
(`bench/training_memory.py`; the figures are in docs/benchmarks.md,
"Training memory"), the estimate holds within `STATED_FACTOR` either way on
the Intel Xeon and AMD EPYC CPUs measured, in float32 and in bfloat16.

`check_training_memory` compares the estimate with the machine's physical
memory (the refusal names both and the fields to lower).
"""

import dataclasses
import os

import tensorflow as tf

__all__ = [
    "RUNTIME_BYTES",
    "STATE_BYTES_PER_PARAMETER",
    "LOGIT_BYTES",
    "KL_LOGIT_BYTES",
    "FLOAT_BYTES",
    "ACTIVATION_SHARE_16BIT",
    "STATED_FACTOR",
    "FIELDS_TO_LOWER",
    "MemoryEstimate",
    "count_parameters",
    "activation_floats_per_token",
    "batch_shape",
    "training_memory",
    "physical_memory",
    "on_host",
    "InsufficientMemory",
    "check_training_memory",
]

# TensorFlow, Python, the tokenizer and the input pipeline before a model
# exists: 0.87 GB RSS measured after the first training batches.
RUNTIME_BYTES = 900 * 2**20
# Float32 weight, gradient and Adam's two moments.
STATE_BYTES_PER_PARAMETER = 16
# Logits, softmax, gradient (float32) and a share of the projection's.
LOGIT_BYTES = 13
# R-Drop's KL term keeps each pass's float32 log-softmax and softmax for its
# gradient: 8 more bytes per entry of the doubled logits (peak RSS / this
# estimate 0.97 in bfloat16, 1.05 in float32; bench/training_memory.py).
KL_LOGIT_BYTES = 8
FLOAT_BYTES = 4
# A bfloat16 step's activations / a float32 step's: 0.79 measured for the
# base set's step on the AMX Xeon (peak RSS 11.0 vs 13.4 GiB).
ACTIVATION_SHARE_16BIT = 0.8
# Measured / estimated peak RSS, over the sets and shapes that
# bench/training_memory.py measures.
STATED_FACTOR = 1.25
# The hparams fields a refusal suggests lowering, in the order they weigh.
FIELDS_TO_LOWER = ("tokens_per_batch", "max_train_length", "vocab_size",
                   "num_layers", "num_units")


@dataclasses.dataclass(frozen=True)
class MemoryEstimate:
    """The parts of `training_memory`'s estimate, in bytes.

    Attributes:
        runtime: int. TensorFlow, Python and the input pipeline
            (`RUNTIME_BYTES`).
        parameter_state: int. Weights, gradients and Adam's two moments.
        logits: int. The logits and what their loss keeps.
        activations: int. What the backward pass keeps.
        parameters: int. The model's parameter count (not bytes).
        rows: int. Rows of the batch.
        length: int. Tokens per row.
        copies: int. How often the step runs each row: 2 under R-Drop.
    """

    runtime: int
    parameter_state: int
    logits: int
    activations: int
    parameters: int
    rows: int
    length: int
    # How often the step runs each row: 2 under R-Drop.
    copies: int = 1

    @property
    def total(self):
        """int. The bytes of the four parts together."""
        return (self.runtime + self.parameter_state + self.logits
                + self.activations)

    def describe(self):
        """The total and its parts, for a log line.

        Returns:
            str, e.g. `15.3 GiB (weights, gradients and Adam 0.7, logits
            0.1, activations 13.7, runtime 0.9 GiB, for batches of 3,125 x
            8 tokens)`.
        """
        return f"{self.total / 2**30:,.1f} GiB ({self.parts()})"

    def parts(self):
        """The parts in GiB and the batch shape (`describe` without the
        total).

        Returns:
            str.
        """
        def gib(n):
            return f"{n / 2**30:,.1f}"
        return (f"weights, gradients and Adam {gib(self.parameter_state)}, "
                f"logits {gib(self.logits)}, activations "
                f"{gib(self.activations)}, runtime {gib(self.runtime)} GiB, "
                f"for batches of {self.rows:,} x {self.length} tokens"
                + (", each row run twice (R-Drop)" if self.copies == 2
                   else ""))


def count_parameters(hp, vocab_size):
    """The Transformer's parameters for hparams `hp` and a joint vocabulary
    of `vocab_size` pieces: the embeddings, `num_layers` encoder and decoder
    blocks (the reference flavours' attention has no output projection),
    the output projection unless tied, the learned position tables and
    pre-norm's final layer norms.

    Args:
        hp: HParams.
        vocab_size: int. The joint vocabulary's size.

    Returns:
        int. The parameter count.
    """
    c, f, v = hp.num_units, hp.ffn_units, vocab_size
    norm = 2 * c
    projections = 4 if hp.flavor == "paper" else 3
    attention = projections * (c * c + c) + norm
    feed_forward = 2 * c * f + f + c + norm
    per_layer = 2 * attention + 2 * feed_forward + attention  # enc + dec
    tables = v * c * (1 if hp.share_embeddings else 2)
    tables += 0 if hp.tie_output else v * c + v
    if hp.positional_encoding == "learned":
        tables += 2 * hp.max_length * c  # one table per stack
    final_norms = 2 * norm if hp.normalize_first else 0
    return hp.num_layers * per_layer + tables + final_norms


def activation_floats_per_token(hp, length):
    """Floats one token keeps for the backward pass in one encoder block
    and one decoder block together, at `length` tokens per row.

    Args:
        hp: HParams. Its `num_units`, `ffn_units` and `num_heads`.
        length: int. Tokens per row (the keys' length of each attention).

    Returns:
        int.
    """
    c, f, scores = hp.num_units, hp.ffn_units, hp.num_heads * length
    encoder = 12 * c + 2 * f + 2 * scores  # one attention, one FFN
    decoder = 19 * c + 2 * f + 4 * scores  # two attentions, one FFN
    return encoder + decoder


def batch_shape(hp, length, replicas=1):
    """(rows, length) of the largest batch one replica trains on: a token
    budget fills `tokens_per_batch // length` rows (at least one); a
    sentence count, `batch_size // replicas` rows.

    Args:
        hp: HParams.
        length: int. The longest row, clipped to [1, `max_train_length`].
        replicas: int. Replicas sharing the global batch. Defaults to `1`.

    Returns:
        tuple `(rows, length)` of ints.
    """
    length = max(1, min(int(length), hp.max_train_length))
    if hp.batch_size:
        return max(1, hp.batch_size // replicas), length
    tokens = max(hp.max_train_length, hp.tokens_per_batch // replicas)
    return max(1, tokens // length), length


def training_memory(hp, vocab_size, rows, length, policy=None):
    """The `MemoryEstimate` of training `hp` on batches of [rows, length]
    with a vocabulary of `vocab_size` pieces, in the Keras dtype `policy`
    (None: float32; see the module docstring).

    Args:
        hp: HParams.
        vocab_size: int. The joint vocabulary's size.
        rows: int. Rows of the batch.
        length: int. Tokens per row.
        policy: str or None. `"mixed_bfloat16"` or `"mixed_float16"` scale
            the activations by `ACTIVATION_SHARE_16BIT`; None is float32.

    Returns:
        MemoryEstimate.
    """
    parameters = count_parameters(hp, vocab_size)
    # R-Drop runs each row twice (one call on the batch stacked twice).
    copies = 2 if hp.rdrop_alpha else 1
    tokens = rows * length * copies
    logit_bytes = LOGIT_BYTES + (KL_LOGIT_BYTES if hp.rdrop_alpha else 0)
    activations = (FLOAT_BYTES * tokens * hp.num_layers
                   * activation_floats_per_token(hp, length))
    if policy in ("mixed_bfloat16", "mixed_float16"):
        activations = int(activations * ACTIVATION_SHARE_16BIT)
    return MemoryEstimate(
        runtime=RUNTIME_BYTES,
        parameter_state=STATE_BYTES_PER_PARAMETER * parameters,
        logits=logit_bytes * tokens * vocab_size, activations=activations,
        parameters=parameters, rows=rows, length=length, copies=copies)


def physical_memory():
    """This machine's physical memory in bytes.

    Returns:
        int.
    """
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def on_host():
    """Whether the training step runs on this host's CPU (no GPU or TPU).

    Returns:
        bool.
    """
    return not (tf.config.list_logical_devices("GPU")
                or tf.config.list_logical_devices("TPU"))


class InsufficientMemory(ValueError):
    """The hparams' training step cannot fit in this machine's memory."""


def check_training_memory(hp, vocab_size, length, replicas=1,
                          available=None, policy=None):
    """Refuses hparams whose training cannot fit in this machine's memory.

    Args:
        hp: HParams.
        vocab_size: int. The run's real vocabulary (learnt or loaded).
        length: int. The longest row the batches hold (the data's longest
            pair, at most `max_train_length`).
        replicas: int. On a host, the replicas share its memory and each
            holds its share of the global batch.
        available: int or None. Bytes to fit in (default: the machine's
            physical memory).
        policy: the Keras dtype policy, or None: float32 (the larger, and
            what a precision not yet chosen may be).

    Returns:
        The `MemoryEstimate` of one replica (the total counts every replica
        of this host). Accelerators hold the step themselves: there only the
        runtime and the parameters' state are checked against the host.

    Raises:
        InsufficientMemory: naming the estimate, the memory and the fields
            to lower.
    """
    rows, length = batch_shape(hp, length, replicas)
    estimate = training_memory(hp, vocab_size, rows, length, policy)
    host = on_host()
    needed = (estimate.runtime + estimate.parameter_state
              + replicas * (estimate.logits + estimate.activations)
              if host else estimate.runtime + estimate.parameter_state)
    available = physical_memory() if available is None else available
    if needed > available:
        suggestion = _fitting_batch(hp, vocab_size, length, available,
                                    replicas, policy)
        current = ", ".join(f"{name}={getattr(hp, name)}"
                            for name in FIELDS_TO_LOWER
                            if getattr(hp, name, None) is not None)
        if vocab_size != hp.vocab_size:
            current += f" (the vocabulary has {vocab_size:,} pieces)"
        raise InsufficientMemory(
            f"Training these hparams needs about {needed / 2**30:,.1f} GiB "
            f"({estimate.parts()}"
            + (f", {replicas} replicas" if host and replicas > 1 else "")
            + f"; measured peaks are within {STATED_FACTOR}x of this "
            f"estimate), more than this machine's {available / 2**30:,.1f} "
            f"GiB. Lower {', '.join(FIELDS_TO_LOWER)} (now {current}), e.g. "
            f"--hparams_overrides={suggestion}.")
    return estimate


def _fitting_batch(hp, vocab_size, length, available, replicas, policy):
    """`tokens_per_batch=N` (a multiple of 256, at least 256) or
    `batch_size=N` (a multiple of `replicas`) whose step fits."""
    _, length = batch_shape(hp, length, replicas)
    one_row = training_memory(hp, vocab_size, 1, length, policy)
    fixed = one_row.runtime + one_row.parameter_state
    per_row = one_row.logits + one_row.activations
    rows = max(0, available - fixed) // max(1, per_row * replicas)
    if hp.batch_size:
        return f"batch_size={max(1, rows) * replicas}"
    return f"tokens_per_batch={max(256, rows * length * replicas // 256 * 256)}"
