# (Superseded: 0006 adopted this form through the launcher's QUERY_PAIR; this edit applies to the kernel before that.)
"""The series' wgmma verify kernel with one int8 query product for alternate tiles too (issue 20, fifteenth
session).  With up to 64 rows (4-10 tokens at 6 query heads per KV head) the series splits each query row into int8
high and low parts and runs two Q.K products per tile; for 65-128 rows it has rounded the row to int8 once since the
sixth session (error within 1/254 of the row's largest element, less than the cache's own quantisation adds).
Offline (sm_90, blocks of 1,600, Triton 3.6), one product frees the q_lo stage (165 -> 133 KB of shared memory at
32-token tiles and 4 stages, so deeper rings fit) and takes 64-token alternate tiles from 56 bytes of stack with
62 local loads and stores to 8 bytes with 4, both outside the loop (l2_probe.py's ``PIPES`` with ``SPLIT=1`` and
``KERNEL=alt1`` times them).
Writes OUT_DIR/alt1.py (from the series' file, or env SRC).  Usage: python experiments/int8_verify_gluon/alt1_variant.py [OUT_DIR] (repo root)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ovl2_variant import BASE, rep  # noqa: E402  (the series' source; one exact occurrence per edit)


def alt1_source(text):
    """The kernel module's text with one query product for every launch."""
    return rep(text, "    QUERY_PAIR: gl.constexpr = TILE_SPLIT\n", "    QUERY_PAIR: gl.constexpr = False\n")


if __name__ == "__main__":
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "/tmp/wv"
    os.makedirs(out_dir, exist_ok=True)
    open(os.path.join(out_dir, "alt1.py"), "w").write(alt1_source(BASE))
    print(os.path.join(out_dir, "alt1.py"))
