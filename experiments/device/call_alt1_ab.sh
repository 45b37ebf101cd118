#!/usr/bin/env bash
# Issue 20 (fifteenth session): one int8 query product for alternate tiles (4-10 tokens), with 32- and 64-token
# tiles, against the series; then the split-KV GPU tests with that form installed.  Carry [".carry/vllm026",
# "dist/patches"].  ~1 min start, ~3-4 min probe, ~2 min tests.  Results: $OUT/l2_probe.{json,txt},
# $OUT/alt1_tests.txt.  Env: as l2_probe.py (defaults below), T64 (1: the tests run 64-token alternate tiles).
cd "$(dirname "$0")/../.."
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
source .carry/vllm026/install.sh >/dev/null
bash .carry/vllm026/overlay.sh dist/patches/v0.26.0 >/dev/null
python3 experiments/int8_verify_gluon/alt1_variant.py /tmp/wv >/dev/null || exit 1
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
export KVARIANTS=${KVARIANTS:-alt1=/tmp/wv/alt1.py} QLENS=${QLENS:-6 8}
export CELLS=${CELLS:-1,131072,1600;8,32768,1600;1,32768,1600;8,131072,1600;1,131072,16;8,32768,16}
export PIPES=${PIPES:-a32s6:KERNEL=alt1,SPLIT=1,TILE_SIZE=32,STAGES=6,VH_STAGES=2,AHEAD=3;a64s2:KERNEL=alt1,SPLIT=1,TILE_SIZE=64,STAGES=2,VH_STAGES=2,AHEAD=1;p64s2:SPLIT=1,TILE_SIZE=64,STAGES=2,VH_STAGES=2,AHEAD=1}
timeout -s KILL ${L2_LIMIT:-330} python3 experiments/int8_verify_gluon/l2_probe.py > "$OUT/l2_probe.txt" 2>&1
echo "l2 rc=$?"
grep -v -i warn "$OUT/l2_probe.txt" | grep -v '^{' | tail -26
T64=${T64:-1} python3 experiments/int8_verify_gluon/alt1_install.py /tmp/site || exit 1
timeout -s INT ${TEST_LIMIT:-150} python3 -m pytest -q -p no:cacheprovider --tb=short \
  tests/kernels/attention/test_triton_int8_split_kv_attention.py \
  -k "(test_int8_split_kv_verify or growing or window or block_sizes or 64_token or hybrid_padded or reads_what) and not test_wgmma_" \
  2>&1 | grep -v -i warn > "$OUT/alt1_tests.txt"
echo "tests rc=${PIPESTATUS[0]}"; tail -6 "$OUT/alt1_tests.txt"
