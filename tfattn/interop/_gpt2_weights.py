"""GPT-2's weights: a tfattn `CausalLM`'s variables <-> Hugging Face's
tensor names, and a keras-hub `GPT2Backbone`'s -> Hugging Face's.

Private to `tfattn.interop.gpt2`, whose docstring gives the names and the
vocabulary's row mapping (`tfattn.interop.gpt2_tokenizer`).
"""

import numpy as np

from tfattn.interop.gpt2_tokenizer import ADDED_IDS

__all__ = ["ROWS", "refuse", "load_weights", "hf_tensors", "hub_tensors",
           "TensorLoader"]

ROWS = len(ADDED_IDS)  # tfattn rows before GPT-2's <|endoftext|> (EOS).
_PREFIX = "transformer."
_BUFFERS = (".attn.bias", ".attn.masked_bias")


def refuse(where, message):
    """The ValueError of a GPT-2 reader or writer.

    Args:
        where: str. The file or directory (and what reads it).
        message: str. What is refused, naming the option or tensor and
            both values.

    Returns:
        ValueError, to raise.
    """
    return ValueError(f"GPT-2 {where}: {message}")


def _slots(model):
    """(Hugging Face name, third of `c_attn` or None, tfattn variable) of
    every weight but the token table, `wte.weight`."""
    slots = [("wpe.weight", None, model.positions.embeddings)]
    for i, block in enumerate(model.decoder.blocks):
        h, attention = f"h.{i}.", block.self_attention
        dense = [("attn.c_proj", attention.output_dense),
                 ("mlp.c_fc", block.feed_forward.inner_dense),
                 ("mlp.c_proj", block.feed_forward.outer_dense)]
        for name, norm in (("ln_1", block.self_attention_layer_norm),
                           ("ln_2", block.feed_forward_layer_norm)):
            slots += [(h + name + ".weight", None, norm.gamma),
                      (h + name + ".bias", None, norm.beta)]
        for third, layer in enumerate((attention.query_dense,
                                       attention.key_dense,
                                       attention.value_dense)):
            slots += [(h + "attn.c_attn.weight", third, layer.kernel),
                      (h + "attn.c_attn.bias", third, layer.bias)]
        for name, layer in dense:
            slots += [(h + name + ".weight", None, layer.kernel),
                      (h + name + ".bias", None, layer.bias)]
    final = model.decoder.final_layer_norm
    return slots + [("ln_f.weight", None, final.gamma),
                    ("ln_f.bias", None, final.beta)]


def _gpt2_rows(vocab_size, end_of_text_id):
    """GPT-2's row of tfattn rows 3..V-1: e, then the others in order."""
    others = [g for g in range(vocab_size) if g != end_of_text_id]
    return np.array([end_of_text_id] + others)


def _expected_shapes(model, n):
    shapes = {"wte.weight": (n, model.num_units)}
    for name, third, variable in _slots(model):
        shape = tuple(variable.shape)
        shapes[name] = shape if third is None else shape[:-1] + (
            3 * shape[-1],)
    return shapes


def _named(tensors, where):
    """`tensors` without the `transformer.` prefix, the causal-mask buffers
    and a tied `lm_head.weight`."""
    named = {}
    for name, array in tensors.items():
        short = name[len(_PREFIX):] if name.startswith(_PREFIX) else name
        if short.startswith("h.") and short.endswith(_BUFFERS):
            continue
        named[short] = array
    head = named.pop("lm_head.weight", None)
    if head is not None and not (head.shape == named.get(
            "wte.weight", head).shape and np.array_equal(
                head, named.get("wte.weight", head))):
        raise refuse(where, "lm_head.weight differs from wte.weight: an "
                      "untied output head, which tfattn's GPT-2 does not "
                      "read.")
    return named


def load_weights(model, tensors, end_of_text_id, where):
    """Assigns Hugging Face tensors to a built GPT-2-shaped `CausalLM`.

    Args:
        model: CausalLM. Built with GPT-2's options, V = n + 3.
        tensors: dict. Hugging Face name (with or without `transformer.`)
            -> array; `wte.weight` [n, C], `h.{i}.attn.c_attn.weight`
            [C, 3C], ...
        end_of_text_id: int e. GPT-2's `<|endoftext|>`, tfattn's row 3.
        where: str. The checkpoint, for the messages.

    Raises:
        ValueError: a missing, unexpected or misshapen tensor (named, with
            both shapes), or an untied `lm_head.weight`.
    """
    n = model.vocab_size - ROWS
    tensors = _named(tensors, where)
    expected = _expected_shapes(model, n)
    missing = sorted(set(expected) - set(tensors))
    extra = sorted(set(tensors) - set(expected))
    if missing:
        raise refuse(where, f"missing weights {missing}.")
    if extra:
        raise refuse(where, f"unexpected weights {extra} (not GPT-2's).")
    for name, shape in expected.items():
        if tuple(tensors[name].shape) != shape:
            raise refuse(where, f"tensor {name} has shape "
                          f"{list(tensors[name].shape)}; the configuration "
                          f"gives {list(shape)}.")
    table = np.zeros((model.vocab_size, model.num_units), np.float32)
    table[ROWS:] = tensors["wte.weight"][_gpt2_rows(n, end_of_text_id)]
    model.token_embedding.embeddings.assign(table)
    for name, third, variable in _slots(model):
        array = tensors[name]
        if third is not None:
            array = np.split(array, 3, axis=-1)[third]
        variable.assign(np.asarray(array, np.float32))


def hf_tensors(model, end_of_text_id):
    """The model's weights under Hugging Face's names.

    Args:
        model: CausalLM. Built with GPT-2's options.
        end_of_text_id: int e. Where tfattn's row 3 goes in `wte`.

    Returns:
        dict. Name (no prefix) -> contiguous float32 array; rows 0-2 of the
        token table (never read) are dropped: `wte.weight` is [n, C].
    """
    n = model.vocab_size - ROWS
    table = np.asarray(model.token_embedding.embeddings.numpy(), np.float32)
    wte = np.empty((n, model.num_units), np.float32)
    wte[_gpt2_rows(n, end_of_text_id)] = table[ROWS:]
    tensors, thirds = {"wte.weight": wte}, {}
    for name, third, variable in _slots(model):
        array = np.asarray(variable.numpy(), np.float32)
        if third is None:
            tensors[name] = array
        else:
            thirds.setdefault(name, {})[third] = array
    for name, parts in thirds.items():
        tensors[name] = np.concatenate([parts[i] for i in range(3)], -1)
    return {k: np.ascontiguousarray(v) for k, v in tensors.items()}


def hub_tensors(backbone):
    """A keras-hub `GPT2Backbone`'s weights under Hugging Face's names: the
    inverse of keras-hub's `convert_gpt2.convert_weights` (its attention
    kernels [C, H, d] and [H, d, C] are reshaped to [C, C]).

    Args:
        backbone: keras_hub.models.GPT2Backbone. Built.

    Returns:
        dict. Name -> float32 array, as `hf_tensors` gives.
    """
    def get(variable, shape=None):
        array = np.asarray(variable.numpy(), np.float32)
        return array if shape is None else array.reshape(shape)

    width = backbone.hidden_dim
    tensors = {"wte.weight": get(backbone.token_embedding.embeddings),
               "wpe.weight": get(
                   backbone.position_embedding.position_embeddings),
               "ln_f.weight": get(backbone.layer_norm.gamma),
               "ln_f.bias": get(backbone.layer_norm.beta)}
    for i, layer in enumerate(backbone.transformer_layers):
        h, attention = f"h.{i}.", layer._self_attention_layer
        qkv = (attention.query_dense, attention.key_dense,
               attention.value_dense)
        tensors.update({
            h + "ln_1.weight": get(layer._self_attention_layer_norm.gamma),
            h + "ln_1.bias": get(layer._self_attention_layer_norm.beta),
            h + "ln_2.weight": get(layer._feedforward_layer_norm.gamma),
            h + "ln_2.bias": get(layer._feedforward_layer_norm.beta),
            h + "attn.c_attn.weight": np.concatenate(
                [get(d.kernel, (width, width)) for d in qkv], -1),
            h + "attn.c_attn.bias": np.concatenate(
                [get(d.bias, (width,)) for d in qkv], -1),
            h + "attn.c_proj.weight": get(attention.output_dense.kernel,
                                          (width, width)),
            h + "attn.c_proj.bias": get(attention.output_dense.bias),
            h + "mlp.c_fc.weight": get(
                layer._feedforward_intermediate_dense.kernel),
            h + "mlp.c_fc.bias": get(
                layer._feedforward_intermediate_dense.bias),
            h + "mlp.c_proj.weight": get(
                layer._feedforward_output_dense.kernel),
            h + "mlp.c_proj.bias": get(layer._feedforward_output_dense.bias)})
    return tensors


class TensorLoader:
    """What keras-hub's `convert_gpt2.convert_weights` reads from: Hugging
    Face tensors by name (its `SafetensorLoader`, from memory)."""

    def __init__(self, tensors):
        self.tensors = tensors

    def port_weight(self, keras_variable, hf_weight_key, hook_fn=None):
        array = self.tensors[hf_weight_key]
        if hook_fn:
            array = hook_fn(array, list(keras_variable.shape))
        keras_variable.assign(array)
