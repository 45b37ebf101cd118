#!/usr/bin/env bash
# Issue 20: the token-split verify kernel (experiments/int8_verify_gluon/
# ts_verify.py) checked against the series on ragged batches, then timed
# against the series and FA3 at 12-16 tokens (ts_ab.py).  Carry
# [".carry/vllm026", "dist/patches"].  Results: $OUT/ts_ab.{json,txt}; with NCU=1
# also Nsight Compute's figures for 128K x 16 tokens (ws_ncu.sh on ts_ncu.py).
cd "$(dirname "$0")/../.."
source .carry/vllm026/install.sh >/dev/null
bash .carry/vllm026/overlay.sh dist/patches/v0.26.0 >/dev/null
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
# A hang (a barrier phase gone wrong) must not eat the call: a short smoke
# run first, in its own process, under a short limit.
TS_SMOKE=1 timeout -s KILL ${SMOKE_LIMIT:-150} python3 experiments/int8_verify_gluon/ts_ab.py > "$OUT/ts_smoke.txt" 2>&1
rc=$?; echo "smoke rc=$rc"; grep -v -i "warn" "$OUT/ts_smoke.txt" | tail -5
[ $rc -eq 0 ] || [ -n "$FORCE" ] || exit 1
timeout ${LIMIT:-500} python3 experiments/int8_verify_gluon/ts_ab.py > "$OUT/ts_ab.txt" 2>&1
rc=$?
echo "rc=$rc"
grep -v -i "warn" "$OUT/ts_ab.txt" | tail -30
# NCU=1: Nsight Compute on the kernel at 128K x 16 tokens once it checked.
if [ -n "$NCU" ] && [ $rc -eq 0 ] && ! grep -q "CHECK FAILED" "$OUT/ts_ab.txt"; then
  QLENS=16 KERNEL_RE=token_split SCRIPT=experiments/int8_verify_gluon/ts_ncu.py TAG=ts \
    bash experiments/int8_verify_gluon/ws_ncu.sh
fi
