"""Exports of a trained `Transformer`, each a text-to-text translator.

- `export_translator` / `load_translator` (`saved_model.py`): a SavedModel
  whose `serving_default` signature runs tokenisation, the cached beam
  search and detokenisation in one TensorFlow graph.
- `to_ctranslate2` / `load_ctranslate2` (`ctranslate2.py`): a CTranslate2
  model directory, for OpenNMT's C++ engine (float32, int8, int16).
"""

from tfattn.export.ctranslate2 import CTranslate2Translator
from tfattn.export.ctranslate2 import NotExportable
from tfattn.export.contract import Translations
from tfattn.export.ctranslate2 import load_ctranslate2
from tfattn.export.ctranslate2 import to_ctranslate2
from tfattn.export.saved_model import ATTENTION_SIGNATURE_KEY
from tfattn.export.saved_model import KERAS_FILENAME
from tfattn.export.saved_model import SIGNATURE_KEY
from tfattn.export.saved_model import VOCAB_FILENAME
from tfattn.export.saved_model import Translator
from tfattn.export.saved_model import export_translator
from tfattn.export.saved_model import SavedModelTranslator
from tfattn.export.saved_model import load_translator

__all__ = [
    "ATTENTION_SIGNATURE_KEY",
    "CTranslate2Translator",
    "KERAS_FILENAME",
    "NotExportable",
    "SIGNATURE_KEY",
    "SavedModelTranslator",
    "Translations",
    "Translator",
    "VOCAB_FILENAME",
    "export_translator",
    "load_ctranslate2",
    "load_translator",
    "to_ctranslate2",
]
