#!/usr/bin/env bash
# A/B on one host, in one device call: the CPU attention through the kernel tiles (default) vs
# RAGGED_CPU_ATTN=openblas, 1 thread, single sentences, fp32 and bf16; torch runs as the
# accuracy reference (its times are a drift check between the runs). Usage: ab_attn.sh REPO
cd "$1" || exit 1
for dt in fp32 bf16; do
	for a in kernel openblas; do
		RAGGED_CPU_ATTN=$a TIME_LIMIT_S=135 bash bench/peer/cpu.sh --threads 1 --batches 1 \
			--dtype $dt --runtimes ragged,torch --tag "ab_${dt}_$a" >"$OUT/$dt-$a.log" 2>&1
	done
done
for f in "$OUT"/peer_cpu_*-ab-*.md; do
	echo "== $f"
	grep "^| minilm\|^| bert" "$f" | cut -d'|' -f2,4,7,8
done
