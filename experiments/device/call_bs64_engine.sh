#!/usr/bin/env bash
# Engine losslessness where verify takes 64-token tiles with the query rounded once (0006's QUERY_PAIR=False):
# the tiny test model's attention blocks (112-224 by default) become multiples of 64 with --block-size 64.
# Usage: call_bs64_engine.sh greedy|ngram.  Carry [".carry/vllm026", "dist/patches"].
# greedy: INT8 and BF16 Triton, each with and without DFlash (successor model, 4 engines side by side), ~4 min;
# ngram: spec_accept (prompt-lookup drafts, acceptance, lossless per KV dtype), ~6 min.
cd "$(dirname "$0")/../.."
WHAT=${1:-greedy}
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
source .carry/vllm026/install.sh >/dev/null
bash .carry/vllm026/overlay.sh dist/patches/v0.26.0 >/dev/null
export PYTHONUNBUFFERED=1 VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1
T0=$(date +%s)
if [ "$WHAT" = greedy ]; then
  timeout -s INT 540 python3 benchmarks/e2e/greedy_compare.py --results-dir $OUT/greedy_bs64 --block-size 64 \
    --kv bf16-triton int8-triton --prompt-lengths 5 700 2500 --max-tokens 32 --successor --parallel 4 \
    --kv-cache-memory-gib 1 --gpu-memory-utilization 0.1 > $OUT/greedy_bs64.log 2>&1
  echo "greedy rc=$? wall $(( $(date +%s) - T0 )) s"
  python3 - <<'PY'
import json, os, glob
f = sorted(glob.glob(os.environ["OUT"] + "/greedy_bs64/*.json"))
for path in f:
    r = json.load(open(path))
    if "summary" not in r: continue
    print(os.path.basename(path))
    for k, v in r["summary"].items(): print(" ", k, v)
    for name, kv in (r.get("kv_cache") or {}).items():
        print(" ", name, "attention blocks", sorted({g["block_size"] for w in (kv or []) for g in w["groups"] if g["attention"]}))
    for name, c in (r.get("path_counter") or {}).items(): print(" ", name, c)
    for name, s in (r.get("spec_decode") or {}).items(): print(" ", name, s)
PY
else
  timeout -s INT 540 python3 benchmarks/e2e/spec_accept.py --results-dir $OUT/spec_bs64 --block-size 64 > $OUT/spec_bs64.log 2>&1
  echo "spec_accept rc=$? wall $(( $(date +%s) - T0 )) s"
fi
grep -v -i "warn" $OUT/*.log | tail -15
