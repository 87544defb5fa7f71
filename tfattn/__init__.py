"""tfattn: Keras 3 attention layers, Transformer stacks and models.

Reproduces Kyubyong/transformer's `multihead_attention` (2017 and 2019 code)
and offers the paper's attention, with the stacks, decoding, training and
export built on them.

The layers, models, losses, schedules and searches imported here run on
every Keras backend (the one Keras is set to: `KERAS_BACKEND` or
`~/.keras/keras.json`; TensorFlow when neither says). They import no
TensorFlow under another backend. The TensorFlow-only parts (`tfattn.training`,
`tfattn.data`, `tfattn.export`, `tfattn.interop`, translation and
evaluation in `tfattn.decoding.translate` / `.evaluation`) load when first
used.
"""

import importlib
import importlib.abc
import importlib.util
import sys

from tfattn import decoding  # noqa: E402
from tfattn import layers  # noqa: E402
from tfattn import losses  # noqa: E402
from tfattn import ops  # noqa: E402
from tfattn import schedules  # noqa: E402
from tfattn.functional import multihead_attention  # noqa: E402
from tfattn.layers import Attention  # noqa: E402
from tfattn.layers import Decoder  # noqa: E402
from tfattn.layers import DecoderBlock  # noqa: E402
from tfattn.layers import Dropout  # noqa: E402
from tfattn.layers import Encoder  # noqa: E402
from tfattn.layers import EncoderBlock  # noqa: E402
from tfattn.layers import FeedForward  # noqa: E402
from tfattn.layers import HardAttention  # noqa: E402
from tfattn.layers import LayerNormalization  # noqa: E402
from tfattn.layers import MultiHeadAttention  # noqa: E402
from tfattn.layers import PositionalEncoding  # noqa: E402
from tfattn.layers import TokenEmbedding  # noqa: E402
from tfattn.losses import LabelSmoothedCrossEntropy  # noqa: E402
from tfattn.models import CausalLM  # noqa: E402
from tfattn.models import MaskedLM  # noqa: E402
from tfattn.models import SequenceClassifier  # noqa: E402
from tfattn.models import TextEncoder  # noqa: E402
from tfattn.models import Transformer  # noqa: E402
from tfattn.schedules import NoamSchedule  # noqa: E402

__version__ = "0.1.0"

__all__ = [
    "decoding", "interop", "layers", "losses", "ops", "schedules",
    "multihead_attention", "Attention", "Decoder", "DecoderBlock", "Dropout",
    "Encoder", "EncoderBlock", "FeedForward", "HardAttention",
    "LayerNormalization", "MultiHeadAttention", "PositionalEncoding",
    "TokenEmbedding", "LabelSmoothedCrossEntropy", "CausalLM", "MaskedLM",
    "SequenceClassifier", "TextEncoder", "Transformer", "NoamSchedule",
]

# The modules that lay flat in tfattn/ before the subpackages: importable
# under their old names (`from tfattn import run_dir`, `import
# tfattn.translate`), as the same module objects, loaded when first asked.
_MOVED = {
    "tfattn.training_step": "tfattn.training.step",
    "tfattn.preparation": "tfattn.training.preparation",
    "tfattn.precision": "tfattn.training.precision",
    "tfattn.run_dir": "tfattn.training.run_dir",
    "tfattn.checkpoints": "tfattn.training.checkpoints",
    "tfattn.preemption": "tfattn.training.preemption",
    "tfattn.distribute": "tfattn.training.distribute",
    "tfattn.memory": "tfattn.training.memory",
    "tfattn.optimization": "tfattn.training.optimization",
    "tfattn.translate": "tfattn.decoding.translate",
    "tfattn.evaluation": "tfattn.decoding.evaluation",
    "tfattn.commands": "tfattn.cli.commands",
    "tfattn.errors": "tfattn.cli.errors",
    "tfattn.overrides": "tfattn.config.overrides",
    "tfattn.reference_checkpoint": "tfattn.interop.reference_checkpoint",
    "tfattn.files": "tfattn.utils.files",
    "tfattn.validation": "tfattn.utils.validation",
}


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old module name and hands over the module it moved to."""

    _own_specs = {}

    def find_spec(self, fullname, path=None, target=None):
        """The spec of `fullname` if it is an old name (else None)."""
        if fullname not in _MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        """The moved module itself, imported under its new name."""
        module = importlib.import_module(_MOVED[spec.name])
        self._own_specs[module.__name__] = module.__spec__
        return module

    def exec_module(self, module):
        """Gives the module its own spec back (the import system set the
        old name's)."""
        module.__spec__ = self._own_specs.pop(module.__name__)


sys.meta_path.insert(0, _MovedModules())


# Subpackages that need TensorFlow, loaded on first use (`tfattn.interop`).
_LAZY = ("interop", "training", "data", "export", "visualize", "cli",
         "config", "utils")


def __getattr__(name):
    if f"tfattn.{name}" in _MOVED or name in _LAZY:
        return importlib.import_module(f"tfattn.{name}")
    raise AttributeError(f"module 'tfattn' has no attribute {name!r}")
