#!/usr/bin/env bash
# Issue 20: programmatic dependent launch for the verify call, and a
# timeline of one call's fixed costs (experiments/int8_verify_gluon/
# pdl_variant.py, pdl_ab.py); about 2-3 minutes on a warm H200.
# Carry [".carry/vllm026", "dist/patches"].  Results: $OUT/pdl_ab.txt, $OUT/pdl_ab.json.
cd "$(dirname "$0")/../.."
source .carry/vllm026/install.sh >/dev/null
bash .carry/vllm026/overlay.sh dist/patches/v0.26.0 >/dev/null
export PYTHONUNBUFFERED=1
timeout ${LIMIT:-420} python3 experiments/int8_verify_gluon/pdl_ab.py > "$OUT/pdl_ab.txt" 2>&1
echo "rc=$?"
grep -v -i "warn" "$OUT/pdl_ab.txt" | tail -30
