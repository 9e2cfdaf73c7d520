"""Helpers for the `ragged serve` end-to-end tests: start/stop a server on a free port, plain and
raw-socket HTTP clients, metrics parsing, tiny model directories."""
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time

from ragged_ctypes import BIN_PATH

ASAN = os.environ.get("RAGGED_ASAN") == "1"


# TEI's variables, which `ragged serve` reads too (issue 18 item 6): a machine that exports one
# (HOSTNAME in a container, API_KEY for another tool) must not change the servers of the tests.
TEI_ENV = ("MODEL_ID", "REVISION", "TOKENIZATION_WORKERS", "DTYPE", "SERVED_MODEL_NAME", "POOLING",
           "MAX_CONCURRENT_REQUESTS", "MAX_BATCH_TOKENS", "MAX_BATCH_REQUESTS",
           "MAX_CLIENT_BATCH_SIZE", "AUTO_TRUNCATE", "DEFAULT_PROMPT_NAME", "DEFAULT_PROMPT",
           "DENSE_PATH", "DEVICE_ID", "HF_API_TOKEN", "HF_TOKEN", "HOSTNAME", "PORT", "UDS_PATH",
           "PAYLOAD_LIMIT", "API_KEY", "JSON_OUTPUT", "DISABLE_SPANS",
           "OTLP_ENDPOINT", "OTLP_SERVICE_NAME", "PROMETHEUS_PORT", "CORS_ALLOW_ORIGIN")


def server_env():
    env = {k: v for k, v in os.environ.items() if k not in TEI_ENV}
    # Under the ASan pass Python preloads the runtime; the server binary is instrumented itself and
    # gets full leak checking (a leak makes its exit status non-zero, which stop() asserts).
    env.pop("LD_PRELOAD", None)
    env["ASAN_OPTIONS"] = "detect_leaks=1:abort_on_error=0:exitcode=23"
    env["UBSAN_OPTIONS"] = "print_stacktrace=1:halt_on_error=1"
    return env


def hf_tokenizer(model_dir, path=None):
    """The HF reference tokenizer of model_dir (or the tokenizer.json at path), without the padding
    and truncation that tokenizer.json may enable."""
    from tokenizers import Tokenizer
    t = Tokenizer.from_file(path or os.path.join(model_dir, "tokenizer.json"))
    t.no_padding()
    t.no_truncation()
    return t


def tiny_model(root, name="h32_gelu"):
    """A tiny random BERT directory from make_tiny.py (MiniLM tokenizer, 30522-token vocab)."""
    import make_tiny
    return make_tiny.build_all(root, make_tiny.minilm_dir(), [name])[name]


class Server:
    """`ragged serve --port 0 ...` as a subprocess. The port is read from the start-up line."""

    def __init__(self, model_dir, *args, start_timeout=120, env=None, preexec_fn=None,
                 raw_args=None):
        """env: extra environment variables (RAGGED_* options) on top of server_env();
        preexec_fn: run in the child before exec (e.g. to set a resource limit);
        model_dir None: no --model (the server finds the model from the environment);
        raw_args: the whole command line after `serve` instead (model_dir and args unused)."""
        model = ["--model", model_dir] if model_dir is not None else []
        self.args = [BIN_PATH, "serve", *model, "--host", "127.0.0.1", "--port",
                     "0", "--device", "cpu", *[str(a) for a in args]]
        if raw_args is not None:
            self.args = [BIN_PATH, "serve", *[str(a) for a in raw_args]]
        self.proc = subprocess.Popen(self.args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env={**server_env(), **(env or {})}, preexec_fn=preexec_fn)
        self.stderr_lines = []
        self._err_thread = threading.Thread(target=self._drain_stderr, daemon=True)
        self._err_thread.start()
        line = self._read_line(start_timeout)
        self.start_json = None
        if line.lstrip().startswith("{"):  # --json-output: the line is a JSON log object
            try:
                self.start_json = json.loads(line)
                line = self.start_json["message"]
            except (ValueError, KeyError):
                pass
        m = re.match(r"ragged serving (.+) on http://([^:]+):(\d+) \((\w+), (\w+), ([\w-]+)\)$",
                     line.strip())
        if not m:
            self.proc.kill()
            raise AssertionError(f"bad start-up line {line!r}; stderr: {self.stderr()}")
        self.start_line = line.strip()
        self.host, self.port = m.group(2), int(m.group(3))
        self.pid = self.proc.pid

    def _drain_stderr(self):
        for ln in self.proc.stderr:
            self.stderr_lines.append(ln.decode(errors="replace"))

    def _read_line(self, timeout):
        out = []

        def rd():
            out.append(self.proc.stdout.readline().decode(errors="replace"))
        t = threading.Thread(target=rd, daemon=True)
        t.start()
        t.join(timeout)
        if not out:
            self.proc.kill()
            raise AssertionError(f"server did not start in {timeout}s; stderr: {self.stderr()}")
        return out[0]

    def stderr(self):
        return "".join(self.stderr_lines)

    def conn(self, timeout=60):
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None, timeout=60):
        """-> (status, headers dict (lower-case), body bytes). body: dict/list -> JSON."""
        c = self.conn(timeout)
        try:
            if body is not None and not isinstance(body, (bytes, str)):
                body = json.dumps(body)
            c.request(method, path, body=body, headers=headers or {})
            r = c.getresponse()
            data = r.read()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, data
        finally:
            c.close()

    def post(self, path, body, **kw):
        st, h, data = self.request("POST", path, body, {"Content-Type": "application/json"}, **kw)
        return st, h, data

    def post_json(self, path, body, **kw):
        st, h, data = self.post(path, body, **kw)
        return st, json.loads(data)

    def metrics(self):
        st, _, data = self.request("GET", "/metrics")
        assert st == 200
        return parse_metrics(data.decode())

    def rss_kb(self):
        with open(f"/proc/{self.pid}/status") as f:
            for ln in f:
                if ln.startswith("VmRSS:"):
                    return int(ln.split()[1])
        raise AssertionError("no VmRSS")

    def alive(self):
        return self.proc.poll() is None

    def stop(self, expect_rc=0, timeout=60):
        """SIGTERM, wait, assert the exit status (ASan leak reports give 23)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"server did not stop in {timeout}s; stderr: {self.stderr()}")
        self._err_thread.join(5)
        self.proc.stdout.close()
        if expect_rc is not None:
            assert rc == expect_rc, f"server exit status {rc}; stderr:\n{self.stderr()[-4000:]}"
        return rc

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def parse_metrics(text):
    """Prometheus text -> {'name{labels}': float} plus bare names."""
    out = {}
    for ln in text.splitlines():
        if not ln or ln.startswith("#"):
            continue
        key, val = ln.rsplit(" ", 1)
        out[key] = float(val)
    return out


def raw_exchange(port, data, timeout=10.0, shut_wr=False):
    """Send raw bytes, read until the server closes or timeout -> bytes received."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(data)
        if shut_wr:
            s.shutdown(socket.SHUT_WR)
        chunks = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                b = s.recv(65536)
            except socket.timeout:
                break
            except ConnectionResetError:
                break
            if not b:
                break
            chunks.append(b)
        return b"".join(chunks)
    finally:
        s.close()


def http_request_bytes(path, body, extra_headers=b"", method=b"POST", keep_alive=True):
    if isinstance(body, (dict, list)):
        body = json.dumps(body).encode()
    return (method + b" " + path.encode() + b" HTTP/1.1\r\nHost: localhost\r\n"
            + b"Content-Type: application/json\r\n"
            + (b"" if keep_alive else b"Connection: close\r\n") + extra_headers
            + b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


def read_http_response(sock_file):
    """Read one HTTP/1.1 response with Content-Length from a socket makefile('rb')."""
    status_line = sock_file.readline()
    if not status_line:
        raise ConnectionError("closed")
    status = int(status_line.split()[1])
    headers = {}
    while True:
        ln = sock_file.readline()
        if ln in (b"\r\n", b"\n", b""):
            break
        k, v = ln.decode().split(":", 1)
        headers[k.strip().lower()] = v.strip()
    n = int(headers.get("content-length", "0"))
    body = sock_file.read(n)
    return status, headers, body


def status_of(raw):
    m = re.match(rb"HTTP/1\.[01] (\d{3})", raw)
    return int(m.group(1)) if m else None
