#!/usr/bin/env bash
# Issue 20/22, a call that may land on either card (kind nvidia-h200 without
# needs_h200): on an H200, whether the producer's cp.async copy stream is capped
# per multiprocessor where TMA and FA3 are not (copy_probe.py; on the H100,
# whose HBM caps every form near 3 TB/s, they were 2.5-2.8 TB/s), then the
# kernel table; on an H100 the GPU suite's `kernels` stage instead (a timing
# of the probe there exists: results/kernels/copy_probe_h100/).
# Carry [".carry/vllm026", "dist/patches", ".carry/scripts"].
cd "$(dirname "$0")/../.."
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "$GPU"
if [[ "$GPU" == *H200* ]]; then
  LIMIT=${PROBE_LIMIT:-200} bash experiments/device/call_copy_probe.sh
  BENCH_LIMIT=${BENCH_LIMIT:-330} bash experiments/device/call_table.sh
else
  bash experiments/device/call_stage.sh kernels ${STAGE_LIMIT:-420}
fi
