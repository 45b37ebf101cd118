#!/usr/bin/env bash
# Issue 20 (next H200 call): the 65-128-row consumers taking turns on the
# tensor cores (turns_variant.py: turn handed over when the GEMMs are done,
# and when they are issued) against the series, checked on ragged
# cases then timed with FA3 at 12-16 tokens by ab_runs.py.  A smoke run
# under a KILL limit first: a hand-off bug hangs the GPU instead of failing.
# Carry [".carry/vllm026", "dist/patches"].  Results: $OUT/turns_*.txt, $OUT/ab_runs.json.
cd "$(dirname "$0")/../.."
source .carry/vllm026/install.sh >/dev/null
bash .carry/vllm026/overlay.sh dist/patches/v0.26.0 >/dev/null
nvidia-smi --query-gpu=name --format=csv,noheader
cp vllm/v1/attention/ops/triton_int8_split_kv_wgmma.py experiments/int8_verify_gluon/_wgmma_head.py
python3 experiments/int8_verify_gluon/turns_variant.py /tmp/wv || exit 1
export PYTHONUNBUFFERED=1 VARIANTS=turns=/tmp/wv/turns.py,turns_issue=/tmp/wv/turns_issue.py
TIMED="1,4096,16,16" timeout -s KILL ${SMOKE_LIMIT:-120} python3 experiments/int8_verify_gluon/ab_runs.py \
  > "$OUT/turns_smoke.txt" 2>&1
rc=$?; echo "smoke rc=$rc"; grep -v -i warn "$OUT/turns_smoke.txt" | tail -3
[ $rc -eq 0 ] || exit 1
export TIMED=${TIMED:-"1,131072,16,16;1,131072,12,1600;1,32768,16,16;8,32768,16,16;8,131072,16,1600"}
timeout ${LIMIT:-240} python3 experiments/int8_verify_gluon/ab_runs.py > "$OUT/turns_ab.txt" 2>&1
echo "rc=$?"
grep -v -i "warn" "$OUT/turns_ab.txt" | tail -8
