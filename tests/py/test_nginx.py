"""Replicas behind nginx (issue 9, item 18): deploy/nginx/ragged.conf, as shipped but for the
replicas' addresses, the listening port and the log paths, in front of two `ragged serve` replicas
on the tiny model. Client threads send a steady load through nginx, each request embedding a text
of its own (its id in the text and in X-Request-Id); one replica gets SIGTERM mid-load and drains.

Evidence that no request was lost: every client request got 200 with the vector the library
computes for its text (L2-normalized, as /embed). Evidence that none was served twice: nginx's access log holds each id once,
and in its $upstream_status list at most one replica answered 200 (the attempts before it are
connection errors or 503s, which ragged answers without computing); the replicas' own counts of
200 answers (their stop line, read after they exit) add up to the number of client requests, and
each equals the access log's count of 200s from that replica.

nginx (Debian package, installed by scripts/install-deps.sh) runs as this user with a prefix in
a temporary directory, `daemon off`, its pid file, logs and temp files there. Missing nginx fails
the test: it is a declared dependency."""
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time

import numpy as np
import pytest

from ragged_ctypes import ROOT, Model
from server_util import Server, tiny_model

CONF = os.path.join(ROOT, "deploy", "nginx", "ragged.conf")
# 0.3 ms per token as a slow device would: a request of ~12 tokens takes ~4 ms, so a few are in
# flight on the replica when it is stopped; no cache, so every request is computed.
REPLICA_ARGS = ["--token-delay-us", 300, "--cache-entries", 0, "--shutdown-timeout-s", 5]
N_CLIENTS = 4
WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima".split()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def text_of(i):
    """A text unique to request i (its digits and a rotation of words)."""
    k = i % len(WORDS)
    return f"request {i} " + " ".join(WORDS[k:] + WORDS[:k][:3])


def nginx_conf(tmp, listen_port, replica_ports):
    """The shipped file with the test's addresses and paths, inside a minimal nginx.conf."""
    with open(CONF) as f:
        site = f.read()
    shipped = re.findall(r"^\s*server 127\.0\.0\.1:\d+ ", site, re.M)
    assert len(shipped) == len(replica_ports), shipped
    for old, port in zip(shipped, replica_ports):
        site = site.replace(old, re.sub(r":\d+", f":{port}", old), 1)
    site, n1 = re.subn(r"^(\s*)listen \d+;", rf"\1listen 127.0.0.1:{listen_port};", site, flags=re.M)
    site, n2 = re.subn(r"access_log \S+ ragged;", f"access_log {tmp}/access.log ragged;", site)
    assert n1 == 1 and n2 == 1, "deploy/nginx/ragged.conf: listen / access_log lines changed"
    with open(os.path.join(tmp, "ragged.conf"), "w") as f:
        f.write(site)
    # As root nginx's workers would switch to `nobody`, who cannot write the temp directory.
    user = ""
    if os.geteuid() == 0:
        import grp
        import pwd
        user = f"user {pwd.getpwuid(0).pw_name} {grp.getgrgid(0).gr_name};"
    temps = "\n".join(f"  {k}_temp_path {tmp}/{k}_temp;"
                      for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    main = f"""daemon off;
{user}
worker_processes 1;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log info;
events {{ worker_connections 512; }}
http {{
{temps}
  include {tmp}/ragged.conf;
}}
"""
    path = os.path.join(tmp, "nginx.conf")
    with open(path, "w") as f:
        f.write(main)
    return path


class Nginx:
    def __init__(self, tmp, replica_ports):
        exe = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx")
                                        else None)
        if not exe:
            pytest.fail("nginx not found: run scripts/install-deps.sh (Debian package nginx)")
        self.tmp = tmp
        self.port = free_port()
        conf = nginx_conf(tmp, self.port, replica_ports)
        chk = subprocess.run([exe, "-t", "-p", tmp, "-c", conf, "-e", f"{tmp}/error.log"],
                             capture_output=True, text=True)
        assert chk.returncode == 0, f"nginx -t: {chk.stderr}"
        self.proc = subprocess.Popen([exe, "-p", tmp, "-c", conf, "-e", f"{tmp}/error.log"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        end = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                assert self.proc.poll() is None, f"nginx exited: {self.proc.stderr.read()}"
                assert time.monotonic() < end, "nginx did not listen in 10 s"
                time.sleep(0.02)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)  # graceful: finishes writing the log
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def access_log(self):
        """-> {id: (status, [upstream addrs], [upstream statuses])} and the list of ids in order."""
        rows, order = {}, []
        pat = re.compile(r'" (\d{3}) \d+ id=(\S+) upstream=(.*) upstream_status=(.*) rt=')
        with open(os.path.join(self.tmp, "access.log")) as f:
            for ln in f:
                m = pat.search(ln)
                assert m, f"unparsed access log line: {ln!r}"
                rid = m.group(2)
                # several attempts are ", "-separated; " : " separates upstream groups
                addrs = re.split(r", | : ", m.group(3).strip())
                codes = re.split(r", | : ", m.group(4).strip())
                assert rid not in rows, f"id {rid} logged twice:\n{rows[rid]}\n{ln}"
                rows[rid] = (int(m.group(1)), addrs, codes)
                order.append(rid)
        return rows, order


class Load:
    """N_CLIENTS threads, each POSTing /embed through nginx on its own keep-alive connection, one
    request after another, every request with a new id. Records (id, status, vector, t_done)."""

    def __init__(self, port):
        self.port = port
        self.lock = threading.Lock()
        self.next_id = 0
        self.done = []
        self.errors = []
        self.stop_ev = threading.Event()
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(N_CLIENTS)]
        for t in self.threads:
            t.start()

    def _take_id(self):
        with self.lock:
            i = self.next_id
            self.next_id += 1
            return i

    def _run(self):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        while not self.stop_ev.is_set():
            i = self._take_id()
            body = json.dumps({"inputs": text_of(i)})
            try:
                conn.request("POST", "/embed", body=body, headers={
                    "Content-Type": "application/json", "X-Request-Id": str(i)})
                r = conn.getresponse()
                data = r.read()
            except Exception as e:  # noqa: BLE001 - any client-side failure is a lost request
                with self.lock:
                    self.errors.append((i, repr(e)))
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
                continue
            with self.lock:
                self.done.append((i, r.status, data, time.monotonic()))
        conn.close()

    def count(self):
        with self.lock:
            return len(self.done) + len(self.errors)

    def wait_count(self, n, timeout=30):
        end = time.monotonic() + timeout
        while self.count() < n:
            assert time.monotonic() < end, f"load stalled at {self.count()} requests"
            time.sleep(0.005)

    def finish(self):
        self.stop_ev.set()
        for t in self.threads:
            t.join(60)
            assert not t.is_alive()


def answered_200(server):
    """The replica's own count of 200 answers, from its stop line (it has exited)."""
    m = re.search(r"answered (\d+) requests, (\d+) of them 200", server.stderr())
    assert m, f"no 'answered' line in the replica's stderr:\n{server.stderr()[-2000:]}"
    return int(m.group(2))


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return tiny_model(str(tmp_path_factory.mktemp("nginx_tiny")), "h32_gelu")


def test_replica_stopped_mid_load_loses_nothing(tiny_dir, tmp_path):
    a = Server(tiny_dir, *REPLICA_ARGS)
    b = Server(tiny_dir, *REPLICA_ARGS)
    ng = load = None
    rc_a = None
    try:
        ng = Nginx(str(tmp_path), [a.port, b.port])
        load = Load(ng.port)
        load.wait_count(80)
        a.proc.send_signal(signal.SIGTERM)
        rc_a = a.proc.wait(10)
        t_a_gone = time.monotonic()
        n_at_exit = load.count()
        load.wait_count(n_at_exit + 80)
        load.finish()
        ng.stop()
        b.stop()
    finally:
        if load:
            load.finish()
        if ng:
            ng.stop()
        a.stop(expect_rc=None)
        b.stop(expect_rc=None)
    assert rc_a == 0, f"replica A exit status {rc_a}:\n{a.stderr()[-3000:]}"
    assert "draining" in a.stderr()

    # Nothing lost: every request answered 200, with its own text's vector.
    assert not load.errors, load.errors[:5]
    bad = [(i, st, d[:200]) for i, st, d, _ in load.done if st != 200]
    assert not bad, f"{len(bad)} of {len(load.done)} requests not 200: {bad[:5]}"
    ids = sorted(i for i, *_ in load.done)
    n = len(ids)
    assert ids == list(range(n)), "a request id missing or duplicated on the client side"
    got = {i: np.array(json.loads(d), np.float32)[0] for i, _, d, _ in load.done}
    lib = Model(tiny_dir)
    try:
        ref = lib.embed_ids([lib.tokenize(text_of(i)) for i in ids], 32)
    finally:
        lib.close()
    ref /= np.linalg.norm(ref, axis=1, keepdims=True)  # /embed's default normalize: true
    np.testing.assert_allclose(np.stack([got[i] for i in ids]), ref, rtol=1e-5, atol=2e-6)

    # Nothing served twice: one log line per id, at most one 200 among its attempts, and the
    # replicas' own 200 counts equal the log's and add up to the client's requests.
    rows, _ = ng.access_log()
    assert sorted(rows, key=int) == [str(i) for i in ids]
    addr_a, addr_b = f"127.0.0.1:{a.port}", f"127.0.0.1:{b.port}"
    per_replica = {addr_a: 0, addr_b: 0}
    retried = []
    for rid, (status, addrs, codes) in rows.items():
        assert status == 200, (rid, status, addrs, codes)
        assert len(addrs) == len(codes) and codes[-1] == "200", (rid, addrs, codes)
        assert codes.count("200") == 1, f"id {rid} answered 200 by two replicas: {addrs} {codes}"
        # earlier attempts: connection errors (502, or '-' with no status) or ragged's 503
        assert all(c in ("502", "503", "504", "-") for c in codes[:-1]), (rid, addrs, codes)
        per_replica[addrs[-1]] += 1
        if len(addrs) > 1:
            retried.append((rid, addrs, codes))
    a_ok, b_ok = answered_200(a), answered_200(b)
    assert (a_ok, b_ok) == (per_replica[addr_a], per_replica[addr_b]), (a_ok, b_ok, per_replica)
    assert a_ok + b_ok == n
    # Both replicas carried load, and after A exited everything went to B.
    assert a_ok >= 10 and b_ok >= 80, (a_ok, b_ok)
    late = [i for i, _, _, t in load.done if t > t_a_gone + 0.05]
    assert len(late) >= 40 and all(rows[str(i)][1][-1] == addr_b for i in late)
    print(f"{n} requests, A {a_ok}, B {b_ok}, retried {len(retried)}: {retried[:5]}")


def test_conf_numbers_follow_serve_defaults():
    """The shipped config's limits against `ragged serve --help`'s defaults: client_max_body_size
    = --max-body-bytes, proxy_read_timeout above --request-timeout-ms (ragged's 504 comes first),
    the upstream keepalive_timeout below --connection-timeout-s (nginx drops an idle connection
    before the replica does), and retries on connection errors and 503 only."""
    from test_deploy import serve_defaults
    d = serve_defaults()
    with open(CONF) as f:
        conf = f.read()

    def value(key):
        m = re.findall(rf"^\s*{key} ([^;]+);", conf, re.M)
        assert len(m) == 1, (key, m)
        return m[0]

    def seconds(v):
        return int(v[:-1]) if v.endswith("s") else int(v)
    body = value("client_max_body_size")
    assert body.endswith("m") and int(body[:-1]) << 20 == int(d["RAGGED_MAX_BODY_BYTES"])
    assert seconds(value("proxy_read_timeout")) * 1000 > int(d["RAGGED_REQUEST_TIMEOUT_MS"])
    assert seconds(value("keepalive_timeout")) < int(d["RAGGED_CONNECTION_TIMEOUT_S"])
    assert value("proxy_next_upstream").split() == ["error", "timeout", "http_503",
                                                    "non_idempotent"]
