#!/bin/bash
# Nsight Compute on a verify kernel (128K, batch 1, block 16) for $QLENS (default "16 6"):
# stall reasons, pipe utilisation, shared-memory and DRAM throughput, and the SASS lines with the most stall samples.
# Default: the warp-specialised kernel launched by ws_ncu.py (WS_KW passes ws_launch keyword arguments,
# "stages=6,ahead=4"); KERNEL_RE, SCRIPT and TAG name another kernel, its launch script and the output prefix
# (call_ts_ab.sh: the token-split kernel through ts_ncu.py). Run on the GPU machine after install.sh/overlay.sh.
cd "$(dirname "$0")/../.." || exit 1
KERNEL_RE=${KERNEL_RE:-verify_ws}
SCRIPT=${SCRIPT:-experiments/int8_verify_gluon/ws_ncu.py}
TAG=${TAG:-ws}
for q in ${QLENS:-16 6}; do
  QLEN=$q timeout 150 ncu --clock-control none --kernel-name regex:$KERNEL_RE --launch-skip 1 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SourceCounters --section Occupancy \
    --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section SchedulerStats \
    --section InstructionStats -f -o "$OUT/${TAG}_q$q" python3 "$SCRIPT" > "$OUT/${TAG}_ncu_log_q$q.txt" 2>&1
  ncu --import "$OUT/${TAG}_q$q.ncu-rep" --page details --csv > "$OUT/${TAG}_details_q$q.csv"
  ncu --import "$OUT/${TAG}_q$q.ncu-rep" --page source --csv --print-source sass > "$OUT/${TAG}_source_q$q.csv"
  echo "== $TAG q$q"
  grep -E '"(Duration|Issued Ipc Active|Warp Cycles Per Issued Instruction|DRAM Throughput|Memory Throughput|Achieved Occupancy|Stall [A-Za-z ]+|No Eligible|Shared Memory|L1/TEX Hit Rate|Issue Slots Busy|Tensor|Registers)' \
    "$OUT/${TAG}_details_q$q.csv" | awk -F'","' '{print $(NF-2) " = " $NF}' | tr -d '"' | sort -u | head -60
  python3 experiments/int8_verify_gluon/ncu_top.py "$OUT/${TAG}_source_q$q.csv" 2>/dev/null | head -45
  # (the source CSV stays: per-line excess shared wavefronts and stall reasons)
done
rm -f "$OUT"/*.ncu-rep
