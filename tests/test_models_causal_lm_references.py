"""`tfattn.models.CausalLM` against independent references: its forward
pass against NumPy from the formulas (`tests/reference_numpy_lm.py`), and
the generation defaults (on any backend: CI runs this file under JAX too).
Greedy and beam search in every flavour against the full forward pass are
in tests/test_models_causal_lm.py (one model per flavour for both)."""

import keras
import numpy as np
import pytest

from tests import bounds
from tests.test_models_causal_lm import _np
from tests.test_models_causal_lm import lm_terms
from tests.test_models_causal_lm import tiny_lm
from tfattn.models.causal_lm import CausalLM


# --------------------------------------------------------------------------
# The forward pass against NumPy from the formulas (tests/reference_numpy_lm).

def _lm_params(lm):
    def dense(layer):
        return tuple(_np(w).astype(np.float64) for w in layer.weights)

    def norm(layer):
        return tuple(_np(w) for w in layer.weights)

    blocks = []
    for block in lm.decoder.blocks:
        attention = block.self_attention
        mha = {}
        for key, layer in (("q", attention.query_dense),
                           ("k", attention.key_dense),
                           ("v", attention.value_dense),
                           ("o", attention.output_dense)):
            mha["w" + key], mha["b" + key] = (_np(w) for w in layer.weights)
        (w1, b1), (w2, b2) = (dense(block.feed_forward.inner_dense),
                              dense(block.feed_forward.outer_dense))
        blocks.append({"self": mha,
                       "norm1": norm(block.self_attention_layer_norm),
                       "norm2": norm(block.feed_forward_layer_norm),
                       "ffn": dict(w1=w1, b1=b1, w2=w2, b2=b2)})
    return {
        "embeddings": _np(lm.token_embedding.embeddings),
        "positions": (_np(lm.positions.embeddings)
                      if lm.positions.kind == "learned" else None),
        "blocks": blocks,
        "final": (norm(lm.decoder.final_layer_norm)
                  if lm.decoder.normalize_first else None),
        "output": None if lm.output_dense is None else dense(lm.output_dense),
    }


@pytest.mark.parametrize("kwargs", [
    dict(),  # pre-norm, ReLU, sinusoid, scaled, tied
    dict(normalize_first=False),  # GPT-1's post-norm
    # GPT-2's layout: GELU, learned positions, unscaled rows, untied here.
    dict(activation="gelu", positional_encoding="learned",
         scale_embeddings=False, tie_output=False,
         embeddings_initializer=keras.initializers.RandomNormal(stddev=0.5)),
], ids=["pre_norm", "post_norm", "gpt2_layout"])
def test_forward_pass_equals_numpy_from_the_formulas(kwargs):
    from tests import reference_numpy_lm as ref

    lm = tiny_lm(seed=11, **kwargs)
    if lm.positions.kind == "learned":  # Glorot rows are small: widen them.
        lm.positions.embeddings.assign(
            np.random.default_rng(0).normal(0, 0.5, (48, 16)))
    # Right padding, and left padding (as generate's prefill has it), where
    # the keys' mask decides what the real tokens see.
    ids = np.array([[5, 6, 7, 8, 9, 10], [4, 5, 6, 0, 0, 0],
                    [0, 0, 4, 5, 6, 7]], "int32")
    want = ref.causal_lm(
        _lm_params(lm), ids, num_heads=2,
        normalize_first=lm.decoder.normalize_first,
        activation=ref.gelu if kwargs.get("activation") == "gelu"
        else ref.relu, scale_embeddings=lm.scale_embeddings)
    got = _np(lm(ids))
    real = ids > 0
    # The stack over the 6 tokens, its final norm and the vocabulary.
    bounds.assert_close(got[real], want[real],
                        terms=lm_terms(lm, ids.shape[1]))
    assert np.abs(want[real]).max() > 0.5  # not a vacuous comparison


def test_generate_compiles_with_xla_by_default():
    # Chosen from bench/generation_session.py (docs/benchmarks.md): XLA's
    # first call costs about a second more, every later one is 2-4x faster.
    import inspect

    from tfattn.models.transformer import Transformer

    for method in (CausalLM.generate, Transformer.generate):
        assert inspect.signature(method).parameters[
            "jit_compile"].default is True
