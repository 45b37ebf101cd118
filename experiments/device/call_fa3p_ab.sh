#!/usr/bin/env bash
# Issue 20 (tenth session): ovl2_variant.py's kernels against the series on
# one H200 through the series' launcher (fa3p_ab.py): `trim` (softmax with
# the row scale in one FFMA and one division a tile), `fa3putrim`
# (65-128 rows in FlashAttention-3's order, the previous tile's P.V during
# this tile's softmax, full tiles without mask code), `sfa3trim` (the same
# for alternate tiles, four widened V tiles), `deep` (alternate tiles: 6
# int8 stages, 4 ahead).  Checked on ragged cases first (a hang is killed),
# then MODE=split (4-8 tokens) and MODE=rows (12-16 tokens) timed with FA3.
# Carry [".carry/vllm026", "dist/patches"].  Results: $OUT/fa3p_*.txt, $OUT/fa3p_ab_*.json.
cd "$(dirname "$0")/../.."
source .carry/vllm026/install.sh >/dev/null
bash .carry/vllm026/overlay.sh dist/patches/v0.26.0 >/dev/null
nvidia-smi --query-gpu=name --format=csv,noheader
cp vllm/v1/attention/ops/triton_int8_split_kv_wgmma.py experiments/int8_verify_gluon/_wgmma_head.py
# GEN: the variant generator (writes its kernels into /tmp/wv); call_qreg_ab.sh sets it.
python3 ${GEN:-experiments/int8_verify_gluon/ovl2_variant.py} /tmp/wv > /dev/null || exit 1
export PYTHONUNBUFFERED=1
export VARIANTS=${VARIANTS:-trim=/tmp/wv/trim.py,fa3putrim=/tmp/wv/fa3putrim.py,sfa3trim=/tmp/wv/sfa3trim.py,deep=/tmp/wv/deep.py}
for mode in ${MODES:-split rows}; do
  MODE=$mode timeout -s KILL ${LIMIT:-270} python3 experiments/int8_verify_gluon/fa3p_ab.py > "$OUT/fa3p_$mode.txt" 2>&1
  echo "$mode rc=$?"
  grep -v -i warn "$OUT/fa3p_$mode.txt" | grep -v '^{' | tail -20
done
