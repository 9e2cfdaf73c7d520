"""The `ragged` command: embed/tokenize/info output against independent references (HF tokenizers,
the float64 NumPy BERT in ref_bert.py), and one clear stderr line + non-zero exit for every error."""
import json
import os
import subprocess

import numpy as np
import pytest

from ragged_ctypes import BIN_PATH

HERE = os.path.dirname(os.path.abspath(__file__))


def _env():
    env = dict(os.environ)
    # Under the ASan pass the interpreter preloads the runtime; the CLI is instrumented itself and
    # gets full leak checking.
    env.pop("LD_PRELOAD", None)
    env["ASAN_OPTIONS"] = "detect_leaks=1:abort_on_error=1"
    return env


def ragged(*args, stdin=b"", check=False):
    p = subprocess.run([BIN_PATH, *args], input=stdin, capture_output=True, env=_env(), timeout=300)
    if check:
        assert p.returncode == 0, p.stderr.decode(errors="replace")
    return p


def one_error_line(p):
    assert p.returncode != 0
    lines = p.stderr.decode(errors="replace").strip().splitlines()
    assert len(lines) == 1, lines
    assert p.stdout == b"", "no partial output on error"
    return lines[0]


SENTS = [
    "The quick brown fox jumps over the lazy dog.",
    "ragged packs variable-length requests without padding.",
    "Café au lait, naïve résumé — déjà vu!",
    "一个句子。",
    "",
    "a",
    "Short.",
    "Machine learning models need careful evaluation on real data sets and real workloads, "
    "not only on synthetic benchmarks.",
]


@pytest.fixture(scope="module")
def hf_tok(minilm_dir):
    tokenizers = pytest.importorskip("tokenizers")
    t = tokenizers.Tokenizer.from_file(os.path.join(minilm_dir, "tokenizer.json"))
    t.no_truncation()
    t.no_padding()
    return t


def test_tokenize_matches_hf(minilm_dir, hf_tok):
    p = ragged("tokenize", "--model", minilm_dir, stdin="\n".join(SENTS).encode() + b"\n", check=True)
    got = [json.loads(l) for l in p.stdout.decode().splitlines()]
    assert len(got) == len(SENTS)
    for s, ids in zip(SENTS, got):
        assert ids == hf_tok.encode(s).ids, s


def test_embed_default_model_matches_float64_reference(minilm_dir, hf_tok):
    from ref_bert import RefBert
    # no --model: the default model must be found on its own
    p = ragged("embed", "--device", "cpu", stdin="\n".join(SENTS).encode(), check=True)
    got = np.array([json.loads(l) for l in p.stdout.decode().splitlines()])
    assert got.shape == (len(SENTS), 384)
    ref = RefBert(minilm_dir)
    want = ref.embed_batch([hf_tok.encode(s).ids for s in SENTS])
    for g, w in zip(got, want):
        cos = float(g @ w / (np.linalg.norm(g) * np.linalg.norm(w)))
        assert cos >= 0.99999, cos
        assert np.max(np.abs(g - w)) <= 1e-5 * np.max(np.abs(w)) + 1e-6


def test_small_batches_equal_one_batch(minilm_dir):
    text = "\n".join(SENTS * 3).encode()
    one = ragged("embed", "--model", minilm_dir, "--device", "cpu", stdin=text, check=True)
    many = ragged("embed", "--model", minilm_dir, "--device", "cpu", "--max-batch-tokens", "40",
                  stdin=text, check=True)
    a = np.array([json.loads(l) for l in one.stdout.decode().splitlines()])
    b = np.array([json.loads(l) for l in many.stdout.decode().splitlines()])
    assert a.shape == b.shape == (len(SENTS) * 3, 384)
    assert np.max(np.abs(a - b)) <= 1e-6 * np.max(np.abs(a))


def test_input_output_files(minilm_dir, tmp_path):
    inp = tmp_path / "in.txt"
    out = tmp_path / "out.jsonl"
    inp.write_text("hello world\r\nsecond line\n")
    ragged("embed", "--model", minilm_dir, "--device", "cpu", "--input", str(inp), "--output", str(out),
           check=True)
    rows = [json.loads(l) for l in out.read_text().splitlines()]
    assert len(rows) == 2 and all(len(r) == 384 for r in rows)
    # "\r\n" line ends are the same text as "\n" (alone vs in a batch of two: fp32 batch invariance)
    p = ragged("embed", "--model", minilm_dir, "--device", "cpu", stdin=b"hello world\n", check=True)
    alone = np.array(json.loads(p.stdout))
    assert np.max(np.abs(alone - rows[0])) <= 1e-6 * np.max(np.abs(alone))


def test_info(minilm_dir):
    p = ragged("info", check=True)
    info = json.loads(p.stdout)
    assert info["version"]
    assert isinstance(info["build"]["cuda"], bool)
    assert os.path.realpath(info["model_dir"]) == os.path.realpath(minilm_dir)
    m = info["model"]
    assert (m["hidden_size"], m["num_hidden_layers"], m["num_attention_heads"]) == (384, 6, 12)
    assert m["pooling"] == "mean" and m["normalize"] is True
    assert m["max_position_embeddings"] == 512


def test_too_long_needs_truncate(minilm_dir):
    long_text = ("word " * 600).encode() + b"\n"
    line = one_error_line(ragged("embed", "--model", minilm_dir, "--device", "cpu",
                                 stdin=b"ok\n" + long_text))
    assert "line 2" in line and "512" in line
    assert "--truncate" in line, line  # names the option that enables truncation (issue 18, item 3)
    line = one_error_line(ragged("tokenize", "--model", minilm_dir, stdin=long_text))
    assert "line 1" in line and "--truncate" in line, line
    p = ragged("embed", "--model", minilm_dir, "--device", "cpu", "--truncate", stdin=b"ok\n" + long_text,
               check=True)
    assert len(p.stdout.decode().splitlines()) == 2
    t = ragged("tokenize", "--model", minilm_dir, "--truncate", stdin=long_text, check=True)
    ids = json.loads(t.stdout)
    assert len(ids) == 512 and ids[0] == 101 and ids[-1] == 102


def test_invalid_utf8_names_line(minilm_dir):
    line = one_error_line(ragged("embed", "--model", minilm_dir, "--device", "cpu",
                                 stdin=b"fine\nalso fine\nbad \xff\xfe here\n"))
    assert "line 3" in line and "UTF-8" in line.upper().replace("UTF8", "UTF-8")


@pytest.mark.parametrize("args,needle", [
    (["embed", "--device", "tpu"], "--device"),
    (["embed", "--dtype", "fp8"], "--dtype"),
    (["embed", "--max-batch-tokens", "0"], "--max-batch-tokens"),
    (["embed", "--max-batch-tokens", "12x"], "--max-batch-tokens"),
    (["embed", "--model"], "needs a value"),
    (["embed", "--model="], "needs a value"),
    (["tokenize", "--output", ""], "needs a value"),
    (["embed", "--format", "csv"], "--format"),
    (["embed", "--truncate=yes"], "takes no value"),
])
def test_usage_errors(args, needle):
    p = ragged(*args, stdin=b"hi\n")
    assert p.returncode == 2
    assert needle in one_error_line(p)


@pytest.mark.parametrize("args,needle,usage", [
    (["embed", "--bogus"], "unknown option '--bogus'", "usage: ragged embed"),
    (["tokenize", "--format", "npy"], "unknown option '--format'", "usage: ragged tokenize"),
    (["info", "--input", "x"], "unknown option '--input'", "usage: ragged info"),
    (["serve", "--bogus"], "unknown option '--bogus'", "usage: ragged serve"),
    (["frobnicate"], "unknown command", "usage: ragged <command>"),
])
def test_unknown_option_prints_the_command_usage(args, needle, usage):
    """An option the command does not take: one line naming it, then that command's usage on
    stderr, exit status 2, nothing on stdout."""
    p = ragged(*args, stdin=b"hi\n")
    assert p.returncode == 2
    assert p.stdout == b""
    lines = p.stderr.decode().splitlines()
    assert needle in lines[0]
    assert lines[1] == usage or lines[1].startswith(usage + " ")


def test_command_help():
    """`ragged CMD --help` (and `ragged help CMD`) prints that command's own options on stdout."""
    own = {"embed": ["--format", "--progress", "--max-batch-tokens", "--model"],
           "tokenize": ["--truncate", "--output", "--model"],
           "info": ["--model", "--device"],
           "serve": ["--port", "--max-queue"],
           "loadgen": ["--rate", "--url"]}
    for cmd, flags in own.items():
        p = ragged(cmd, "--help")
        assert p.returncode == 0, (cmd, p.stderr)
        out = p.stdout.decode()
        assert out.splitlines()[0].startswith(f"usage: ragged {cmd} "), out
        for f in flags:
            assert f in out, (cmd, f)
        if cmd in ("tokenize", "info"):
            assert "--format" not in out and "--progress" not in out, (cmd, out)
        h = ragged("help", cmd)
        assert h.returncode == 0 and h.stdout == p.stdout, cmd
    assert ragged("embed", "-h").stdout == ragged("embed", "--help").stdout


def test_help_and_readme_agree_on_cpu_bf16():
    """`ragged embed --help` and the README both say bf16 runs on AVX512-BF16/AMX CPUs, with the
    accuracy bound test_cpu_backend.test_bf16_accuracy_on_many_texts asserts (issue 18, items 2
    and 3)."""
    import re
    from test_cpu_backend import BF16_MIN_COS
    out = " ".join(ragged("embed", "--help", check=True).stdout.decode().split())
    assert "fp16/bf16 need cuda" not in out
    assert "bf16 runs on cuda and on CPUs with AVX512-BF16 or AMX" in out, out
    with open(os.path.join(HERE, "..", "..", "README.md")) as f:
        readme = " ".join(f.read().split())
    assert "0.99999 against fp32" not in readme
    m = re.search(r"`--dtype bf16` runs the linear layers .*?cosine >= (0\.\d+) against fp32", readme)
    assert m, "README: the CPU bf16 paragraph"
    h = re.search(r"cosine to fp32 >= (0\.\d+)", out)
    assert h, out
    assert float(m.group(1)) == float(h.group(1)) == BF16_MIN_COS, (m.group(1), h.group(1))


def test_missing_model_dir(tmp_path):
    line = one_error_line(ragged("embed", "--model", str(tmp_path / "nope"), stdin=b"hi\n"))
    assert "nope" in line


def test_empty_input(minilm_dir):
    assert "empty input" in one_error_line(ragged("embed", "--model", minilm_dir, "--device", "cpu", stdin=b""))


def test_fp16_on_cpu_refused(minilm_dir):
    line = one_error_line(ragged("embed", "--model", minilm_dir, "--device", "cpu", "--dtype", "fp16",
                                 stdin=b"hi\n"))
    assert "fp16" in line or "fp32" in line


def test_unwritable_output(minilm_dir, tmp_path):
    p = ragged("embed", "--model", minilm_dir, "--device", "cpu", "--output", str(tmp_path / "no" / "x"),
               stdin=b"hi\n")
    assert p.returncode != 0 and len(p.stderr.decode().strip().splitlines()) == 1


def test_cuda_request_without_gpu(minilm_dir):
    p = ragged("info")
    if json.loads(p.stdout)["build"]["cuda_devices"] > 0:
        pytest.skip("a GPU is present: this checks the no-GPU path")
    line = one_error_line(ragged("embed", "--model", minilm_dir, "--device", "cuda", stdin=b"hi\n"))
    assert "cuda" in line.lower() or "gpu" in line.lower()


def test_embed_classifier_writes_scores(tiny_dirs):
    """`ragged embed` on a *ForSequenceClassification model writes each text's raw scores
    (num_labels floats), equal to the float64 reference's head; `ragged info` reports them."""
    import tokenizers
    from ref_bert import RefBert
    d = tiny_dirs["roberta_cls3"]
    texts = ["the service was quick", "and the answers were right"]
    p = ragged("embed", "--model", d, "--device", "cpu", stdin="\n".join(texts).encode(),
               check=True)
    got = np.array([json.loads(l) for l in p.stdout.decode().splitlines()])
    hf = tokenizers.Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    hf.no_padding()  # the MPNet tokenizer.json it carries pads to 128
    hf.no_truncation()
    want = RefBert(d).embed_batch([hf.encode(t).ids for t in texts])
    assert got.shape == (2, 3)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    info = json.loads(ragged("info", "--model", d, check=True).stdout)
    assert (info["model"]["num_labels"], info["model"]["output_dim"]) == (3, 3)
