"""A tiny model: tests, and the generated numbers task in about a minute.

Derived from `base` (the paper's model, schedule and optimizer) with every
size cut down so that a step takes milliseconds on a CPU. `train.py
--hparams=tiny --dataset=numbers` reaches near-perfect translations of
numbers into words within about a minute on two CPU cores.
"""

import dataclasses

from hparams import base

HPARAMS = dataclasses.replace(
    base.HPARAMS,
    # Model.
    num_layers=2,  # Two blocks per stack.
    num_units=64,  # d_model = 64.
    num_heads=4,  # Heads of width 16.
    ffn_units=128,  # d_ff = 2·d_model.
    dropout_rate=0.0,  # The numbers task has no noise to regularise.
    max_length=32,  # Numbers need at most 9 tokens; room for decoding.
    vocab_size=64,  # The numbers corpus supports about 40 pieces.
    tokenizer_model_type="unigram",  # Whole words and single digits.
    # Training.
    batch_size=64,  # 64 pairs per step.
    tokens_per_batch=None,  # Batches in sentences.
    max_train_length=32,  # Same as max_length.
    shuffle_buffer_size=10_000,  # Pairs shuffled ahead of bucketing.
    learning_rate=3e-3,  # Noam with a peak of 3e-3 (2019 form).
    warmup_steps=200,  # Short warmup.
    train_steps=800,  # About 99% exact on held-out numbers, in about a minute.
    checkpoint_every_steps=200,  # Four checkpoints per run.
    keep_checkpoints=3,  # The last three.
    log_every_steps=50,  # Frequent logs.
    # Decoding.
    beam_size=1,  # Greedy: the task has one right answer.
    decode_extra_length=16,  # Words per number exceed digits by up to 4.
)
