"""`make install` (issue 9, item 8): the binary, the library (shared and static), the header and a
pkg-config file, under PREFIX and DESTDIR; a program built with `pkg-config --cflags --libs ragged`
(dynamic) and `pkg-config --static --libs` (libragged.a) loads a model and gives the CLI's vector and
the HF tokenizer's ids."""
import os
import shutil
import subprocess

import numpy as np
import pytest

import ragged_ctypes as rc

ROOT = rc.ROOT
PROG = os.path.join(ROOT, "tests", "install", "use_ragged.c")
TEXT = "Hello world, installed."

pytestmark = pytest.mark.skipif(shutil.which("pkg-config") is None or shutil.which("cc") is None,
                                reason="pkg-config or cc missing (scripts/install-deps.sh)")


def _env(**kw):
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)  # the ASan pass preloads the runtime into Python only
    env.pop("MAKEFLAGS", None)
    env.pop("LD_LIBRARY_PATH", None)  # installed programs find the library by their rpath
    env.update({k: str(v) for k, v in kw.items()})
    return env


def run(*cmd, **kw):
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=300,
                       env=kw.pop("env", _env()), **kw)
    assert p.returncode == 0, f"{cmd}: {p.stdout[-2000:]}{p.stderr[-2000:]}"
    return p.stdout


def make_install(*args):
    """make install with the configuration build/ is made with, so nothing is rebuilt."""
    with open(os.path.join(ROOT, "build", "config")) as f:
        config = f.read().split()
    return run("make", "-s", "-C", ROOT, *config, *args)


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    p = tmp_path_factory.mktemp("install") / "prefix"
    make_install("install", f"PREFIX={p}")
    return p


def test_installed_binary_runs_without_ld_library_path(prefix, tiny_dirs, tmp_path):
    """bin/ragged runs from PREFIX with no LD_LIBRARY_PATH (issue 18, item 3): it links
    lib/libragged.so (issue 27, item 4) and finds it through a RUNPATH relative to itself,
    $ORIGIN/../lib, so that the installed tree also runs when moved as a whole."""
    exe = prefix / "bin" / "ragged"
    dyn = run("readelf", "-d", exe)
    assert "Shared library: [libragged.so]" in dyn, dyn
    assert "Library runpath: [$ORIGIN/../lib]" in dyn, dyn
    out = run(exe, "info", "--device", "cpu", "--model", tiny_dirs["h64_relu_norm"])
    assert '"hidden_size":64' in out.replace(" ", ""), out
    moved = tmp_path / "moved"
    shutil.copytree(prefix, moved, symlinks=True)
    out = run(moved / "bin" / "ragged", "info", "--device", "cpu", "--model",
              tiny_dirs["h64_relu_norm"])
    assert '"hidden_size":64' in out.replace(" ", ""), out


def test_installed_files(prefix):
    for rel, mode in [("bin/ragged", 0o755), ("lib/libragged.so", 0o755),
                      ("lib/libragged.a", 0o644), ("include/ragged.h", 0o644),
                      ("lib/pkgconfig/ragged.pc", 0o644)]:
        st = os.stat(prefix / rel)
        assert st.st_mode & 0o777 == mode, (rel, oct(st.st_mode))
    with open(os.path.join(ROOT, "include", "ragged.h")) as f:
        assert (prefix / "include" / "ragged.h").read_text() == f.read()
    version = run(prefix / "bin" / "ragged", "--version").strip()
    env = _env(PKG_CONFIG_PATH=prefix / "lib" / "pkgconfig")
    assert run("pkg-config", "--modversion", "ragged", env=env).strip() == version
    assert f"-I{prefix}/include" in run("pkg-config", "--cflags", "ragged", env=env)
    # the installed library exports the public API (the same list as the build's)
    out = run("nm", "-D", "--defined-only", prefix / "lib" / "libragged.so")
    names = {l.split()[-1] for l in out.splitlines() if l.strip()}
    assert "rg_model_load" in names and "rg_model_dir_resolve" in names
    assert all(n.startswith("rg_") for n in names), sorted(n for n in names if not n.startswith("rg_"))


def _reference(model_dir, tmp_path):
    """The CLI's vector for TEXT (raw float32) and the HF tokenizer's ids."""
    p = subprocess.run([rc.BIN_PATH, "embed", "--model", model_dir, "--device", "cpu", "--format",
                        "f32"], input=TEXT.encode() + b"\n", capture_output=True,
                       env=_env(ASAN_OPTIONS="detect_leaks=1"), timeout=120)
    assert p.returncode == 0, p.stderr
    tokenizers = pytest.importorskip("tokenizers")
    tok = tokenizers.Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    return np.frombuffer(p.stdout, "<f4"), tok.encode(TEXT).ids


@pytest.mark.parametrize("link", ["shared", "static"])
def test_program_built_with_pkg_config(prefix, tmp_path, tiny_dirs, link):
    model = tiny_dirs["h64_relu_norm"]
    env = _env(PKG_CONFIG_PATH=prefix / "lib" / "pkgconfig")
    cflags = run("pkg-config", "--cflags", "ragged", env=env).split()
    if link == "shared":
        libs = run("pkg-config", "--libs", "ragged", env=env).split()
    else:  # libragged.a plus its Libs.private: checks that the .pc lists every dependency
        libs = ["-l:libragged.a" if a == "-lragged" else a
                for a in run("pkg-config", "--static", "--libs", "ragged", env=env).split()]
    exe = tmp_path / "use_ragged"
    run("cc", "-std=c11", "-Wall", "-Werror", *cflags, PROG, "-o", exe, *libs)
    needed = run("readelf", "-d", exe)
    assert ("libragged.so" in needed) == (link == "shared"), needed
    if link == "shared":  # the .pc's rpath: it runs without LD_LIBRARY_PATH (issue 18, item 3)
        assert "-Wl,-rpath," + str(prefix / "lib") in libs, libs
        assert ("RUNPATH" in needed or "RPATH" in needed) and f"{prefix}/lib" in needed, needed
    out = run(exe, model, TEXT, tmp_path / "v.f32")  # _env(): no LD_LIBRARY_PATH
    lines = out.splitlines()
    want_vec, want_ids = _reference(model, tmp_path)
    version = run(prefix / "bin" / "ragged", "--version").strip()
    assert lines[0] == f"version {version} RG_ERR_IO"
    assert [int(x) for x in lines[1].split()[1:]] == want_ids
    got = np.fromfile(tmp_path / "v.f32", "<f4")
    assert got.shape == want_vec.shape == (64,)
    assert np.max(np.abs(got - want_vec)) <= 1e-6


def test_destdir_and_uninstall(tmp_path):
    """DESTDIR stages the tree (the .pc still says PREFIX); uninstall removes what install put."""
    stage = tmp_path / "stage"
    make_install("install", "PREFIX=/opt/ragged-test", f"DESTDIR={stage}")
    root = stage / "opt" / "ragged-test"
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    assert files == ["bin/ragged", "include/ragged.h", "lib/libragged.a", "lib/libragged.so",
                     "lib/pkgconfig/ragged.pc"]
    pc = (root / "lib" / "pkgconfig" / "ragged.pc").read_text()
    assert "prefix=/opt/ragged-test\n" in pc and str(stage) not in pc
    assert "Libs.private: " in pc and "-lopenblas" in pc
    assert "Libs: -L${libdir} -Wl,-rpath,${libdir} -lragged\n" in pc, pc
    make_install("uninstall", "PREFIX=/opt/ragged-test", f"DESTDIR={stage}")
    assert [p for p in root.rglob("*") if p.is_file()] == []
    # a library directory the dynamic linker searches anyway gets no rpath
    make_install("install", "PREFIX=/usr", f"DESTDIR={stage}")
    pc = (stage / "usr" / "lib" / "pkgconfig" / "ragged.pc").read_text()
    assert "Libs: -L${libdir} -lragged\n" in pc, pc
