#!/usr/bin/env bash
# Here, before a call_stage.sh / call_gdn_sync.sh call: copy the upstream test
# files the GPU-suite stages name (they are not in this repository) from the
# materialized fork tree into .carry/scripts/ut, then carry ".carry/scripts"
# with ".carry/vllm026" and "dist/patches".  Needs `make install` (build/vllm-fork).
set -euo pipefail
cd "$(dirname "$0")/../.."
T=build/vllm-fork/tests
[ -d "$T" ] || { echo "no $T: run make install first" >&2; exit 1; }
mkdir -p .carry/scripts/ut
cp "$T/v1/attention/test_batch_reordering.py" "$T/quantization/test_per_token_kv_cache.py" \
  "$T/kernels/attention/test_triton_unified_attention.py" .carry/scripts/ut/
cp "$T/v1/attention/utils.py" .carry/scripts/ut/attention_utils.py
ls .carry/scripts/ut
