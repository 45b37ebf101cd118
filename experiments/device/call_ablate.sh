#!/usr/bin/env bash
# Issue 20 (tenth session): where the verify kernel's tile time goes.
# ablate_variant.py's kernels (each drops one part of the work, keeps every
# barrier) timed beside the series and FA3 by fa3p_ab.py (NO_CHECK: they
# compute garbage).  Carry [".carry/vllm026", "dist/patches"].
# Results: $OUT/ablate.txt, $OUT/fa3p_ab_all.json.
cd "$(dirname "$0")/../.."
source .carry/vllm026/install.sh >/dev/null
bash .carry/vllm026/overlay.sh dist/patches/v0.26.0 >/dev/null
nvidia-smi --query-gpu=name --format=csv,noheader
cp vllm/v1/attention/ops/triton_int8_split_kv_wgmma.py experiments/int8_verify_gluon/_wgmma_head.py
python3 experiments/int8_verify_gluon/ablate_variant.py /tmp/ab > /dev/null || exit 1
export PYTHONUNBUFFERED=1 NO_CHECK=1 MODE=all
# ABLATIONS: which of ablate_variant.py's kernels; the hand-over ones (alternate tiles only):
#   ABLATIONS="sinkc sleep250 sleep1000 bare" TIMED="1,131072,6,16;8,32768,6,16;1,32768,6,16;8,131072,8,16;1,131072,6,1600"
export VARIANTS=$(for v in ${ABLATIONS:-nowiden nocopy nosoftmax nopv bare idle}; do printf "%s=/tmp/ab/%s.py," $v $v; done)
export TIMED=${TIMED:-"1,131072,16,16;8,131072,16,16;1,131072,6,16;8,32768,6,16;8,131072,8,16;1,32768,16,16"}
timeout -s KILL ${LIMIT:-400} python3 experiments/int8_verify_gluon/fa3p_ab.py > "$OUT/ablate.txt" 2>&1
echo "rc=$?"
grep -v -i warn "$OUT/ablate.txt" | grep -v '^{' | tail -10
