"""Float64 NumPy reference of the decoder-only models ragged runs, written from transformers'
modeling code (not from ragged's C): GPT2LMHeadModel (modeling_gpt2.py: GPT2Block, GPT2Attention
with Conv1D projections, gelu_new, scale_attn_weights / scale_attn_by_inverse_layer_idx, tied LM
head) and LlamaForCausalLM / Qwen2ForCausalLM (modeling_llama.py: LlamaRMSNorm, LlamaRotaryEmbedding
with rope_theta and the Llama-3 rope_scaling of modeling_rope_utils._compute_llama3_parameters,
rotate_half, repeat_kv for grouped-query attention, LlamaMLP's SwiGLU, tied or untied lm_head, Qwen3ForCausalLM and Phi3ForCausalLM (see llama_forward):
a stored lm_head.weight is the head even when tie_word_embeddings is true, as transformers 5
loads such a checkpoint).

Weights are the HF state dict as NumPy arrays (names without "transformer." / "model."
prefixes are accepted too). forward(cfg, weights, ids) returns the logits (len(ids), vocab) of
one sequence at positions 0..len-1 (Phi-3's LongRoPE: the factors transformers picks for a
forward of that length); every position's row depends only on the ids up to it
(causal), so a step's rows compare against the matching rows of the whole sequence.
"""
import math

import numpy as np


def _get(w, *names):
    for n in names:
        if n in w:
            return np.asarray(w[n], np.float64)
    raise KeyError(names[0])


def _layer_norm(x, g, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b


def _rms_norm(x, g, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * g


def _gelu_new(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def _causal_attention(q, k, v, scale):
    """q (nh, T, hd), k/v (nh, T, hd) -> (T, nh*hd)."""
    T = q.shape[1]
    s = np.einsum("htd,hsd->hts", q, k) * scale
    mask = np.triu(np.ones((T, T), bool), 1)
    s = np.where(mask[None], -np.inf, s)
    s = s - s.max(-1, keepdims=True)
    p = np.exp(s)
    p /= p.sum(-1, keepdims=True)
    o = np.einsum("hts,hsd->htd", p, v)
    return o.transpose(1, 0, 2).reshape(T, -1)


def gpt2_forward(cfg, w, ids):
    H = cfg.get("n_embd", 768)
    nh = cfg.get("n_head", 12)
    L = cfg.get("n_layer", 12)
    eps = cfg.get("layer_norm_epsilon", 1e-5)
    hd = H // nh
    pre = lambda n: (n, "transformer." + n)  # noqa: E731
    ids = np.asarray(ids)
    T = len(ids)
    wte = _get(w, *pre("wte.weight"))
    h = wte[ids] + _get(w, *pre("wpe.weight"))[np.arange(T)]
    for l in range(L):
        g = lambda n: _get(w, *pre(f"h.{l}.{n}"))  # noqa: E731
        a = _layer_norm(h, g("ln_1.weight"), g("ln_1.bias"), eps)
        qkv = a @ g("attn.c_attn.weight") + g("attn.c_attn.bias")  # Conv1D: x W + b, W [in, out]
        q, k, v = (qkv[:, i * H:(i + 1) * H].reshape(T, nh, hd).transpose(1, 0, 2)
                   for i in range(3))
        scale = 1.0 / math.sqrt(hd) if cfg.get("scale_attn_weights", True) else 1.0
        if cfg.get("scale_attn_by_inverse_layer_idx", False):
            scale /= float(l + 1)
        ctx = _causal_attention(q, k, v, scale)
        h = h + ctx @ g("attn.c_proj.weight") + g("attn.c_proj.bias")
        m = _layer_norm(h, g("ln_2.weight"), g("ln_2.bias"), eps)
        m = _gelu_new(m @ g("mlp.c_fc.weight") + g("mlp.c_fc.bias"))
        h = h + m @ g("mlp.c_proj.weight") + g("mlp.c_proj.bias")
    h = _layer_norm(h, _get(w, *pre("ln_f.weight")), _get(w, *pre("ln_f.bias")), eps)
    return h @ _head(w, wte, True).T


def _head(w, emb, tie):
    """The LM head as transformers 5 loads it: a stored lm_head.weight wins, whatever
    tie_word_embeddings says; else the embedding when tied."""
    if "lm_head.weight" in w or not tie:
        return _get(w, "lm_head.weight")
    return emb


def rope_inv_freq(cfg, hd):
    """LlamaRotaryEmbedding's inv_freq (default, or rope_type llama3), in float64."""
    base = cfg.get("rope_theta", 10000.0)
    inv = 1.0 / (base ** (np.arange(0, hd, 2, dtype=np.float64) / hd))
    rs = cfg.get("rope_scaling")
    if rs and rs.get("rope_type", rs.get("type")) == "llama3":
        factor = rs["factor"]
        low, high = rs["low_freq_factor"], rs["high_freq_factor"]
        old = rs["original_max_position_embeddings"]
        low_wl, high_wl = old / low, old / high
        wl = 2 * math.pi / inv
        inv_l = np.where(wl > low_wl, inv / factor, inv)
        smooth = (old / wl - low) / (high - low)
        smoothed = (1 - smooth) * inv_l / factor + smooth * inv_l
        medium = ~(wl < high_wl) & ~(wl > low_wl)
        inv = np.where(medium, smoothed, inv_l)
    return inv


def _rotate_half(x):
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], -1)


def longrope_inv_freq(cfg, hd, seq_len):
    """transformers' _compute_longrope_parameters: (inv_freq, attention_factor) for a forward over
    seq_len positions (short_factor while seq_len <= original_max_position_embeddings)."""
    rs = cfg.get("rope_scaling") or cfg.get("rope_parameters")
    base = cfg.get("rope_theta", (rs or {}).get("rope_theta", 10000.0))
    orig = cfg.get("original_max_position_embeddings",
                   rs.get("original_max_position_embeddings", cfg["max_position_embeddings"]))
    factor = rs.get("factor") or cfg["max_position_embeddings"] / orig
    att = rs.get("attention_factor")
    if att is None:
        att = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(orig))
    ext = np.asarray(rs["long_factor"] if seq_len > orig else rs["short_factor"], np.float64)
    return 1.0 / (ext * base ** (np.arange(0, hd, 2, dtype=np.float64) / hd)), att


def _is_longrope(cfg):
    rs = cfg.get("rope_scaling") or cfg.get("rope_parameters") or {}
    return rs.get("rope_type", rs.get("type")) in ("longrope", "su")


def llama_forward(cfg, w, ids, hidden=False):
    """hidden: return the final norm's output (T, H) instead of the logits (embedding models).
    Llama / Mistral / Qwen2 (modeling_llama.py, modeling_qwen2.py), Qwen3 (modeling_qwen3.py:
    q_norm / k_norm, RMSNorms of head_dim on each head of q and k after the projections, before
    RoPE) and Phi-3 (modeling_phi3.py: qkv_proj rows q, k, v and gate_up_proj rows gate, up stored
    fused; LongRoPE factors chosen by the forward's length and cos / sin times the attention
    factor)."""
    H = cfg["hidden_size"]
    nh = cfg["num_attention_heads"]
    kvh = cfg.get("num_key_value_heads", nh)
    hd = cfg.get("head_dim", H // nh)
    L = cfg["num_hidden_layers"]
    eps = cfg.get("rms_norm_eps", 1e-6)
    mt = cfg["model_type"]
    bias = mt == "qwen2" or cfg.get("attention_bias", False)
    pre = lambda n: ("model." + n, n)  # noqa: E731
    ids = np.asarray(ids)
    T = len(ids)
    emb = _get(w, *pre("embed_tokens.weight"))
    h = emb[ids]
    att = 1.0
    if _is_longrope(cfg):
        inv, att = longrope_inv_freq(cfg, hd, T)
    else:
        inv = rope_inv_freq(cfg, hd)
    freqs = np.arange(T, dtype=np.float64)[:, None] * inv[None, :]
    e = np.concatenate([freqs, freqs], -1)
    cos, sin = np.cos(e) * att, np.sin(e) * att  # (T, hd)
    qd, kvd = nh * hd, kvh * hd
    for l in range(L):
        g = lambda n: _get(w, *pre(f"layers.{l}.{n}"))  # noqa: E731
        x = _rms_norm(h, g("input_layernorm.weight"), eps)
        if mt == "phi3":
            qkv = x @ g("self_attn.qkv_proj.weight").T
            q, k, v = qkv[:, :qd], qkv[:, qd:qd + kvd], qkv[:, qd + kvd:]
        else:
            q = x @ g("self_attn.q_proj.weight").T
            k = x @ g("self_attn.k_proj.weight").T
            v = x @ g("self_attn.v_proj.weight").T
        if bias:
            q = q + g("self_attn.q_proj.bias")
            k = k + g("self_attn.k_proj.bias")
            v = v + g("self_attn.v_proj.bias")
        q = q.reshape(T, nh, hd)
        k = k.reshape(T, kvh, hd)
        if mt == "qwen3":
            q = _rms_norm(q, g("self_attn.q_norm.weight"), eps)
            k = _rms_norm(k, g("self_attn.k_norm.weight"), eps)
        q = q.transpose(1, 0, 2)
        k = k.transpose(1, 0, 2)
        v = v.reshape(T, kvh, hd).transpose(1, 0, 2)
        q = q * cos[None] + _rotate_half(q) * sin[None]
        k = k * cos[None] + _rotate_half(k) * sin[None]
        k = np.repeat(k, nh // kvh, axis=0)  # repeat_kv
        v = np.repeat(v, nh // kvh, axis=0)
        ctx = _causal_attention(q, k, v, 1.0 / math.sqrt(hd))
        h = h + ctx @ g("self_attn.o_proj.weight").T
        x = _rms_norm(h, g("post_attention_layernorm.weight"), eps)
        if mt == "phi3":
            gu = x @ g("mlp.gate_up_proj.weight").T
            gate, up = gu[:, :gu.shape[1] // 2], gu[:, gu.shape[1] // 2:]
        else:
            gate = x @ g("mlp.gate_proj.weight").T
            up = x @ g("mlp.up_proj.weight").T
        h = h + (gate / (1.0 + np.exp(-gate)) * up) @ g("mlp.down_proj.weight").T
    h = _rms_norm(h, _get(w, *pre("norm.weight")), eps)
    if hidden:
        return h
    return h @ _head(w, emb, cfg.get("tie_word_embeddings", False)).T


def forward(cfg, w, ids):
    if cfg["model_type"] == "gpt2":
        return gpt2_forward(cfg, w, ids)
    return llama_forward(cfg, w, ids)
