#!/usr/bin/env bash
# Issue 20: one int8 query product per tile instead of the high/low pair
# (q1_variant.py: q1 from shared memory, q1sk with the warp-voted rescale in
# the overlap loop too, q1r232 with the query in registers as wgmma's A
# operand, consumers at 232 registers) against the committed kernel (twice:
# "new" and "old" are the same file, their spread is the noise), checked on
# ragged cases against attention on the dequantised cache, then timed with
# FA3 by ab_runs.py (measured 2026-12-05; 0006 has run q1sk's form since, so
# q1_variant.py now stops unless SRC names the earlier kernel, commit 3666f80).
# Carry [".carry/vllm026", "dist/patches"].
# Results: $OUT/q1_ab.txt, $OUT/ab_runs.json.
cd "$(dirname "$0")/../.."
source .carry/vllm026/install.sh >/dev/null
bash .carry/vllm026/overlay.sh dist/patches/v0.26.0 >/dev/null
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
cp vllm/v1/attention/ops/triton_int8_split_kv_wgmma.py experiments/int8_verify_gluon/_wgmma_head.py
python3 experiments/int8_verify_gluon/q1_variant.py /tmp/wv || exit 1
sed "s/^CONSUMER_REGISTERS = gl.constexpr(224)/CONSUMER_REGISTERS = gl.constexpr(232)/" /tmp/wv/q1r.py > /tmp/wv/q1r232.py
export PYTHONUNBUFFERED=1 ERR_MAX=0.03 VARIANTS=q1=/tmp/wv/q1.py,q1sk=/tmp/wv/q1sk.py,q1r232=/tmp/wv/q1r232.py
export TIMED=${TIMED:-"1,131072,16,16;1,131072,12,1600;1,32768,16,16;8,32768,16,16;8,131072,16,1600;1,131072,6,16;1,32768,8,16;8,32768,8,1600;8,131072,8,16"}
timeout ${LIMIT:-330} python3 experiments/int8_verify_gluon/ab_runs.py > "$OUT/q1_ab.txt" 2>&1
echo "rc=$?"
grep -v -i "warn" "$OUT/q1_ab.txt" | tail -24
