#!/usr/bin/env bash
# Issue 20 (fourteenth session): l2_probe.py, the verify kernel, its producer
# alone and FA3 with every block table aliased into an L2-sized pool of pages,
# beside the same calls over an HBM-sized cache and with half the programs:
# which kernels a faster memory would speed up, measurable on either card
# (env QLENS, CELLS, PIPES: see l2_probe.py).  On an H200 the kernel table of
# the series runs first (owed there; NO_TABLE=1 skips it).  ~1-2 minutes warm
# for the probe, 4-5 more for the table.
# Carry [".carry/vllm026", "dist/patches"].  Results: $OUT/l2_probe.{json,txt}
# (and the table's files on an H200).
cd "$(dirname "$0")/../.."
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "$GPU"
if [[ "$GPU" == *H200* && -z "$NO_TABLE" ]]; then
  BENCH_LIMIT=${BENCH_LIMIT:-330} bash experiments/device/call_table.sh | tail -40
fi
(
  source .carry/vllm026/install.sh >/dev/null
  bash .carry/vllm026/overlay.sh dist/patches/v0.26.0 >/dev/null
  export PYTHONUNBUFFERED=1
  timeout -s KILL ${L2_LIMIT:-330} python3 experiments/int8_verify_gluon/l2_probe.py > "$OUT/l2_probe.txt" 2>&1
  echo "l2 rc=$?"
  grep -v -i warn "$OUT/l2_probe.txt" | grep -v '^{' | tail -24
)
