#!/usr/bin/env bash
# Issue 20 (sixteenth session): the series with 64-token alternate tiles and one query product at blocks that are
# multiples of 64 (0006's QUERY_PAIR): the split-KV GPU tests, then on an H200 the kernel table (benchmark --quick),
# on an H100 the L2 probe at 6, 8 and 16 tokens.  Carry [".carry/vllm026", "dist/patches"].  ~1 min start, ~3 min
# tests (SKIP_TESTS=1: none), ~5 min table or ~3 min probe.  Results: $OUT/tests.txt, $OUT/bench.txt + table files, or $OUT/l2_probe.txt.
cd "$(dirname "$0")/../.."
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
source .carry/vllm026/install.sh >/dev/null
bash .carry/vllm026/overlay.sh dist/patches/v0.26.0 >/dev/null
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
grep -c "QUERY_PAIR=query_pair" /tmp/site/vllm/v1/attention/ops/triton_int8_split_kv_attention.py
[ -n "$SKIP_TESTS" ] || timeout -s INT 200 python3 -m pytest -q -p no:cacheprovider --tb=short -rf tests/kernels/attention/test_triton_int8_split_kv_attention.py \
  -k "(test_int8_split_kv_verify or growing or window or block_sizes or 64_token or hybrid_padded or reads_what) and not test_wgmma_" 2>&1 | grep -v -i warn > $OUT/tests.txt
[ -n "$SKIP_TESTS" ] || { echo "tests rc=${PIPESTATUS[0]}"; tail -4 $OUT/tests.txt; }
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  timeout 330 python3 benchmarks/kernels/benchmark_int8_kv_attention.py --quick --output-dir $OUT > $OUT/bench.txt 2>&1
  echo "bench rc=$?"; grep -v -i warn $OUT/bench.txt | tail -50
else
  QLENS="6 8 16" CELLS="1,131072,1600;8,32768,1600;1,32768,1600;1,131072,16;8,32768,16" timeout -s KILL 240 python3 experiments/int8_verify_gluon/l2_probe.py > $OUT/l2_probe.txt 2>&1
  echo "l2 rc=$?"; grep -v -i warn $OUT/l2_probe.txt | grep -v '^{' | tail -20
fi
