#!/usr/bin/env bash
# 0006's spill fixes on a GPU, then the kernel table, in one call: the split-KV
# kernel tests (GPU, the Gluon warpgroup-MMA kernel included; offline checks
# left out), then benchmark_int8_kv_attention.py.  On an H200 the issue's
# cells (blocks 16 and 1,600, 1-16 tokens); elsewhere blocks 16 and 64 at
# the tokens of the last H100 table (results/kernels/bs64_table_h100/).
# Carry [".carry/vllm026", "dist/patches"].  Results: $OUT/tests.txt,
# $OUT/bench_bs64.txt and the benchmark's JSON.
cd "$(dirname "$0")/../.."
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$GPU"
source .carry/vllm026/install.sh >/dev/null
bash .carry/vllm026/overlay.sh dist/patches/v0.26.0 >/dev/null
export PYTHONUNBUFFERED=1
T0=$(date +%s)
timeout -s INT ${TEST_LIMIT:-180} python3 -m pytest -q -rfE -p no:cacheprovider -W ignore \
  tests/kernels/attention/test_triton_int8_split_kv_attention.py \
  -k "not spill and not select_leaves and not keeps_its_mma and not skip_unmoved" > $OUT/tests.txt 2>&1
echo "tests rc=$? wall $(( $(date +%s) - T0 )) s"; tail -5 $OUT/tests.txt
# The table: call_bs64_table.sh (its setup is a no-op on this warm machine).
if echo "$GPU" | grep -q H200; then B="16 1600"; Q="1 2 4 6 8 12 16"; else B="16 64"; Q="1 6 12 16"; fi
BLOCKS=$B QLENS=$Q bash experiments/device/call_bs64_table.sh
