"""A tiny random GPT-2 with a real byte-level BPE tokenizer and a ChatML chat template, for the
generation server's tests (tests/py/test_serve_gen.py): tokenizer.json trained with HF
`tokenizers` on a small English corpus (with <|endoftext|>, <|im_start|>, <|im_end|> as special
tokens), the weights of make_decoder.py's GPT-2 with that vocabulary, tokenizer_config.json with
SmolLM2's ChatML template and generation_config.json with <|im_end|> as EOS.

make(out_dir, seed) -> out_dir."""
import json
import os

import make_decoder

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Variable-length requests are served without padding by packing them together.",
    "A language model predicts the next token from the tokens before it.",
    "Continuous batching lets sequences join and leave the batch at every step.",
    "Hello, world! How are you today? I am fine, thank you.",
    "Streams of tokens are sent to the client as server-sent events.",
    "Prefix caching reuses the key and value blocks of a shared system prompt.",
    "Numbers like 12, 345 and 6789 appear in text too; so do emoji like 🙂 and ünïcödé.",
]
CHATML = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}")
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def make(out_dir, seed=0, vocab=400, n_pos=256, H=32, layers=2, extra_special=()):
    """extra_special: more special tokens of the vocabulary (e.g. StarCoder's FIM tokens)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    os.makedirs(out_dir, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=SPECIAL + list(extra_special),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(CORPUS * 4, trainer)
    tok.save(os.path.join(out_dir, "tokenizer.json"))
    V = tok.get_vocab_size()
    make_decoder.make(out_dir, "gpt2", seed=seed, H=H, heads=4, layers=layers, vocab=V,
                      n_pos=n_pos)
    cfg_path = os.path.join(out_dir, "config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    cfg["bos_token_id"] = tok.token_to_id("<|endoftext|>")
    cfg["eos_token_id"] = tok.token_to_id("<|im_end|>")
    with open(cfg_path, "w") as f:
        json.dump(cfg, f, indent=1)
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump({"chat_template": CHATML, "bos_token": "<|endoftext|>",
                   "eos_token": "<|im_end|>", "model_max_length": n_pos,
                   "tokenizer_class": "GPT2Tokenizer"}, f)
    with open(os.path.join(out_dir, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": cfg["bos_token_id"], "eos_token_id": cfg["eos_token_id"]}, f)
    return out_dir
