"""A model sized for Multi30k (29,000 English-German caption pairs).

Derived from `base`: a small corpus overfits the base model, so this set
uses 3 blocks of width 256, heavier dropout, an 8,000-piece joint vocabulary
and about 4,096 tokens per step (batches of ~300 captions).
"""

import dataclasses

from hparams import base

HPARAMS = dataclasses.replace(
    base.HPARAMS,
    # Model.
    num_layers=3,  # Three blocks per stack.
    num_units=256,  # d_model = 256.
    num_heads=8,  # Heads of width 32.
    ffn_units=1024,  # d_ff = 4·d_model, as in the paper.
    dropout_rate=0.2,  # More dropout for a small corpus.
    attention_dropout_rate=0.1,  # Attention dropout helps on small data.
    max_length=128,  # Captions are short (at most ~80 pieces).
    vocab_size=8000,  # Joint en-de vocabulary.
    tokenizer_model_type="bpe",  # Byte-pair encoding, as the paper.
    # Training.
    tokens_per_batch=4096,  # About 4,096 tokens per step.
    max_train_length=128,  # Same as max_length.
    shuffle_buffer_size=29_000,  # The whole training split.
    warmup_steps=2000,  # Shorter warmup for a shorter run.
    learning_rate_scale=2.0,  # Twice the paper's rate (small batches).
    train_steps=20_000,  # About 70 epochs of 29,000 pairs.
    checkpoint_every_steps=1000,  # Every 1,000 steps.
    log_every_steps=100,  # TensorBoard and progress bar interval.
)
