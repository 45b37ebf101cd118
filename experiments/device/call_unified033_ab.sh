#!/usr/bin/env bash
# Issue 24, deliverable 5, in one call (about 3-5 minutes on a warm H200): our
# split-KV INT8 kernel against vLLM 0.33.0's unified kernel (its split-K path
# for up to 8 query tokens) and FA3 on BF16, decode and verify q = 1..8, 32K
# and 128K, batch 1 and 8, on the planar INT8 cache, under the 0.26.0 runtime.
# Before the call, here: .venv/bin/python experiments/second_base/unified_033_ab.py extract
# Carry [".carry/vllm026", "dist/patches", ".carry/v033ops"].
# Results: $OUT/unified033_ab.txt and $OUT/unified033_ab.json.
cd "$(dirname "$0")/../.."
source .carry/vllm026/install.sh >/dev/null
bash .carry/vllm026/overlay.sh dist/patches/v0.26.0 >/dev/null
export PYTHONUNBUFFERED=1
{
    timeout 120 python3 experiments/second_base/unified_033_ab.py check &&
    timeout ${LIMIT:-420} python3 experiments/second_base/unified_033_ab.py bench \
        --json "$OUT/unified033_ab.json"
} > "$OUT/unified033_ab.txt" 2>&1
echo "rc=$?"
grep -v -i "warn" "$OUT/unified033_ab.txt" | tail -34
