"""Write random-weight encoder-decoder (machine translation) checkpoints as Hugging Face
directories, without transformers: config.json, model.safetensors (transformers' tensor names and
shapes, as `save_pretrained` of the *ForConditionalGeneration class writes them), a
generation_config.json, and a synthetic tokenizer.json + tokenizer_config.json, so that the
directory is complete for `from_pretrained`, `ragged` and tests/py/ref_seq2seq.py.

make(out_dir, family, seed=0, **spec) -> (config dict, weights dict of float32 arrays)
   family: "marian" | "bart" | "mbart" | "m2m100" | "t5" | "t5v11"
   spec (all optional but the first five; small values for fast tests):
     d_model, layers, heads, ffn, vocab   model width, layers per stack, attention heads,
                                          feed-forward width, vocabulary size
     dec_layers     decoder layers (default: layers; transformers 5.24's generate() fails on a T5
                    with num_decoder_layers != num_layers, its forward works)
     max_pos        max_position_embeddings (BART family; default 64); T5's n_positions
     d_kv           T5 head width (default d_model // heads)
     buckets, max_distance   T5 relative_attention_num_buckets / _max_distance (32, 128)
     activation     override activation_function / feed_forward_proj
     forced_bos     forced_bos_token_id (the target language code): default 0 for "bart",
                    vocab - 3 for "mbart" and "m2m100" (a language-code token), none otherwise;
                    pass None to write none
     public_generation (default True): generation_config.json also carries the special-token
                    processing of the public checkpoints: forced_eos_token_id (marian, bart,
                    mbart) and, for marian, bad_words_ids [[pad]] and renormalize_logits true.
                    False writes only decoder_start / forced_bos / bos / eos / pad.
     stored_positions (marian only, default False): also write model.{encoder,decoder}.
                    embed_positions.weight, the static sinusoid that transformers 4.x checkpoints
                    (and the Hub's opus-mt files) carry; transformers 5.x save_pretrained omits it
                    (MarianMTModel._keys_to_ignore_on_save).
     tied_copies    (default False): also write the tied duplicates older checkpoints carry
                    (encoder/decoder embed_tokens and, when tied, lm_head.weight) as copies of the
                    shared matrix.
     dtype          stored dtype (default np.float32; np.float16 for a half-size file). The
                    returned weights are always the float32 values.
     lang_style     (mbart, m2m100) the language codes' tokens, as the public tokenizers name
                    them: "mbart50" (mbart's default: en_XX, fr_XX, de_DE), "nllb" (m2m100's
                    default: eng_Latn, fra_Latn, deu_Latn, zho_Hant), "m2m100" (M2M100:
                    __en__, __fr__, __de__, __zh__)
     lang_legacy    (default False) the source code after the text, as mBART cc25 and NLLB's
                    legacy_behaviour put it: tokens </s> [code] (else [code] tokens </s>)

SPECS: the public shapes, name -> (family, spec), for benchmarks:
   opus-mt-en-de           Helsinki-NLP/opus-mt-en-de (MarianMTModel), 74 M parameters
   bart-base               facebook/bart-base, 139 M
   mbart-large-50          facebook/mbart-large-50 (MBartForConditionalGeneration), 611 M
   t5-small                google-t5/t5-small, 61 M
   flan-t5-base            google/flan-t5-base (T5 v1.1: gated-gelu, untied lm_head), 248 M
   nllb-200-distilled-600M facebook/nllb-200-distilled-600M (M2M100ForConditionalGeneration), 615 M
   tiny-<family>           small shapes for tests (d_model 32, 2+2 layers, 4 heads, vocab 101)

Tensor names written (L: layer index, Linear weights are [out, in], LayerNorm weight+bias):
  marian/bart/mbart/m2m100 (prefix "model."):
    model.shared.weight [vocab, d]                          (embed_tokens of both stacks, lm_head)
    model.{encoder,decoder}.embed_positions.weight          bart/mbart: learned [max_pos + 2, d];
                                                            marian: only with stored_positions
                                                            [max_pos, d]; m2m100: never (computed)
    model.{encoder,decoder}.layernorm_embedding.{weight,bias}   bart, mbart
    model.{encoder,decoder}.layer_norm.{weight,bias}            mbart, m2m100 (final, pre-LN)
    model.encoder.layers.L.self_attn.{q,k,v,out}_proj.{weight,bias}, .self_attn_layer_norm,
      .fc1.{weight,bias} [ffn, d], .fc2 [d, ffn], .final_layer_norm
    model.decoder.layers.L: the same plus .encoder_attn.{q,k,v,out}_proj.{weight,bias} and
      .encoder_attn_layer_norm
    final_logits_bias [1, vocab]                             marian, bart, mbart (not m2m100)
  t5/t5v11 (no prefix):
    shared.weight [vocab, d]
    {encoder,decoder}.block.L.layer.0.SelfAttention.{q,k,v}.weight [heads*d_kv, d],
      .o.weight [d, heads*d_kv]
    {encoder,decoder}.block.0.layer.0.SelfAttention.relative_attention_bias.weight [buckets, heads]
    {encoder,decoder}.block.L.layer.0.layer_norm.weight
    decoder.block.L.layer.1.EncDecAttention.{q,k,v,o}.weight, decoder.block.L.layer.1.layer_norm
    {encoder.block.L.layer.1, decoder.block.L.layer.2}.DenseReluDense.wi.weight [d_ff, d] (t5) or
      .wi_0/.wi_1 (t5v11), .wo.weight [d, d_ff], and that sub-layer's .layer_norm.weight
    {encoder,decoder}.final_layer_norm.weight
    lm_head.weight [vocab, d]                                 t5v11 only (untied)

Weights are scaled (_S below) so that activations stay O(1)-O(10), attention is far from uniform
(logits of standard deviation ~16) and the feed-forward output projections have zero-mean rows
(otherwise the positive mean of relu/swish/gelu becomes a constant hidden direction that makes one
token win at every step): greedy and beam outputs depend on the source and vary from token to
token (about 70% distinct tokens in 16 greedy steps on the tiny shapes, every family).

The tokenizer is synthetic (as bench/serving/make_gen_model.py's): a byte-level BPE without
merges whose vocabulary gives every id a distinct ASCII string ("Ġ" and the letters and digits
first, so plain text encodes character by character), the family's special tokens at their ids
as added special tokens, and the family's post-processor (eos appended; BART prepends <s>;
mBART-50 and NLLB prepend the source language code)."""
import itertools
import json
import os
import string

import numpy as np
from safetensors.numpy import save_file

FAMILIES = ("marian", "bart", "mbart", "m2m100", "t5", "t5v11")

_TINY = dict(d_model=32, layers=2, heads=4, ffn=64, vocab=101)
SPECS = {
    "opus-mt-en-de": ("marian", dict(d_model=512, layers=6, heads=8, ffn=2048, vocab=58101,
                                     max_pos=512)),
    "bart-base": ("bart", dict(d_model=768, layers=6, heads=12, ffn=3072, vocab=50265,
                               max_pos=1024)),
    "mbart-large-50": ("mbart", dict(d_model=1024, layers=12, heads=16, ffn=4096, vocab=250054,
                                     max_pos=1024, forced_bos=250008)),        # fr_XX
    "t5-small": ("t5", dict(d_model=512, layers=6, heads=8, ffn=2048, vocab=32128, d_kv=64)),
    "flan-t5-base": ("t5v11", dict(d_model=768, layers=12, heads=12, ffn=2048, vocab=32128,
                                   d_kv=64)),
    "nllb-200-distilled-600M": ("m2m100", dict(d_model=1024, layers=12, heads=16, ffn=4096,
                                               vocab=256206, max_pos=1024,
                                               forced_bos=256057)),              # fra_Latn
}
for _f in FAMILIES:
    SPECS["tiny-" + _f] = (_f, dict(_TINY, max_pos=64))


def _n(rng, shape, std):
    return (rng.standard_normal(shape) * std).astype(np.float32)


def _norm(rng, w, name, H, bias=True):
    w[name + ".weight"] = 1 + _n(rng, (H,), 0.1)
    if bias:
        w[name + ".bias"] = _n(rng, (H,), 0.1)


def _centered(rng, shape, std):
    """Rows of zero mean: a feed-forward output projection that maps the (positive) mean of
    relu/swish/gelu activations to nothing, so no constant vector builds up in the residual
    stream (a constant hidden direction makes one token win everywhere)."""
    x = rng.standard_normal(shape)
    x -= x.mean(1, keepdims=True)
    return (x * std * np.sqrt(shape[1] / (shape[1] - 1))).astype(np.float32)


def _linear(rng, w, name, out, inp, std, bias=True, centered=False):
    w[name + ".weight"] = (_centered if centered else _n)(rng, (out, inp), std)
    if bias:
        w[name + ".bias"] = _n(rng, (out,), 0.1)


# ----------------------------------------------------------------------------------------------
# BART family: Marian, BART, mBART, M2M100/NLLB

# Weight scales, each a standard deviation times sqrt(fan-in) (tuned on the tiny shapes so that
# greedy output varies: about 70% distinct tokens in 16, no family stuck on one token):
#   emb  token embedding (times sqrt(d) where scale_embedding; T5's shared: emb / 2, no scaling)
#   qk   q and k projections: attention logits of standard deviation ~qk**2 (T5 folds the
#        missing 1/sqrt(d_kv) into q and k)
#   out  attention output projections;  fc1 / fc2  feed-forward in / out (fc2 rows centred)
#   pos  BART/mBART learned positions relative to the token embedding (mBART: absolute)
#   flb  final_logits_bias;  rel  T5 relative attention bias
_S = dict(emb=1.0, qk=4.0, out=0.5, fc1=4.0, fc2=4.0, pos=3.0, flb=0.2, rel=3.0)
# At the public shapes (6-12 layers, d_model 512-1024) _S's sharp attention (logits of std ~16)
# and feed-forward gain make the network chaotic: transformers' own float32 logits then differ
# from its float64 ones by up to 0.5 (opus-mt-en-de, bart-base; measured 2026-12-02), past the
# top-2 gaps, so no float32 runtime could match generate(). These softer scales keep the float32
# error under 1e-5 there (logit std ~1, top-2 gaps ~0.2); make_spec uses them for public names.
PUBLIC_SCALES = dict(qk=1.0, out=1.0, fc1=2.0, fc2=2.0)


def _bart_attn(rng, w, p, H):
    s = 1.0 / np.sqrt(H)
    _linear(rng, w, p + "q_proj", H, H, _S["qk"] * s)
    _linear(rng, w, p + "k_proj", H, H, _S["qk"] * s)
    _linear(rng, w, p + "v_proj", H, H, s)
    _linear(rng, w, p + "out_proj", H, H, _S["out"] * s)


# The language codes of the tiny checkpoints: (source, target, others), as each public
# tokenizer spells them; the source code is in the template, the target is forced_bos.
LANG_STYLES = {
    "mbart50": ("en_XX", "fr_XX", ("de_DE",)),
    "nllb": ("eng_Latn", "fra_Latn", ("deu_Latn", "zho_Hant")),
    "m2m100": ("__en__", "__fr__", ("__de__", "__zh__")),
}


def _lang_specials(specials, vocab, forced, style):
    """Put style's codes among specials: the source at vocab - 4 (vocab - 5 when forced is
    there), the target at forced, the others on the free ids among vocab - 2, vocab - 1 and
    vocab - 5 (the top ids; tests draw random source ids below vocab - 5). Returns the codes
    in id order and the source code."""
    src_code, tgt_code, others = LANG_STYLES[style]
    src = vocab - 4 if forced != vocab - 4 else vocab - 5
    specials[src] = src_code
    if forced is not None:
        specials[forced] = tgt_code
    free = [i for i in (vocab - 2, vocab - 1, vocab - 5) if i not in specials and i != forced]
    for code, i in zip(others, free):
        specials[i] = code
    codes = set((src_code, tgt_code) + others)
    return [specials[i] for i in sorted(specials) if specials[i] in codes], src_code


def bart_like(rng, family, d_model, layers, heads, ffn, vocab, dec_layers=None, max_pos=64,
              activation=None, forced_bos="default", public_generation=True,
              stored_positions=False, tied_copies=False, lang_style=None, lang_legacy=False):
    H, dl = d_model, dec_layers or layers
    if H % heads:
        raise ValueError("d_model must be a multiple of heads")
    common = dict(vocab_size=vocab, d_model=H, encoder_layers=layers, decoder_layers=dl,
                  encoder_attention_heads=heads, decoder_attention_heads=heads,
                  encoder_ffn_dim=ffn, decoder_ffn_dim=ffn, max_position_embeddings=max_pos,
                  dropout=0.1, attention_dropout=0.0, activation_dropout=0.0,
                  encoder_layerdrop=0.0, decoder_layerdrop=0.0, init_std=0.02,
                  is_encoder_decoder=True, use_cache=True, num_hidden_layers=layers)
    if family == "marian":
        pad = vocab - 1
        cfg = dict(model_type="marian", architectures=["MarianMTModel"], **common,
                   decoder_vocab_size=vocab, activation_function=activation or "swish",
                   scale_embedding=True, normalize_before=False, normalize_embedding=False,
                   static_position_embeddings=True, share_encoder_decoder_embeddings=True,
                   bos_token_id=0, eos_token_id=0, pad_token_id=pad, decoder_start_token_id=pad,
                   forced_eos_token_id=0)
        gen = dict(bos_token_id=0, decoder_start_token_id=pad, eos_token_id=0, pad_token_id=pad)
        if public_generation:
            gen.update(bad_words_ids=[[pad]], forced_eos_token_id=0, renormalize_logits=True)
        specials = {0: "</s>", 1: "<unk>", pad: "<pad>"}
        template = (None, "</s>")
        forced = None
    else:
        arch = {"bart": "BartForConditionalGeneration", "mbart": "MBartForConditionalGeneration",
                "m2m100": "M2M100ForConditionalGeneration"}[family]
        cfg = dict(model_type="m2m_100" if family == "m2m100" else family,
                   architectures=[arch], **common,
                   bos_token_id=0, pad_token_id=1, eos_token_id=2, decoder_start_token_id=2)
        gen = dict(bos_token_id=0, decoder_start_token_id=2, eos_token_id=2, pad_token_id=1)
        specials = {0: "<s>", 1: "<pad>", 2: "</s>", 3: "<unk>"}
        if family == "bart":
            cfg.update(activation_function=activation or "gelu", scale_embedding=False,
                       normalize_before=False, add_final_layer_norm=False,
                       normalize_embedding=True, forced_eos_token_id=2)
            forced = 0 if forced_bos == "default" else forced_bos
            specials[vocab - 1] = "<mask>"
            template = ("<s>", "</s>")
        elif family == "mbart":
            cfg.update(activation_function=activation or "gelu", scale_embedding=True,
                       normalize_before=True, add_final_layer_norm=True, forced_eos_token_id=2)
            forced = vocab - 3 if forced_bos == "default" else forced_bos
            specials[vocab - 1] = "<mask>"
            langs, code = _lang_specials(specials, vocab, forced, lang_style or "mbart50")
        else:
            cfg.update(activation_function=activation or "relu", scale_embedding=True,
                       tokenizer_class="NllbTokenizer")
            forced = vocab - 3 if forced_bos == "default" else forced_bos
            langs, code = _lang_specials(specials, vocab, forced, lang_style or "nllb")
        if family in ("mbart", "m2m100"):
            template = ((), ("</s>", code)) if lang_legacy else (code, "</s>")
        if public_generation and family in ("bart", "mbart"):
            gen["forced_eos_token_id"] = 2
    if forced is not None:
        cfg["forced_bos_token_id"] = forced
        gen["forced_bos_token_id"] = forced

    emb_std = _S["emb"] / np.sqrt(H)
    w = {"model.shared.weight": _n(rng, (vocab, H), emb_std)}
    if family in ("bart", "mbart"):
        pstd = _S["pos"] * (1.0 if family == "mbart" else emb_std)
        for s in ("encoder", "decoder"):
            w[f"model.{s}.embed_positions.weight"] = _n(rng, (max_pos + 2, H), pstd)
            _norm(rng, w, f"model.{s}.layernorm_embedding", H)
    if family in ("mbart", "m2m100"):
        for s in ("encoder", "decoder"):
            _norm(rng, w, f"model.{s}.layer_norm", H)
    if family == "marian" and stored_positions:
        table = marian_sinusoid(max_pos, H)
        w["model.encoder.embed_positions.weight"] = table
        w["model.decoder.embed_positions.weight"] = table.copy()
    for s, nl in (("encoder", layers), ("decoder", dl)):
        for l in range(nl):
            p = f"model.{s}.layers.{l}."
            _bart_attn(rng, w, p + "self_attn.", H)
            _norm(rng, w, p + "self_attn_layer_norm", H)
            if s == "decoder":
                _bart_attn(rng, w, p + "encoder_attn.", H)
                _norm(rng, w, p + "encoder_attn_layer_norm", H)
            _linear(rng, w, p + "fc1", ffn, H, _S["fc1"] / np.sqrt(H))
            _linear(rng, w, p + "fc2", H, ffn, _S["fc2"] / np.sqrt(ffn), centered=True)
            _norm(rng, w, p + "final_layer_norm", H)
    if family != "m2m100":
        w["final_logits_bias"] = _n(rng, (1, vocab), _S["flb"])
    if tied_copies:
        for k in ("model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight",
                  "lm_head.weight"):
            w[k] = w["model.shared.weight"].copy()
    tok = dict(specials=specials, template=template, model_max_length=max_pos)
    if family in ("mbart", "m2m100"):
        m2m = lang_style == "m2m100"
        tok["config"] = dict(additional_special_tokens=langs, tgt_lang=None,
                             src_lang=code[2:-2] if m2m else code)
        if m2m:
            tok["config"]["language_codes"] = "m2m100"
        elif family == "m2m100":
            tok["config"]["legacy_behaviour"] = bool(lang_legacy)
    return cfg, gen, w, tok


def marian_sinusoid(n_pos, dim):
    """MarianSinusoidalPositionalEmbedding.create_weight: sin in the first half of the features,
    cos in the second (not interleaved), computed in float64 and stored as float32."""
    j = np.arange(dim)
    enc = np.arange(n_pos)[:, None] / np.power(10000, 2 * (j // 2) / dim)[None, :]
    out = np.empty((n_pos, dim), np.float32)
    sentinel = dim // 2 if dim % 2 == 0 else dim // 2 + 1
    out[:, :sentinel] = np.sin(enc[:, 0::2])
    out[:, sentinel:] = np.cos(enc[:, 1::2])
    return out


# ----------------------------------------------------------------------------------------------
# T5 (original: relu, tied and rescaled lm_head) and T5 v1.1 / FLAN-T5 (gated-gelu, own lm_head)

def t5(rng, family, d_model, layers, heads, ffn, vocab, dec_layers=None, d_kv=None, buckets=32,
       max_distance=128, max_pos=512, activation=None, forced_bos=None, public_generation=True,
       tied_copies=False):
    H, dl, dk = d_model, dec_layers or layers, d_kv or d_model // heads
    inner = heads * dk
    v11 = family == "t5v11"
    proj = activation or ("gated-gelu" if v11 else "relu")
    cfg = dict(model_type="t5", architectures=["T5ForConditionalGeneration"], vocab_size=vocab,
               d_model=H, d_kv=dk, d_ff=ffn, num_layers=layers, num_decoder_layers=dl,
               num_heads=heads, relative_attention_num_buckets=buckets,
               relative_attention_max_distance=max_distance, dropout_rate=0.1,
               layer_norm_epsilon=1e-6, initializer_factor=1.0, feed_forward_proj=proj,
               is_encoder_decoder=True, use_cache=True, n_positions=max_pos,
               pad_token_id=0, eos_token_id=1, decoder_start_token_id=0,
               tie_word_embeddings=not v11)
    gen = dict(decoder_start_token_id=0, eos_token_id=1, pad_token_id=0)
    if forced_bos not in (None, "default"):
        cfg["forced_bos_token_id"] = gen["forced_bos_token_id"] = forced_bos
    gated = proj.startswith("gated-")
    s = 1.0 / np.sqrt(H)
    qk = _S["qk"] * s / dk ** 0.25
    w = {"shared.weight": _n(rng, (vocab, H), _S["emb"] / 2)}

    def attn(p):
        w[p + "q.weight"] = _n(rng, (inner, H), qk)
        w[p + "k.weight"] = _n(rng, (inner, H), qk)
        w[p + "v.weight"] = _n(rng, (inner, H), s)
        w[p + "o.weight"] = _n(rng, (H, inner), _S["out"] / np.sqrt(inner))

    for st, nl in (("encoder", layers), ("decoder", dl)):
        for l in range(nl):
            p = f"{st}.block.{l}.layer."
            attn(p + "0.SelfAttention.")
            if l == 0:
                w[p + "0.SelfAttention.relative_attention_bias.weight"] = \
                    _n(rng, (buckets, heads), _S["rel"])
            _norm(rng, w, p + "0.layer_norm", H, bias=False)
            f = 1
            if st == "decoder":
                attn(p + "1.EncDecAttention.")
                _norm(rng, w, p + "1.layer_norm", H, bias=False)
                f = 2
            d = f"{p}{f}.DenseReluDense."
            if gated:
                w[d + "wi_0.weight"] = _n(rng, (ffn, H), _S["fc1"] * s)
                w[d + "wi_1.weight"] = _n(rng, (ffn, H), _S["fc1"] * s)
            else:
                w[d + "wi.weight"] = _n(rng, (ffn, H), _S["fc1"] * s)
            w[d + "wo.weight"] = _centered(rng, (H, ffn), _S["fc2"] / np.sqrt(ffn))
            _norm(rng, w, f"{p}{f}.layer_norm", H, bias=False)
        _norm(rng, w, f"{st}.final_layer_norm", H, bias=False)
    if v11:
        w["lm_head.weight"] = _n(rng, (vocab, H), 2.0 * s)
    if tied_copies:
        for k in ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight") + \
                (() if v11 else ("lm_head.weight",)):
            w[k] = w["shared.weight"].copy()
    tok = dict(specials={0: "<pad>", 1: "</s>", 2: "<unk>"}, template=(None, "</s>"),
               model_max_length=max_pos)
    return cfg, gen, w, tok


# ----------------------------------------------------------------------------------------------
# tokenizer

def _token_strings():
    """Distinct strings: "Ġ" (byte-level BPE's space), then [A-Za-z0-9] strings shortest first."""
    yield "\u0120"
    alpha = string.ascii_letters + string.digits
    for k in itertools.count(1):
        for t in itertools.product(alpha, repeat=k):
            yield "".join(t)


def write_tokenizer(out_dir, vocab, specials, template, model_max_length=512, config=None):
    """tokenizer.json (HF tokenizers: BPE(vocab, merges []), ByteLevel pre-tokenizer and
    decoder, special tokens as added tokens, TemplateProcessing post-processor: template is
    (prefix, suffix), each None, a token or a sequence of tokens) and tokenizer_config.json
    (config: more keys for it, e.g. the language codes' additional_special_tokens)."""
    gen = _token_strings()
    strings = [specials[i] if i in specials else next(gen) for i in range(vocab)]
    vocab_map = {s: i for i, s in enumerate(strings)}
    added = [{"id": i, "content": specials[i], "single_word": False, "lstrip": False,
              "rstrip": False, "normalized": False, "special": True} for i in sorted(specials)]
    pre, suf = [[x] if isinstance(x, str) else list(x or ()) for x in template]
    single = [{"SpecialToken": {"id": t, "type_id": 0}} for t in pre]
    single.append({"Sequence": {"id": "A", "type_id": 0}})
    pair = list(single) + [{"Sequence": {"id": "B", "type_id": 0}}]
    for t in suf:
        single.append({"SpecialToken": {"id": t, "type_id": 0}})
        pair.append({"SpecialToken": {"id": t, "type_id": 0}})
    sp = {t: {"id": t, "ids": [vocab_map[t]], "tokens": [t]} for t in pre + suf}
    tok = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                          "use_regex": True},
        "post_processor": {"type": "TemplateProcessing", "single": single, "pair": pair,
                           "special_tokens": sp},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab_map, "merges": []},
    }
    with open(os.path.join(out_dir, "tokenizer.json"), "w") as f:
        json.dump(tok, f)
    names = {v: k for k, v in specials.items()}
    tc = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": model_max_length,
          "clean_up_tokenization_spaces": False}
    for key, s in (("bos_token", "<s>"), ("eos_token", "</s>"), ("pad_token", "<pad>"),
                   ("unk_token", "<unk>"), ("mask_token", "<mask>")):
        if s in names:
            tc[key] = s
    tc.update(config or {})
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump(tc, f, indent=1)


# ----------------------------------------------------------------------------------------------

def make(out_dir, family, seed=0, dtype=np.float32, scales=None, **spec):
    """Write the checkpoint directory; returns (config dict, weights dict of float32 arrays as
    stored under their checkpoint names). scales: overrides of _S for this checkpoint (e.g.
    PUBLIC_SCALES, for deep public shapes where _S's sharp attention makes the network amplify
    float32 rounding past the logit gaps)."""
    global _S
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {FAMILIES}")
    rng = np.random.default_rng(seed)
    build = t5 if family.startswith("t5") else bart_like
    saved = _S
    _S = dict(_S, **(scales or {}))
    try:
        cfg, gen, w, tok = build(rng, family, **spec)
    finally:
        _S = saved
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    with open(os.path.join(out_dir, "generation_config.json"), "w") as f:
        json.dump(dict(gen, _from_model_config=False), f, indent=1)
    stored = {k: np.ascontiguousarray(v.astype(dtype)) for k, v in w.items()}
    save_file(stored, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    write_tokenizer(out_dir, cfg["vocab_size"], tok["specials"], tok["template"],
                    tok["model_max_length"], tok.get("config"))
    return cfg, w


def make_spec(name, out_dir, seed=0, **overrides):
    """make() with SPECS[name]'s family and shape (overrides update the spec; public names get
    PUBLIC_SCALES, tiny-* names _S)."""
    family, spec = SPECS[name]
    scales = None if name.startswith("tiny-") else PUBLIC_SCALES
    return make(out_dir, family, seed=seed, scales=scales, **dict(spec, **overrides))


if __name__ == "__main__":
    import sys
    if len(sys.argv) != 3 or sys.argv[1] not in SPECS:
        sys.exit("usage: make_seq2seq.py {%s} OUT_DIR" % "|".join(SPECS))
    make_spec(sys.argv[1], sys.argv[2])
    print(sys.argv[2])
