"""Attention maps of a trained `Transformer` for a sentence, and TensorBoard
images of them.

Shapes: S = source pieces (EOS included), T = output pieces (EOS included
when the model emitted it), H = heads.
"""

import io
from typing import NamedTuple

import numpy as np
import tensorflow as tf

from tfattn.data.tokenizer import BOS_ID
from tfattn.data.tokenizer import EOS_ID
from tfattn.data.tokenizer import SubwordTokenizer
from tfattn.decoding import samplers
from tfattn.decoding.translate import decode_lengths
from tfattn.decoding.translate import encode_for_translation
from tfattn.decoding.translate import generate_fn
from tfattn.decoding.translate import model_proto_of
from tfattn.utils.validation import invalid_argument
from tfattn.visualize.plot import plot_attention

__all__ = [
    "KINDS",
    "AttentionMaps",
    "attention_maps",
    "query_and_key_tokens",
    "write_attention_summaries",
]

KINDS = ("encoder", "decoder", "cross")


class AttentionMaps(NamedTuple):
    """What `attention_maps` returns.

    Attributes:
        source_tokens: list of S str, the source pieces.
        target_tokens: list of T str, the output pieces; query t of the
            decoder is the position that emitted piece t.
        translation: str, the detokenised output.
        scores: {"encoder": [H, S, S] per layer, "decoder": [H, T, T],
            "cross": [H, T, S]}: lists of float32 NumPy arrays, layer 0
            first.
    """

    source_tokens: list
    target_tokens: list
    translation: str
    scores: dict


def attention_maps(model, tokenizer, text, beam_size=1, alpha=0.6,
                   extra_length=50):
    """Translates `text` and returns the attention of a forward pass over the
    translation (the teacher-forced pass that reproduces it). For a
    `CausalLM`: the causal self-attention of its pass over the text itself
    (BOS + pieces), as `"decoder"` maps, with no source tokens.

    Args:
        model: a built `tfattn.Transformer`, `tfattn.CausalLM` or
            `tfattn.MaskedLM`.
        tokenizer: its `SubwordTokenizer` (or the SentencePiece model bytes).
        text: str, one source sentence (a language model's text; a masked
            LM's may hold `[MASK]` blanks).
        beam_size, alpha, extra_length: the search, as the run's hparams
            say (`config.decoding_kwargs(hp)`). Default to `1` (greedy),
            `0.6` and `50`.

    Returns:
        An `AttentionMaps`.

    Raises:
        ValueError: `text` is not a non-empty str.
    """
    if not isinstance(text, str) or not text.strip():
        raise invalid_argument("text", "a non-empty sentence", text,
                               "attention_maps")
    if isinstance(tokenizer, bytes) or hasattr(tokenizer, "model_proto"):
        tokenizer = SubwordTokenizer(model_proto_of(tokenizer))
    else:  # A pretrained checkpoint's (`export.graph_tokenizer`).
        getattr(tokenizer, "rebuild_graph_ops", lambda: None)()
    if _is_language_model(model):
        return _language_model_maps(model, tokenizer, text)
    if _is_masked_lm(model):
        return _masked_lm_maps(model, tokenizer, text)
    max_source_length, max_length = decode_lengths(model, extra_length)
    source = encode_for_translation(tokenizer, tf.constant([text]),
                                    max_source_length)
    ids, _ = generate_fn(model, samplers.for_beam_size(beam_size, alpha),
                         extra_length, max_length, jit_compile=False)(source)
    output = [int(i) for i in np.asarray(ids)[0] if i != 0]
    if EOS_ID in output:
        output = output[:output.index(EOS_ID) + 1]
    target_in = np.array([[BOS_ID] + output[:-1]], np.int32)
    _, scores = model((source, target_in), return_attention_scores=True)
    return AttentionMaps(
        source_tokens=[tokenizer.id_to_piece(i) for i in np.asarray(source)[0]],
        target_tokens=[tokenizer.id_to_piece(i) for i in output],
        translation=tokenizer.detokenize(
            tf.constant(output or [EOS_ID], tf.int32)).numpy().decode("utf-8"),
        scores={kind: [np.asarray(w)[0] for w in scores[kind]]
                for kind in KINDS if kind in scores},
    )


def _is_language_model(model):
    from tfattn.models import CausalLM

    return isinstance(model, CausalLM)


def _is_masked_lm(model):
    from tfattn.models import MaskedLM

    return isinstance(model, MaskedLM)


def _masked_lm_maps(model, tokenizer, text):
    """A `MaskedLM`'s maps: its bidirectional self-attention over `<s>` +
    the text's pieces + `</s>` (`[MASK]` pieces stay blanks), as "encoder"
    [H, T, T]; no target, no search."""
    pieces = tokenizer.tokenize([text]).to_list()[0][:model.max_length - 2]
    ids = np.array([[BOS_ID] + pieces + [EOS_ID]], np.int32)
    _, scores = model(ids, return_attention_scores=True)
    return AttentionMaps(
        source_tokens=[tokenizer.id_to_piece(i) for i in ids[0]],
        target_tokens=[],
        translation=text,
        scores={"encoder": [np.asarray(w)[0] for w in scores["encoder"]]},
    )


def _language_model_maps(model, tokenizer, text):
    """A `CausalLM`'s maps: its causal self-attention over BOS + the text's
    pieces (cut to the model's positions), as "decoder" [H, T, T]; no
    source, no search (the text itself is what the model reads)."""
    pieces = tokenizer.tokenize([text]).to_list()[0][:model.max_length - 1]
    ids = np.array([[BOS_ID] + pieces], np.int32)
    _, scores = model(ids, return_attention_scores=True)
    return AttentionMaps(
        source_tokens=[],
        target_tokens=[tokenizer.id_to_piece(i) for i in ids[0]],
        translation=text,
        scores={"decoder": [np.asarray(w)[0] for w in scores["decoder"]]},
    )


def query_and_key_tokens(maps, kind):
    """The tokens on the query and key sides of one attention kind.

    Args:
        maps: AttentionMaps. What `attention_maps` returned.
        kind: str. One of `KINDS`.

    Returns:
        `(query_tokens, key_tokens)`: two lists of str (the source or
        target pieces of `maps`).
    """
    source, target = maps.source_tokens, maps.target_tokens
    return {"encoder": (source, source), "decoder": (target, target),
            "cross": (target, source)}[kind]


def write_attention_summaries(model, tokenizer, texts, log_dir, step,
                              decoding=None, kinds=("encoder", "cross")):
    """TensorBoard images (`tf.summary.image`) of the last layer's attention,
    all heads, of each kind in `kinds`, for each sentence of `texts`.

    Tags: `attention/{kind}/sentence_{i}`.

    Args:
        model: a built `tfattn.Transformer`.
        tokenizer: its `SubwordTokenizer` (or the SentencePiece model bytes).
        texts: sequence of str. The source sentences.
        log_dir: str or path-like. The TensorBoard folder to write into.
        step: int. The summaries' step.
        decoding: dict or None. Keyword arguments of `attention_maps`
            (`beam_size`, `alpha`, `extra_length`); `None` takes its
            defaults. Defaults to `None`.
        kinds: sequence of str. The kinds drawn, among `KINDS`. Defaults
            to `("encoder", "cross")`.

    Returns:
        int, the number of images written.

    Raises:
        ImportError: matplotlib is missing (the `viz` extra).
    """
    decoding = decoding or {}
    writer = tf.summary.create_file_writer(str(log_dir))
    count = 0
    with writer.as_default(step=int(step)):
        for index, text in enumerate(texts):
            maps = attention_maps(model, tokenizer, text, **decoding)
            for kind in kinds:
                queries, keys = query_and_key_tokens(maps, kind)
                figure = plot_attention(
                    maps.scores[kind][-1], queries, keys,
                    title=f"{kind}, last layer: {text[:60]}")
                buffer = io.BytesIO()
                figure.savefig(buffer, format="png", dpi=80)
                image = tf.image.decode_png(buffer.getvalue(), channels=3)
                tf.summary.image(f"attention/{kind}/sentence_{index}",
                                 image[None], max_outputs=1)
                count += 1
    writer.flush()
    writer.close()
    return count
