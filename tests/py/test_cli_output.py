"""`ragged embed` output (issue 9, item 6): the formats (jsonl, NumPy .npy read back by numpy.load,
raw float32), atomic --output (a failed run leaves no file and an existing one untouched),
progress and throughput on stderr."""
import json
import os
import stat
import subprocess

import numpy as np
import pytest

from ragged_ctypes import BIN_PATH

SENTS = ["The quick brown fox jumps over the lazy dog.", "a", "Café au lait, naïve résumé!",
         "ragged packs variable-length requests without padding.", "一个句子。", "Short."]
TEXT = ("\n".join(SENTS) + "\n").encode()


def _env():
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    env["ASAN_OPTIONS"] = "detect_leaks=1:abort_on_error=1"
    return env


def ragged(*args, stdin=b""):
    return subprocess.run([BIN_PATH, *args], input=stdin, capture_output=True, env=_env(),
                          timeout=300)


def embed(model, *args, stdin=TEXT):
    p = ragged("embed", "--model", model, "--device", "cpu", *args, stdin=stdin)
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    return p


@pytest.fixture(scope="module")
def jsonl_rows(minilm_dir):
    p = embed(minilm_dir)
    rows = np.array([json.loads(l) for l in p.stdout.decode().splitlines()], np.float32)
    assert rows.shape == (len(SENTS), 384)
    return rows


def test_npy_format(minilm_dir, jsonl_rows, tmp_path):
    """A .npy v1.0 file that numpy.load reads as float32 (n, 384), C order, the same numbers as
    jsonl (whose %.9g round-trips a float32 exactly); to a file and to stdout alike."""
    out = tmp_path / "e.npy"
    embed(minilm_dir, "--format", "npy", "--output", str(out))
    a = np.load(out)
    assert a.dtype == np.dtype("<f4") and a.shape == (len(SENTS), 384)
    assert a.flags["C_CONTIGUOUS"]
    assert np.array_equal(a, jsonl_rows)
    raw = out.read_bytes()
    assert raw[:8] == b"\x93NUMPY\x01\x00"
    hlen = int.from_bytes(raw[8:10], "little")
    assert (10 + hlen) % 64 == 0 and raw[10 + hlen - 1:10 + hlen] == b"\n"
    assert len(raw) == 10 + hlen + a.size * 4
    p = embed(minilm_dir, "--format", "npy")
    assert p.stdout == raw


def test_f32_format(minilm_dir, jsonl_rows, tmp_path):
    out = tmp_path / "e.f32"
    embed(minilm_dir, "--format=f32", "--output", str(out))
    raw = out.read_bytes()
    assert len(raw) == len(SENTS) * 384 * 4
    assert np.array_equal(np.frombuffer(raw, "<f4").reshape(len(SENTS), 384), jsonl_rows)


def test_formats_agree_across_batches(tiny_dirs):
    """Several batches (--max-batch-tokens 16): rows stay in input order in every format."""
    d = tiny_dirs["h32_gelu"]
    one = np.frombuffer(embed(d, "--format", "f32").stdout, "<f4").reshape(-1, 32)
    many = np.frombuffer(embed(d, "--format", "f32", "--max-batch-tokens", "16").stdout,
                         "<f4").reshape(-1, 32)
    assert one.shape == (len(SENTS), 32)
    assert np.max(np.abs(one - many)) <= 1e-6 * np.max(np.abs(one))


def test_output_replaced_atomically(minilm_dir, tmp_path):
    """Success: the new content replaces the file, whose mode is kept; no temporary file stays."""
    out = tmp_path / "out.jsonl"
    out.write_text("OLD\n")
    out.chmod(0o640)
    embed(minilm_dir, "--output", str(out))
    assert len(out.read_text().splitlines()) == len(SENTS)
    assert stat.S_IMODE(out.stat().st_mode) == 0o640
    assert sorted(os.listdir(tmp_path)) == ["out.jsonl"]
    # a new file gets 0666 less the umask, as fopen would have created it
    new = tmp_path / "new.jsonl"
    embed(minilm_dir, "--output", str(new), stdin=b"one\n")
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(new.stat().st_mode) == 0o666 & ~mask


@pytest.mark.parametrize("case", ["bad-utf8", "too-long-for-batch"])
def test_failed_run_leaves_output_untouched(minilm_dir, tmp_path, case):
    """A failure in the middle of the input: the existing output keeps its content, nothing else
    is left in the directory. too-long-for-batch fails after earlier batches were written (line 5
    has more tokens than --max-batch-tokens 20), bad-utf8 before any output."""
    out = tmp_path / "out.npy"
    out.write_bytes(b"KEEP ME\n")
    lines = [b"first line", b"second line", b"third line", b"fourth line"]
    if case == "bad-utf8":
        lines.insert(2, b"bad \xff\xfe here")
        extra, where = [], "line 3"
    else:
        lines.insert(4, b"a much longer line with more than twenty word piece tokens " * 2)
        extra, where = ["--max-batch-tokens", "20"], "line 5"
    lines += [b"after the bad one"] * 3
    p = ragged("embed", "--model", minilm_dir, "--device", "cpu", "--format", "npy", "--output",
               str(out), *extra, stdin=b"\n".join(lines) + b"\n")
    assert p.returncode == 1
    assert where in p.stderr.decode(errors="replace")
    assert out.read_bytes() == b"KEEP ME\n"
    assert os.listdir(tmp_path) == ["out.npy"]
    # and no output file at all when there was none
    fresh = tmp_path / "fresh.npy"
    p = ragged("embed", "--model", minilm_dir, "--device", "cpu", "--output", str(fresh), *extra,
               stdin=b"\n".join(lines) + b"\n")
    assert p.returncode == 1 and not fresh.exists()
    assert os.listdir(tmp_path) == ["out.npy"]


def test_output_into_missing_directory(minilm_dir, tmp_path):
    p = ragged("embed", "--model", minilm_dir, "--output", str(tmp_path / "no" / "x.jsonl"),
               stdin=b"hi\n")
    assert p.returncode == 1 and "cannot write --output" in p.stderr.decode()


def test_output_through_symlink_replaces_target(minilm_dir, tmp_path):
    target = tmp_path / "real.jsonl"
    target.write_text("OLD\n")
    link = tmp_path / "link.jsonl"
    os.symlink(target, link)
    embed(minilm_dir, "--output", str(link), stdin=b"hi\n")
    assert os.path.islink(link)
    assert len(json.loads(target.read_text())) == 384


def test_progress(minilm_dir, tiny_dirs):
    """--progress reports texts done of the total and the throughput on stderr (stderr is a pipe
    here, so without it nothing is printed); --no-progress turns it off."""
    text = ("\n".join(SENTS * 5) + "\n").encode()
    p = embed(tiny_dirs["h32_gelu"], "--progress", "--max-batch-tokens", "32", stdin=text)
    err = p.stderr.decode()
    last = [l for l in err.splitlines() if l.startswith("ragged embed:")][-1]
    assert f"{len(SENTS) * 5}/{len(SENTS) * 5} texts (100%)" in last, err
    assert "texts/s" in last and "tokens/s" in last
    assert len(p.stdout.decode().splitlines()) == len(SENTS) * 5
    quiet = embed(tiny_dirs["h32_gelu"], stdin=text)
    assert "texts/s" not in quiet.stderr.decode()
    off = embed(tiny_dirs["h32_gelu"], "--progress", "--no-progress", stdin=text)
    assert "texts/s" not in off.stderr.decode()
