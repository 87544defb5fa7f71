"""The named hyperparameter sets of `train.py`, one module per set.

- `tiny`: a few-second model for tests and the generated numbers task;
- `gpt_tiny`: the same sizes as a GPT-style language model (task
  "language_model") of the numbers task's text, in seconds;
- `gpt_multi30k`: a 4-layer GPT-style model of one side of Multi30k;
- `bert_multi30k`: a 4-layer BERT-style model of one side of Multi30k;
- `bert_tiny`: the same sizes as a BERT-style masked language model (task
  "masked_lm") of the numbers task's text, in seconds;
- `base`, `big`: "Attention Is All You Need", Table 3 base and big;
- `reference_2017`, `reference_2019`: exactly the hyperparameters of
  Kyubyong/transformer's 2017 and 2019 code (docs/reference.md §1.8, §2.10);
- `multi30k`: a model sized for the 29,000 pairs of Multi30k, trained in
  about an hour on a 2-core CPU;
- `multi30k_reference`: the published 41.0-BLEU recipe of the same
  architecture (8,000 larger steps, 10 checkpoints averaged), about twice
  `multi30k`'s time.

Scores and training times per set: docs/results.md.

Each module defines `HPARAMS`, a `tfattn.config.HParams`. This package
belongs to the application (`train.py`, run from the repository root); the
library `tfattn` never imports it, and `pip install` does not install it.

```python
import hparams
from tfattn import config

hp = config.parse_overrides(hparams.get("tiny"), "num_heads=2")
```
"""

from hparams import base
from hparams import bert_multi30k
from hparams import bert_tiny
from hparams import big
from hparams import gpt_multi30k
from hparams import gpt_tiny
from hparams import multi30k
from hparams import multi30k_reference
from hparams import reference_2017
from hparams import reference_2019
from hparams import tiny

REGISTRY = {
    "tiny": tiny,
    "base": base,
    "big": big,
    "reference_2017": reference_2017,
    "reference_2019": reference_2019,
    "multi30k": multi30k,
    "multi30k_reference": multi30k_reference,
    "gpt_tiny": gpt_tiny,
    "gpt_multi30k": gpt_multi30k,
    "bert_tiny": bert_tiny,
    "bert_multi30k": bert_multi30k,
}


def names():
    """The registered set names."""
    return tuple(REGISTRY)


def get(name):
    """The HParams of a registered set.

    Raises:
        ValueError: an unknown name (the message lists the known sets).
    """
    if not isinstance(name, str) or name not in REGISTRY:
        raise ValueError(
            f"Unknown hparams set {name!r}. Known sets: "
            + ", ".join(REGISTRY)
        )
    return REGISTRY[name].HPARAMS
