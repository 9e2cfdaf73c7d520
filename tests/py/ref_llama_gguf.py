"""A float64 NumPy Llama that reads a GGUF file with the `gguf` package (independent of ragged's
reader and dequantizer): the reference of tests/py/test_generate_gguf.py.

Weights: gguf.GGUFReader + gguf.quants.dequantize (numpy shape = ggml's ne reversed, i.e. HF's
[out, in]); attn_q / attn_k rows un-permuted back to Hugging Face's layout with the inverse of
llama.cpp's convert_hf_to_gguf.py LlamaModel.permute (what transformers' GGUF loader does,
reverse_permute), so the RoPE here is HF's rotate_half (pairs i, i + hd/2) as in transformers'
LlamaAttention -- not the adjacent-pair layout ragged runs on the permuted rows. Then the
LlamaForCausalLM forward: token embedding, per layer RMSNorm -> q/k/v -> RoPE(theta) -> causal
GQA softmax attention -> o_proj -> residual, RMSNorm -> down(silu(gate) * up) -> residual; final
RMSNorm; LM head = output.weight, or the token embedding when it is absent (tied).
"""
import contextlib
import ctypes

import numpy as np


@contextlib.contextmanager
def one_blas_thread():
    """NumPy's OpenBLAS on one thread while the reference runs: its threads spin against the
    library's pool (and other processes) on a small shared machine, which makes these small
    float64 matmuls 10x slower. A no-op where the OpenBLAS symbols are not found."""
    fns = []
    try:
        libs = {l.split()[-1] for l in open("/proc/self/maps") if "openblas" in l.lower()}
    except OSError:
        libs = set()
    for path in libs:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for get, set_ in (("scipy_openblas_get_num_threads64_", "scipy_openblas_set_num_threads64_"),
                          ("openblas_get_num_threads64_", "openblas_set_num_threads64_"),
                          ("openblas_get_num_threads", "openblas_set_num_threads")):
            if hasattr(lib, get) and hasattr(lib, set_):
                g, s = getattr(lib, get), getattr(lib, set_)
                g.restype = ctypes.c_int
                s.argtypes = [ctypes.c_int]
                fns.append((s, g()))
                s(1)
                break
    try:
        yield
    finally:
        for s, n in fns:
            s(n)


def _reverse_permute(w, n_head):
    """Inverse of llama.cpp's permute(w, n_head): rows (n_head, hd/2, 2) -> (n_head, 2, hd/2)."""
    hd = w.shape[0] // n_head
    return w.reshape(n_head, hd // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


class GgufLlama:
    def __init__(self, path):
        import gguf
        r = gguf.GGUFReader(path)
        f = r.fields

        def val(k, default=None):
            if k not in f:
                return default
            return f[k].contents()
        arch = val("general.architecture")
        assert arch == "llama", arch
        self.layers = int(val("llama.block_count"))
        self.H = int(val("llama.embedding_length"))
        self.heads = int(val("llama.attention.head_count"))
        self.kv_heads = int(val("llama.attention.head_count_kv", self.heads))
        self.hd = self.H // self.heads
        self.theta = float(val("llama.rope.freq_base", 10000.0))
        self.eps = float(val("llama.attention.layer_norm_rms_epsilon", 1e-5))
        self.w = {}
        for t in r.tensors:
            a = gguf.quants.dequantize(t.data, t.tensor_type)
            shape = tuple(int(x) for x in reversed(t.shape.tolist()))
            self.w[t.name] = np.asarray(a, np.float64).reshape(shape)
        for l in range(self.layers):
            q, k = f"blk.{l}.attn_q.weight", f"blk.{l}.attn_k.weight"
            self.w[q] = _reverse_permute(self.w[q], self.heads)
            self.w[k] = _reverse_permute(self.w[k], self.kv_heads)
        self.lm_head = self.w.get("output.weight", self.w["token_embd.weight"])
        inv = 1.0 / self.theta ** (np.arange(0, self.hd, 2, dtype=np.float64) / self.hd)
        self.inv_freq = inv

    def _rms(self, x, g):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * g

    def _rope(self, x, pos):
        """x (T, n, hd), HF rotate_half."""
        ang = pos[:, None].astype(np.float64) * self.inv_freq[None, :]
        emb = np.concatenate([ang, ang], axis=-1)
        cos, sin = np.cos(emb)[:, None, :], np.sin(emb)[:, None, :]
        h = self.hd // 2
        rot = np.concatenate([-x[..., h:], x[..., :h]], axis=-1)
        return x * cos + rot * sin

    def logits(self, ids, last_only=False, act_q=None):
        """(len(ids), vocab) float64 logits of every position of one sequence (last_only: of
        the last position, (1, vocab)). act_q: None, or a function applied to the activations
        entering every weight product (x @ W.T becomes act_q(x) @ W.T), e.g. the int8 block
        rounding of a quantized GEMM (test_gguf_quant.py)."""
        w, T = self.w, len(ids)
        aq = act_q if act_q is not None else (lambda a: a)
        x = w["token_embd.weight"][np.asarray(ids)]
        pos = np.arange(T)
        mask = np.triu(np.full((T, T), -np.inf), 1)
        g = self.heads // self.kv_heads
        for l in range(self.layers):
            p = f"blk.{l}."
            h = aq(self._rms(x, w[p + "attn_norm.weight"]))
            q = (h @ w[p + "attn_q.weight"].T).reshape(T, self.heads, self.hd)
            k = (h @ w[p + "attn_k.weight"].T).reshape(T, self.kv_heads, self.hd)
            v = (h @ w[p + "attn_v.weight"].T).reshape(T, self.kv_heads, self.hd)
            q, k = self._rope(q, pos), self._rope(k, pos)
            k, v = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
            s = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(self.hd) + mask
            s = np.exp(s - s.max(-1, keepdims=True))
            s /= s.sum(-1, keepdims=True)
            ctx = np.einsum("hqk,khd->qhd", s, v).reshape(T, self.heads * self.hd)
            x = x + aq(ctx) @ w[p + "attn_output.weight"].T
            h = aq(self._rms(x, w[p + "ffn_norm.weight"]))
            gt, up = h @ w[p + "ffn_gate.weight"].T, h @ w[p + "ffn_up.weight"].T
            x = x + aq(gt / (1 + np.exp(-gt)) * up) @ w[p + "ffn_down.weight"].T
        if last_only:
            x = x[-1:]
        return aq(self._rms(x, w["output_norm.weight"])) @ self.lm_head.T

    def greedy(self, ids, n_new):
        """n_new greedy tokens after ids (recomputing the whole sequence each step), and the
        logits of the prompt's last position."""
        seq, out, first = list(ids), [], None
        with one_blas_thread():
            return self._greedy(seq, out, first, n_new)

    def _greedy(self, seq, out, first, n_new):
        for _ in range(n_new):
            lg = self.logits(seq, last_only=True)[-1]
            if first is None:
                first = lg
            t = int(np.argmax(lg))
            out.append(t)
            seq.append(t)
        return out, first
