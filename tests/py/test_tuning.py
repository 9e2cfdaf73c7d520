"""The tuning switches (src/core/tuning.c): `ragged info` lists every one with its value, source,
allowed values and doc; README's "Tuning switches" table lists the same switches with the same
values, defaults and docs; every getenv("RAGGED_...") in src/, app/ and tools/ names a row of the table;
the server's /info (an encoder's and a decoder's) has the same rows; a bad value is the default
with one warning on stderr."""
import json
import os
import re
import subprocess

import pytest

import make_chat_decoder
from server_util import Server, server_env, tiny_model
from ragged_ctypes import BIN_PATH

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def info(model, extra_env=None):
    """`ragged info --model model` under extra_env: (the parsed JSON, stderr)."""
    env = server_env()
    for k in list(env):
        if k.startswith("RAGGED_") and k not in ("RAGGED_LIB", "RAGGED_BIN", "RAGGED_ASAN"):
            env.pop(k)  # the listing's sources must come from extra_env only
    env.update(extra_env or {})
    p = subprocess.run([BIN_PATH, "info", "--model", model, "--device", "cpu"],
                       capture_output=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    return json.loads(p.stdout), p.stderr.decode(errors="replace")


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return tiny_model(str(tmp_path_factory.mktemp("tune")))


@pytest.fixture(scope="module")
def listed(tiny_dir):
    return info(tiny_dir)[0]["tuning"]


def readme_rows():
    """README's "Tuning switches" table: name -> (allowed, default, read, doc, where)."""
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    sec = text.split("\n## Tuning switches\n", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in sec.splitlines():
        if not line.startswith("| `RAGGED_"):
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        assert len(cells) == 6, line
        name, allowed, dflt, read, doc, where = cells
        rows[name.strip("`")] = (allowed.strip("`").replace("\\|", "|"),
                                 None if dflt == "unset" else dflt.strip("`"), read, doc, where)
    return rows


def test_info_lists_every_switch(listed):
    # the rows the code has (core/tuning.h's enum, in order), each with its fields
    names = list(listed)
    assert names[0] == "RAGGED_NUM_THREADS" and len(names) == len(set(names)) >= 20
    for name, row in listed.items():
        assert set(row) == {"value", "source", "default", "type", "allowed", "read", "kind",
                            "where", "doc"}, name
        assert row["source"] == "default", (name, row)
        assert row["doc"] and row["where"], name
    assert listed["RAGGED_CUDA_GRAPHS"]["value"] == "1"
    assert listed["RAGGED_CPU_SMALLM"]["value"] == "auto"
    assert listed["RAGGED_MODEL_DIR"]["kind"] == "configuration"
    assert "RAGGED_CPU_GEMV" not in listed  # retired


def test_readme_matches_table(listed):
    rows = readme_rows()
    assert list(rows) == list(listed), "README's Tuning switches table: names or order differ"
    for name, row in listed.items():
        assert rows[name] == (row["allowed"], row["default"], row["read"], row["doc"],
                              row["where"]), name


def test_every_getenv_is_in_the_table(listed):
    """A new RAGGED_* switch read with getenv must get a row (the model-location variables are
    rows too: configuration, listed only)."""
    pat = re.compile(r'getenv\("(RAGGED_[A-Z0-9_]+)"\)')
    seen = set()
    for top in ("src", "app", "tools"):
        for d, _, files in os.walk(os.path.join(ROOT, top)):
            for f in files:
                if f.endswith((".c", ".h", ".cu", ".cuh", ".cc")):
                    seen |= set(pat.findall(open(os.path.join(d, f), encoding="utf-8").read()))
    assert seen, "no getenv found: wrong root?"
    assert seen <= set(listed), seen - set(listed)


def test_env_values_and_bad_values(tiny_dir):
    got, err = info(tiny_dir, {"RAGGED_PREFILL_TC": "fresh", "RAGGED_SPIN_US": "soon",
                               "RAGGED_NUM_THREADS": "999", "RAGGED_CPU_ATTN": "",
                               "RAGGED_MODEL_DIR": "/nowhere"})
    t = got["tuning"]
    assert (t["RAGGED_PREFILL_TC"]["value"], t["RAGGED_PREFILL_TC"]["source"]) == ("fresh", "env")
    assert (t["RAGGED_SPIN_US"]["value"], t["RAGGED_SPIN_US"]["source"]) == ("100", "invalid")
    assert (t["RAGGED_NUM_THREADS"]["value"], t["RAGGED_NUM_THREADS"]["source"]) == ("256", "env")
    assert t["RAGGED_CPU_ATTN"]["source"] == "default"  # empty: unset
    assert t["RAGGED_MODEL_DIR"] == {**t["RAGGED_MODEL_DIR"], "value": "/nowhere", "source": "env"}
    warn = [l for l in err.splitlines() if "RAGGED_SPIN_US" in l]
    assert warn == ["ragged: warning: RAGGED_SPIN_US=soon: expected 0..1000000; using the "
                    "default 100"], err
    assert "RAGGED_NUM_THREADS=999: outside 0..256; using 256" in err


def check_server_info(s, name, value, source):
    st, _, body = s.request("GET", "/info")
    assert st == 200
    t = json.loads(body)["tuning"]
    assert set(t) >= {"RAGGED_NUM_THREADS", "RAGGED_CUDA_GRAPHS", "RAGGED_MODEL"}
    for row in t.values():
        assert set(row) == {"value", "source", "default"}
    assert (t[name]["value"], t[name]["source"]) == (value, source)
    return t


def test_server_info_has_the_switches(tiny_dir):
    s = Server(tiny_dir, env={"RAGGED_CPU_ATTN": "tiles"})
    try:
        t = check_server_info(s, "RAGGED_CPU_ATTN", "tiles", "env")
        assert t["RAGGED_CPU_ATTN"]["default"] == "auto"
        st, _ = s.post_json("/embed", {"inputs": "the tiles ran"})
        assert st == 200
    finally:
        s.stop()


def test_generation_server_info_has_the_switches(tmp_path):
    d = make_chat_decoder.make(str(tmp_path / "m"), seed=7)
    s = Server(d, "--max-num-seqs", 8, "--max-num-batched-tokens", 16, "--block-size", 4,
               "--kv-cache-bytes", 4 << 20, env={"RAGGED_GEN_DEVICE_SAMPLE": "0"})
    try:
        check_server_info(s, "RAGGED_GEN_DEVICE_SAMPLE", "0", "env")
    finally:
        s.stop()
