"""Weights from checkpoints written by the referenced TF1 code
(Kyubyong/transformer), into a `reference_2017` or `reference_2019`
`tfattn.Transformer`.

Variable names follow the referenced code's scopes (docs/reference.md §1.2-1.7
for the 2017 code at ed2deb8, §2.1-2.9 for the 2019 code at fb023bb):

- 2017: `encoder/enc_embed/lookup_table`, `encoder/enc_pe/lookup_table` (the
  learned positions), `decoder/dec_embed/...`, `decoder/dec_pe/...`; per
  block `{encoder,decoder}/num_blocks_i/<scope>/dense{,_1,_2}/{kernel,bias}`
  (Q, K, V) with scope `multihead_attention` in the encoder and
  `self_attention` / `vanilla_attention` in the decoder; layer norms are
  plain `tf.Variable`s, so named by the name scope: `<scope>/ln/Variable`
  (beta) and `Variable_1` (gamma); the feed-forward network shares the
  variable scope `multihead_attention` (conv1d kernels [1, in, out] under
  `conv1d`, `conv1d_1`) while its layer norm, in the re-entered name scope,
  is `multihead_attention_1/ln/...` in the encoder; the untied output layer
  is the top-level `dense/{kernel,bias}`.
- 2019: one table `shared_weight_matrix/weight_mat`; per block the same
  attention scopes with `ln/beta`, `ln/gamma`, and
  `positionwise_feedforward/dense{,_1}` with its `ln`.

Optimizer state (`.../Adam`, `.../Adam_1`, `beta1_power`, `beta2_power`,
`global_step`) is skipped. Anything else that is missing, left over or of
another shape is refused, every such name listed.

Example::

    model = tfattn.interop.from_reference_checkpoint("logdir/1")  # flavour
    logits = model((source_ids, target_in_ids))
"""

import os
import re

import numpy as np
import tensorflow as tf

from tfattn.utils import validation
from tfattn.utils.backend import require_tensorflow_backend

require_tensorflow_backend("tfattn.interop's reference-checkpoint import")

__all__ = [
    "from_reference_checkpoint",
    "load_reference_checkpoint",
    "variable_map",
]

_CONTEXT = "reference checkpoint"
_OPTIMIZER = re.compile(r"(^|/)(Adam(_\d+)?|beta[12]_power|global_step)$")
_MARKERS = {"reference_2017": "encoder/enc_embed/lookup_table",
            "reference_2019": "shared_weight_matrix/weight_mat"}
_LISTED = 8


def _attention(scope, layer, ln_names):
    names = {}
    for dense_name, dense in (("dense", layer.query_dense),
                              ("dense_1", layer.key_dense),
                              ("dense_2", layer.value_dense)):
        names[f"{scope}/{dense_name}/kernel"] = dense.kernel
        names[f"{scope}/{dense_name}/bias"] = dense.bias
    names.update(_norm(scope, layer.layer_norm, ln_names))
    return names


def _norm(scope, norm, ln_names):
    beta, gamma = ln_names
    return {f"{scope}/ln/{beta}": norm.beta, f"{scope}/ln/{gamma}": norm.gamma}


def _feed_forward(dense_scope, norm_scope, block, flavor):
    kind, ln_names = (("conv1d", ("Variable", "Variable_1"))
                      if flavor == "reference_2017"
                      else ("dense", ("beta", "gamma")))
    ffn = block.feed_forward
    names = {}
    for dense_name, dense in ((kind, ffn.inner_dense),
                              (f"{kind}_1", ffn.outer_dense)):
        names[f"{dense_scope}/{dense_name}/kernel"] = dense.kernel
        names[f"{dense_scope}/{dense_name}/bias"] = dense.bias
    names.update(_norm(norm_scope, block.feed_forward_layer_norm, ln_names))
    return names


def variable_map(model):
    """The TF1 variable name of each weight of a reference-flavour model.

    Args:
        model: a built `tfattn.Transformer` of flavour `reference_2017` or
            `reference_2019`.

    Returns:
        dict: TF1 variable name (str) to the model's Keras variable.
    """
    flavor = model.flavor
    old = flavor == "reference_2017"
    ln_names = ("Variable", "Variable_1") if old else ("beta", "gamma")
    if old:
        names = {
            "encoder/enc_embed/lookup_table": model.source_embedding.embeddings,
            "encoder/enc_pe/lookup_table": model.source_positions.embeddings,
            "decoder/dec_embed/lookup_table": model.target_embedding.embeddings,
            "decoder/dec_pe/lookup_table": model.target_positions.embeddings,
            "dense/kernel": model.output_dense.kernel,
            "dense/bias": model.output_dense.bias}
    else:
        names = {_MARKERS[flavor]: model.source_embedding.embeddings}
    for i, block in enumerate(model.encoder.blocks):
        scope = f"encoder/num_blocks_{i}"
        names.update(_attention(f"{scope}/multihead_attention",
                                block.self_attention, ln_names))
        names.update(_feed_forward(
            f"{scope}/multihead_attention" if old
            else f"{scope}/positionwise_feedforward",
            f"{scope}/multihead_attention_1" if old
            else f"{scope}/positionwise_feedforward",
            block, flavor))
    for i, block in enumerate(model.decoder.blocks):
        scope = f"decoder/num_blocks_{i}"
        names.update(_attention(f"{scope}/self_attention",
                                block.self_attention, ln_names))
        names.update(_attention(f"{scope}/vanilla_attention",
                                block.cross_attention, ln_names))
        ffn_scope = (f"{scope}/multihead_attention" if old
                     else f"{scope}/positionwise_feedforward")
        names.update(_feed_forward(ffn_scope, ffn_scope, block, flavor))
    return names


def _reader(path):
    """A checkpoint reader for a prefix, or for the latest in a directory."""
    prefix = path
    if os.path.isdir(path):
        prefix = tf.train.latest_checkpoint(path)
        if prefix is None:
            raise validation.invalid_argument(
                "path", "a TF1 checkpoint prefix, or a directory holding one "
                "(with a `checkpoint` index file)", path, _CONTEXT)
    try:
        return prefix, tf.train.load_checkpoint(prefix)
    except (tf.errors.NotFoundError, tf.errors.DataLossError,
            ValueError) as error:
        raise validation.invalid_argument(
            "path", "a readable TF1 checkpoint prefix (e.g. logdir/"
            "model_epoch_18_gs_30654, without .index)", path,
            _CONTEXT) from error


def _model_shapes(shapes):
    return {name: shape for name, shape in shapes.items()
            if not _OPTIMIZER.search(name)}


def _fits(stored, wanted):
    """Same shape, or a conv1d kernel [1, in, out] for a Dense [in, out]."""
    stored, wanted = tuple(stored), tuple(wanted)
    return stored == wanted or (len(stored) == 3 and stored[0] == 1
                                and stored[1:] == wanted)


def _listing(names):
    names = sorted(names)
    more = f" and {len(names) - _LISTED} more" if len(names) > _LISTED else ""
    return ", ".join(names[:_LISTED]) + more


def load_reference_checkpoint(model, path):
    """Assigns a referenced TF1 checkpoint to a built `reference_2017` /
    `reference_2019` `Transformer` of the same size.

    Args:
        model: a built `tfattn.Transformer` of flavour `reference_2017` or
            `reference_2019`.
        path: str. A checkpoint prefix, or a directory (its latest
            checkpoint).

    Returns:
        `model`, its weights assigned from the checkpoint.

    Raises:
        ValueError: another flavour of model; an unreadable path; variables
            missing from the checkpoint, left over in it, or of another
            shape (every such name listed, with both shapes).
    """
    if getattr(model, "flavor", None) not in _MARKERS or not model.built:
        raise validation.invalid_argument(
            "model", "a built tfattn.Transformer of flavor 'reference_2017' "
            "or 'reference_2019'", f"<{type(model).__name__} flavor="
            f"{getattr(model, 'flavor', None)!r}>", _CONTEXT)
    prefix, reader = _reader(path)
    stored = _model_shapes(reader.get_variable_to_shape_map())
    wanted = variable_map(model)
    missing = set(wanted) - set(stored)
    extra = set(stored) - set(wanted)
    misshaped = [
        f"{name} {tuple(stored[name])} (the model's {tuple(var.shape)})"
        for name, var in sorted(wanted.items())
        if name in stored and not _fits(stored[name], var.shape)]
    if missing or extra or misshaped:
        problems = []
        if missing:
            problems.append(f"missing {len(missing)}: {_listing(missing)}")
        if extra:
            problems.append(f"not in the model {len(extra)}: {_listing(extra)}")
        if misshaped:
            problems.append(f"of another shape {len(misshaped)}: "
                            + "; ".join(misshaped[:_LISTED]))
        raise ValueError(
            f"{_CONTEXT}: {prefix} does not hold the variables of this "
            f"{model.flavor} Transformer (num_layers={model.num_layers}, "
            f"num_units={model.num_units}): " + "; ".join(problems))
    for name, var in wanted.items():
        # conv1d kernels are [1, in, out]; the Dense kernels [in, out].
        var.assign(np.reshape(reader.get_tensor(name), var.shape))
    return model


def from_reference_checkpoint(path, flavor=None, num_heads=8, **kwargs):
    """A `reference_2017` / `reference_2019` `tfattn.Transformer` holding a
    checkpoint written by the referenced TF1 code.

    Sizes come from the checkpoint (vocabularies, width, blocks, feed-forward
    width, and the 2017 learned position table's length as `max_length`);
    `num_heads` cannot be read from it (the reference's default is 8).

    Args:
        path: str. A checkpoint prefix, or a directory (its latest
            checkpoint).
        flavor: str or None. `"reference_2017"`, `"reference_2019"` or None
            (found from the variable names). Defaults to `None`.
        num_heads: int. Heads of every attention layer. Defaults to `8`.
        **kwargs: further `Transformer` arguments (`dropout_rate`,
            `max_length` for 2019, ...).

    Returns:
        A built `tfattn.Transformer` holding the checkpoint's weights
        (`dropout_rate` 0 unless given).

    Raises:
        ValueError: an unreadable path, no flavour found or another one
            than `flavor`, or variables that do not fit (see
            `load_reference_checkpoint`).
    """
    from tfattn.models.transformer import Transformer

    prefix, reader = _reader(path)
    shapes = _model_shapes(reader.get_variable_to_shape_map())
    found = [f for f, marker in _MARKERS.items() if marker in shapes]
    if flavor is None:
        if len(found) != 1:
            raise validation.invalid_argument(
                "path", "a checkpoint of the referenced code, holding "
                f"{_MARKERS['reference_2017']} (2017) or "
                f"{_MARKERS['reference_2019']} (2019)",
                f"{prefix} with {_listing(shapes) or 'no variables'}", _CONTEXT)
        flavor = found[0]
    validation.check_choice("flavor", flavor, tuple(_MARKERS), _CONTEXT)
    if flavor not in found:
        raise validation.invalid_argument(
            "flavor", f"the checkpoint's flavour ({found or 'none found'}): "
            f"{prefix} has no {_MARKERS[flavor]}", flavor, _CONTEXT)
    table = shapes[_MARKERS[flavor]]
    num_layers = len({m.group(1) for name in shapes
                      for m in [re.match(r"encoder/num_blocks_(\d+)/", name)]
                      if m})
    old = flavor == "reference_2017"
    inner = ("encoder/num_blocks_0/multihead_attention/conv1d/kernel" if old
             else "encoder/num_blocks_0/positionwise_feedforward/dense/kernel")
    if num_layers == 0 or inner not in shapes:
        raise validation.invalid_argument(
            "path", f"a {flavor} checkpoint with encoder blocks "
            "(encoder/num_blocks_0/...)", f"{prefix} without {inner}", _CONTEXT)
    if old:
        # Absent tables are reported by name when the weights are loaded.
        kwargs.update(
            target_vocab_size=shapes.get("decoder/dec_embed/lookup_table",
                                         table)[0],
            max_length=shapes.get("encoder/enc_pe/lookup_table", [10])[0])
    kwargs.setdefault("dropout_rate", 0.0)
    model = Transformer(table[0], num_layers=num_layers, num_units=table[1],
                        num_heads=num_heads, ffn_units=shapes[inner][-1],
                        flavor=flavor, **kwargs)
    model((np.ones((1, 2), "int32"), np.ones((1, 2), "int32")))
    return load_reference_checkpoint(model, prefix)
