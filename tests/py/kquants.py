"""A plain NumPy quantizer to ggml's Q4_K, Q5_K and Q6_K blocks, for test models: the `gguf`
package (0.19) dequantizes K-quants but its quantize() raises NotImplementedError for them. The
block layouts are ggml's (block_q4_K / block_q5_K / block_q6_K in ggml-common.h, the order
gguf.quants.dequantize reads); the choice of scales is the simplest one (per 32-value sub-block
a min / max fit, Q6_K's per-16 max |x|), not llama-quantize's search: only the layout must be
right, and tests decode the file with gguf.quants.dequantize, never with this module.
test_gguf_quant.py checks quantize -> gguf.quants.dequantize against the input within the
format's step."""
import numpy as np

QK_K = 256


def _f16(x):
    """float16 values (rounded) and their little-endian bytes, per row."""
    h = np.asarray(x, np.float32).astype(np.float16)
    return h.astype(np.float32), h.view(np.uint8).reshape(*h.shape[:-1], -1)


def _pack_scales(sc, mn):
    """(n, 8) 6-bit scales and mins -> (n, 12) bytes (ggml's get_scale_min_k4, inverted)."""
    sc, mn = sc.astype(np.uint8), mn.astype(np.uint8)
    out = np.zeros((sc.shape[0], 12), np.uint8)
    out[:, 0:4] = sc[:, 0:4] | ((sc[:, 4:8] >> 4) << 6)
    out[:, 4:8] = mn[:, 0:4] | ((mn[:, 4:8] >> 4) << 6)
    out[:, 8:12] = (sc[:, 4:8] & 15) | ((mn[:, 4:8] & 15) << 4)
    return out


def _q45_k(x, qmax):
    """Shared fit of Q4_K (qmax 15) and Q5_K (31): x (n, 256) -> d, dmin (n, 1) f32 of fp16,
    their bytes, packed scales (n, 12) and q (n, 8, 32) in 0..qmax, with
    x ~ d sc[s] q - dmin mn[s]."""
    n = x.shape[0]
    xs = x.reshape(n, 8, 32)
    mnf = np.maximum(0.0, -xs.min(-1))                     # the offset, >= 0
    scf = (xs.max(-1) + mnf) / qmax                        # the step
    d, db = _f16(scf.max(-1, keepdims=True) / 63)
    dm, dmb = _f16(mnf.max(-1, keepdims=True) / 63)
    sc = np.clip(np.rint(np.divide(scf, d, out=np.zeros_like(scf), where=d > 0)), 0, 63)
    mn = np.clip(np.rint(np.divide(mnf, dm, out=np.zeros_like(mnf), where=dm > 0)), 0, 63)
    step = (d * sc)[..., None]
    q = np.rint(np.divide(xs + (dm * mn)[..., None], step, out=np.zeros_like(xs),
                          where=step > 0))
    q = np.clip(q, 0, qmax).astype(np.uint8)
    return db, dmb, _pack_scales(sc, mn), q


def quantize_q4_k(x):
    """x (..., K) float, K % 256 == 0 -> (..., K / 256 * 144) uint8 Q4_K blocks:
    {fp16 d, dmin; u8 scales[12]; u8 qs[128]}, sub-block 2k in the low nibbles of
    qs[32k .. 32k + 32), 2k + 1 in the high ones."""
    shp = x.shape
    x = np.asarray(x, np.float32).reshape(-1, QK_K)
    db, dmb, scb, q = _q45_k(x, 15)
    qs = (q[:, 0::2] | (q[:, 1::2] << 4)).reshape(-1, 128)
    return np.concatenate([db, dmb, scb, qs], 1).reshape(*shp[:-1], -1)


def quantize_q5_k(x):
    """As quantize_q4_k with a fifth bit per value: {fp16 d, dmin; u8 scales[12]; u8 qh[32];
    u8 qs[128]}, bit s of qh[l] the top bit of sub-block s's value l; 176 bytes per 256."""
    shp = x.shape
    x = np.asarray(x, np.float32).reshape(-1, QK_K)
    db, dmb, scb, q = _q45_k(x, 31)
    lo = q & 15
    qs = (lo[:, 0::2] | (lo[:, 1::2] << 4)).reshape(-1, 128)
    qh = np.zeros((x.shape[0], 32), np.uint8)
    for s in range(8):
        qh |= ((q[:, s] >> 4) & 1) << s
    return np.concatenate([db, dmb, scb, qh, qs], 1).reshape(*shp[:-1], -1)


def quantize_q6_k(x):
    """x (..., K) -> Q6_K blocks {u8 ql[128]; u8 qh[64]; i8 scales[16]; fp16 d} (210 bytes per
    256): per 16 values a signed scale, x ~ d scales[e / 16] (q - 32), q in 0..63; value
    e = 128 h + r keeps its low 4 bits in ql[64 h + r % 64] (high nibble when r >= 64) and its
    top 2 in qh[32 h + r % 32] at bit 2 (r / 32)."""
    shp = x.shape
    x = np.asarray(x, np.float32).reshape(-1, QK_K)
    n = x.shape[0]
    xs = x.reshape(n, 16, 16)
    sf = np.abs(xs).max(-1) / 31.0
    d, db = _f16(sf.max(-1, keepdims=True) / 127)
    sc = np.clip(np.rint(np.divide(sf, d, out=np.zeros_like(sf), where=d > 0)), -128, 127)
    step = (d * sc)[..., None]
    q = np.rint(np.divide(xs, step, out=np.zeros_like(xs), where=step != 0))
    q = (np.clip(q, -32, 31) + 32).astype(np.uint8).reshape(n, 2, 128)  # [h, r]
    ql = np.zeros((n, 2, 64), np.uint8)
    qh = np.zeros((n, 2, 32), np.uint8)
    for j in range(4):  # r in [32 j, 32 j + 32)
        part = q[:, :, 32 * j:32 * j + 32]
        ql[:, :, 32 * (j & 1):32 * (j & 1) + 32] |= (part & 15) << (4 * (j // 2))
        qh |= (part >> 4) << (2 * j)
    scb = sc.astype(np.int8).view(np.uint8)
    return np.concatenate([ql.reshape(n, 128), qh.reshape(n, 64), scb, db],
                          1).reshape(*shp[:-1], -1)


def quantize(x, qtype):
    """gguf.quants.quantize's signature for the three K-quants (qtype a
    gguf.GGMLQuantizationType)."""
    name = getattr(qtype, "name", str(qtype))
    f = {"Q4_K": quantize_q4_k, "Q5_K": quantize_q5_k, "Q6_K": quantize_q6_k}.get(name)
    if f is None:
        raise ValueError(f"kquants: {name} is not a K-quant")
    return f(x)
