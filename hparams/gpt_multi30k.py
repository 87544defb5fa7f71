"""A GPT-style language model of Multi30k's English captions.

`multi30k`'s recipe (pre-norm blocks of width 128, 4 heads, FFN 256,
embeddings from N(0, d^-0.5), cosine decay from a 6e-3 peak, dropout 0.3
for a small corpus) as a 4-layer `tfattn.CausalLM` with a tied head, on one
side of the corpus: `python train.py --hparams=gpt_multi30k
--dataset=multi30k --manual_dir=DIR --target_language=en`. An 8,000-piece
BPE vocabulary of the English side, 4,000 steps of about 4,096 tokens
(about 30 passes over the 29,000 captions). GPT-2's GELU, learned positions
and N(0, 0.02) kernels, as in the equal-budget comparison with keras-hub's
GPT-2 (bench/causal_lm_quality.py, docs/benchmarks.md), and the recipe's
label smoothing 0.1, which lowers the set's validation perplexity (the
translation recipe's ReLU, sinusoid and Glorot kernels scored within a
seed's spread of GPT-2's choices). docs/results.md gives the set's
perplexities.
"""

import dataclasses

from hparams import multi30k

HPARAMS = dataclasses.replace(
    multi30k.HPARAMS,
    task="language_model",  # A CausalLM on the --target_language side.
    activation="gelu",  # GPT's.
    positional_encoding="learned",  # GPT's.
    kernel_initializer="normal_0.02",  # GPT-2's N(0, 0.02) kernels.
    vocab_size=8000,  # One language needs fewer pieces than en+de.
    train_steps=4000,  # About 30 passes over the captions.
    eval_every_steps=0,  # BLEU does not apply; --mode=eval: perplexity.
    keep_checkpoints=5,  # The last five.
    average_checkpoints=1,  # The last checkpoint (cosine ends annealed).
    beam_size=1,  # Greedy continuations.
)
