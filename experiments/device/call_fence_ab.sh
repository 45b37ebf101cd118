#!/usr/bin/env bash
# Issue 20 (tenth session): the producer's proxy fence (MEMBAR.ALL.CTA +
# FENCE.VIEW.ASYNC.S) with copies in flight, against the fence in the
# consumers after they acquire a tile (cfence) and none (nofence, timing
# only).  ablate_variant.py's kernels; fa3p_ab.py checks them on ragged cases
# (the check's verdict is printed, not a gate), then times them with the
# series and FA3.  Carry [".carry/vllm026", "dist/patches"].
# Results: $OUT/fence_check.txt, $OUT/fence_time.txt, $OUT/fa3p_ab_*.json.
cd "$(dirname "$0")/../.."
source .carry/vllm026/install.sh >/dev/null
bash .carry/vllm026/overlay.sh dist/patches/v0.26.0 >/dev/null
nvidia-smi --query-gpu=name --format=csv,noheader
cp vllm/v1/attention/ops/triton_int8_split_kv_wgmma.py experiments/int8_verify_gluon/_wgmma_head.py
python3 experiments/int8_verify_gluon/ablate_variant.py /tmp/ab > /dev/null || exit 1
export PYTHONUNBUFFERED=1 VARIANTS=cfence=/tmp/ab/cfence.py,nofence=/tmp/ab/nofence.py,nocopy=/tmp/ab/nocopy.py
MODE=check TIMED="1,4096,6,16" timeout -s KILL 200 python3 experiments/int8_verify_gluon/fa3p_ab.py > "$OUT/fence_check.txt" 2>&1
echo "check rc=$?"; grep -v -i warn "$OUT/fence_check.txt" | grep "CHECK"
python3 - "$OUT/fence_check.txt" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    if line.startswith("{") and "_err_deq" in line:
        r = json.loads(line)
        print(r["batch"], r["ctx"], r["qlen"], r["block"], {k: v for k, v in r.items() if k.endswith(("_err_deq", "_diff_new"))})
PY
export NO_CHECK=1 MODE=all
export TIMED=${TIMED:-"1,131072,6,16;8,32768,6,16;8,131072,8,16;1,32768,8,16;1,131072,16,16;8,131072,16,16;8,32768,16,16;1,32768,16,16;1,131072,8,1600"}
timeout -s KILL ${LIMIT:-300} python3 experiments/int8_verify_gluon/fa3p_ab.py > "$OUT/fence_time.txt" 2>&1
echo "time rc=$?"
grep -v -i warn "$OUT/fence_time.txt" | grep -v '^{' | tail -11
