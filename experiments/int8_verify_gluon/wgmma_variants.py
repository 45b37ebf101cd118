"""Variants of the series' wgmma verify kernel with the query as the register A operand of Q.K, built by edits to
the series' source (no copies here).  Hypothesis (2026-12-03, offline only): per 32-token tile each warpgroup's
two int8 wgmma re-read the query's high and low parts from shared memory, 2 x 16 KB, against 8 KB of K twice and
16 KB of widened V: the query is the largest shared-memory stream of the tile.  In registers it is read once.

    qreg:  high and low parts in registers (sm_90 offline: 255 registers, 48-64 B of spills, 66 KB shared memory
           instead of 99 KB, 740 SASS instructions per warp per tile instead of 719);
    qreg1: the high part only (one int8 Q per row: 4x the error of the pair on the dequantised cache, measured
           2026-12-02): no spills, 674 instructions; the upper bound of what dropping the second product gives.

    CUDA_VISIBLE_DEVICES= python experiments/int8_verify_gluon/wgmma_variants.py OUTDIR [--compile]

writes OUTDIR/{qreg,qreg1}.py (and experiments/int8_verify_gluon/_wgmma_head.py, the committed kernel, if missing)
for `VARIANTS=qreg=OUTDIR/qreg.py,qreg1=OUTDIR/qreg1.py python3 experiments/int8_verify_gluon/ab_runs.py` on an H200;
--compile also prints each variant's offline sm_90 registers, spills and loop size (blocks 16 and 1600).
"""
import os
import subprocess
import sys

SERIES = "vllm/v1/attention/ops/triton_int8_split_kv_wgmma.py"
HEAD = "experiments/int8_verify_gluon/_wgmma_head.py"

LOAD_Q = (
    """    row_qk_scale = gl.convert_layout(q_scale * (qk_scale / 254.0), row_s)
""",
    """    row_qk_scale = gl.convert_layout(q_scale * (qk_scale / 254.0), row_s)
    # The query parts as the register A operand of Q.K, read once.
    qa_layout: gl.constexpr = gl.DotOperandLayout(
        operand_index=0, parent=s_layout, k_width=4
    )
    fence_async_shared()
    gl.thread_barrier()
    q_hi_reg = q_hi_smem.load(qa_layout)
    q_lo_reg = q_lo_smem.load(qa_layout)
""",
)
QK = (
    """        s_hi = warpgroup_mma(q_hi_smem, k_t, s_zero, use_acc=False, is_async=True)
        s_lo = warpgroup_mma(q_lo_smem, k_t, s_zero, use_acc=False, is_async=True)
""",
    """        s_hi = warpgroup_mma(q_hi_reg, k_t, s_zero, use_acc=False, is_async=True)
        s_lo = warpgroup_mma(q_lo_reg, k_t, s_zero, use_acc=False, is_async=True)
""",
)
HIGH_ONLY = [
    ("""    q_lo_reg = q_lo_smem.load(qa_layout)
""", ""),
    (
        """        s_lo = warpgroup_mma(q_lo_reg, k_t, s_zero, use_acc=False, is_async=True)
""",
        """        s_lo = s_zero
""",
    ),
    (
        """        s_hi, s_lo = warpgroup_mma_wait(0, deps=[s_hi, s_lo])
""",
        """        s_hi = warpgroup_mma_wait(0, deps=[s_hi])
""",
    ),
]
EDITS = {"qreg": [LOAD_Q, QK], "qreg1": [LOAD_Q, QK, *HIGH_ONLY]}


def source(name: str) -> str:
    with open(SERIES) as f:
        text = f.read()
    for old, new in EDITS[name]:
        if text.count(old) != 1:
            raise ValueError(f"variant {name!r}: an anchor no longer matches the series' kernel once")
        text = text.replace(old, new)
    return text


def main() -> None:
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    if not os.path.exists(HEAD):
        with open(SERIES) as f, open(HEAD, "w") as g:
            g.write(f.read())
    for name in EDITS:
        path = os.path.join(out, f"{name}.py")
        with open(path, "w") as f:
            f.write(source(name))
        print("wrote", path)
        if "--compile" in sys.argv:
            for block in (16, 1600):
                res = subprocess.run(
                    [sys.executable, "experiments/int8_verify_gluon/offline_series_wgmma.py", str(block), path],
                    capture_output=True, text=True)
                lines = (res.stdout + res.stderr).strip().splitlines()
                print(f"  block {block}:", " | ".join(line[:160] for line in lines[-3:]))


if __name__ == "__main__":
    main()
