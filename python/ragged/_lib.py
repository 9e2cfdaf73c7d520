"""Locating and binding libragged.so (the public C API of include/ragged.h) with ctypes.

Where the library comes from, first found wins:
  1. $RAGGED_LIB (a path): an explicit choice, e.g. the ASan build under test;
  2. libragged.so inside this package (copied there by the build, python/setup.py);
  3. build/libragged.so of the repository this package sits in (an editable install);
  4. the dynamic linker's search (LD_LIBRARY_PATH, the ldconfig cache: ctypes.util.find_library);
  5. <sys.prefix>/lib, /usr/local/lib (`make install`'s default), /usr/lib.

OpenBLAS's kernels: Debian 12's OpenBLAS runs its SSE "Prescott" kernels on AVX-512 CPUs it does
not know (Sapphire Rapids), several times slower, and reads OPENBLAS_CORETYPE only when it is
loaded. The ragged command re-executes itself with the variable set (tools/ragged.c); a Python
process cannot, so before the first load, where OPENBLAS_CORETYPE is unset (and RAGGED_NO_REEXEC
is not 1), a child Python loads the same library and asks rg_cpu_blas_coretype_fix(); its answer,
if any, is put in os.environ first. So the Python API runs the kernels the CLI and the server run.
"""
import ctypes
import ctypes.util
import os
import sys
import threading

PKG_DIR = os.path.dirname(os.path.abspath(__file__))

RG_OK = 0


class ModelParams(ctypes.Structure):
    """rg_model_params."""
    _fields_ = [("device", ctypes.c_int), ("device_index", ctypes.c_int),
                ("dtype", ctypes.c_int), ("max_batch_tokens", ctypes.c_int),
                ("pooling_set", ctypes.c_bool), ("pooling", ctypes.c_int),
                ("dense_dir", ctypes.c_char_p), ("weights", ctypes.c_int),
                ("quantize", ctypes.c_int)]


class ModelInfo(ctypes.Structure):
    """rg_model_info (field order and types as in include/ragged.h)."""
    _fields_ = [("model_dir", ctypes.c_char_p), ("model_type", ctypes.c_char_p),
                ("vocab_size", ctypes.c_int), ("hidden_size", ctypes.c_int),
                ("num_attention_heads", ctypes.c_int), ("num_hidden_layers", ctypes.c_int),
                ("intermediate_size", ctypes.c_int), ("max_position_embeddings", ctypes.c_int),
                ("type_vocab_size", ctypes.c_int), ("hidden_act", ctypes.c_char_p),
                ("layer_norm_eps", ctypes.c_double), ("pooling", ctypes.c_int),
                ("normalize", ctypes.c_bool), ("device", ctypes.c_int), ("dtype", ctypes.c_int),
                ("max_batch_tokens", ctypes.c_int), ("max_seq_len", ctypes.c_int),
                ("num_labels", ctypes.c_int), ("labels", ctypes.POINTER(ctypes.c_char_p)),
                ("multi_label", ctypes.c_bool), ("output_dim", ctypes.c_int),
                ("kind", ctypes.c_int), ("num_key_value_heads", ctypes.c_int),
                ("head_dim", ctypes.c_int), ("bos_token_id", ctypes.c_int),
                ("eos_token_id", ctypes.c_int), ("tie_word_embeddings", ctypes.c_bool),
                ("decoder_start_token_id", ctypes.c_int),
                ("max_source_positions", ctypes.c_int),
                ("weight_bytes", ctypes.c_ulonglong), ("quantized_weights", ctypes.c_int)]


class ModelBatch(ctypes.Structure):
    """rg_model_batch."""
    _fields_ = [("tokens", ctypes.c_void_p), ("token_types", ctypes.c_void_p),
                ("cu_seqlens", ctypes.c_void_p), ("n_seq", ctypes.c_int),
                ("layout", ctypes.c_void_p)]


class RunOptions(ctypes.Structure):
    """rg_run_options."""
    _fields_ = [("raw", ctypes.c_bool), ("hidden_out", ctypes.c_void_p)]


_lock = threading.Lock()
_lib = None
_path = None


def _candidates():
    env = os.environ.get("RAGGED_LIB")
    if env:
        yield env
        return
    yield os.path.join(PKG_DIR, "libragged.so")
    yield os.path.normpath(os.path.join(PKG_DIR, "..", "..", "build", "libragged.so"))
    found = ctypes.util.find_library("ragged")
    if found:
        yield found
    for d in (os.path.join(sys.prefix, "lib"), "/usr/local/lib", "/usr/lib"):
        yield os.path.join(d, "libragged.so")


def _bind(l):
    c_int, c_size_t, c_void_p, c_char_p = ctypes.c_int, ctypes.c_size_t, ctypes.c_void_p, \
        ctypes.c_char_p
    l.rg_last_error.restype = c_char_p
    l.rg_last_error.argtypes = []
    l.rg_status_name.restype = c_char_p
    l.rg_status_name.argtypes = [c_int]
    l.rg_model_params_default.restype = ModelParams
    l.rg_model_params_default.argtypes = []
    l.rg_device_parse.argtypes = [c_char_p, ctypes.POINTER(c_int)]
    l.rg_dtype_parse.argtypes = [c_char_p, ctypes.POINTER(c_int)]
    l.rg_device_name.restype = c_char_p
    l.rg_device_name.argtypes = [c_int]
    l.rg_dtype_name.restype = c_char_p
    l.rg_dtype_name.argtypes = [c_int]
    l.rg_pooling_name.restype = c_char_p
    l.rg_pooling_name.argtypes = [c_int]
    l.rg_cuda_device_count.restype = c_int
    l.rg_cuda_device_count.argtypes = []
    l.rg_build_has_cuda.restype = ctypes.c_bool
    l.rg_build_has_cuda.argtypes = []
    l.rg_model_dir_resolve.argtypes = [c_char_p, c_char_p, c_size_t]
    l.rg_model_load.restype = c_void_p
    l.rg_model_load.argtypes = [c_char_p, ctypes.POINTER(ModelParams), ctypes.POINTER(c_int)]
    l.rg_model_free.restype = None
    l.rg_model_free.argtypes = [c_void_p]
    l.rg_model_get_info.restype = ctypes.POINTER(ModelInfo)
    l.rg_model_get_info.argtypes = [c_void_p]
    l.rg_model_tokenize.argtypes = [c_void_p, c_char_p, c_size_t, ctypes.c_bool,
                                    ctypes.POINTER(c_void_p), ctypes.POINTER(c_size_t)]
    l.rg_model_embed.argtypes = [c_void_p, c_void_p, c_void_p, c_int, c_void_p]
    l.rg_model_run_ex.argtypes = [c_void_p, ctypes.POINTER(ModelBatch),
                                  ctypes.POINTER(RunOptions), c_void_p]
    # the rest return rg_status: ctypes' default restype, int


_PROBE = ("import ctypes,sys\n"
          "l=ctypes.CDLL(sys.argv[1])\n"
          "l.rg_cpu_blas_coretype_fix.restype=ctypes.c_char_p\n"
          "f=l.rg_cpu_blas_coretype_fix()\n"
          "print(f.decode() if f else '')\n")


def _fix_blas_coretype(cand):
    """Set OPENBLAS_CORETYPE for this process before cand is loaded, when OpenBLAS would run
    pre-AVX2 kernels on this CPU (asked of a child process; see the module's docstring). Any
    failure of the probe leaves the environment as it was."""
    if os.environ.get("OPENBLAS_CORETYPE") or os.environ.get("RAGGED_NO_REEXEC") == "1":
        return
    import subprocess
    env = dict(os.environ, RAGGED_NO_REEXEC="1")
    env.pop("RAGGED_LOG_LEVEL", None)
    try:
        r = subprocess.run([sys.executable, "-c", _PROBE, cand], env=env, capture_output=True,
                           text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return
    fix = r.stdout.strip() if r.returncode == 0 else ""
    if fix in ("SkylakeX", "Haswell"):
        os.environ["OPENBLAS_CORETYPE"] = fix


def lib():
    """The loaded library (bound once per process). OSError naming every place tried when none
    loads."""
    global _lib, _path
    with _lock:
        if _lib is not None:
            return _lib
        tried = []
        probed = False
        for cand in _candidates():
            # a bare name (find_library) is for the dynamic linker to find; a path must exist
            if os.sep in cand and not os.path.isfile(cand):
                tried.append(f"{cand} (missing)")
                continue
            if not probed:
                _fix_blas_coretype(cand)
                probed = True
            try:
                l = ctypes.CDLL(cand)
                getattr(l, "rg_model_dir_resolve")
            except (OSError, AttributeError) as e:
                tried.append(f"{cand} ({e})")
                continue
            _bind(l)
            _lib, _path = l, cand
            return l
        raise OSError("libragged.so not found; tried: " + "; ".join(tried) +
                      ". Build it (make) and reinstall this package, install it (make install), "
                      "or set RAGGED_LIB=/path/to/libragged.so")


def library_path():
    """The path (or name) of the libragged.so this process uses; loads it."""
    lib()
    return _path


# free() as the process resolves it, the one matching the malloc libragged calls (include/ragged.h:
# "caller frees"): the global symbol, not libc's own by handle, which differs when a malloc is
# interposed (LD_PRELOAD of a sanitizer runtime, jemalloc, tcmalloc)
_libc = ctypes.CDLL(None)
_libc.free.argtypes = [ctypes.c_void_p]
_libc.free.restype = None


def c_free(p):
    _libc.free(p)
