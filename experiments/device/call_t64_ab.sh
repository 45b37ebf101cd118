#!/usr/bin/env bash
# Issue 20 (twelfth session): t64_variant.py's kernels against the series
# through call_fa3p_ab.sh (fa3p_ab.py: eleven ragged checks, then each
# 12-16-token cell's kernels twice beside the series twice and FA3).
# `t64`: 65-128 rows in 64-token tiles (2 int8 stages, 2 widened tiles, 1
# ahead) on the plain loop; `t64s3`: 3 stages, 2 ahead; `s32`: the plain
# loop with the series' 32-token tiles.  Compiled offline for sm_90 (t64,
# s32: no spills; t64s3: 6 producer values in local memory).
# Carry [".carry/vllm026", "dist/patches"].  Results: $OUT/fa3p_rows.txt, $OUT/fa3p_ab_rows.json.
export GEN=experiments/int8_verify_gluon/t64_variant.py
export VARIANTS=${VARIANTS:-t64=/tmp/wv/t64.py,t64s3=/tmp/wv/t64s3.py,s32=/tmp/wv/s32.py}
export MODES=${MODES:-rows}
exec bash "$(dirname "$0")/call_fa3p_ab.sh"
