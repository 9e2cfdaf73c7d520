"""Decoding (src/kv, src/gen) through ctypes, against independent Python references.

A toy model implemented here drives rg_gen_run as its runner: its "KV cache" is an int array
indexed by slot holding the token written there, and the logits of a row are a hash of ALL
tokens of the row's context read back through the block table, so a wrong block table, fork or
copy-on-write copy changes the output. The references compute the same toy LM from full token
lists (no cache) and re-implement, from HF transformers' and OpenAI/vLLM's algorithm
descriptions: greedy; the sampler chain (bias, repetition/frequency/presence penalties,
temperature, top-k, top-p, min-p, a draw from xoshiro256** uniforms); HF beam search
(BeamSearchScorer / BeamHypotheses, 4.4x lengths) and group beam search with the Hamming
diversity penalty. Scores use Python's math (the same libm as the C code), float32 where the C
code works in float32. Also: a chi-square test of draws against the softmax, the support of
top-k/top-p/min-p, same seed same output, batch invariance, and KV blocks in use back to zero
after every run, after injected step errors and cancellations."""
import ctypes
import math

import numpy as np
import pytest
from scipy import stats

import ragged_ctypes as rc

RG_OK, RG_ERR_CUDA, RG_ERR_BUSY, RG_ERR_INTERNAL = 0, 8, 9, 10
FINISH = {0: "none", 1: "stop", 2: "length", 3: "eos"}
I32P = ctypes.POINTER(ctypes.c_int32)
F32P = ctypes.POINTER(ctypes.c_float)


class SamplingParams(ctypes.Structure):
    """include/ragged.h rg_sampling_params."""
    _fields_ = [("do_sample", ctypes.c_bool), ("temperature", ctypes.c_float),
                ("top_k", ctypes.c_int), ("top_p", ctypes.c_float), ("min_p", ctypes.c_float),
                ("repetition_penalty", ctypes.c_float), ("presence_penalty", ctypes.c_float),
                ("frequency_penalty", ctypes.c_float), ("no_repeat_ngram_size", ctypes.c_int),
                ("n_logit_bias", ctypes.c_int), ("logit_bias_ids", I32P),
                ("logit_bias_values", F32P)]


class StepBatch(ctypes.Structure):
    """include/ragged.h rg_step_batch."""
    _fields_ = [("n_tokens", ctypes.c_int), ("tokens", I32P), ("positions", I32P),
                ("n_seq", ctypes.c_int), ("cu_seqlens_q", I32P), ("context_lens", I32P),
                ("max_blocks_per_seq", ctypes.c_int), ("block_tables", I32P),
                ("slot_mapping", I32P), ("n_logits", ctypes.c_int), ("logits_rows", I32P),
                ("cross_lens", I32P), ("max_cross_blocks_per_seq", ctypes.c_int),
                ("cross_block_tables", I32P)]  # encoder-decoders only


STEP_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(StepBatch), F32P)


class RowSampling(ctypes.Structure):
    """include/ragged.h rg_row_sampling."""
    _fields_ = [("temperature", ctypes.c_float), ("top_k", ctypes.c_int),
                ("top_p", ctypes.c_float), ("min_p", ctypes.c_float),
                ("repetition_penalty", ctypes.c_float), ("presence_penalty", ctypes.c_float),
                ("frequency_penalty", ctypes.c_float), ("u", ctypes.c_double),
                ("n_penalty", ctypes.c_int), ("penalty_ids", I32P), ("penalty_counts", I32P),
                ("penalty_in_prompt", ctypes.POINTER(ctypes.c_uint8)),
                ("n_logit_bias", ctypes.c_int), ("logit_bias_ids", I32P),
                ("logit_bias_values", F32P)]


STEP_SAMPLE_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(StepBatch),
                                  ctypes.POINTER(RowSampling), ctypes.c_int, I32P, F32P, I32P,
                                  F32P)
COPY_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, I32P, I32P, ctypes.c_int)
TOKEN_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_int32,
                            ctypes.c_float)
DETOK_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, I32P, ctypes.c_int,
                            ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t))


class Runner(ctypes.Structure):
    """src/gen/generate.h rg_gen_runner."""
    _fields_ = [("ctx", ctypes.c_void_p), ("vocab_size", ctypes.c_int),
                ("block_size", ctypes.c_int), ("n_blocks", ctypes.c_int),
                ("max_context", ctypes.c_int), ("step", STEP_FN), ("copy_blocks", COPY_FN),
                ("step_argmax", ctypes.c_void_p),  # NULL: the loop samples from logits
                ("step_sample", STEP_SAMPLE_FN),  # NULL: on the host chain
                ("step_sample_logits", ctypes.c_void_p),  # NULL: logits through step
                # encoder-decoders (NULL / 0: decoder-only), the model's generation defaults
                ("encode", ctypes.c_void_p), ("max_source", ctypes.c_int),
                ("decoder_start", ctypes.c_int32), ("bad_ids", ctypes.c_void_p),
                ("n_bad", ctypes.c_int), ("has_forced_eos", ctypes.c_bool),
                ("forced_eos", ctypes.c_int32), ("has_forced_bos", ctypes.c_bool),
                ("forced_bos", ctypes.c_int32)]


class GenParams(ctypes.Structure):
    """include/ragged.h rg_gen_params."""
    _fields_ = [("sampling", SamplingParams), ("n", ctypes.c_int), ("seed", ctypes.c_uint64),
                ("logprobs", ctypes.c_int), ("max_tokens", ctypes.c_int),
                ("num_beams", ctypes.c_int), ("num_beam_groups", ctypes.c_int),
                ("diversity_penalty", ctypes.c_float), ("length_penalty", ctypes.c_float),
                ("early_stopping", ctypes.c_int), ("eos_ids", I32P), ("n_eos", ctypes.c_int),
                ("stop_ids", I32P), ("n_stop_ids", ctypes.c_int),
                ("stop", ctypes.POINTER(ctypes.c_char_p)), ("n_stop", ctypes.c_int),
                ("detokenize", DETOK_FN), ("detokenize_ctx", ctypes.c_void_p),
                ("pad_id", ctypes.c_int32), ("max_step_tokens", ctypes.c_int),
                ("on_token", TOKEN_FN), ("on_token_ctx", ctypes.c_void_p),
                ("forced_bos_set", ctypes.c_bool), ("forced_bos_id", ctypes.c_int32),
                ("grammar_kind", ctypes.c_int), ("grammar", ctypes.c_char_p),
                ("num_speculative_tokens", ctypes.c_int), ("prompt_lookup_max", ctypes.c_int),
                ("prompt_lookup_min", ctypes.c_int), ("prompt_logprobs", ctypes.c_bool),
                ("prompt_top_n", ctypes.c_int)]


class GenSeq(ctypes.Structure):
    """include/ragged.h rg_gen_seq."""
    _fields_ = [("prompt_index", ctypes.c_int), ("index", ctypes.c_int), ("ids", I32P),
                ("n_ids", ctypes.c_int), ("logprobs", F32P), ("n_top", ctypes.c_int),
                ("top_ids", I32P), ("top_logprobs", F32P), ("text", ctypes.c_char_p),
                ("text_len", ctypes.c_size_t), ("finish", ctypes.c_int),
                ("prompt_tokens", ctypes.c_int), ("completion_tokens", ctypes.c_int),
                ("score", ctypes.c_double)]


class GenResult(ctypes.Structure):
    _fields_ = [("n_seqs", ctypes.c_int), ("seqs", ctypes.POINTER(GenSeq)),
                ("time_total_s", ctypes.c_double), ("time_first_token_s", ctypes.c_double),
                ("spec_drafted", ctypes.c_longlong), ("spec_accepted", ctypes.c_longlong)]


def glib():
    l = rc.lib()
    if not getattr(l, "_gen_bound", False):
        l.rg_gen_params_default.argtypes = [ctypes.POINTER(GenParams)]
        l.rg_gen_run.argtypes = [ctypes.POINTER(Runner), ctypes.POINTER(I32P),
                                 ctypes.POINTER(ctypes.c_int), ctypes.c_int,
                                 ctypes.POINTER(GenParams), ctypes.c_void_p,
                                 ctypes.POINTER(ctypes.POINTER(GenResult))]
        l.rg_gen_result_free.argtypes = [ctypes.POINTER(GenResult)]
        l.rg_kv_pool_init.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int,
                                      ctypes.c_int]
        l.rg_kv_pool_free.argtypes = [ctypes.c_void_p]
        l.rg_kv_pool_n_used.argtypes = [ctypes.c_void_p]
        l.rg_sampling_params_default.argtypes = [ctypes.POINTER(SamplingParams)]
        l.rg_sampler_draw_test.argtypes = [F32P, ctypes.c_int, ctypes.POINTER(SamplingParams),
                                           I32P, ctypes.c_int, ctypes.c_uint64, ctypes.c_int,
                                           I32P, F32P]
        l.rg_topk_hier.argtypes = [F32P, ctypes.c_int, ctypes.c_int, I32P, F32P, I32P,
                                   ctypes.POINTER(ctypes.c_int)]
        l.rg_rng_seed_stream.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64]
        l.rg_rng_next.restype = ctypes.c_uint64
        l.rg_rng_next.argtypes = [ctypes.c_void_p]
        l._gen_bound = True
    return l


# ---- xoshiro256** / splitmix64 in Python (src/core/rng.h) ----
M64 = (1 << 64) - 1


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & M64
    z = x
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return x, z ^ (z >> 31)


class Xoshiro:
    def __init__(self, seed, stream):
        _, a = splitmix64(seed)
        _, b = splitmix64(stream)
        x, self.s = a ^ b, []
        for _ in range(4):
            x, z = splitmix64(x)
            self.s.append(z)

    def next(self):
        s = self.s
        rotl = lambda v, k: ((v << k) | (v >> (64 - k))) & M64
        result = (rotl((s[1] * 5) & M64, 7) * 9) & M64
        t = (s[1] << 17) & M64
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = rotl(s[3], 45)
        return result

    def uniform(self):
        return (self.next() >> 11) * 2.0 ** -53


def test_rng_stream_matches_python():
    l = glib()
    st = (ctypes.c_uint64 * 4)()
    for seed, stream in [(0, 0), (42, 3), (2**64 - 1, 7)]:
        l.rg_rng_seed_stream(st, seed, stream)
        py = Xoshiro(seed, stream)
        for _ in range(50):
            assert l.rg_rng_next(st) == py.next()


# ---- the toy LM ----
def mix64(z):
    z &= M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def toy_logits(ctx, V):
    """float32 (V) logits after context ctx: a hash of every token and its position."""
    h = 0xABCDEF
    for q, t in enumerate(ctx):
        h = mix64(h ^ ((int(t) + 1) | (q << 32)))
    return np.array([((mix64(h + v * 0x9E3779B97F4A7C15) >> 40) % 4096) / 256.0 - 8.0
                     for v in range(V)], dtype=np.float32)


class ToyRunner:
    """The toy LM as an rg_gen_runner: cache[slot] = token, logits read through block tables."""

    def __init__(self, V, block_size=4, n_blocks=512, max_context=64, fail_at=-1):
        self.V, self.bs, self.fail_at, self.n_steps, self.n_copies = V, block_size, fail_at, 0, 0
        self.cache = np.full(n_blocks * block_size, -1, dtype=np.int64)
        self.errors = []
        self._step = STEP_FN(self.step)
        self._copy = COPY_FN(self.copy)
        self.runner = Runner(None, V, block_size, n_blocks, max_context, self._step, self._copy)
        self.sample_rows = []  # step_sample: (logits row index, u) of every row it sampled
        self.n_sample_steps = 0

    def with_step_sample(self):
        """Also sample on the 'device' (rg_gen_runner.step_sample), as rg_model_step's sampler path
        does: every row with its own parameters and draw u, from the logits step() makes."""
        self._sample = STEP_SAMPLE_FN(self.step_sample)
        self.runner.step_sample = self._sample
        return self

    def step_sample(self, ctx, bp, rows_p, top_n, ids, lps, top_ids, top_lps):
        self.n_sample_steps += 1
        b = bp.contents
        n = b.n_logits
        buf = (ctypes.c_float * (max(n, 1) * self.V))()
        st = self.step(ctx, bp, ctypes.cast(buf, F32P))
        if st != RG_OK:
            return st
        try:
            logits = np.frombuffer(buf, dtype=np.float32).reshape(-1, self.V)
            for k in range(n):
                row = rows_p[k]
                self.sample_rows.append((b.logits_rows[k], row.u))
                tok, ls = row_sample(logits[k], row, self.V)
                ids[k], lps[k] = tok, ls[tok]
                order = sorted(ls, key=lambda v: (-ls[v], v))
                for t in range(top_n):
                    ok = t < len(order) and ls[order[t]] > -np.inf
                    top_ids[k * top_n + t] = order[t] if ok else -1
                    top_lps[k * top_n + t] = ls[order[t]] if ok else -np.inf
            return RG_OK
        except Exception as e:
            self.errors.append(repr(e))
            return RG_ERR_INTERNAL

    def step(self, ctx, bp, logits_p):
        try:
            self.n_steps += 1
            if self.n_steps - 1 == self.fail_at:
                return RG_ERR_CUDA
            b = bp.contents
            arr = lambda p, n: np.ctypeslib.as_array(p, (n,)).copy() if n else np.zeros(0, int)
            toks, pos = arr(b.tokens, b.n_tokens), arr(b.positions, b.n_tokens)
            cu, ctxl = arr(b.cu_seqlens_q, b.n_seq + 1), arr(b.context_lens, b.n_seq)
            tabs = arr(b.block_tables, b.n_seq * b.max_blocks_per_seq).reshape(
                b.n_seq, b.max_blocks_per_seq)
            slots, rows = arr(b.slot_mapping, b.n_tokens), arr(b.logits_rows, b.n_logits)
            seq_of = np.repeat(np.arange(b.n_seq), np.diff(cu))
            for r in range(b.n_tokens):
                i = seq_of[r]
                p = ctxl[i] - (cu[i + 1] - cu[i]) + (r - cu[i])
                assert pos[r] == p and slots[r] == tabs[i, p // self.bs] * self.bs + p % self.bs
                self.cache[slots[r]] = toks[r]
            out = np.ctypeslib.as_array(logits_p, (max(b.n_logits, 1) * self.V,))
            for k, r in enumerate(rows):
                i, p = seq_of[r], pos[r]
                ctx_ids = [self.cache[tabs[i, q // self.bs] * self.bs + q % self.bs]
                           for q in range(p + 1)]
                out[k * self.V:(k + 1) * self.V] = toy_logits(ctx_ids, self.V)
            return RG_OK
        except Exception as e:  # a broken contract fails the test, not the process
            self.errors.append(repr(e))
            return RG_ERR_INTERNAL

    def copy(self, ctx, src, dst, n):
        for i in range(n):
            s, d = src[i] * self.bs, dst[i] * self.bs
            self.cache[d:d + self.bs] = self.cache[s:s + self.bs]
        self.n_copies += n
        return RG_OK


class Pool:
    def __init__(self, n_blocks, block_size):
        self.p = ctypes.c_void_p()
        assert glib().rg_kv_pool_init(ctypes.byref(self.p), n_blocks, block_size) == RG_OK

    def used(self):
        return glib().rg_kv_pool_n_used(self.p)

    def __del__(self):
        glib().rg_kv_pool_free(self.p)


def params(**kw):
    p = GenParams()
    glib().rg_gen_params_default(ctypes.byref(p))
    keep = []
    for k, v in kw.items():
        if k in ("eos_ids", "stop_ids"):
            a = (ctypes.c_int32 * len(v))(*v)
            keep.append(a)
            setattr(p, k, ctypes.cast(a, I32P))
            setattr(p, "n_eos" if k == "eos_ids" else "n_stop_ids", len(v))
        elif k == "logit_bias":
            ids = (ctypes.c_int32 * len(v))(*v.keys())
            vals = (ctypes.c_float * len(v))(*v.values())
            keep += [ids, vals]
            p.sampling.n_logit_bias = len(v)
            p.sampling.logit_bias_ids = ctypes.cast(ids, I32P)
            p.sampling.logit_bias_values = ctypes.cast(vals, F32P)
        elif hasattr(p.sampling, k) and k not in ("n",):
            setattr(p.sampling, k, v)
        else:
            setattr(p, k, v)
    p._keep = keep
    return p


def run(toy, prompts, p, pool=None, expect=RG_OK):
    l = glib()
    arrs = [(ctypes.c_int32 * len(x))(*x) for x in prompts]
    ptrs = (I32P * len(prompts))(*[ctypes.cast(a, I32P) for a in arrs])
    lens = (ctypes.c_int * len(prompts))(*[len(x) for x in prompts])
    res = ctypes.POINTER(GenResult)()
    st = l.rg_gen_run(ctypes.byref(toy.runner), ptrs, lens, len(prompts), ctypes.byref(p),
                      pool.p if pool else None, ctypes.byref(res))
    assert not toy.errors, toy.errors
    assert st == expect, (st, l.rg_last_error())
    if st != RG_OK:
        assert not res
        return None
    out = []
    for k in range(res.contents.n_seqs):
        s = res.contents.seqs[k]
        n = s.n_ids
        out.append(dict(prompt=s.prompt_index, index=s.index, ids=[s.ids[i] for i in range(n)],
                        logprobs=[s.logprobs[i] for i in range(n)], finish=FINISH[s.finish],
                        score=s.score, n_top=s.n_top,
                        top_ids=[[s.top_ids[i * s.n_top + j] for j in range(s.n_top)]
                                 for i in range(n)] if s.n_top else [],
                        top_logprobs=[[s.top_logprobs[i * s.n_top + j] for j in range(s.n_top)]
                                      for i in range(n)] if s.n_top else [],
                        prompt_tokens=s.prompt_tokens, completion_tokens=s.completion_tokens))
    l.rg_gen_result_free(res)
    return out


PROMPTS = [[1, 2, 3], [7], [5, 9, 11, 2, 13, 4, 4, 8, 17, 1, 0], [3] * 7, [12, 14, 15, 6, 6]]


# ---- the reference sampler (OpenAI / vLLM / HF order; sampler.h) ----
def f32(x):
    return np.float32(x)


def ref_process(logits, prompt, gen, sp):
    """bias, penalties, no-repeat-ngram on float32 logits; returns a dict id -> float32."""
    l = [f32(x) for x in logits]
    for i, b in sp.get("logit_bias", {}).items():
        l[i] = f32(l[i] + f32(b))
    rep = f32(sp.get("repetition_penalty", 1.0))
    freq, pres = f32(sp.get("frequency_penalty", 0.0)), f32(sp.get("presence_penalty", 0.0))
    counts = {}
    for t in gen:
        counts[t] = counts.get(t, 0) + 1
    if rep != f32(1.0) or freq != 0 or pres != 0:
        seen = set(prompt) | set(gen)
        for v in range(len(l)):
            if rep != f32(1.0) and v in seen:
                l[v] = f32(l[v] * rep) if l[v] < 0 else f32(l[v] / rep)
            c = counts.get(v, 0)
            if c:
                l[v] = f32(l[v] - f32(f32(c) * freq))
                l[v] = f32(l[v] - pres)
    n = sp.get("no_repeat_ngram_size", 0)
    hist = list(prompt) + list(gen)
    if n and len(hist) + 1 >= n:
        tail = hist[len(hist) - (n - 1):] if n > 1 else []
        for i in range(len(hist) - n + 1):
            if hist[i:i + n - 1] == tail:
                l[hist[i + n - 1]] = f32(-np.inf)
    return {v: l[v] for v in range(len(l))}


def ref_choose(cand, sp, rng):
    """The sampling warpers and the draw; returns (token, final candidate dict)."""
    sample = sp.get("do_sample", False) and sp.get("temperature", 1.0) > 0
    if not sample:
        best = min(cand, key=lambda v: (-cand[v], v))
        return best, cand
    t = f32(sp.get("temperature", 1.0))
    if t != f32(1.0):
        cand = {v: f32(x / t) for v, x in cand.items()}
    k = sp.get("top_k", 0)
    if 0 < k < len(cand):
        kth = sorted(cand.values(), reverse=True)[k - 1]
        cand = {v: x for v, x in cand.items() if x >= kth}
    p = float(f32(sp.get("top_p", 1.0)))
    if p < 1.0 and len(cand) > 1:
        order = sorted(cand, key=lambda v: (-cand[v], v))
        mx = float(cand[order[0]])
        total = 0.0
        for v in order:
            total += math.exp(float(cand[v]) - mx)
        keep, before = [], 0.0
        for v in order:
            if keep and not before < p * total:
                break
            keep.append(v)
            before += math.exp(float(cand[v]) - mx)
        cand = {v: cand[v] for v in keep}
    mp = float(f32(sp.get("min_p", 0.0)))
    if mp > 0:
        mx = float(max(cand.values()))
        cand = {v: x for v, x in cand.items() if not math.exp(float(x) - mx) < mp}
    finite = {v: x for v, x in cand.items() if x > -np.inf}
    cand = finite or cand
    ids = sorted(cand)
    mx = float(max(cand.values()))
    es = [math.exp(float(cand[v]) - mx) for v in ids]
    total = 0.0
    for e in es:
        total += e
    target = rng.uniform() * total
    run_, pick = 0.0, ids[-1]
    for v, e in zip(ids, es):
        run_ += e
        if run_ > target:
            pick = v
            break
    return pick, cand


def ref_logsoftmax(cand):
    mx = float(max(cand.values()))
    total = 0.0
    for x in cand.values():
        total += math.exp(float(x) - mx)
    lse = mx + math.log(total)
    return {v: float(x) - lse for v, x in cand.items()}


class FixedDraw:
    """An rng whose one draw is the u a step_sample row carries."""

    def __init__(self, u):
        self.u = u

    def uniform(self):
        return self.u


def row_sample(logits, row, V):
    """One rg_row_sampling row as the device does it, from its penalty lists (distinct ids, counts
    among the generated, in-prompt flags) instead of the token history: the same processing as
    ref_process, then ref_choose with the row's u. Returns (token, log-softmax dict)."""
    sp = {"do_sample": row.temperature > 0, "temperature": row.temperature,
          "top_k": row.top_k, "top_p": row.top_p, "min_p": row.min_p,
          "repetition_penalty": row.repetition_penalty,
          "presence_penalty": row.presence_penalty, "frequency_penalty": row.frequency_penalty,
          "logit_bias": {row.logit_bias_ids[i]: row.logit_bias_values[i]
                         for i in range(row.n_logit_bias)}}
    prompt, gen = [], []  # a history with the lists' sets and counts
    for i in range(row.n_penalty):
        v = row.penalty_ids[i]
        if i and v <= row.penalty_ids[i - 1]:
            raise AssertionError("penalty ids not ascending and distinct")
        if row.penalty_in_prompt[i]:
            prompt.append(v)
        gen += [v] * row.penalty_counts[i]
        if not row.penalty_in_prompt[i] and not row.penalty_counts[i]:
            raise AssertionError(f"penalty id {v} neither in the prompt nor generated")
    cand = ref_process(logits, prompt, gen, sp)
    tok, final = ref_choose(cand, sp, FixedDraw(row.u))
    return tok, ref_logsoftmax(final)


def ref_generate(prompt, V, sp, seed, j, max_tokens, eos=(), stop_ids=(), n_top=0):
    rng, gen, lps, tops = Xoshiro(seed, j), [], [], []
    finish = "length"
    for _ in range(max_tokens):
        cand = ref_process(toy_logits(prompt + gen, V), prompt, gen, sp)
        tok, final = ref_choose(cand, sp, rng)
        ls = ref_logsoftmax(final)
        gen.append(tok)
        lps.append(ls[tok])
        order = sorted(ls, key=lambda v: (-ls[v], v))
        tops.append([(v, ls[v]) for v in order[:n_top] if ls[v] > -np.inf])
        if tok in eos:
            finish = "eos"
            break
        if tok in stop_ids:
            finish = "stop"
            break
    return gen, lps, tops, finish


SAMPLING_CASES = [
    dict(),  # greedy
    dict(do_sample=True),
    dict(do_sample=True, temperature=0.7, top_k=8),
    dict(do_sample=True, temperature=1.3, top_p=0.8),
    dict(do_sample=True, min_p=0.1, repetition_penalty=1.4),
    dict(do_sample=True, top_k=20, top_p=0.9, min_p=0.02, temperature=0.9,
         presence_penalty=0.5, frequency_penalty=0.7, logit_bias={5: 2.5, 6: -100.0}),
    dict(repetition_penalty=1.8, no_repeat_ngram_size=2),
]


@pytest.mark.parametrize("case", range(len(SAMPLING_CASES)))
def test_sampling_matches_reference(case):
    sp = SAMPLING_CASES[case]
    V, n, seed, max_tokens = 48, 3, 1234 + case, 12
    eos = [47]
    toy, pool = ToyRunner(V, block_size=3), Pool(512, 3)
    out = run(toy, PROMPTS, params(n=n, seed=seed, max_tokens=max_tokens, eos_ids=eos,
                                   logprobs=3, max_step_tokens=7, **sp), pool)
    assert pool.used() == 0
    # (each sample is its own sequence of the engine, as in `ragged serve`: no fork)
    for i, prompt in enumerate(PROMPTS):
        for j in range(n):
            o = out[i * n + j]
            gen, lps, tops, finish = ref_generate(prompt, V, sp, seed, j, max_tokens, eos,
                                                  n_top=3)
            assert (o["prompt"], o["index"]) == (i, j)
            assert o["ids"] == gen, (i, j)
            assert o["finish"] == finish
            assert o["prompt_tokens"] == len(prompt) and o["completion_tokens"] == len(gen)
            np.testing.assert_allclose(o["logprobs"], lps, rtol=0, atol=1e-5)
            for got_i, got_l, want in zip(o["top_ids"], o["top_logprobs"], tops):
                assert got_i[:len(want)] == [v for v, _ in want]
                assert all(x == -1 for x in got_i[len(want):])
                np.testing.assert_allclose(got_l[:len(want)], [x for _, x in want], atol=1e-5)


@pytest.mark.parametrize("case", [c for c in range(len(SAMPLING_CASES))
                                  if not SAMPLING_CASES[c].get("no_repeat_ngram_size")])
def test_step_sample_matches_reference(case):
    """rg_gen_run through rg_gen_runner.step_sample (sampling on the device: each row's options,
    its sequence's next draw and penalty lists handed to the runner, n samples of a prompt drawing
    from repeated logits rows) gives the independent reference's tokens, log-probs and top-N."""
    sp = SAMPLING_CASES[case]
    V, n, seed, max_tokens = 48, 3, 1234 + case, 12
    eos = [47]
    toy, pool = ToyRunner(V, block_size=3).with_step_sample(), Pool(512, 3)
    out = run(toy, PROMPTS, params(n=n, seed=seed, max_tokens=max_tokens, eos_ids=eos,
                                   logprobs=3, max_step_tokens=7, **sp), pool)
    assert not toy.errors, toy.errors
    assert pool.used() == 0
    assert len(toy.sample_rows) == sum(len(o["ids"]) for o in out)  # every token on the device
    rows = [r for r, _ in toy.sample_rows]
    assert len(rows) > len(set(rows))  # a prompt's samples shared its last row
    for i, prompt in enumerate(PROMPTS):
        for j in range(n):
            o = out[i * n + j]
            gen, lps, tops, finish = ref_generate(prompt, V, sp, seed, j, max_tokens, eos,
                                                  n_top=3)
            assert o["ids"] == gen, (i, j)
            assert o["finish"] == finish
            np.testing.assert_allclose(o["logprobs"], lps, rtol=0, atol=1e-5)
            for got_i, got_l, want in zip(o["top_ids"], o["top_logprobs"], tops):
                assert got_i[:len(want)] == [v for v, _ in want]
                np.testing.assert_allclose(got_l[:len(want)], [x for _, x in want], atol=1e-5)


def test_step_sample_not_for_no_repeat_ngram():
    """no_repeat_ngram_size has no device form: such requests stay on the host chain."""
    sp = SAMPLING_CASES[-1]
    assert sp.get("no_repeat_ngram_size")
    toy, pool = ToyRunner(48, block_size=3).with_step_sample(), Pool(512, 3)
    out = run(toy, PROMPTS, params(n=2, seed=5, max_tokens=6, **sp), pool)
    assert toy.sample_rows == [] and all(o["ids"] for o in out)


def test_same_seed_and_batch_invariance():
    V = 40
    sp = dict(do_sample=True, temperature=0.9, top_p=0.95, n=2, seed=99, max_tokens=10)
    toy, pool = ToyRunner(V), Pool(256, 4)
    together = run(toy, PROMPTS, params(**sp), pool)
    again = run(toy, PROMPTS, params(**sp), pool)
    assert [o["ids"] for o in together] == [o["ids"] for o in again]
    for i, prompt in enumerate(PROMPTS):  # alone, prefilled one token per step
        alone = run(toy, [prompt], params(max_step_tokens=1, **sp), pool)
        assert [o["ids"] for o in alone] == [o["ids"] for o in together[2 * i:2 * i + 2]]
        assert pool.used() == 0
    other = run(toy, PROMPTS, params(**dict(sp, seed=100)), pool)
    assert [o["ids"] for o in other] != [o["ids"] for o in together]


# ---- the reference beam search: HF transformers 4.4x BeamSearchScorer / group beam search ----
class RefHyps:
    def __init__(self, n, length_penalty, early, max_new):
        self.n, self.lp, self.early, self.max_new = n, length_penalty, early, max_new
        self.beams, self.worst = [], 1e9

    def add(self, hyp, sum_logprobs, gen_len):
        score = sum_logprobs / gen_len ** self.lp
        if len(self.beams) < self.n or score > self.worst:
            self.beams.append((score, hyp))
            if len(self.beams) > self.n:
                srt = sorted([(s, idx) for idx, (s, _) in enumerate(self.beams)])
                del self.beams[srt[0][1]]
                self.worst = srt[1][0]
            else:
                self.worst = min(score, self.worst)

    def is_done(self, best_sum, cur_gen_len):
        if len(self.beams) < self.n:
            return False
        if self.early is True:
            return True
        if self.early is False:
            return self.worst >= best_sum / cur_gen_len ** self.lp
        den = self.max_new if self.lp > 0 else cur_gen_len
        return self.worst >= best_sum / den ** self.lp


def ref_log_softmax(row):
    mx = float(max(row))
    total = 0.0
    for x in row:
        total += math.exp(float(x) - mx)
    lse = mx + math.log(total)
    return [float(x) - lse for x in row]


def ref_beam_search(prompt, V, num_beams, groups, diversity, length_penalty, early, ngram,
                    n_ret, eos, pad, max_new):
    G, P = num_beams // groups, len(prompt)
    beams = [list(prompt) for _ in range(num_beams)]
    scores = [0.0 if i % G == 0 else -1e9 for i in range(num_beams)]
    hyps = [RefHyps(G, length_penalty, early, max_new) for _ in range(groups)]
    done = [False] * groups
    n_keep = max(2, 1 + len(eos)) * G
    div = float(np.float32(diversity))
    cur_len = P
    while True:
        current = [None] * num_beams
        new_beams, new_scores = list(beams), list(scores)
        logits = [toy_logits(b, V) for b in beams]  # one model call for every beam
        for g in range(groups):
            if done[g]:
                for i in range(g * G, (g + 1) * G):
                    current[i] = pad
                continue
            prev = [t for t in current[:g * G]]
            cand = []
            for bi in range(G):
                i = g * G + bi
                proc = ref_log_softmax(logits[i])
                if ngram and len(beams[i]) + 1 >= ngram:
                    h = beams[i]
                    tail = h[len(h) - (ngram - 1):] if ngram > 1 else []
                    for s in range(len(h) - ngram + 1):
                        if h[s:s + ngram - 1] == tail:
                            proc[h[s + ngram - 1]] = -math.inf
                if g > 0 and div > 0:
                    for v in range(V):
                        proc[v] -= div * prev.count(v)
                cand += [(proc[v] + scores[i], bi * V + v) for v in range(V)]
            order = sorted(cand, key=lambda c: (-c[0], c[1]))[:n_keep]
            nb = 0
            for rank, (s, flat) in enumerate(order):
                bi, tok = divmod(flat, V)
                src = beams[g * G + bi]
                if tok in eos:
                    if rank >= G:
                        continue
                    hyps[g].add(src + [tok], s, cur_len + 1 - P)
                else:
                    new_beams[g * G + nb], new_scores[g * G + nb] = src + [tok], s
                    current[g * G + nb] = tok
                    nb += 1
                if nb == G:
                    break
            done[g] = done[g] or hyps[g].is_done(order[0][0], cur_len + 1 - P)
        beams, scores = new_beams, new_scores
        cur_len += 1
        if all(done) or cur_len >= P + max_new:
            break
    for g in range(groups):
        if not done[g]:
            for i in range(g * G, (g + 1) * G):
                hyps[g].add(beams[i], scores[i], len(beams[i]) - P)
    allh = sorted([h for g in range(groups) for h in hyps[g].beams], key=lambda x: x[0])
    return [(s, h[P:]) for s, h in (allh.pop() for _ in range(min(n_ret, len(allh))))]


BEAM_CASES = [
    dict(num_beams=4, length_penalty=1.0, early_stopping=0),
    dict(num_beams=3, length_penalty=0.5, early_stopping=1),
    dict(num_beams=4, length_penalty=2.0, early_stopping=2),
    dict(num_beams=4, length_penalty=1.0, early_stopping=0, no_repeat_ngram_size=2),
    dict(num_beams=4, num_beam_groups=2, diversity_penalty=1.5),
    dict(num_beams=6, num_beam_groups=3, diversity_penalty=0.7, early_stopping=1),
    dict(num_beams=4, num_beam_groups=4, diversity_penalty=3.0, length_penalty=0.0,
         early_stopping=2),
]


@pytest.mark.parametrize("device", [False, True], ids=["logits", "candidates"])
@pytest.mark.parametrize("case", range(len(BEAM_CASES)))
def test_beam_search_matches_hf_reference(case, device):
    """device: the runner has step_sample, so each beam step gets every row's best
    rg_beam_cand_needed tokens (f32 log-probs) instead of its logits (rg_beam_step_cand)."""
    bp = BEAM_CASES[case]
    V, max_new, eos = 20, 8, [2, 19]
    n_ret = bp["num_beams"] // 2 + 1
    toy, pool = ToyRunner(V, block_size=2), Pool(1024, 2)
    if device:
        toy.with_step_sample()
    out = run(toy, PROMPTS[:4], params(n=n_ret, max_tokens=max_new, eos_ids=eos,
                                       max_step_tokens=9, **bp), pool)
    assert not toy.errors, toy.errors
    assert pool.used() == 0
    if device:  # every step took candidates (none needed more than the 20 top_n allows)
        assert toy.n_sample_steps == toy.n_steps > 0
    assert toy.n_copies > 0  # beam forks share blocks and copy on write
    n_eos_seen = 0
    for i, prompt in enumerate(PROMPTS[:4]):
        want = ref_beam_search(prompt, V, bp["num_beams"], bp.get("num_beam_groups", 1),
                               bp.get("diversity_penalty", 0.0), bp.get("length_penalty", 1.0),
                               {0: False, 1: True, 2: "never"}[bp.get("early_stopping", 0)],
                               bp.get("no_repeat_ngram_size", 0), n_ret, eos, eos[0], max_new)
        got = out[i * n_ret:(i + 1) * n_ret]
        assert len(want) == n_ret
        for o, (score, ids) in zip(got, want):
            assert o["ids"] == ids, (i, o["ids"], ids)
            tol = 1e-6 if device else 1e-12  # candidates' log-probs are f32
            assert o["score"] == pytest.approx(score, rel=tol, abs=tol)
            assert o["finish"] == ("eos" if ids and ids[-1] in eos else "length")
            n_eos_seen += o["finish"] == "eos"
            np.testing.assert_allclose(  # per-token logprobs: the model's log-softmax
                o["logprobs"], [ref_log_softmax(toy_logits(prompt + ids[:k], V))[t]
                                for k, t in enumerate(ids)], atol=1e-6)
    assert n_eos_seen > 0  # the cases exercise finished hypotheses


# ---- sampler distribution tests through rg_sampler_draw_test ----
def draws(logits, n, seed=7, **sp):
    l = glib()
    p = SamplingParams()
    l.rg_sampling_params_default(ctypes.byref(p))
    for k, v in sp.items():
        setattr(p, k, v)
    lg = np.ascontiguousarray(logits, dtype=np.float32)
    out = np.zeros(n, dtype=np.int32)
    st = l.rg_sampler_draw_test(lg.ctypes.data_as(F32P), len(lg), ctypes.byref(p), None, 0,
                                seed, n, out.ctypes.data_as(I32P), None)
    assert st == RG_OK
    return out


def softmax64(x):
    x = np.asarray(x, dtype=np.float64)
    e = np.exp(x - x.max())
    return e / e.sum()


def test_chi_square_draws_match_softmax():
    rs = np.random.default_rng(0)
    logits = rs.normal(0, 1.5, 12).astype(np.float32)
    n = 40000
    for temp in (1.0, 0.6):
        got = np.bincount(draws(logits, n, do_sample=True, temperature=temp), minlength=12)
        want = softmax64(logits.astype(np.float64) / np.float64(np.float32(temp))) * n
        assert stats.chisquare(got, want).pvalue > 1e-4
    # top-p renormalises the kept set: draws match its softmax too
    got = np.bincount(draws(logits, n, seed=3, do_sample=True, top_p=0.7), minlength=12)
    pr = softmax64(logits)
    order = np.lexsort((np.arange(12), -logits))
    keep, before = [], 0.0
    for v in order:
        if keep and before >= 0.7 * 1.0 - 1e-12:
            break
        keep.append(v)
        before += pr[v]
    mask = np.zeros(12, bool)
    mask[keep] = True
    assert (got[~mask] == 0).all()
    want = pr[mask] / pr[mask].sum() * n
    assert stats.chisquare(got[mask], want).pvalue > 1e-4


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_truncation_never_emits_outside_set(seed):
    rs = np.random.default_rng(seed)
    V = 200
    logits = np.round(rs.normal(0, 2, V) * 4) / 4  # ties on purpose
    logits = logits.astype(np.float32)
    pr = softmax64(logits)
    # top-k: every emitted logit is >= the k-th largest
    k = 10
    kth = np.sort(logits)[::-1][k - 1]
    assert (logits[draws(logits, 5000, seed, do_sample=True, top_k=k)] >= kth).all()
    # top-p: emitted tokens lie in the smallest prefix (by prob desc, id asc) reaching p
    p = 0.6
    order = np.lexsort((np.arange(V), -logits))
    cum = np.concatenate([[0.0], np.cumsum(pr[order])])
    allowed = set(order[:int(np.argmax(cum >= p - 1e-9))].tolist() or [order[0]])
    allowed |= {order[len(allowed)]}  # the boundary token may round either way
    assert set(draws(logits, 5000, seed, do_sample=True, top_p=p).tolist()) <= allowed
    # min-p: p >= min_p * p_max
    mp = 0.3
    emitted = draws(logits, 5000, seed, do_sample=True, min_p=mp)
    assert (pr[emitted] >= mp * pr.max() * (1 - 1e-6)).all()
    # greedy: the first maximum
    assert (draws(logits, 3, seed) == int(np.argmax(logits))).all()


def test_topk_hier_matches_full_sort():
    l = glib()
    rs = np.random.default_rng(5)
    for trial in range(200):
        n = int(rs.integers(1, 5000))
        k = int(rs.integers(1, min(n, 100) + 1))
        x = (rs.normal(size=n) if trial % 2 else rs.integers(0, 3, n)).astype(np.float32)
        idx = np.zeros(k, np.int32)
        val = np.zeros(k, np.float32)
        nc = ctypes.c_int()
        assert l.rg_topk_hier(x.ctypes.data_as(F32P), n, k, idx.ctypes.data_as(I32P),
                              val.ctypes.data_as(F32P), None, ctypes.byref(nc)) == RG_OK
        want = np.lexsort((np.arange(n), -x))[:k]  # stable full sort: value desc, index asc
        assert idx.tolist() == want.tolist()
        assert (val == x[want]).all()


# ---- blocks return to zero after errors ----
@pytest.mark.parametrize("mode", ["sample", "beam", "group"])
def test_blocks_return_after_errors(mode):
    V = 24
    kw = dict(max_tokens=6, max_step_tokens=5)
    if mode == "sample":
        kw.update(n=3, do_sample=True, seed=1)
    else:
        kw.update(num_beams=4, n=2, eos_ids=[3])
        if mode == "group":
            kw.update(num_beam_groups=2, diversity_penalty=1.0)
    pool = Pool(512, 2)
    for fail in range(0, 14, 2):
        toy = ToyRunner(V, block_size=2, fail_at=fail)
        l = glib()
        arrs = [(ctypes.c_int32 * len(x))(*x) for x in PROMPTS]
        ptrs = (I32P * len(PROMPTS))(*[ctypes.cast(a, I32P) for a in arrs])
        lens = (ctypes.c_int * len(PROMPTS))(*[len(x) for x in PROMPTS])
        res = ctypes.POINTER(GenResult)()
        st = l.rg_gen_run(ctypes.byref(toy.runner), ptrs, lens, len(PROMPTS),
                          ctypes.byref(params(**kw)), pool.p, ctypes.byref(res))
        assert st in (RG_OK, RG_ERR_CUDA)
        assert (st == RG_ERR_CUDA) == (fail < toy.n_steps)
        if st == RG_OK:
            l.rg_gen_result_free(res)
        assert pool.used() == 0
    # a pool that holds each sequence but not all at once: the engine preempts and recomputes
    # (sampling: the same outputs as on a large pool, each sample's RNG stream goes on); one that
    # cannot hold a beam search's beams, or one sequence, answers busy. Nothing is kept.
    small = Pool(10, 2)
    if mode == "sample":
        big = run(ToyRunner(V, block_size=2), PROMPTS, params(**kw), pool)
        got = run(ToyRunner(V, block_size=2), PROMPTS, params(**kw), small)
        assert [o["ids"] for o in got] == [o["ids"] for o in big]
    else:
        run(ToyRunner(V, block_size=2), PROMPTS, params(**kw), small, expect=RG_ERR_BUSY)
    assert small.used() == 0
    tiny = Pool(2, 2)
    run(ToyRunner(V, block_size=2), PROMPTS, params(**kw), tiny, expect=RG_ERR_BUSY)
    assert tiny.used() == 0


@pytest.mark.parametrize("beams", [False, True])
def test_streaming_callback_and_stop_strings(beams):
    """on_token sees every returned token in order; a stop string cuts the text before it."""
    V = 26
    seen = {}

    def on_token(ctx, seq, tok, lp):
        seen.setdefault(seq, []).append((tok, lp))
        return RG_OK

    def detok(ctx, ids, n, text_p, len_p):
        s = bytes(ord("a") + ids[i] % 26 for i in range(n))
        buf = rc._libc.malloc(n + 1)
        ctypes.memmove(buf, s + b"\0", n + 1)
        text_p[0] = buf
        len_p[0] = n
        return RG_OK

    rc._libc.malloc.restype = ctypes.c_void_p
    rc._libc.malloc.argtypes = [ctypes.c_size_t]
    cb, dt = TOKEN_FN(on_token), DETOK_FN(detok)
    kw = dict(num_beams=3, n=2) if beams else dict(n=2, do_sample=True, seed=4)
    p = params(max_tokens=10, **kw)
    p.on_token, p.detokenize = cb, dt
    toy, pool = ToyRunner(V), Pool(256, 4)
    out = run(toy, PROMPTS[:3], p, pool)
    for k, o in enumerate(out):
        assert [t for t, _ in seen[k]] == o["ids"]
        np.testing.assert_array_equal([lp for _, lp in seen[k]], np.float32(o["logprobs"]))
    if beams:
        return
    # a stop string made of the 4th and 5th letters of the first sample: generation stops there
    full = "".join(chr(ord("a") + t % 26) for t in out[0]["ids"])
    stop = full[3:5]
    cut = full.index(stop)
    arr = (ctypes.c_char_p * 1)(stop.encode())
    p.stop, p.n_stop = ctypes.cast(arr, ctypes.POINTER(ctypes.c_char_p)), 1
    l = glib()
    a = [(ctypes.c_int32 * len(PROMPTS[0]))(*PROMPTS[0])]
    ptrs = (I32P * 1)(ctypes.cast(a[0], I32P))
    lens = (ctypes.c_int * 1)(len(PROMPTS[0]))
    res = ctypes.POINTER(GenResult)()
    assert l.rg_gen_run(ctypes.byref(toy.runner), ptrs, lens, 1, ctypes.byref(p), pool.p,
                        ctypes.byref(res)) == RG_OK
    s0 = res.contents.seqs[0]
    assert FINISH[s0.finish] == "stop"
    assert s0.text == full[:cut].encode() and s0.text_len == cut
    assert [s0.ids[i] for i in range(s0.n_ids)] == out[0]["ids"][:cut + 2]
    l.rg_gen_result_free(res)
    assert pool.used() == 0
