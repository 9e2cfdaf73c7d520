"""The CPU backend's process-level choices, each checked in a fresh subprocess (they are made
once per process): the thread-pool size (RAGGED_NUM_THREADS, the affinity mask), the kernel
table (RAGGED_CPU_ISA), the GEMM library (RAGGED_CPU_GEMM: oneDNN on prepared weights, or
OpenBLAS), and the OpenBLAS kernel-family check behind OPENBLAS_CORETYPE. The GEMM library and
the pool size change how every linear layer is tiled, so the model is checked against the float64
reference under each."""
import os
import shutil
import subprocess
import sys

import pytest

from ragged_ctypes import LIB_PATH

PROBE = r"""
import ctypes, sys
l = ctypes.CDLL(sys.argv[1])
for f in ("rg_cpu_isa", "rg_cpu_blas_core", "rg_cpu_blas_coretype_fix", "rg_cpu_gemm_lib"):
    getattr(l, f).restype = ctypes.c_char_p
fix = l.rg_cpu_blas_coretype_fix()
print(l.rg_cpu_num_threads(), l.rg_cpu_isa().decode(), l.rg_cpu_blas_core().decode(),
      fix.decode() if fix else "-")
print(l.rg_cpu_gemm_lib().decode())
"""


def probe(env_extra, prefix=()):
    env = dict(os.environ)
    env.pop("OPENBLAS_CORETYPE", None)
    env.pop("RAGGED_NUM_THREADS", None)
    env.update(env_extra)
    out = subprocess.run([*prefix, sys.executable, "-c", PROBE, LIB_PATH], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    first, gemm = out.stdout.splitlines()[:2]
    n, isa, core, fix = first.split()
    probe.gemm = gemm
    return int(n), isa, core, fix


def test_num_threads_env():
    assert probe({"RAGGED_NUM_THREADS": "3"})[0] == 3


@pytest.mark.skipif(shutil.which("taskset") is None, reason="taskset (util-linux) missing")
def test_num_threads_follow_affinity():
    cpu = min(os.sched_getaffinity(0))
    assert probe({}, prefix=("taskset", "-c", str(cpu)))[0] == 1


def test_isa_env_narrows():
    best = probe({})[1]
    assert best in ("avx512", "avx2", "generic")
    assert probe({"RAGGED_CPU_ISA": "generic"})[1] == "generic"


def test_blas_coretype_check():
    """OpenBLAS forced to its SSE kernels (what 0.3.21 picks on Sapphire Rapids) is detected,
    with the OPENBLAS_CORETYPE that fixes it; the default choice on this host needs no fix when
    OpenBLAS knows the CPU."""
    n, isa, core, fix = probe({"OPENBLAS_CORETYPE": "Prescott"})
    assert core.lower() == "prescott"
    assert fix == {"avx512": "SkylakeX", "avx2": "Haswell", "generic": "-"}[isa]


STUB = r"""
#include <stddef.h>
const char *rg_cpu_blas_coretype_fix(void) { return %s; }
"""


@pytest.mark.parametrize("answer,env,want", [
    ('"SkylakeX"', {}, "SkylakeX"),               # the probe says fix it: set before loading
    ("NULL", {}, "None"),                         # OpenBLAS knows the CPU: nothing set
    ('"SkylakeX"', {"OPENBLAS_CORETYPE": "Haswell"}, "Haswell"),  # the user's choice stands
    ('"SkylakeX"', {"RAGGED_NO_REEXEC": "1"}, "None"),            # the opt-out
    ('"Bogus"', {}, "None"),                      # only the two known answers are taken
])
def test_python_sets_coretype_before_loading(tmp_path, answer, env, want):
    """The Python package asks a child process what rg_cpu_blas_coretype_fix() says of the
    library it is about to load and puts the answer in OPENBLAS_CORETYPE first (a process cannot
    re-execute itself as the ragged command does; the Python API ran OpenBLAS's SSE kernels on
    the H200 host while the CLI and the server ran SkylakeX's: 25% apart at batch 16). A stub
    library stands for one whose OpenBLAS chose the wrong kernels."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.fail("no C compiler (the build needs one)")
    src = tmp_path / "stub.c"
    src.write_text(STUB % answer)
    so = tmp_path / "libstub.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(so), str(src)], check=True)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    code = ("import os, sys; sys.path.insert(0, sys.argv[1]); import ragged._lib as L; "
            "L._fix_blas_coretype(sys.argv[2]); print(os.environ.get('OPENBLAS_CORETYPE'))")
    e = dict(os.environ)
    e.pop("OPENBLAS_CORETYPE", None)
    e.pop("RAGGED_NO_REEXEC", None)
    e.update(env)
    out = subprocess.run([sys.executable, "-c", code, os.path.join(root, "python"), str(so)],
                         env=e, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == want


def built_with_onednn():
    """The library links oneDNN (it names libdnnl among its needed libraries)."""
    with open(LIB_PATH, "rb") as f:
        return b"libdnnl.so" in f.read()


def test_gemm_lib_env():
    """oneDNN runs the prepared (model) weights when the build has it; RAGGED_CPU_GEMM=openblas
    turns it off."""
    probe({})
    if built_with_onednn():
        assert probe.gemm.startswith("onednn "), probe.gemm
    else:
        assert probe.gemm == "openblas"
    probe({"RAGGED_CPU_GEMM": "openblas"})
    assert probe.gemm == "openblas"


PARITY = r"""
import sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import ragged_ctypes as rc
from conftest import assert_embeddings_close
from ref_bert import RefBert
from test_model import random_seqs
for d, lens in ((sys.argv[2], [1, 12, 15, 16, 17, 64, 100, 300]), (sys.argv[3], [7, 3, 128, 1])):
    m = rc.Model(d, device="cpu", dtype="fp32", max_batch_tokens=4096)
    ref = RefBert(d)
    rng = np.random.default_rng(11)
    for n in ([lens[0]], lens[:4], lens):  # M = 1 ... 600 rows: every tile kind
        seqs = random_seqs(rng, n)
        assert_embeddings_close(m.embed_ids(seqs, ref.H), ref.embed_batch(seqs), f"{d} {n}")
    m.close()
print("ok")
"""


# The ASan pass runs one tiling (its unit tests already cover every tile kind under ASan).
@pytest.mark.parametrize("env", [
    pytest.param({"RAGGED_NUM_THREADS": "7"}, id="7-threads"),
    pytest.param({"RAGGED_NUM_THREADS": "16"}, id="16-threads", marks=pytest.mark.slow),
    pytest.param({"RAGGED_NUM_THREADS": "3", "RAGGED_CPU_GEMM": "openblas"}, id="openblas",
                 marks=pytest.mark.slow)])
def test_model_parity_per_gemm_tiling(env, minilm_dir, tiny_dirs):
    """MiniLM and a tiny model (N not a multiple of oneDNN's 64-column block) against the float64
    reference with other pool sizes (other tilings) and with each GEMM library."""
    e = dict(os.environ)
    e.pop("OPENBLAS_CORETYPE", None)
    e.update(env)
    out = subprocess.run([sys.executable, "-c", PARITY, os.path.dirname(os.path.abspath(__file__)),
                          minilm_dir, tiny_dirs["h48_gelunew_cls"]], env=e,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stdout + out.stderr


BF16 = r"""
import sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import ragged_ctypes as rc
from conftest import assert_embeddings_close, row_cosine
from ref_bert import RefBert
from test_model import random_seqs
rng = np.random.default_rng(5)
for d in sys.argv[2:]:
    try:
        m = rc.Model(d, device="cpu", dtype="bf16", max_batch_tokens=4096)
    except rc.RaggedError as e:
        print("refused:", e)
        sys.exit(3)
    ref = RefBert(d)
    f32 = rc.Model(d, device="cpu", dtype="fp32", max_batch_tokens=4096)
    L = m.info().max_seq_len
    for n in ([1], [12, 17, 64], [5, 100, 300, 1, 33]):
        seqs = random_seqs(rng, [min(x, L) for x in n])
        want = ref.embed_batch(seqs)
        got = m.embed_ids(seqs, ref.H)
        assert_embeddings_close(got, want, f"{d} {n} bf16", dtype="bf16")
        # bf16 really ran: not the fp32 answer, and closer to it than the 0.999 bar demands
        c32 = f32.embed_ids(seqs, ref.H)
        assert np.abs(got - c32).max() > 1e-5, f"{d} {n}: bf16 output equals fp32"
        assert row_cosine(got, want).min() >= 0.9999, (d, n, row_cosine(got, want).min())
    m.close()
    f32.close()
print("ok")
"""


def test_model_bf16(minilm_dir, tiny_dirs):
    """--dtype bf16 on the CPU (oneDNN bf16 GEMMs, f32 activations) against the float64 reference
    at the GPU's low-precision bar (cosine >= 0.999; it reaches 0.9999) on MiniLM and tiny models
    of other families; where the CPU has no AVX512-BF16/AMX (or no oneDNN), bf16 must be refused
    with the reason, and the probe must say so."""
    e = dict(os.environ)
    e.pop("OPENBLAS_CORETYPE", None)
    e["RAGGED_NUM_THREADS"] = "2"
    out = subprocess.run([sys.executable, "-c", BF16, os.path.dirname(os.path.abspath(__file__)),
                          minilm_dir, tiny_dirs["h48_gelunew_cls"], tiny_dirs["deberta"],
                          tiny_dirs["mpnet"]], env=e, capture_output=True, text=True, timeout=300)
    flags = open("/proc/cpuinfo").read().split()
    native = ("avx512_bf16" in flags or "amx_bf16" in flags) and built_with_onednn()
    if native:
        assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stdout + out.stderr
    else:
        assert out.returncode == 3 and "AVX512-BF16" in out.stdout, out.stdout + out.stderr


# The CPU bf16 accuracy as measured (issue 18, item 2) and as the README states it: cosine of
# each text's bf16 embedding against the float64 reference (fp32 agrees with it to 1e-12, so this
# is the cosine against fp32 too), on MiniLM. Measured on AVX512-BF16 (Zen 4) against fp32 over
# the tokenizer corpus (tests/py/corpus.py, 2,272 texts of 1-512 tokens): min 0.999946 (a
# 94-token text), 0.1% below 0.999962, 1% below 0.999971, median 0.999989: the bf16 rounding of
# activations and weights (an 8-bit mantissa) bounds it, and most texts are below the 0.99999
# once claimed (AMX: min 0.99997 over 300 texts). The test runs 330 texts of the same kinds
# (bf16_corpus) against float64 (here: min 0.999957) and asserts the README's bound and median.
BF16_MIN_COS = 0.99994
BF16_MEDIAN_COS = 0.99998


def bf16_corpus(tok):
    """330 texts, 3 to 512 tokens: 300 English sentences of 20-300 characters (fortunes), 25
    edge cases of other scripts, accents, emoji and punctuation, and 5 long texts of joined
    sentences (the longest truncated at 512 tokens)."""
    import random
    import corpus
    sents = corpus.english_sentences(300)
    edge = [t for t in corpus._edge_cases() if t.strip()]
    rng = random.Random(7)
    longs = [" ".join(rng.sample(sents, k)) for k in (6, 10, 14, 20, 40)]
    texts = sents + rng.sample(edge, 25) + longs
    return texts, [e.ids for e in tok.encode_batch(texts)]


@pytest.mark.slow
def test_bf16_accuracy_on_many_texts(minilm_dir):
    """--dtype bf16 on the CPU against the float64 reference over 330 varied texts: the README's
    bound (min cosine >= 0.99994, median >= 0.99998). Skipped, not passed, where the CPU has no
    AVX512-BF16/AMX or the build no oneDNN (test_model_bf16 checks the refusal there)."""
    import numpy as np
    import ragged_ctypes as rc
    from conftest import row_cosine
    from ref_bert import RefBert
    flags = open("/proc/cpuinfo").read().split()
    if not (("avx512_bf16" in flags or "amx_bf16" in flags) and built_with_onednn()):
        pytest.skip("no CPU bf16 here (AVX512-BF16 or AMX, with oneDNN): bf16 accuracy unmeasured")
    import tokenizers  # scripts/install-deps.sh; missing is a failure, not a skip
    tok = tokenizers.Tokenizer.from_file(os.path.join(minilm_dir, "tokenizer.json"))
    tok.no_padding()
    tok.enable_truncation(512)
    texts, ids = bf16_corpus(tok)
    lens = [len(x) for x in ids]
    assert len(texts) == 330 and min(lens) <= 4 and max(lens) == 512, (len(texts), lens)
    m = rc.Model(minilm_dir, device="cpu", dtype="bf16", max_batch_tokens=16384)
    try:
        got = np.concatenate([m.embed_ids(ids[i:i + 64], 384) for i in range(0, len(ids), 64)])
    finally:
        m.close()
    ref = RefBert(minilm_dir)
    want = np.concatenate([ref.embed_batch(ids[i:i + 32]) for i in range(0, len(ids), 32)])
    cos = row_cosine(got, want)
    worst = int(np.argmin(cos))
    assert cos.min() >= BF16_MIN_COS, f"text {worst} ({lens[worst]} tokens): cosine {cos.min():.7f}"
    assert np.median(cos) >= BF16_MEDIAN_COS, np.median(cos)
    assert cos.max() < 1 - 1e-9, "bf16 gave the fp32 answer: did bf16 run?"
