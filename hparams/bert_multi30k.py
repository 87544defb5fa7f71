"""A BERT-style masked language model of Multi30k's English captions.

`multi30k`'s sizes (4 blocks of width 128, 4 heads, FFN 256, embeddings
from N(0, d^-0.5), cosine decay from a 6e-3 peak) as a `tfattn.MaskedLM`
with GELU (BERT's) on one side of the corpus: `python train.py
--hparams=bert_multi30k --dataset=multi30k --manual_dir=DIR
--target_language=en`. BERT's masking (15% chosen; 80% `[MASK]`, 10%
random, 10% kept), fresh blanks every pass; an 8,000-piece BPE vocabulary
with the `[MASK]` piece. Pre-norm blocks (BERT is post-norm): at this peak
rate post-norm stacks train less stably. No label smoothing (BERT's loss).
BERT's tables (learned positions, unscaled truncated N(0, 0.02) token and
position tables, the embeddings' layer norm, BERT's kernels) score lower
on validation at this set's peak rate, so the set keeps its own
(docs/results.md).
"""

import dataclasses

from hparams import multi30k

HPARAMS = dataclasses.replace(
    multi30k.HPARAMS,
    task="masked_lm",  # A MaskedLM on the --target_language side.
    activation="gelu",  # BERT's.
    dropout_rate=0.1,  # New blanks every pass regularise already.
    label_smoothing=0.0,  # BERT's plain cross-entropy at the blanks.
    vocab_size=8000,  # One language needs fewer pieces than en+de.
    train_steps=4000,  # About 30 passes over the captions.
    eval_every_steps=0,  # BLEU does not apply; --mode=eval: accuracy.
    keep_checkpoints=5,  # The last five.
    average_checkpoints=1,  # The last checkpoint (cosine ends annealed).
    beam_size=1,  # Not used by a masked LM.
)
