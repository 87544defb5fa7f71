"""Translation with a trained `Transformer`: text in, text out.

- `decode_lengths`: the source cap and the largest output buffer of a
  model.
- `encode_for_translation`: strings -> source ids (pieces, EOS, padding),
  eagerly and inside graphs; `tfattn.export` uses it in the SavedModel, so
  `translate_texts` and the export compute the same thing.
- `pad_to_bucket`: source ids padded to their length bucket (XLA's shapes).
- `translate_texts`: source strings -> translations with `model.generate`
  (beam search or greedy), batch by batch, one traced function per setting.
- `sample_translations`: the first pairs of a split, with the exact-match rate.
"""

import weakref

import numpy as np
import tensorflow as tf

from tfattn.data.sources import load_pairs
from tfattn.data.tokenizer import EOS_ID
from tfattn.data.tokenizer import PAD_ID
from tfattn.data.tokenizer import SubwordTokenizer
from tfattn.decoding import samplers
from tfattn.utils import buckets
from tfattn.utils.validation import check_non_negative_float
from tfattn.utils.validation import check_positive_int
from tfattn.utils.validation import invalid_argument

__all__ = [
    "decode_lengths",
    "encode_for_translation",
    "pad_to_bucket",
    "model_proto_of",
    "empty_source_rows",
    "generate_fn",
    "translate_texts",
    "sample_translations",
]

_CONTEXT = "translate"


def decode_lengths(model, extra_length=50, max_source_length=None):
    """The source cap S and the largest output buffer length L of a model.

    Args:
        model: a `tfattn.Transformer`.
        extra_length: int >= 0. An output may be this much longer than its
            source (the paper's input length + 50). Defaults to `50`.
        max_source_length: int or None. Longest source, in pieces with EOS;
            longer sources are truncated (their last piece replaced by EOS).
            `None` takes `model.max_length - extra_length`, or
            `model.max_length` when that is not positive. At most
            `model.max_length` (the positional table).

    Returns:
        `(max_source_length, max_length)`: Python ints, with
        `max_length = min(max_source_length + extra_length,
        model.max_length)`: the longest output (a batch decodes into its
        longest source plus `extra_length`, capped there).
    """
    if isinstance(extra_length, bool) or not isinstance(
        extra_length, (int, np.integer)
    ) or extra_length < 0:
        raise invalid_argument(
            "extra_length", "a non-negative integer", extra_length, _CONTEXT
        )
    table = int(model.max_length)
    if max_source_length is None:
        max_source_length = table - extra_length
        if max_source_length < 1:
            max_source_length = table
    else:
        max_source_length = check_positive_int(
            "max_source_length", max_source_length, _CONTEXT
        )
        if max_source_length > table:
            raise invalid_argument(
                "max_source_length",
                f"at most the model's max_length={table} (its positional "
                "table)",
                max_source_length,
                _CONTEXT,
            )
    return int(max_source_length), int(min(max_source_length + extra_length,
                                            table))


def encode_for_translation(sp_tokenizer, sentences, max_source_length,
                           pad_to_length=False, return_truncated=False):
    """Strings -> int32 source ids `[B, S]`: pieces, EOS, 0-padding.

    A source longer than `max_source_length` (EOS included) keeps its first
    `max_source_length - 1` pieces, then EOS. Works eagerly and in graphs.

    Args:
        sp_tokenizer: anything whose `tokenize([B] strings)` returns a ragged
            `[B, None]` int tensor (a `SubwordTokenizer` or a
            `tensorflow_text.SentencepieceTokenizer`).
        sentences: `[B]` `tf.string` tensor.
        max_source_length: Python int.
        pad_to_length: bool. Pad to `max_source_length` columns (a static
            shape) instead of the longest row. Defaults to `False`.
        return_truncated: bool. Also return which rows were cut.

    Returns:
        int32 `[B, S]` tensor; with `return_truncated`, also bool `[B]`,
        True where the source lost pieces.
    """
    pieces = tf.cast(sp_tokenizer.tokenize(sentences), tf.int32)
    ids = pieces[:, : max_source_length - 1]
    eos = tf.fill([ids.nrows(), 1], tf.constant(EOS_ID, tf.int32))
    ids = tf.concat([ids, eos], axis=1)
    if pad_to_length:
        ids = ids.to_tensor(default_value=PAD_ID,
                            shape=[None, max_source_length])
    else:
        ids = ids.to_tensor(default_value=PAD_ID)
    if not return_truncated:
        return ids
    return ids, pieces.row_lengths() > max_source_length - 1


def model_proto_of(tokenizer):
    """The serialized SentencePiece model of a tokenizer (or the bytes).

    Args:
        tokenizer: a `tfattn.data.SubwordTokenizer` (anything with a
            non-empty bytes `model_proto`), or the bytes themselves.

    Returns:
        bytes. The SentencePiece model.

    Raises:
        ValueError: `tokenizer` has no such `model_proto`.
    """
    if isinstance(tokenizer, bytes):
        return tokenizer
    proto = getattr(tokenizer, "model_proto", None)
    if not isinstance(proto, bytes) or not proto:
        raise invalid_argument(
            "tokenizer",
            "a `tfattn.data.SubwordTokenizer` (or the bytes of its "
            "SentencePiece model)",
            type(tokenizer).__name__,
            _CONTEXT,
        )
    return proto


# model -> {(beam_size, alpha, extra_length, max_length, jit): tf.function};
# weak, so a cached function never keeps a model alive.
_GENERATE_FNS = weakref.WeakKeyDictionary()


def generate_fn(model, sampler, extra_length, max_length, jit_compile,
                seed=0):
    """`model.search` with these settings as a `tf.function` of the source
    ids [B, S], traced once per model and settings and cached (weakly) for
    every caller: a beam search run eagerly steps op by op (the four
    attention images of a tiny `--mode=all` run took 2.9 s that way, 1.4 s
    through the search eval had traced).

    Args:
        model: a built `tfattn.Transformer`. Held weakly.
        sampler: a `Sampler` (`samplers.for_beam_size(beam_size, alpha)`
            for the hparams' beam settings).
        extra_length: int. Outputs stop at their source length plus this.
        max_length: int or None. The output buffer length; None: the
            source's width S plus `extra_length`, capped at the model's
            `max_length` (sized per call, `Transformer.search`).
        jit_compile: bool. Compile with XLA; the function then takes no
            input signature and compiles once per source shape.
        seed: int in [-2**63, 2**63). The draws' seed (sampling).

    Returns:
        The `tf.function`: int32 source ids [B, S] -> `(ids [B, L],
        scores [B])`.
    """
    key = (sampler, extra_length, max_length, jit_compile, seed)
    per_model = _GENERATE_FNS.setdefault(model, {})
    if key not in per_model:
        # The model is held weakly by the function too.
        model_ref = weakref.ref(model)
        words = samplers.seed_words(seed, _CONTEXT)

        def generate(source):
            return model_ref().search(source, max_length, sampler, EOS_ID,
                                      tf.constant(words), extra_length)

        # Without XLA the batch and source length are left free (one trace
        # for every batch shape); XLA compiles per shape, so its callers pad
        # to one shape.
        signature = None if jit_compile else [
            tf.TensorSpec([None, None], tf.int32, name="source")
        ]
        per_model[key] = tf.function(
            generate, input_signature=signature, jit_compile=jit_compile,
            reduce_retracing=False, autograph=False,
        )
    return per_model[key]


def translate_texts(model, tokenizer, texts, beam_size=4, alpha=0.6,
                    batch_size=64, extra_length=50, max_source_length=None,
                    jit_compile=False, sampler=None, seed=0):
    """Translates source strings with `Transformer.search`, batch by batch.

    Every batch has the same number of rows: the last one is padded with
    empty strings (whose outputs are dropped), so it reuses the traced (or,
    with `jit_compile`, compiled) function of the others. The graph is cached
    per model and decoding setting, so later calls do not retrace. Each
    batch decodes into a buffer of its longest source plus `extra_length`
    positions (as `Transformer.generate`), not the model's whole
    `max_length`: every step attends over the buffer, so its length is
    most of a step's cost.

    With the same arguments, the result equals the `translations` output of
    a SavedModel from `tfattn.export.export_translator` for the same batch:
    both truncate and encode the sources with `encode_for_translation` and
    stop each row at its source length plus `extra_length`.

    Args:
        model: a built `tfattn.Transformer`.
        tokenizer: the `tfattn.data.SubwordTokenizer` of the model (or the
            bytes of its SentencePiece model).
        texts: list of str (or bytes). Source sentences.
        beam_size: int. 1 = greedy search. Defaults to `4`.
        alpha: float. Length penalty of beam search. Defaults to `0.6`.
        batch_size: int. Rows per batch (at most `len(texts)` are used).
            Defaults to `64`.
        extra_length: int. Outputs stop at their source length plus this.
            Defaults to `50`.
        max_source_length: int or None. Source cap (see `decode_lengths`).
        jit_compile: bool. Run the search under XLA, with each batch's
            sources padded to their length bucket (the next power of two
            >= 8, at most `max_source_length`), so that one compilation
            serves every batch of a bucket (as `Transformer.generate`).
            Faster once compiled; results can differ from the non-XLA
            ones in the last float bits. Defaults to `False`.
        sampler: a `Sampler`, its name, or None: `beam_size` and `alpha`'s
            search (greedy for 1 beam). Any sampler of
            `Transformer.generate` works (e.g. `TopPSampler(0.9)` for
            diverse translations); with one, `beam_size` and `alpha` are
            not used.
        seed: int in [-2**63, 2**63). The draws' seed (sampling).

    Returns:
        list of str, one translation per input, in order.
    """
    beam_size = check_positive_int("beam_size", beam_size, _CONTEXT)
    alpha = check_non_negative_float("alpha", alpha, _CONTEXT)
    sampler = (samplers.for_beam_size(beam_size, alpha) if sampler is None
               else samplers.get(sampler))
    samplers.seed_words(seed, _CONTEXT)
    batch_size = check_positive_int("batch_size", batch_size, _CONTEXT)
    if not isinstance(jit_compile, bool):
        raise invalid_argument("jit_compile", "a Python bool", jit_compile,
                               _CONTEXT)
    if isinstance(texts, (str, bytes)):
        raise invalid_argument(
            "texts", "a list of strings (not one string)", texts, _CONTEXT
        )
    texts = list(texts)
    for i, text in enumerate(texts):
        if not isinstance(text, (str, bytes)):
            raise invalid_argument(
                "texts",
                f"a list of str or bytes (item {i} is {type(text).__name__})",
                text,
                _CONTEXT,
            )
    if not texts:
        return []
    max_source_length, _ = decode_lengths(model, extra_length,
                                          max_source_length)
    # A fresh in-graph tokenizer: tensorflow-text's SentencePiece resource
    # dies with the eager kernel cache, which `tf.random.set_seed` (and
    # `keras.utils.set_random_seed`) clears, so a tokenizer made before a
    # reseed fails with "Resource ... SentencepieceOp ... does not exist".
    if isinstance(tokenizer, bytes) or hasattr(tokenizer, "model_proto"):
        tokenizer = SubwordTokenizer(model_proto_of(tokenizer))
    else:  # A pretrained checkpoint's (`export.graph_tokenizer`).
        getattr(tokenizer, "rebuild_graph_ops", lambda: None)()
    rows = min(batch_size, len(texts))
    outputs = []
    for start in range(0, len(texts), rows):
        batch = texts[start:start + rows]
        real = len(batch)
        batch = batch + [""] * (rows - real)
        source = encode_for_translation(
            tokenizer, tf.constant(batch, tf.string), max_source_length)
        buffer = None  # Sized in the graph: one trace for every shape.
        if jit_compile:  # XLA compiles per shape: pad to the bucket.
            source = pad_to_bucket(source, max_source_length)
            buffer = min(int(source.shape[1]) + int(extra_length),
                         int(model.max_length))
        generate = generate_fn(model, sampler, int(extra_length), buffer,
                               jit_compile, seed)
        ids, _ = generate(source)
        decoded = tokenizer.detokenize(ids).numpy()[:real]
        # The serving contract: a text without pieces translates to "".
        empty = empty_source_rows(source).numpy()
        outputs.extend("" if blank else t.decode("utf-8")
                       for t, blank in zip(decoded, empty))
    return outputs


def pad_to_bucket(source, max_source_length):
    """Source ids right-padded with 0 to their length bucket
    (`tfattn.utils.buckets.bucket`, at most `max_source_length`), eagerly
    and inside graphs: XLA compiles once per bucket instead of once per
    length.

    Args:
        source: int32 `[B, S]` tensor, S <= `max_source_length`.
        max_source_length: Python int. The source cap.

    Returns:
        int32 `[B, S']` tensor, S' the smallest bucket >= S (or the cap).
    """
    sizes = [buckets.MIN_BUCKET]
    while sizes[-1] < max_source_length:
        sizes.append(sizes[-1] * 2)
    sizes = tf.constant([min(n, max_source_length) for n in sizes])
    width = tf.shape(source)[1]
    target = tf.reduce_min(tf.boolean_mask(sizes, sizes >= width))
    return tf.pad(source, [[0, 0], [0, target - width]])


def sample_translations(model, tokenizer, decoding, spec, split="validation",
                        count=100):
    """Translates the first `count` pairs of a split.

    Args:
        model: a built `tfattn.Transformer`.
        tokenizer: its `tfattn.data.SubwordTokenizer` (or the bytes of its
            SentencePiece model).
        decoding: dict of `translate_texts` keyword arguments (the run's
            `config.decoding_kwargs(hp)`).
        spec: DatasetSpec. The dataset (see `sources.load_pairs`).
        split: str. The split. Defaults to `"validation"`.
        count: int. Pairs translated (the split's first). Defaults to
            `100`.

    Returns:
        (exact-match rate, list of (source, reference, hypothesis)).
    """
    pairs = load_pairs(spec, split, limit=count)
    hypotheses = translate_texts(model, tokenizer, [s for s, _ in pairs],
                                 **decoding)
    rows = [(s, r, h) for (s, r), h in zip(pairs, hypotheses)]
    exact = float(np.mean([r == h for _, r, h in rows])) if rows else 0.0
    return exact, rows


def empty_source_rows(source_ids):
    """The rows of encoded sources that hold EOS alone (their text had no
    piece).

    Args:
        source_ids: int `[B, S]` tensor. Encoded sources, padded with
            `PAD_ID`.

    Returns:
        A bool `[B]` tensor, True where a row has at most one id other
        than padding.
    """
    lengths = tf.reduce_sum(tf.cast(tf.not_equal(source_ids, PAD_ID),
                                    tf.int32), axis=1)
    return tf.less_equal(lengths, 1)
