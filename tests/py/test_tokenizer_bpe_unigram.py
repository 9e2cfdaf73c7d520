"""Tokenizer parity for the byte-level BPE and Unigram models (src/tokenizer/bpe.c, unigram.c,
normalizers.c, precompiled.c, pretokenizers.c) against HF `tokenizers`.

The reference is always HF `tokenizers` itself: Tokenizer.from_file on the same tokenizer.json;
ids must be identical. Fixtures:
  - trained here, offline, by HF on the corpus (tests/py/corpus.py): a ByteLevel BPE (RoBERTa
    layout: ByteLevel pre-tokenizer, RobertaProcessing, <mask> with lstrip), a BPE with
    continuing_subword_prefix / end_of_word_suffix / unk_token, a Unigram with Metaspace;
  - tests/fixtures/tokenizers/spm-xlmr-style, spm-albert-style: tokenizer.json written by
    transformers' XLMRobertaConverter / AlbertConverter from SentencePiece unigram models trained on
    the corpus (nmt_nfkc rules: a real precompiled_charsmap); all-mpnet-base-v2: the real MPNet file
    (WordPiece + RobertaProcessing);
  - RAGGED_TOKENIZER_DIRS (colon-separated directories holding tokenizer.json, e.g. a real
    xlm-roberta-base or multilingual-e5 of 17 MB that is not copied into the tree): the same parity.

`python3 tests/py/test_tokenizer_bpe_unigram.py --gen-tables` regenerates
src/tokenizer/hf_unicode_tables_ext.h (the Unicode classes as HF sees them).
"""
import json
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import corpus  # noqa: E402

ASAN = os.environ.get("RAGGED_ASAN") == "1"
FIXTURES = os.path.join(os.path.dirname(HERE), "fixtures", "tokenizers")
SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]


def _tk():
    import tokenizers
    return tokenizers


def hf_from_file(path):
    tok = _tk().Tokenizer.from_file(path)
    tok.no_truncation()
    tok.no_padding()
    return tok


def ragged_tokenizer(d):
    import ragged_ctypes
    return ragged_ctypes.Tokenizer(str(d))


def tok_ids(rt):
    """(cls_id, sep_id, vocab_size) of a ragged tokenizer."""
    import ctypes
    import ragged_ctypes
    lib = ragged_ctypes.lib()
    out = []
    for f in ("rg_tokenizer_cls_id", "rg_tokenizer_sep_id", "rg_tokenizer_vocab_size"):
        fn = getattr(lib, f)
        fn.argtypes = [ctypes.c_void_p]
        fn.restype = ctypes.c_int32
        out.append(fn(rt._h))
    return tuple(out)


def edge_texts():
    """Texts aimed at the byte-level regex, Metaspace, the charsmap and the unknown-char paths."""
    t = ["", " ", "  ", "\t", "\n", " \n ", "a", " a", "a ", "  a  ", "a  b", "a   b", "a\tb",
         "a\t\tb", "a \t b", "a\n\nb", "line1\nline2\r\nline3", "trailing   ", "   leading",
         "it's don't I'm we've they're you'll he'd", "IT'S DON'T", "'s 't 're 've 'm 'll 'd",
         "''s ''", "x's's", "rock'n'roll", "l'homme d'État", "1234567890", "3.14159 2,718 1e10",
         "abc123def 456ghi", "١٢٣ ٤٥٦", "½ ¾ ² ³ Ⅻ", "!!!???...", "--- *** ###", "(a) [b] {c}",
         "a,b;c:d", "«guillemets» „quotes“", "email@example.com http://x.y/z?q=1&r=2",
         "café naïve résumé Ångström", "e\u0301 a\u0300 o\u0308 n\u0303", "\u0301leading mark",
         "Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334algo", "İstanbul ß ẞ ﬁ ﬂ",
         "中文字符测试 日本語のテキスト 한국어 텍스트", "東京タワー", "ｆｕｌｌｗｉｄｔｈ　ＡＢＣ　１２３",
         "ｶﾀｶﾅ ﾊﾟﾋﾟﾌﾟ", "emoji 😀🎉👍🏽 👨‍👩‍👧‍👦 🇫🇷", "❤️ ✌🏿 ☕",
         "العربية نص تجريبي", "עברית", "हिन्दी क्षत्रिय", "ภาษาไทย", "Ελληνικά", "Русский текст",
         "\u200b\u200c\u200d\ufeff zero width", "\x00\x01\x07 controls \x7f", "tab\there",
         "nbsp\u00a0here", "ideographic\u3000space", "\u2028\u2029 separators",
         "``quoted'' text", "a" * 300, "ab" * 700, "x" * 3000 + " y", "Supercalifragilistic" * 20,
         "𝕳𝖊𝖑𝖑𝖔 𝓦𝓸𝓻𝓵𝓭", "™ © ® ℃ № ㎏", "Ａ\u0301 ｅ\u0301", "<s>", "</s>", "<mask>",
         "hello <mask> world", "hello<mask>world", "hello   <mask>   world", "<s>x</s>",
         "a <unk> b <pad> c", "[CLS] x [SEP] [MASK]", "<s ></s>", "\U0010FFFF\U000E0001 edge"]
    return t


@pytest.fixture(scope="module")
def texts():
    t = corpus.build_corpus() + corpus.extra_texts_with_newlines() + edge_texts()
    return t[::3] if ASAN else t


def assert_parity(rt, hf, texts, what):
    bad = []
    for t in texts:
        got, ref = rt.encode(t), hf.encode(t).ids
        if got != ref:
            bad.append((t, got, ref))
    if bad:
        t, got, r = bad[0]
        i = next((k for k in range(min(len(got), len(r))) if got[k] != r[k]), min(len(got), len(r)))
        pytest.fail(f"{what}: {len(bad)}/{len(texts)} texts differ; first {t[:120]!r}: first diff at "
                    f"{i}: ragged {got[max(0, i - 3):i + 5]} hf {r[max(0, i - 3):i + 5]}")
    return len(texts)


def save(tok, d):
    os.makedirs(d, exist_ok=True)
    tok.save(os.path.join(str(d), "tokenizer.json"))
    return d


def edit_json(src_dir, dst_dir, edit):
    with open(os.path.join(str(src_dir), "tokenizer.json"), encoding="utf-8") as f:
        j = json.load(f)
    edit(j)
    os.makedirs(dst_dir, exist_ok=True)
    with open(os.path.join(str(dst_dir), "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False)
    return dst_dir


# ---- fixtures trained by HF --------------------------------------------------------------------

@pytest.fixture(scope="module")
def bytelevel_dir(tmp_path_factory):
    """RoBERTa layout: ByteLevel(add_prefix_space=False) + BPE + RobertaProcessing, <mask> lstrip."""
    tk = _tk()
    tok = tk.Tokenizer(tk.models.BPE())
    tok.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tk.decoders.ByteLevel()
    trainer = tk.trainers.BpeTrainer(vocab_size=3000, min_frequency=2, special_tokens=SPECIALS,
                                     initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet(),
                                     show_progress=False)
    tok.train_from_iterator(corpus.build_corpus(), trainer)
    tok.post_processor = tk.processors.RobertaProcessing(("</s>", tok.token_to_id("</s>")),
                                                         ("<s>", tok.token_to_id("<s>")))
    tok.add_special_tokens([tk.AddedToken("<mask>", lstrip=True, special=True, normalized=False)])
    return save(tok, tmp_path_factory.mktemp("bytelevel_bpe"))


@pytest.fixture(scope="module")
def unigram_dir(tmp_path_factory):
    """Unigram + Metaspace + TemplateProcessing, normalizer Sequence[NFKC, Replace, Strip]."""
    tk = _tk()
    tok = tk.Tokenizer(tk.models.Unigram())
    tok.normalizer = tk.normalizers.Sequence([tk.normalizers.NFKC(),
                                              tk.normalizers.Replace("``", '"'),
                                              tk.normalizers.Strip(left=False, right=True)])
    tok.pre_tokenizer = tk.pre_tokenizers.Metaspace()
    trainer = tk.trainers.UnigramTrainer(vocab_size=2000, special_tokens=SPECIALS, unk_token="<unk>",
                                         show_progress=False)
    tok.train_from_iterator(corpus.build_corpus(), trainer)
    tok.post_processor = tk.processors.TemplateProcessing(
        single="<s> $A </s>", special_tokens=[("<s>", tok.token_to_id("<s>")),
                                              ("</s>", tok.token_to_id("</s>"))])
    return save(tok, tmp_path_factory.mktemp("unigram"))


# ---- byte-level BPE ----------------------------------------------------------------------------

def test_bytelevel_bpe_parity(bytelevel_dir, texts):
    rt = ragged_tokenizer(bytelevel_dir)
    hf = hf_from_file(os.path.join(bytelevel_dir, "tokenizer.json"))
    assert assert_parity(rt, hf, texts, "byte-level BPE") > 600
    assert rt.encode("") == hf.encode("").ids == [0, 2]
    assert tok_ids(rt) == (0, 2, hf.get_vocab_size())


@pytest.mark.parametrize("variant", ["prefix_space", "legacy_merges", "no_regex", "ignore_merges",
                                     "template", "sequence_pp", "nfkc_lower"])
def test_bytelevel_bpe_variants(tmp_path, bytelevel_dir, texts, variant):
    def edit(j):
        if variant == "prefix_space":
            j["pre_tokenizer"]["add_prefix_space"] = True
        elif variant == "legacy_merges":
            j["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m
                                    for m in j["model"]["merges"]]
        elif variant == "no_regex":
            j["pre_tokenizer"]["use_regex"] = False
        elif variant == "ignore_merges":
            j["model"]["ignore_merges"] = True
        elif variant in ("template", "sequence_pp"):
            tp = {"type": "TemplateProcessing",
                  "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                             {"Sequence": {"id": "A", "type_id": 0}},
                             {"SpecialToken": {"id": "</s>", "type_id": 0}}],
                  "pair": [{"Sequence": {"id": "A", "type_id": 0}},
                           {"Sequence": {"id": "B", "type_id": 1}}],
                  "special_tokens": {"<s>": {"id": "<s>", "ids": [0], "tokens": ["<s>"]},
                                     "</s>": {"id": "</s>", "ids": [2], "tokens": ["</s>"]}}}
            j["post_processor"] = tp if variant == "template" else {
                "type": "Sequence", "processors": [
                    {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
                     "use_regex": True}, tp]}
        elif variant == "nfkc_lower":
            j["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "NFKC"},
                                                                   {"type": "Lowercase"}]}
    d = edit_json(bytelevel_dir, tmp_path / variant, edit)
    hf = hf_from_file(os.path.join(d, "tokenizer.json"))
    rt = ragged_tokenizer(d)
    assert_parity(rt, hf, texts[::2], f"byte-level BPE {variant}")


@pytest.mark.parametrize("fuse", [False, True])
def test_bpe_prefix_suffix_unk(tmp_path, texts, fuse):
    """Char-level BPE with continuing_subword_prefix, end_of_word_suffix, an unk_token and a
    small alphabet (many unknown chars), BertPreTokenizer."""
    tk = _tk()
    tok = tk.Tokenizer(tk.models.BPE(unk_token="[UNK]", continuing_subword_prefix="##",
                                     end_of_word_suffix="</w>", fuse_unk=fuse))
    tok.normalizer = tk.normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = tk.pre_tokenizers.BertPreTokenizer()
    trainer = tk.trainers.BpeTrainer(vocab_size=800, special_tokens=["[UNK]", "[CLS]", "[SEP]"],
                                     continuing_subword_prefix="##", end_of_word_suffix="</w>",
                                     limit_alphabet=40, show_progress=False)
    tok.train_from_iterator(corpus.build_corpus()[:800], trainer)
    tok.post_processor = tk.processors.BertProcessing(("[SEP]", 2), ("[CLS]", 1))
    d = save(tok, tmp_path / "bpe_ps")
    hf = hf_from_file(os.path.join(d, "tokenizer.json"))
    rt = ragged_tokenizer(d)
    assert_parity(rt, hf, texts, f"BPE prefix/suffix fuse_unk={fuse}")
    assert rt.encode("zzz qqq ÿÿÿ") == hf.encode("zzz qqq ÿÿÿ").ids


def test_bpe_no_unk_drops_chars(tmp_path, bytelevel_dir):
    """Without unk_token, chars missing from the vocabulary are dropped (HF merge_word)."""
    def edit(j):
        j["pre_tokenizer"] = None  # raw chars: most non-ASCII ones are not in the vocab
    d = edit_json(bytelevel_dir, tmp_path / "nounk", edit)
    hf = hf_from_file(os.path.join(d, "tokenizer.json"))
    rt = ragged_tokenizer(d)
    assert_parity(rt, hf, ["héllo wörld", "中文", "a😀b", "plain"], "BPE without unk")


# ---- Unigram -----------------------------------------------------------------------------------

def test_unigram_parity(unigram_dir, texts):
    rt = ragged_tokenizer(unigram_dir)
    hf = hf_from_file(os.path.join(unigram_dir, "tokenizer.json"))
    assert assert_parity(rt, hf, texts, "Unigram + Metaspace") > 600
    assert tok_ids(rt) == (hf.token_to_id("<s>"), hf.token_to_id("</s>"), hf.get_vocab_size())


@pytest.mark.parametrize("variant", ["first", "never", "nosplit", "legacy_add_prefix_space",
                                     "whitespace_split", "lower_nfd_strip", "nfkd_stripaccents"])
def test_unigram_variants(tmp_path, unigram_dir, texts, variant):
    def edit(j):
        ms = j["pre_tokenizer"]
        if variant in ("first", "never"):
            ms["prepend_scheme"] = variant
            if variant == "first":  # with a normalizer: refused (test_unigram_load_errors)
                j["normalizer"] = None
        elif variant == "nosplit":
            ms["split"] = False
        elif variant == "legacy_add_prefix_space":
            j["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "add_prefix_space": True,
                                  "str_rep": "▁"}
        elif variant == "whitespace_split":
            j["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
                {"type": "WhitespaceSplit"}, ms]}
        elif variant == "lower_nfd_strip":
            j["normalizer"] = {"type": "Sequence", "normalizers": [
                {"type": "NFD"}, {"type": "Lowercase"}, {"type": "Strip", "strip_left": True,
                                                         "strip_right": True}]}
        elif variant == "nfkd_stripaccents":
            j["normalizer"] = {"type": "Sequence", "normalizers": [
                {"type": "NFKD"}, {"type": "StripAccents"}, {"type": "NFC"},
                {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}]}
    d = edit_json(unigram_dir, tmp_path / variant, edit)
    hf = hf_from_file(os.path.join(d, "tokenizer.json"))
    rt = ragged_tokenizer(d)
    assert_parity(rt, hf, texts[::2], f"Unigram {variant}")


def test_unigram_unknown_chars(unigram_dir):
    """Runs of unknown chars fuse into one <unk>; scores min - 10 decide against pieces."""
    rt = ragged_tokenizer(unigram_dir)
    hf = hf_from_file(os.path.join(unigram_dir, "tokenizer.json"))
    unk = hf.token_to_id("<unk>")
    s = "ꙮꙮꙮ abc ꙮ ꙮꙮ𓀀𓀁 x"
    got = rt.encode(s)
    assert got == hf.encode(s).ids
    assert got.count(unk) >= 2


# ---- converter-written files (real precompiled_charsmap) and real files --------------------------

REAL = sorted(d for d in os.listdir(FIXTURES)
              if os.path.exists(os.path.join(FIXTURES, d, "tokenizer.json"))) \
    if os.path.isdir(FIXTURES) else []


@pytest.mark.parametrize("name", REAL)
def test_fixture_files(name, texts):
    d = os.path.join(FIXTURES, name)
    rt = ragged_tokenizer(d)
    hf = hf_from_file(os.path.join(d, "tokenizer.json"))
    assert_parity(rt, hf, texts, name)


def _env_dirs():
    v = os.environ.get("RAGGED_TOKENIZER_DIRS", "")
    return [p for p in v.split(":") if p]


@pytest.mark.skipif(not _env_dirs(), reason="RAGGED_TOKENIZER_DIRS not set (real XLM-R / E5 files)")
@pytest.mark.parametrize("d", _env_dirs())
def test_env_tokenizer_dirs(d, texts):
    rt = ragged_tokenizer(d)
    hf = hf_from_file(os.path.join(d, "tokenizer.json"))
    assert_parity(rt, hf, texts, d)


# ---- components over every code point ----------------------------------------------------------

ALL_CPS = [c for c in range(1, 0x110000) if not 0xD800 <= c <= 0xDFFF]


def _hook(name):
    import ctypes
    import ragged_ctypes
    lib = ragged_ctypes.lib()
    fn = getattr(lib, name)
    fn.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t,
                   ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t)]
    libc = ctypes.CDLL(None)
    libc.free.argtypes = [ctypes.c_void_p]

    def call(tok, s):
        b = s.encode("utf-8")
        out, n = ctypes.c_void_p(), ctypes.c_size_t()
        st = fn(tok._h, b, len(b), ctypes.byref(out), ctypes.byref(n))
        assert st == 0, lib.rg_last_error()
        r = ctypes.string_at(out, n.value)
        libc.free(out)
        return r
    return call


def _chunked(rt, ref, call, wrap, what):
    bad = []
    for i in range(0, len(ALL_CPS), 2048):
        cps = ALL_CPS[i:i + 2048]
        if call(rt, wrap(cps)) != ref(wrap(cps)):
            bad += [c for c in cps if call(rt, wrap([c])) != ref(wrap([c]))]
    assert not bad, f"{what}: {len(bad)} code points differ: {[hex(c) for c in bad[:20]]}"


@pytest.mark.slow
def test_every_code_point_bytelevel(bytelevel_dir):
    pre = _hook("rg_tokenizer_pretokenize")
    rt = ragged_tokenizer(bytelevel_dir)
    pt = _tk().pre_tokenizers.ByteLevel(add_prefix_space=False)

    def ref(s):
        return b"".join(w.encode() + b"\0" for w, _ in pt.pre_tokenize_str(s))
    # every code point once, after a letter, a digit, punctuation, a space or two spaces in
    # turn (all five leads for every code point took 22 s of the CI budget)
    leads = ("a", "1", "!", " ", "  ")
    _chunked(rt, ref, pre, lambda cps: "".join(leads[c % 5] + chr(c) + "x" for c in cps),
             "ByteLevel after a, 1, !, space or two spaces")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["NFC", "NFD", "NFKC", "NFKD", "StripAccents", "Lowercase",
                                  "precompiled"])
def test_every_code_point_normalizer(tmp_path, name):
    norm = _hook("rg_tokenizer_normalize")
    xlmr = os.path.join(FIXTURES, "spm-xlmr-style", "tokenizer.json")
    with open(xlmr, encoding="utf-8") as f:
        j = json.load(f)
    if name == "precompiled":
        j["normalizer"] = j["normalizer"]["normalizers"][0]
    else:
        j["normalizer"] = {"type": name}
    d = tmp_path / name
    d.mkdir()
    with open(d / "tokenizer.json", "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False)
    rt = ragged_tokenizer(d)
    hn = hf_from_file(str(d / "tokenizer.json")).normalizer
    _chunked(rt, lambda s: hn.normalize_str(s).encode(), norm,
             lambda cps: " ".join(chr(c) for c in cps), name)
    # pairs of a base letter and every code point (composition, grapheme clusters)
    _chunked(rt, lambda s: hn.normalize_str(s).encode(), norm,
             lambda cps: " ".join("e" + chr(c) for c in cps), name + " after e")


# ---- errors and threads -------------------------------------------------------------------------

@pytest.mark.parametrize("edit,status,needle", [
    (lambda j: j["model"].update(dropout=0.1), "RG_ERR_UNSUPPORTED", "dropout"),
    (lambda j: j["model"].update(byte_fallback=True), "RG_ERR_UNSUPPORTED", "byte_fallback"),
    (lambda j: j["model"]["merges"].append(["nosuchtoken", "x"]), "RG_ERR_FORMAT", "nosuchtoken"),
    (lambda j: j["model"].update(merges=["a b c"]), "RG_ERR_FORMAT", "merges[0]"),
    (lambda j: j["model"].update(merges=[["a", "b"], "a b"]), "RG_ERR_FORMAT", "mix"),
    (lambda j: j["model"].update(unk_token="<nope>"), "RG_ERR_FORMAT", "unk_token"),
    (lambda j: j.update(pre_tokenizer={"type": "Split", "pattern": {"Regex": "x"},
                                       "behavior": "Isolated", "invert": False}),
     "RG_ERR_UNSUPPORTED", "Split"),
    (lambda j: j.update(normalizer={"type": "Replace", "pattern": {"Regex": "[a-z]+"},
                                    "content": ""}), "RG_ERR_UNSUPPORTED", "[a-z]+"),
    (lambda j: j.update(normalizer={"type": "Precompiled", "precompiled_charsmap": "AAAA="}),
     "RG_ERR_FORMAT", "base64"),
    (lambda j: j.update(normalizer={"type": "Precompiled", "precompiled_charsmap": "/wAAAAAA"}),
     "RG_ERR_FORMAT", "truncated"),
])
def test_bpe_load_errors(tmp_path, bytelevel_dir, edit, status, needle):
    import ragged_ctypes
    d = edit_json(bytelevel_dir, tmp_path / "bad", edit)
    with pytest.raises(ragged_ctypes.RaggedError) as e:
        ragged_tokenizer(d)
    assert e.value.status == status, e.value.message
    assert needle in e.value.message


@pytest.mark.parametrize("edit,status,needle", [
    (lambda j: j["model"].update(unk_id=None), "RG_ERR_UNSUPPORTED", "unk_id"),
    (lambda j: j["model"].update(unk_id=10 ** 6), "RG_ERR_FORMAT", "unk_id"),
    (lambda j: j["model"]["vocab"].append(["x"]), "RG_ERR_FORMAT", "vocab["),
    (lambda j: j["pre_tokenizer"].update(prepend_scheme="sometimes"), "RG_ERR_UNSUPPORTED",
     "sometimes"),
    (lambda j: j["pre_tokenizer"].update(prepend_scheme="first"), "RG_ERR_UNSUPPORTED", "first"),
])
def test_unigram_load_errors(tmp_path, unigram_dir, edit, status, needle):
    import ragged_ctypes
    d = edit_json(unigram_dir, tmp_path / "bad", edit)
    with pytest.raises(ragged_ctypes.RaggedError) as e:
        ragged_tokenizer(d)
    assert e.value.status == status, e.value.message
    assert needle in e.value.message


@pytest.mark.parametrize("data", [b"abc\xff", b"\xc3", b"ok\xc0\x80", b"\xed\xa0\x80 surrogate",
                                  b"<mask>\xf4\x90\x80\x80", b"caf\xc3\xa9 \xe9t\xe9"])
def test_invalid_utf8(bytelevel_dir, unigram_dir, data):
    import ragged_ctypes
    with pytest.raises(UnicodeDecodeError) as ref:
        data.decode("utf-8")
    for d in (bytelevel_dir, unigram_dir):
        rt = ragged_tokenizer(d)
        with pytest.raises(ragged_ctypes.RaggedError) as e:
            rt.encode(data)
        assert e.value.status == "RG_ERR_INVALID_UTF8"
        assert f"offset {ref.value.start}" in e.value.message


def test_concurrent_encode(bytelevel_dir, unigram_dir, texts):
    """One tokenizer per model, several threads."""
    from test_tokenizer import assert_concurrent_encode_agrees
    for d in (bytelevel_dir, unigram_dir):
        assert_concurrent_encode_agrees(ragged_tokenizer(d), texts[:300], 2)


# ---- table generator ---------------------------------------------------------------------------

def gen_unicode_tables():
    """Observe, code point by code point, the classes HF's ByteLevel regex and normalizers use;
    returns src/tokenizer/hf_unicode_tables_ext.h."""
    import ctypes
    import ctypes.util
    tk = _tk()
    bl = tk.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    sa = tk.normalizers.StripAccents()
    nfkd = tk.normalizers.NFKD()
    u = ctypes.CDLL(ctypes.util.find_library("utf8proc") or "libutf8proc.so.3")
    u.utf8proc_decompose_char.restype = ctypes.c_ssize_t
    buf = (ctypes.c_int32 * 32)()
    bc = ctypes.c_int()
    letter, number, mark, keep = [], [], [], []
    for c in ALL_CPS:
        s = chr(c)
        if len(bl.pre_tokenize_str("a" + s)) == 1:
            letter.append(c)
        elif len(bl.pre_tokenize_str("1" + s)) == 1:
            number.append(c)
        if sa.normalize_str(s) == "":
            mark.append(c)
        if nfkd.normalize_str(s) == s:
            n = u.utf8proc_decompose_char(c, buf, 32, (1 << 4) | (1 << 2), ctypes.byref(bc))
            if not (n == 1 and buf[0] == c):
                keep.append(c)

    from test_tokenizer import c_range_tables, code_point_ranges as ranges
    out = ["/* GENERATED by `python3 tests/py/test_tokenizer_bpe_unigram.py --gen-tables` from HF",
           " * tokenizers and utf8proc (do not edit). The Unicode classes the byte-level BPE and the",
           " * SentencePiece normalizers depend on, as HF `tokenizers` sees them (its Oniguruma and",
           " * unicode-normalization tables differ from utf8proc's in version), code point by code point:",
           " *   hf_letter:   \\p{L} of the GPT-2 pre-tokenizer regex",
           " *   hf_number:   \\p{N} of that regex",
           " *   hf_mark:     removed by the StripAccents normalizer (HF is_combining_mark)",
           " *   nfk_keep:    code points HF's NFKD leaves alone although utf8proc decomposes them",
           " * Ranges are inclusive and sorted. */",
           "#ifndef RG_TOKENIZER_HF_UNICODE_TABLES_EXT_H", "#define RG_TOKENIZER_HF_UNICODE_TABLES_EXT_H",
           "#include <stdint.h>", ""]
    return c_range_tables(out, [(name, ranges(xs)) for name, xs in (
        ("hf_letter", letter), ("hf_number", number), ("hf_mark", mark), ("nfk_keep", keep))])


if __name__ == "__main__":
    if "--gen-tables" in sys.argv:
        path = os.path.join(os.path.dirname(os.path.dirname(HERE)), "src", "tokenizer",
                            "hf_unicode_tables_ext.h")
        with open(path, "w") as f:
            f.write(gen_unicode_tables())
        print("wrote", path)
