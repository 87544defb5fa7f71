"""A model sized for Multi30k (29,000 English-German caption pairs).

The architecture of the published 41.02-BLEU en->de reference point
(`shared/data/multi30k/README.md`: Wu et al. 2021, a 4+4-layer Transformer
with d_model 128, FFN 256 and 4 heads, 8,000 updates of 4,096 tokens), with
a joint 8,000-piece vocabulary, trained for 2,000 steps of about 4,096
padded tokens so that training fits in about 65 minutes on 2 CPU cores
(about 1.9 s per step in float32, 2,200 target tokens/s), i.e. about 20
passes over the training split; beam 5, as the reference point. Derived
from `base` (post-norm, shared and tied embeddings, Adam(0.9, 0.98, 1e-9),
label smoothing 0.1).

The learning rate peaks at 1e-3: a first run with the paper's formula for
d_model 128 (peak 4.7e-3 at step 800) stalled at 34% token accuracy by
step 1,300.
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
    dropout_rate=0.1,  # As base (and the 36.5-BLEU de->en reference).
    max_length=128,  # Captions are short (at most ~80 pieces).
    vocab_size=8000,  # Joint en-de vocabulary.
    tokenizer_model_type="bpe",  # Byte-pair encoding, as the paper.
    # Training.
    tokens_per_batch=4096,  # About 4,096 padded tokens per step.
    max_train_length=128,  # Same as max_length.
    shuffle_buffer_size=29_000,  # The whole training split.
    learning_rate=1e-3,  # Noam peak-normalised form: 1e-3 at warmup's end...
    warmup_steps=400,  # ...then 1e-3 * sqrt(400 / step).
    train_steps=2000,  # About 20 epochs; ~65 minutes on 2 CPU cores.
    checkpoint_every_steps=200,  # Every 200 steps.
    keep_checkpoints=5,  # The last 5, for --average_checkpoints=5.
    log_every_steps=100,  # TensorBoard and progress bar interval.
    # Decoding.
    beam_size=5,  # Beam 5, as the published reference point.
)
