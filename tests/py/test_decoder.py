"""Decoder-only models through the step API (rg_model_step, issue 19) against the float64 NumPy
reference of ref_decoder.py (written from transformers' GPT-2 / Llama / Qwen2 code), on
random-weight checkpoints written as Hugging Face directories by make_decoder.py.

Metric (fp32 CPU): per step, max |got - ref| / max |ref| over the step's logits rows <= 1e-5; a
NaN gives inf and fails. Every position of a prefill, prompts fed in chunks over several steps,
decode steps, shuffled non-contiguous block tables, mixed batches (and the same sequences alone),
copy-on-write block forks, hostile step batches and refused configs."""
import ctypes
import json
import os

import numpy as np
import pytest

import make_decoder
import ref_decoder
from ref_sample import ref_sample_chain
from ragged_ctypes import (RG_MODEL_DECODER, Model, RaggedError, RowSampling, StepOut,
                           row_sampling)

TOL = 1e-5
BS = 4  # positions per KV block in most tests

# name -> (family, spec). Tiny shapes and two at public widths (GPT-2 small's n_embd / heads,
# SmolLM2-135M's hidden / heads / KV heads / intermediate), with 2 layers and a reduced vocab.
MODELS = {
    "gpt2_tiny": ("gpt2", dict(H=32, heads=4, layers=2, vocab=97, n_pos=128)),
    # GPT2LMHeadModel-style names without "transformer.", scale_attn_by_inverse_layer_idx
    "gpt2_inv_idx": ("gpt2", dict(H=48, heads=3, layers=3, vocab=61, n_pos=96, prefix="",
                                  scale_attn_by_inverse_layer_idx=True)),
    "gpt2_small_width": ("gpt2", dict(H=768, heads=12, layers=2, vocab=512, n_pos=256)),
    # GQA (4 query heads on 2 KV heads), untied LM head
    "llama_gqa_untied": ("llama", dict(H=64, heads=4, kv_heads=2, layers=2, inter=96,
                                       vocab=101)),
    # Llama 3: one KV head, rope_theta 500000, llama3 rope_scaling whose bands (low, medium,
    # high frequency) all occur at head_dim 16 with original_max_position_embeddings 64; tied
    "llama3_rope_tied": ("llama", dict(H=64, heads=4, kv_heads=1, layers=2, inter=80, vocab=89,
                                       tie=True, rope_theta=500000.0,
                                       rope_scaling=dict(rope_type="llama3", factor=8.0,
                                                         low_freq_factor=1.0,
                                                         high_freq_factor=4.0,
                                                         original_max_position_embeddings=64))),
    # head_dim given and != hidden / heads (q width 64 on hidden 48)
    "llama_head_dim": ("llama", dict(H=48, heads=4, kv_heads=2, layers=2, inter=64, vocab=53,
                                     head_dim=16)),
    "qwen2_bias_tied": ("llama", dict(H=64, heads=4, kv_heads=2, layers=2, inter=96, vocab=83,
                                      model_type="qwen2", tie=True, rope_theta=1000000.0)),
    # tie_word_embeddings true but a distinct lm_head.weight in the file (issue 27 item 7): the
    # file's head serves, as transformers 5 loads it
    "llama_tied_stored_head": ("llama", dict(H=32, heads=4, kv_heads=2, layers=2, inter=48,
                                             vocab=71, tie=True, stored_head=True)),
    # Qwen3: per-head q/k RMSNorm, head_dim 24 != hidden / heads, tied, rope_theta 1e6
    "qwen3_qk_norm": ("llama", dict(H=64, heads=4, kv_heads=2, layers=2, inter=96, vocab=79,
                                    model_type="qwen3", tie=True, head_dim=24,
                                    rope_theta=1000000.0)),
    # Phi-3-mini-4k-like: fused qkv_proj / gate_up_proj, no rope_scaling, a sliding window
    # shorter than max_position_embeddings (the served context)
    "phi3_4k": ("llama", dict(H=64, heads=4, kv_heads=4, layers=2, inter=96, vocab=73,
                              model_type="phi3", max_pos=256, sliding_window=200,
                              original_max_position_embeddings=256)),
    # Phi-3-128k-like LongRoPE: short factors (every position here < original_max 64) and the
    # attention factor sqrt(1 + ln(512 / 64) / ln 64); GQA
    "phi3_longrope": ("llama", dict(H=64, heads=4, kv_heads=2, layers=2, inter=96, vocab=73,
                                    model_type="phi3", max_pos=512,
                                    original_max_position_embeddings=64,
                                    rope_scaling=make_decoder.longrope(16))),
    "smollm2_width": ("llama", dict(H=576, heads=9, kv_heads=3, layers=2, inter=1536,
                                    vocab=640, tie=True, rope_theta=100000.0, max_pos=2048)),
}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("decoders")
    out = {}
    for i, (name, (fam, spec)) in enumerate(MODELS.items()):
        d = str(root / name)
        cfg, w = make_decoder.make(d, fam, seed=100 + i, **spec)
        out[name] = (d, cfg, w)
    return out


def _rel_err(got, ref):
    got = np.asarray(got, np.float64)
    err = np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30)
    return err if np.isfinite(err) else np.inf


def assert_close(got, ref, what):
    assert got.shape == ref.shape, (what, got.shape, ref.shape)
    err = _rel_err(got, ref)
    assert err <= TOL, f"{what}: rel err {err:.3g} > {TOL:g}"


class Seq:
    """One sequence's host-side KV bookkeeping, as a scheduler keeps it: its ids so far and
    its block table (blocks drawn from a shuffled free list)."""

    def __init__(self, ids, free):
        self.ids = list(ids)
        self.cached = 0
        self.blocks = []
        self.free = free

    def chunk(self, n):
        """The next n ids as a step part: (tokens, positions, ctx_len, slots)."""
        toks = self.ids[self.cached:self.cached + n]
        pos = list(range(self.cached, self.cached + n))
        ctx = self.cached + n
        while len(self.blocks) * BS < ctx:
            self.blocks.append(self.free.pop())
        slots = [self.blocks[p // BS] * BS + p % BS for p in pos]
        self.cached = ctx
        return toks, pos, ctx, slots


def run_step(m, parts, want_all=True):
    """parts: list of (Seq, n_new). Returns the logits of every new row (packed order)."""
    toks, pos, cu, ctx, slots, tables = [], [], [0], [], [], []
    for s, n in parts:
        t, p, c, sl = s.chunk(n)
        toks += t
        pos += p
        cu.append(cu[-1] + n)
        ctx.append(c)
        slots += sl
        tables.append(list(s.blocks))
    width = max(len(t) for t in tables) + 2  # stride larger than any row needs
    bt = np.full((len(parts), width), -7, np.int32)  # entries past a table are never read
    for i, t in enumerate(tables):
        bt[i, :len(t)] = t
    rows = np.arange(len(toks)) if want_all else np.asarray([c - 1 for c in cu[1:]])
    return m.step(toks, pos, cu, ctx, bt, slots, rows)


def shuffled_free(n_blocks, seed):
    free = list(range(n_blocks))
    np.random.default_rng(seed).shuffle(free)
    return free


@pytest.fixture(scope="module")
def loaded(models):
    cache = {}

    def get(name):
        if name not in cache:
            d = models[name][0]
            m = Model(d, max_batch_tokens=512)
            m.kv_init(BS, 96)
            cache[name] = m
        return cache[name], models[name][1], models[name][2]
    yield get
    for m in cache.values():
        m.close()


@pytest.mark.parametrize("name", list(MODELS))
def test_prefill_every_position(loaded, name):
    m, cfg, w = loaded(name)
    ids = np.random.default_rng(1).integers(0, cfg["vocab_size"], 37)
    ref = ref_decoder.forward(cfg, w, ids)
    s = Seq(ids, shuffled_free(96, 2))
    got = run_step(m, [(s, len(ids))])
    assert_close(got, ref, f"{name} prefill of 37")
    assert list(got.argmax(1)) == list(ref.argmax(1)), f"{name}: greedy ids"
    # non-contiguous blocks were used
    assert s.blocks != sorted(s.blocks)


@pytest.mark.parametrize("name", list(MODELS))
def test_chunked_prefill_then_decode(loaded, name):
    """The same prompt in chunks of 5, 1, 7 and 3 (crossing block boundaries mid-chunk), then
    8 decode steps of one token: every row equals the whole-sequence reference."""
    m, cfg, w = loaded(name)
    ids = np.random.default_rng(3).integers(0, cfg["vocab_size"], 24)
    ref = ref_decoder.forward(cfg, w, ids)
    s = Seq(ids, shuffled_free(96, 4))
    at = 0
    for n in (5, 1, 7, 3) + (1,) * 8:
        got = run_step(m, [(s, n)])
        assert_close(got, ref[at:at + n], f"{name} rows {at}..{at + n - 1}")
        at += n
    assert at == len(ids)


@pytest.mark.parametrize("name", ["gpt2_tiny", "llama3_rope_tied", "qwen2_bias_tied",
                                  "smollm2_width"])
def test_mixed_batch_is_batch_invariant(loaded, name):
    """Three sequences in different states in one step (a decode token, a prefill chunk of a
    cached prompt, a fresh prompt) give the reference's rows and the same rows as each run alone
    in its own step."""
    m, cfg, w = loaded(name)
    rng = np.random.default_rng(5)
    seqs = [rng.integers(0, cfg["vocab_size"], n) for n in (11, 17, 9)]
    refs = [ref_decoder.forward(cfg, w, ids) for ids in seqs]
    free = shuffled_free(96, 6)
    a, b, c = (Seq(ids, free) for ids in seqs)
    run_step(m, [(a, 10)])           # a: 10 cached, 1 to decode
    run_step(m, [(b, 6)])            # b: 6 cached, a chunk of 11 to go
    got = run_step(m, [(a, 1), (b, 11), (c, 9)])
    assert_close(got[0:1], refs[0][10:11], f"{name} mixed: decode row")
    assert_close(got[1:12], refs[1][6:17], f"{name} mixed: chunk rows")
    assert_close(got[12:21], refs[2][0:9], f"{name} mixed: prefill rows")
    # the same three alone, in fresh blocks
    free2 = shuffled_free(96, 7)
    a2, b2, c2 = (Seq(ids, free2) for ids in seqs)
    run_step(m, [(a2, 10)])
    run_step(m, [(b2, 6)])
    alone = np.concatenate([run_step(m, [(a2, 1)]), run_step(m, [(b2, 11)]),
                            run_step(m, [(c2, 9)])])
    assert _rel_err(got, alone.astype(np.float64)) <= TOL


def test_logits_only_for_wanted_rows(loaded):
    """logits_rows picks rows in any order, repeats allowed; n_logits 0 runs the step alone."""
    m, cfg, w = loaded("llama_gqa_untied")
    ids = np.random.default_rng(8).integers(0, cfg["vocab_size"], 9)
    ref = ref_decoder.forward(cfg, w, ids)
    s = Seq(ids, shuffled_free(96, 9))
    t, p, c, sl = s.chunk(6)
    bt = np.asarray(s.blocks, np.int32)[None]
    got = m.step(t, p, [0, 6], [c], bt, sl, [5, 0, 5])
    assert_close(got, ref[[5, 0, 5]], "rows 5, 0, 5")
    t, p, c, sl = s.chunk(2)
    bt = np.asarray(s.blocks, np.int32)[None]
    assert m.step(t, p, [0, 2], [c], bt, sl, []).shape == (0, cfg["vocab_size"])
    t, p, c, sl = s.chunk(1)  # the cache was written by the step without logits
    bt = np.asarray(s.blocks, np.int32)[None]
    assert_close(m.step(t, p, [0, 1], [c], bt, sl, [0]), ref[8:9], "after a logits-free step")


def test_step_argmax_is_the_greedy_choice_of_the_reference(loaded):
    """rg_model_step's greedy path: each wanted row's id is the argmax of the float64 reference's logits
    and its log-prob that row's log-softmax there; a mixed batch of a prefill and decode rows."""
    m, cfg, w = loaded("smollm2_width")
    rng = np.random.default_rng(12)
    a = rng.integers(0, cfg["vocab_size"], 7)
    b = rng.integers(0, cfg["vocab_size"], 3)
    ref_a, ref_b = ref_decoder.forward(cfg, w, a), ref_decoder.forward(cfg, w, b)
    free = shuffled_free(96, 12)
    sa, sb = Seq(a, free), Seq(b, free)
    ta, pa, ca, la = sa.chunk(7)
    tb, pb, cb, lb = sb.chunk(3)
    width = max(len(sa.blocks), len(sb.blocks))
    bt = np.zeros((2, width), np.int32)
    bt[0, :len(sa.blocks)] = sa.blocks
    bt[1, :len(sb.blocks)] = sb.blocks
    ids, lps = m.step_argmax(ta + tb, pa + pb, [0, 7, 10], [ca, cb], bt, la + lb, [6, 9, 2])
    refs = np.stack([ref_a[6], ref_b[2], ref_a[2]])
    assert ids.tolist() == [int(np.argmax(r)) for r in refs]
    lsm = refs - refs.max(axis=1, keepdims=True)
    lsm = lsm - np.log(np.exp(lsm).sum(axis=1, keepdims=True))
    want = lsm[np.arange(3), ids]
    assert np.all(np.abs(lps - want) <= 1e-4 * np.maximum(1.0, np.abs(want))), (lps, want)


def test_copy_on_write_fork(loaded):
    """Two beams share a prompt's blocks; the partly filled last block is copied
    (rg_model_kv_copy_blocks) before they diverge; each continues as its own sequence."""
    m, cfg, w = loaded("gpt2_inv_idx")
    rng = np.random.default_rng(10)
    prompt = list(rng.integers(0, cfg["vocab_size"], 10))  # 2.5 blocks of 4
    cont = [list(rng.integers(0, cfg["vocab_size"], 3)) for _ in range(2)]
    refs = [ref_decoder.forward(cfg, w, prompt + c) for c in cont]
    free = shuffled_free(96, 11)
    a = Seq(prompt + cont[0], free)
    run_step(m, [(a, 10)])
    b = Seq(prompt + cont[1], free)
    b.cached = 10
    b.blocks = a.blocks[:2] + [free.pop()]  # share two full blocks, fork the partial one
    m.kv_copy_blocks([a.blocks[2]], [b.blocks[2]])
    for k in range(3):
        got = run_step(m, [(a, 1), (b, 1)])
        assert_close(got[0:1], refs[0][10 + k:11 + k], f"beam 0 step {k}")
        assert_close(got[1:2], refs[1][10 + k:11 + k], f"beam 1 step {k}")
    with pytest.raises(RaggedError) as e:
        m.kv_copy_blocks([0], [96])
    assert e.value.status == "RG_ERR_INVALID_INPUT"


def test_sharded_gpt2_checkpoint(tmp_path):
    """A GPT-2 directory with model.safetensors.index.json and two shards loads the same."""
    from safetensors.numpy import save_file
    d = str(tmp_path / "sharded")
    cfg, w = make_decoder.make(d, "gpt2", seed=12, H=32, heads=2, layers=2, vocab=40, n_pos=32)
    from safetensors.numpy import load_file
    t = load_file(os.path.join(d, "model.safetensors"))
    os.remove(os.path.join(d, "model.safetensors"))
    names = sorted(t)
    shards = {"model-00001-of-00002.safetensors": names[::2],
              "model-00002-of-00002.safetensors": names[1::2]}
    wmap = {}
    for f, ns in shards.items():
        save_file({n: t[n] for n in ns}, os.path.join(d, f))
        wmap.update({n: f for n in ns})
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": wmap}, f)
    m = Model(d, max_batch_tokens=64)
    m.kv_init(BS, 16)
    ids = np.random.default_rng(13).integers(0, 40, 12)
    got = run_step(m, [(Seq(ids, shuffled_free(16, 14)), 12)])
    assert_close(got, ref_decoder.forward(cfg, w, ids), "sharded")
    m.close()


def test_info_and_kv_info(loaded):
    m, cfg, _ = loaded("smollm2_width")
    i = m.info()
    assert i.kind == RG_MODEL_DECODER
    assert i.model_type == b"llama"
    assert (i.vocab_size, i.hidden_size, i.num_attention_heads, i.num_key_value_heads,
            i.head_dim, i.num_hidden_layers, i.intermediate_size) == (640, 576, 9, 3, 64, 2, 1536)
    assert i.max_position_embeddings == 2048 and i.tie_word_embeddings
    assert (i.bos_token_id, i.eos_token_id) == (1, 2)
    assert i.output_dim == 640
    k = m.kv_info()
    assert (k.block_size, k.n_blocks, k.num_layers, k.num_kv_heads, k.head_dim) == (BS, 96, 2, 3,
                                                                                    64)
    assert k.bytes_per_token == 2 * 2 * 3 * 64 * 4
    assert k.bytes == k.bytes_per_token * BS * 96
    g, _, _ = loaded("gpt2_tiny")
    assert g.info().num_key_value_heads == 4 and g.info().tie_word_embeddings


def test_tied_config_with_stored_head_uses_the_file_head(loaded, tmp_path):
    """tie_word_embeddings true and a distinct lm_head.weight (issue 27 item 7): ragged runs the
    file's head (the reference's rows, which use it), reports the head as untied, and its greedy
    ids are the file head's -- which here differ from the embedding head's from the first token.
    A stored head equal to the embedding is shared (reported tied)."""
    m, cfg, w = loaded("llama_tied_stored_head")
    assert not m.info().tie_word_embeddings
    ids = np.random.default_rng(15).integers(0, cfg["vocab_size"], 13)
    ref = ref_decoder.forward(cfg, w, ids)
    got = run_step(m, [(Seq(ids, shuffled_free(96, 16)), len(ids))])
    assert_close(got, ref, "tied config, stored head")
    assert list(got.argmax(1)) == list(ref.argmax(1))
    emb_head = dict(w)
    del emb_head["lm_head.weight"]
    ref_emb = ref_decoder.forward(cfg, emb_head, ids)
    assert ref_emb.argmax(1)[0] != ref.argmax(1)[0]
    # the same checkpoint with lm_head.weight = embed_tokens.weight: one table, tied
    d = str(tmp_path / "same")
    c2, w2 = make_decoder.make(d, "llama", seed=3, H=32, heads=4, kv_heads=2, layers=1, inter=48,
                               vocab=71, tie=True, stored_head=True)
    from safetensors.numpy import save_file
    w2["lm_head.weight"] = w2["model.embed_tokens.weight"].copy()
    save_file(w2, os.path.join(d, "model.safetensors"))
    m2 = Model(d, max_batch_tokens=64)
    try:
        assert m2.info().tie_word_embeddings
        m2.kv_init(BS, 16)
        got = run_step(m2, [(Seq(ids, shuffled_free(16, 17)), len(ids))])
        assert_close(got, ref_decoder.forward(c2, w2, ids), "stored head equal to the table")
    finally:
        m2.close()


def test_kv_sizing(models):
    d = models["gpt2_tiny"][0]
    m = Model(d, max_batch_tokens=64)
    with pytest.raises(RaggedError) as e:  # no cache yet
        m.step([1], [0], [0, 1], [1], [[0]], [0], [0])
    assert e.value.status == "RG_ERR_INVALID_INPUT" and "kv_init" in e.value.message
    per_tok = 2 * 2 * 32 * 4
    m.kv_init_bytes(16, per_tok * 16 * 10 + 5)
    assert m.kv_info().n_blocks == 10
    m.kv_init(8, 0)  # default budget: at least one n_positions sequence
    k = m.kv_info()
    assert k.block_size == 8 and k.n_blocks * 8 >= 128 and k.bytes <= (256 << 20) + k.bytes_per_block
    for bs, nb in ((0, 4), (5000, 4), (4, -1)):
        with pytest.raises(RaggedError) as e:
            m.kv_init(bs, nb)
        assert e.value.status == "RG_ERR_INVALID_INPUT"
    m.close()


def test_hostile_steps(models):
    """Every malformed field is RG_ERR_INVALID_INPUT (or TOO_LONG) naming it, nothing runs, and
    the model keeps working."""
    d, cfg, w = models["llama_gqa_untied"]
    m = Model(d, max_batch_tokens=16)
    m.kv_init(BS, 8)
    V = cfg["vocab_size"]
    # a valid step: 6 tokens in blocks [3, 5]
    good = dict(tokens=[1, 2, 3, 4, 5, 6], positions=list(range(6)), cu_seqlens_q=[0, 6],
                context_lens=[6], block_tables=[[3, 5]], slot_mapping=[12, 13, 14, 15, 20, 21],
                logits_rows=[5])
    bad = [
        ("tokens[3]", dict(tokens=[1, 2, 3, V, 5, 6])),
        ("tokens[3]", dict(tokens=[1, 2, 3, -1, 5, 6])),
        ("positions[5]", dict(positions=[0, 1, 2, 3, 4, 4])),
        ("cu_seqlens_q[0]", dict(cu_seqlens_q=[1, 6])),
        ("cu_seqlens_q[n_seq]", dict(cu_seqlens_q=[0, 5])),
        ("context_lens[0]", dict(context_lens=[5])),
        ("block_tables[0][1]", dict(block_tables=[[3, 8]])),
        ("block_tables[0][0]", dict(block_tables=[[-1, 5]])),
        ("slot_mapping[5]", dict(slot_mapping=[12, 13, 14, 15, 20, 22])),
        ("slot_mapping[0]", dict(slot_mapping=[0, 13, 14, 15, 20, 21])),  # another block
        ("logits_rows[0]", dict(logits_rows=[6])),
        ("n_seq", dict(n_seq=0)),
        ("n_tokens", dict(n_tokens=0)),
        ("max_position_embeddings", dict(context_lens=[10000])),
    ]
    for field, change in bad:
        args = dict(good, **change)
        with pytest.raises(RaggedError) as e:
            m.step(**args)
        assert e.value.status == "RG_ERR_INVALID_INPUT", (field, e.value)
        assert field in e.value.message, (field, e.value.message)
    # two sequences whose tables alias one block and write the same slot
    with pytest.raises(RaggedError) as e:
        m.step([1, 2], [0, 0], [0, 1, 2], [1, 1], [[3], [3]], [12, 12], [0, 1])
    assert e.value.status == "RG_ERR_INVALID_INPUT" and "two new tokens" in e.value.message
    # a table too short for its context
    with pytest.raises(RaggedError) as e:
        m.step(**dict(good, block_tables=[[3]]))
    assert e.value.status == "RG_ERR_INVALID_INPUT" and "max_blocks_per_seq" in e.value.message
    with pytest.raises(RaggedError) as e:
        m.step(list(range(17)), list(range(17)), [0, 17], [17], [list(range(5))],
               list(range(17)), [0])
    assert e.value.status == "RG_ERR_TOO_LONG"
    # still serves, and the failed steps wrote nothing the good one reads
    got = m.step(**good)
    assert_close(got, ref_decoder.forward(cfg, w, good["tokens"])[5:6], "after hostile steps")
    m.close()


def test_kind_mismatch(models, minilm_dir):
    d = models["gpt2_tiny"][0]
    m = Model(d, max_batch_tokens=64)
    with pytest.raises(RaggedError) as e:
        m.embed_ids([[1, 2, 3]], 32)
    assert e.value.status == "RG_ERR_UNSUPPORTED" and "decoder" in e.value.message
    with pytest.raises(RaggedError) as e:
        m.tokenize("hello")
    assert e.value.status == "RG_ERR_UNSUPPORTED" and "tokenizer" in e.value.message
    m.close()
    enc = Model(minilm_dir, max_batch_tokens=64)
    assert enc.info().kind == 0 and enc.info().num_key_value_heads == 12
    with pytest.raises(RaggedError) as e:
        enc.step([1], [0], [0, 1], [1], [[0]], [0], [0])
    assert e.value.status == "RG_ERR_UNSUPPORTED" and "encoder" in e.value.message
    with pytest.raises(RaggedError) as e:
        enc.kv_init(16, 4)
    assert e.value.status == "RG_ERR_UNSUPPORTED"
    enc.close()


def _edit_config(src_dir, dst, **changes):
    import shutil
    shutil.copytree(src_dir, dst)
    with open(os.path.join(dst, "config.json")) as f:
        cfg = json.load(f)
    cfg.update(changes)
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(cfg, f)
    return str(dst)


@pytest.mark.parametrize("base,changes,words", [
    ("qwen2_bias_tied", dict(use_sliding_window=True, sliding_window=64),
     ["use_sliding_window"]),
    ("llama_gqa_untied", dict(num_local_experts=8), ["num_local_experts", "experts"]),
    ("qwen2_bias_tied", dict(num_experts=4), ["num_experts"]),
    ("llama_gqa_untied", dict(rope_scaling=dict(rope_type="yarn", factor=4.0)),
     ["rope_scaling", "yarn"]),
    ("llama_gqa_untied", dict(rope_scaling=dict(type="linear", factor=2.0)), ["linear"]),
    ("llama_gqa_untied", dict(hidden_act="gelu"), ["hidden_act", "gelu"]),
    ("gpt2_tiny", dict(activation_function="swish"), ["activation_function", "swish"]),
    ("llama_gqa_untied", dict(mlp_bias=True), ["mlp_bias"]),
    ("qwen3_qk_norm", dict(use_sliding_window=True, sliding_window=64), ["use_sliding_window"]),
    ("phi3_4k", dict(partial_rotary_factor=0.75), ["partial_rotary_factor"]),
    ("phi3_4k", dict(rope_scaling=dict(type="yarn", factor=4.0)), ["rope_scaling", "yarn"]),
])
def test_refused_configs(models, tmp_path, base, changes, words):
    d = _edit_config(models[base][0], tmp_path / "m", **changes)
    with pytest.raises(RaggedError) as e:
        Model(d)
    assert e.value.status == "RG_ERR_UNSUPPORTED", e.value
    for wd in words:
        assert wd in e.value.message, (wd, e.value.message)


def test_phi3_window_limits_the_context(loaded):
    """Phi-3's sliding_window (200 < max_position_embeddings 256) is not computed: the served
    context is the window, within which it masks nothing."""
    m, cfg, _ = loaded("phi3_4k")
    assert m.info().max_seq_len == 200 and m.info().max_position_embeddings == 200


def test_mistral_window_limits_the_context(models, tmp_path):
    """Mistral's sliding_window (issue 31: e5-mistral's 4096) is read as Phi-3's: a window
    below max_position_embeddings becomes the served context, within which it masks nothing,
    and the logits stay Llama's."""
    src, cfg, w = models["llama_gqa_untied"]
    d = _edit_config(src, tmp_path / "mistral_w", model_type="mistral", sliding_window=24)
    m = Model(d, max_batch_tokens=64)
    assert m.info().max_position_embeddings == 24 and m.info().max_seq_len == 24
    m.kv_init(BS, 16)
    ids = np.random.default_rng(16).integers(0, cfg["vocab_size"], 24)
    got = run_step(m, [(Seq(ids, shuffled_free(16, 16)), 24)])
    assert_close(got, ref_decoder.forward(cfg, w, ids), "mistral window")
    m.close()


def test_mistral_without_window_runs(models, tmp_path):
    """model_type mistral with sliding_window null is Llama."""
    src, cfg, w = models["llama_gqa_untied"]
    d = _edit_config(src, tmp_path / "mistral", model_type="mistral", sliding_window=None)
    m = Model(d, max_batch_tokens=64)
    m.kv_init(BS, 16)
    ids = np.random.default_rng(15).integers(0, cfg["vocab_size"], 7)
    got = run_step(m, [(Seq(ids, shuffled_free(16, 16)), 7)])
    assert_close(got, ref_decoder.forward(cfg, w, ids), "mistral")
    m.close()


def test_wrong_shapes_named(models, tmp_path):
    """A weight whose shape disagrees with config.json is RG_ERR_FORMAT naming the tensor."""
    src = models["gpt2_tiny"][0]
    d = _edit_config(src, tmp_path / "m", n_inner=100)
    with pytest.raises(RaggedError) as e:
        Model(d)
    assert e.value.status == "RG_ERR_FORMAT" and "mlp.c_fc.weight" in e.value.message


def test_llama31_config_keys(models, tmp_path):
    """Llama 3.1's eos_token_id list (the first is the EOS id), a null bos_token_id, null
    head_dim and sliding_window, and keys transformers ignores (pretraining_tp,
    rope_interleaved) load."""
    src, cfg, w = models["llama3_rope_tied"]
    d = _edit_config(src, tmp_path / "l31", eos_token_id=[7, 8, 9], bos_token_id=None,
                     head_dim=None, sliding_window=None, pretraining_tp=1, rope_interleaved=False)
    m = Model(d, max_batch_tokens=32)
    assert (m.info().eos_token_id, m.info().bos_token_id) == (7, -1)
    m.kv_init(BS, 8)
    ids = np.random.default_rng(17).integers(0, cfg["vocab_size"], 6)
    got = run_step(m, [(Seq(ids, shuffled_free(8, 18)), 6)])
    assert_close(got, ref_decoder.forward(cfg, w, ids), "llama 3.1 keys")
    m.close()
    d2 = _edit_config(src, tmp_path / "bad_eos", eos_token_id="2")
    with pytest.raises(RaggedError) as e:
        Model(d2)
    assert e.value.status == "RG_ERR_FORMAT" and "eos_token_id" in e.value.message


def test_f16_checkpoint_on_cpu(tmp_path):
    """A checkpoint stored in float16 loads exactly (widened to fp32 on the CPU): parity with
    the reference run on the same float16 values."""
    from safetensors.numpy import load_file, save_file
    d = str(tmp_path / "f16")
    cfg, _ = make_decoder.make(d, "llama", seed=19, H=32, heads=4, kv_heads=2, layers=2, inter=48,
                               vocab=57, model_type="qwen2", tie=True)
    path = os.path.join(d, "model.safetensors")
    w16 = {k: v.astype(np.float16) for k, v in load_file(path).items()}
    save_file(w16, path)
    m = Model(d, max_batch_tokens=32)
    m.kv_init(BS, 8)
    ids = np.random.default_rng(20).integers(0, 57, 9)
    got = run_step(m, [(Seq(ids, shuffled_free(8, 21)), 9)])
    assert_close(got, ref_decoder.forward(cfg, {k: v.astype(np.float64) for k, v in w16.items()},
                                          ids), "f16 checkpoint")
    m.close()


def test_step_sample_matches_a_numpy_chain(loaded):
    """rg_model_step's sampler path (the CPU twin of the device sampler, through the step):
    per-row greedy, temperature + top-k, top-p + min-p with penalties and bias, in one mixed
    batch, each row's id, log-prob and top-5 equal to a NumPy chain applied to rg_model_step's
    logits with the same u; a sequence alone samples what it samples inside the batch; greedy
    rows equal the greedy (argmax) path; the sampler with the logits copied out gives the same
    and rg_model_step's logits; bad parameters are refused by name."""
    m, cfg, w = loaded("llama_gqa_untied")
    V = cfg["vocab_size"]
    rng = np.random.default_rng(21)
    a, b = rng.integers(0, V, 7), rng.integers(0, V, 3)
    free = shuffled_free(96, 21)
    sa, sb = Seq(a, free), Seq(b, free)
    ta, pa, ca, la = sa.chunk(7)
    tb, pb, cb, lb = sb.chunk(3)
    width = max(len(sa.blocks), len(sb.blocks))
    bt = np.zeros((2, width), np.int32)
    bt[0, :len(sa.blocks)] = sa.blocks
    bt[1, :len(sb.blocks)] = sb.blocks
    args = (ta + tb, pa + pb, [0, 7, 10], [ca, cb], bt, la + lb, [6, 9, 2])
    logits = m.step(*args)
    pen = ([int(a[0]), int(a[3]), 5], [0, 2, 1], [1, 1, 0])
    bias = ([7, int(np.argmax(logits[2]))], [3.0, -1.5])
    for u in (0.03, 0.41, 0.77, 0.999):
        kws = [dict(temperature=0.0, penalty=pen, bias=bias, repetition_penalty=1.3),
               dict(temperature=0.7, top_k=5, u=u),
               dict(temperature=1.3, top_p=0.8, min_p=0.05, u=u, penalty=pen, bias=bias,
                    repetition_penalty=1.2, presence_penalty=0.4, frequency_penalty=0.3)]
        ids, lps, tid, tlp = m.step_sample([row_sampling(**k) for k in kws], *args, top_n=5)
        for r, k in enumerate(kws):
            rid, rlp, rt, rtl = ref_sample_chain(logits[r], top_n=5, **k)
            assert ids[r] == rid, (u, r, ids[r], rid)
            assert abs(lps[r] - rlp) <= 1e-5 * max(1.0, abs(rlp)), (u, r, lps[r], rlp)
            assert tid[r, :len(rt)].tolist() == rt.tolist(), (u, r, tid[r], rt)
            assert np.all(tid[r, len(rt):] == -1) and np.all(np.isneginf(tlp[r, len(rt):]))
            assert np.all(np.abs(tlp[r, :len(rt)] - rtl) <= 1e-5 * np.maximum(1, np.abs(rtl)))
    # the sampler with the logits out (the serving engine's steps with beam rows): the same
    # ids, log-probs and alternatives, and the logits the logits-only path gives
    got = m.step_sample_logits([row_sampling(**k) for k in kws], *args, top_n=5)
    want = m.step_sample([row_sampling(**k) for k in kws], *args, top_n=5)
    for g, w_ in zip(got[:4], want):
        assert np.array_equal(g, w_)
    assert np.array_equal(got[4], logits)
    # only the rows asked for (the engine's beam rows); the others are left untouched
    got = m.step_sample_logits([row_sampling(**k) for k in kws], *args, top_n=5,
                               keep=[False, True, False])
    assert np.array_equal(got[0], want[0])
    assert np.array_equal(got[4][1], logits[1])
    assert np.all(np.isnan(got[4][[0, 2]]))
    # batch invariance: sequence a alone (fresh blocks), its rows 6 and 2 with the same draws
    kws = [dict(temperature=0.7, top_k=5, u=0.41),
           dict(temperature=1.3, top_p=0.8, min_p=0.05, u=0.77, penalty=pen, bias=bias)]
    mixed = m.step_sample([row_sampling(**kws[0]), row_sampling(temperature=0.0),
                           row_sampling(**kws[1])], *args, top_n=3)
    s2 = Seq(a, shuffled_free(96, 22))
    t2, p2, c2, l2 = s2.chunk(7)
    alone = m.step_sample([row_sampling(**k) for k in kws], t2, p2, [0, 7], [c2],
                          np.asarray(s2.blocks, np.int32)[None], l2, [6, 2], top_n=3)
    assert [mixed[0][0], mixed[0][2]] == alone[0].tolist()
    assert np.all(np.abs(np.array([mixed[1][0], mixed[1][2]]) - alone[1]) <= 1e-5)
    assert np.array_equal(mixed[2][[0, 2]], alone[2])
    greedy = [row_sampling(temperature=0.0)] * 3
    ids, lps, _, _ = m.step_sample(greedy, *args)
    gids, glps = m.step_argmax(*args)
    assert ids.tolist() == gids.tolist()
    assert np.all(np.abs(lps - glps) <= 1e-5)
    with pytest.raises(RaggedError, match="top_p"):
        m.step_sample([row_sampling(top_p=0.0)] * 3, *args)
    with pytest.raises(RaggedError, match="penalty_ids"):
        m.step_sample([row_sampling(penalty=([V], [1], [0]))] * 3, *args)
    with pytest.raises(RaggedError, match="top_n"):
        m.step_sample(greedy, *args, top_n=21)


def _log_softmax64(x):
    x = np.asarray(x, np.float64)
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def test_step_out_combinations(loaded):
    """rg_step_out's combinations (ragged.h rg_model_step) over one prefill with every row's
    logits wanted, 70 rows (two LM-head chunks of 64): want_logits copies only the rows it names
    (runs across the chunk boundary), the others left as they were; greedy with the logits out
    gives the argmax path's ids and log-probs, the argmax of that copy and its float64
    log-softmax; the sampler with some rows' logits out equals the separate sampler and
    logits-only calls and the NumPy chain on those logits; rows NULL with top_n > 0 is the
    sampler with greedy rows."""
    m, cfg, w = loaded("llama_gqa_untied")
    V = cfg["vocab_size"]
    rng = np.random.default_rng(31)
    a = rng.integers(0, V, 70)
    s = Seq(a, shuffled_free(96, 31))
    t, p, c, sl = s.chunk(70)
    args = (t, p, [0, 70], [c], np.asarray(s.blocks, np.int32)[None], sl, list(range(70)))
    full = m.step(*args)
    assert_close(full, ref_decoder.forward(cfg, w, a), "70 rows")
    want = rng.random(70) < 0.5
    want[[0, 1]] = False, True
    want[60:68] = True  # a run across the chunk boundary at 64
    want[[68, 69]] = False, True
    # logits only, a subset
    got = m.step_out(*args, logits=True, want_logits=want)["logits"]
    assert np.array_equal(got[want], full[want])
    assert np.all(np.isnan(got[~want]))
    # greedy (the argmax path) with the logits out: every row, then a subset
    gids, glps = m.step_argmax(*args)
    assert gids.tolist() == [int(np.argmax(r)) for r in full]
    r = m.step_out(*args, ids=True, logits=True)
    assert np.array_equal(r["logits"], full)
    assert np.array_equal(r["ids"], gids) and np.array_equal(r["logprobs"], glps)
    assert r["ids"].tolist() == [int(np.argmax(x)) for x in r["logits"]]
    lsm = _log_softmax64(r["logits"])[np.arange(70), r["ids"]]
    assert np.all(np.abs(r["logprobs"] - lsm) <= 1e-5 * np.maximum(1.0, np.abs(lsm)))
    r = m.step_out(*args, ids=True, logits=True, want_logits=want)
    assert np.array_equal(r["ids"], gids) and np.array_equal(r["logprobs"], glps)
    assert np.array_equal(r["logits"][want], full[want])
    assert np.all(np.isnan(r["logits"][~want]))
    # the sampler, with and without the logits of the wanted rows
    kws = [dict(temperature=float(rng.choice([0.0, 0.8, 1.3])), top_k=int(rng.integers(0, 9)),
                top_p=float(rng.choice([1.0, 0.9])), u=float(rng.random())) for _ in range(70)]
    params = [row_sampling(**k) for k in kws]
    sep = m.step_sample(params, *args, top_n=4)
    both = m.step_sample_logits(params, *args, top_n=4, keep=want)
    for g, w_ in zip(both[:4], sep):
        assert np.array_equal(g, w_)
    assert np.array_equal(both[4][want], full[want])
    assert np.all(np.isnan(both[4][~want]))
    for i in range(70):
        rid, rlp, rt, _ = ref_sample_chain(full[i], top_n=4, **kws[i])
        assert sep[0][i] == rid, (i, kws[i], sep[0][i], rid)
        assert abs(sep[1][i] - rlp) <= 1e-5 * max(1.0, abs(rlp)), (i, sep[1][i], rlp)
        assert sep[2][i, :len(rt)].tolist() == rt.tolist(), (i, sep[2][i], rt)
    # rows NULL with top_n > 0: the sampler with every row greedy
    r = m.step_out(*args, ids=True, top_n=3)
    g = m.step_sample([row_sampling(temperature=0.0)] * 70, *args, top_n=3)
    for k, w_ in zip(("ids", "logprobs", "top_ids", "top_logprobs"), g):
        assert np.array_equal(r[k], w_), k
    assert np.array_equal(r["ids"], gids) and np.array_equal(r["top_ids"][:, 0], gids)
    assert np.all(np.abs(r["logprobs"] - glps) <= 1e-5)


def test_step_out_refused_by_name(models):
    """A bad rg_step_out is RG_ERR_INVALID_INPUT naming its field; nothing is written (the
    outputs keep their guard values and the KV cache its contents: a failed step that would
    overwrite a cached block leaves the next decode equal to the reference); out NULL is
    accepted for a step without logits rows."""
    d, cfg, w = models["llama_gqa_untied"]
    V = cfg["vocab_size"]
    m = Model(d, max_batch_tokens=16)
    m.kv_init(BS, 8)
    a = [5, 9, 2, 7, 11]
    # a's first 4 tokens cached in block 3; a step without logits rows, out NULL
    m.step_raw(m.step_batch(a[:4], range(4), [0, 4], [4], [[3]], [12, 13, 14, 15], []), None)
    # each bad step would rewrite block 3 with other tokens
    batch = m.step_batch([1, 2, 3, 4], range(4), [0, 4], [4], [[3]], [12, 13, 14, 15], [1, 3])
    ids = np.full(2, -9, np.int32)
    lps = np.full(2, 7.0, np.float32)
    tid = np.full((2, 3), -9, np.int32)
    tlp = np.full((2, 3), 7.0, np.float32)
    lg = np.full((2, V), 7.0, np.float32)
    want = np.ones(2, np.uint8)
    good_rows = (RowSampling * 2)(row_sampling(temperature=0.0), row_sampling(temperature=0.0))
    bad_rows = (RowSampling * 2)(row_sampling(temperature=0.0), row_sampling(top_p=0.0))
    I, L, TI, TL, G, W = (x.ctypes.data for x in (ids, lps, tid, tlp, lg, want))
    R, BR = ctypes.cast(good_rows, ctypes.c_void_p), ctypes.cast(bad_rows, ctypes.c_void_p)
    bad = [
        ("out is NULL", None),
        ("out.top_n", StepOut(top_n=21, ids=I, top_ids=TI, top_logprobs=TL)),
        ("out.top_n", StepOut(top_n=-1, ids=I)),
        ("out.top_ids", StepOut(top_n=3, ids=I, logprobs=L)),
        ("out.top_ids", StepOut(top_n=3, ids=I, top_ids=TI)),
        ("neither out.ids nor out.logits", StepOut()),
        ("out.rows", StepOut(rows=R, logits=G)),
        ("out.logprobs", StepOut(logprobs=L, logits=G)),
        ("out.want_logits", StepOut(ids=I, want_logits=W)),
        ("out.rows[1].top_p", StepOut(rows=BR, ids=I, logprobs=L, logits=G)),
    ]
    for field, out in bad:
        with pytest.raises(RaggedError) as e:
            m.step_raw(batch, out)
        assert e.value.status == "RG_ERR_INVALID_INPUT", (field, e.value)
        assert field in e.value.message, (field, e.value.message)
        assert np.all(ids == -9) and np.all(lps == 7) and np.all(tid == -9)
        assert np.all(tlp == 7) and np.all(lg == 7), field
    # the same outputs with a good descriptor are written; the cache still holds a's tokens
    m.step_raw(m.step_batch(a[4:], [4], [0, 1], [5], [[3, 5]], [20], [0]),
               StepOut(rows=R, ids=I, logprobs=L, logits=G))
    ref = ref_decoder.forward(cfg, w, a)[4]
    assert_close(lg[:1], ref[None], "decode after refused steps")
    assert ids[0] == int(np.argmax(ref)) and ids[1] == -9 and np.all(lg[1] == 7)
    m.close()
