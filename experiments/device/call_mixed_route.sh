#!/usr/bin/env bash
# Issue 21 (host time of INT8 mixed steps): should small prefill chunks send
# the whole mixed step to the unified kernel?  experiments/host_time/
# mixed_route_ab.py times the series' split route, the unified route and
# BF16 Triton (host and wall time per 16-layer step, eager) over batches of
# 1/8 decode rows + a 16-2,048-token chunk at 512-32K context, and checks
# that the two INT8 routes agree (run on an H200: results/e2e/mixed_route_h200/).
# About 2-3 minutes warm; ROUTE=0 runs the builder profile alone.
# Carry [".carry/vllm026", "dist/patches"].  Results: $OUT/mixed_route_ab.{json,txt}.
# First, in the same call (~1 minute): experiments/host_time/builder_profile.py,
# where the INT8 builder's host time of a mixed step goes on a GPU host
# ($OUT/builder_profile.txt), now also per call with the GPU queue 20 ms
# ahead (BUSY_MS) and the CUDA API calls the torch profiler sees there.
cd "$(dirname "$0")/../.."
source .carry/vllm026/install.sh >/dev/null
bash .carry/vllm026/overlay.sh dist/patches/v0.26.0 >/dev/null
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 150 python3 experiments/host_time/builder_profile.py 2>&1 | grep -v -i "warn\|^INFO" | tail -75
[ "${ROUTE:-1}" = 1 ] || exit 0
timeout ${LIMIT:-420} python3 experiments/host_time/mixed_route_ab.py > "$OUT/mixed_route_ab.txt" 2>&1
echo "rc=$?"
grep -v -i "warn" "$OUT/mixed_route_ab.txt" | tail -34
