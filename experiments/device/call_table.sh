#!/usr/bin/env bash
# Issue 20: the kernel table of the committed series on one GPU (H200 for the
# issue's targets): benchmark_int8_kv_attention.py --quick, FA3 beside it, about
# 4-5 minutes warm.  Carry [".carry/vllm026", "dist/patches"].
# Results: $OUT/int8_kv_attention_*.{json,png}, $OUT/bench.txt.
cd "$(dirname "$0")/../.."
source .carry/vllm026/install.sh >/dev/null
bash .carry/vllm026/overlay.sh dist/patches/v0.26.0 >/dev/null
nvidia-smi --query-gpu=name --format=csv,noheader
export PYTHONUNBUFFERED=1
timeout ${BENCH_LIMIT:-480} python3 benchmarks/kernels/benchmark_int8_kv_attention.py --quick \
  --output-dir $OUT > $OUT/bench.txt 2>&1
echo "bench rc=$?"; grep -v -i "warn" $OUT/bench.txt | tail -58
