"""The hyperparameter schema of a training run: `HParams` and its parsing.

One frozen `HParams` holds every hyperparameter of a run (model, training
and decoding fields); the named sets are the application's, in `hparams/`
at the repository root. This package hands the names on; the code lives in
its modules:

- `hparams`: `HParams`, the field groups (`MODEL_FIELDS`,
  `RESUMABLE_FIELDS`, ...), the choices, `model_kwargs`, the JSON form;
- `overrides`: `parse_overrides`, the `--hparams_overrides` syntax.

Example::

    from tfattn import config

    hp = config.HParams(...)  # or a named set: hparams.get("tiny")
    hp = config.parse_overrides(hp, "num_heads=2,dropout_rate=0.2")
    assert config.from_json(config.to_json(hp)) == hp
"""

from tfattn.config.hparams import ACTIVATIONS
from tfattn.config.hparams import ADDED_FIELDS
from tfattn.config.hparams import BATCH_FIELDS
from tfattn.config.hparams import DECODING_FIELDS
from tfattn.config.hparams import EMBEDDINGS_INITIALIZERS
from tfattn.config.hparams import KERNEL_INITIALIZERS
from tfattn.config.hparams import LEARNING_RATE_SCHEDULES
from tfattn.config.hparams import MODEL_FIELDS
from tfattn.config.hparams import POSITIONAL_ENCODINGS
from tfattn.config.hparams import RESUMABLE_FIELDS
from tfattn.config.hparams import TASKS
from tfattn.config.hparams import TOKENIZER_MODEL_TYPES
from tfattn.config.hparams import TOKENIZER_NORMALIZATIONS
from tfattn.config.hparams import HParams
from tfattn.config.hparams import decoding_kwargs
from tfattn.config.hparams import differences
from tfattn.config.hparams import embeddings_initializer
from tfattn.config.hparams import field_names
from tfattn.config.hparams import from_json
from tfattn.config.hparams import kernel_initializer
from tfattn.config.hparams import model_kwargs
from tfattn.config.hparams import to_dict
from tfattn.config.hparams import to_json
from tfattn.config.hparams import training_fields
from tfattn.config.overrides import parse_overrides

__all__ = [
    "TASKS", "ACTIVATIONS", "POSITIONAL_ENCODINGS", "TOKENIZER_MODEL_TYPES",
    "TOKENIZER_NORMALIZATIONS",
    "LEARNING_RATE_SCHEDULES", "EMBEDDINGS_INITIALIZERS",
    "KERNEL_INITIALIZERS", "HParams",
    "MODEL_FIELDS", "DECODING_FIELDS", "BATCH_FIELDS", "RESUMABLE_FIELDS",
    "ADDED_FIELDS", "field_names", "training_fields", "model_kwargs",
    "embeddings_initializer", "kernel_initializer", "to_dict", "to_json",
    "from_json",
    "differences", "decoding_kwargs", "parse_overrides",
]
