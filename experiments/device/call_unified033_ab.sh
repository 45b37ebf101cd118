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
# The 0.33.0 variant of 0006's warpgroup-MMA kernel (query quantised in
# 128-channel chunks), if carried (cp build/vllm-fork-0.33.0/vllm/v1/attention/
# ops/triton_int8_split_kv_wgmma.py .carry/v033ops/wgmma_033.py): the split-KV
# kernel grid on it, under this runtime's Triton 3.6 (gl.barrier is
# gl.thread_barrier there); then the series' own file again.
if [ -f .carry/v033ops/wgmma_033.py ]; then
    sed 's/gl\.barrier()/gl.thread_barrier()/' .carry/v033ops/wgmma_033.py \
        > /tmp/site/vllm/v1/attention/ops/triton_int8_split_kv_wgmma.py
    timeout 240 python3 -m pytest -q -p no:cacheprovider \
        tests/kernels/attention/test_triton_int8_split_kv_attention.py \
        -k "test_int8_split_kv_attention[ or verify or window_and or growing or geometries" > "$OUT/wgmma033_grid.txt" 2>&1
    echo "0.33.0 wgmma kernel, split-KV grid: rc=$? $(tail -1 "$OUT/wgmma033_grid.txt")"
    bash .carry/vllm026/overlay.sh dist/patches/v0.26.0 >/dev/null
fi
{
    timeout 120 python3 experiments/second_base/unified_033_ab.py check &&
    timeout ${LIMIT:-420} python3 experiments/second_base/unified_033_ab.py bench \
        --json "$OUT/unified033_ab.json"
} > "$OUT/unified033_ab.txt" 2>&1
echo "rc=$?"
grep -v -i "warn" "$OUT/unified033_ab.txt" | tail -34
