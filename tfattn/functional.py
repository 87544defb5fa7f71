"""`multihead_attention`: the referenced TF1 function's signature, on
Keras 3."""

from tfattn.utils import validation
from tfattn.layers.multi_head_attention import MultiHeadAttention

__all__ = ["multihead_attention"]


def multihead_attention(
    queries,
    keys,
    num_units=None,
    num_heads=8,
    dropout_rate=0,
    is_training=True,
    causality=False,
    scope="multihead_attention",
    reuse=None,
):
    """The 2017 reference's `multihead_attention`, as a Keras 3 call.

    Builds a `MultiHeadAttention(flavor="reference_2017")` layer named
    `scope` and applies it: ReLU projections, zero-row key and query masks,
    no output projection, residual and layer norm (docs/reference.md §1.4, G1b).
    It works eagerly and on `keras.Input` tensors inside a functional model.

    What the TF1 arguments mean in Keras 3:

    - `is_training` becomes the layer's `training` call argument. Eagerly
      it applies as given: `True` (the reference's default) drops out on
      every call, `False` never does. Inside a Keras model it is the default
      for calls that name no phase (`model(x)`), while `fit` (training) and
      `predict`/`evaluate` (inference) pass their own phase, which wins, as
      for every Keras layer. `None` leaves the phase to Keras everywhere.
    - `scope` becomes the layer's name. Keras makes names unique within a
      model, so two calls with the same scope get two layers, as TF1's
      `tf.layers` auto-numbering did.
    - `reuse`: TF1 shared variables through the scope registry. Keras 3 has
      no such registry; weights are shared by calling the *same layer
      object* twice. `reuse=None` or `False` creates new weights; `True` (or
      `tf.compat.v1.AUTO_REUSE`) cannot be mirrored and raises a ValueError
      that says how to share weights.

    Args:
        queries: [B, T_q, C].
        keys: [B, T_k, C_k]; V is projected from them, as in the reference.
        num_units: int or None. Defaults to the queries' width C.
        num_heads: int. Defaults to `8`.
        dropout_rate: float in [0, 1). Defaults to `0`.
        is_training: bool or None. See above. Defaults to `True`.
        causality: bool. Defaults to `False`.
        scope: str. The layer name. Defaults to `"multihead_attention"`.
        reuse: None or False. See above.

    Returns:
        [B, T_q, C].

    Raises:
        ValueError: `reuse` is neither None nor False, or `is_training` is
            not True, False or None.
    """
    if reuse not in (None, False):
        raise validation.invalid_argument(
            "reuse",
            "None or False: Keras 3 has no variable-scope registry to reuse "
            "weights from. To share weights, build the layer once, "
            "`layer = tfattn.MultiHeadAttention(flavor='reference_2017', "
            "...)`, and call `layer(queries, keys)` each time",
            reuse,
            "multihead_attention",
        )
    if is_training is not None and not isinstance(is_training, bool):
        raise validation.invalid_argument(
            "is_training",
            "True, False or None (a Python value; Keras passes the training "
            "phase itself when it is None)",
            is_training,
            "multihead_attention",
        )
    layer = MultiHeadAttention(
        num_units=num_units,
        num_heads=num_heads,
        dropout_rate=dropout_rate,
        causality=causality,
        flavor="reference_2017",
        name=scope,
    )
    return layer(queries, keys, training=is_training)
