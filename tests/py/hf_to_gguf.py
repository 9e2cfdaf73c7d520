"""A Hugging Face decoder checkpoint (Llama / Qwen2 / Qwen3 / Phi-3) written as GGUF the way
llama.cpp's convert_hf_to_gguf.py writes it, with the `gguf` package (llama.cpp's own writer):
used by tests/py/test_generate_gguf.py (converted random models against the HF reference) and by
bench/serving/make_gen_model.py --gguf (the F16 GGUF of the benchmarks' random SmolLM2 shape)."""
import math

import gguf
import numpy as np

import kquants  # tests/py


def permute(w, n_head):
    """llama.cpp convert_hf_to_gguf.py LlamaModel.permute: rotate_half pairs -> adjacent pairs."""
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def write(path, cfg, w, f16=False, tokens=None, eos_id=2, qtype=None, merges=None):
    """As llama.cpp's convert_hf_to_gguf.py writes LlamaModel / Qwen2Model / Qwen3Model /
    Phi3MiniModel: names, q/k permutation for llama only, Phi-3's LongRoPE factors as tensors
    rope_factors_{short,long}.weight with rope.scaling.original_context_length and
    rope.scaling.attn_factor (its set_gguf_parameters / generate_extra_tensors).

    cfg: the config.json dict; w: {HF tensor name: array}. f16: 2-D tensors stored as F16 (as
    convert_hf_to_gguf.py --outtype f16 does; 1-D norms stay F32), else all F32. tokens: the
    vocabulary as strings in id order (default "t0", "t1", ...), written as a "gpt2" (byte-level
    BPE) tokenizer without merges; eos_id: tokenizer.ggml.eos_token_id. qtype: a
    gguf.GGMLQuantizationType (Q8_0, Q4_0, ...) for every 2-D tensor, quantized with the gguf
    package's own quantizer (gguf.quants.quantize), as llama-quantize stores them; 1-D norms
    stay F32. qtype may also be a function of the GGUF tensor name giving each 2-D tensor its
    type (a mix such as llama-quantize's Q4_K_M), None for F32. The K-quants (Q4_K, Q5_K,
    Q6_K), which the gguf package cannot quantize, go through kquants.py. merges: a non-empty
    list of BPE merges ("a b") written as tokenizer.ggml.merges (llama.cpp refuses a "gpt2"
    vocabulary without the key; the gguf package drops an empty array). Returns str(path)."""
    mt = cfg["model_type"]
    arch = mt if mt in ("qwen2", "qwen3", "phi3") else "llama"
    H, heads, kvh = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim", H // heads)
    wr = gguf.GGUFWriter(str(path), arch)
    if "head_dim" in cfg:
        wr.add_key_length(hd)
        wr.add_value_length(hd)
    if arch == "phi3":
        mp, orig = cfg["max_position_embeddings"], cfg.get("original_max_position_embeddings",
                                                            cfg["max_position_embeddings"])
        wr.add_rope_dimension_count(hd)
        wr.add_rope_scaling_orig_ctx_len(orig)
        wr.add_sliding_window(cfg.get("sliding_window") or 0)
        rs = cfg.get("rope_scaling")
        if rs:
            scale = mp / orig
            wr.add_rope_scaling_attn_factors(
                math.sqrt(1 + math.log(scale) / math.log(orig)) if scale > 1.0 else 1.0)
            wr.add_tensor("rope_factors_long.weight", np.asarray(rs["long_factor"], np.float32))
            wr.add_tensor("rope_factors_short.weight",
                          np.asarray(rs["short_factor"], np.float32))
    wr.add_block_count(cfg["num_hidden_layers"])
    wr.add_context_length(cfg["max_position_embeddings"])
    wr.add_embedding_length(H)
    wr.add_feed_forward_length(cfg["intermediate_size"])
    wr.add_head_count(heads)
    wr.add_head_count_kv(kvh)
    wr.add_rope_freq_base(cfg["rope_theta"])
    wr.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    wr.add_tokenizer_model("gpt2")
    wr.add_tokenizer_pre("gpt2")
    toks = tokens if tokens is not None else [f"t{i}" for i in range(cfg["vocab_size"])]
    wr.add_token_list([t.encode() for t in toks])
    if merges is not None:
        wr.add_token_merges(merges)
    wr.add_eos_token_id(eos_id)
    names = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
             "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
             "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
             "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
             "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm",
             "self_attn.qkv_proj": "attn_qkv", "mlp.gate_up_proj": "ffn_up"}
    for k, v in w.items():
        v = np.asarray(v, np.float32)
        if k == "model.embed_tokens.weight":
            n = "token_embd.weight"
        elif k == "model.norm.weight":
            n = "output_norm.weight"
        elif k == "lm_head.weight":
            n = "output.weight"
        else:
            _, _, l, rest = k.split(".", 3)
            stem, suf = rest.rsplit(".", 1)
            n = f"blk.{l}.{names[stem]}.{suf}"
            if arch == "llama" and stem == "self_attn.q_proj":
                v = permute(v, heads)
            elif arch == "llama" and stem == "self_attn.k_proj":
                v = permute(v, kvh)
        qt = qtype(n) if callable(qtype) and not isinstance(qtype, int) else qtype
        if qt is not None and v.ndim == 2:
            v = np.ascontiguousarray(v)
            if qt.name in ("Q4_K", "Q5_K", "Q6_K"):
                blocks = kquants.quantize(v, qt)
            else:
                blocks = gguf.quants.quantize(v, qt)
            wr.add_tensor(n, blocks, raw_dtype=qt)
            continue
        if f16 and v.ndim == 2:
            v = v.astype(np.float16)
        wr.add_tensor(n, np.ascontiguousarray(v))
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()
    return str(path)
