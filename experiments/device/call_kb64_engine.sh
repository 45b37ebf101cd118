#!/usr/bin/env bash
# Kernel blocks of 64 for int8_per_token_head (commit 0013; experiments/kernel_block_64/): the Triton backend, with
# an INT8 cache, prefers blocks of 64 and offers kernel blocks of 16/32/64, so vLLM splits a hybrid model's large
# attention blocks into 64-token kernel blocks.  Greedy INT8 vs BF16 with and without DFlash on the successor model at
# vLLM's default block size (4 engines side by side, ~3 min); prints each engine's KV-manager and kernel block sizes.
# (The 2026-12-07 run overlaid 0013's code as a diff before it was a commit; the series now carries it.)
# Carry [".carry/vllm026", "dist/patches"].
cd "$(dirname "$0")/../.."
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
source .carry/vllm026/install.sh >/dev/null
bash .carry/vllm026/overlay.sh dist/patches/v0.26.0 >/dev/null
grep -c INT8_KERNEL_BLOCK_SIZE /tmp/site/vllm/v1/attention/backends/triton_attn.py
export PYTHONUNBUFFERED=1 VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1
T0=$(date +%s)
timeout -s INT ${LIMIT:-300} python3 benchmarks/e2e/greedy_compare.py --results-dir $OUT/greedy_kb64 \
  --kv bf16-triton int8-triton --prompt-lengths 5 700 2500 --max-tokens 32 --successor --parallel 4 \
  --kv-cache-memory-gib 1 --gpu-memory-utilization 0.1 > $OUT/greedy_kb64.log 2>&1
echo "greedy rc=$? wall $(( $(date +%s) - T0 )) s"
python3 - <<'PY'
import json, os
r = json.load(open(os.environ["OUT"] + "/greedy_kb64/greedy_compare.json"))
for k, v in r["summary"].items(): print(" ", k, v)
for name, kv in (r.get("kv_cache") or {}).items():
    for w in kv or []:
        print(" ", name, "manager blocks", [g["block_size"] for g in w["groups"]], "kernel blocks", w.get("kernel_block_sizes"))
for name, c in (r.get("path_counter") or {}).items(): print(" ", name, c)
PY
grep -i "error\|Traceback" $OUT/greedy_kb64.log | head -5
