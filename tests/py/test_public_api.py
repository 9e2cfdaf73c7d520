"""The public library (build/libragged.so, or RAGGED_LIB): it exports exactly the functions that
include/ragged.h marks RG_API, links neither the HTTP server's nor the cost store's libraries,
and embeds by itself: a tiny model through the public API alone, against the float64 reference.
The ragged binary (build/ragged, or RAGGED_BIN) is built on it (issue 27, item 4): app/ and
tools/ include ragged.h, the stateless src/core utilities they compile in and their own headers;
the binary links libragged.so and defines none of its public functions, so the error message and
the tuning table it reads are the library's."""
import ctypes
import json
import os
import re
import shutil
import subprocess

import numpy as np
import pytest

import ragged_ctypes as rc
from conftest import assert_embeddings_close
from ref_bert import RefBert

HEADER = os.path.join(rc.ROOT, "include", "ragged.h")


def public_names():
    """Functions declared RG_API (the macro alone on a line marks the declaration below it)."""
    names, lines = set(), open(HEADER).read().splitlines()
    for i, line in enumerate(lines):
        if line.startswith("RG_API"):
            decl = line if "(" in line else line + " " + lines[i + 1]
            m = re.search(r"\b(rg_[a-z0-9_]+)\(", decl)
            if m:
                names.add(m.group(1))
    return names


@pytest.mark.skipif(shutil.which("nm") is None, reason="nm (binutils) missing")
def test_exports_only_the_public_api():
    out = subprocess.run(["nm", "-D", "--defined-only", rc.PUBLIC_LIB_PATH], capture_output=True,
                         text=True, check=True).stdout
    exported = {line.split()[-1] for line in out.splitlines() if line.strip()}
    want = public_names()
    assert len(want) >= 10, want  # the header parse found the API
    assert exported == want, (f"extra: {sorted(exported - want)}; "
                              f"missing: {sorted(want - exported)}")


@pytest.mark.skipif(shutil.which("ldd") is None, reason="ldd missing")
def test_library_links_no_server_libraries():
    out = subprocess.run(["ldd", rc.PUBLIC_LIB_PATH], capture_output=True, text=True).stdout
    for lib in ("libmicrohttpd", "libsqlite3"):
        assert lib not in out, f"{rc.PUBLIC_LIB_PATH} links {lib}"


def test_embed_through_the_public_library(tiny_dirs):
    d = tiny_dirs["h32_gelu"]
    l = ctypes.CDLL(rc.PUBLIC_LIB_PATH)
    l.rg_model_load.restype = ctypes.c_void_p
    l.rg_model_load.argtypes = [ctypes.c_char_p, ctypes.POINTER(rc.ModelParams),
                                ctypes.POINTER(ctypes.c_int)]
    l.rg_model_params_default.restype = rc.ModelParams
    l.rg_model_free.argtypes = [ctypes.c_void_p]
    l.rg_last_error.restype = ctypes.c_char_p
    p = l.rg_model_params_default()
    st = ctypes.c_int(-1)
    h = l.rg_model_load(d.encode(), ctypes.byref(p), ctypes.byref(st))
    assert h and st.value == 0, l.rg_last_error()
    try:
        ref = RefBert(d)
        seqs = [[101, 2000, 2001, 102], [101, 3000, 102], [101]]
        tokens = np.array([t for s in seqs for t in s], np.int32)
        cu = np.cumsum([0] + [len(s) for s in seqs]).astype(np.int32)
        out = np.full((len(seqs), ref.H), np.nan, np.float32)
        assert l.rg_model_embed(ctypes.c_void_p(h), tokens.ctypes.data_as(ctypes.c_void_p),
                                cu.ctypes.data_as(ctypes.c_void_p), len(seqs),
                                out.ctypes.data_as(ctypes.c_void_p)) == 0, l.rg_last_error()
        assert_embeddings_close(out, ref.embed_batch(seqs), "public library", dtype="fp32")
    finally:
        l.rg_model_free(ctypes.c_void_p(h))


def test_one_decoder_step_function():
    """The decoder step is one function with an output descriptor (issue 27): rg_model_step and
    rg_step_out, none of the variants it replaced (_argmax, _sample, _sample_logits)."""
    names = public_names()
    assert "rg_model_step" in names
    assert not [n for n in names if n.startswith("rg_model_step_")], sorted(names)
    assert "typedef struct rg_step_out {" in open(HEADER).read()


def test_decoder_step_through_the_public_library(tmp_path):
    """A greedy prefill step of a tiny random-weight GPT-2 through the public library alone
    (rg_model_step with an rg_step_out asking for ids, log-probs and the logits): the logits
    are the float64 reference's, the id their argmax."""
    import make_decoder
    import ref_decoder
    d = str(tmp_path / "gpt2")
    cfg, w = make_decoder.make(d, "gpt2", seed=7, H=32, heads=4, layers=2, vocab=97, n_pos=64)
    l = ctypes.CDLL(rc.PUBLIC_LIB_PATH)
    l.rg_model_load.restype = ctypes.c_void_p
    l.rg_model_load.argtypes = [ctypes.c_char_p, ctypes.POINTER(rc.ModelParams),
                                ctypes.POINTER(ctypes.c_int)]
    l.rg_model_params_default.restype = rc.ModelParams
    l.rg_model_free.argtypes = [ctypes.c_void_p]
    l.rg_model_kv_init.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
    l.rg_model_step.argtypes = [ctypes.c_void_p, ctypes.POINTER(rc.StepBatch),
                                ctypes.POINTER(rc.StepOut)]
    l.rg_last_error.restype = ctypes.c_char_p
    p = l.rg_model_params_default()
    st = ctypes.c_int(-1)
    h = l.rg_model_load(d.encode(), ctypes.byref(p), ctypes.byref(st))
    assert h and st.value == 0, l.rg_last_error()
    try:
        assert l.rg_model_kv_init(ctypes.c_void_p(h), 4, 4) == 0, l.rg_last_error()
        toks = [3, 17, 40, 2, 96, 11]
        i32 = lambda a: np.ascontiguousarray(a, np.int32)
        arrs = [i32(toks), i32(range(6)), i32([0, 6]), i32([6]), i32([[2, 0]]),
                i32([8, 9, 10, 11, 0, 1]), i32([5, 2])]
        b = rc.StepBatch(6, arrs[0].ctypes.data, arrs[1].ctypes.data, 1, arrs[2].ctypes.data,
                         arrs[3].ctypes.data, 2, arrs[4].ctypes.data, arrs[5].ctypes.data, 2,
                         arrs[6].ctypes.data)
        ids = np.full(2, -1, np.int32)
        lps = np.full(2, np.nan, np.float32)
        lg = np.full((2, 97), np.nan, np.float32)
        o = rc.StepOut(ids=ids.ctypes.data, logprobs=lps.ctypes.data, logits=lg.ctypes.data)
        assert l.rg_model_step(ctypes.c_void_p(h), ctypes.byref(b), ctypes.byref(o)) == 0, \
            l.rg_last_error()
        ref = ref_decoder.forward(cfg, w, toks)[[5, 2]]
        assert np.abs(lg - ref).max() <= 1e-5 * np.abs(ref).max()
        assert ids.tolist() == [int(np.argmax(r)) for r in lg]
        x = lg.astype(np.float64) - lg.max(axis=1, keepdims=True)
        want = (x - np.log(np.exp(x).sum(axis=1, keepdims=True)))[[0, 1], ids]
        assert np.all(np.abs(lps - want) <= 1e-5 * np.maximum(1.0, np.abs(want)))
    finally:
        l.rg_model_free(ctypes.c_void_p(h))


def app_core_modules():
    """The src/core modules the ragged binary compiles in (the Makefile's APP_CORE)."""
    with open(os.path.join(rc.ROOT, "Makefile")) as f:
        m = re.search(r"^APP_CORE := (.*)$", f.read(), re.M)
    assert m, "Makefile: no APP_CORE line"
    return {w.split(".")[0] for w in m.group(1).split()}


def test_app_includes_only_the_public_header():
    """app/ and tools/ include ragged.h, their own headers (server/, loadgen/) and the headers of
    the core modules they compile in, plus core/error.h (whose setters are public); never a
    library module's header, nor that of a core module with state (tuning.h, threadpool.h),
    whose functions the binary cannot link."""
    core = {f"core/{m}.h" for m in app_core_modules()} | {"core/error.h"}
    bad = []
    for top in ("app", "tools"):
        for d, _, files in os.walk(os.path.join(rc.ROOT, top)):
            for f in sorted(files):
                if not f.endswith((".c", ".h")):
                    continue
                path = os.path.join(d, f)
                for n, line in enumerate(open(path, encoding="utf-8"), 1):
                    m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
                    if m and not (m.group(1) == "ragged.h" or m.group(1) in core or
                                  re.match(r"(server|loadgen)/", m.group(1))):
                        bad.append(f"{os.path.relpath(path, rc.ROOT)}:{n}: {m.group(1)}")
    assert not bad, bad


@pytest.mark.skipif(shutil.which("readelf") is None or shutil.which("nm") is None,
                    reason="readelf / nm (binutils) missing")
def test_binary_links_the_public_library():
    dyn = subprocess.run(["readelf", "-d", rc.BIN_PATH], capture_output=True, text=True,
                         check=True).stdout
    assert "Shared library: [libragged.so]" in dyn, dyn
    assert "Library runpath: [$ORIGIN" in dyn, dyn  # build/: $ORIGIN; installed: $ORIGIN/../lib
    out = subprocess.run(["nm", "--defined-only", rc.BIN_PATH], capture_output=True, text=True,
                         check=True).stdout
    defined = {line.split()[-1] for line in out.splitlines() if line.strip()}
    assert not defined & public_names(), sorted(defined & public_names())


def _public():
    l = ctypes.CDLL(rc.PUBLIC_LIB_PATH)
    l.rg_last_error.restype = ctypes.c_char_p
    return l


def test_error_setters_set_the_last_error():
    """rg_errorf / rg_error_wrap / rg_error_clear write the message rg_last_error() reads: the
    one the ragged binary's own errors land in."""
    l = _public()
    assert l.rg_errorf(4, b"cannot open %s", b"x.json") == 4  # RG_ERR_IO
    assert l.rg_last_error() == b"cannot open x.json"
    assert l.rg_error_wrap(5, b"model %d", 3) == 5
    assert l.rg_last_error() == b"model 3: cannot open x.json"
    l.rg_error_clear()
    assert l.rg_last_error() == b""
    assert l.rg_errorf(1, b"%s", b"y" * 600) == 1
    assert l.rg_last_error() == b"y" * 511  # truncated to the message's 512 bytes


def test_tuning_and_model_id_through_the_public_library():
    l = _public()
    buf = ctypes.create_string_buffer(64)
    assert l.rg_tuning_get(b"RAGGED_CUDA_GRAPHS", buf, 64) == 0, l.rg_last_error()
    assert buf.value == os.environ.get("RAGGED_CUDA_GRAPHS", "1").encode()
    assert l.rg_tuning_get(b"RAGGED_SPIN_US", buf, 64) == 0
    assert buf.value == os.environ.get("RAGGED_SPIN_US", "100").encode()
    assert l.rg_tuning_get(b"RAGGED_SPIN_US", buf, 2) == 1 and buf.value == b""  # too small
    assert l.rg_tuning_get(b"RAGGED_NOPE", buf, 64) == 1
    assert b"RAGGED_NOPE" in l.rg_last_error()
    out = ctypes.c_void_p()
    assert l.rg_tuning_describe(True, ctypes.byref(out)) == 0, l.rg_last_error()
    try:
        rows = json.loads(ctypes.string_at(out.value).decode())
    finally:
        ctypes.CDLL(None).free(out)
    assert rows["RAGGED_CUDA_GRAPHS"]["doc"] and rows["RAGGED_SPIN_US"]["source"] in (
        "default", "env")
    assert l.rg_tuning_describe(False, None) == 1
    for model, d, want in [(b"org/name", b"/nowhere/x", b"org/name"),
                           (None, b"/hub/models--org--name/snapshots/abc", b"org/name"),
                           (None, b"/a/b/", b"b"), (None, None, b"model")]:
        l.rg_model_id(model, d, buf, 64)
        assert buf.value == want, (model, d, buf.value)
    l.rg_model_id(b"org/name", None, buf, 4)
    assert buf.value == b"org"  # truncated, terminated

