"""A `tfattn.Transformer` as a CTranslate2 `TransformerSpec`.

The spec is built with CTranslate2's own API, as its converters for
OpenNMT-tf and Transformers models do: `TransformerSpec.from_config` gives
the layout (layers, heads, pre- or post-norm), then every weight is set by
name and `spec.validate()` checks that none is missing. Each weight is
copied, never approximated; what does not map exactly is refused
(`NotExportable`) before anything is written.

The mapping (Keras kernels are [in, out], CTranslate2's weights [out, in]):

- token tables -> `embeddings.weight` [V, C] (row 0 zeroed where the
  layer's `zero_pad` zeroes it), with `scale_embeddings` (the
  sqrt(C) factor) as the model's embedding layer has it;
- the positional table -> `position_encodings.encodings` [L, C], given as a
  table, since CTranslate2's built-in sinusoid is laid out
  [sin..., cos...] where the paper's interleaves them;
- self-attention Q, K, V -> one fused `linear[0]` [3C, C]; cross-attention
  Q -> `linear[0]` [C, C] and K, V -> one fused `linear[1]` [2C, C]; the
  output projection -> `linear[-1]`;
- the feed-forward pair -> `ffn.linear_0`, `ffn.linear_1`;
- each sublayer's layer norm -> its `layer_norm` (CTranslate2 applies it
  before the sublayer in pre-norm models, after the residual in post-norm
  ones, as tfattn does); the pre-norm stacks' final norms -> the stacks'
  `layer_norm`; the epsilon -> the config's `layer_norm_epsilon`;
- the output: the target table itself when tied (no bias), else the output
  Dense [C, V] transposed, with its bias -> `decoder.projection`;
- the feed-forward activation -> the spec's `activation`: `relu`, `gelu`
  (exact) -> `GELU`, `gelu_tanh` -> `GELUTanh`, `silu` / `swish` ->
  `SWISH`; any other is refused.

Options of imported checkpoints (`tfattn.interop.marian`, `.gpt2`), kept
with tfattn's ids, so that a CTranslate2 model reads and writes the ids
the tfattn model does:

- `final_logits_bias` (Marian's) -> the projection's bias;
- `suppress_bos` (a Marian start token that is never emitted) and the
  padding id that tfattn's searches never emit: a `MASKED_LOGIT` (-1e9)
  added to their columns of the projection's bias. CTranslate2's own
  Marian converter drops the padding row from the vocabulary instead
  (`MarianMTLoader._remove_pad_weights`); both leave it out of every
  softmax (`translate_batch`, `score_batch`), but dropping a row would
  renumber the ids after it, which tfattn's layout puts first;
- `masked_output_ids` (GPT-2's three added ids) -> the same -1e9 in the
  bias, as `CausalLM` sets those logits to -1e9;
- `bos_is_eos` (GPT-2's one `<|endoftext|>`) -> the BOS row of the table
  is the EOS row, as `CausalLM` reads BOS as EOS.

Flavours: `paper` (pre- and post-norm, shared or separate tables, tied or
not) and `reference_2019` (post-norm, no attention output projection: an
identity `linear[-1]` with a zero bias; layer-norm epsilon 1e-8). Its
positional encoding skips embedding elements that are exactly 0
(docs/reference.md §2.3); CTranslate2 adds it everywhere, which is the same
wherever the rows of real tokens have no element exactly 0. `reference_2017`
is refused: its Q, K and V projections apply a ReLU, which CTranslate2's
attention has no step for.
"""

import keras
import numpy as np

from tfattn.data.tokenizer import BOS_ID
from tfattn.data.tokenizer import EOS_ID
from tfattn.data.tokenizer import PAD_ID
from tfattn.data.tokenizer import UNK_ID
from tfattn.decoding.draws import MASKED_LOGIT
from tfattn.models.layout import gelu_tanh

__all__ = [
    "EXPORTABLE_FLAVORS",
    "NotExportable",
    "check_exportable",
    "transformer_spec",
    "decoder_only_spec",
    "checkpoint_pieces",
]

EXPORTABLE_FLAVORS = ("paper", "reference_2019")


class NotExportable(ValueError):
    """The model has a part CTranslate2 cannot compute exactly."""


# Feed-forward activations (Keras's functions, or their names) -> the
# name of CTranslate2's `common_spec.Activation` that computes the same.
_ACTIVATIONS = (
    (("relu", keras.activations.relu), "RELU"),
    (("gelu", keras.activations.gelu), "GELU"),
    (("gelu_tanh", gelu_tanh), "GELUTanh"),
    (("silu", "swish", keras.activations.silu), "SWISH"),
)


def _numpy(variable):
    return np.asarray(variable.numpy(), dtype=np.float32)


def check_exportable(model, vocabulary_size):
    """Checks that every part of `model` maps exactly to CTranslate2.

    Args:
        model: a built `tfattn.Transformer`.
        vocabulary_size: int. The pieces of the SentencePiece model it is
            exported with.

    Raises:
        NotExportable: not a built `Transformer`, flavour
            `reference_2017` or another unmapped one, quantized weights, a
            feed-forward activation CTranslate2 lacks (mapped: relu, gelu,
            gelu_tanh, silu/swish), or vocabularies of another size (the
            message names it).
    """
    name = type(model).__name__
    if not hasattr(model, "encoder") or not hasattr(model, "flavor"):
        raise NotExportable(
            f"model: expected a built tfattn.Transformer, received {name}")
    _check_common(
        model, list(model.encoder.blocks) + list(model.decoder.blocks),
        {model.source_vocab_size,
         model.target_vocab_size or model.source_vocab_size},
        vocabulary_size)


def _check_common(model, blocks, vocabularies, vocabulary_size):
    """The checks every exported model passes: flavour, float weights,
    a mapped activation, the tokenizer's size."""
    if model.flavor == "reference_2017":
        raise NotExportable(
            "model: flavor 'reference_2017' cannot be exported to "
            "CTranslate2: its attention applies a ReLU to the Q, K and V "
            "projections (docs/reference.md §1.4), which CTranslate2's "
            "attention has no step for; export it as a SavedModel instead")
    if model.flavor not in EXPORTABLE_FLAVORS:
        raise NotExportable(
            f"model: flavor {model.flavor!r} has no CTranslate2 mapping "
            f"(exportable: {', '.join(EXPORTABLE_FLAVORS)})")
    quantized = [w.path for w in model.weights
                 if w.dtype not in ("float32", "float16", "bfloat16")]
    if quantized:
        raise NotExportable(
            f"model: holds quantized weights ({quantized[0]}, "
            f"{len(quantized)} in all); export the float model and pass "
            "quantization='int8' to to_ctranslate2 instead")
    _activation_name(blocks)
    if vocabularies != {vocabulary_size}:
        raise NotExportable(
            f"tokenizer: has {vocabulary_size} pieces but the model's "
            f"vocabularies have {sorted(vocabularies)}; export the model "
            "with the SentencePiece model it was trained with")


def _activation_name(blocks):
    """The name of CTranslate2's activation of the blocks' feed-forwards,
    or NotExportable."""
    names = set()
    for block in blocks:
        activation = block.activation
        found = [name for keys, name in _ACTIVATIONS
                 if any(activation is key or (isinstance(activation, str)
                                              and activation == key)
                        for key in keys)]
        if not found:
            shown = getattr(activation, "__name__", activation)
            raise NotExportable(
                f"model: feed-forward activation {shown!r} has no "
                "CTranslate2 equivalent (mapped: relu, gelu, gelu_tanh, "
                "silu/swish)")
        names.add(found[0])
    return names.pop()


def _activation(blocks):
    from ctranslate2.specs import common_spec

    return getattr(common_spec.Activation, _activation_name(blocks))


def transformer_spec(model, pieces):
    """The `ctranslate2.specs.TransformerSpec` of `model`, validated.

    Args:
        model: a built `tfattn.Transformer` (see the module docstring for
            the flavours it accepts).
        pieces: list of str, the vocabulary's pieces by id (id 0 padding,
            1 unknown, 2 BOS, 3 EOS).

    Returns:
        A `ctranslate2.specs.TransformerSpec` holding copies of the model's
        weights, validated (`spec.validate()`).

    Raises:
        NotExportable: see `check_exportable`.
    """
    from ctranslate2.specs import transformer_spec as ct2

    check_exportable(model, len(pieces))
    blocks = list(model.encoder.blocks) + list(model.decoder.blocks)
    spec = ct2.TransformerSpec.from_config(
        (model.num_layers, model.num_layers), model.num_heads,
        pre_norm=bool(model.normalize_first),
        activation=_activation(blocks))
    epsilon = model.encoder.blocks[0].feed_forward_layer_norm.epsilon
    spec.config.layer_norm_epsilon = float(epsilon)
    spec.config.unk_token = pieces[UNK_ID]
    spec.config.bos_token = pieces[BOS_ID]
    spec.config.eos_token = pieces[EOS_ID]
    spec.config.decoder_start_token = pieces[BOS_ID]
    # tfattn's sources end in EOS (`encode_for_translation`).
    spec.config.add_source_bos = False
    spec.config.add_source_eos = True
    spec.register_source_vocabulary(list(pieces))
    spec.register_target_vocabulary(list(pieces))
    identity_output = model.flavor == "reference_2019"
    _set_stack(spec.encoder, model.encoder, model.source_embedding,
               model.source_positions, identity_output)
    _set_stack(spec.decoder, model.decoder, model.target_embedding,
               model.target_positions, identity_output)
    _set_projection(spec.decoder.projection, model)
    bias = (_numpy(model.logits_bias) if model.final_logits_bias else None)
    # tfattn's `decode_step` never emits padding (nor, with suppress_bos,
    # BOS); without suppress_bos the export leaves padding unmasked, as it
    # always has (`CTranslate2Generator` suppresses it by name).
    masked = (PAD_ID, BOS_ID) if model.suppress_bos else ()
    _add_output_bias(spec.decoder.projection, bias, masked)
    spec.validate()
    return spec


def _table(embedding):
    """The [V, C] table as the layer uses it: with `zero_pad`, row 0 (the
    padding id) reads as zeros in lookups and in tied logits."""
    table = _numpy(embedding.embeddings)
    if embedding.zero_pad:
        table[0] = 0.0
    return table


def _add_output_bias(spec, bias, masked):
    """Adds `bias` [V] (or None) and MASKED_LOGIT at the ids `masked` to
    the projection's bias (none yet: zeros)."""
    if bias is None and not masked:
        return
    size = spec.weight.shape[0]
    total = (np.array(spec.bias, np.float32) if spec.has_bias()
             else np.zeros([size], np.float32))
    if bias is not None:
        total = total + bias.reshape(-1)
    total[list(masked)] = MASKED_LOGIT
    spec.bias = total


def _set_stack(spec, stack, embedding, positions, identity_output,
               table=None):
    """Embeddings (`table`, or the layer's), positions, blocks and final
    norm of one stack."""
    embeddings = spec.embeddings
    # The encoder spec holds a list (one table per source feature).
    if isinstance(embeddings, list):
        embeddings = embeddings[0]
    embeddings.weight = _table(embedding) if table is None else table
    spec.scale_embeddings = bool(embedding.scale)
    spec.position_encodings.encodings = positions.table()
    for layer_spec, block in zip(spec.layer, stack.blocks):
        _set_attention(layer_spec.self_attention, block, "self_attention",
                       identity_output, fused_qkv=True)
        if hasattr(block, "cross_attention"):
            _set_attention(layer_spec.attention, block, "cross_attention",
                           identity_output, fused_qkv=False)
        _set_linear(layer_spec.ffn.linear_0, block.feed_forward.inner_dense)
        _set_linear(layer_spec.ffn.linear_1, block.feed_forward.outer_dense)
        _set_layer_norm(layer_spec.ffn.layer_norm,
                        block.feed_forward_layer_norm)
    final = getattr(stack, "final_layer_norm", None)
    if final is not None:
        _set_layer_norm(spec.layer_norm, final)


def _set_attention(spec, block, name, identity_output, fused_qkv):
    """Q, K, V (fused as CTranslate2 wants them), output and norm of the
    block's attention `name`."""
    attention = getattr(block, name)
    query, key, value = (attention.query_dense, attention.key_dense,
                         attention.value_dense)
    if fused_qkv:
        _set_fused(spec.linear[0], (query, key, value))
    else:
        _set_fused(spec.linear[0], (query,))
        _set_fused(spec.linear[1], (key, value))
    if identity_output:
        width = query.kernel.shape[-1]
        spec.linear[-1].weight = np.eye(width, dtype=np.float32)
        spec.linear[-1].bias = np.zeros([width], np.float32)
    else:
        _set_linear(spec.linear[-1], attention.output_dense)
    # The reference flavour's norm lives inside its attention layer.
    layer_norm = getattr(block, f"{name}_layer_norm", None)
    _set_layer_norm(spec.layer_norm, layer_norm or attention.layer_norm)


def _linear_arrays(dense):
    """(weight [out, in], bias [out]) of a Keras Dense (or EinsumDense whose
    kernel flattens to [in, out])."""
    kernel = _numpy(dense.kernel)
    kernel = kernel.reshape(kernel.shape[0], -1)
    bias = getattr(dense, "bias", None)
    bias = (_numpy(bias).reshape(-1) if bias is not None
            else np.zeros([kernel.shape[1]], np.float32))
    return kernel.T, bias


def _set_linear(spec, dense):
    spec.weight, spec.bias = _linear_arrays(dense)


def _set_fused(spec, denses):
    arrays = [_linear_arrays(dense) for dense in denses]
    spec.weight = np.concatenate([weight for weight, _ in arrays], axis=0)
    spec.bias = np.concatenate([bias for _, bias in arrays], axis=0)


def _set_layer_norm(spec, layer_norm):
    spec.gamma = _numpy(layer_norm.gamma)
    spec.beta = _numpy(layer_norm.beta)


def _set_projection(spec, model):
    if model.output_dense is None:
        # Tied: logits = x · Eᵀ, no bias.
        spec.weight = _table(model.target_embedding)
        return
    _set_linear(spec, model.output_dense)


def decoder_only_spec(model, pieces):
    """The `ctranslate2.specs.TransformerDecoderModelSpec` of a
    `tfattn.CausalLM` (a `ctranslate2.Generator` model), validated; the
    same weight mapping as `transformer_spec`'s decoder, without
    cross-attention.

    Args:
        model: a built `tfattn.CausalLM` of flavour `paper` or
            `reference_2019`.
        pieces: list of str, the vocabulary's pieces by id.

    Returns:
        A validated `TransformerDecoderModelSpec`.

    Raises:
        NotExportable: as `check_exportable` (flavour, quantized weights,
            activation, vocabulary size).
    """
    from ctranslate2.specs import transformer_spec as ct2

    if not hasattr(model, "token_embedding") or hasattr(model, "encoder"):
        raise NotExportable("model: expected a built tfattn.CausalLM, "
                            f"received {type(model).__name__}")
    _check_common(model, list(model.decoder.blocks), {model.vocab_size},
                  len(pieces))
    pre_norm = bool(model.decoder.normalize_first)
    spec = ct2.TransformerDecoderModelSpec.from_config(
        model.num_layers, model.num_heads, pre_norm=pre_norm,
        no_final_norm=not pre_norm,
        activation=_activation(model.decoder.blocks))
    epsilon = model.decoder.blocks[0].feed_forward_layer_norm.epsilon
    spec.config.layer_norm_epsilon = float(epsilon)
    spec.config.unk_token = pieces[UNK_ID]
    spec.config.bos_token = pieces[BOS_ID]
    spec.config.eos_token = pieces[EOS_ID]
    spec.register_vocabulary(list(pieces))
    output = table = _table(model.token_embedding)
    if model.bos_is_eos:
        # The model reads BOS as EOS. Its tied logits keep row 2, unless
        # masked (as GPT-2's import masks it): then one table serves both.
        table = table.copy()
        table[BOS_ID] = table[EOS_ID]
        if BOS_ID in model.masked_output_ids:
            output = table
    _set_stack(spec.decoder, model.decoder, model.token_embedding,
               model.positions, model.flavor == "reference_2019", table)
    if model.output_dense is None:
        spec.decoder.projection.weight = output
    else:
        _set_linear(spec.decoder.projection, model.output_dense)
    _add_output_bias(spec.decoder.projection, None,
                     tuple(model.masked_output_ids))
    spec.validate()
    return spec


def _unique(name, taken):
    while name in taken:
        name = name[:-1] + "_>"
    return name


def checkpoint_pieces(tokenizer):
    """The CTranslate2 vocabulary (a token string per tfattn id) of an
    imported checkpoint's tokenizer, for `transformer_spec` and
    `decoder_only_spec`.

    - a `tfattn.interop.marian.MarianTokenizer`: id i -> the piece of its
      Marian id (`vocabulary.marian_of_tfattn`); BOS (2), the decoder's
      start, is Marian's `<pad>`; PAD (0), which reads the same row, is
      named `<blank>` (made unique);
    - a `tfattn.interop.gpt2_tokenizer.GPT2Tokenizer`: EOS (3) is
      `<|endoftext|>`, 4... GPT-2's other tokens in order; the ids GPT-2
      lacks are `<pad>`, `<unk>` and `<s>` (made unique).

    Args:
        tokenizer: a `MarianTokenizer` or a `GPT2Tokenizer`.

    Returns:
        list of str, distinct, one per tfattn id.

    Raises:
        ValueError: naming `tokenizer`, for another kind.
    """
    import json

    from tfattn.interop import gpt2_tokenizer

    vocabulary = getattr(tokenizer, "vocabulary", None)
    if hasattr(vocabulary, "marian_of_tfattn"):
        names = {i: piece for piece, i in json.loads(
            tokenizer.files["vocab.json"].decode("utf-8")).items()}
        pieces = [names[int(i)] for i in vocabulary.marian_of_tfattn]
        pieces[PAD_ID] = _unique("<blank>", set(names.values()))
        return pieces
    if isinstance(tokenizer, gpt2_tokenizer.GPT2Tokenizer):
        end = vocabulary[gpt2_tokenizer.END_OF_TEXT]
        pieces = [None] * (len(vocabulary) + 3)
        for token, i in vocabulary.items():
            pieces[int(gpt2_tokenizer.to_tfattn_ids(i, end))] = token
        for i, name in ((PAD_ID, "<pad>"), (UNK_ID, "<unk>"),
                        (BOS_ID, "<s>")):
            pieces[i] = _unique(name, set(vocabulary))
        return pieces
    raise ValueError(
        "Received an invalid value for argument `tokenizer`, expected a "
        "MarianTokenizer or a GPT2Tokenizer. Received: "
        f"tokenizer={type(tokenizer).__name__}")
