#!/usr/bin/env bash
# Issue 20 (next call, ~5-9 minutes on a fresh machine): how fast the verify kernel's producer streams the
# planar INT8 cache by itself (copy_probe.py): 1 to 4 producers per
# multiprocessor, ring depths, with and without the widening, beside FA3 and
# the decode kernel on the same caches, and ws_verify.py's producer with TMA
# copies.  Compiled offline (sm_90, no spills
# at 64-96 registers).  Carry [".carry/vllm026", "dist/patches"].
# Results: $OUT/copy_probe.json, $OUT/copy_probe.txt.
cd "$(dirname "$0")/../.."
source .carry/vllm026/install.sh >/dev/null
bash .carry/vllm026/overlay.sh dist/patches/v0.26.0 >/dev/null
nvidia-smi --query-gpu=name --format=csv,noheader
python3 experiments/int8_verify_gluon/ablate_variant.py /tmp/ab > /dev/null || exit 1
export PYTHONUNBUFFERED=1
timeout -s KILL ${LIMIT:-540} python3 experiments/int8_verify_gluon/copy_probe.py > "$OUT/copy_probe.txt" 2>&1
echo "rc=$?"
grep -v -i warn "$OUT/copy_probe.txt" | grep -v '^{' | tail -8
