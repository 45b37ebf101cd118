#!/usr/bin/env bash
# Issue 20: the 65-128-row loop in FlashAttention-3's order (fa3order_variant.py:
# tile i's Q.K and tile i-1's P.V issued together, tile i's softmax during
# that P.V) against the series' loop, checked on ragged cases, then timed
# with FA3 at 12-16 tokens by ab_runs.py.  Carry [".carry/vllm026", "dist/patches"].
cd "$(dirname "$0")/../.."
source .carry/vllm026/install.sh >/dev/null
bash .carry/vllm026/overlay.sh dist/patches/v0.26.0 >/dev/null
nvidia-smi --query-gpu=name --format=csv,noheader
cp vllm/v1/attention/ops/triton_int8_split_kv_wgmma.py experiments/int8_verify_gluon/_wgmma_head.py
python3 experiments/int8_verify_gluon/fa3order_variant.py /tmp/wv || exit 1
export PYTHONUNBUFFERED=1 VARIANTS=fa3order=/tmp/wv/fa3order.py
export TIMED=${TIMED:-"1,131072,16,16;1,131072,12,1600;1,32768,16,16;8,32768,16,16;8,131072,16,1600"}
timeout ${LIMIT:-200} python3 experiments/int8_verify_gluon/ab_runs.py > "$OUT/fa3order_ab.txt" 2>&1
echo "rc=$?"
grep -v -i "warn" "$OUT/fa3order_ab.txt" | tail -14
