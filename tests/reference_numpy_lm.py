"""Independent NumPy reference (test oracle) of a decoder-only language
model, `tfattn.CausalLM` in the paper flavour, written from the formulas
(Vaswani et al. 2017 §3; Radford et al. 2018/2019 for the decoder-only
layout and GPT-2's pre-norm placement with a final layer norm). It imports
no TensorFlow and no tfattn code; the attention is `reference_numpy`'s
`mha_paper`.

    x_0 = E[ids] (row 0 read as zeros; × sqrt(C) when scaled) + P[:T]
    pre-norm block:  x = x + MHA(LN(x)),  x = x + FFN(LN(x)); LN at the end
    post-norm block: x = LN(x + MHA(x)),  x = LN(x + FFN(x))
    MHA: causal, keys at padding (id 0) masked;  FFN: act(x W1 + b1) W2 + b2
    logits = x Eᵀ (tied, column 0 zero) or x W + b (untied)

Parameters (`params`): `embeddings` [V, C]; `positions` [T_max, C] or None
(the sinusoid of the paper); `blocks`, a list of {`self`: `mha_paper`'s
params, `norm1`/`norm2`: (gamma, beta), `ffn`: w1, b1, w2, b2}; `final`:
(gamma, beta) for pre-norm; `output`: (kernel, bias) or None (tied).
"""

import math

import numpy as np

from tests.reference_numpy import layer_norm
from tests.reference_numpy import mha_paper
from tests.reference_numpy import sinusoid_2019


def gelu(x):
    """The exact GELU, x Φ(x) (Hendrycks & Gimpel), in float64."""
    x = np.asarray(x, np.float64)
    return x * 0.5 * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


def relu(x):
    return np.maximum(x, 0.0)


def causal_lm(params, ids, num_heads, normalize_first=True,
              activation=relu, scale_embeddings=True, epsilon=1e-6):
    """Next-token logits [B, T, V] (float32) of right-padded ids [B, T].

    Args:
        params: dict (module docstring).
        ids: int [B, T]; 0 is padding.
        num_heads: int H.
        normalize_first: bool. Pre-norm blocks (GPT-2), else post-norm.
        activation: callable. The feed-forward activation.
        scale_embeddings: bool. Multiply the rows by sqrt(C).
        epsilon: float. The layer norms' epsilon.

    Returns:
        float32 [B, T, V].
    """
    ids = np.asarray(ids)
    table = np.asarray(params["embeddings"], np.float32)
    width = table.shape[1]
    x = np.where((ids == 0)[..., None], 0.0, table[ids]).astype(np.float32)
    if scale_embeddings:
        x = x * np.float32(math.sqrt(width))
    positions = params.get("positions")
    if positions is None:
        positions = sinusoid_2019(ids.shape[1], width)
    x = (x + np.asarray(positions, np.float32)[:ids.shape[1]]).astype(
        np.float32)
    keys = np.broadcast_to((ids != 0)[:, None, :],
                           (ids.shape[0], ids.shape[1], ids.shape[1]))

    def attend(h, block):
        return mha_paper(h, h, h, block["self"], num_heads, attend_mask=keys,
                         causality=True)[0]

    def feed_forward(h, ffn):
        inner = activation(h.astype(np.float64) @ ffn["w1"] + ffn["b1"])
        return (inner @ ffn["w2"] + ffn["b2"]).astype(np.float32)

    def norm(h, gamma_beta):
        return layer_norm(h, *gamma_beta, epsilon=epsilon)

    for block in params["blocks"]:
        if normalize_first:
            x = x + attend(norm(x, block["norm1"]), block)
            x = x + feed_forward(norm(x, block["norm2"]), block["ffn"])
        else:
            x = norm(x + attend(x, block), block["norm1"])
            x = norm(x + feed_forward(x, block["ffn"]), block["norm2"])
    if normalize_first:
        x = layer_norm(x, *params["final"], epsilon=epsilon)
    if params.get("output") is None:
        tied = np.where((np.arange(table.shape[0]) == 0)[:, None], 0.0, table)
        return (x.astype(np.float64) @ tied.T).astype(np.float32)
    kernel, bias = params["output"]
    return (x.astype(np.float64) @ kernel + bias).astype(np.float32)
