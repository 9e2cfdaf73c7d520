"""The recorded results and test logs: one naming scheme, one index row per file.

bench/results/ holds benchmarks, tests/gpu/results/ the GPU correctness-test logs; every file in
either is named <what>_<device>_<YYYYMMDD-HHMM>[-<qualifier>...].<ext> (bench/results/README.md)
and has a row in its folder's README.md, which bench/results/index.py writes. The scripts that
write results build their names with bench_graphed.result_base / cpu_device (bench/peer) and
sweep.device_slug (bench/serving): those must give names of the same scheme.
"""
import datetime
import importlib.util
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RESULTS = os.path.join(ROOT, "bench", "results")
LOGS = os.path.join(ROOT, "tests", "gpu", "results")


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


index = _load("results_index", os.path.join(RESULTS, "index.py"))


def _files(d):
    return sorted(n for n in os.listdir(d) if n not in index.NOT_INDEXED and not n.startswith("."))


def _rows(d):
    with open(os.path.join(d, "README.md"), encoding="utf-8") as f:
        return [m[1] for m in re.finditer(r"^\| `([^`]+)` \|", f.read(), re.M)]


def test_every_name_follows_the_scheme():
    bad = [os.path.join(os.path.basename(os.path.dirname(d)), os.path.basename(d), n)
           for d in (RESULTS, LOGS) for n in _files(d) if not index.NAME_RX.match(n)]
    assert not bad, f"names off <what>_<device>_<YYYYMMDD-HHMM>[-<qualifier>].<ext>: {bad}"


def test_every_file_has_one_row_and_every_row_a_file():
    for d in (RESULTS, LOGS):
        files, rows = _files(d), _rows(d)
        assert len(rows) == len(set(rows)), f"{d}/README.md: duplicate rows"
        missing, extra = set(files) - set(rows), set(rows) - set(files)
        assert not missing, (f"{d}/README.md has no row for {sorted(missing)}: "
                             "run python3 bench/results/index.py")
        assert not extra, f"{d}/README.md lists files that are gone: {sorted(extra)}"


def test_index_is_current():
    r = subprocess.run([sys.executable, os.path.join(RESULTS, "index.py"), "--check"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


def test_no_test_logs_among_the_benchmarks():
    tests_only = set(index.TESTS) - set(index.WHAT)
    stray = [n for n in _files(RESULTS) if index.parse(n) and index.parse(n)["what"] in tests_only]
    assert not stray, f"test logs belong in tests/gpu/results/: {stray}"
    unknown = [n for n in _files(LOGS)
               if index.parse(n) and index.parse(n)["what"] not in index.TESTS]
    assert not unknown, f"tests/gpu/results/ holds what no test writes: {unknown}"


def test_the_writers_name_files_by_the_scheme():
    sys.path.insert(0, os.path.join(ROOT, "bench", "serving"))
    try:
        sweep = _load("sweep_for_names", os.path.join(ROOT, "bench", "serving", "sweep.py"))
    finally:
        sys.path.pop(0)
    bg = _load("bench_graphed_for_names", os.path.join(ROOT, "bench", "peer", "bench_graphed.py"))
    now = datetime.datetime(2026, 11, 26, 4, 36, tzinfo=datetime.timezone.utc)
    cpu = bg.cpu_device()
    assert re.fullmatch(r"cpu_\d+core-[a-z0-9-]+", cpu), cpu
    assert sweep.device_slug([]) == cpu  # bench/serving and bench/peer name a CPU alike
    assert bg.cpu_device(16, "Intel(R) Xeon(R) Processor") == "cpu_16core-xeon"
    assert bg.cpu_device(2, "AMD EPYC") == "cpu_2core-amd-epyc"
    assert sweep.device_slug(["NVIDIA H100 80GB HBM3, 580.159.04, 81559 MiB"]) == "h100-80gb-hbm3"
    cases = {
        ("peer_graphed", bg.slug("NVIDIA H200"), "wgmma_ab"):
            "peer_graphed_h200_20261126-0436-wgmma-ab",
        ("peer", cpu, None): f"peer_{cpu}_20261126-0436",
        ("decode", "cpu_2core-amd-epyc", "_2t-pool"):
            "decode_cpu_2core-amd-epyc_20261126-0436-2t-pool",
    }
    for (what, dev, tag), want in cases.items():
        base = bg.result_base("out", what, dev, tag, now)
        assert base == os.path.join("out", want)
        for ext in ("json", "md"):
            assert index.NAME_RX.match(f"{want}.{ext}"), want
