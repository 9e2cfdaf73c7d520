"""The CPU backend's process-level choices, each checked in a fresh subprocess (they are made
once per process): the thread-pool size (RAGGED_NUM_THREADS, the affinity mask), the kernel
table (RAGGED_CPU_ISA) and the OpenBLAS kernel-family check behind OPENBLAS_CORETYPE."""
import os
import shutil
import subprocess
import sys

import pytest

from ragged_ctypes import LIB_PATH

PROBE = r"""
import ctypes, sys
l = ctypes.CDLL(sys.argv[1])
for f in ("rg_cpu_isa", "rg_cpu_blas_core", "rg_cpu_blas_coretype_fix"):
    getattr(l, f).restype = ctypes.c_char_p
fix = l.rg_cpu_blas_coretype_fix()
print(l.rg_cpu_num_threads(), l.rg_cpu_isa().decode(), l.rg_cpu_blas_core().decode(),
      fix.decode() if fix else "-")
"""


def probe(env_extra, prefix=()):
    env = dict(os.environ)
    env.pop("OPENBLAS_CORETYPE", None)
    env.pop("RAGGED_NUM_THREADS", None)
    env.update(env_extra)
    out = subprocess.run([*prefix, sys.executable, "-c", PROBE, LIB_PATH], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    n, isa, core, fix = out.stdout.split()
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
