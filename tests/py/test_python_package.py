"""The Python package (issue 9, item 9): `pip install ./python` into a fresh venv gives `import
ragged` with libragged.so bundled; ragged.Model(...).encode(...) returns float32 (n, dim) arrays equal
to the CLI's vectors for the same texts (max abs diff < 1e-6), a 1-D array for one str, unit rows
by default, the raw pooled vector with normalize=False where the library can give it; Hugging Face
ids resolve through the local cache; errors are Python exceptions naming the input.

The venv is made with --system-site-packages (numpy comes from the test interpreter) and
--without-pip (the system pip installs into it); pip runs with --no-deps --no-build-isolation
--no-index, so nothing is downloaded. The scripts run in the venv's interpreter with RAGGED_LIB as
the suite sets it (the ASan library in the ASan pass), except the bundling check."""
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import ragged_ctypes as rc
from hf_cache import add_snapshot, commit_hash

ROOT = rc.ROOT
SENTS = ["The quick brown fox jumps over the lazy dog.", "a", "Café au lait, naïve résumé!",
         "ragged packs variable-length requests without padding.", "一个句子。", "",
         "Machine learning models need careful evaluation on real data sets and workloads."]


def _clean_env(**kw):
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    env.pop("PYTHONPATH", None)
    env.update({k: str(v) for k, v in kw.items()})
    return env


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    d = tmp_path_factory.mktemp("pkg") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", d],
                   check=True, env=_clean_env(), timeout=120)
    py = d / "bin" / "python"
    # build from a copy: setuptools builds in place (python/build), and the release and ASan
    # passes of make test run side by side; the copy bundles the checkout's library as
    # `pip install ./python` would (setup.py: ../build/libragged.so)
    src = d.parent / "src"
    shutil.copytree(os.path.join(ROOT, "python"), src,
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    lib = os.path.join(ROOT, "build", "libragged.so")
    p = subprocess.run([py, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                        "--no-index", "--disable-pip-version-check", str(src)], cwd=d.parent,
                       capture_output=True, text=True, timeout=300,
                       env=_clean_env(RAGGED_BUNDLE_LIB=lib if os.path.isfile(lib) else ""))
    assert p.returncode == 0, p.stdout + p.stderr
    return py


def vrun(venv, tmp_path, code, clean=False, **env):
    """Run code in the venv's interpreter (cwd tmp_path, so the repository is not on sys.path)."""
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(code))
    if clean:
        e = _clean_env(**env)
    else:  # the library under test, as the suite names it (cwd differs: an absolute path)
        e = dict(os.environ, RAGGED_LIB=os.path.abspath(rc.PUBLIC_LIB_PATH))
        e.update({k: str(v) for k, v in env.items()})
    e.pop("PYTHONPATH", None)
    p = subprocess.run([venv, str(script)], cwd=tmp_path, capture_output=True, text=True, env=e,
                       timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


def cli_vectors(model, texts):
    """The CLI's vectors for texts (--format npy), the reference."""
    p = subprocess.run([rc.BIN_PATH, "embed", "--model", model, "--device", "cpu", "--format",
                        "npy", "--truncate"], input=("\n".join(texts) + "\n").encode(),
                       capture_output=True, env=_clean_env(ASAN_OPTIONS="detect_leaks=1"),
                       timeout=300)
    assert p.returncode == 0, p.stderr
    import io
    return np.load(io.BytesIO(p.stdout))


def test_installed_with_the_library_bundled(venv, tmp_path):
    out = vrun(venv, tmp_path, """
        import ragged
        print(ragged.__file__)
        print(ragged.library_path())
        print(ragged.__version__)
    """, clean=True, RAGGED_LIB="")
    pkg_file, libpath, version = out.split()
    pkg_dir = os.path.dirname(pkg_file)
    assert pkg_dir.startswith(str(venv.parent.parent)) and "site-packages" in pkg_dir
    assert libpath == os.path.join(pkg_dir, "libragged.so")
    with open(os.path.join(ROOT, "include", "ragged.h")) as f:
        assert f'#define RAGGED_VERSION "{version}"' in f.read()


def test_encode_equals_cli(venv, tmp_path, minilm_dir):
    """all-MiniLM-L6-v2 (a Normalize module): encode() in batches of 3 equals the CLI's one batch."""
    vrun(venv, tmp_path, f"""
        import numpy as np, ragged
        m = ragged.Model({minilm_dir!r}, device="cpu", dtype="fp32")
        sents = {SENTS!r}
        e = m.encode(sents, batch_size=3)
        assert isinstance(e, np.ndarray) and e.dtype == np.float32 and e.flags["C_CONTIGUOUS"]
        np.save("e.npy", e)
        one = m.encode(sents[0])
        assert one.shape == (m.output_dim,)
        np.save("one.npy", one)
        assert m.encode([]).shape == (0, 384)
        # the Normalize module skipped, as the server's "normalize": false (issue 18 item 8)
        np.save("raw.npy", m.encode(sents, normalize=False, batch_size=2))
        assert m.tokenize("hello world") == [101, 7592, 2088, 102]
        assert m.info["hidden_size"] == 384 and m.info["pooling"] == "mean"
        m.close()
    """)
    got = np.load(tmp_path / "e.npy")
    want = cli_vectors(minilm_dir, SENTS)
    assert got.shape == want.shape == (len(SENTS), 384)
    assert np.max(np.abs(got - want)) < 1e-6
    assert np.max(np.abs(np.load(tmp_path / "one.npy") - want[0])) < 1e-6
    assert np.allclose(np.linalg.norm(got, axis=1), 1, atol=1e-5)
    raw = np.load(tmp_path / "raw.npy").astype(np.float64)
    norms = np.linalg.norm(raw, axis=1)
    assert np.all(np.abs(norms - 1) > 1e-2), norms  # the raw mean pooled vectors
    assert np.max(np.abs(raw / norms[:, None] - want)) < 1e-5


def test_readme_example_runs_without_a_hf_cache(venv, tmp_path, minilm_dir):
    """python/README.md's first example runs as written right after `make run` (issue 18, item 3):
    no Hugging Face cache (HF_HOME empty), the default model, and the CLI's vectors."""
    import re
    with open(os.path.join(ROOT, "python", "README.md")) as f:
        code = re.search(r"```python\n(.*?)```", f.read(), re.S).group(1)
    (tmp_path / "hf").mkdir()
    vrun(venv, tmp_path, code + textwrap.dedent("""
        import numpy as np
        np.save("emb.npy", emb)
        np.save("v.npy", v)
    """), HF_HOME=tmp_path / "hf", HF_HUB_CACHE=tmp_path / "hf", RAGGED_MODEL_DIR=minilm_dir)
    emb, v = np.load(tmp_path / "emb.npy"), np.load(tmp_path / "v.npy")
    want = cli_vectors(minilm_dir, ["first text", "second text", "one text"])
    assert emb.shape == (2, 384) and v.shape == (384,)
    assert np.max(np.abs(emb - want[:2])) < 1e-6 and np.max(np.abs(v - want[2])) < 1e-6


def test_normalize_false_gives_raw_pooled_vectors(venv, tmp_path, tiny_dirs):
    """A model without a Normalize module: normalize=False is the library's (the CLI's) raw mean
    pooled vector, not of unit norm; normalize=True the same rows divided by their norms."""
    d = tiny_dirs["h32_gelu"]
    vrun(venv, tmp_path, f"""
        import numpy as np, ragged
        with ragged.Model({d!r}, device="cpu") as m:
            assert not m.normalizes
            np.save("raw.npy", m.encode({SENTS!r}, normalize=False, batch_size=2))
            np.save("unit.npy", m.encode({SENTS!r}))
    """)
    raw, unit = np.load(tmp_path / "raw.npy"), np.load(tmp_path / "unit.npy")
    want = cli_vectors(d, SENTS)
    assert raw.shape == (len(SENTS), 32)
    assert np.max(np.abs(raw - want)) < 1e-6
    norms = np.linalg.norm(want.astype(np.float64), axis=1)
    assert np.all(np.abs(norms - 1) > 1e-2), norms  # really not unit vectors
    assert np.max(np.abs(unit - want / norms[:, None])) < 1e-6


def test_hf_id_and_errors(venv, tmp_path, tiny_dirs):
    hub = tmp_path / "hf" / "hub"
    add_snapshot(hub, "tiny-org/tiny-bert", tiny_dirs["h64_relu_norm"], commit_hash(7),
                 ref_main=True)
    out = vrun(venv, tmp_path, f"""
        import numpy as np, ragged
        m = ragged.Model("tiny-org/tiny-bert", device="cpu")
        print(m.model_dir)
        np.save("byid.npy", m.encode(["hello world", "a second one"]))
        checks = [
            (lambda: ragged.Model("/no/such/dir"), ragged.RaggedError, "does not exist"),
            (lambda: ragged.Model("tiny-org/absent"), ragged.RaggedError, "models--tiny-org--absent"),
            (lambda: ragged.Model({tiny_dirs['h32_gelu']!r}, device="tpu"), ValueError, "tpu"),
            (lambda: ragged.Model({tiny_dirs['h32_gelu']!r}, dtype="fp8"), ValueError, "fp8"),
            (lambda: m.encode(["ok", 3]), TypeError, "input 1"),
            (lambda: m.encode(["ok"], batch_size=0), ValueError, "batch_size"),
            (lambda: m.encode(["ok", "bad \\ud800"]), ValueError, "input 1"),
            (lambda: ragged.Model({tiny_dirs['short_pos64']!r}, truncate=False)
                .encode(["ok", "word " * 100]), ragged.RaggedError, "input 1"),
            (lambda: ragged.Model({tiny_dirs['short_pos64']!r}, truncate=False)
                .encode(["word " * 100]), ragged.RaggedError, "truncate=True"),
        ]
        for fn, exc, needle in checks:
            try:
                fn()
            except exc as e:
                assert needle in str(e), (needle, str(e))
            else:
                raise SystemExit(f"no {{exc.__name__}} for {{needle}}")
        # truncate=True (the default, as sentence-transformers): long texts are cut
        assert ragged.Model({tiny_dirs['short_pos64']!r}).encode("word " * 100).shape == (32,)
        m.close()
        try:
            m.encode("x")
        except ValueError as e:
            assert "closed" in str(e)
    """, HF_HOME=tmp_path / "hf")
    assert out.strip().endswith("snapshots/" + commit_hash(7))
    want = cli_vectors(tiny_dirs["h64_relu_norm"], ["hello world", "a second one"])
    assert np.max(np.abs(np.load(tmp_path / "byid.npy") - want)) < 1e-6
