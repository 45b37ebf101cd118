#!/bin/bash
# Nsight Compute on the series' wgmma verify kernel (128K, batch 1, block 16) for 6 and 16 tokens:
# stall reasons, pipe utilisation, memory throughput, and the SASS lines with the most stall samples.
# Run on the GPU machine from the repository root after install.sh/overlay.sh.
cd "$(dirname "$0")/../.." || exit 1
for q in 6 16; do
  QLEN=$q ncu --clock-control none --kernel-name regex:verify_wgmma --launch-skip 1 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SourceCounters --section Occupancy \
    --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section SchedulerStats \
    --section InstructionStats -f -o "$OUT/wgmma_q$q" python3 experiments/int8_verify_gluon/ncu_verify.py > /dev/null 2>&1
  ncu --import "$OUT/wgmma_q$q.ncu-rep" --page details --csv > "$OUT/details_q$q.csv"
  ncu --import "$OUT/wgmma_q$q.ncu-rep" --page source --csv --print-source sass > "$OUT/source_q$q.csv"
  echo "== q$q"
  grep -E '"(Duration|Issued Ipc Active|Warp Cycles Per Issued Instruction|DRAM Throughput|Memory Throughput|Achieved Occupancy|Stall [A-Za-z ]+|No Eligible|Shared Memory|L1/TEX Hit Rate|Issue Slots Busy|Tensor)' \
    "$OUT/details_q$q.csv" | awk -F'","' '{print $(NF-2) " = " $NF}' | tr -d '"' | sort -u | head -60
  python3 experiments/int8_verify_gluon/ncu_top.py "$OUT/source_q$q.csv" | head -40
done
rm -f "$OUT"/*.ncu-rep
