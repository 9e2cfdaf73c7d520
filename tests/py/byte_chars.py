"""GPT-2's bytes_to_unicode (the byte-level BPE alphabet), for tests and benchmarks that build
byte-level vocabularies (tests/py/test_tokenizer_decoder_bpe.py, bench/peer/gguf_peer_files.py)."""


def byte_chars():
    """Each byte's stand-in character, in byte order (256 strings of one character)."""
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) +
          list(range(0xAE, 0x100)))
    cs, n = {}, 0
    for b in range(256):
        if b in bs:
            cs[b] = chr(b)
        else:
            cs[b] = chr(256 + n)
            n += 1
    return [cs[b] for b in range(256)]
