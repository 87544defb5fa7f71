"""Monolingual text files for language models, streamed.

One text per line, with the checks of `tfattn.data.textfiles` (UTF-8, a
leading byte-order mark dropped, lines ending in `\\n` or `\\r\\n`,
surrounding whitespace removed, no empty line or file).
`check_text_file` reads a file once, line by line, and raises
`textfiles.ParallelDataError` (a `ValueError` whose message starts with
`path:line:`) at the first problem; `text_dataset` then streams the file
with `tf.data.TextLineDataset`. Neither holds the file in memory.

For sentence classifiers: `encode_texts` turns texts into `<s> pieces
</s>` id rows, and `word_order_examples` makes a labelled task from any
texts (each text as it is, or its words shuffled).
"""

import numpy as np
import tensorflow as tf

from tfattn.data.textfiles import stream_lines
from tfattn.data.textfiles import strip_line
from tfattn.data.tokenizer import BOS_ID
from tfattn.data.tokenizer import EOS_ID
from tfattn.utils.validation import check_positive_int
from tfattn.utils.validation import invalid_argument

__all__ = ["check_text_file", "text_dataset", "encode_texts",
           "word_order_examples"]


def check_text_file(path):
    """Checks a text file in one streaming pass.

    Args:
        path: str. Any path `tf.io.gfile` reads.

    Returns:
        int. The number of lines.

    Raises:
        ParallelDataError: the file is missing, a directory or empty, or a
            line is empty or not UTF-8 (the message names the line).
    """
    return sum(1 for _ in stream_lines(path))


def text_dataset(path):
    """The lines of a (checked) text file as `{'inputs': '', 'targets':
    line}` string scalars, streamed: the records of a language model's
    split (`tfattn.data.sources.load_split`).

    Args:
        path: str. A file that passed `check_text_file`.

    Returns:
        A `tf.data.Dataset` of dicts of `tf.string` scalars, in file order.
    """
    def record(line):
        return {"inputs": tf.constant(""), "targets": strip_line(line)}

    return tf.data.TextLineDataset(str(path)).map(
        record, num_parallel_calls=tf.data.AUTOTUNE)


def encode_texts(tokenizer, texts, length):
    """Texts as `<s> pieces </s>` rows: int32 [N, length], right-padded
    with 0; a text too long keeps its first `length - 2` pieces.

    Args:
        tokenizer: SubwordTokenizer.
        texts: list of str.
        length: int >= 3. The rows' width.

    Returns:
        NumPy int32 array [N, length].
    """
    check_positive_int("length", length, "encode_texts")
    if length < 3:
        raise invalid_argument("length", "an int >= 3 (<s>, a piece, </s>)",
                               length, "encode_texts")
    rows = np.zeros((len(texts), length), np.int32)
    if not texts:
        return rows
    for row, pieces in enumerate(tokenizer.tokenize(list(texts)).to_list()):
        ids = [BOS_ID] + pieces[:length - 2] + [EOS_ID]
        rows[row, :len(ids)] = ids
    return rows


def word_order_examples(texts, seed=0):
    """A two-class task from unlabelled texts: every other text keeps its
    words in order (label 1), the others have them shuffled into another
    order (label 0). Texts whose words have one order only (a single word,
    or one word repeated) are left out.

    Args:
        texts: list of str.
        seed: int. The shuffles' seed.

    Returns:
        `(texts, labels)`: a list of str and an int32 array [N] of 0 and 1.
    """
    rng = np.random.default_rng(seed)
    out, labels = [], []
    for text in texts:
        words = text.split()
        if len(set(words)) < 2:
            continue
        if len(out) % 2:
            shuffled = list(words)
            while shuffled == words:
                rng.shuffle(shuffled)
            words = shuffled
        labels.append(1 - len(out) % 2)
        out.append(" ".join(words))
    return out, np.asarray(labels, np.int32)
