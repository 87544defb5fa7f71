"""A model sized for Multi30k (29,000 English-German caption pairs).

The architecture of the published 41.02-BLEU en->de reference point
(`shared/data/multi30k/README.md`: Wu et al. 2021, a 4+4-layer Transformer
with d_model 128, FFN 256 and 4 heads, 8,000 updates of 4,096 tokens), with
a joint 8,000-piece vocabulary, trained for 3,200 steps of about 4,096
padded tokens so that training fits in about 95 minutes on 2 CPU cores
(about 1.75 s per step in float32, 2,200 target tokens/s), i.e. about 30
passes over the training split. The paper's beam search with beam 5 as the
reference point uses. Derived from `base` (post-norm, shared and tied
embeddings, Adam(0.9, 0.98, 1e-9), label smoothing 0.1).
"""

import dataclasses

from hparams import base

HPARAMS = dataclasses.replace(
    base.HPARAMS,
    # Model.
    num_layers=4,  # Four blocks per stack, as the reference point.
    num_units=128,  # d_model = 128.
    num_heads=4,  # Heads of width 32.
    ffn_units=256,  # d_ff = 2·d_model, as the reference point.
    dropout_rate=0.2,  # More dropout than base: the corpus is small.
    attention_dropout_rate=0.1,  # Attention dropout helps on small data.
    max_length=128,  # Captions are short (at most ~80 pieces).
    vocab_size=8000,  # Joint en-de vocabulary.
    tokenizer_model_type="bpe",  # Byte-pair encoding, as the paper.
    # Training.
    tokens_per_batch=4096,  # About 4,096 padded tokens per step.
    max_train_length=128,  # Same as max_length.
    shuffle_buffer_size=29_000,  # The whole training split.
    warmup_steps=800,  # A quarter of the run.
    learning_rate_scale=1.5,  # Peaks at 4.7e-3 at step 800.
    train_steps=3200,  # About 30 epochs; ~95 minutes on 2 CPU cores.
    checkpoint_every_steps=200,  # Ten checkpoints over the last 2,000 steps.
    keep_checkpoints=10,  # The last 10, for checkpoint averaging.
    log_every_steps=100,  # TensorBoard and progress bar interval.
    # Decoding.
    beam_size=5,  # Beam 5, as the published reference point.
)
