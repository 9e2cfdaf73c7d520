"""Load-time validation on corrupted copies of the real all-MiniLM-L6-v2 directory.

Each case copies the model directory into a tmp dir, breaks one thing (a missing file, a
truncated or lying safetensors file, a header rewritten with a wrong dtype / shape / missing
tensor, a config.json that disagrees with the weights...) and checks that
  - ragged_ctypes.Model(dir) raises RaggedError with the expected status and a message naming the
    culprit (file, tensor or key), and
  - `ragged embed --model DIR` exits non-zero with exactly one stderr line naming the same culprit
    and nothing on stdout.
Safetensors headers are rewritten with the small helpers below (plain struct + json, no torch),
the data region is copied byte for byte. Two positive controls (an untouched copy and a copy whose
header went through the rewrite helper unchanged) must load, so a failure of a corrupted copy
cannot come from the copying itself.
"""
import json
import os
import shutil
import struct
import subprocess

import pytest

import ragged_ctypes as rc
from ragged_ctypes import BIN_PATH

QUERY_W = "encoder.layer.0.attention.self.query.weight"  # F32 (384, 384) in MiniLM
MISSING_T = "encoder.layer.3.output.dense.bias"
SMALL_FILES = ["config.json", "tokenizer.json", "vocab.txt", "tokenizer_config.json",
               "special_tokens_map.json", "modules.json", "sentence_bert_config.json",
               "config_sentence_transformers.json"]


# --------------------------------------------------------------------------------------------
# helpers

def read_header(path):
    """(header dict, offset of the data region) of a safetensors file."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
    return hdr, 8 + n


def write_with_header(src, dst, hdr, data_off, data_bytes=None):
    """Write dst = (new header, padded to 8 bytes with spaces) + src's data region
    (its first data_bytes bytes when given)."""
    raw = json.dumps(hdr, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with open(src, "rb") as fi, open(dst, "wb") as fo:
        fo.write(struct.pack("<Q", len(raw)))
        fo.write(raw)
        fi.seek(data_off)
        if data_bytes is None:
            shutil.copyfileobj(fi, fo, 1 << 22)
        else:
            fo.write(fi.read(data_bytes))


def copy_model(src, dst, weights="link"):
    """Copy MiniLM's small files into dst; model.safetensors is symlinked ('link', the file is
    never modified in place) or left out (None) for the caller to write."""
    os.makedirs(dst)
    for name in SMALL_FILES:
        if os.path.exists(os.path.join(src, name)):
            shutil.copy(os.path.join(src, name), os.path.join(dst, name))
    shutil.copytree(os.path.join(src, "1_Pooling"), os.path.join(dst, "1_Pooling"))
    if weights == "link":
        os.symlink(os.path.join(src, "model.safetensors"), os.path.join(dst, "model.safetensors"))
    return dst


def rewrite_header(src_dir, dst_dir, edit):
    """dst_dir/model.safetensors = src's with header edit(hdr) applied (edit mutates hdr)."""
    src = os.path.join(src_dir, "model.safetensors")
    hdr, off = read_header(src)
    edit(hdr)
    write_with_header(src, os.path.join(dst_dir, "model.safetensors"), hdr, off)


def edit_json(path, **changes):
    with open(path) as f:
        obj = json.load(f)
    obj.update(changes)
    with open(path, "w") as f:
        json.dump(obj, f, indent=2)


def cli_env():
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)  # the CLI is instrumented itself under the ASan pass
    env["ASAN_OPTIONS"] = "detect_leaks=1:abort_on_error=1"
    return env


# --------------------------------------------------------------------------------------------
# corruptions: name -> (make(src, dst) -> model dir, status, needles the message must contain)

def _missing_dir(src, dst):
    return os.path.join(dst, "does-not-exist")


def _remove(name):
    def make(src, dst):
        d = copy_model(src, dst)
        os.remove(os.path.join(d, name))
        return d
    return make


def _no_tokenizer(src, dst):
    d = copy_model(src, dst)
    for name in ("tokenizer.json", "vocab.txt"):
        os.remove(os.path.join(d, name))
    return d


def _fifo(name):
    """name (e.g. config.json) replaced by a FIFO with no writer: opening it for reading would
    block forever; the load must refuse it at once."""
    def make(src, dst):
        d = copy_model(src, dst)
        os.remove(os.path.join(d, name))
        os.mkfifo(os.path.join(d, name))
        return d
    return make


def _truncated(src, dst):
    d = copy_model(src, dst, weights=None)
    s = os.path.join(src, "model.safetensors")
    with open(s, "rb") as fi, open(os.path.join(d, "model.safetensors"), "wb") as fo:
        fo.write(fi.read(os.path.getsize(s) // 2))
    return d


def _lying_header(length):
    def make(src, dst):
        d = copy_model(src, dst, weights=None)
        s = os.path.join(src, "model.safetensors")
        with open(s, "rb") as fi, open(os.path.join(d, "model.safetensors"), "wb") as fo:
            fi.seek(8)
            fo.write(struct.pack("<Q", length if length else os.path.getsize(s)))
            shutil.copyfileobj(fi, fo, 1 << 22)
        return d
    return make


def _header_edit(edit):
    def make(src, dst):
        d = copy_model(src, dst, weights=None)
        rewrite_header(src, d, edit)
        return d
    return make


def _dtype_i64(hdr):
    # same bytes, now 384 x 192 int64: a well-formed tensor of an unsupported dtype
    hdr[QUERY_W]["dtype"] = "I64"
    hdr[QUERY_W]["shape"] = [384, 192]


def _wrong_shape(hdr):
    # same bytes, shape (768, 192): valid file, but not what config.json implies
    hdr[QUERY_W]["shape"] = [768, 192]


def _shape_size_mismatch(hdr):
    hdr[QUERY_W]["shape"] = [384, 385]


def _missing_tensor(hdr):
    del hdr[MISSING_T]


def _overlap(hdr):
    b, e = hdr[QUERY_W]["data_offsets"]
    k = "encoder.layer.0.attention.self.key.weight"
    hdr[k]["data_offsets"] = [b + 4, e + 4]


def _config(**changes):
    def make(src, dst):
        d = copy_model(src, dst)
        edit_json(os.path.join(d, "config.json"), **changes)
        return d
    return make


def _pooling(**changes):
    def make(src, dst):
        d = copy_model(src, dst)
        edit_json(os.path.join(d, "1_Pooling", "config.json"), **changes)
        return d
    return make


CASES = {
    "missing_dir": (_missing_dir, "RG_ERR_IO", ["model directory", "does-not-exist"]),
    "no_config": (_remove("config.json"), "RG_ERR_IO", ["config.json"]),
    "no_weights": (_remove("model.safetensors"), "RG_ERR_IO", ["model.safetensors"]),
    "no_tokenizer": (_no_tokenizer, "RG_ERR_IO", ["tokenizer.json", "vocab.txt"]),
    "fifo_config": (_fifo("config.json"), "RG_ERR_IO", ["config.json", "not a regular file"]),
    "fifo_tokenizer": (_fifo("tokenizer.json"), "RG_ERR_IO",
                       ["tokenizer.json", "not a regular file"]),
    "fifo_weights": (_fifo("model.safetensors"), "RG_ERR_IO",
                     ["model.safetensors", "not a regular file"]),
    "fifo_pooling": (_fifo(os.path.join("1_Pooling", "config.json")), "RG_ERR_IO",
                     ["1_Pooling/config.json", "not a regular file"]),
    "fifo_modules": (_fifo("modules.json"), "RG_ERR_IO", ["modules.json", "not a regular file"]),
    "truncated": (_truncated, "RG_ERR_FORMAT", ["model.safetensors", "exceed data size"]),
    "header_len_past_eof": (_lying_header(0), "RG_ERR_FORMAT",
                            ["model.safetensors", "header length"]),
    "header_len_2_60": (_lying_header(1 << 60), "RG_ERR_FORMAT",
                        ["model.safetensors", "header length 1152921504606846976"]),
    "dtype_i64": (_header_edit(_dtype_i64), "RG_ERR_UNSUPPORTED",
                  ["model.safetensors", QUERY_W, "I64"]),
    "wrong_shape": (_header_edit(_wrong_shape), "RG_ERR_FORMAT", [QUERY_W, "768"]),
    "shape_size_mismatch": (_header_edit(_shape_size_mismatch), "RG_ERR_FORMAT",
                            ["model.safetensors", QUERY_W]),
    "missing_tensor": (_header_edit(_missing_tensor), "RG_ERR_FORMAT", [MISSING_T]),
    "overlap": (_header_edit(_overlap), "RG_ERR_FORMAT", ["model.safetensors", "overlap"]),
    "hidden_256": (_config(hidden_size=256), "RG_ERR_FORMAT",
                   ["config.json", "hidden_size 256", "num_attention_heads 12"]),
    "hidden_256_heads_8": (_config(hidden_size=256, num_attention_heads=8), "RG_ERR_FORMAT",
                           ["embeddings.", "256"]),
    "hidden_size_string": (_config(hidden_size="384"), "RG_ERR_FORMAT",
                           ["config.json", "hidden_size"]),
    "model_type_deberta": (_config(model_type="deberta"), "RG_ERR_UNSUPPORTED",
                           ["model_type", "deberta"]),
    "is_decoder": (_config(is_decoder=True), "RG_ERR_UNSUPPORTED", ["config.json", "is_decoder"]),
    "token_classification": (_config(architectures=["BertForTokenClassification"]),
                             "RG_ERR_UNSUPPORTED", ["BertForTokenClassification"]),
    # a classifier config without its head's weights
    "classifier_no_head": (_config(architectures=["BertForSequenceClassification"],
                                   id2label={"0": "LABEL_0"}), "RG_ERR_FORMAT",
                           ["missing tensor", "classifier.weight"]),
    "id2label_gap": (_config(architectures=["BertForSequenceClassification"],
                             id2label={"0": "a", "2": "b"}), "RG_ERR_FORMAT", ["id2label"]),
    # a DistilBERT config over BERT weights: the weight names do not match
    "distilbert_names": (_config(model_type="distilbert", dim=384, n_heads=12, n_layers=6,
                                 hidden_dim=1536), "RG_ERR_FORMAT",
                         ["missing tensor", "transformer.layer.0.attention.q_lin.weight"]),
    "hidden_act_swish": (_config(hidden_act="swish"), "RG_ERR_UNSUPPORTED",
                         ["hidden_act", "swish"]),
    "pooling_sqrt_len": (_pooling(pooling_mode_mean_tokens=False,
                                  pooling_mode_mean_sqrt_len_tokens=True),
                         "RG_ERR_UNSUPPORTED", ["pooling_mode_mean_sqrt_len_tokens"]),
}


@pytest.fixture(scope="module")
def bad_dirs(minilm_dir, tmp_path_factory):
    """name -> corrupted model directory (built once, shared by the ctypes and CLI tests)."""
    root = tmp_path_factory.mktemp("bad_models")
    yield {name: make(minilm_dir, str(root / name)) for name, (make, _, _) in CASES.items()}
    shutil.rmtree(root, ignore_errors=True)  # ~600 MB of rewritten weights; pytest keeps tmp dirs


# --------------------------------------------------------------------------------------------
# positive controls

def test_untouched_copy_loads(minilm_dir, tmp_path):
    m = rc.Model(copy_model(minilm_dir, str(tmp_path / "ok")))
    assert m.tokenize("hello world")[0] == 101  # [CLS]


def test_header_roundtrip_copy_loads(minilm_dir, tmp_path):
    """The rewrite helper itself produces a loadable file (so corruptions are the only change)."""
    d = copy_model(minilm_dir, str(tmp_path / "rt"), weights=None)
    rewrite_header(minilm_dir, d, lambda hdr: None)
    m = rc.Model(d)
    assert m.tokenize("hello")[-1] == 102  # [SEP]
    del m
    shutil.rmtree(d)


def test_missing_tokenizer_json_says_so(minilm_dir, tmp_path):
    """Without tokenizer.json the tokenizer is built from vocab.txt: the load works and says so
    in one stderr line (it used to fall back silently)."""
    d = copy_model(minilm_dir, str(tmp_path / "vocab_only"))
    os.remove(os.path.join(d, "tokenizer.json"))
    p = subprocess.run([BIN_PATH, "embed", "--model", d], input=b"hello world\n",
                       capture_output=True, env=cli_env(), timeout=120)
    assert p.returncode == 0, p.stderr
    lines = p.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and "no tokenizer.json" in lines[0] and "vocab.txt" in lines[0], lines
    assert len(json.loads(p.stdout.splitlines()[0])) == 384


# --------------------------------------------------------------------------------------------
# the corruptions

@pytest.mark.parametrize("name", list(CASES))
def test_model_load_refuses(bad_dirs, name):
    _, status, needles = CASES[name]
    with pytest.raises(rc.RaggedError) as e:
        rc.Model(bad_dirs[name])
    assert e.value.status == status, f"{name}: {e.value}"
    for n in needles:
        assert n in e.value.message, f"{name}: {n!r} not in {e.value.message!r}"


@pytest.mark.parametrize("name", list(CASES))
def test_cli_embed_refuses(bad_dirs, name):
    if not os.path.exists(BIN_PATH):
        pytest.fail(f"{BIN_PATH} not built (make all)")
    _, _, needles = CASES[name]
    p = subprocess.run([BIN_PATH, "embed", "--model", bad_dirs[name]], input=b"hello world\n",
                       capture_output=True, env=cli_env(), timeout=300)
    err = p.stderr.decode(errors="replace")
    assert p.returncode != 0, f"{name}: exit 0"
    assert p.returncode < 128 and p.returncode > 0, f"{name}: killed/crashed ({p.returncode}): {err}"
    lines = err.strip().splitlines()
    assert len(lines) == 1, f"{name}: stderr is not one line: {lines}"
    assert p.stdout == b"", f"{name}: partial output on stdout"
    for n in needles:
        assert n in lines[0], f"{name}: {n!r} not in {lines[0]!r}"
