"""The series' verify kernel with the rounded query as the register A operand of Q.K in the 65-128-row mode
(issue 20, eleventh session).

With 65-128 rows each consumer warpgroup's Q.K (one int8 product) reads its 64 x 256 int8 query from shared memory
again for every 32-token tile: 16 KB per consumer and tile, twice the tile's K (8 KB), so the two consumers read
32 KB of query per tile out of ~100 KB of shared-memory traffic (copies, widening, K, widened V).  Here each
consumer converts its query once into wgmma's register A layout (k_width 4: 32 registers a thread) and Q.K reads
only K from shared memory.  Alternate tiles (up to 64 rows, the high/low query pair) keep the series' code in
`qreg`; `qreg1s` gives them one product of the rounded query from registers as well (as 65-128 rows: the pair's
smaller error given up), which halves their Q.K and drops its 32 KB of query reads per tile.
Written by edits of the series' module (no copy kept), from the repository root:
    python experiments/int8_verify_gluon/qreg_variant.py OUT_DIR     -> OUT_DIR/qreg.py, OUT_DIR/qreg1s.py
Offline: CUDA_VISIBLE_DEVICES= python experiments/int8_verify_gluon/offline_series_wgmma.py 16 0 OUT_DIR/qreg.py"""
import os
import sys

from alt1_variant import alt1_source
from ovl2_variant import BASE, rep as edit  # the series' source; one exact occurrence per edit


def qreg(src: str, single: bool = False) -> str:
    """single: alternate tiles too take one product of the rounded query, from registers (the pair's 4x smaller
    error given up: 65-128 rows already round so)."""
    # The query's register A form, read back from its shared-memory copy once (the pair's path still reads that
    # copy in every product; a convert_layout from registers would take 16 KB of scratch).
    src = edit(
        src,
        "    fence_async_shared()\n    gl.thread_barrier()\n    row_qk_scale = ",
        "    fence_async_shared()\n    gl.thread_barrier()\n"
        "    q_a = q_hi_smem.load(\n"
        "        gl.DotOperandLayout(operand_index=0, parent=s_layout, k_width=4)\n"
        "    )\n"
        "    row_qk_scale = ",
    )
    # 32 registers more per consumer thread need 8 more of the budget: with 65-128 rows the consumers get 232 and
    # the producer 40 (its loop then keeps one value in local memory at blocks of 16); alternate tiles keep 224 / 56
    # (their producer would spill 40 bytes at 40).
    src = edit(src, "        [CONSUMER_REGISTERS, CONSUMER_REGISTERS],\n", "        [REGS, REGS],\n")
    src = edit(
        src,
        "        PROGRAM_ROWS: gl.constexpr = ROWS\n        CONSUMERS_PER_TILE: gl.constexpr = 1\n",
        "        PROGRAM_ROWS: gl.constexpr = ROWS\n        CONSUMERS_PER_TILE: gl.constexpr = 1\n"
        "        REGS: gl.constexpr = CONSUMER_REGISTERS\n",
    )
    src = edit(
        src,
        "        PROGRAM_ROWS: gl.constexpr = 2 * ROWS\n        CONSUMERS_PER_TILE: gl.constexpr = 2\n",
        "        PROGRAM_ROWS: gl.constexpr = 2 * ROWS\n        CONSUMERS_PER_TILE: gl.constexpr = 2\n"
        "        REGS: gl.constexpr = 232\n",
    )
    # The 65-128-row loop: its first Q.K (before the loop) and the next tile's Q.K inside it.
    head, rows = src.split("        gl.static_assert(TILE_SIZE == 32 and VH_STAGES > 2)\n")
    rows = edit(rows, "            s_int, k_scale, v_scale = _tile_qk(\n                q_hi_smem,\n",
                "            s_int, k_scale, v_scale = _tile_qk(\n                q_a,\n")
    rows = edit(rows, "s_nxt = warpgroup_mma(q_hi_smem, k_n,", "s_nxt = warpgroup_mma(q_a, k_n,")
    if single:
        head = alt1_source(head)
        head = edit(head, "            s_int, k_scale, v_scale = _tile_qk(\n                q_hi_smem,\n",
                    "            s_int, k_scale, v_scale = _tile_qk(\n                q_a,\n")
    return head + "        gl.static_assert(TILE_SIZE == 32 and VH_STAGES > 2)\n" + rows


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else "/tmp/qv"
    os.makedirs(out, exist_ok=True)
    for name, single in (("qreg", False), ("qreg1s", True)):
        path = os.path.join(out, name + ".py")
        with open(path, "w") as f:
            f.write(qreg(BASE, single))
        print(path)
