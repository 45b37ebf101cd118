#!/usr/bin/env bash
# Issue 20 (not run yet): alternate tiles as two programs per multiprocessor,
# each a consumer warpgroup plus a two-warp producer (solo2_variant.py),
# against the series.  Compiled offline only: its register hand-over (the
# default partition's setmaxnreg) is unverified, so a smoke run under a KILL
# limit goes first (a hang costs SMOKE_LIMIT, not the call), then
# fa3p_ab.py's checks and split-mode cells (PER_SM2=solo2: the launcher plans
# two programs per SM, two int8 stages).  Run copy_probe.sh first if it has
# not run: it says whether two producers per SM stream faster at all.
# Carry [".carry/vllm026", "dist/patches"].  Results: $OUT/solo2_*.txt, $OUT/fa3p_ab_*.json.
cd "$(dirname "$0")/../.."
source .carry/vllm026/install.sh >/dev/null
bash .carry/vllm026/overlay.sh dist/patches/v0.26.0 >/dev/null
nvidia-smi --query-gpu=name --format=csv,noheader
cp vllm/v1/attention/ops/triton_int8_split_kv_wgmma.py experiments/int8_verify_gluon/_wgmma_head.py
python3 experiments/int8_verify_gluon/solo2_variant.py /tmp/wv > /dev/null || exit 1
export PYTHONUNBUFFERED=1 VARIANTS=solo2=/tmp/wv/solo2.py PER_SM2=solo2
MODE=smoke NO_CHECK=1 TIMED="1,8192,6,16" timeout -s KILL ${SMOKE_LIMIT:-120} \
  python3 experiments/int8_verify_gluon/fa3p_ab.py > "$OUT/solo2_smoke.txt" 2>&1
rc=$?; echo "smoke rc=$rc"; grep -v -i warn "$OUT/solo2_smoke.txt" | tail -3
[ $rc -eq 0 ] || exit 1
MODE=split timeout -s KILL ${LIMIT:-300} python3 experiments/int8_verify_gluon/fa3p_ab.py > "$OUT/solo2_ab.txt" 2>&1
echo "rc=$?"
grep -v -i warn "$OUT/solo2_ab.txt" | grep -v '^{' | tail -12
