"""Deterministic tokenizer test corpus: real English sentences from the Debian `fortunes` package plus
generated edge cases (accents, CJK, kana, Hangul, emoji, control and zero-width characters,
punctuation runs, odd whitespace, very long words, numbers, URLs, scripts with combining marks).

build_corpus() returns >= 2,000 texts, none containing '\\n' (the CLI is line based);
extra_texts_with_newlines() returns a few texts for the ctypes path that do contain newlines.
Run `python3 tests/py/corpus.py` to print the corpus size and a sample.
"""
import glob
import os
import random

FORTUNE_DIR = "/usr/share/games/fortunes"
N_FORTUNES = 1500
SEED = 20240601


def _fortunes():
    """All fortunes from the plain-text files (no .dat/.u8), each collapsed to one line."""
    files = sorted(f for f in glob.glob(os.path.join(FORTUNE_DIR, "*"))
                   if os.path.isfile(f) and not f.endswith((".dat", ".u8")))
    out = []
    for path in files:
        with open(path, "rb") as fh:
            data = fh.read().decode("utf-8", errors="replace")
        chunk = []
        for line in data.split("\n") + ["%"]:
            if line.strip() == "%":
                text = " ".join(" ".join(chunk).split())
                if text:
                    out.append(text)
                chunk = []
            else:
                chunk.append(line)
    return out


def _edge_cases():
    e = []
    # accents, ligatures, special casing
    e += ["café", "naïve résumé", "Ångström", "CAFÉ NAÏVE", "Crème Brûlée à la française",
          "İstanbul", "İ", "ıi̇İI", "Straße", "STRASSE ß ẞ", "ﬁnance ﬂow ﬀ ﬃ ﬄ ﬅ ﬆ",
          "Œuvre œuvre Æsir æsir", "Ǆemal ǅemal ǆemal", "Σίσυφος ΣΊΣΥΦΟΣ", "ὈΔΥΣΣΕΎΣ",
          "façade Noël Zoë coöperate", "Dvořák Škoda Łódź Ñandú", "ℌℍℑ Ω K Å ℃ ㎏",
          "ǰ ΐ ΰ և ẖ ẗ ẘ ẙ ẚ ﬓ", "Ꭰꭰ ᏸ Ᏸ", "Ⓐⓑ Ⅻ ⅻ", "𐐀𐐨 𞤀𞤢"]
    # combining marks and decomposition
    e += ["e\u0301 a\u0300 o\u0308", "\u0301leading mark", "a\u0323\u0302 a\u0302\u0323",
          "q\u0307\u0323 x\u0327\u0301", "Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334algo",
          "\u1100\u1161\u11a8 한국어 조선말", "안녕하세요 세계", "가각갂갃간"]
    # CJK, kana
    e += ["中文分词测试", "我爱北京天安门。", "漢字とひらがなとカタカナ", "日本語のテキストです、はい。",
          "ｶﾀｶﾅ ＦＵＬＬＷＩＤＴＨ １２３", "𠀀𠀁 𪜀 𫝀 𫠠 𬺰 𰀀 丽", "CJK英文mixed混合text",
          "ㄅㄆㄇ ㆠ", "〆〤 ゝゞ ヽヾ"]
    # other scripts
    e += ["Привет, мир! Ёлка", "Ελληνικά γράμματα", "مرحبا بالعالم", "שלום עולם",
          "नमस्ते दुनिया", "ভাষা", "தமிழ்", "ภาษาไทย", "ᠮᠣᠩᠭᠣᠯ", "ትግርኛ", "Հայերեն", "ქართული",
          "ꦗꦮ", "𓀀𓀁", "ܐܒܓ", "ދިވެހި", "ﷺ ﷽", "١٢٣ ۴۵۶"]
    # emoji
    e += ["I love 🍕 and 🍺!", "👍🏽 👋🏿 🧑‍🤝‍🧑", "👨‍👩‍👧‍👦 family", "🏳️‍🌈 flag",
          "❤️ ❤ ♥", "🇫🇷🇩🇪 flags", "😀😃😄😁😆😅😂🤣", "🫠🥰🫶", "keycap 1️⃣ #️⃣",
          "emoji🙂inside", "🏴󠁧󠁢󠁳󠁣󠁴󠁿 Scotland"]
    # control, zero-width, format chars
    e += ["a\x00b", "nul\x00 in\x00 middle", "bell\x07 and\x1b escape", "del\x7f char",
          "c1\x85next\x9fline", "zero\u200bwidth", "zw\u200cnj\u200dj", "bom\ufeffmark",
          "soft\u00adhyphen", "rtl\u202eoverride\u202c", "replacement \ufffd char",
          "word\u2060joiner", "private \ue000\uf8ff use", "tag \U000E0041\U000E007F",
          "\u0600\u0601 arabic format", "vs\ufe0f16 vs\ufe0e15", "unassigned \u0378 \U0010ffff",
          "noncharacter \ufdd0 \uffff"]
    # whitespace
    e += ["tab\tseparated\twords", "nbsp\u00a0here", "ideographic\u3000space",
          "line\u2028separator", "para\u2029separator", "en\u2002em\u2003thin\u2009hair\u200a",
          "ogham\u1680space", "narrow\u202fnbsp", "math\u205fspace", "   leading and trailing   ",
          "\t\t", " ", "\r", "cr\rin\rmiddle", "vt\x0bff\x0c"]
    # punctuation
    e += ["!!!", "???!!!...", "Hello, world!", "...", "--", "—–-", "«guillemets» „quotes“",
          "“smart” ‘quotes’", "a.b.c.d", "(parens) [brackets] {braces} <angles>",
          "$100 + 50% = ^^ | `tick` ~tilde", "#hashtag @mention", "¡Hola! ¿Qué?",
          "C++ and C# and F#", "e.g. i.e. etc.", "a-b_c/d\\e", "::;;,,..", "'''\"\"\"",
          "…‥‼⁇", "※§¶†‡•", "〈〉《》「」『』【】", "。、・", "؟،؛", "।॥", "፧፨"]
    # numbers, urls, code
    e += ["3.14159 2.71828 1,000,000", "12345678901234567890", "0x1F600 0b1010", "1st 2nd 3rd 4th",
          "https://example.com/path?query=1&x=y#frag", "http://www.google.com",
          "user@example.org", "C:\\Windows\\System32", "/usr/share/games/fortunes",
          "int main(void) { return 0; }", "x = [i**2 for i in range(10)]", "SELECT * FROM t;",
          "v1.2.3-rc.4+build.5", "2024-06-01T12:34:56Z", "+1 (555) 123-4567", "½ ¾ ² ³ ⁴ ₅"]
    # long words (> 100 chars) and near the limit
    e += ["a" * 99, "b" * 100, "c" * 101, "supercalifragilisticexpialidocious" * 4,
          "x" * 300 + " short", "é" * 101, "日" * 150, "ab" * 60 + " end",
          "pneumonoultramicroscopicsilicovolcanoconiosis", "Donaudampfschifffahrtsgesellschaftskapitän",
          "ThisIsAVeryLongCamelCaseIdentifierThatKeepsGoingAndGoingAndGoingAndGoingAndGoingForever",
          "word " * 200]
    # special-token strings in text and unknown pieces
    e += ["[CLS]", "[SEP] [PAD] [MASK] [UNK]", "hello [MASK] world", "[cls] lowercase",
          "x[SEP]y", "[[SEP]]", "[SEP", "##", "##ing", "un##known", "[UNK][UNK]"]
    e += ["", "a", "A", "I", "hello", "Hello World", "HELLO WORLD"]
    return e


def _generated(rng, n):
    """Random mixes of words from the pools above with random separators and characters."""
    pools = ["the", "quick", "brown", "fox", "café", "naïve", "中文", "日本", "한국", "🍕", "👍🏽",
             "İ", "ß", "ﬁ", "Ω", "Σ", "straße", "unbelievable", "tokenization", "!!", "...",
             "\u200b", "\u0301", "\x07", "\ufffd", "\ue000", "e\u0301", "123", "4.5", "http://a.b/c",
             "ĳ", "ǅ", "ﬀ", "Ⅻ", "ᾈ", "ΰ", "ǰ", "$", "€", "£", "°", "±", "µ", "×", "÷"]
    seps = [" ", "  ", "\t", "\u00a0", "\u3000", "", "-", "\u2028", "\r"]
    out = []
    for _ in range(n):
        k = rng.randint(1, 12)
        parts = [rng.choice(pools) for _ in range(k)]
        text = ""
        for p in parts:
            text += p + rng.choice(seps)
        if rng.random() < 0.3:
            # splice in random code points from interesting blocks
            blocks = [(0x20, 0x7e), (0xa0, 0x24f), (0x300, 0x36f), (0x370, 0x52f), (0x590, 0x6ff),
                      (0x900, 0x97f), (0x1e00, 0x1fff), (0x2000, 0x206f), (0x3000, 0x30ff),
                      (0x4e00, 0x4e80), (0xac00, 0xac80), (0xfb00, 0xfb4f), (0xff00, 0xffef),
                      (0x1f300, 0x1faff), (0x10400, 0x1044f), (0x20000, 0x20080)]
            for _ in range(rng.randint(1, 6)):
                a, b = rng.choice(blocks)
                c = rng.randint(a, b)
                pos = rng.randint(0, len(text))
                text = text[:pos] + chr(c) + text[pos:]
        out.append(text.replace("\n", " "))
    return out


def build_corpus():
    rng = random.Random(SEED)
    fortunes = _fortunes()
    if len(fortunes) > N_FORTUNES:
        fortunes = rng.sample(fortunes, N_FORTUNES)
    texts = fortunes + _edge_cases() + _generated(rng, 600)
    texts = [t.replace("\n", " ") for t in texts]
    assert all("\n" not in t for t in texts)
    return texts


def english_sentences(n=400, min_chars=20, max_chars=300):
    """n real English sentences (fortunes of 20..300 chars), in a fixed pseudo-random order."""
    rng = random.Random(SEED + 1)
    pool = sorted(set(t for t in _fortunes() if min_chars <= len(t) <= max_chars and "\ufffd" not in t))
    rng.shuffle(pool)
    return pool[:n]


def extra_texts_with_newlines():
    return ["line one\nline two", "\n", "trailing\n", "\n\nleading", "mixed\r\nendings\n\rhere",
            "tab\t\nnewline"]


if __name__ == "__main__":
    c = build_corpus()
    print(len(c), "texts;", sum(len(t) for t in c), "chars")
    for t in c[:3] + c[-3:]:
        print(repr(t[:120]))
