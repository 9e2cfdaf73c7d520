"""`serve --scheduler dp` on a first start (no stored cost table, no --cost-table): /health
answers 200 and requests are served by the token scheduler at once, while the engine's worker
measures the DP cost table between requests; then the server switches to dp, stores the table
under $XDG_CACHE_HOME/ragged, and the next start loads it and serves with dp from the start
(issue 9, item 16). The measurement is slowed by --batch-delay-ms, which every measured run
sleeps as a batch does."""
import json
import os
import sqlite3
import time

import numpy as np
import pytest

from ragged_ctypes import Model
from server_util import Server, tiny_model

H_TINY = 32
TEXTS = ["Hello world!", "The quick brown fox jumps over the lazy dog.", "a",
         " ".join(["long"] * 25)]
# 6 lengths x 6 batch sizes = 36 cells of 4 runs, each >= 15 ms: >= 2 s of measurement
ARGS = ["--scheduler", "dp", "--max-batch-requests", 8, "--max-batch-tokens", 1024,
        "--cache-entries", 0, "--batch-delay-ms", 15]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return tiny_model(str(tmp_path_factory.mktemp("dpwarm_tiny")), "h32_gelu")


@pytest.fixture(scope="module")
def reference(tiny_dir):
    """The library's raw pooled vectors of TEXTS (HF tokenizer ids), independent of the server."""
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(tiny_dir, "tokenizer.json"))
    tok.no_padding()
    tok.no_truncation()
    m = Model(tiny_dir)
    try:
        return m.embed_ids([tok.encode(t).ids for t in TEXTS], H_TINY)
    finally:
        m.close()


def stored_cells(db):
    """Rows of the cost table database (0 before it exists)."""
    if not db.exists():
        return 0
    con = sqlite3.connect(str(db), timeout=5)
    try:
        return con.execute("SELECT count(*) FROM rg_cost").fetchone()[0]
    finally:
        con.close()


def info_scheduler(s):
    st, _, body = s.request("GET", "/info")
    assert st == 200
    return json.loads(body)["scheduler"]


def embed(s):
    st, out = s.post_json("/embed", {"inputs": TEXTS, "normalize": False})
    assert st == 200, out
    return np.array(out)


def test_serves_while_measuring_then_switches_and_reuses(tiny_dir, reference, tmp_path):
    env = {"XDG_CACHE_HOME": str(tmp_path / "xdg")}
    db = tmp_path / "xdg" / "ragged" / "cost-tables.sqlite"

    s = Server(tiny_dir, *ARGS, env=env)
    try:
        # up at once: /health 200 while the table is still being measured
        st, _, _ = s.request("GET", "/health")
        assert st == 200
        sched = info_scheduler(s)
        assert sched.startswith("token (dp measuring "), sched
        m = s.metrics()
        total = m["ragged_dp_cost_cells_total"]
        assert total == 36 and m["ragged_dp_cost_cells_measured"] < total
        # stored cell by cell as measured (issue 18 item 12), never more than measured
        assert stored_cells(db) <= s.metrics()["ragged_dp_cost_cells_measured"]
        assert m["ragged_dp_scheduler_active"] == 0
        # requests are answered meanwhile, with the right vectors
        np.testing.assert_allclose(embed(s), reference, rtol=1e-5, atol=2e-6)
        assert info_scheduler(s).startswith("token (dp measuring "), "answered after the switch"
        # then the switch to dp
        t_end = time.monotonic() + 30
        while info_scheduler(s) != "dp":
            assert time.monotonic() < t_end, s.stderr()
            time.sleep(0.1)
        m = s.metrics()
        assert m["ragged_dp_cost_cells_measured"] == total
        assert m["ragged_dp_scheduler_active"] == 1
        np.testing.assert_allclose(embed(s), reference, rtol=1e-5, atol=2e-6)
    finally:
        s.stop()
    err = s.stderr()
    assert "measuring the DP cost table (36 cells) in the background" in err, err
    assert "scheduler switched to dp" in err, err
    assert db.exists()

    # a second start loads the stored table: dp from the first request on
    s = Server(tiny_dir, *ARGS, env=env)
    try:
        assert info_scheduler(s) == "dp"
        m = s.metrics()
        assert m["ragged_dp_scheduler_active"] == 1 and m["ragged_dp_cost_cells_total"] == 0
        np.testing.assert_allclose(embed(s), reference, rtol=1e-5, atol=2e-6)
    finally:
        s.stop()
    err = s.stderr()
    assert "DP cost table loaded from" in err and "measuring the DP" not in err, err


def test_restart_keeps_the_measured_cells(tiny_dir, reference, tmp_path):
    """The table is stored as it is measured (issue 18 item 12): a server killed part way leaves
    its cells in the database, and the next start measures only the rest (it says so), then
    switches to dp with the same vectors."""
    env = {"XDG_CACHE_HOME": str(tmp_path / "xdg")}
    db = tmp_path / "xdg" / "ragged" / "cost-tables.sqlite"

    s = Server(tiny_dir, *ARGS, env=env)
    try:
        t_end = time.monotonic() + 30
        while stored_cells(db) < 8:
            assert time.monotonic() < t_end, s.stderr()
            time.sleep(0.05)
        assert info_scheduler(s).startswith("token (dp measuring ")
    finally:
        s.kill()  # no clean shutdown: a crash, or systemd's stop timeout
    kept = stored_cells(db)
    assert 8 <= kept < 36

    s = Server(tiny_dir, *ARGS, env=env)
    try:
        m = s.metrics()
        assert m["ragged_dp_cost_cells_total"] == 36
        assert m["ragged_dp_cost_cells_measured"] >= kept
        np.testing.assert_allclose(embed(s), reference, rtol=1e-5, atol=2e-6)
        t_end = time.monotonic() + 30
        while info_scheduler(s) != "dp":
            assert time.monotonic() < t_end, s.stderr()
            time.sleep(0.1)
        np.testing.assert_allclose(embed(s), reference, rtol=1e-5, atol=2e-6)
    finally:
        s.stop()
    err = s.stderr()
    assert f"{kept} of 36 cells stored by an earlier start" in err, err
    assert stored_cells(db) == 36
