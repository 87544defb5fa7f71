"""Exports of a trained `Transformer`, each a text-to-text translator,
of a `CausalLM`, prompts to continuations, of a `MaskedLM`, texts with
blanks to fillings, and of a `SequenceClassifier`, texts to labels.

- `export_translator` / `load_translator` (`saved_model.py`): a SavedModel
  whose `serving_default` signature runs tokenisation, the cached beam
  search and detokenisation in one TensorFlow graph.
- `to_ctranslate2` / `load_ctranslate2` (`ctranslate2.py`): a CTranslate2
  model directory, for OpenNMT's C++ engine (float32, int8, int16);
  `checkpoint_to_ctranslate2`: the same for a model imported from a GPT-2
  or Marian checkpoint (token level: the checkpoint's tokenizer tokenizes).
- `export_language_model` / `load_language_model` (`language_model.py`):
  a SavedModel of a `CausalLM` whose signatures continue text prompts
  (greedy, or top-p with a temperature and a seed).
- `causal_lm_to_ctranslate2` / `load_ctranslate2_generator`
  (`ctranslate2_generator.py`): the same model for CTranslate2's
  `Generator`.
- `export_masked_lm` / `load_masked_lm` (`masked_lm.py`): a SavedModel of
  a `MaskedLM` whose `fill_mask` signature fills the `[MASK]` blanks of
  texts (top-k).
- `export_classifier` / `load_classifier` (`classifier.py`): a SavedModel
  of a fine-tuned `SequenceClassifier` whose `serving_default` signature
  turns texts into labels and class probabilities.
"""

from tfattn.utils.backend import require_tensorflow_backend

require_tensorflow_backend("tfattn.export")

from tfattn.export.ctranslate2 import CTranslate2Translator  # noqa: E402
from tfattn.export.ctranslate2 import NotExportable  # noqa: E402
from tfattn.export.contract import Translations  # noqa: E402
from tfattn.export.ctranslate2 import checkpoint_to_ctranslate2  # noqa: E402,E501
from tfattn.export.ctranslate2 import load_ctranslate2  # noqa: E402
from tfattn.export.ctranslate2 import to_ctranslate2  # noqa: E402
from tfattn.export.saved_model import ATTENTION_SIGNATURE_KEY  # noqa: E402
from tfattn.export.saved_model import KERAS_FILENAME  # noqa: E402
from tfattn.export.saved_model import SIGNATURE_KEY  # noqa: E402
from tfattn.export.saved_model import VOCAB_FILENAME  # noqa: E402
from tfattn.export.saved_model import Translator  # noqa: E402
from tfattn.export.saved_model import export_translator  # noqa: E402
from tfattn.export.saved_model import SavedModelTranslator  # noqa: E402
from tfattn.export.saved_model import load_translator  # noqa: E402
from tfattn.export.language_model import LanguageModelExport  # noqa: E402
from tfattn.export.language_model import export_language_model  # noqa: E402
from tfattn.export.language_model import SavedModelLanguageModel  # noqa: E402,E501
from tfattn.export.language_model import load_language_model  # noqa: E402
from tfattn.export.ctranslate2_generator import CTranslate2Generator  # noqa: E402,E501
from tfattn.export.ctranslate2_generator import causal_lm_to_ctranslate2  # noqa: E402,E501
from tfattn.export.ctranslate2_generator import load_ctranslate2_generator  # noqa: E402,E501
from tfattn.export.masked_lm import FILL_MASK_SIGNATURE_KEY  # noqa: E402
from tfattn.export.masked_lm import MaskedLMExport  # noqa: E402
from tfattn.export.masked_lm import export_masked_lm  # noqa: E402
from tfattn.export.masked_lm import SavedModelMaskedLM  # noqa: E402
from tfattn.export.masked_lm import load_masked_lm  # noqa: E402
from tfattn.export.classifier import Classifications  # noqa: E402
from tfattn.export.classifier import ClassifierExport  # noqa: E402
from tfattn.export.classifier import export_classifier  # noqa: E402
from tfattn.export.classifier import SavedModelClassifier  # noqa: E402
from tfattn.export.classifier import load_classifier  # noqa: E402

__all__ = [
    "ATTENTION_SIGNATURE_KEY",
    "CTranslate2Generator",
    "CTranslate2Translator",
    "Classifications",
    "ClassifierExport",
    "FILL_MASK_SIGNATURE_KEY",
    "KERAS_FILENAME",
    "LanguageModelExport",
    "MaskedLMExport",
    "NotExportable",
    "SIGNATURE_KEY",
    "SavedModelClassifier",
    "SavedModelLanguageModel",
    "SavedModelMaskedLM",
    "SavedModelTranslator",
    "Translations",
    "Translator",
    "VOCAB_FILENAME",
    "causal_lm_to_ctranslate2",
    "checkpoint_to_ctranslate2",
    "export_classifier",
    "export_language_model",
    "export_masked_lm",
    "export_translator",
    "load_classifier",
    "load_ctranslate2",
    "load_ctranslate2_generator",
    "load_language_model",
    "load_masked_lm",
    "load_translator",
    "to_ctranslate2",
]
