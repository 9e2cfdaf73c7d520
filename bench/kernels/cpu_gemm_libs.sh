#!/usr/bin/env bash
# Build bench/kernels/cpu_gemm_libs.c into build/bench_cpu_gemm_libs and run it; every argument
# goes to the benchmark (-t T, --quick, --json FILE, ...; see --help).
#
# The libraries are dlopen'ed at run time, so the build needs only gcc and, for oneDNN, its 2.x
# headers. Where they come from:
#   RG_LIBDIR   a directory of carried shared libraries (searched first, three levels deep; it is
#               also put on LD_LIBRARY_PATH so that their own dependencies resolve from it)
#   RG_INCDIR   a directory holding oneapi/dnnl/dnnl.h (default /usr/include)
#   RG_OPENBLAS, RG_BLIS, RG_DNNL   exact library paths (win over RG_LIBDIR)
#   CC, CFLAGS  compiler and flags (default gcc, -O2 -march=native)
# Nothing is installed; a library that is not found skips its candidates with a note.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
out="$root/build/bench_cpu_gemm_libs"
CC=${CC:-gcc}
CFLAGS=${CFLAGS:--O2 -march=native}
sysdir=/usr/lib/x86_64-linux-gnu

# first existing file among the arguments
first_of() {
	local p
	for p in "$@"; do
		if [ -n "$p" ] && [ -e "$p" ]; then
			echo "$p"
			return 0
		fi
	done
	return 1
}

# a library under RG_LIBDIR by file name patterns, the preferred pattern first
in_libdir() {
	[ -n "${RG_LIBDIR:-}" ] && [ -d "$RG_LIBDIR" ] || return 1
	local pat hit
	for pat in "$@"; do
		hit=$(find "$RG_LIBDIR" -maxdepth 3 -path "$pat" 2>/dev/null | sort | head -n1)
		if [ -n "$hit" ]; then
			echo "$hit"
			return 0
		fi
	done
	return 1
}

openblas=${RG_OPENBLAS:-$(in_libdir '*openblas-pthread/libopenblas.so.0' '*/libopenblas.so.0' \
	'*/libopenblasp-r*.so' || first_of "$sysdir/openblas-pthread/libopenblas.so.0" || true)}
blis=${RG_BLIS:-$(in_libdir '*blis-openmp/libblis.so.4' '*/libblis.so.4' '*/libblis.so' ||
	first_of "$sysdir/blis-openmp/libblis.so.4" || true)}
dnnl=${RG_DNNL:-$(in_libdir '*/libdnnl.so.2' '*/libdnnl.so.2.*' '*/libdnnl.so' ||
	first_of "$sysdir/libdnnl.so.2" || true)}
incdir=${RG_INCDIR:-/usr/include}

if [ -n "${RG_LIBDIR:-}" ]; then
	# the carried libraries' own dependencies (libgfortran, libgomp, ...) may sit beside them
	extra=$( (find "$RG_LIBDIR" -maxdepth 3 -name '*.so*' -printf '%h\n' 2>/dev/null || true) |
		sort -u | paste -sd: -)
	export LD_LIBRARY_PATH="${extra:+$extra:}${LD_LIBRARY_PATH:-}"
fi

# say what was found, and which dependencies of it do not resolve
report() {
	local name=$1 path=$2 missing
	if [ -z "$path" ] || [ ! -e "$path" ]; then
		echo "cpu_gemm_libs.sh: $name: not found (candidates using it will be skipped)"
		return
	fi
	echo "cpu_gemm_libs.sh: $name: $path -> $(readlink -f "$path")"
	missing=$(ldd "$path" 2>/dev/null | awk '/not found/ {print $1}' | paste -sd' ' -)
	if [ -n "$missing" ]; then
		echo "cpu_gemm_libs.sh:   unresolved dependencies: $missing"
	fi
}
report OpenBLAS "$openblas"
report BLIS "$blis"
report oneDNN "$dnnl"

dnnl_flags=()
if [ -e "$incdir/oneapi/dnnl/dnnl.h" ]; then
	echo "cpu_gemm_libs.sh: oneDNN headers: $incdir/oneapi/dnnl" \
		"(version $(awk '/define DNNL_VERSION_(MAJOR|MINOR|PATCH)/ {printf "%s%s", s, $3; s="."}' \
			"$incdir/oneapi/dnnl/dnnl_version.h" 2>/dev/null))"
	[ "$incdir" = /usr/include ] || dnnl_flags+=(-isystem "$incdir")
else
	echo "cpu_gemm_libs.sh: oneDNN headers: not found under $incdir (oneDNN candidates skipped)"
	dnnl_flags+=(-DRG_NO_DNNL)
fi

mkdir -p "$root/build"
vecinfo="$out.vec.txt"
# shellcheck disable=SC2086  # CFLAGS is a list of flags
"$CC" $CFLAGS -std=c11 -D_GNU_SOURCE -fopenmp -Wall -Wextra -Wno-unused-parameter \
	"${dnnl_flags[@]}" -DRG_BUILD_FLAGS="\"$CFLAGS -fopenmp\"" \
	-fopt-info-vec-optimized="$vecinfo" \
	-o "$out" "$here/cpu_gemm_libs.c" -ldl -lpthread -lm
echo "cpu_gemm_libs.sh: built $out ($CC $CFLAGS)"

# the epilogue loops are marked RG_SIMD_LOOP on their `for` line; gcc reports a vectorised loop
# at its body, the next line
src="$here/cpu_gemm_libs.c"
n_loops=0
n_vec=0
while read -r line; do
	n_loops=$((n_loops + 1))
	if grep -q "cpu_gemm_libs.c:$((line + 1)):[0-9]*: optimized: loop vectorized" "$vecinfo"; then
		n_vec=$((n_vec + 1))
	fi
done < <(grep -n 'RG_SIMD_LOOP \*/' "$src" | cut -d: -f1)
echo "cpu_gemm_libs.sh: epilogue loops vectorised: $n_vec of $n_loops"

export RG_OPENBLAS="$openblas" RG_BLIS="$blis" RG_DNNL="${dnnl:-libdnnl.so.2}"
commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
export RAGGED_COMMIT="${RAGGED_COMMIT:-$commit}"
exec "$out" "$@"
