#!/usr/bin/env bash
# The computed-token correction's torch.compile graphs on the GPU, as 0.26.0
# calls it and with the series' unbacked sizes and warm-up (0010):
# experiments/spec_recompile/correction_cuda.py.  About 1.5 minutes on a
# fresh machine.  Carry [".carry/vllm026", "dist/patches"].
# Results: $OUT/correction_cuda.json, $OUT/correction_cuda.txt.
cd "$(dirname "$0")/../.."
source .carry/vllm026/install.sh >/dev/null
bash .carry/vllm026/overlay.sh dist/patches/v0.26.0 >/dev/null
export PYTHONUNBUFFERED=1 VLLM_USE_FLASHINFER_SAMPLER=0
timeout ${LIMIT:-150} python3 experiments/spec_recompile/correction_cuda.py > "$OUT/correction_cuda.txt" 2>&1
echo "rc=$?"
grep -v -i "warn" "$OUT/correction_cuda.txt" | tail -8
