#!/usr/bin/env bash
# Issue 20's A/B in one call (about 3-4 minutes on a warm H200): the series'
# verify call against the one-pass reduce, the wide reduce, and the Gluon
# kernel whose consumers merge their partials (checked against the series'
# output first), on the cases where the reduce weighs most.
# Carry [".carry/vllm026", "dist/patches"].  Results: $OUT/breakdown_ab.txt and $OUT/breakdown.json.
cd "$(dirname "$0")/../.."
source .carry/vllm026/install.sh >/dev/null
bash .carry/vllm026/overlay.sh dist/patches/v0.26.0 >/dev/null
export PYTHONUNBUFFERED=1 REDUCE_AB=1 SEGMENTS=0 MERGE=/tmp/wv/merge.py
export CASES=${CASES:-"1,32768,6;1,32768,8;1,131072,1;1,131072,6;8,32768,4;8,32768,8;8,32768,16;8,131072,8"}
python3 experiments/int8_verify_gluon/merge_variant.py /tmp/wv >/dev/null
timeout ${LIMIT:-480} python3 experiments/int8_verify_gluon/breakdown.py > "$OUT/breakdown_ab.txt" 2>&1
echo "rc=$?"
grep -v -i "warn" "$OUT/breakdown_ab.txt" | tail -30
