# A/B on the device: attention through the kernel tiles vs OpenBLAS, ragged only, 1 thread
cd "$1"
TIME_LIMIT_S=150 bash bench/peer/cpu.sh --threads 1 --batches 1 --runtimes ragged --tag ab_kernel_1 > $OUT/k1.log 2>&1
RAGGED_CPU_ATTN=openblas TIME_LIMIT_S=100 bash bench/peer/cpu.sh --threads 1 --batches 1 --runtimes ragged --tag ab_openblas_1 > $OUT/o1.log 2>&1
TIME_LIMIT_S=100 bash bench/peer/cpu.sh --threads 1 --batches 1 --runtimes ragged --tag ab_kernel_2 > $OUT/k2.log 2>&1
RAGGED_CPU_ATTN=openblas TIME_LIMIT_S=100 bash bench/peer/cpu.sh --threads 1 --batches 1 --runtimes ragged --tag ab_openblas_2 > $OUT/o2.log 2>&1
RAGGED_CPU_ATTN=openblas TIME_LIMIT_S=100 bash bench/peer/cpu.sh --threads 1 --batches 1 --dtype bf16 --runtimes ragged --tag ab_openblas_bf16 > $OUT/o3.log 2>&1
TIME_LIMIT_S=100 bash bench/peer/cpu.sh --threads 1 --batches 1 --dtype bf16 --runtimes ragged --tag ab_kernel_bf16 > $OUT/k3.log 2>&1
for f in $OUT/peer_cpu_ab_*.md; do echo "== $f"; grep "^| minilm\|^| bert" $f | cut -d'|' -f2,4,7; done
