#!/usr/bin/env bash
# Issue 20, the next call on an H200 (about 7 minutes warm): the kernel table
# of the committed series (benchmark_int8_kv_attention.py --quick, FA3 beside
# it), then the turns A/B (call_turns_ab.sh).  Carry [".carry/vllm026", "dist/patches"].
# Results: $OUT/int8_kv_attention_*.{json,png}, $OUT/bench.txt, $OUT/turns_*.txt, $OUT/ab_runs.json.
cd "$(dirname "$0")/../.."
source .carry/vllm026/install.sh >/dev/null
bash .carry/vllm026/overlay.sh dist/patches/v0.26.0 >/dev/null
nvidia-smi --query-gpu=name --format=csv,noheader
export PYTHONUNBUFFERED=1
timeout ${BENCH_LIMIT:-300} python3 benchmarks/kernels/benchmark_int8_kv_attention.py --quick \
  --output-dir $OUT > $OUT/bench.txt 2>&1
echo "bench rc=$?"; grep -v -i "warn" $OUT/bench.txt | tail -58
SMOKE_LIMIT=${SMOKE_LIMIT:-100} LIMIT=${LIMIT:-180} bash experiments/device/call_turns_ab.sh
