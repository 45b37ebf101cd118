#!/usr/bin/env bash
# Issue 20 (eleventh session): qreg_variant.py's kernels against the series
# through call_fa3p_ab.sh (fa3p_ab.py: eleven ragged checks, then each cell's
# differing kernels twice beside the series twice and FA3).  `qreg`: with
# 65-128 rows each consumer holds its rounded query as the register A
# operand of Q.K (no 16 KB query read per consumer and tile; consumers 232
# registers, producer 40); `qreg1s`: alternate tiles too take one product of
# the rounded query from registers.  Compiled offline for sm_90 (no spills
# but one producer value at blocks of 16 in the 128-row mode).
# Carry [".carry/vllm026", "dist/patches"].  Results: $OUT/fa3p_*.txt, $OUT/fa3p_ab_*.json.
export GEN=experiments/int8_verify_gluon/qreg_variant.py
export VARIANTS=${VARIANTS:-qreg=/tmp/wv/qreg.py,qreg1s=/tmp/wv/qreg1s.py}
export MODES=${MODES:-rows split}
exec bash "$(dirname "$0")/call_fa3p_ab.sh"
