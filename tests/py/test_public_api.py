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
