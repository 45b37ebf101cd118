#!/bin/bash
# Nsight Compute on the token-split verify kernel (ts_ncu.py; 128K, batch 1,
# block 16, $QLENS default "16"): speed of light, pipe utilisation (tensor,
# issue), stall reasons, memory throughput, and the SASS lines with the most
# stall samples.  Run on the GPU machine after install.sh/overlay.sh (e.g.
# from call_ts_ab.sh with NCU=1, after the check passed).
cd "$(dirname "$0")/../.." || exit 1
for q in ${QLENS:-16}; do
  QLEN=$q timeout 150 ncu --clock-control none --kernel-name regex:token_split --launch-skip 1 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SourceCounters --section Occupancy \
    --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section SchedulerStats \
    --section InstructionStats -f -o "$OUT/ts_q$q" python3 experiments/int8_verify_gluon/ts_ncu.py > "$OUT/ts_ncu_log_q$q.txt" 2>&1
  ncu --import "$OUT/ts_q$q.ncu-rep" --page details --csv > "$OUT/ts_details_q$q.csv"
  ncu --import "$OUT/ts_q$q.ncu-rep" --page source --csv --print-source sass > "$OUT/ts_source_q$q.csv"
  echo "== token split q$q"
  grep -E '"(Duration|Issued Ipc Active|Warp Cycles Per Issued Instruction|DRAM Throughput|Memory Throughput|Stall [A-Za-z ]+|No Eligible|Issue Slots Busy|Tensor|Registers)' \
    "$OUT/ts_details_q$q.csv" | awk -F'","' '{print $(NF-2) " = " $NF}' | tr -d '"' | sort -u | head -50
  python3 experiments/int8_verify_gluon/ncu_top.py "$OUT/ts_source_q$q.csv" 2>/dev/null | head -40
done
rm -f "$OUT"/*.ncu-rep
