"""A tiny GPT-style language model: tests and the quick start, in seconds.

`tiny`'s sizes with the language-model task: a `tfattn.CausalLM` with
pre-norm blocks (GPT-2's placement) and an output head tied to the token
embedding, trained on the text of the numbers task (numbers written in
words) with `python train.py --hparams=gpt_tiny --dataset=numbers`, or on
any one-language text (`--dataset=textfiles:PREFIX`, `--dataset=multi30k
--target_language=en`).
"""

import dataclasses

from hparams import tiny

HPARAMS = dataclasses.replace(
    tiny.HPARAMS,
    task="language_model",  # A CausalLM on the target side.
    normalize_first=True,  # Pre-norm, as GPT-2.
    train_steps=400,  # Number words follow a grammar a tiny model learns.
    checkpoint_every_steps=100,  # Four checkpoints per run.
)
