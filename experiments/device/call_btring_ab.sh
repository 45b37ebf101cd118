#!/usr/bin/env bash
# Issue 20 (tenth session): the producer reads the block table through
# shared memory, 64 tiles a chunk ahead (btring_variant.py), against the
# series: checked on ragged cases, then timed with FA3 (fa3p_ab.py).
# Carry [".carry/vllm026", "dist/patches"].  Results: $OUT/btring.txt, $OUT/fa3p_ab_all.json.
cd "$(dirname "$0")/../.."
source .carry/vllm026/install.sh >/dev/null
bash .carry/vllm026/overlay.sh dist/patches/v0.26.0 >/dev/null
nvidia-smi --query-gpu=name --format=csv,noheader
cp vllm/v1/attention/ops/triton_int8_split_kv_wgmma.py experiments/int8_verify_gluon/_wgmma_head.py
python3 experiments/int8_verify_gluon/btring_variant.py /tmp/wv > /dev/null || exit 1
export PYTHONUNBUFFERED=1 MODE=all VARIANTS=btring=/tmp/wv/btring.py
export TIMED=${TIMED:-"1,131072,6,16;8,32768,6,16;8,131072,8,16;1,32768,8,16;1,32768,4,16;1,131072,16,16;8,131072,16,16;8,32768,16,16;1,131072,8,1600;8,32768,6,1600"}
timeout -s KILL ${LIMIT:-330} python3 experiments/int8_verify_gluon/fa3p_ab.py > "$OUT/btring.txt" 2>&1
echo "rc=$?"
grep -v -i warn "$OUT/btring.txt" | grep -v '^{' | tail -12
