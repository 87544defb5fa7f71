"""Text <-> CTranslate2 tokens for tfattn's CTranslate2 exports (private
module of `tfattn.export.ctranslate2` and `ctranslate2_generator`).

CTranslate2 reads and writes token strings; an export's vocabulary is one
string per tfattn id, so a text goes to tfattn ids, then to their strings,
and the engine's output ids are tfattn ids again. Two tokenizers do the
first and last step:

- a model trained by tfattn: its SentencePiece model, `spm.model` in the
  export (tfattn's ids are the SentencePiece ids; the strings its pieces);
- a model imported from a checkpoint (`tfattn.interop.marian`, `gpt2`):
  the checkpoint's tokenizer, kept in the export's `pretrained/` folder as
  a training run keeps it (`tfattn.interop.pretrained.save_to_run`), the
  strings `ctranslate2_spec.checkpoint_pieces`.

- `is_checkpoint_tokenizer(tokenizer)`: whether it is the second kind.
- `save(tokenizer, model, directory)`: writes what `load` reads.
- `load(directory)`: a `SentencePieceText` or a `CheckpointText`.
"""

import os

import keras
import tensorflow as tf

from tfattn.decoding.translate import model_proto_of
from tfattn.export import ctranslate2_spec
from tfattn.interop import pretrained
from tfattn.interop._marian_vocab import MarianTokenizer
from tfattn.interop.gpt2_tokenizer import GPT2Tokenizer

__all__ = ["CheckpointText", "SentencePieceText", "is_checkpoint_tokenizer",
           "save", "load", "VOCAB_FILENAME"]

VOCAB_FILENAME = "spm.model"


def _kind(tokenizer):
    if isinstance(tokenizer, MarianTokenizer):
        return pretrained.MARIAN
    if isinstance(tokenizer, GPT2Tokenizer):
        return pretrained.GPT2_HUGGINGFACE
    return None


def is_checkpoint_tokenizer(tokenizer):
    """Whether `tokenizer` is an imported checkpoint's (Marian, GPT-2).

    Args:
        tokenizer: any tokenizer.

    Returns:
        bool.
    """
    return _kind(tokenizer) is not None


def save(tokenizer, model, directory, path):
    """Writes the tokenizer of an export into `directory`.

    Args:
        tokenizer: a `SubwordTokenizer` (or SentencePiece bytes), or a
            checkpoint's `MarianTokenizer` or `GPT2Tokenizer`.
        model: the exported model (its Keras config is recorded beside a
            checkpoint's tokenizer, as a training run records it).
        directory: str. Where the export is being written.
        path: str. The export's final directory (recorded as the source).
    """
    kind = _kind(tokenizer)
    if kind is None:
        with open(os.path.join(directory, VOCAB_FILENAME), "wb") as f:
            f.write(model_proto_of(tokenizer))
        return
    pretrained.save_to_run(kind, path,
                           keras.saving.serialize_keras_object(model),
                           tokenizer, directory)


def load(directory):
    """The text side of an export.

    Args:
        directory: str. An export `save` wrote into.

    Returns:
        `CheckpointText` when it holds a checkpoint's tokenizer, else
        `SentencePieceText`.
    """
    record = pretrained.load_from_run(directory)
    if record is not None:
        return CheckpointText(record[1])
    return SentencePieceText(os.path.join(directory, VOCAB_FILENAME))


class SentencePieceText:
    """A tfattn-trained model's SentencePiece model.

    Args:
        path: str. The `spm.model` file.
    """

    def __init__(self, path):
        import sentencepiece

        self._processor = sentencepiece.SentencePieceProcessor()
        self._processor.Load(path)

    def ids(self, texts):
        """list of B str -> B lists of tfattn ids (no BOS or EOS)."""
        return self._processor.encode(list(texts))

    def token(self, token_id):
        """The CTranslate2 token string of a tfattn id."""
        return self._processor.id_to_piece(int(token_id))

    def id_of(self, token):
        """The tfattn id of a CTranslate2 token string."""
        return self._processor.piece_to_id(token)

    def text(self, ids):
        """tfattn ids (no specials) -> str."""
        return self._processor.decode(list(ids))


class CheckpointText:
    """An imported checkpoint's tokenizer.

    Args:
        tokenizer: a `MarianTokenizer` or `GPT2Tokenizer`.
    """

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self._tokens = ctranslate2_spec.checkpoint_pieces(tokenizer)
        self._ids = {token: i for i, token in enumerate(self._tokens)}

    def ids(self, texts):
        """list of B str -> B lists of tfattn ids (no BOS or EOS), as the
        checkpoint's own tokenizer gives them (Marian: transformers'
        `MarianTokenizer`, special tokens in the text kept whole)."""
        texts = list(texts)
        if hasattr(self.tokenizer, "encode"):  # Marian: drop its `</s>`.
            return [self.tokenizer.encode(text)[:-1] for text in texts]
        if not texts:
            return []
        return self.tokenizer.tokenize(tf.constant(texts)).to_list()

    def token(self, token_id):
        """The CTranslate2 token string of a tfattn id."""
        return self._tokens[int(token_id)]

    def id_of(self, token):
        """The tfattn id of a CTranslate2 token string."""
        return self._ids[token]

    def text(self, ids):
        """tfattn ids (no specials) -> str, as the checkpoint's tokenizer
        decodes them."""
        ids = list(ids)
        if hasattr(self.tokenizer, "decode"):
            return self.tokenizer.decode(ids)
        return self.tokenizer.detokenize(
            tf.constant(ids, tf.int32)).numpy().decode("utf-8")
