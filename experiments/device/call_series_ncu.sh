#!/usr/bin/env bash
# Issue 20 (tenth session): Nsight Compute on the series' verify kernel
# (128K, batch 1, block 16; QLENS, default "6 16"): stall reasons and the SASS
# lines with the most stall samples (ws_ncu.sh with series_ncu.py), to see
# which of the producer's instructions set the pace with alternate tiles.
# Carry [".carry/vllm026", "dist/patches"].  Results: $OUT/series_*.
cd "$(dirname "$0")/../.."
source .carry/vllm026/install.sh >/dev/null
bash .carry/vllm026/overlay.sh dist/patches/v0.26.0 >/dev/null
nvidia-smi --query-gpu=name --format=csv,noheader
export PYTHONUNBUFFERED=1 KERNEL_RE=kernel_int8_split_kv_verify_wgmma TAG=series \
  SCRIPT=experiments/int8_verify_gluon/series_ncu.py QLENS=${QLENS:-"6 16"}
bash experiments/int8_verify_gluon/ws_ncu.sh
xz -9 "$OUT"/series_source_q*.csv
ls -la "$OUT"
