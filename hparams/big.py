"""The paper's big model (Vaswani et al. 2017, Table 3 "big").

Derived from `base`: d_model 1024, d_ff 4096, 16 heads, dropout 0.3 (the
English-German value; English-French used 0.1) and 300,000 steps. Everything
else (vocabulary, batches, optimizer, schedule, decoding) is the base's.
"""

import dataclasses

from hparams import base

HPARAMS = dataclasses.replace(
    base.HPARAMS,
    num_units=1024,  # d_model = 1024.
    num_heads=16,  # h = 16.
    ffn_units=4096,  # d_ff = 4096.
    dropout_rate=0.3,  # P_drop = 0.3 (EN-DE).
    train_steps=300_000,  # Big models: 300,000 steps (3.5 days on 8 P100).
)
