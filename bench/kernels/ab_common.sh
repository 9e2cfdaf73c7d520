# Sourced by the one-off CPU A/B scripts (pad_ab/, tile_ab/, attn_split_ab/) on a lent machine, as
# `source "$(dirname "$0")/../ab_common.sh"`: sets ROOT (the repository root, made the working
# directory), CARRY, O (${OUT:-/tmp}) and the build environment (tests/gpu/setup-env.sh, which
# also sets D), and defines:
#   ab_build DIR VARIANT: make build/bench_cpu_single (CUDA=0) and copy it to DIR/bcs_VARIANT;
#                         exits the script on a build failure (the log goes to $O/build.log)
#   ab_models:            random-weight MiniLM and BERT-base in build/models/{minilm,bert-base}-random
#                         from the public configs (bench/serving/make_bert_base.py), with a
#                         synthetic 30522-token vocabulary; exits the script on failure
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd); CARRY=$ROOT/.gpu_carry; cd "$ROOT" || exit 1
source tests/gpu/setup-env.sh >/dev/null
O=${OUT:-/tmp}
ab_build() {
	make -j"$(nproc)" CUDA=0 build/bench_cpu_single >>"${O:-/tmp}/build.log" 2>&1 ||
		{ tail "${O:-/tmp}/build.log"; exit 1; }
	cp build/bench_cpu_single "$1/bcs_$2"
}
ab_models() {
	local V=build/models/vocab-synthetic
	mkdir -p $V
	python3 -c 'import sys
t = ["[PAD]"] + [f"[unused{i}]" for i in range(99)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
sys.stdout.write("\n".join(t + [f"w{i}" for i in range(30522 - len(t))]) + "\n")' >$V/vocab.txt
	python3 bench/serving/make_bert_base.py build/models/minilm-random --arch minilm --vocab-from $V >/dev/null || exit 1
	python3 bench/serving/make_bert_base.py build/models/bert-base-random --vocab-from $V >/dev/null || exit 1
}
#   ab_rounds DIR ROUNDS "VARIANTS" "THREADS" TOKENS: ROUNDS rounds, each running every variant's
#                         DIR/bcs_<variant> on both models at each thread count (a fresh process
#                         each, in that order), --tokens TOKENS --budget 0.25; one JSON line per
#                         (run, T) on stdout: {"v","m","threads","round","r": bench_cpu_single's}
ab_rounds() {
	local dir=$1 rounds=$2 variants=$3 threads=$4 tokens=$5 i v m t
	for i in $(seq "$rounds"); do
		for v in $variants; do
			for m in minilm bert-base; do
				for t in $threads; do
					RAGGED_NUM_THREADS=$t OMP_NUM_THREADS=1 "$dir/bcs_$v" build/models/$m-random \
						--tokens "$tokens" --budget 0.25 |
						sed "s/^/{\"v\":\"$v\",\"m\":\"$m\",\"threads\":$t,\"round\":$i,\"r\":/; s/}\$/}}/"
				done
			done
		done
	done
}
