"""Write random-weight decoder-only checkpoints as Hugging Face directories (config.json +
model.safetensors with transformers' tensor names) for the decoder parity tests: GPT-2
(GPT2LMHeadModel: Conv1D weights [in, out], optionally under "transformer.") and the Llama family
(LlamaForCausalLM / Qwen2ForCausalLM, names under "model.", lm_head.weight when untied).
Weights are scaled so activations stay O(1) through the layers and attention is far from uniform.

make(out_dir, spec) -> (config dict, weights dict of float32 arrays)."""
import json
import os

import numpy as np
from safetensors.numpy import save_file


def _n(rng, shape, std):
    return (rng.standard_normal(shape) * std).astype(np.float32)


def gpt2(rng, H, heads, layers, vocab, n_pos, inner=None, prefix="transformer.", **extra):
    I = inner or 4 * H
    cfg = dict(model_type="gpt2", architectures=["GPT2LMHeadModel"], vocab_size=vocab,
               n_embd=H, n_head=heads, n_layer=layers, n_positions=n_pos,
               n_inner=inner, layer_norm_epsilon=1e-5, activation_function="gelu_new",
               bos_token_id=0, eos_token_id=1, **extra)
    w = {"wte.weight": _n(rng, (vocab, H), 0.5), "wpe.weight": _n(rng, (n_pos, H), 0.3),
         "ln_f.weight": 1 + _n(rng, (H,), 0.1), "ln_f.bias": _n(rng, (H,), 0.1)}
    for l in range(layers):
        p = f"h.{l}."
        w.update({
            p + "ln_1.weight": 1 + _n(rng, (H,), 0.1), p + "ln_1.bias": _n(rng, (H,), 0.1),
            p + "attn.c_attn.weight": _n(rng, (H, 3 * H), 1.5 / np.sqrt(H)),
            p + "attn.c_attn.bias": _n(rng, (3 * H,), 0.1),
            p + "attn.c_proj.weight": _n(rng, (H, H), 0.5 / np.sqrt(H)),
            p + "attn.c_proj.bias": _n(rng, (H,), 0.1),
            p + "ln_2.weight": 1 + _n(rng, (H,), 0.1), p + "ln_2.bias": _n(rng, (H,), 0.1),
            p + "mlp.c_fc.weight": _n(rng, (H, I), 1.0 / np.sqrt(H)),
            p + "mlp.c_fc.bias": _n(rng, (I,), 0.1),
            p + "mlp.c_proj.weight": _n(rng, (I, H), 0.5 / np.sqrt(I)),
            p + "mlp.c_proj.bias": _n(rng, (H,), 0.1),
            # the causal-mask buffer older checkpoints carry; readers ignore it
            p + "attn.bias": np.tril(np.ones((1, 1, 8, 8), np.float32)),
        })
    stored = {prefix + k: v for k, v in w.items()}
    return cfg, w, stored


def llama(rng, H, heads, kv_heads, layers, inter, vocab, max_pos=512, model_type="llama",
          tie=False, head_dim=None, rope_theta=10000.0, rope_scaling=None, stored_head=None,
          **extra):
    """stored_head: write lm_head.weight (default: when untied); tie True with stored_head True
    is a checkpoint whose config ties but whose file holds a distinct head."""
    hd = head_dim or H // heads
    qd, kvd = heads * hd, kv_heads * hd
    arch = {"qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM",
            "phi3": "Phi3ForCausalLM"}.get(model_type, "LlamaForCausalLM")
    cfg = dict(model_type=model_type, architectures=[arch],
               vocab_size=vocab, hidden_size=H, num_attention_heads=heads,
               num_key_value_heads=kv_heads, num_hidden_layers=layers, intermediate_size=inter,
               max_position_embeddings=max_pos, rms_norm_eps=1e-5, rope_theta=rope_theta,
               rope_scaling=rope_scaling, tie_word_embeddings=tie, hidden_act="silu",
               bos_token_id=1, eos_token_id=2, **extra)
    if head_dim:
        cfg["head_dim"] = head_dim
    w = {"model.embed_tokens.weight": _n(rng, (vocab, H), 1.0),
         "model.norm.weight": 1 + _n(rng, (H,), 0.1)}
    if stored_head if stored_head is not None else not tie:
        w["lm_head.weight"] = _n(rng, (vocab, H), 1.0 / np.sqrt(H))
    for l in range(layers):
        p = f"model.layers.{l}."
        w.update({
            p + "input_layernorm.weight": 1 + _n(rng, (H,), 0.1),
            p + "self_attn.q_proj.weight": _n(rng, (qd, H), 2.0 / np.sqrt(H)),
            p + "self_attn.k_proj.weight": _n(rng, (kvd, H), 2.0 / np.sqrt(H)),
            p + "self_attn.v_proj.weight": _n(rng, (kvd, H), 1.0 / np.sqrt(H)),
            p + "self_attn.o_proj.weight": _n(rng, (H, qd), 0.5 / np.sqrt(qd)),
            p + "post_attention_layernorm.weight": 1 + _n(rng, (H,), 0.1),
            p + "mlp.gate_proj.weight": _n(rng, (inter, H), 1.0 / np.sqrt(H)),
            p + "mlp.up_proj.weight": _n(rng, (inter, H), 1.0 / np.sqrt(H)),
            p + "mlp.down_proj.weight": _n(rng, (H, inter), 0.5 / np.sqrt(inter)),
        })
        if model_type == "qwen2" or extra.get("attention_bias"):
            w.update({p + "self_attn.q_proj.bias": _n(rng, (qd,), 0.2),
                      p + "self_attn.k_proj.bias": _n(rng, (kvd,), 0.2),
                      p + "self_attn.v_proj.bias": _n(rng, (kvd,), 0.2)})
        if model_type == "qwen3":  # per-head RMSNorm weights of q and k (Qwen3Attention)
            w.update({p + "self_attn.q_norm.weight": 1 + _n(rng, (hd,), 0.3),
                      p + "self_attn.k_norm.weight": 1 + _n(rng, (hd,), 0.3)})
        if model_type == "phi3":  # Phi3Attention.qkv_proj, Phi3MLP.gate_up_proj: fused
            a = "self_attn."
            w[p + a + "qkv_proj.weight"] = np.concatenate(
                [w.pop(p + a + f"{x}_proj.weight") for x in "qkv"])
            w[p + "mlp.gate_up_proj.weight"] = np.concatenate(
                [w.pop(p + "mlp.gate_proj.weight"), w.pop(p + "mlp.up_proj.weight")])
    if model_type == "qwen3":
        cfg["head_dim"] = hd
    if model_type == "phi3":  # Phi3Config's pad_token_id 32000 is outside a tiny vocabulary
        cfg.setdefault("pad_token_id", 0)
    return cfg, w, dict(w)


def longrope(hd, seed=0):
    """A Phi-3-128k-style rope_scaling (type "longrope"): per-pair short factors near 1, long
    factors growing with the pair index, as Phi-3-mini-128k's."""
    rng = np.random.default_rng(seed)
    half = hd // 2
    short = (1.0 + 0.5 * rng.random(half)).round(4).tolist()
    long = (1.0 + np.linspace(0, 30, half) * (0.5 + rng.random(half))).round(4).tolist()
    return dict(type="longrope", short_factor=short, long_factor=long)


def make(out_dir, family, seed=0, **spec):
    rng = np.random.default_rng(seed)
    cfg, w, stored = (gpt2 if family == "gpt2" else llama)(rng, **spec)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    save_file(stored, os.path.join(out_dir, "model.safetensors"))
    return cfg, w
