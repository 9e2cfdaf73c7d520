"""Decoder embeddings on CUDA (issue 31 item 3; src/model/decoder_embed.c): the Qwen3-Embedding-,
gte-Qwen2- and e5-mistral-shaped random models of tests/py/test_decoder_embed.py, embedded by
rg_model_run on the GPU in fp32, fp16 and bf16, against the float64 NumPy reference of model +
pooling + normalization (tests/py/ref_decoder.py), on a mixed batch (2..40 tokens and a one-token
sequence); each text alone equals itself inside the batch. Tolerances (max |got - ref| /
max(1, max |ref|)): fp32 1e-4 (the CPU test's), fp16 2e-2, bf16 6e-2. Prints one PASS / FAIL line
per check; exit 1 on any FAIL. Usage: RAGGED_LIB=build/libragged.so python3 THIS"""
import os
import sys
import tempfile

import ctypes
import types

# libragged_internal.so before numpy: loaded after numpy on the device (2026-12-03) its
# dlopen crashed in libsentencepiece's initializer, which binds a symbol into it (LD_DEBUG)
ctypes.CDLL(os.path.join(os.path.dirname(os.environ.get("RAGGED_LIB", "build/libragged.so")),
                         "libragged_internal.so"))
import numpy as np  # noqa: E402

try:
    import pytest  # noqa: F401  (test_decoder_embed imports it; the device may lack it)
except ImportError:
    class _Mark:
        def __getattr__(self, _name):
            return lambda *a, **k: (lambda f: f)
    sys.modules["pytest"] = types.SimpleNamespace(
        fixture=lambda *a, **k: (a[0] if a and callable(a[0]) else (lambda f: f)),
        mark=_Mark(), skip=lambda *a, **k: None, importorskip=__import__)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "py"))
import ragged_ctypes  # noqa: E402
ragged_ctypes.lib()
from ragged_ctypes import Model  # noqa: E402
import test_decoder_embed as T  # noqa: E402

TOL = {"fp32": 1e-4, "fp16": 2e-2, "bf16": 6e-2}


def main():
    fails = 0
    root = tempfile.mkdtemp(prefix="dec_embed_cuda")
    for name in T.MODELS:
        d, cfg, w, tok = T._make(root, name)
        _, _, pooling, normalize, _, _, _ = T.MODELS[name]
        seqs = [tok.encode(t).ids for t in T.TEXTS] + [[7]]
        refs = [T._ref(cfg, w, s, pooling, normalize) for s in seqs]
        for dt, tol in TOL.items():
            m = Model(d, device="cuda", dtype=dt, max_batch_tokens=512)
            try:
                got = np.asarray(m.run(seqs), np.float64)
                err = max(float(np.abs(g - r).max()) / max(1.0, float(np.abs(r).max()))
                          for g, r in zip(got, refs))
                alone = max(float(np.abs(np.asarray(m.run([s])[0], np.float64) - got[k]).max())
                            for k, s in enumerate(seqs))
            except ragged_ctypes.RaggedError as e:
                # e.g. the tiny test shapes' head_dim 12, which CUDA's paged attention does not
                # take (2026-12-03): a failure of this check, reported, then the next model
                fails += 1
                print(f"FAIL decoder embed cuda {name} {dt}: {e}", flush=True)
                break
            finally:
                m.close()
            ok = err <= tol and alone <= tol
            fails += not ok
            print(f"{'PASS' if ok else 'FAIL'} decoder embed cuda {name} {dt}: max err {err:.3g} "
                  f"(tol {tol}), alone vs batch {alone:.3g}", flush=True)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
