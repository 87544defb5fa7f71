"""A tiny BERT-style masked language model: tests and the quick start, in
seconds.

`tiny`'s sizes with the masked-LM task: a `tfattn.MaskedLM` (post-norm
blocks, as BERT; GELU in the feed-forward layers and the head, as BERT)
trained on the text of the numbers task with `python train.py
--hparams=bert_tiny --dataset=numbers`, or on any one-language text
(`--dataset=textfiles:PREFIX`, `--dataset=multi30k --target_language=en`).
BERT's masking: 15% of the pieces chosen, of those 80% masked, 10% random,
10% kept.
"""

import dataclasses

from hparams import tiny

HPARAMS = dataclasses.replace(
    tiny.HPARAMS,
    task="masked_lm",  # A MaskedLM on the target side.
    activation="gelu",  # BERT's feed-forward activation.
    label_smoothing=0.0,  # BERT's loss: plain cross-entropy at the blanks.
    train_steps=400,  # Number words follow a grammar a tiny model learns.
    checkpoint_every_steps=100,  # Four checkpoints per run.
)
