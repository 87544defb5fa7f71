"""Quantized sublayers survive `get_config` / `.keras` reloads.

`model.quantize("int8")` gives each Dense sublayer a quantized dtype policy
(and int8 variables). A layer rebuilt from its config makes float Dense
layers again, and loading the saved int8 weights into them fails. Keras's
answer (`keras.dtype_policies.DTypePolicyMap`) is to put, in the parent's
config, a map from each quantized sublayer's path to its policy; the parent
passes its policy on to its sublayers (`dtype=self.dtype_policy`), and each
looks its own path up in the map when it is built.
"""

import keras

__all__ = ["with_sublayer_policies"]


def with_sublayer_policies(layer, config):
    """`config` (the layer's `get_config`) with a `DTypePolicyMap` as its
    "dtype" when a sublayer is quantized; unchanged otherwise.

    Args:
        layer: keras.layers.Layer. The layer whose config it is.
        config: dict. The layer's config (updated in place).

    Returns:
        dict. `config`.
    """
    own = layer.dtype_policy
    policy_map = (own if isinstance(own, keras.dtype_policies.DTypePolicyMap)
                  else keras.dtype_policies.DTypePolicyMap(default_policy=own))
    quantized = False
    for sublayer in layer._flatten_layers(include_self=False):
        if sublayer.quantization_mode is None:
            continue
        policy = sublayer.dtype_policy
        if isinstance(policy, keras.dtype_policies.DTypePolicyMap):
            policy = policy[sublayer.path]
        if sublayer.path not in policy_map:
            policy_map[sublayer.path] = policy
        quantized = True
    if quantized:
        config["dtype"] = keras.dtype_policies.serialize(policy_map)
    return config
