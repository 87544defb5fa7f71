"""tfattn: Keras 3 attention layers and Transformer stacks (TensorFlow backend).

Reproduces Kyubyong/transformer's `multihead_attention` (2017 and 2019 code)
and offers the paper's attention, with the stacks, decoding, training and
export built on them.
"""

import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from tfattn import decoding  # noqa: E402
from tfattn import interop  # noqa: E402
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
from tfattn.models import Transformer  # noqa: E402
from tfattn.schedules import NoamSchedule  # noqa: E402

__version__ = "0.1.0"
