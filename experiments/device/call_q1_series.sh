#!/usr/bin/env bash
# Issue 20: the series with one int8 query product for 65-128 rows (0006) on
# the GPU: the split-KV kernel's full test grid (GPU-suite stage
# kernels-grid), the verify/geometry/window/growing-scale tests of the same
# file, then the kernel table against FA3 (--quick: 32K and 128K, batch 1/8,
# blocks 16/1600, q 1-16).  Carry [".carry/vllm026", "dist/patches"].
# Results: $OUT/stage_kernels-grid.txt, $OUT/kernel_tests.txt,
# $OUT/int8_kv_attention*.{json,png}, $OUT/bench.txt.
cd "$(dirname "$0")/../.."
source .carry/vllm026/install.sh >/dev/null
bash .carry/vllm026/overlay.sh dist/patches/v0.26.0 >/dev/null
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
bash experiments/device/call_stage.sh kernels-grid ${GRID_LIMIT:-150} 2>&1 | tail -4
export PYTHONUNBUFFERED=1 VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1
timeout -s INT ${TEST_LIMIT:-150} python3 -m pytest -v -rA -p no:cacheprovider --tb=short \
  tests/kernels/attention/test_triton_int8_split_kv_attention.py \
  -k "not test_int8_split_kv_attention[ and not spill and (ragged or geometr or window or growing or block or many)" \
  2>&1 | grep -v -i "warning" > $OUT/kernel_tests.txt
echo "kernel tests rc=$?"; tail -4 $OUT/kernel_tests.txt
timeout ${BENCH_LIMIT:-280} python3 benchmarks/kernels/benchmark_int8_kv_attention.py --quick \
  --output-dir $OUT --tag q1 > $OUT/bench.txt 2>&1
echo "bench rc=$?"; grep -v -i "warn" $OUT/bench.txt | tail -40
