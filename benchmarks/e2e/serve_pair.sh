#!/usr/bin/env bash
# Fork-only harness: two serve_bench.py configurations on one GPU, engines
# loaded side by side (fixed KV size each) and measured one at a time, in
# ROUNDS alternating turns (--measure-turn; default 3), then compared: the
# results are per-round medians, and the comparison prints each round's
# ratio too.  Writes into RESULTS (default benchmarks/results/e2e).
#
#   PRESET=27b-geometry SPEC=dflash CONTEXTS="32768 131072" \
#     bash benchmarks/e2e/serve_pair.sh int8-triton bf16-fa [serve_bench args...]
set -euo pipefail
kv_a=$1 kv_b=$2
shift 2
here=$(dirname "$0")
PY=${PY:-python3}
PRESET=${PRESET:-27b-geometry}
SPEC=${SPEC:-dflash}
CONTEXTS=${CONTEXTS:-32768 131072}
RESULTS=${RESULTS:-benchmarks/results/e2e}
KV_GIB=${KV_GIB:-24}
UTIL=${UTIL:-0.45}
ROUNDS=${ROUNDS:-3}
# CPUSETS="0-7 8-15": run each configuration's processes (API side and
# engine core) on its own CPUs (taskset), so one engine's host work cannot
# take the other's cores.
read -r -a cpusets <<< "${CPUSETS:-}"
model=$RESULTS/models/$PRESET-config-only
# Written once here, so that the two runs do not race to write it.
[ -f "$model/config.json" ] || $PY "$here/../models/make_hybrid_model.py" \
    --preset "$PRESET" --out "$model" --drafter --config-only
turns=$(mktemp)
pids=()
i=0
for kv in "$kv_a" "$kv_b"; do
    pin=()
    if [ ${#cpusets[@]} -gt 0 ]; then pin=(taskset -c "${cpusets[$i]}"); fi
    # shellcheck disable=SC2086
    ${pin[@]+"${pin[@]}"} $PY "$here/serve_bench.py" --label "$kv-$SPEC" --kv "$kv" --spec $SPEC \
        --contexts $CONTEXTS --model "$model" --load-format dummy \
        --gpu-memory-utilization "$UTIL" --kv-cache-memory-gib "$KV_GIB" \
        --measure-turn "$turns" --turn "$i/2" --rounds "$ROUNDS" \
        --results-dir "$RESULTS" "$@" \
        > "$RESULTS/serve_pair_$kv-$SPEC.log" 2>&1 &
    pids+=($!)
    i=$((i + 1))
done
rc=0
for pid in "${pids[@]}"; do wait "$pid" || rc=$?; done
for kv in "$kv_a" "$kv_b"; do
    echo "== $kv-$SPEC (last lines)"; tail -n 5 "$RESULTS/serve_pair_$kv-$SPEC.log"
done
$PY "$here/serve_bench.py" --compare "$RESULTS/serve_$kv_a-$SPEC.json" \
    "$RESULTS/serve_$kv_b-$SPEC.json" --baseline "$kv_b-$SPEC" || rc=$?
exit $rc
