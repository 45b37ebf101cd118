#!/usr/bin/env bash
# Issue 20 (eleventh session): qreg_variant.py's kernels against the series
# through its launcher (fa3p_ab.py: eleven ragged checks, then each cell's
# differing kernels twice beside the series twice and FA3).  `qreg`: with
# 65-128 rows each consumer holds its rounded query as the register A
# operand of Q.K (no 16 KB query read per consumer and tile; consumers 232
# registers, producer 40); `qreg1s`: alternate tiles too take one product of
# the rounded query from registers.  Compiled offline for sm_90 (no spills
# but one producer value at blocks of 16 in the 128-row mode).
# Carry [".carry/vllm026", "dist/patches"].  Results: $OUT/fa3p_*.txt, $OUT/fa3p_ab_*.json.
cd "$(dirname "$0")/../.."
source .carry/vllm026/install.sh >/dev/null
bash .carry/vllm026/overlay.sh dist/patches/v0.26.0 >/dev/null
nvidia-smi --query-gpu=name --format=csv,noheader
cp vllm/v1/attention/ops/triton_int8_split_kv_wgmma.py experiments/int8_verify_gluon/_wgmma_head.py
python3 experiments/int8_verify_gluon/qreg_variant.py /tmp/qv > /dev/null || exit 1
export PYTHONUNBUFFERED=1
export VARIANTS=${VARIANTS:-qreg=/tmp/qv/qreg.py,qreg1s=/tmp/qv/qreg1s.py}
for mode in ${MODES:-rows split}; do
  MODE=$mode timeout -s KILL ${LIMIT:-270} python3 experiments/int8_verify_gluon/fa3p_ab.py > "$OUT/fa3p_$mode.txt" 2>&1
  echo "$mode rc=$?"
  grep -v -i warn "$OUT/fa3p_$mode.txt" | grep -v '^{' | tail -20
done
