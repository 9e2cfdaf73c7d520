#!/usr/bin/env bash
# oneDNN 2.6 (the carry's, Debian's) vs oneDNN 3.2 vs ORT MLAS: one-thread fp32 GEMMs at one sentence's
# row counts, on a lent machine (pinned to CPU 3). Needs bench/kernels/small_m/libdnnl.so.3.2.xz and
# inc32/ (oneDNN 3.2 from the onednn-cpu-gomp / onednn-devel-cpu-gomp 2023.2.0 wheels; git-ignored,
# 7 MB, copied in for the run) and the carry's deps (CARRY_DNNL=1). Writes to stdout.
ROOT=$(cd "$(dirname "$0")/../../.." && pwd); CARRY=$ROOT/.gpu_carry; cd "$ROOT"
source tests/gpu/setup-env.sh >/dev/null
D=bench/kernels/small_m
xz -dkf $D/libdnnl.so.3.2.xz && mkdir -p $D/l32 && mv $D/libdnnl.so.3.2 $D/l32/libdnnl.so.3
gcc -O2 -I$DNNL_INC -o $D/mm26 $D/dnnl_small_m.c -L/tmp/rgdeps/deps/lib -ldnnl -Wl,-rpath,/tmp/rgdeps/rt || echo build26 failed
gcc -O2 -I$D/inc32 -o $D/mm32 $D/dnnl_small_m.c -L$D/l32 -l:libdnnl.so.3 -Wl,-rpath,$ROOT/$D/l32 || echo build32 failed
export OMP_NUM_THREADS=1
P="taskset -c 3"
echo "== 2.6 default"; $P $D/mm26
echo "== 2.6 DNNL_MAX_CPU_ISA=AVX512_CORE"; DNNL_MAX_CPU_ISA=AVX512_CORE ONEDNN_MAX_CPU_ISA=AVX512_CORE $P $D/mm26
echo "== 3.2 default"; $P $D/mm32
echo "== 3.2 ONEDNN_MAX_CPU_ISA=AVX512_CORE"; ONEDNN_MAX_CPU_ISA=AVX512_CORE $P $D/mm32
echo "== ORT MLAS"; $P python3 $D/ort_small_m.py
echo "== 2.6 again"; $P $D/mm26
echo "== verbose 2.6"; DNNL_VERBOSE=1 $P $D/mm26 2>&1 | grep -m3 "exec" 
