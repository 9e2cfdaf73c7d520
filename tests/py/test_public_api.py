"""The public library (build/libragged.so, or RAGGED_LIB): it exports exactly the functions that
include/ragged.h marks RG_API, links neither the HTTP server's nor the cost store's libraries,
and embeds by itself: a tiny model through the public API alone, against the float64 reference."""
import ctypes
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
