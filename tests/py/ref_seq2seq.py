"""Float64 NumPy reference for encoder-decoder (machine translation) checkpoints in Hugging Face
format: Marian (MarianMTModel), BART, mBART, M2M100/NLLB and T5 (original and v1.1/FLAN-T5).
It reads a checkpoint directory (config.json, model.safetensors, generation_config.json when
present) with safetensors.numpy only, and is independent of the rest of the repository; it never
imports torch or transformers.

    m = Seq2Seq(path)
    h = m.encode(src_ids, src_mask=None)          # (len(src), d_model) encoder output
    z = m.decoder_logits(h, tgt_ids, src_mask=None, cached_positions=True)
                                                  # (len(tgt), vocab) next-token logits
    m.greedy(src_ids, max_new_tokens, no_repeat_ngram_size=0, src_mask=None, **overrides)
                                                  # [decoder_start, ..., eos] like generate()
    m.beam_search(src_ids, num_beams, max_new_tokens, length_penalty=1.0,
                  early_stopping=False, no_repeat_ngram_size=0, num_return_sequences=1,
                  return_scores=False, src_mask=None, **overrides)
                                                  # num_return_sequences id lists, best first
                                                  # (+ their sequences_scores if return_scores)
    m.hf_rows(seqs)                               # the same, padded as generate() pads them
    overrides: forced_bos_token_id, forced_eos_token_id, bad_words_ids, renormalize_logits
    attributes: family, cfg, gen, w (float64 tensors), eos_ids, pad_token_id,
                decoder_start_token_id

What it computes, per family, as transformers 5.x does (modeling_{marian,bart,mbart,m2m_100,t5}.py;
no dropout, eval mode):
  marian  tokens * sqrt(d) (scale_embedding) + sinusoid[pos] (MarianSinusoidalPositionalEmbedding:
          sin in features [0, d/2), cos in [d/2, d), computed in float64, held as float32;
          positions 0..n-1; the stored model.*.embed_positions.weight when a checkpoint has it),
          post-LN layers, activation "swish"; logits = h @ shared.T + final_logits_bias.
  bart    tokens (* sqrt(d) if scale_embedding) + learned positions[pos + 2], layernorm_embedding,
          post-LN layers (x = LN(x + f(x))), gelu (erf); final_logits_bias.
  mbart   as BART but pre-LN layers (x = x + f(LN(x))) and a final layer_norm per stack;
          scale_embedding True.
  m2m100  tokens * sqrt(d) + fairseq sinusoid (M2M100SinusoidalPositionalEmbedding: sin | cos
          halves, frequencies exp(-k log(10000) / (d/2 - 1)), computed in float32 as transformers
          does) at position padding_idx + 1 + t (pad tokens get the zero row padding_idx and do
          not advance the count: cumsum of non-pad tokens), pre-LN with final layer_norm, relu,
          no layernorm_embedding, no final_logits_bias.
  t5      T5LayerNorm (RMS, no bias, eps layer_norm_epsilon), no attention scaling, relative
          position bias from block 0's relative_attention_bias shared by all layers of a stack
          (buckets bidirectional in the encoder, unidirectional in the decoder; none in
          cross-attention), feed_forward_proj "relu" (wi, wo) or "gated-gelu" (gelu_new(wi_0 x) *
          wi_1 x, wo); the decoder output is scaled by d_model**-0.5 before lm_head unless
          config tie_word_embeddings is false (T5 v1.1 / FLAN-T5, which have their own lm_head).
  Attention: q k^T * head_dim**-0.5 (T5: 1), softmax, v; causal in decoder self-attention;
  q/k/v/out projections with bias (BART family) or without (T5). LayerNorm eps 1e-5.
  lm_head: lm_head.weight when the checkpoint stores one, else the shared embedding (5.x ties
  only when the stored values are equal or absent).

Generation follows transformers 5.x `generate()` (GenerationMixin._sample with do_sample False,
and the vectorised GenerationMixin._beam_search of the 4.50+ refactor; 4.4x's
BeamSearchScorer/BeamHypotheses score hypotheses the same way, generated_len included, but
check early stopping against the step's best candidate rather than the best running beam, so
they can differ in rare cases), for one source sentence:
  * the decoder starts with [decoder_start_token_id]; max_length = 1 + max_new_tokens;
  * logits processors, in transformers' order: no_repeat_ngram_size (n-grams over the whole
    decoder sequence, start token included), bad_words_ids (single tokens always banned,
    longer ones when their prefix ends the sequence; eos-only entries dropped),
    forced_bos_token_id (at cur_len == 1), forced_eos_token_id (at cur_len == max_length - 1),
    then renormalize_logits (a second log_softmax) when set; greedy applies them to the raw
    logits, beam search to log_softmax(logits) over the full vocabulary;
  * these processor settings and bos/eos/pad/decoder_start ids are read from
    generation_config.json when the directory has one (as transformers does: it then ignores
    config.json's), else from config.json; keyword overrides on greedy()/beam_search();
  * greedy: argmax (first index on ties) until an eos id or max_length;
  * beam search: running beams start at scores [0, -1e9, ...]; each step takes the top
    K = max(2, 1 + n_eos) * num_beams of (beam score + log-prob) over all beams x vocab; a
    candidate ending in eos, or reaching max_length, is finished; only those ranked < num_beams
    enter the finished set, scored sum_logprobs / generated_len ** length_penalty, where
    generated_len counts the generated tokens including the eos (cur_len + 1 - 1); the finished
    set keeps the best num_beams; the next running beams are the best num_beams of the rest
    (finished candidates get -1e9). Stopping: early_stopping True stops when num_beams
    hypotheses are finished; False (and "never") stop when all num_beams slots are finished and
    best_running_score / L ** length_penalty <= the worst finished score, with L = cur_len - 1
    (the generated length so far) for False, and L = max_length - 1 for "never" when
    length_penalty > 0; and always at max_length. Returned: the best num_return_sequences
    finished hypotheses, best first (num_beams == 1 runs greedy, as generate() does).
  * the source is attended to in full unless src_mask is given: 5.x generate() infers no
    attention mask for encoder-decoder models (pass src_mask for generate(attention_mask=...));
    4.x inferred src != pad when the source held a pad id: src_mask=m.source_mask(src) gives
    that.
  transformers computes generation scores in float32, this reference in float64, so results can
  only differ where two candidates' scores tie to float32 precision.

Validation (development only; torch and transformers are not needed by this module or by
make_seq2seq.py): torch 2.15.0 (CPU) and transformers 5.24.0, make_seq2seq's tiny checkpoints
(d_model 32, 2+2 layers, 4 heads, ffn 64, vocab 101; seeds 0-2) of every family (marian, bart,
mbart, m2m100, t5, t5v11), AutoModelForSeq2SeqLM.from_pretrained(dir).double():
  * loading reports no missing, unexpected or mismatched keys; the stored names and shapes equal
    those save_pretrained writes for a fresh model of the same config (t5v11 also stores
    lm_head.weight, as FLAN-T5 checkpoints do; 5.24 leaves it untied);
  * encoder output and decoder logits (sources of 1-40 tokens, 18-token targets): relative max
    abs difference <= 5e-14 for marian, bart, mbart; <= 1.1e-6 for m2m100 (transformers builds
    its sinusoid in float32 even in a float64 model; this reference mimics it in NumPy float32,
    within an ulp); <= 2.6e-6 for t5/t5v11 (T5LayerNorm takes the variance in float32);
  * generate(do_sample=False): 324 cases (per family and seed, 2 sources x (greedy, 20 new
    tokens + 8 beam settings, 16 new tokens: num_beams 2-5, length_penalty 1 / 0.6 / 2 / -1 / 0,
    early_stopping False / True / "never", no_repeat_ngram_size 0-3, num_return_sequences 1-4))
    token-identical to greedy()/hf_rows(beam_search()); sequences_scores within 4e-7 relative;
  * also token-identical: sources holding pad ids, with src_mask = generate(attention_mask=...)
    and without (5.x: no inferred mask); overrides forced_bos_token_id, forced_eos_token_id None,
    bad_words_ids (single and two-token), renormalize_logits; stored Marian positions,
    tied_copies, uneven encoder/decoder depth (not T5: 5.24's cache fails on T5 with
    num_decoder_layers != num_layers), T5 d_kv != d_model/heads and 16 buckets / distance 20,
    gated-relu, gelu_new; M2M100 decoder logits with pad ids in the target match transformers'
    one-token-at-a-time cached decoding (cached_positions=True, 1e-7) and its full forward
    (cached_positions=False); T5 bucket function equal to transformers' for |rel| <= 2000.
  A float16 checkpoint (make(dtype=np.float16)) loads too, but transformers then runs in
  float16 and rounds Marian's sinusoid to float16 (logits differ by ~5e-3 relative)."""
import json
import math
import os

import numpy as np
from safetensors.numpy import load_file

_FAMILY = {"marian": "marian", "bart": "bart", "mbart": "mbart", "m2m_100": "m2m100",
           "t5": "t5"}
_MISSING = object()


# ----------------------------------------------------------------------------------------------
# elementwise pieces

_erf = np.frompyfunc(math.erf, 1, 1)


def _gelu(x):
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)).astype(np.float64))


def _gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


ACT = {
    "relu": lambda x: np.maximum(x, 0.0),
    "gelu": _gelu,
    "gelu_new": _gelu_tanh,
    "gelu_pytorch_tanh": _gelu_tanh,
    "gelu_fast": lambda x: 0.5 * x * (1.0 + np.tanh(x * 0.7978845608 * (1.0 + 0.044715 * x * x))),
    "quick_gelu": lambda x: x / (1.0 + np.exp(-1.702 * x)),
    "silu": lambda x: x / (1.0 + np.exp(-x)),
    "swish": lambda x: x / (1.0 + np.exp(-x)),
    "tanh": np.tanh,
}


def layer_norm(x, w, b, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def rms_norm(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def log_softmax(x):
    m = np.max(x, -1, keepdims=True)
    if not np.isfinite(m).all():  # a row of -inf stays -inf (as torch gives nan only then)
        m = np.where(np.isfinite(m), m, 0.0)
    z = x - m
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def attention(q, k, v, heads, scale, bias=None, causal=False, key_mask=None):
    """q (n, heads*hd), k/v (m, heads*hd) -> (n, heads*hd). bias (heads, n, m) is added to the
    scores (T5); key_mask (m,) bool, False = masked; causal masks key j > query i."""
    n, m = q.shape[0], k.shape[0]
    hd = q.shape[1] // heads
    qh = q.reshape(n, heads, hd).transpose(1, 0, 2)
    kh = k.reshape(m, heads, hd).transpose(1, 0, 2)
    vh = v.reshape(m, heads, hd).transpose(1, 0, 2)
    s = qh @ kh.transpose(0, 2, 1) * scale
    if bias is not None:
        s = s + bias
    if causal:  # the query rows are the last n of the m key positions
        s = np.where(np.arange(m)[None, :] <= np.arange(m - n, m)[:, None], s, -np.inf)
    if key_mask is not None:
        s = np.where(key_mask[None, None, :], s, -np.inf)
    s = s - s.max(-1, keepdims=True)
    p = np.exp(s)
    p /= p.sum(-1, keepdims=True)
    return (p @ vh).transpose(1, 0, 2).reshape(n, heads * hd)


def t5_relative_position_bucket(rel, bidirectional, num_buckets, max_distance):
    """T5Attention._relative_position_bucket, rel = memory_position - query_position (the log in
    float32 as torch computes it)."""
    rel = np.asarray(rel, np.int64)
    buckets = np.zeros_like(rel)
    n = num_buckets
    if bidirectional:
        n //= 2
        buckets += (rel > 0).astype(np.int64) * n
        rel = np.abs(rel)
    else:
        rel = -np.minimum(rel, 0)
    max_exact = n // 2
    f32 = np.float32
    large = max_exact + (np.log(np.maximum(rel, 1).astype(f32) / f32(max_exact))
                         / f32(math.log(max_distance / max_exact))
                         * f32(n - max_exact)).astype(np.int64)
    large = np.minimum(large, n - 1)
    return buckets + np.where(rel < max_exact, rel, large)


def marian_sinusoid(positions, dim):
    """MarianSinusoidalPositionalEmbedding rows (float64 math, float32 values)."""
    j = np.arange(dim)
    enc = np.asarray(positions, np.float64)[:, None] / np.power(10000, 2 * (j // 2) / dim)[None]
    out = np.empty((len(enc), dim), np.float32)
    sentinel = dim // 2 if dim % 2 == 0 else dim // 2 + 1
    out[:, :sentinel] = np.sin(enc[:, 0::2])
    out[:, sentinel:] = np.cos(enc[:, 1::2])
    return out.astype(np.float64)


def m2m100_sinusoid(positions, dim, padding_idx):
    """M2M100SinusoidalPositionalEmbedding.get_embedding rows, in float32 like torch."""
    half = dim // 2
    f32 = np.float32
    freq = np.exp(np.arange(half, dtype=f32) * f32(-(math.log(10000) / (half - 1))))
    pos = np.asarray(positions)
    arg = pos.astype(f32)[:, None] * freq[None, :]
    out = np.concatenate([np.sin(arg), np.cos(arg)], 1)
    if dim % 2:
        out = np.concatenate([out, np.zeros((len(pos), 1), f32)], 1)
    out[pos == padding_idx] = 0
    return out.astype(np.float64)


# ----------------------------------------------------------------------------------------------

class Seq2Seq:
    def __init__(self, path):
        with open(os.path.join(path, "config.json")) as f:
            self.cfg = cfg = json.load(f)
        gpath = os.path.join(path, "generation_config.json")
        if os.path.exists(gpath):
            with open(gpath) as f:
                self.gen = json.load(f)
        else:
            self.gen = cfg
        self.w = {k: v.astype(np.float64)
                  for k, v in load_file(os.path.join(path, "model.safetensors")).items()}
        self.family = _FAMILY[cfg["model_type"]]
        if self.family == "t5":
            self._init_t5()
        else:
            self._init_bart()
        eos = self.gen.get("eos_token_id")
        self.eos_ids = [] if eos is None else ([eos] if isinstance(eos, int) else list(eos))
        self.pad_token_id = self.gen.get("pad_token_id")
        self.decoder_start_token_id = self.gen.get("decoder_start_token_id")
        if self.decoder_start_token_id is None:
            self.decoder_start_token_id = self.gen.get("bos_token_id")

    # ---- BART family ----------------------------------------------------------------------------
    def _init_bart(self):
        c, f = self.cfg, self.family
        self.d = c["d_model"]
        self.pre_ln = f in ("mbart", "m2m100")
        self.scale = math.sqrt(self.d) if c.get("scale_embedding", False) else 1.0
        self.act = ACT[c.get("activation_function", "gelu")]
        self.heads = {"encoder": c["encoder_attention_heads"],
                      "decoder": c["decoder_attention_heads"]}
        self.n_layers = {"encoder": c["encoder_layers"], "decoder": c["decoder_layers"]}
        self.emb = self.w["model.shared.weight"]
        self.head_w = self.w.get("lm_head.weight", self.emb)
        self.head_b = self.w.get("final_logits_bias", np.zeros((1, self.emb.shape[0])))[0]
        self.padding_idx = c.get("pad_token_id")

    def _bart_positions(self, stack, ids, cached):
        n, f = len(ids), self.family
        if f in ("bart", "mbart"):
            return self.w[f"model.{stack}.embed_positions.weight"][np.arange(n) + 2]
        if f == "marian":
            key = f"model.{stack}.embed_positions.weight"
            return self.w[key][:n] if key in self.w else marian_sinusoid(np.arange(n), self.d)
        pad = self.padding_idx
        mask = (np.asarray(ids) != pad).astype(np.int64)
        count = np.arange(1, n + 1) if cached else np.cumsum(mask)
        return m2m100_sinusoid(count * mask + pad, self.d, pad)

    def _bart_mha(self, p, x, kv, heads, causal=False, key_mask=None, kv_proj=None):
        w = self.w
        q = x @ w[p + "q_proj.weight"].T + w[p + "q_proj.bias"]
        if kv_proj is None:
            k = kv @ w[p + "k_proj.weight"].T + w[p + "k_proj.bias"]
            v = kv @ w[p + "v_proj.weight"].T + w[p + "v_proj.bias"]
        else:
            k, v = kv_proj
        o = attention(q, k, v, heads, (self.d // heads) ** -0.5, causal=causal,
                      key_mask=key_mask)
        return o @ w[p + "out_proj.weight"].T + w[p + "out_proj.bias"]

    def _bart_sub(self, x, norm, fn):
        w = self.w
        if self.pre_ln:
            return x + fn(layer_norm(x, w[norm + ".weight"], w[norm + ".bias"]))
        return layer_norm(x + fn(x), w[norm + ".weight"], w[norm + ".bias"])

    def _bart_ffn(self, p, x):
        w = self.w
        h = self.act(x @ w[p + "fc1.weight"].T + w[p + "fc1.bias"])
        return h @ w[p + "fc2.weight"].T + w[p + "fc2.bias"]

    def _bart_stack(self, stack, ids, cross=None, src_mask=None, cached=True):
        w = self.w
        x = self.emb[np.asarray(ids)] * self.scale + \
            self._bart_positions(stack, ids, cached and stack == "decoder")
        if f"model.{stack}.layernorm_embedding.weight" in w:
            x = layer_norm(x, w[f"model.{stack}.layernorm_embedding.weight"],
                           w[f"model.{stack}.layernorm_embedding.bias"])
        H = self.heads[stack]
        for l in range(self.n_layers[stack]):
            p = f"model.{stack}.layers.{l}."
            if stack == "encoder":
                x = self._bart_sub(x, p + "self_attn_layer_norm", lambda h: self._bart_mha(
                    p + "self_attn.", h, h, H, key_mask=src_mask))
            else:
                x = self._bart_sub(x, p + "self_attn_layer_norm", lambda h: self._bart_mha(
                    p + "self_attn.", h, h, H, causal=True))
                x = self._bart_sub(x, p + "encoder_attn_layer_norm", lambda h: self._bart_mha(
                    p + "encoder_attn.", h, None, H, key_mask=src_mask, kv_proj=cross[l]))
            x = self._bart_sub(x, p + "final_layer_norm", lambda h: self._bart_ffn(p, h))
        if f"model.{stack}.layer_norm.weight" in w:
            x = layer_norm(x, w[f"model.{stack}.layer_norm.weight"],
                           w[f"model.{stack}.layer_norm.bias"])
        return x

    def _bart_cross(self, enc):
        w = self.w
        out = []
        for l in range(self.n_layers["decoder"]):
            p = f"model.decoder.layers.{l}.encoder_attn."
            out.append((enc @ w[p + "k_proj.weight"].T + w[p + "k_proj.bias"],
                        enc @ w[p + "v_proj.weight"].T + w[p + "v_proj.bias"]))
        return out

    # ---- T5 -------------------------------------------------------------------------------------
    def _init_t5(self):
        c = self.cfg
        self.d = c["d_model"]
        self.eps = c.get("layer_norm_epsilon", 1e-6)
        proj = c.get("feed_forward_proj", "relu")
        self.gated = proj.startswith("gated-")
        act = proj.split("-")[-1]
        self.act = ACT["gelu_new" if proj == "gated-gelu" else act]
        self.heads = {"encoder": c["num_heads"], "decoder": c["num_heads"]}
        self.n_layers = {"encoder": c["num_layers"],
                         "decoder": c.get("num_decoder_layers") or c["num_layers"]}
        self.buckets = c.get("relative_attention_num_buckets", 32)
        self.max_distance = c.get("relative_attention_max_distance", 128)
        self.emb = self.w["shared.weight"]
        self.head_w = self.w.get("lm_head.weight", self.emb)
        self.out_scale = self.d ** -0.5 if c.get("tie_word_embeddings", True) is not False else 1.0

    def _t5_bias(self, stack, n, m):
        """(heads, n, m) position bias for the last n queries of m positions."""
        ctx = np.arange(m - n, m)[:, None]
        mem = np.arange(m)[None, :]
        b = t5_relative_position_bucket(mem - ctx, stack == "encoder", self.buckets,
                                        self.max_distance)
        table = self.w[f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"]
        return table[b].transpose(2, 0, 1)

    def _t5_mha(self, p, x, kv, heads, bias=None, causal=False, key_mask=None, kv_proj=None):
        w = self.w
        q = x @ w[p + "q.weight"].T
        k, v = kv_proj if kv_proj is not None else (kv @ w[p + "k.weight"].T,
                                                    kv @ w[p + "v.weight"].T)
        o = attention(q, k, v, heads, 1.0, bias=bias, causal=causal, key_mask=key_mask)
        return o @ w[p + "o.weight"].T

    def _t5_ffn(self, p, x):
        w = self.w
        if self.gated:
            h = self.act(x @ w[p + "wi_0.weight"].T) * (x @ w[p + "wi_1.weight"].T)
        else:
            h = self.act(x @ w[p + "wi.weight"].T)
        return h @ w[p + "wo.weight"].T

    def _t5_stack(self, stack, ids, cross=None, src_mask=None, cached=True):
        w, eps = self.w, self.eps
        x = self.emb[np.asarray(ids)]
        n = len(ids)
        H = self.heads[stack]
        bias = self._t5_bias(stack, n, n)
        for l in range(self.n_layers[stack]):
            p = f"{stack}.block.{l}.layer."
            h = rms_norm(x, w[p + "0.layer_norm.weight"], eps)
            x = x + self._t5_mha(p + "0.SelfAttention.", h, h, H, bias=bias,
                                 causal=stack == "decoder",
                                 key_mask=src_mask if stack == "encoder" else None)
            f = 1
            if stack == "decoder":
                h = rms_norm(x, w[p + "1.layer_norm.weight"], eps)
                x = x + self._t5_mha(p + "1.EncDecAttention.", h, None, H, key_mask=src_mask,
                                     kv_proj=cross[l])
                f = 2
            h = rms_norm(x, w[f"{p}{f}.layer_norm.weight"], eps)
            x = x + self._t5_ffn(f"{p}{f}.DenseReluDense.", h)
        return rms_norm(x, w[f"{stack}.final_layer_norm.weight"], eps)

    def _t5_cross(self, enc):
        w = self.w
        return [(enc @ w[f"decoder.block.{l}.layer.1.EncDecAttention.k.weight"].T,
                 enc @ w[f"decoder.block.{l}.layer.1.EncDecAttention.v.weight"].T)
                for l in range(self.n_layers["decoder"])]

    # ---- public forward -------------------------------------------------------------------------
    def source_mask(self, src_ids):
        """transformers 4.x generate()'s inferred encoder attention mask: src != pad when the
        source holds a pad id that is not an eos id; else None (all ones)."""
        src = np.asarray(src_ids)
        pad = self.pad_token_id
        if pad is None or pad in self.eos_ids or not (src == pad).any():
            return None
        return src != pad

    def encode(self, src_ids, src_mask=None):
        """Encoder last hidden state (len(src), d_model). src_mask: (len,) bool, False = a
        masked (padding) key; None attends to everything (a plain forward)."""
        stack = self._t5_stack if self.family == "t5" else self._bart_stack
        mask = None if src_mask is None else np.asarray(src_mask, bool)
        return stack("encoder", list(src_ids), src_mask=mask)

    def _cross(self, enc):
        return self._t5_cross(enc) if self.family == "t5" else self._bart_cross(enc)

    def _logits(self, cross, tgt_ids, src_mask, cached):
        if self.family == "t5":
            h = self._t5_stack("decoder", tgt_ids, cross, src_mask) * self.out_scale
            return h @ self.head_w.T
        h = self._bart_stack("decoder", tgt_ids, cross, src_mask, cached)
        return h @ self.head_w.T + self.head_b

    def decoder_logits(self, enc_hidden, tgt_ids, src_mask=None, cached_positions=True):
        """Logits (len(tgt), vocab) of the decoder run over tgt_ids (which start with
        decoder_start_token_id) attending to enc_hidden. cached_positions (M2M100 only, and only
        when tgt holds a pad id): True numbers positions as generate() does, one token at a time
        with a cache (position t + 2, pad -> the zero row); False as one full forward (a cumsum
        over non-pad tokens)."""
        mask = None if src_mask is None else np.asarray(src_mask, bool)
        return self._logits(self._cross(enc_hidden), list(tgt_ids), mask, cached_positions)

    # ---- generation -----------------------------------------------------------------------------
    def _settings(self, overrides):
        s = {}
        for k in ("forced_bos_token_id", "forced_eos_token_id", "bad_words_ids",
                  "renormalize_logits"):
            v = overrides.pop(k, _MISSING)
            s[k] = self.gen.get(k) if v is _MISSING else v
        if overrides:
            raise TypeError(f"unknown arguments {sorted(overrides)}")
        if isinstance(s["forced_eos_token_id"], int):
            s["forced_eos_token_id"] = [s["forced_eos_token_id"]]
        bad = [b for b in (s["bad_words_ids"] or []) if not (len(b) == 1 and b[0] in self.eos_ids)]
        s["bad_words_ids"] = bad
        return s

    def _process(self, seq, scores, s, max_length, ngram):
        """The logits processors generate() builds, in its order, for one sequence."""
        scores = scores.copy()
        cur = len(seq)
        if ngram and cur >= ngram:
            prefix = seq[cur + 1 - ngram:]
            for i in range(cur - ngram + 1):
                if seq[i:i + ngram - 1] == prefix:
                    scores[seq[i + ngram - 1]] = -np.inf
        for b in s["bad_words_ids"]:
            if len(b) == 1 or (len(b) - 1 <= cur and seq[cur - len(b) + 1:] == b[:-1]):
                scores[b[-1]] = -np.inf
        if s["forced_bos_token_id"] is not None and cur == 1:
            scores[:] = -np.inf
            scores[s["forced_bos_token_id"]] = 0.0
        if s["forced_eos_token_id"] is not None and cur == max_length - 1:
            scores[:] = -np.inf
            scores[s["forced_eos_token_id"]] = 0.0
        if s["renormalize_logits"] is True:
            scores = log_softmax(scores)
        return scores

    def greedy(self, src_ids, max_new_tokens, no_repeat_ngram_size=0, src_mask=None,
               **overrides):
        """generate(do_sample=False, num_beams=1): [decoder_start, tokens..., eos]. src_mask:
        the encoder attention mask (bool per source token; None: all ones). overrides:
        forced_bos_token_id, forced_eos_token_id, bad_words_ids, renormalize_logits."""
        s = self._settings(overrides)
        mask = None if src_mask is None else np.asarray(src_mask, bool)
        cross = self._cross(self.encode(src_ids, mask))
        seq = [self.decoder_start_token_id]
        max_length = 1 + max_new_tokens
        while len(seq) < max_length:
            logits = self._logits(cross, seq, mask, True)[-1]
            tok = int(np.argmax(self._process(seq, logits, s, max_length, no_repeat_ngram_size)))
            seq.append(tok)
            if tok in self.eos_ids:
                break
        return seq

    def beam_search(self, src_ids, num_beams, max_new_tokens, length_penalty=1.0,
                    early_stopping=False, no_repeat_ngram_size=0, num_return_sequences=1,
                    return_scores=False, src_mask=None, **overrides):
        """generate(do_sample=False, num_beams=...): the best num_return_sequences finished
        hypotheses, best first, as a list of id lists (not padded; see hf_rows). return_scores:
        also their sequence scores (generate()'s sequences_scores). overrides as greedy()."""
        if num_return_sequences > num_beams:
            raise ValueError("num_return_sequences must be <= num_beams")
        if num_beams == 1:
            seq = self.greedy(src_ids, max_new_tokens, no_repeat_ngram_size, src_mask,
                              **overrides)
            return ([seq], [None]) if return_scores else [seq]
        s = self._settings(overrides)
        mask = None if src_mask is None else np.asarray(src_mask, bool)
        cross = self._cross(self.encode(src_ids, mask))
        eos = set(self.eos_ids)
        prompt = 1
        max_length = prompt + max_new_tokens
        K = max(2, 1 + len(eos)) * num_beams

        def topk(x, k):  # descending; the lower index first on ties
            return np.argsort(-x, kind="stable")[:k]

        running = [[self.decoder_start_token_id] for _ in range(num_beams)]
        run_scores = np.full(num_beams, -1e9)
        run_scores[0] = 0.0
        # finished slots: (sequence, score, is_finished); placeholders score -1e9
        fin = [(running[0], -1e9, False)] * num_beams
        unsatisfied = True
        cur_len = prompt
        while True:
            lp = np.stack([self._process(seq, log_softmax(self._logits(cross, seq, mask, True)[-1]),
                                         s, max_length, no_repeat_ngram_size)
                           for seq in running])
            V = lp.shape[1]
            acc = (lp + run_scores[:, None]).reshape(-1)
            top = topk(acc, K)
            cand = [running[i // V] + [int(i % V)] for i in top]
            cand_scores = acc[top]
            hit = np.array([c[-1] in eos or len(c) >= max_length for c in cand])
            # next running beams: the best num_beams, finished candidates pushed down by 1e9
            pushed = cand_scores - 1e9 * hit
            nxt = topk(pushed, num_beams)
            # finished set update
            fs = cand_scores / float(cur_len + 1 - prompt) ** length_penalty
            if early_stopping is True and all(f for _, _, f in fin):
                fs = fs - 1e9
            if not unsatisfied:
                fs = fs - 1e9
            just = hit & (np.arange(K) < num_beams)
            fs = fs - 1e9 * ~just
            merged = fin + [(cand[j], fs[j], bool(just[j])) for j in range(K)]
            fin = [merged[j] for j in topk(np.array([m[1] for m in merged]), num_beams)]
            running, run_scores = [cand[j] for j in nxt], pushed[nxt]
            cur_len += 1
            # stopping
            if early_stopping == "never" and length_penalty > 0.0:
                L = max_length - prompt
            else:
                L = cur_len - prompt
            best = run_scores[0] / float(L) ** length_penalty
            worst = min(sc for _, sc, _ in fin)
            unsatisfied = unsatisfied and any(best > (worst if f else -1e9) for _, _, f in fin)
            all_fin = all(f for _, _, f in fin)
            if not (unsatisfied and not (all_fin and early_stopping is True) and not hit.all()):
                break
        out = fin[:num_return_sequences]
        seqs = [list(map(int, q)) for q, _, _ in out]
        return (seqs, [float(sc) for _, sc, _ in out]) if return_scores else seqs

    def hf_rows(self, seqs):
        """seqs padded to one length as generate() pads them: with pad_token_id, or eos when pad
        is 0 or None (its `pad_token_id or eos_token_id[0]`)."""
        fill = self.pad_token_id or (self.eos_ids[0] if self.eos_ids else -1)
        n = max(len(q) for q in seqs)
        return [list(q) + [fill] * (n - len(q)) for q in seqs]
