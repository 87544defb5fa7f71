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

Under TensorFlow, importing tfattn first (before TensorFlow) holds back
TensorFlow's start-up lines that a user cannot act on and hides its C++
INFO lines (`TF_CPP_MIN_LOG_LEVEL=1` unless set); warnings, errors and
Python exceptions stay. `TFATTN_VERBOSE_IMPORT=1` or
`TF_CPP_MIN_LOG_LEVEL=0` keeps every line (`tfattn.utils.startup`).
"""

import importlib

from tfattn.utils import startup as _startup

# Before Keras, which imports TensorFlow and with it its banner.
_QUIET_START = _startup.start_quietly()

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

# Subpackages that need TensorFlow, loaded on first use (`tfattn.interop`).
_LAZY = ("interop", "training", "data", "export", "visualize", "cli",
         "config", "utils")


def __getattr__(name):
    if name in _LAZY:
        return importlib.import_module(f"tfattn.{name}")
    raise AttributeError(f"module 'tfattn' has no attribute {name!r}")
