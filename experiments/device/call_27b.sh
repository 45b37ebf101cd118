# Qwen3.5-27B geometry (64 layers), dummy weights quantized to fp8 online,
# INT8 fork vs BF16 FA side by side, CUDA graphs.  Args: SPEC (none|dflash).
# Carry .carry/jit (jit_cache.sh) when an earlier call brought caches back.
# PRESET=27b-geometry (20 layers, 5 of them full attention) KV_GIB=12 UTIL=0.45
# fits the pair on one 80 GB H100.
cd "$(dirname "$0")/../.."
source experiments/device/jit_cache.sh restore
SPEC=${1:-none}; shift || true
export RESULTS=/tmp/r PRESET=${PRESET:-qwen3.5-27b} SPEC ROUNDS=${ROUNDS:-1} KV_GIB=${KV_GIB:-24} UTIL=${UTIL:-0.46}
export CONTEXTS=${CONTEXTS:-"32768 65536 131072"}
mkdir -p /tmp/r
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
# The compile caches are complete once both engines are ready: pack them
# then, so that a pair cut at the call's limit still brings them back.
rm -f /tmp/r/serve_pair_*.log  # a warm machine's earlier logs would say "ready"
nice -n 19 bash experiments/device/jit_cache.sh save-when-ready \
    /tmp/r/serve_pair_int8-triton-$SPEC.log /tmp/r/serve_pair_bf16-fa-$SPEC.log &
saver=$!
timeout ${PAIR_TIMEOUT:-540} bash benchmarks/e2e/serve_pair.sh int8-triton bf16-fa --quantization fp8 --batch 8 "$@" 2>&1 | tail -60
echo "rc=${PIPESTATUS[0]}"
# (A pair that never got both engines ready leaves nothing to save.)
timeout 60 tail --pid=$saver -f /dev/null || kill $saver 2>/dev/null
for f in /tmp/r/serve_*.json /tmp/r/serve_pair_*.log; do
  [ -f "$f" ] && cp "$f" "$OUT/${PRESET}_fp8_${SPEC}_$(basename "$f")"
done
grep -h "compil\|Error\|error" /tmp/r/serve_pair_*.log | grep -iv "warning" | tail -20

