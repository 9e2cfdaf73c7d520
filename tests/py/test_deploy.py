"""Deployment files (issue 9, item 8). Docker cannot run here, so the Dockerfiles are checked
statically: named stages, COPY --from naming earlier stages, every COPY source present in the
repository and not excluded by .dockerignore, make targets that exist, the build stage holding the
-dev packages scripts/install-deps.sh installs, the runtime stage holding the Debian package of
every shared library build/ragged needs (dpkg -S on this Debian 12 machine, the image's
distribution), a non-root USER, a HEALTHCHECK on /health on the EXPOSEd port. (scripts/run-tests.sh
builds and runs the image where a Docker daemon answers.) The systemd unit passes
`systemd-analyze verify` without a warning, defines every variable its ExecStart uses, and its
ExecStart, expanded as systemd would, starts a server that answers /health."""
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import urllib.request

import pytest

import ragged_ctypes as rc

ROOT = rc.ROOT


def read_dockerfile(name):
    """-> list of (instruction, args) with continuation lines joined and comments dropped."""
    out, cur = [], ""
    with open(os.path.join(ROOT, name)) as f:
        for line in f:
            s = line.rstrip("\n")
            if not cur and (not s.strip() or s.lstrip().startswith("#")):
                continue
            if s.endswith("\\"):
                cur += s[:-1] + " "
                continue
            cur += s
            instr, _, args = cur.strip().partition(" ")
            out.append((instr.upper(), args.strip()))
            cur = ""
    return out


def stages(instrs):
    """-> (global ARG names, [(stage name, base image, [instructions])])."""
    glob_args, st = set(), []
    for instr, args in instrs:
        if instr == "FROM":
            m = re.match(r"(\S+)\s+AS\s+(\S+)$", args, re.I)
            assert m, f"unnamed stage: FROM {args}"
            st.append((m.group(2), m.group(1), []))
        elif not st:
            assert instr == "ARG", f"{instr} before the first FROM"
            glob_args.add(args.split("=")[0])
        else:
            st[-1][2].append((instr, args))
    return glob_args, st


def apt_packages(body):
    pk = set()
    for instr, args in body:
        if instr == "RUN" and "apt-get install" in args:
            for part in args.split("&&"):
                if "apt-get install" in part:
                    pk |= {w for w in part.split("apt-get install", 1)[1].split()
                           if not w.startswith("-")}
    return pk


def dockerignore():
    with open(os.path.join(ROOT, ".dockerignore")) as f:
        return [l.strip() for l in f if l.strip() and not l.startswith("#")]


def makefile_targets():
    with open(os.path.join(ROOT, "Makefile")) as f:
        text = f.read()
    return set(re.findall(r"^([A-Za-z0-9_./%-]+)\s*:(?!=)", text, re.M))


def install_deps_packages():
    with open(os.path.join(ROOT, "scripts", "install-deps.sh")) as f:
        m = re.search(r'APT_PKGS="([^"]*)"', f.read())
    return set(m.group(1).split())


def needed_packages(binary):
    """Debian packages of the shared libraries `binary` needs directly (readelf NEEDED, located
    with ldd, owned per dpkg -S; /usr-merged paths tried both ways)."""
    needed = re.findall(r"\(NEEDED\).*\[(.+)\]",
                        subprocess.run(["readelf", "-d", binary], capture_output=True,
                                       text=True, check=True).stdout)
    where = {}
    for line in subprocess.run(["ldd", binary], capture_output=True, text=True).stdout.splitlines():
        m = re.match(r"\s*(\S+) => (\S+)", line)
        if m:
            where[m.group(1)] = m.group(2)
    pkgs = {}
    for lib in needed:
        if lib not in where:
            continue  # the dynamic loader itself
        if lib == "libragged.so":
            continue  # ours: `make install` puts it in the image (its own libraries: see below)
        real = os.path.realpath(where[lib])
        if re.match(r"/usr/local/cuda[^/]*/", real) or lib.startswith(("libcuda", "libcublas")):
            # the CUDA toolkit's runtime (a CUDA=1 build, as in CI): the CUDA image's base image
            # has it; the CPU image builds without it (no nvcc there)
            continue
        for cand in (real, real.replace("/usr/lib/", "/lib/", 1)):
            p = subprocess.run(["dpkg", "-S", cand], capture_output=True, text=True)
            if p.returncode == 0:
                pkgs[lib] = p.stdout.split(":")[0]
                break
        else:
            raise AssertionError(f"no Debian package owns {real} ({lib})")
    return pkgs


@pytest.fixture(scope="module", params=["Dockerfile", "Dockerfile.cuda"])
def dockerfile(request):
    glob_args, st = stages(read_dockerfile(request.param))
    return request.param, glob_args, st


def test_dockerfile_stages_and_copies(dockerfile):
    name, glob_args, st = dockerfile
    names = [s[0] for s in st]
    assert len(set(names)) == len(names), names
    assert [n for n in names if n in ("build", "runtime")] == ["build", "runtime"], names
    assert names[-1] == "runtime", "the last stage is the image"
    ignored = dockerignore()
    targets = makefile_targets()
    for i, (stage, base, body) in enumerate(st):
        for var in re.findall(r"\$\{(\w+)\}", base):
            assert var in glob_args, f"{name}: FROM {base} uses ${var} not declared before FROM"
        for instr, args in body:
            if instr == "COPY":
                words = args.split()
                frm = [w for w in words if w.startswith("--from=")]
                srcs = [w for w in words if not w.startswith("--")][:-1]
                assert srcs, args
                if frm:
                    assert frm[0][7:] in names[:i], f"{name}: {args}: no earlier stage"
                    continue
                for src in srcs:
                    path = os.path.join(ROOT, src)
                    assert os.path.exists(path), f"{name}: COPY {src}: not in the repository"
                    top = src.strip("/").split("/")[0]
                    assert top not in ignored, f"{name}: COPY {src}: excluded by .dockerignore"
            if instr == "RUN":
                for cmd in re.findall(r"\bmake\b([^&;]*)", args):
                    for w in cmd.split():
                        if w.startswith("-") or "=" in w or w.startswith('"$('):
                            continue
                        assert w in targets, f"{name}: make target {w} not in the Makefile"


def test_dockerfile_packages(dockerfile):
    """The build stage installs the -dev packages of scripts/install-deps.sh; the runtime stage the
    Debian package of every library build/ragged and the build/libragged.so it links link (for
    the CUDA image, without oneDNN, which it builds without)."""
    name, _, st = dockerfile
    body = dict((s[0], s[2]) for s in st)
    build_pk, run_pk = apt_packages(body["build"]), apt_packages(body["runtime"])
    cuda = name.endswith(".cuda")
    # the CUDA image's Ubuntu 22.04 has no libdragonbox-dev: its headers come from a Debian stage
    dev = {p for p in install_deps_packages() if p.endswith("-dev") and p not in
           ("libcmocka-dev", "libclang-rt-dev") and
           not (cuda and p in ("libdnnl-dev", "libdragonbox-dev"))}
    assert dev <= build_pk, f"{name}: build stage lacks {sorted(dev - build_pk)}"
    assert not {p for p in run_pk if p.endswith("-dev")}, "no -dev package in the runtime"
    if shutil.which("dpkg") is None or shutil.which("readelf") is None:
        want = {"libopenblas0-pthread", "libutf8proc2", "libjson-c5", "libmicrohttpd12",
                "libsqlite3-0"}
    else:
        exe = rc.BIN_PATH.replace("/asan/", "/")
        lib = os.path.join(os.path.dirname(exe), "libragged.so")
        want = set(needed_packages(exe).values()) | set(needed_packages(lib).values())
    # in every base image: glibc, and the C++ runtime that apt itself links (a CUDA=1 build,
    # as in CI, links them through the CUDA objects)
    want -= {"libc6", "libgcc-s1", "libstdc++6"}
    if cuda:
        want -= {"libdnnl2", "libgomp1"}
    assert want <= run_pk, f"{name}: runtime stage lacks {sorted(want - run_pk)}"


def test_dockerfile_runtime_serves_as_non_root_with_healthcheck(dockerfile):
    name, _, st = dockerfile
    runtime = st[-1][2]
    users = [a for i, a in runtime if i == "USER"]
    assert users and users[-1] not in ("root", "0"), f"{name}: runs as root"
    entry = json.loads(next(a for i, a in runtime if i == "ENTRYPOINT"))
    assert entry[:2] == ["ragged", "serve"]
    port = entry[entry.index("--port") + 1]
    assert entry[entry.index("--host") + 1] == "0.0.0.0"
    assert [a for i, a in runtime if i == "EXPOSE"] == [port]
    hc = next(a for i, a in runtime if i == "HEALTHCHECK")
    assert f"http://127.0.0.1:{port}/health" in hc and "CMD" in hc
    env = " ".join(a for i, a in runtime if i == "ENV")
    model = re.search(r"RAGGED_MODEL_DIR=(\S+)", env).group(1)
    assert any(i == "COPY" and a.split()[-1] == model for i, a in runtime), \
        f"{name}: RAGGED_MODEL_DIR={model} is not where the model stage's files go"
    # every flag the image passes exists
    help_text = subprocess.run([rc.BIN_PATH, "serve", "--help"], capture_output=True,
                               text=True).stdout
    for flag in (w for w in entry if w.startswith("--")):
        assert flag + " " in help_text, flag


# ---- systemd -----------------------------------------------------------------------------------

UNIT = os.path.join(ROOT, "deploy", "ragged.service")


def parse_unit(path):
    """-> {section: [(key, value)]} (systemd allows a key several times, configparser does not)."""
    sec, out = None, {}
    with open(path) as f:
        for line in f:
            s = line.strip()
            if not s or s[0] in "#;":
                continue
            if s.startswith("["):
                sec = s.strip("[]")
                out.setdefault(sec, [])
                continue
            k, eq, v = s.partition("=")
            assert eq and sec, f"not 'key=value' in a section: {s!r}"
            out[sec].append((k.strip(), v.strip()))
    return out


def unit_env(u):
    env = {}
    for k, v in u["Service"]:
        if k == "Environment":
            name, _, val = v.partition("=")
            env[name] = val
    return env


def test_systemd_unit_keys():
    u = parse_unit(UNIT)
    svc = dict(u["Service"])
    assert svc["DynamicUser"] == "yes" and svc["Restart"] == "on-failure"
    assert "User" not in svc
    assert dict(u["Install"])["WantedBy"] == "multi-user.target"
    assert "network-online.target" in dict(u["Unit"])["After"]
    exec_start = svc["ExecStart"]
    assert exec_start.startswith("/usr/local/bin/ragged serve ")
    env = unit_env(u)
    used = set(re.findall(r"\$\{?(\w+)\}?", exec_start))
    provided = set(env) | {"STATE_DIRECTORY"}  # set by StateDirectory=
    assert "StateDirectory" in svc
    assert used <= provided, f"ExecStart uses undefined {sorted(used - provided)}"
    assert {"RAGGED_HOST", "RAGGED_PORT"} <= used


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze missing")
def test_systemd_analyze_verify(tmp_path):
    """systemd's own check, with the ExecStart path pointed at this build (verify requires it to
    exist); any warning fails the test (unknown keys are only warnings)."""
    text = open(UNIT).read().replace("/usr/local/bin/ragged", os.path.abspath(rc.BIN_PATH))
    unit = tmp_path / "ragged.service"
    unit.write_text(text)
    p = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0 and p.stderr.strip() == "", p.stderr


def test_systemd_exec_start_serves(tmp_path, tiny_dirs):
    """ExecStart expanded as systemd does (${VAR}: one word; $VAR: split at spaces, none when
    empty) with the unit's own environment starts a server that answers /health."""
    u = parse_unit(UNIT)
    env = unit_env(u)
    env.update(RAGGED_PORT="0", STATE_DIRECTORY=str(tmp_path),
               RAGGED_ARGS=f"--model {tiny_dirs['h32_gelu']}")
    words = []
    for w in shlex.split(dict(u["Service"])["ExecStart"]):
        if re.fullmatch(r"\$\w+", w):
            words += env[w[1:]].split()
        else:
            words.append(re.sub(r"\$\{(\w+)\}", lambda m: env[m.group(1)], w))
    words[0] = os.path.abspath(rc.BIN_PATH)
    penv = dict(os.environ)
    penv.pop("LD_PRELOAD", None)
    penv["ASAN_OPTIONS"] = "detect_leaks=1:abort_on_error=0:exitcode=23"
    p = subprocess.Popen(words, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=penv)
    try:
        line = p.stdout.readline().decode()
        m = re.search(r"on http://([\d.]+):(\d+) ", line)
        assert m, (line, p.stderr.read(2000) if p.poll() is not None else b"")
        with urllib.request.urlopen(f"http://{m.group(1)}:{m.group(2)}/health", timeout=30) as r:
            assert r.status == 200
        assert os.path.exists(tmp_path / "cache.sqlite")
    finally:
        p.send_signal(signal.SIGTERM)
        rc_ = p.wait(60)
    assert rc_ == 0, p.stderr.read().decode()[-2000:]


def serve_defaults():
    """-> {RAGGED_* variable: default text} from `ragged serve --help`."""
    out = subprocess.run([rc.BIN_PATH, "serve", "--help"], capture_output=True, text=True)
    text = out.stdout + out.stderr
    opts = {}
    for ln in text.splitlines():
        m = re.search(r"\[(RAGGED_\w+)\]$", ln)
        if m:
            d = re.search(r"\(([^()]*)\) \[RAGGED_\w+\]$", ln)
            opts[m.group(1)] = d.group(1) if d else None
    assert "RAGGED_SHUTDOWN_TIMEOUT_S" in opts, text
    return opts


def test_kubernetes_manifest():
    """deploy/kubernetes/ragged.yaml: every RAGGED_* variable is a serve option; startup,
    readiness and liveness probes GET /health on the port the image's ENTRYPOINT serves; a preStop
    sleep; terminationGracePeriodSeconds above the preStop sleep plus the drain
    (RAGGED_SHUTDOWN_TIMEOUT_S); resources set; the Service targets the same port."""
    import yaml
    with open(os.path.join(ROOT, "deploy", "kubernetes", "ragged.yaml")) as f:
        docs = {d["kind"]: d for d in yaml.safe_load_all(f)}
    opts = serve_defaults()
    pod = docs["Deployment"]["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    unknown = [k for k in env if k not in opts]
    assert not unknown, f"not `ragged serve` variables: {unknown}"
    entry = next(a for i, a in read_dockerfile("Dockerfile") if i == "ENTRYPOINT")
    words = json.loads(entry)
    port = int(words[words.index("--port") + 1])
    named = {p["name"]: p["containerPort"] for p in c["ports"]}
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        get = c[probe]["httpGet"]
        assert get["path"] == "/health", probe
        assert named.get(get["port"], get["port"]) == port, probe
    cmd = c["lifecycle"]["preStop"]["exec"]["command"]
    assert cmd[0] == "sleep"
    drain = int(env.get("RAGGED_SHUTDOWN_TIMEOUT_S") or opts["RAGGED_SHUTDOWN_TIMEOUT_S"])
    assert pod["terminationGracePeriodSeconds"] > int(cmd[1]) + drain
    assert c["resources"]["requests"]["cpu"] and c["resources"]["limits"]["memory"]
    svc_port = docs["Service"]["spec"]["ports"][0]["targetPort"]
    assert named.get(svc_port, svc_port) == port
