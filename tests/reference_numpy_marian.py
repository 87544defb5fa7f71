"""Independent NumPy reference (test oracle) of Hugging Face's
`MarianMTModel` (OPUS-MT), written from transformers'
`models/marian/modeling_marian.py`. It imports no TensorFlow and no tfattn
code, and works in Marian's own ids on the checkpoint's own tensors (a
dict of HF names -> NumPy arrays, torch layout: a Linear's weight is
[out, in]).

    encoder:  x = E[ids] * embed_scale + P[:S]        (MarianEncoder)
              per layer (MarianEncoderLayer, post-norm):
                x = LN(x + SelfAttn(x));  x = LN(x + fc2(act(fc1(x))))
    decoder:  y = E[ids] * embed_scale + P[:T]        (MarianDecoder)
              per layer (MarianDecoderLayer, post-norm):
                y = LN(y + CausalSelfAttn(y)); y = LN(y + CrossAttn(y, x))
                y = LN(y + fc2(act(fc1(y))))
    logits = y Eᵀ + final_logits_bias                 (MarianMTModel)

Attention (MarianAttention + eager_attention_forward): q, k, v, out
projections with bias, q·kᵀ · head_dim^-0.5, padding keys of the source
(`input_ids == pad`) get the dtype's minimum added, the decoder's
self-attention is causal. P is `MarianSinusoidalPositionalEmbedding`: sines
in the first half of the channels, cosines in the second. Layer norms are
torch's (biased variance, epsilon 1e-5 inside the square root).

`greedy` is `generate(num_beams=1, do_sample=False)` without a cache: start
from `decoder_start_token_id`, the `bad_words_ids` (Marian's padding) at
-inf, argmax, stop after `eos_token_id` or at `max_length` ids (the start
token counted, as transformers counts it).
"""

import math

import numpy as np

_MIN = np.finfo(np.float32).min


def positions(n_pos, dim):
    """`MarianSinusoidalPositionalEmbedding._init_weight`: [n_pos, dim]."""
    enc = np.array([[pos / np.power(10000, 2 * (j // 2) / dim)
                     for j in range(dim)] for pos in range(n_pos)])
    sentinel = dim // 2 if dim % 2 == 0 else dim // 2 + 1
    out = np.empty((n_pos, dim), np.float32)
    out[:, :sentinel] = np.sin(enc[:, 0::2])
    out[:, sentinel:] = np.cos(enc[:, 1::2])
    return out


def _erf(x):
    return np.vectorize(math.erf)(x)


ACTIVATIONS = {
    "swish": lambda x: x / (1.0 + np.exp(-x)),
    "silu": lambda x: x / (1.0 + np.exp(-x)),
    "relu": lambda x: np.maximum(x, 0.0),
    "gelu": lambda x: 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0))),
}


def linear(w, prefix, x):
    """torch's `nn.Linear`: x Wᵀ + b."""
    return x @ w[prefix + ".weight"].T + w[prefix + ".bias"]


def layer_norm(w, prefix, x, eps=1e-5):
    """torch's `nn.LayerNorm` over the last axis."""
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w[prefix + ".weight"] \
        + w[prefix + ".bias"]


def attention(w, prefix, x, memory, additive_mask, num_heads):
    """`MarianAttention`: x [B, T, C], memory [B, S, C], mask [B, 1, T, S]
    (0 or the minimum) -> [B, T, C]."""
    batch, t_len, width = x.shape
    d = width // num_heads

    def heads(y):  # [B, L, C] -> [B, H, L, d]
        return y.reshape(batch, -1, num_heads, d).transpose(0, 2, 1, 3)

    q = heads(linear(w, prefix + ".q_proj", x))
    k = heads(linear(w, prefix + ".k_proj", memory))
    v = heads(linear(w, prefix + ".v_proj", memory))
    scores = q @ k.transpose(0, 1, 3, 2) * d ** -0.5 + additive_mask
    scores = scores - scores.max(-1, keepdims=True)
    probs = np.exp(scores)
    probs = probs / probs.sum(-1, keepdims=True)
    out = (probs @ v).transpose(0, 2, 1, 3).reshape(batch, t_len, width)
    return linear(w, prefix + ".out_proj", out)


def _embed(w, config, ids):
    width = config["d_model"]
    scale = math.sqrt(width) if config.get("scale_embedding") else 1.0
    table = positions(config["max_position_embeddings"], width)
    return w["model.shared.weight"][ids] * scale + table[:ids.shape[1]]


def _ffn(w, prefix, x, act):
    return linear(w, prefix + ".fc2", act(linear(w, prefix + ".fc1", x)))


def encode(w, config, input_ids, eps=1e-5):
    """`MarianEncoder`: ids [B, S] -> [B, S, C] and the key mask."""
    input_ids = np.asarray(input_ids)
    act = ACTIVATIONS[config["activation_function"]]
    keep = input_ids != config["pad_token_id"]
    mask = np.where(keep, 0.0, _MIN)[:, None, None, :]  # [B, 1, 1, S]
    x = _embed(w, config, input_ids)
    for i in range(config["encoder_layers"]):
        p = f"model.encoder.layers.{i}"
        x = layer_norm(w, p + ".self_attn_layer_norm", x + attention(
            w, p + ".self_attn", x, x, mask,
            config["encoder_attention_heads"]), eps)
        x = layer_norm(w, p + ".final_layer_norm",
                       x + _ffn(w, p, x, act), eps)
    return x, mask


def decode(w, config, decoder_input_ids, memory, memory_mask, eps=1e-5):
    """`MarianDecoder` and the LM head: ids [B, T] -> logits [B, T, V]."""
    decoder_input_ids = np.asarray(decoder_input_ids)
    act = ACTIVATIONS[config["activation_function"]]
    heads = config["decoder_attention_heads"]
    t_len = decoder_input_ids.shape[1]
    causal = np.where(np.tril(np.ones((t_len, t_len), bool)), 0.0,
                      _MIN)[None, None]
    y = _embed(w, config, decoder_input_ids)
    for i in range(config["decoder_layers"]):
        p = f"model.decoder.layers.{i}"
        y = layer_norm(w, p + ".self_attn_layer_norm", y + attention(
            w, p + ".self_attn", y, y, causal, heads), eps)
        y = layer_norm(w, p + ".encoder_attn_layer_norm", y + attention(
            w, p + ".encoder_attn", y, memory, memory_mask, heads), eps)
        y = layer_norm(w, p + ".final_layer_norm", y + _ffn(w, p, y, act),
                       eps)
    bias = w.get("final_logits_bias",
                 np.zeros((1, w["model.shared.weight"].shape[0])))
    return y @ w["model.shared.weight"].T + bias


def forward(w, config, input_ids, decoder_input_ids, eps=1e-5):
    """`MarianMTModel.forward`: logits [B, T, V], float64. `eps` is the
    layer norms' epsilon (torch's 1e-5 in Marian; another value only to
    test that option on its own)."""
    w = {k: np.asarray(v, np.float64) for k, v in w.items()}
    memory, mask = encode(w, config, input_ids, eps)
    return decode(w, config, decoder_input_ids, memory, mask, eps)


def greedy(w, config, input_ids, max_length):
    """Greedy decoding of each row of `input_ids` [B, S] (padded with the
    pad id): a list of Marian id lists, without the start token, the EOS
    included when reached."""
    w = {k: np.asarray(v, np.float64) for k, v in w.items()}
    bad = [ids[0] for ids in config.get("bad_words_ids") or []]
    outputs = []
    for row in np.asarray(input_ids):
        memory, mask = encode(w, config, row[None])
        ids = [config["decoder_start_token_id"]]
        while len(ids) < max_length:
            logits = decode(w, config, np.array([ids]), memory, mask)[0, -1]
            logits[bad] = -np.inf
            ids.append(int(np.argmax(logits)))
            if ids[-1] == config["eos_token_id"]:
                break
        outputs.append(ids[1:])
    return outputs
