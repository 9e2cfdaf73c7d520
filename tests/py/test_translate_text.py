"""Text in, text out for a MarianMT checkpoint that ships source.spm / target.spm / vocab.json
and no tokenizer.json, as the opus-mt models do (issue 29): the model's tokenizer is the Marian
one of src/tokenizer/marian.h, reached through the model's ordinary text path
(rg_tokenizer_load), so that ragged.Translator, `ragged translate` and the server take text.

The SentencePiece models are trained here by spm_train (a unigram source side, a BPE target
side); the weights are a random tiny Marian (tests/py/make_seq2seq.py). References, both
independent of ragged: the source ids are those of test_tokenizer_spm.RefMarian (transformers'
MarianTokenizer transcribed over the PyPI sentencepiece package), the translated ids those of
the float64 reference tests/py/ref_seq2seq.py on those source ids, and the text RefMarian's
decode(ids, skip_special_tokens=True) of them."""
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
import test_tokenizer_spm as ts  # noqa: E402

TEXTS = ["Hello world.", "The quick brown fox jumps over the lazy dog", "a",
         "What is 2+2? Four, of course!", ">>de<< A language code first.",
         "Numbers 12345 and symbols %$# and \u00fcml\u00e4uts", ""]


@pytest.fixture(scope="module")
def marian(tmp_path_factory):
    tmp = str(tmp_path_factory.mktemp("spm"))
    text_file = os.path.join(tmp, "train.txt")
    with open(text_file, "w", encoding="utf-8") as f:
        f.write("\n".join(ts._training_lines()) + "\n")
    src = ts._train(tmp, "src", text_file, "--model_type=unigram", "--vocab_size=600",
                    "--character_coverage=0.995")
    tgt = ts._train(tmp, "tgt", text_file, "--model_type=bpe", "--vocab_size=500")
    d = os.path.join(tmp, "opus-mt-tiny")
    vocab = ts._write_marian(d, src, tgt)
    make_seq2seq.make(d, "marian", seed=5, **dict(make_seq2seq._TINY, vocab=len(vocab),
                                                  max_pos=64))
    for f in ("tokenizer.json", "tokenizer_config.json"):
        os.remove(os.path.join(d, f))  # make() writes its synthetic tokenizer: Marian has none
    ts._write_marian(d, src, tgt)  # the vocabulary again (make() wrote its own vocab.json)
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    assert cfg["pad_token_id"] == vocab["<pad>"] and cfg["eos_token_id"] == vocab["</s>"]
    ref_tok = ts.RefMarian(d)
    yield d, ref_tok, ref_seq2seq.Seq2Seq(d)
    ref_tok.close()


@pytest.fixture(scope="module")
def tr(marian):
    t = ragged.Translator(marian[0])
    yield t
    t.close()


def _cases(ref_tok):
    out = []
    for t in TEXTS:
        ids = ref_tok.encode(t)
        if not ref_tok.tie:  # a unigram score tie the two SentencePiece builds split apart
            out.append((t, ids))
    assert len(out) >= len(TEXTS) - 1
    return out


def test_text_in_text_out_greedy(tr, marian):
    _, ref_tok, ref = marian
    cases = _cases(ref_tok)
    got = tr.translate([t for t, _ in cases], max_tokens=9)
    assert len(got) == len(cases)
    for (text, src), g in zip(cases, got):
        want = ref.greedy(src, 9)[1:]
        assert g["ids"] == want, text
        assert g["text"] == ref_tok.decode(want, skip_special=True, skip_unk=True), text
    assert any(g["text"] for g in got)  # not all empty: the comparison means something


def test_text_and_ids_agree_with_beams(tr, marian):
    """The text path gives what the ids path gives (the source tokenized as RefMarian does)."""
    _, ref_tok, ref = marian
    for text, src in _cases(ref_tok)[:3]:
        a = tr.translate(text, max_tokens=8, num_beams=4)
        b = tr.translate(src, max_tokens=8, num_beams=4)
        assert a[0]["ids"] == b[0]["ids"] == ref.beam_search(src, 4, 8)[0][1:]


def test_cli_translate_reads_text(marian, tmp_path):
    d, ref_tok, ref = marian
    cases = _cases(ref_tok)[:4]
    bin_ = os.environ.get("RAGGED_BIN", "build/ragged")
    r = subprocess.run([bin_, "translate", "--model", d, "--max-tokens", "7"],
                       input="\n".join(t for t, _ in cases) + "\n", capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = [json.loads(x) for x in r.stdout.splitlines() if x.strip()]
    assert len(lines) == len(cases)
    for (text, src), o in zip(cases, lines):
        want = ref.greedy(src, 7)[1:]
        assert o["ids"] == want
        assert o["text"] == ref_tok.decode(want, skip_special=True, skip_unk=True)
        assert o["usage"]["prompt_tokens"] == len(src)


def test_info_reports_the_marian_tokenizer(tr, marian):
    d = marian[0]
    bin_ = os.environ.get("RAGGED_BIN", "build/ragged")
    r = subprocess.run([bin_, "info", "--model", d], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "encoder-decoder" in r.stdout


def test_broken_spm_is_a_clear_error(marian, tmp_path):
    """A target.spm that is not a SentencePiece model fails the load naming the file."""
    import shutil
    d = str(tmp_path / "broken")
    shutil.copytree(marian[0], d)
    with open(os.path.join(d, "target.spm"), "wb") as f:
        f.write(b"not a model")
    with pytest.raises(ragged.RaggedError) as e:
        ragged.Translator(d)
    assert "target.spm" in str(e.value)
