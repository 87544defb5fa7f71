"""Keras's `MultiHeadAttention` signature on tfattn's paper flavour, to run
Keras's own unit tests (keras/src/layers/attention/multi_head_attention_test.py)
against tfattn. Used by tests/peers/run_keras_suite.py; not part of tfattn.

Keras's constructor names (`dropout`) and call order (query, value, key;
`use_causal_mask`, `query_mask`/`value_mask`/`key_mask`) map onto tfattn's;
Keras's private sublayer names (`_query_dense`, ...) are aliases. Keras
internals with no tfattn counterpart (`_compute_attention`, the EinsumDense
weight layout, sublayer paths "mha/query") are not emulated.
"""

import keras
from keras import ops
from keras.src import layers as keras_layers

import tfattn

_OURS_ONLY = (
    "num_units",
    "dropout_rate",
    "causality",
    "flavor",
    "query_chunk_size",
)


@keras.saving.register_keras_serializable(package="tfattn_peers")
class KerasAPIMultiHeadAttention(tfattn.MultiHeadAttention):
    def __init__(
        self,
        num_heads,
        key_dim,
        value_dim=None,
        dropout=0.0,
        flash_attention=None,
        **kwargs,
    ):
        for name in _OURS_ONLY:
            kwargs.pop(name, None)
        super().__init__(
            num_heads=num_heads,
            key_dim=key_dim,
            value_dim=value_dim,
            dropout_rate=dropout,
            **kwargs,
        )

    _query_dense = property(lambda self: self.query_dense)
    _key_dense = property(lambda self: self.key_dense)
    _value_dense = property(lambda self: self.value_dense)
    _output_dense = property(lambda self: self.output_dense)
    _gate_dense = property(lambda self: self.gate_dense)
    _sliding_window = property(lambda self: self.sliding_window)

    def build(self, query_shape, value_shape, key_shape=None):
        super().build(query_shape, key_shape or value_shape, value_shape)

    def compute_output_shape(self, query_shape, value_shape, key_shape=None):
        return super().compute_output_shape(
            query_shape, key_shape or value_shape, value_shape
        )

    def call(
        self,
        query,
        value,
        key=None,
        query_mask=None,
        value_mask=None,
        key_mask=None,
        attention_mask=None,
        return_attention_scores=False,
        training=None,
        use_causal_mask=False,
    ):
        key = value if key is None else key
        if attention_mask is not None:
            attention_mask = ops.cast(attention_mask, "bool")
        if use_causal_mask:
            causal = ops.tril(
                ops.ones((ops.shape(query)[1], ops.shape(value)[1]), "bool")
            )
            attention_mask = (
                causal
                if attention_mask is None
                else (ops.logical_and(attention_mask, causal))
            )
        return super().call(
            query,
            key,
            value,
            attention_mask=attention_mask,
            training=training,
            return_attention_scores=return_attention_scores,
        )

    def get_config(self):
        config = super().get_config()
        config["dropout"] = config.pop("dropout_rate")
        for name in _OURS_ONLY:
            config.pop(name, None)
        return config


def install():
    """Makes `keras.src.layers.MultiHeadAttention` the adapter."""
    keras_layers.MultiHeadAttention = KerasAPIMultiHeadAttention
