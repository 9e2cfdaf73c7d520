"""scripts/run-tests.sh's accounting (issue 18, item 5), through scripts/tally.sh, which it
sources: the closing line counts pytest's and cmocka's skipped and pytest's deselected cases
apart from the passed ones, keeps CI's "N passed, N failed" at its start, and a suite run in the
background is timed from its start to its own end, not to when the script waited for it."""
import os
import re
import subprocess

import ragged_ctypes as rc

TALLY = os.path.join(rc.ROOT, "scripts", "tally.sh")


def bash(script, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "RAGGED_TEST_SERIAL"}
    p = subprocess.run(["bash", "-c", f'set -uo pipefail; LOG=$(mktemp); source "{TALLY}"\n'
                        + script + '\nrm -f "$LOG"'], cwd=tmp_path, capture_output=True,
                       text=True, timeout=60, env=env)
    assert p.stderr == "", p.stderr
    return p.stdout.splitlines()


def test_summary_counts_skipped_and_deselected(tmp_path):
    out = bash(r"""
run "cmocka" printf '[==========] 5 test(s) run.\n[  PASSED  ] 4 test(s).\n[  SKIPPED ] 1 test(s), listed below:\n[  SKIPPED ] test_x\n'
run "pytest a" printf '.s.F\nFAILED t.py::x\n2 passed, 1 failed, 3 skipped, 7 deselected in 1.0s\n'
run "pytest b" sh -c 'echo "10 passed, 2 skipped in 0.5s"'
run "crash" sh -c 'echo segfault; exit 139'
summary
""", tmp_path)
    # 4 + 2 + 10 passed; 1 failed case + the crash; 1 + 3 + 2 skipped; 7 deselected
    assert out[-2:] == ["FAILED: crash", "16 passed, 2 failed, 6 skipped, 7 deselected"], out
    assert re.match(r"^(\d+) passed, (\d+) failed", out[-1])  # what CI parses


def test_background_suites_timed_when_they_end(tmp_path):
    """The first background suite waits for the second to end, then 3 s more: the second (which
    finish_bg waits for after the first) must report its own time, under 3 s."""
    out = bash(r"""
start_bg "slow" sh -c 'while [ ! -e done ]; do sleep 0.05; done; sleep 3; echo "1 passed in 3s"'
start_bg "fast" sh -c 'echo "2 passed, 1 skipped in 0.01s"; touch done'
finish_bg
summary
""", tmp_path)
    times = {m.group(1): int(m.group(2)) for m in
             (re.match(r"^--- (\w+): (\d+) s \(from its start to its end\)$", l) for l in out) if m}
    assert set(times) == {"slow", "fast"}, out
    assert times["slow"] >= 3 and times["fast"] < 3, times
    assert out[-1] == "3 passed, 0 failed, 1 skipped, 0 deselected", out
    assert not [f for f in os.listdir(tmp_path) if f != "done"]  # no stray files in the cwd
