#!/usr/bin/env bash
# Checks in the disassembly that the CPU kernel bodies (src/ops/cpu/kern.h) were vectorised for
# each instruction set: every body in kern_avx512.o uses zmm registers and every body in
# kern_avx2.o ymm registers, and bias+activation (exp/erf polynomials), the attention tiles and the
# short-sentence GEMM (gemm_blk) contain fused multiply-adds. Fails (exit 1) naming the function
# otherwise: a compiler or flag change that silently falls back to scalar code shows up here, not
# as a slow benchmark weeks later.
# Usage: scripts/check-vector-asm.sh [OBJDIR]   (default build/obj/ops/cpu)
set -euo pipefail
OBJ=${1:-build/obj/ops/cpu}
fail=0
npass=0
nfail=0
check() { # check OBJECT ISA REG
	local o=$OBJ/kern_$1.o isa=$1 reg=$2 f
	[ -f "$o" ] || { echo "check-vector-asm: $o missing (build first)" >&2; exit 1; }
	for f in softmax_row bias_act_rows add_ln_row pool_seq f32_to_bf16 attn_qk attn_pv gemm_blk; do
		local body
		body=$(objdump -d --no-show-raw-insn "$o" | awk -v fn="<${f}_${isa}>:" '
			/^[0-9a-f]+ <.*>:$/ { on = ($2 == fn) } on')
		if [ -z "$body" ]; then
			echo "FAIL ${f}_${isa}: not found in $o"; fail=1; nfail=$((nfail + 1)); continue
		fi
		local nreg nfma
		nreg=$(grep -c "%$reg" <<<"$body" || true)
		nfma=$(grep -c "vfmadd\|vfnmadd\|vfmsub" <<<"$body" || true)
		if [ "$nreg" -eq 0 ]; then
			echo "FAIL ${f}_${isa}: no $reg instruction"; fail=1; nfail=$((nfail + 1)); continue
		fi
		case $f in bias_act_rows | attn_qk | attn_pv | gemm_blk)
			if [ "$nfma" -eq 0 ]; then
				echo "FAIL ${f}_${isa}: no fused multiply-add"; fail=1; nfail=$((nfail + 1)); continue
			fi ;;
		esac
		echo "ok   ${f}_${isa}: $nreg $reg instructions, $nfma FMA"
		npass=$((npass + 1))
	done
}
check avx512 zmm
check avx2 ymm
echo "$npass passed, $nfail failed"
exit $fail
