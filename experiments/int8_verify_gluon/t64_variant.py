"""The series' verify kernel with 64-token tiles in the 65-128-row mode (issue 20, twelfth session).

With 12-16 tokens (65-128 rows) each consumer warpgroup spends ~2,100 cycles per 32-token tile (H100 ablations:
consumers alone 137 us at b1 128K q16, 128 tiles per program) against ~770 cycles of tensor work for both: the
tile is bound by its chain (wait, Q.K, the row reductions, exp2, P.V, wait), whose per-tile parts (barriers, the
two-shuffle row max and sum, the rescale vote, the wgmma waits) a 64-token tile pays once per 64 tokens.  The
series' overlap loop (next tile's Q.K during this tile's softmax) spills 200 bytes at 64-token tiles (offline,
sm_90), so these use the plain loop (each consumer: wait, Q.K, softmax, P.V, wait) that alternate tiles run.

* ``t64``: 65-128 rows without a window take 64-token tiles, 2 int8 stages (32.5 KB each), 2 widened V tiles
  (32 KB each), 1 tile copied ahead of the widening: 165 KB of shared memory, no spills (offline, sm_90).
* ``t64s3``: the same with 3 int8 stages and 2 tiles ahead (199 KB; the producer keeps 6 values in local memory).
* ``s32``: the plain loop with the series' 32-token tiles (4 stages, 2 widened tiles, 2 ahead), to tell the
  tile's size from the loop's form.

The kernel's source changes in one place (which loop 65-128 rows take); the launch constants are set by a wrapper
around the Gluon kernel that the series' launcher calls as it calls the kernel (``kernel[grid](*args, **kw)``),
for launches with 65-128 rows and no window only.  Alternate tiles are the series' own.
Written from the series' module (no copy kept), from the repository root:
    python experiments/int8_verify_gluon/t64_variant.py OUT_DIR    -> OUT_DIR/{t64,t64s3,s32}.py
Offline: TILE=64 STAGES=2 VH=2 AHEAD=1 CUDA_VISIBLE_DEVICES= python \
    experiments/int8_verify_gluon/offline_series_wgmma.py 16 0 OUT_DIR/t64.py"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ovl2_variant import BASE, rep  # noqa: E402  (the series' source; one exact occurrence per edit)

# name: (TILE_SIZE, STAGES, VH_STAGES, AHEAD) for 65-128-row launches without a window.
ROWS_CONSTANTS = {"t64": (64, 2, 2, 1), "t64s3": (64, 3, 2, 2), "s32": (32, 4, 2, 2)}

WRAPPER = '''

_gluon_kernel = kernel_int8_split_kv_verify_wgmma


class _RowsConstants:
    """kernel[grid](*args, **kw) with this variant's constants for 65-128 rows without a window."""

    def __getitem__(self, grid):
        launch = _gluon_kernel[grid]

        def run(*args, **kw):
            if not kw["TILE_SPLIT"] and kw["SLIDING_WINDOW"] == 0:
                kw.update(TILE_SIZE={tile}, STAGES={stages}, VH_STAGES={vh}, AHEAD={ahead})
            return launch(*args, **kw)

        return run


kernel_int8_split_kv_verify_wgmma = _RowsConstants()
'''


def variant(src: str, tile: int, stages: int, vh: int, ahead: int) -> str:
    # 65-128 rows take the plain loop (the overlap loop's VH_STAGES > 2 assertion stays, unreached).
    src = rep(src, "    if TILE_SPLIT or SLIDING_WINDOW > 0:\n        for _ in range(my_tiles):",
              "    if True:\n        for _ in range(my_tiles):")
    return src + WRAPPER.format(tile=tile, stages=stages, vh=vh, ahead=ahead)


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else "/tmp/t64"
    os.makedirs(out, exist_ok=True)
    for name, constants in ROWS_CONSTANTS.items():
        path = os.path.join(out, name + ".py")
        with open(path, "w") as f:
            f.write(variant(BASE, *constants))
        print(path)
