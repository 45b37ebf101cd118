#!/usr/bin/env bash
# Issue 20: the verify kernel with the query quantised once per program
# before the partitions start (qtop_variant.diff applied to the series' file,
# as /tmp/_wgmma_qtop.py) against the committed kernel
# (_wgmma_head.py, a copy of the series' file),
# checked and timed in one process by ab_runs.py; measured 2026-12-05, not
# adopted (results/kernels/int8_verify_pdl_qtop_ab_nvidia_h200.md).  Carry [".carry/vllm026", "dist/patches"].
cd "$(dirname "$0")/../.."
source .carry/vllm026/install.sh >/dev/null
bash .carry/vllm026/overlay.sh dist/patches/v0.26.0 >/dev/null
cp vllm/v1/attention/ops/triton_int8_split_kv_wgmma.py experiments/int8_verify_gluon/_wgmma_head.py
cp vllm/v1/attention/ops/triton_int8_split_kv_wgmma.py /tmp/_wgmma_qtop.py
patch -s /tmp/_wgmma_qtop.py < experiments/int8_verify_gluon/qtop_variant.diff || exit 1
export PYTHONUNBUFFERED=1 VARIANTS=qtop=/tmp/_wgmma_qtop.py
timeout ${LIMIT:-400} python3 experiments/int8_verify_gluon/ab_runs.py > "$OUT/qtop_ab.txt" 2>&1
echo "rc=$?"; cp /tmp/ab_runs.json "$OUT/" 2>/dev/null
grep -v -i "warn" "$OUT/qtop_ab.txt" | tail -22
