"""Data for translation: corpora, a subword vocabulary and tf.data input.

- `multi30k`: the Multi30k task-1 TFDS builder (`Multi30k`, `load_multi30k`)
  and its tokenised references (`load_tokenized_references`).
- `numbers`: a generated digits-to-words task needing no download.
- `textfiles`: a user's own parallel text files, checked line by line.
- `tokenizer`: a joint SentencePiece vocabulary used inside the TF graph.
- `pipeline`: tokenize, filter, bucket and batch into
  `({'source', 'target_in'}, labels)` int32 batches.
- `masking`: BERT's masking for masked-LM training (`MaskGenerator`).
- `sources`: dataset spec strings (`numbers`, `multi30k`, `tfds:NAME`,
  `textfiles:PREFIX`), their splits, and a run's vocabulary.
"""

from tfattn.data.masking import MaskGenerator
from tfattn.data.masking import word_starts
from tfattn.data.multi30k import Multi30k
from tfattn.data.multi30k import Multi30kDownloadError
from tfattn.data.multi30k import load_multi30k
from tfattn.data.multi30k import load_tokenized_references
from tfattn.data.numbers import load_numbers
from tfattn.data.numbers import number_to_words
from tfattn.data.numbers import numbers_dataset
from tfattn.data.numbers import numbers_splits
from tfattn.data.pipeline import default_bucket_boundaries
from tfattn.data.pipeline import encode_pair
from tfattn.data.pipeline import encode_sources
from tfattn.data.pipeline import make_batches
from tfattn.data.pipeline import pairs_to_dataset
from tfattn.data.textfiles import ParallelDataError
from tfattn.data.textfiles import load_parallel
from tfattn.data.textfiles import load_parallel_splits
from tfattn.data.textfiles import parallel_dataset
from tfattn.data.textfiles import read_lines
from tfattn.data.textfiles import read_parallel_files
from tfattn.data.tokenizer import BOS_ID
from tfattn.data.tokenizer import EOS_ID
from tfattn.data.tokenizer import PAD_ID
from tfattn.data.tokenizer import UNK_ID
from tfattn.data.tokenizer import SubwordTokenizer
from tfattn.data.tokenizer import load_tokenizer
from tfattn.data.tokenizer import train_tokenizer

__all__ = [
    "MaskGenerator",
    "word_starts",
    "Multi30k",
    "Multi30kDownloadError",
    "load_multi30k",
    "load_tokenized_references",
    "load_numbers",
    "number_to_words",
    "numbers_dataset",
    "numbers_splits",
    "default_bucket_boundaries",
    "encode_pair",
    "encode_sources",
    "make_batches",
    "pairs_to_dataset",
    "ParallelDataError",
    "load_parallel",
    "load_parallel_splits",
    "parallel_dataset",
    "read_lines",
    "read_parallel_files",
    "BOS_ID",
    "EOS_ID",
    "PAD_ID",
    "UNK_ID",
    "SubwordTokenizer",
    "load_tokenizer",
    "train_tokenizer",
]

# Dataset specs and splits build on the modules above.
from tfattn.data import sources  # noqa: E402
