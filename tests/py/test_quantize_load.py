"""rg_model_params.quantize Q8_0 (issue 30 item 1): a tiny random Hugging Face Llama
(safetensors, make_decoder.py) whose float GEMM weights ragged quantizes at load, against
references built without ragged's code:

  1. the quantizer (rg_gguf_quantize_q8_0, the function the loader calls) equals
     gguf.quants.quantize(W, Q8_0) of the `gguf` package byte for byte, on every GEMM weight of
     the model and on edge blocks (all zero, fp16-subnormal and large scales, exact halves);
  2. the CPU logits equal ref_llama_gguf's float64 Llama over a GGUF holding
     gguf.quants.quantize's Q8_0 blocks of the same weights (token_embd F32, the head's
     blocks as output.weight even when tied), with the GEMMs' activation rounding simulated
     (test_gguf_quant._q8), within test_gguf_quant's TOL_SIM (1e-3);
  3. rg_model_info.weight_bytes: the GEMM weights at 34 bytes per 32 values (34/128 of fp32),
     the embedding table and norms fp32, within 1 KiB (the RoPE frequencies), and
     quantized_weights = QKV, O, gate/up, down per layer + the head;
  4. greedy ids equal those of ragged running that Q8_0 GGUF (the same blocks), and the
     logits agree to 1e-5 of their scale (only the q/k row permutation of GGUF differs).
  5. refusals: an unknown quantize value is RG_ERR_INVALID_INPUT; --quantize fp8 is a usage
     error of the CLI; Generator(quantize="fp8") is a ValueError (and Generator(quantize="q8_0")'s
     greedy ids equal the step loop's); on an already-quantized GGUF
     (Q4_0) quantize is a no-op (same logits and bytes).
Measured (seed 7): 2.2e-7 / 1.3e-7 (untied / tied) of the logits' scale against the simulated
reference, 1.6e-2 / 6.8e-3 against the unsimulated one, 2.6e-7 / 1.8e-7 against the GGUF twin;
weight_bytes 131488 against 378144 / 337184 loaded at fp32."""
import ctypes
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
import make_decoder  # noqa: E402
from test_gguf_quant import SPEC, TOL_SIM, _q8  # noqa: E402

Q8 = gguf.GGMLQuantizationType.Q8_0
T = 23
N_NEW = 8


def _quantize_lib(x):
    l = rc.lib()
    l.rg_gguf_quantize_q8_0.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p]
    l.rg_gguf_quantize_q8_0.restype = None
    x = np.ascontiguousarray(x, np.float32)
    out = np.zeros(x.size // 32 * 34, np.uint8)
    l.rg_gguf_quantize_q8_0(x.ctypes.data, x.size, out.ctypes.data)
    return out


def _gemm_names(cfg):
    for l in range(cfg["num_hidden_layers"]):
        for n in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                  "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"):
            yield f"model.layers.{l}.{n}.weight"


def _model(tmp_path, tie, seed=7):
    cfg, w = make_decoder.make(str(tmp_path / "hf"), "llama", seed=seed, **dict(SPEC, tie=tie))
    return str(tmp_path / "hf"), cfg, w


def _gguf_twin(tmp_path, cfg, w):
    """The same weights as a GGUF: GEMM weights and the head in gguf.quants' Q8_0 blocks, the
    embedding table F32 (what ragged's gather reads), the head written out even when tied."""
    w = dict(w)
    w.setdefault("lm_head.weight", w["model.embed_tokens.weight"])
    return hf_to_gguf.write(tmp_path / "twin-q8_0.gguf", cfg, w,
                            qtype=lambda n: None if n == "token_embd.weight" else Q8)


def _logits(path, ids, **kw):
    """Every position's logits: a prefill of T - 2 tokens, then two decode steps."""
    m = rc.Model(path, max_batch_tokens=64, **kw)
    try:
        info = m.info()
        m.kv_init(8, 8)
        bt = np.arange(8, dtype=np.int32)[None, :]
        n0 = len(ids) - 2
        rows = [m.step(ids[:n0], list(range(n0)), [0, n0], [n0], bt, list(range(n0)),
                       np.arange(n0))]
        for p in range(n0, len(ids)):
            rows.append(m.step(ids[p:p + 1], [p], [0, 1], [p + 1], bt, [p], np.arange(1)))
        return np.concatenate(rows, 0), int(info.weight_bytes), int(info.quantized_weights)
    finally:
        m.close()


def _greedy(path, ids, n_new, **kw):
    m = rc.Model(path, max_batch_tokens=64, **kw)
    try:
        m.kv_init(8, 8)
        bt = np.arange(8, dtype=np.int32)[None, :]
        n = len(ids)
        lg = m.step(ids, list(range(n)), [0, n], [n], bt, list(range(n)), np.array([n - 1]))
        out = [int(np.argmax(lg[-1]))]
        for _ in range(n_new - 1):
            p = n + len(out) - 1
            lg = m.step([out[-1]], [p], [0, 1], [p + 1], bt, [p], np.arange(1))
            out.append(int(np.argmax(lg[-1])))
        return out
    finally:
        m.close()


@pytest.mark.filterwarnings("ignore:overflow encountered in cast")  # the fp16-inf d block
def test_quantizer_equals_gguf_package(tmp_path):
    _, cfg, w = _model(tmp_path, tie=False)
    for n in list(_gemm_names(cfg)) + ["lm_head.weight", "model.embed_tokens.weight"]:
        W = np.asarray(w[n], np.float32)
        want = np.asarray(gguf.quants.quantize(W, Q8), np.uint8).reshape(-1)
        assert np.array_equal(_quantize_lib(W), want), n
    rng = np.random.default_rng(1)
    edge = [np.zeros(32, np.float32),                                  # d = 0
            rng.standard_normal(32).astype(np.float32) * 1e-6,         # fp16-subnormal d
            rng.standard_normal(32).astype(np.float32) * 1e-9,         # d flushes to fp16 0
            rng.standard_normal(32).astype(np.float32) * 6e6,          # d rounds to fp16 inf
            rng.standard_normal(32).astype(np.float32) * 3e3,
            np.float32(127.0 / 2) * np.arange(-16, 16, dtype=np.float32) / 8,  # halves
            np.concatenate([[127.0], np.arange(31) + 0.5]).astype(np.float32)]
    for x in edge + [rng.standard_normal((9, 96)).astype(np.float32)]:
        want = np.asarray(gguf.quants.quantize(x.reshape(-1, 32), Q8), np.uint8).reshape(-1)
        assert np.array_equal(_quantize_lib(x), want), x[:4]


@pytest.mark.parametrize("tie", [False, True])
def test_quantized_at_load_logits_bytes_greedy(tmp_path, tie):
    d, cfg, w = _model(tmp_path, tie)
    twin = _gguf_twin(tmp_path, cfg, w)
    ids = list(np.random.default_rng(3).integers(0, cfg["vocab_size"], T))
    r = ref_llama_gguf.GgufLlama(twin)
    ref_sim = r.logits(ids, act_q=_q8)
    scale = np.abs(ref_sim).max()

    got, nbytes, nq = _logits(d, ids, quantize="q8_0")
    err = np.abs(got - ref_sim).max() / scale
    assert err <= TOL_SIM, err
    got_f32, bytes_f32, nq_f32 = _logits(d, ids)
    assert np.abs(got_f32 - got).max() / scale > 10 * err  # the int8 path really ran

    # resident bytes: GEMM weights (and the head, tied or not) in blocks, the rest fp32
    gemm = sum(np.asarray(w[n]).size for n in _gemm_names(cfg))
    head = cfg["vocab_size"] * cfg["hidden_size"]
    emb = 4 * head
    norms = 4 * cfg["hidden_size"] * (2 * cfg["num_hidden_layers"] + 1)
    want = (gemm + head) // 32 * 34 + emb + norms
    assert want <= nbytes <= want + 1024, (nbytes, want)
    want_f32 = 4 * gemm + emb + norms + (0 if tie else 4 * head)
    assert want_f32 <= bytes_f32 <= want_f32 + 1024, (bytes_f32, want_f32)
    assert (nq, nq_f32) == (4 * cfg["num_hidden_layers"] + 1, 0)

    # the same blocks from a GGUF file: the same model up to the q/k row order
    got_twin, bytes_twin, nq_twin = _logits(twin, ids)
    assert np.abs(got_twin - got).max() / scale <= 1e-5
    assert nq_twin == nq
    assert _greedy(d, ids, N_NEW, quantize="q8_0") == _greedy(twin, ids, N_NEW)


def test_quantize_refusals_and_noop(tmp_path):
    d, cfg, w = _model(tmp_path, tie=False)
    with pytest.raises(rc.RaggedError) as e:
        rc.Model(d, max_batch_tokens=64, quantize=7)
    assert "INVALID_INPUT" in str(e.value) and "quantize" in str(e.value)

    bin_ = rc.BIN_PATH
    p = subprocess.run([bin_, "info", "--model", d, "--quantize", "fp8"], capture_output=True,
                       text=True)
    assert p.returncode != 0 and "fp8 is not implemented" in p.stderr, p.stderr
    p = subprocess.run([bin_, "info", "--model", d, "--quantize", "q8_0"], capture_output=True,
                       text=True)
    assert p.returncode == 0, p.stderr
    import json
    info = json.loads(p.stdout)["model"]
    p0 = subprocess.run([bin_, "info", "--model", d], capture_output=True, text=True)
    info0 = json.loads(p0.stdout)["model"]
    assert info["quantized_weights"] == 4 * cfg["num_hidden_layers"] + 1
    assert info["weight_bytes"] < 0.5 * info0["weight_bytes"], (info, info0)

    sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
    import ragged
    with pytest.raises(ValueError, match="fp8"):
        ragged.Generator(d, quantize="fp8")
    # the Python API's greedy ids through rg_generate equal the step loop's (_greedy)
    prompt = [int(t) for t in np.random.default_rng(6).integers(0, cfg["vocab_size"], 7)]
    with ragged.Generator(d, quantize="q8_0") as g:
        r = g.generate([prompt], max_tokens=N_NEW, ignore_eos=True)
    assert r[0]["ids"] == _greedy(d, prompt, N_NEW, quantize="q8_0")

    # a GGUF already quantized: its blocks are kept, quantize changes nothing
    q4 = hf_to_gguf.write(tmp_path / "q4_0.gguf", cfg, w, qtype=gguf.GGMLQuantizationType.Q4_0)
    ids = list(np.random.default_rng(5).integers(0, cfg["vocab_size"], 9))
    a = _logits(q4, ids)
    b = _logits(q4, ids, quantize="q8_0")
    assert np.array_equal(a[0], b[0]) and a[1:] == b[1:]



def _gpt2_sim(cfg, w, ids, aq):
    """ref_decoder.gpt2_forward (float64) with aq applied to every activation entering a weight
    product (the Conv1D GEMMs and the head), as ref_llama_gguf.logits(act_q=) does."""
    import math
    import ref_decoder as rd
    H, nh, eps = cfg["n_embd"], cfg["n_head"], cfg["layer_norm_epsilon"]
    hd, T = H // nh, len(ids)
    g = lambda n: np.asarray(w[n], np.float64)  # noqa: E731
    h = g("wte.weight")[np.asarray(ids)] + g("wpe.weight")[np.arange(T)]
    for l in range(cfg["n_layer"]):
        p = f"h.{l}."
        a = rd._layer_norm(h, g(p + "ln_1.weight"), g(p + "ln_1.bias"), eps)
        qkv = aq(a) @ g(p + "attn.c_attn.weight") + g(p + "attn.c_attn.bias")
        q, k, v = (qkv[:, i * H:(i + 1) * H].reshape(T, nh, hd).transpose(1, 0, 2)
                   for i in range(3))
        ctx = rd._causal_attention(q, k, v, 1.0 / math.sqrt(hd))
        h = h + aq(ctx) @ g(p + "attn.c_proj.weight") + g(p + "attn.c_proj.bias")
        m = rd._layer_norm(h, g(p + "ln_2.weight"), g(p + "ln_2.bias"), eps)
        m = rd._gelu_new(aq(m) @ g(p + "mlp.c_fc.weight") + g(p + "mlp.c_fc.bias"))
        h = h + aq(m) @ g(p + "mlp.c_proj.weight") + g(p + "mlp.c_proj.bias")
    h = rd._layer_norm(h, g("ln_f.weight"), g("ln_f.bias"), eps)
    return aq(h) @ g("lm_head.weight").T


def test_gpt2_conv1d_quantized_at_load(tmp_path):
    """GPT-2: the Conv1D weights (transposed to (out, in) at load) and the tied head quantized,
    the wte / wpe gathers fp32, against a float64 GPT-2 (_gpt2_sim) over the same weights
    replaced by gguf.quants' Q8_0 round trip of each (out, in) row, with the activation rounding
    simulated (TOL_SIM); resident bytes and quantized_weights as for the Llama."""
    d = str(tmp_path / "gpt2")
    cfg, w = make_decoder.make(d, "gpt2", seed=3, H=64, heads=4, layers=2, vocab=96, n_pos=64)

    def rt(W):  # an (out, in) row-major Q8_0 round trip
        W = np.ascontiguousarray(W, np.float32)
        return gguf.quants.dequantize(gguf.quants.quantize(W, Q8), Q8).reshape(W.shape)
    wq = dict(w)
    for l in range(cfg["n_layer"]):
        for n in ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"):
            k = f"h.{l}.{n}.weight"
            wq[k] = rt(np.asarray(w[k]).T).T
    wq["lm_head.weight"] = rt(w["wte.weight"])
    ids = list(np.random.default_rng(4).integers(0, cfg["vocab_size"], 11))
    ref_sim = _gpt2_sim(cfg, wq, ids, _q8)
    got, nbytes, nq = _logits(d, ids, quantize="q8_0")
    scale = np.abs(ref_sim).max()
    err = np.abs(got - ref_sim).max() / scale
    assert err <= TOL_SIM, err
    ref_f32 = _gpt2_sim(cfg, w | {"lm_head.weight": w["wte.weight"]}, ids, lambda a: a)
    assert np.abs(got - ref_f32).max() / scale > 10 * err  # the quantized weights ran
    assert nq == 4 * cfg["n_layer"] + 1
    _, bytes_f32, _ = _logits(d, ids)
    H, V = cfg["n_embd"], cfg["vocab_size"]
    gemm = cfg["n_layer"] * (3 * H * H + H * H + 2 * 4 * H * H)
    assert bytes_f32 - nbytes == 4 * gemm - (gemm + V * H) // 32 * 34, (bytes_f32, nbytes)


@pytest.mark.filterwarnings("ignore:overflow encountered in cast")
def test_float_to_half_equals_numpy():
    """rg_float_to_half (the Q8_0 scale's rounding) against NumPy's astype(np.float16) on 200000
    random float32 bit patterns, every exponent, and the ties around the fp16 subnormal, normal
    and overflow boundaries; NaN only as NaN."""
    l = rc.lib()
    l.rg_float_to_half.argtypes = [ctypes.c_float]
    l.rg_float_to_half.restype = ctypes.c_uint16
    rng = np.random.default_rng(2)
    bits = rng.integers(0, 2 ** 32, 1 << 20, dtype=np.uint64).astype(np.uint32)
    edge = np.array([0.0, -0.0, 2.0 ** -25, 2.0 ** -24, 1.5 * 2.0 ** -24, 2.0 ** -14,
                     2.0 ** -14 - 2.0 ** -25, 65504.0, 65519.99, 65520.0, np.inf, -np.inf,
                     1.0 + 2.0 ** -11, 1.0 + 3 * 2.0 ** -11], np.float32)
    x = np.concatenate([bits.view(np.float32), edge])
    x = x[~np.isnan(x)][:200000]  # ctypes calls: a sample keeps it fast
    got = np.array([l.rg_float_to_half(float(v)) for v in x], np.uint16)
    assert np.array_equal(got, x.astype(np.float16).view(np.uint16))
    assert np.isnan(np.uint16(l.rg_float_to_half(float("nan"))).view(np.float16))
