#!/usr/bin/env bash
# Issue 20, the next call on an H200 (about 7 minutes warm): the kernel table
# of the committed series (benchmark_int8_kv_attention.py --quick, FA3 beside
# it), then the turns A/B (call_turns_ab.sh).  Carry [".carry/vllm026", "dist/patches"].
# Results: $OUT/int8_kv_attention_*.{json,png}, $OUT/bench.txt, $OUT/turns_*.txt, $OUT/ab_runs.json.
cd "$(dirname "$0")/../.."
BENCH_LIMIT=${BENCH_LIMIT:-300} bash experiments/device/call_table.sh
SMOKE_LIMIT=${SMOKE_LIMIT:-100} LIMIT=${LIMIT:-180} bash experiments/device/call_turns_ab.sh
