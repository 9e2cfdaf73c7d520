"""Language codes as request parameters (issue 29): src_lang / tgt_lang of mBART-50, NLLB-200
and M2M100 tokenizers, as transformers' tokenizers and translation pipeline handle them, in the
library (rg_model_lang_*, rg_encode_params.src_lang), ragged.Translator, `ragged translate` and
`ragged serve`'s /translate and /v1/completions.

The independent references: HF `tokenizers` with the post-processor that transformers'
set_src_lang_special_tokens installs (TemplateProcessing [code] $A </s>, or $A </s> [code] for
mBART cc25 / NLLB legacy_behaviour) for the source ids; ref_seq2seq.py (float64 NumPy,
generate()'s rules) with forced_bos_token_id = the target code's id (what the pipeline's
_build_translation_inputs sets) for the generated ids. The tiny checkpoints are
make_seq2seq.py's, their codes written as the public tokenizers save them
(tokenizer_config.json additional_special_tokens, special added tokens in tokenizer.json)."""
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "..", "python"))
import make_seq2seq  # noqa: E402
import ragged  # noqa: E402
import ref_seq2seq  # noqa: E402
from server_util import Server, hf_tokenizer  # noqa: E402

BIN = os.environ.get("RAGGED_BIN", os.path.join(HERE, "..", "..", "build", "ragged"))
TEXTS = ["hello world", "abc", "the quick brown fox", "x y z 12"]

# (spec, make_seq2seq options, legacy layout: the code after </s>)
STYLES = {
    "mbart50": ("tiny-mbart", {}, False),
    "mbart-cc25": ("tiny-mbart", dict(lang_legacy=True), True),
    "nllb": ("tiny-m2m100", {}, False),
    "nllb-legacy": ("tiny-m2m100", dict(lang_legacy=True), True),
    "m2m100": ("tiny-m2m100", dict(lang_style="m2m100"), False),
}


def token_of(code):
    """The special token of a code as transformers' tokenizers map it (M2M100: __en__)."""
    return code if "_" in code[1:-1] and not code.isalpha() else f"__{code}__"


def hf_source_ids(tok, code, text, legacy):
    """text's ids as transformers' tokenizer with src_lang=code encodes them: its
    set_src_lang_special_tokens replaces the post-processor by a TemplateProcessing."""
    from tokenizers import processors
    t = token_of(code)
    single = f"$A </s> {t}" if legacy else f"{t} $A </s>"
    tok.post_processor = processors.TemplateProcessing(
        single=single, special_tokens=[(t, tok.token_to_id(t)), ("</s>", tok.token_to_id("</s>"))])
    return tok.encode(text).ids


@pytest.fixture(scope="module", params=sorted(STYLES))
def model(request, tmp_path_factory):
    spec, kw, legacy = STYLES[request.param]
    d = str(tmp_path_factory.mktemp(request.param) / "m")
    make_seq2seq.make_spec(spec, d, seed=3, **kw)
    t = ragged.Translator(d)
    yield request.param, d, legacy, t
    t.close()


def test_languages_are_the_tokenizer_configs(model):
    """Translator.languages: tokenizer_config.json's additional_special_tokens in order (M2M100's
    __xx__ tokens as the codes M2M100Tokenizer takes); lang_id: the token's id in tokenizer.json
    (M2M100 also by its token)."""
    style, d, _, t = model
    with open(os.path.join(d, "tokenizer_config.json")) as f:
        listed = json.load(f)["additional_special_tokens"]
    tok = hf_tokenizer(d)
    want = [x[2:-2] if style == "m2m100" else x for x in listed]
    assert t.languages == want and len(want) >= 3
    for code, token in zip(want, listed):
        assert t.lang_id(code) == tok.token_to_id(token)
        assert t.lang_id(token) == tok.token_to_id(token)


def test_source_ids_equal_hf_with_src_lang(model):
    """encode_source(text, code) equals the HF tokenizer's ids with src_lang = code, for every
    code; without src_lang, the tokenizer.json template as it is."""
    _, d, legacy, t = model
    tok = hf_tokenizer(d)
    for text in TEXTS:
        assert t.encode_source(text) == tok.encode(text).ids
    for code in t.languages:
        for text in TEXTS:
            want = hf_source_ids(hf_tokenizer(d), code, text, legacy)
            assert t.encode_source(text, code) == want, (code, text)
            assert t.lang_id(code) in want


def test_tgt_lang_is_forced_bos_and_src_lang_the_source(model):
    """translate(src_lang=S, tgt_lang=T): ids equal the reference's greedy and 3-beam output
    on HF's source ids for S with forced_bos_token_id = T's id, and translate with that
    forced_bos_token_id; T's id comes first."""
    _, d, legacy, t = model
    ref = ref_seq2seq.Seq2Seq(d)
    # codes other than the model's default target and the template's source code
    tmpl = set(hf_tokenizer(d).encode("").ids)
    codes = [c for c in t.languages if t.lang_id(c) not in tmpl and
             t.lang_id(c) != ref.gen.get("forced_bos_token_id")]
    src, tgt = codes[0], (codes[1] if len(codes) > 1 else t.languages[0])
    fb = t.lang_id(tgt)
    assert fb != ref.gen.get("forced_bos_token_id")
    srcs = [hf_source_ids(hf_tokenizer(d), src, x, legacy) for x in TEXTS]
    want = [ref.greedy(s, 6, forced_bos_token_id=fb)[1:] for s in srcs]
    got = [o["ids"] for o in t.translate(TEXTS, max_tokens=6, src_lang=src, tgt_lang=tgt)]
    assert got == want
    assert all(g[0] == fb for g in got)
    assert [o["ids"] for o in t.translate(srcs, max_tokens=6, forced_bos_token_id=fb)] == want
    wantb = [ref.beam_search(s, 3, 5, forced_bos_token_id=fb)[0][1:] for s in srcs[:2]]
    gotb = [o["ids"] for o in t.translate(TEXTS[:2], max_tokens=5, num_beams=3, src_lang=src,
                                          tgt_lang=tgt)]
    assert gotb == wantb


def test_unknown_codes_name_the_models(model):
    _, _, _, t = model
    for kw in (dict(src_lang="xx_Nope"), dict(tgt_lang="xx_Nope")):
        with pytest.raises(ragged.RaggedError, match="xx_Nope") as e:
            t.translate("abc", max_tokens=2, **kw)
        assert all(c in str(e.value) for c in t.languages)
        assert e.value.status == "RG_ERR_INVALID_INPUT"
    with pytest.raises(ValueError, match="src_lang"):
        t.translate([[5, 6, 2]], src_lang=t.languages[0])
    with pytest.raises(ValueError, match="forced_bos_token_id"):
        t.translate("abc", tgt_lang=t.languages[0], forced_bos_token_id=5)


@pytest.mark.parametrize("fam", ["marian", "bart"])
def test_models_without_codes(tmp_path, fam):
    """Marian and BART take no language codes: an empty list, and any code is refused saying
    so (the text is still translated without one)."""
    d = str(tmp_path / fam)
    make_seq2seq.make_spec("tiny-" + fam, d, seed=1)
    with ragged.Translator(d) as t:
        assert t.languages == []
        for kw in (dict(src_lang="en_XX"), dict(tgt_lang="de_DE")):
            with pytest.raises(ragged.RaggedError, match="takes no language codes"):
                t.translate("abc", max_tokens=2, **kw)
        assert t.translate("abc", max_tokens=2)[0]["completion_tokens"] >= 1


def _many_codes(tmp_path, n, listed=True):
    """A tiny mBART-50 with n more codes: vocabulary ids 10..10+n renamed "aa_AA"... and made
    special added tokens, listed in tokenizer_config.json (or not: listed False drops the
    list)."""
    d = str(tmp_path / "many")
    make_seq2seq.make_spec("tiny-mbart", d, seed=2)
    tj_path, tc_path = os.path.join(d, "tokenizer.json"), os.path.join(d, "tokenizer_config.json")
    tj, tc = json.load(open(tj_path)), json.load(open(tc_path))
    inv = {i: s for s, i in tj["model"]["vocab"].items()}
    extra = []
    for k in range(n):
        code = chr(97 + k // 26) + chr(97 + k % 26) + "_" + chr(65 + k % 26) * 2
        i = 10 + k
        del tj["model"]["vocab"][inv[i]]
        tj["model"]["vocab"][code] = i
        tj["added_tokens"].append({"id": i, "content": code, "single_word": False,
                                   "lstrip": False, "rstrip": False, "normalized": False,
                                   "special": True})
        extra.append(code)
    tj["added_tokens"].sort(key=lambda a: a["id"])
    if listed:
        tc["additional_special_tokens"] += extra
    else:
        del tc["additional_special_tokens"]
    json.dump(tj, open(tj_path, "w"))
    json.dump(tc, open(tc_path, "w"))
    return d, extra


def test_long_code_list_is_cut_in_messages(tmp_path):
    """33 codes: the message names the first 20 and how many more, not the 21st."""
    d, _ = _many_codes(tmp_path, 30)
    with ragged.Translator(d) as t:
        codes = t.languages
        assert len(codes) == 33
        with pytest.raises(ragged.RaggedError) as e:
            t.lang_id("zz_ZZ")
        msg = str(e.value)
        assert "33 codes" in msg and "and 13 more" in msg
        assert all(c in msg for c in codes[:20]) and codes[20] not in msg


def test_codes_by_shape_without_the_list(tmp_path):
    """No additional_special_tokens in tokenizer_config.json: the special added tokens shaped
    like codes (xx_XX here; not <mask>, <s> ...), in id order."""
    d, extra = _many_codes(tmp_path, 3, listed=False)
    tok = hf_tokenizer(d)
    with ragged.Translator(d) as t:
        want = sorted(extra + ["en_XX", "fr_XX", "de_DE"], key=tok.token_to_id)
        assert t.languages == want



def _tokenizer_config(tmp_path, name, spec, update, drop=()):
    """A tiny checkpoint of spec whose tokenizer_config.json gets update and loses drop."""
    d = str(tmp_path / name)
    make_seq2seq.make_spec(spec, d, seed=4)
    p = os.path.join(d, "tokenizer_config.json")
    tc = json.load(open(p))
    tc.update(update)
    for k in drop:
        tc.pop(k, None)
    json.dump(tc, open(p, "w"))
    return d


@pytest.mark.parametrize("spec,update,drop,code", [
    # tokenizer_config.json's src_lang other than the template's: transformers' tokenizer
    # rewrites the template with it at load
    ("tiny-mbart", {"src_lang": "de_DE"}, (), "de_DE"),
    ("tiny-m2m100", {"src_lang": "zho_Hant"}, (), "zho_Hant"),
    # no src_lang: the class's default (NLLB: eng_Latn, the template's already: unchanged)
    ("tiny-m2m100", {"tokenizer_class": "NllbTokenizerFast"}, ("src_lang",), "eng_Latn"),
    # a class without src_lang keeps the template
    ("tiny-mbart", {"tokenizer_class": "PreTrainedTokenizerFast"}, ("src_lang",), "en_XX"),
])
def test_default_src_lang_is_the_tokenizer_configs(tmp_path, spec, update, drop, code):
    """A text without src_lang is encoded as HF's tokenizer with src_lang = the default code
    (independent reference: `tokenizers` with the post-processor transformers installs for
    it); an explicit src_lang still wins."""
    d = _tokenizer_config(tmp_path, "m", spec, update, drop)
    with ragged.Translator(d) as t:
        other = next(c for c in t.languages if c != code)
        for text in TEXTS:
            assert t.encode_source(text) == hf_source_ids(hf_tokenizer(d), code, text, False)
            assert t.encode_source(text, other) == hf_source_ids(hf_tokenizer(d), other, text,
                                                                  False)


def test_mbart50_class_default_over_the_template(tmp_path):
    """MBart50TokenizerFast without src_lang defaults to en_XX even where tokenizer.json's
    template holds another code (here de_DE written into it): the default replaces it."""
    d = _tokenizer_config(tmp_path, "m", "tiny-mbart",
                          {"tokenizer_class": "MBart50TokenizerFast"}, ("src_lang",))
    tj_path = os.path.join(d, "tokenizer.json")
    tj = json.load(open(tj_path))
    de = tj["model"]["vocab"].get("de_DE", None)
    if de is None:
        de = next(a["id"] for a in tj["added_tokens"] if a["content"] == "de_DE")
    pp = tj["post_processor"]
    for part in pp["single"] + pp["pair"]:
        if "SpecialToken" in part and part["SpecialToken"]["id"] == "en_XX":
            part["SpecialToken"]["id"] = "de_DE"
    pp["special_tokens"]["de_DE"] = {"id": "de_DE", "ids": [de], "tokens": ["de_DE"]}
    json.dump(tj, open(tj_path, "w"))
    assert hf_tokenizer(d).encode("abc").ids[0] == de  # the template as written holds de_DE
    with ragged.Translator(d) as t:
        for text in TEXTS:
            assert t.encode_source(text) == hf_source_ids(hf_tokenizer(d), "en_XX", text, False)


def test_unknown_default_src_lang_refused(tmp_path):
    """tokenizer_config.json's src_lang that is not one of the model's codes: the load fails
    naming the file, the code and the model's codes."""
    d = _tokenizer_config(tmp_path, "m", "tiny-mbart", {"src_lang": "xx_YY"})
    with pytest.raises(ragged.RaggedError, match="tokenizer_config.json: src_lang") as e:
        ragged.Translator(d)
    assert "xx_YY" in str(e.value) and "en_XX" in str(e.value)


def test_cli_src_lang(tmp_path):
    """`ragged translate --src-lang S --tgt-lang T`: the ids Translator gives (checked above
    against the reference); an unknown --src-lang is a usage error naming the codes."""
    d = str(tmp_path / "nllb")
    make_seq2seq.make_spec("tiny-m2m100", d, seed=4)
    with ragged.Translator(d) as t:
        src, tgt = t.languages[2], t.languages[3]
        want = [o["ids"] for o in t.translate(TEXTS, max_tokens=5, src_lang=src, tgt_lang=tgt)]
        plain = [o["ids"] for o in t.translate(TEXTS, max_tokens=5, tgt_lang=tgt)]
    assert want != plain  # the source code changes the translation
    r = subprocess.run([BIN, "translate", "--model", d, "--max-tokens", "5", "--src-lang", src,
                        "--tgt-lang", tgt], input="\n".join(TEXTS) + "\n", capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert [json.loads(x)["ids"] for x in r.stdout.splitlines() if x.strip()] == want
    r = subprocess.run([BIN, "translate", "--model", d, "--src-lang", "xx_Nope"], input="a\n",
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "xx_Nope" in r.stderr and "eng_Latn" in r.stderr


# ---- the server ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def served(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("srv") / "mbart")
    make_seq2seq.make_spec("tiny-mbart", d, seed=8)
    t = ragged.Translator(d)
    s = Server(d, "--max-num-seqs", 8)
    yield d, t, s
    s.stop()
    t.close()


def _error(st, out, code, *words):
    assert st == code, out
    msg = out["error"] if isinstance(out["error"], str) else out["error"]["message"]
    for w in words:
        assert w in msg, (w, msg)


def test_serve_info_lists_the_codes(served):
    _, t, s = served
    st, _, raw = s.request("GET", "/info")
    info = json.loads(raw)
    assert st == 200 and info["languages"] == t.languages and info["num_languages"] == 3
    doc = json.loads(s.request("GET", "/openapi.json")[2])
    props = doc["components"]["schemas"]["TranslateRequest"]["properties"]
    assert "src_lang" in props and "tgt_lang" in props["parameters"]["properties"]


def test_serve_translate_with_codes(served):
    """/translate with src_lang / tgt_lang (top level or in parameters): the Translator's ids;
    /v1/completions with them as extra fields: the same text."""
    _, t, s = served
    src, tgt = "de_DE", "en_XX"
    want = t.translate(TEXTS, max_tokens=6, src_lang=src, tgt_lang=tgt)
    other = t.translate(TEXTS, max_tokens=6, tgt_lang=tgt)
    assert [o["ids"] for o in want] != [o["ids"] for o in other]
    for body in ({"inputs": TEXTS, "src_lang": src, "tgt_lang": tgt,
                  "parameters": {"max_new_tokens": 6, "details": True}},
                 {"inputs": TEXTS, "parameters": {"max_new_tokens": 6, "details": True,
                                                  "src_lang": src, "tgt_lang": tgt}}):
        st, out = s.post_json("/translate", body)
        assert st == 200, out
        assert [[x["id"] for x in o["details"]["tokens"]] for o in out] == \
            [o["ids"] for o in want]
    for text, w in zip(TEXTS, want):
        st, out = s.post_json("/v1/completions", {"prompt": text, "max_tokens": 6,
                                                  "temperature": 0, "src_lang": src,
                                                  "tgt_lang": tgt})
        assert st == 200, out
        assert out["choices"][0]["text"] == w["text"]


def test_serve_bad_codes_are_400_and_it_keeps_serving(served):
    _, t, s = served
    for key in ("src_lang", "tgt_lang"):
        for body in ({"inputs": "hi", key: "xx_Nope"},
                     {"inputs": "hi", "parameters": {key: "xx_Nope"}}):
            st, out = s.post_json("/translate", body)
            _error(st, out, 400, key, "xx_Nope", "en_XX", "fr_XX", "de_DE")
        st, out = s.post_json("/v1/completions", {"prompt": "hi", key: "xx_Nope"})
        _error(st, out, 400, "xx_Nope", "de_DE")
        assert out["error"]["param"] == key
        st, out = s.post_json("/translate", {"inputs": "hi", key: 5})
        _error(st, out, 400, key)
    st, out = s.post_json("/translate", {"inputs": "hi", "src_lang": "en_XX",
                                         "parameters": {"src_lang": "en_XX"}})
    _error(st, out, 400, "twice")
    st, out = s.post_json("/translate", {"inputs": [5, 6, 2], "src_lang": "en_XX"})
    _error(st, out, 400, "src_lang", "text inputs")
    st, out = s.post_json("/translate", {"inputs": "hello", "tgt_lang": "fr_XX",
                                         "parameters": {"max_new_tokens": 3, "details": True}})
    assert st == 200 and out["details"]["tokens"][0]["id"] == t.lang_id("fr_XX")
