"""CUDA against the CPU twin for rg_op_sample_rows and rg_op_topk_rows (issue 19: sampling on the
device), on the same inputs, no torch in the process (compute-sanitizer can watch it):
  1. sample_rows: (M, N) = (1, 50257), (16, 50257), (8, 151936), (37, 1000), (5, 7); rows of
     gaussian logits, tie-heavy rows (4 distinct values) and NaN / +-inf rows; per-row random
     parameters (greedy, temperature, top-k 1..N+3 and 600, top-p 1 / 0.9 / 0.5 / 1e-6, min-p,
     penalties, bias), top_n 7; fp32 and fp16 logits (the CPU twin gets the fp16 values widened).
     Ids identical except documented float-rounding ties: a mismatch is accepted only when the
     CPU twin itself picks the CUDA id for u moved by 1e-9 or top_p moved by one float32 ulp
     (the float64 sums run in another order on the device); log-probs within 1e-5; top-N ids
     identical where the ids are;
  2. topk_rows: hierarchical and CUB-sort methods against the CPU twin (a stable full sort's
     order) for k = 1, 8, 50, 511, 512, 513, on gaussian and tie-heavy rows (the radix-select
     fallback) of widths 7 .. 151936;
  3. rg_op_argmax_rows (the device greedy choice, one CTA per row slice) against the CPU twin on
     gaussian, tie-heavy and NaN / -inf rows of widths 7 .. 151936, fp32 and fp16: ids identical,
     log-probs within 1e-5;
  4. rg_model_step's sampler path on a random-weight Llama decoder on CUDA (fp32): 12 decode
     steps (CUDA graphs from the second), each row's id equal to tests/py/ref_sample.py's NumPy
     chain applied to the logits-only step's logits with the same u; the sampler with the logits
     copied out (eager) giving the same ids and those logits; a logits-only step's want_logits
     subset (graphed), greedy with the logits out (eager) and greedy rows with top-3 (graphed)
     agreeing with those logits' argmax. Vocabularies 101 (the full
     algorithm only: too narrow for slices) and 1000 (greedy and top-k rows on the fast path,
     the others on the full algorithm, in one captured step);
  5. the fast path of sample_rows (CUDA: greedy rows with any top_n, sampled rows with top_k <=
     64; src/ops/cuda/sample.cu) at its boundaries, every case run twice on the same inputs, fast
     path on and off (RAGGED_SAMPLE_FAST=0), each against the CPU twin as in 1: top_k 1 / 50 /
     64 / 65 (65: the full algorithm), temperature 0.01 .. 5, top-p, min-p, penalties and bias
     aimed at the top tokens; logits with a tie at the k-th value (the fallback), ties inside
     the top k across slices, the top k packed around a slice boundary, +inf ties, NaN / -inf
     rows and rows of only -inf / NaN; greedy rows with top_n 0 / 1 / 8 / 20; (M, N) with M in
     1, 4, 16, 64 and N in 50257, 151936, 1000, 7.
Exit status 0 when every case passes. SAMPLE_QUICK=1: fewer, smaller shapes and no model
(for compute-sanitizer).
Usage: RAGGED_LIB=build/libragged.so RAGGED_INTERNAL_LIB=build/libragged_internal.so \
       python3 tests/gpu/sample_cuda.py"""
import ctypes
import os
import sys
import tempfile

import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "tests", "py"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

RG_DEVICE_CPU, RG_DEVICE_CUDA = 0, 1
DT = {"fp32": 0, "fp16": 1}  # rg_dtype: F32 = 0, F16 = 1 (include/ragged.h)
TOPN = 7
# SAMPLE_DEVICE=cpu runs the script with the CPU backend in the "CUDA" role: a check of the
# script itself on a machine without a GPU (every comparison then is CPU against CPU)
DEVICE = os.environ.get("SAMPLE_DEVICE", "cuda")
RG_DEVICE_GPU = RG_DEVICE_CUDA if DEVICE == "cuda" else RG_DEVICE_CPU


class SampleRow(ctypes.Structure):
    _fields_ = [("u", ctypes.c_double), ("temperature", ctypes.c_float), ("top_p", ctypes.c_float),
                ("min_p", ctypes.c_float), ("repetition_penalty", ctypes.c_float),
                ("presence_penalty", ctypes.c_float), ("frequency_penalty", ctypes.c_float),
                ("top_k", ctypes.c_int32), ("reserved", ctypes.c_int32)]


class SampleArgs(ctypes.Structure):
    _fields_ = [("rows", ctypes.c_void_p), ("pen_off", ctypes.c_void_p), ("pen", ctypes.c_void_p),
                ("bias_off", ctypes.c_void_p), ("bias", ctypes.c_void_p), ("top_n", ctypes.c_int),
                ("work", ctypes.c_void_p), ("ids", ctypes.c_void_p), ("logprobs", ctypes.c_void_p),
                ("top_ids", ctypes.c_void_p), ("top_logprobs", ctypes.c_void_p)]


PEN = np.dtype([("token", np.int32), ("count", np.int32), ("in_prompt", np.int32)])
BIAS = np.dtype([("token", np.int32), ("bias", np.float32)])


def load():
    path = os.environ.get("RAGGED_INTERNAL_LIB", os.path.join(ROOT, "build", "libragged_internal.so"))
    L = ctypes.CDLL(path)
    vp, sz = ctypes.c_void_p, ctypes.c_size_t
    L.rg_backend_init.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.POINTER(vp)]
    L.rg_backend_free.argtypes = [vp]
    L.rg_backend_alloc.argtypes = [vp, sz, ctypes.POINTER(vp)]
    L.rg_backend_dealloc.argtypes = [vp, vp]
    L.rg_backend_upload.argtypes = [vp, vp, vp, sz]
    L.rg_backend_download.argtypes = [vp, vp, vp, sz]
    L.rg_backend_sync.argtypes = [vp]
    L.rg_sample_work_bytes.restype = sz
    L.rg_sample_work_bytes.argtypes = [ctypes.c_int, ctypes.c_int]
    L.rg_topk_work_bytes.restype = sz
    L.rg_topk_work_bytes.argtypes = [ctypes.c_int, ctypes.c_int]
    L.rg_op_sample_rows.argtypes = [vp, vp, ctypes.c_int, ctypes.c_int, ctypes.POINTER(SampleArgs)]
    L.rg_op_topk_rows.argtypes = [vp, vp, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                  vp, vp, vp]
    L.rg_op_argmax_rows.argtypes = [vp, vp, ctypes.c_int, ctypes.c_int, vp, vp]
    L.rg_last_error.restype = ctypes.c_char_p
    return L


class Dev:
    """A backend with numpy <-> backend copies (the CPU backend's memory is host memory)."""

    def __init__(self, L, device, dt):
        self.L, self.device = L, device
        self.be = ctypes.c_void_p()
        st = L.rg_backend_init(device, 0, DT[dt], ctypes.byref(self.be))
        assert st == 0, L.rg_last_error()
        self.bufs = []

    def put(self, a):
        a = np.ascontiguousarray(a)
        p = ctypes.c_void_p()
        assert self.L.rg_backend_alloc(self.be, max(a.nbytes, 1), ctypes.byref(p)) == 0
        if a.nbytes:
            assert self.L.rg_backend_upload(self.be, p, a.ctypes.data, a.nbytes) == 0
        self.bufs.append(p)
        return p

    def empty(self, nbytes):
        p = ctypes.c_void_p()
        assert self.L.rg_backend_alloc(self.be, max(nbytes, 1), ctypes.byref(p)) == 0
        self.bufs.append(p)
        return p

    def get(self, p, shape, dtype):
        out = np.empty(shape, dtype)
        assert self.L.rg_backend_sync(self.be) == 0, self.L.rg_last_error()
        if out.nbytes:
            assert self.L.rg_backend_download(self.be, out.ctypes.data, p, out.nbytes) == 0
        return out

    def close(self):
        for p in self.bufs:
            self.L.rg_backend_dealloc(self.be, p)
        self.L.rg_backend_free(self.be)


def random_rows(rng, M, N):
    rows = np.zeros(M, dtype=np.dtype([(f[0], np.float64 if f[0] == "u" else
                                        (np.int32 if f[1] is ctypes.c_int32 else np.float32))
                                       for f in SampleRow._fields_]))
    pen, bias, po, bo = [], [], [0], [0]
    for r in range(M):
        row = rows[r]
        row["u"] = rng.random()
        row["top_p"], row["repetition_penalty"] = 1.0, 1.0
        if r % 5:
            row["temperature"] = rng.choice([1.0, 0.7, 1.5, 0.25])
            row["top_k"] = rng.choice([0, 1, 5, 50, N, N + 3, 600])
            row["top_p"] = rng.choice([1.0, 0.9, 0.5, 1e-6, 0.999])
            row["min_p"] = rng.choice([0.0, 0.05, 0.5])
        if rng.random() < 0.5:
            row["repetition_penalty"], row["presence_penalty"] = 1.3, 0.5
            row["frequency_penalty"] = 0.3
            toks = rng.choice(N, size=min(N, 6), replace=False)
            pen += [(int(t), int(rng.integers(0, 3)), int(rng.integers(0, 2))) for t in toks]
        if rng.random() < 0.5:
            bias += [(int(rng.integers(0, N)), float(rng.uniform(-4, 4))) for _ in range(3)]
        po.append(len(pen))
        bo.append(len(bias))
    return (rows, np.array(pen, PEN), np.array(bias, BIAS), np.array(po, np.int32),
            np.array(bo, np.int32))


def logits(rng, M, N, gen):
    x = (rng.standard_normal((M, N)) * rng.uniform(0.5, 6, (M, 1))).astype(np.float32)
    if gen == "ties":
        x = rng.integers(0, 4, (M, N)).astype(np.float32) - 2
    elif gen == "naninf":
        k = rng.integers(0, 10, (M, N))
        x[k == 0] = np.nan
        x[k == 1] = -np.inf
    return x


def sample(dev, x, M, N, rows, pen, bias, po, bo, top_n=TOPN):
    """Runs rg_op_sample_rows on dev; returns ids, log-probs, top ids, top log-probs."""
    L = dev.L
    tops = (dev.empty(4 * M * top_n), dev.empty(4 * M * top_n)) if top_n else (None, None)
    a = SampleArgs(dev.put(rows), dev.put(po), dev.put(pen), dev.put(bo), dev.put(bias), top_n,
                   dev.empty(L.rg_sample_work_bytes(M, N)), dev.empty(4 * M), dev.empty(4 * M),
                   *tops)
    st = L.rg_op_sample_rows(dev.be, dev.put(x), M, N, ctypes.byref(a))
    assert st == 0, L.rg_last_error()
    if not top_n:
        return (dev.get(a.ids, M, np.int32), dev.get(a.logprobs, M, np.float32),
                np.zeros((M, 0), np.int32), np.zeros((M, 0), np.float32))
    return (dev.get(a.ids, M, np.int32), dev.get(a.logprobs, M, np.float32),
            dev.get(a.top_ids, (M, top_n), np.int32),
            dev.get(a.top_logprobs, (M, top_n), np.float32))


def check_sample(L, cpu, rng, M, N, gen, dt):
    x = logits(rng, M, N, gen)
    rows, pen, bias, po, bo = random_rows(rng, M, N)
    return compare_sample(L, cpu, x, (rows, pen, bias, po, bo), M, N, dt, TOPN,
                          f"sample_rows {dt} {gen} ({M}, {N})")


def compare_sample(L, cpu, x, params, M, N, dt, top_n, label):
    """rg_op_sample_rows on the GPU backend against the CPU twin for logits x (M, N) f32 (given
    to the GPU as dt) and params = (rows, pen, bias, pen_off, bias_off); prints one line."""
    rows, pen, bias, po, bo = params
    xin = x.astype(np.float16) if dt == "fp16" else x
    if DEVICE != "cuda":
        xin = xin.astype(np.float32)
    x32 = xin.astype(np.float32)
    gpu = Dev(L, RG_DEVICE_GPU, dt if DEVICE == "cuda" else "fp32")
    g = sample(gpu, xin, M, N, rows, pen, bias, po, bo, top_n)
    gpu.close()
    c = sample(cpu, x32, M, N, rows, pen, bias, po, bo, top_n)
    ties, bad = 0, []
    for r in range(M):
        if g[0][r] != c[0][r]:
            alt = set()
            for du, dp in ((-1e-9, 0), (1e-9, 0), (0, -1), (0, 1)):
                rr = rows.copy()
                rr[r]["u"] = min(max(rr[r]["u"] + du, 0.0), np.nextafter(1.0, 0.0))
                if dp:
                    rr[r]["top_p"] = min(np.nextafter(np.float32(rr[r]["top_p"]),
                                                      np.float32(dp * 2.0)), np.float32(1.0))
                alt.add(int(sample(cpu, x32, M, N, rr, pen, bias, po, bo, top_n)[0][r]))
            if int(g[0][r]) in alt:
                ties += 1
                continue
            bad.append(f"row {r}: id {g[0][r]} vs CPU {c[0][r]} (params {rows[r]})")
            continue
        lp_ok = (np.isnan(g[1][r]) and np.isnan(c[1][r])) or abs(g[1][r] - c[1][r]) <= 1e-5 * max(1, abs(c[1][r]))
        top_ok = np.array_equal(g[2][r], c[2][r])
        with np.errstate(invalid="ignore"):
            tl = np.where(np.isinf(c[3][r]), 0, np.abs(g[3][r] - c[3][r]))
        top_ok &= bool(np.all(tl <= 1e-5 * np.maximum(1, np.abs(np.where(np.isinf(c[3][r]), 0, c[3][r])))))
        top_ok &= np.array_equal(np.isinf(g[3][r]), np.isinf(c[3][r]))
        if not lp_ok or not top_ok:
            bad.append(f"row {r}: lp {g[1][r]} vs {c[1][r]}, top {g[2][r]} vs {c[2][r]}")
    ok = not bad
    print(f"{label}: {M - ties - len(bad)} identical, {ties} rounding "
          f"ties, {len(bad)} bad {'PASS' if ok else 'FAIL'}", flush=True)
    for b in bad[:5]:
        print("   ", b)
    return ok


FAST_SLICE, FAST_SMAX = 2048, 126  # src/ops/cuda/sample.cu: slice width and count


def slice_width(N):
    """The fast path's slice width for rows of N columns (fast_slices in sample.cu)."""
    S = min(-(-N // FAST_SLICE), FAST_SMAX)
    return -(-N // S)


def fast_rows(rng, M, N, kind, top_n):
    """Row parameters for the fast path: kind "greedy" (temperature 0) or "topk" (top_k 1, 50,
    64 or 65 -- 65 takes the full algorithm -- with temperature 0.01 .. 5, top-p, min-p);
    penalties and bias on about half of the rows, aimed at random tokens and at the row's top
    (filled in by aim_lists once the logits are known)."""
    rows, pen, bias, po, bo = random_rows(rng, M, N)
    for r in range(M):
        row = rows[r]
        row["top_p"], row["min_p"], row["top_k"] = 1.0, 0.0, 0
        if kind == "greedy":
            row["temperature"] = 0.0
            continue
        row["temperature"] = rng.choice([1.0, 0.7, 0.01, 5.0, 1.3])
        row["top_k"] = [1, 50, 64, 65][r % 4] if r < 8 else rng.choice([1, 2, 50, 64, 65])
        row["top_p"] = rng.choice([1.0, 0.9, 0.5, 1e-6])
        row["min_p"] = rng.choice([0.0, 0.0, 0.05, 0.3])
    return rows, pen, bias, po, bo


def aim_lists(x, params):
    """Points half of each row's penalty and bias entries at its top tokens (by x), so that they
    move the top k: a penalised leader drops, a biased token climbs or falls out."""
    rows, pen, bias, po, bo = params
    for r in range(len(rows)):
        top = np.argsort(-np.nan_to_num(x[r], nan=-np.inf), kind="stable")[:70]
        for e in range(po[r], po[r + 1], 2):
            pen["token"][e] = top[(e * 7) % len(top)]
        for e in range(bo[r], bo[r + 1], 2):
            bias["token"][e] = top[(e * 5) % len(top)]
    # the penalty list has one entry per token (ops.h): keep the first of duplicates only
    keep = np.ones(len(pen), bool)
    for r in range(len(rows)):
        seen = set()
        for e in range(po[r], po[r + 1]):
            keep[e] = int(pen[e]["token"]) not in seen
            seen.add(int(pen[e]["token"]))
    if not keep.all():
        cnt = np.concatenate([[0], np.cumsum(keep)])
        po[:] = cnt[po]
        pen = pen[keep]
    return rows, pen, bias, po, bo


def fast_logits(rng, M, N, gen, rows):
    """Logits for the fast path's boundaries: gen "gauss" / "ties" / "naninf" as logits(), or
    "kth_tie" (each row's k-th and (k+1)-th largest equal: the fallback; greedy rows: their two
    largest equal, in different slices), "span" (the top values packed around the first slice
    boundary, a few inside the top k tied across slices), "inf" (+inf ties, a row of only -inf,
    one of only NaN, one with fewer finite values than k)."""
    x = logits(rng, M, N, "gauss" if gen in ("kth_tie", "span", "inf") else gen)
    W = slice_width(N)
    for r in range(M):
        k = int(rows[r]["top_k"]) if rows[r]["temperature"] > 0 else 1
        order = np.argsort(-x[r], kind="stable")
        if gen == "kth_tie" and 0 < k < N:
            j = int(order[k])
            if r % 3 == 2 and N > 2 * W:  # the tie from another slice than the k-th's
                top = set(int(v) for v in order[:k])
                j = (int(order[k - 1]) + W) % N
                while j in top:
                    j = (j + 1) % N
            x[r][j] = x[r][order[k - 1]]
        elif gen == "span":
            lo = max(0, min(N - 1, W) - 40)
            x[r][lo:lo + 80] += 25.0 + rng.standard_normal(len(x[r][lo:lo + 80])).astype(np.float32)
            if N > W + 100 and r % 2:  # ties inside the top k, across the slice boundary
                x[r][lo + 75] = x[r][lo + 3] = x[r][lo:lo + 80].max() - 0.5
        elif gen == "inf":
            if r % 4 == 0:
                x[r][rng.choice(N, 3, replace=False)] = np.inf
            elif r % 4 == 1:
                x[r][:] = -np.inf if r % 8 == 1 else np.nan
            elif r % 4 == 2:
                x[r][:] = -np.inf
                x[r][rng.choice(N, min(N, max(1, k // 2)), replace=False)] = 1.5
            else:
                x[r][rng.choice(N, N // 3, replace=False)] = np.nan
    return x


def check_fast(L, cpu, rng, M, N, gen, dt, kind, top_n):
    """One fast-path case, run with the fast path on and off on the same inputs (CUDA; on the
    CPU backend both runs are the CPU twin)."""
    rows = fast_rows(rng, M, N, kind, top_n)
    x = fast_logits(rng, M, N, gen, rows[0])
    params = aim_lists(x, rows)
    ok = True
    for mode in ("1", "0"):
        os.environ["RAGGED_SAMPLE_FAST"] = mode
        ok &= compare_sample(L, cpu, x, params, M, N, dt, top_n,
                             f"sample_rows fast={mode} {kind} top_n {top_n} {dt} {gen} ({M}, {N})")
    os.environ.pop("RAGGED_SAMPLE_FAST", None)
    return ok


def check_topk(L, cpu, rng, M, N, gen):
    x = logits(rng, M, N, "ties" if gen == "ties" else "gauss")
    gpu = Dev(L, RG_DEVICE_GPU, "fp32")
    ok = True
    for k in (1, 8, 50, 511, 512, 513):
        if k > N:
            continue
        outs = []
        for dev, method in ((cpu, 0), (gpu, 0), (gpu, 1)):
            idx, val = dev.empty(4 * M * k), dev.empty(4 * M * k)
            st = L.rg_op_topk_rows(dev.be, dev.put(x), M, N, k, method,
                                   dev.empty(L.rg_topk_work_bytes(M, N)), idx, val)
            assert st == 0, L.rg_last_error()
            outs.append(dev.get(idx, (M, k), np.int32))
        good = np.array_equal(outs[0], outs[1]) and np.array_equal(outs[0], outs[2])
        ok &= good
        if not good:
            print(f"   topk k={k}: hier {np.sum(outs[0] != outs[1])} / sort "
                  f"{np.sum(outs[0] != outs[2])} entries differ")
    gpu.close()
    print(f"topk_rows {gen} ({M}, {N}): {'PASS' if ok else 'FAIL'}", flush=True)
    return ok


def check_argmax(L, cpu, rng, M, N, gen, dt):
    """rg_op_argmax_rows (the device greedy choice and its log-prob) against the CPU twin:
    ids identical (the lowest index among equal maxima), log-probs within 1e-5."""
    x = logits(rng, M, N, gen)
    if dt == "fp16":
        x = x.astype(np.float16)
    gpu = Dev(L, RG_DEVICE_GPU, dt)
    outs = []
    for dev, xin in ((cpu, x.astype(np.float32)), (gpu, x)):
        ids, lp = dev.empty(4 * M), dev.empty(4 * M)
        st = L.rg_op_argmax_rows(dev.be, dev.put(xin), M, N, ids, lp)
        assert st == 0, L.rg_last_error()
        outs.append((dev.get(ids, (M,), np.int32), dev.get(lp, (M,), np.float32)))
    gpu.close()
    ok = np.array_equal(outs[0][0], outs[1][0]) and \
        np.allclose(outs[0][1], outs[1][1], rtol=1e-5, atol=1e-5, equal_nan=True)
    if not ok:
        print(f"   argmax: {np.sum(outs[0][0] != outs[1][0])} ids differ, log-prob max diff "
              f"{np.nanmax(np.abs(outs[0][1] - outs[1][1]))}")
    print(f"argmax_rows {gen} {dt} ({M}, {N}): {'PASS' if ok else 'FAIL'}", flush=True)
    return ok


def check_model_steps(V=101):
    """rg_model_step's sampler path on CUDA through graphed decode steps against the NumPy chain
    applied to the logits-only step's logits; the sampler with the logits out equal to both. V:
    the vocabulary (101: too narrow for the fast path's slices; 1000: its greedy and top-k rows
    take it)."""
    import make_decoder
    from dec_util import Seqs
    from ragged_ctypes import Model, row_sampling
    from ref_sample import ref_sample_chain

    d = tempfile.mkdtemp(prefix="smp_llama_")
    make_decoder.make(d, "llama", seed=3, H=256, heads=8, kv_heads=2, layers=2, inter=96,
                      vocab=V, max_pos=2048)
    rng = np.random.default_rng(5)
    m = Model(d, device=DEVICE, dtype="fp32", max_batch_tokens=1024)
    m.kv_init(16, 128)
    s = Seqs(m.kv_info().n_blocks, 3)
    n = 4
    prompts = [[int(v) for v in rng.integers(0, V, 9 + 3 * i)] for i in range(n)]
    nxt = None
    bad = 0
    for step in range(12):
        parts = [(i, prompts[i] if step == 0 else [nxt[i]]) for i in range(n)]
        toks, pos, cu, ctx, slots = [], [], [0], [], []
        for sid, t in parts:
            p, sl = s.part(sid, t)
            toks += [int(v) for v in t]
            pos += p
            cu.append(cu[-1] + len(t))
            ctx.append(s.n[sid])
            slots += sl
        width = max(len(s.blocks[sid]) for sid, _ in parts)
        bt = np.zeros((n, width), np.int32)
        for i, (sid, _) in enumerate(parts):
            bt[i, :len(s.blocks[sid])] = s.blocks[sid]
        rows = [c - 1 for c in cu[1:]]
        args = (toks, pos, cu, ctx, bt, slots, rows)
        lg = m.step(*args)
        kws = [dict(temperature=0.0), dict(temperature=0.8, top_k=10, u=float(rng.random())),
               dict(temperature=1.1, top_p=0.9, min_p=0.01, u=float(rng.random()),
                    penalty=([1, 2], [1, 0], [1, 1]), repetition_penalty=1.2),
               dict(temperature=1.0, u=float(rng.random()), bias=([3], [2.0]))]
        ids, lps, tid, _ = m.step_sample([row_sampling(**k) for k in kws], *args, top_n=3)
        # the sampler with the logits out (the serving engine's steps with beam rows; eager, never
        # a graph): the same ids and the same logits as the logits-only step
        kept = m.step_sample_logits([row_sampling(**k) for k in kws], *args, top_n=3,
                                    keep=[r % 2 == 0 for r in range(len(kws))])
        if not (np.array_equal(kept[0], ids) and np.array_equal(kept[2], tid) and
                np.allclose(kept[4][::2], lg[::2], rtol=1e-6, atol=1e-6) and
                np.all(np.isnan(kept[4][1::2]))):
            bad += 1
            print(f"   step {step}: step_sample_logits differs: ids {kept[0]} vs {ids}, "
                  f"max |logits diff| {np.nanmax(np.abs(kept[4][::2] - lg[::2])):.3g}")
        # rg_step_out's other combinations: logits-only with want_logits (decode steps graphed:
        # the wanted rows copied out of the pinned chunk), greedy with the logits out (eager),
        # rows NULL with top_n (the sampler's graph, greedy rows)
        want = [r % 2 == 1 for r in range(n)]
        sub = m.step_out(*args, logits=True, want_logits=want)["logits"]
        gr = m.step_out(*args, ids=True, logits=True)
        ga = m.step_out(*args, ids=True)
        gt = m.step_out(*args, ids=True, top_n=3)
        am = [int(np.argmax(x)) for x in lg]
        if not (np.allclose(sub[1::2], lg[1::2], rtol=1e-6, atol=1e-6) and
                np.all(np.isnan(sub[::2])) and
                np.allclose(gr["logits"], lg, rtol=1e-6, atol=1e-6) and
                gr["ids"].tolist() == am and ga["ids"].tolist() == am and
                np.array_equal(gr["logprobs"], ga["logprobs"]) and gt["ids"].tolist() == am and
                gt["top_ids"][:, 0].tolist() == am):
            bad += 1
            print(f"   step {step}: step_out combinations differ: argmax {am}, greedy+logits "
                  f"{gr['ids']}, greedy {ga['ids']}, greedy top-3 {gt['ids']}")
        for r, k in enumerate(kws):
            rid, rlp, rt, _ = ref_sample_chain(lg[r], top_n=3, **k)
            if ids[r] != rid or abs(lps[r] - rlp) > 1e-4 or tid[r].tolist() != rt.tolist():
                bad += 1
                print(f"   step {step} row {r}: {ids[r]} {lps[r]:.6g} {tid[r]} vs "
                      f"{rid} {rlp:.6g} {rt}")
        nxt = [int(v) for v in ids]
    ok = bad == 0
    print(f"model step_sample ({DEVICE} fp32, vocab {V}, 12 steps): {bad} mismatches "
          f"{'PASS' if ok else 'FAIL'}", flush=True)
    m.close()
    return ok


def main():
    L = load()
    rng = np.random.default_rng(0)
    cpu = Dev(L, RG_DEVICE_CPU, "fp32")
    ok = True
    quick = os.environ.get("SAMPLE_QUICK") == "1"  # under compute-sanitizer: small shapes
    shapes = ((3, 50257), (37, 1000), (5, 7)) if quick else \
        ((1, 50257), (16, 50257), (8, 151936), (37, 1000), (5, 7))
    for M, N in shapes:
        for gen in ("gauss", "ties", "naninf"):
            for dt in (("fp32",) if quick else ("fp32", "fp16")):
                ok &= check_sample(L, cpu, rng, M, N, gen, dt)
    for M, N in ((1, 50257), (16, 50257), (3, 151936), (37, 1000), (5, 7), (2, 2048 * 64 + 1)):
        for gen in ("gauss", "ties", "naninf"):
            for dt in (("fp32", "fp16") if DEVICE == "cuda" else ("fp32",)):
                ok &= check_argmax(L, cpu, rng, M, N, gen, dt)
    for M, N in ((3, 7), (4, 1000), (2, 50257)) + (() if quick else ((2, 151936),)):
        for gen in ("gauss", "ties"):
            ok &= check_topk(L, cpu, rng, M, N, gen)
    # the fast path: every (M, N) with sampled and greedy rows on its generators, a few with fp16
    fast_shapes = ((4, 50257), (16, 1000), (3, 7)) if quick else \
        ((1, 50257), (4, 50257), (16, 50257), (64, 50257), (4, 151936), (64, 151936),
         (16, 1000), (64, 1000), (5, 7))
    for i, (M, N) in enumerate(fast_shapes):
        for gen in ("gauss", "kth_tie", "span", "ties", "inf", "naninf"):
            if quick and gen in ("ties", "naninf"):
                continue
            dt = "fp16" if (i + len(gen)) % 3 == 0 and DEVICE == "cuda" else "fp32"
            ok &= check_fast(L, cpu, rng, M, N, gen, dt, "topk", TOPN if gen != "span" else 20)
            ok &= check_fast(L, cpu, rng, M, N, gen, dt, "greedy",
                             (0, 1, 8, 20)[(i + len(gen)) % 4])
    cpu.close()
    if not quick:
        ok &= check_model_steps(101)
        ok &= check_model_steps(1000)
    print("ALL PASS" if ok else "SOME FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
