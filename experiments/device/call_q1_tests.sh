#!/usr/bin/env bash
# Issue 20: the split-KV kernel's GPU tests after 0006 rounds the query once
# for 65-128 rows on Hopper (references take the query as the launch uses
# it): the full grid (stage kernels-grid), then the rest of the file but the
# offline compile checks (the kernel table: call_verify_next.sh).
# Carry [".carry/vllm026", "dist/patches"].
cd "$(dirname "$0")/../.."
source .carry/vllm026/install.sh >/dev/null
bash .carry/vllm026/overlay.sh dist/patches/v0.26.0 >/dev/null
nvidia-smi --query-gpu=name --format=csv,noheader
bash experiments/device/call_stage.sh kernels-grid ${GRID_LIMIT:-150} 2>&1 | tail -3
export PYTHONUNBUFFERED=1 VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1
T0=$(date +%s)
timeout -s INT ${TEST_LIMIT:-300} python3 -m pytest -v -rA -p no:cacheprovider --tb=short \
  tests/kernels/attention/test_triton_int8_split_kv_attention.py \
  -k "not test_int8_split_kv_attention[ and not spill and not test_wgmma_" \
  2>&1 | grep -v -i "warning" > $OUT/kernel_tests.txt
echo "kernel tests rc=$? wall $(( $(date +%s) - T0 )) s"; grep -E "^(FAILED|ERROR)|passed|failed" $OUT/kernel_tests.txt | tail -12
