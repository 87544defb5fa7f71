"""Weight porting between tfattn and Keras.

- `from_keras(layer)` / `to_keras(layer)`: a built
  `keras.layers.MultiHeadAttention` <-> an equal paper-flavour
  `tfattn.MultiHeadAttention` (same arguments, same weights;
  tfattn/interop/keras.py).
- `from_keras_hub(block)` / `to_keras_hub(block)`: keras-hub's
  `TransformerEncoder` / `TransformerDecoder` <-> tfattn's paper-flavour
  `EncoderBlock` / `DecoderBlock` (attention through `from_keras`, layer
  norms and feed-forward Dense layers as they are;
  tfattn/interop/keras_hub.py).
- `from_reference_checkpoint(path)` / `load_reference_checkpoint(model,
  path)`: a checkpoint written by the referenced TF1 code -> a
  `reference_2017` / `reference_2019` `Transformer`
  (tfattn/interop/reference_checkpoint.py; it needs TensorFlow, so it is
  loaded when one of its names is first asked for).
- `gpt2`: GPT-2 checkpoints, a Hugging Face directory or a keras-hub
  preset, <-> an equal `CausalLM` and its tokenizer
  (`gpt2.from_huggingface`, `gpt2.from_keras_hub`, `gpt2.to_huggingface`,
  `gpt2.to_keras_hub`; tfattn/interop/gpt2.py, loaded on first use like
  the TF1 import). Hugging Face directories are read by
  tfattn/interop/hf_files.py.
- `marian.from_huggingface(directory)` / `marian.to_huggingface(model,
  tokenizer, directory)`: a Hugging Face `MarianMTModel` (OPUS-MT)
  directory <-> an equal `Transformer` and its `MarianTokenizer`
  (tfattn/interop/marian.py, loaded on first use).
- `bert`: BERT checkpoints, a Hugging Face directory or a keras-hub
  preset, <-> an equal `MaskedLM` or `SequenceClassifier` and its
  WordPiece tokenizer (`bert.from_huggingface`, `bert.from_keras_hub`,
  `bert.to_huggingface`, `bert.to_keras_hub`; tfattn/interop/bert.py,
  loaded on first use).

Each returns a new, built layer; the input is not changed. This package
hands the names on; each module's docstring says what "equal" means.

Example::

    theirs = keras.layers.MultiHeadAttention(num_heads=4, key_dim=16)
    theirs(x, x)
    ours = tfattn.interop.from_keras(theirs)   # ours(x, x) == theirs(x, x)
    back = tfattn.interop.to_keras(ours)       # same weights as `theirs`
"""

from tfattn.interop.keras import from_keras
from tfattn.interop.keras import to_keras
from tfattn.interop.keras_hub import from_keras_hub
from tfattn.interop.keras_hub import to_keras_hub

__all__ = ["from_keras", "to_keras", "from_keras_hub", "to_keras_hub",
           "from_reference_checkpoint", "load_reference_checkpoint", "gpt2",
           "marian", "bert"]


def __getattr__(name):
    # The TF1 checkpoint import reads checkpoints with TensorFlow: loaded on
    # first use so that `tfattn.interop` imports under every backend.
    if name in ("from_reference_checkpoint", "load_reference_checkpoint"):
        from tfattn.interop import reference_checkpoint

        return getattr(reference_checkpoint, name)
    if name == "gpt2":
        import importlib

        return importlib.import_module("tfattn.interop.gpt2")
    if name == "bert":  # TensorFlow Text and safetensors on first use
        import importlib

        return importlib.import_module("tfattn.interop.bert")
    if name == "marian":  # SentencePiece and safetensors on first use
        import importlib

        return importlib.import_module("tfattn.interop.marian")
    raise AttributeError(f"module 'tfattn.interop' has no attribute {name!r}")
