#!/usr/bin/env bash
# Blocks of 64 against blocks of 16 in one run of the kernel benchmark: does `--block-size 64` (64-token
# tiles with the query rounded once for 4-16 tokens) help every INT8 user on Hopper, or only the hybrid models'
# 1,600-token blocks?  Carry [".carry/vllm026", "dist/patches"].  ~1 min start, ~4 min.  Results: $OUT/bench_bs64.txt
# and the benchmark's JSON (tag bs64).
cd "$(dirname "$0")/../.."
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
source .carry/vllm026/install.sh >/dev/null
bash .carry/vllm026/overlay.sh dist/patches/v0.26.0 >/dev/null
export PYTHONUNBUFFERED=1
timeout ${BENCH_LIMIT:-360} python3 benchmarks/kernels/benchmark_int8_kv_attention.py --quick --no-errors \
  --block-sizes ${BLOCKS:-16 64} --query-lens ${QLENS:-4 6 8 12 16} --tag bs64 --output-dir $OUT > $OUT/bench_bs64.txt 2>&1
echo "bench rc=$?"; grep -v -i warn $OUT/bench_bs64.txt | grep -v "^{\|^\[" | tail -60
