"""The persistent response cache of `ragged serve --cache-db` (issue 9, item 15).

- keyed by a fingerprint of the model's bytes, not its path: weights overwritten in place and a
  restart with the same database give the new model's vectors (checked against the library);
- the database is pruned to --cache-entries rows;
- writes are off the engine thread: a database locked by another connection does not slow the
  answers;
- a corrupt database file is moved aside with a warning, and the server starts.
"""
import glob
import json
import os
import shutil
import sqlite3
import time

import numpy as np
import pytest

import make_tiny
from ragged_ctypes import Model
from server_util import Server, tiny_model

H_TINY = 32
TEXTS = ["Hello world!", "The quick brown fox jumps over the lazy dog.",
         "ragged serves embeddings without padding.", "a", "Ünïcödé: 東京 — naïve café ✓"]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return tiny_model(str(tmp_path_factory.mktemp("cache_tiny")), "h32_gelu")


def lib_vectors(model_dir, texts):
    """Raw pooled vectors from the library (rg_model_embed), the independent reference."""
    m = Model(model_dir)
    try:
        return m.embed_ids([m.tokenize(t, truncate=True) for t in texts], H_TINY)
    finally:
        m.close()


def db_rows(db):
    con = sqlite3.connect(db, timeout=5)
    try:
        return con.execute("SELECT count(*) FROM rg_embed_cache").fetchone()[0]
    finally:
        con.close()


def embed_raw(s, texts):
    st, h, body = s.post("/embed", {"inputs": texts, "normalize": False})
    assert st == 200, body
    import json
    return np.array(json.loads(body), np.float32), int(h["x-batch-size"])


def test_weights_changed_in_place_not_served_from_cache(tiny_dir, tmp_path):
    d = str(tmp_path / "model")
    shutil.copytree(tiny_dir, d)
    db = str(tmp_path / "cache.db")
    old_ref = lib_vectors(d, TEXTS)
    s = Server(d, "--cache-entries", 100, "--cache-db", db)
    try:
        got, _ = embed_raw(s, TEXTS)
        np.testing.assert_allclose(got, old_ref, rtol=1e-5, atol=1e-6)
    finally:
        s.stop()
    # the same directory, other random weights of the same shapes (another seed)
    other = make_tiny.make_tiny(str(tmp_path / "other"), make_tiny.CONFIGS["h32_gelu"],
                                make_tiny.minilm_dir(), seed=12345)
    shutil.copy(os.path.join(other, "model.safetensors"), os.path.join(d, "model.safetensors"))
    new_ref = lib_vectors(d, TEXTS)
    assert not np.allclose(new_ref, old_ref, atol=1e-3)  # the change is visible
    s = Server(d, "--cache-entries", 100, "--cache-db", db)
    try:
        got, batch = embed_raw(s, TEXTS)
        assert batch > 0  # computed, not answered from the old rows
        np.testing.assert_allclose(got, new_ref, rtol=1e-5, atol=1e-6)
        m = s.metrics()
        assert m["ragged_cache_hits_total"] == 0
    finally:
        s.stop()
    # and the unchanged model, restarted, is still served from the database
    s = Server(d, "--cache-entries", 100, "--cache-db", db)
    try:
        got, batch = embed_raw(s, TEXTS)
        assert batch == 0 and s.metrics()["ragged_cache_hits_total"] == len(TEXTS)
        np.testing.assert_allclose(got, new_ref, rtol=1e-5, atol=1e-6)
    finally:
        s.stop()


def test_database_pruned_to_cache_entries(tiny_dir, tmp_path):
    db = str(tmp_path / "cache.db")
    cap = 8
    s = Server(tiny_dir, "--cache-entries", cap, "--cache-db", db)
    try:
        for r in range(5):  # 40 distinct inputs, 5 rounds of writes at least
            embed_raw(s, [f"prune {r} {i}" for i in range(8)])
            n = db_rows(db) if os.path.exists(db) else 0
            assert n <= cap, f"{n} rows after round {r}"
    finally:
        s.stop()
    assert db_rows(db) == cap  # the writer committed its queue at stop, and pruned
    # a restart with a smaller --cache-entries prunes the old rows at open
    s = Server(tiny_dir, "--cache-entries", 3, "--cache-db", db)
    try:
        deadline = time.time() + 5
        while db_rows(db) > 3 and time.time() < deadline:
            time.sleep(0.05)
        assert db_rows(db) == 3
    finally:
        s.stop()


def test_locked_database_does_not_stall_inference(tiny_dir, tmp_path):
    db = str(tmp_path / "cache.db")
    s = Server(tiny_dir, "--cache-entries", 1000, "--cache-db", db)
    try:
        embed_raw(s, ["warm up"])
        # the server's writer may be storing "warm up" right now: wait for it, then hold the lock
        con = sqlite3.connect(db, timeout=10, isolation_level=None)
        con.execute("BEGIN EXCLUSIVE")  # another process holds the write lock
        con.execute("DELETE FROM rg_embed_cache")
        try:
            lat = []
            for i in range(6):  # each answer used to wait 2 s on the lock (engine thread)
                t0 = time.monotonic()
                got, batch = embed_raw(s, [f"locked {i}"])
                lat.append(time.monotonic() - t0)
                assert batch == 1 and got.shape == (1, H_TINY)
            assert max(lat) < 0.5, lat
        finally:
            con.execute("ROLLBACK")
            con.close()
        # the lock released, writing resumes: new entries reach the database
        embed_raw(s, ["after the lock"])
        deadline = time.time() + 5
        while db_rows(db) < 1 and time.time() < deadline:
            time.sleep(0.05)
        assert db_rows(db) >= 1
    finally:
        s.stop()


def test_database_locked_at_start_does_not_stop_the_server(tiny_dir, tmp_path):
    """Issue 18 item 12: a cache database locked by another process when the server starts is
    not a reason to exit (under Restart=on-failure that is a crash loop): the server starts
    with a warning, serves the library's vectors from its in-memory cache, and leaves the
    other process's database alone."""
    db = str(tmp_path / "cache.db")
    con = sqlite3.connect(db, timeout=10, isolation_level=None)
    con.execute("CREATE TABLE other(x)")
    con.execute("BEGIN EXCLUSIVE")  # held for the whole start
    con.execute("INSERT INTO other VALUES (1)")
    try:
        s = Server(tiny_dir, "--cache-entries", 10, "--cache-db", db)
        try:
            for _ in range(2):  # the second time from the in-memory cache
                got, _ = embed_raw(s, TEXTS[:2])
                np.testing.assert_allclose(got, lib_vectors(tiny_dir, TEXTS[:2]), rtol=1e-5,
                                           atol=1e-6)
            m = s.metrics()
            hits = [v for k, v in m.items() if k.startswith("ragged_cache_hits")]
            assert hits and sum(hits) >= 2, m
        finally:
            s.stop()
        err = s.stderr()
        assert "warning: cache db" in err and "serving without the cache database" in err, err
    finally:
        con.execute("ROLLBACK")
        con.close()
    assert not glob.glob(db + ".corrupt-*")  # locked is not corrupt: nothing moved aside
    con = sqlite3.connect(db)
    try:
        assert con.execute("SELECT count(*) FROM other").fetchone()[0] == 0
    finally:
        con.close()


def test_corrupt_database_set_aside(tiny_dir, tmp_path):
    db = str(tmp_path / "cache.db")
    garbage = bytes(range(256)) * 64
    with open(db, "wb") as f:
        f.write(garbage)
    s = Server(tiny_dir, "--cache-entries", 10, "--cache-db", db)
    try:
        got, _ = embed_raw(s, TEXTS[:2])
        np.testing.assert_allclose(got, lib_vectors(tiny_dir, TEXTS[:2]), rtol=1e-5, atol=1e-6)
    finally:
        s.stop()
    err = s.stderr()
    assert "warning: cache db" in err and "corrupt" in err, err
    aside = glob.glob(db + ".corrupt-*")
    assert len(aside) == 1, aside
    with open(aside[0], "rb") as f:
        assert f.read() == garbage  # kept for inspection, untouched
    assert db_rows(db) == 2  # a fresh database took its place


def test_dp_cost_table_kept_per_user(tiny_dir, tmp_path):
    """serve --scheduler dp without --cost-table measures once, keeps the table under
    $XDG_CACHE_HOME/ragged keyed by the model's fingerprint, and the next start reuses it; a
    model changed in place is measured again."""
    env = {"XDG_CACHE_HOME": str(tmp_path / "xdg")}
    d = str(tmp_path / "model")
    shutil.copytree(tiny_dir, d)
    args = ["--scheduler", "dp", "--max-batch-requests", 8, "--max-batch-tokens", 1024,
            "--cache-entries", 0]

    def start():
        t0 = time.monotonic()
        s = Server(d, *args, env=env)
        try:
            got, _ = embed_raw(s, TEXTS[:2])
            np.testing.assert_allclose(got, lib_vectors(d, TEXTS[:2]), rtol=1e-5, atol=1e-6)
            # the table is measured in the background and stored before the switch to dp
            t_end = time.monotonic() + 60
            while json.loads(s.request("GET", "/info")[2])["scheduler"] != "dp":
                assert time.monotonic() < t_end, s.stderr()
                time.sleep(0.05)
        finally:
            s.stop()
        return time.monotonic() - t0, s.stderr()

    _, err1 = start()
    assert "measuring the DP cost table" in err1, err1
    db = tmp_path / "xdg" / "ragged" / "cost-tables.sqlite"
    assert db.exists()
    con = sqlite3.connect(str(db))
    ids = {r[0] for r in con.execute("SELECT DISTINCT model_id FROM rg_cost")}
    con.close()
    assert len(ids) == 1 and next(iter(ids)).startswith("sha256:"), ids
    _, err2 = start()
    assert "measuring" not in err2 and "DP cost table loaded from" in err2, err2
    # other weights in place: another fingerprint, measured again, both tables kept
    other = make_tiny.make_tiny(str(tmp_path / "other"), make_tiny.CONFIGS["h32_gelu"],
                                make_tiny.minilm_dir(), seed=777)
    shutil.copy(os.path.join(other, "model.safetensors"), os.path.join(d, "model.safetensors"))
    _, err3 = start()
    assert "measuring the DP cost table" in err3, err3
    con = sqlite3.connect(str(db))
    assert con.execute("SELECT count(DISTINCT model_id) FROM rg_cost").fetchone()[0] == 2
    con.close()
