# (Superseded: 0006 adopted this form through the launcher's QUERY_PAIR; this edit applies to the kernel before that.)
"""Puts alt1's form into an installed vLLM tree, for GPU tests of it (issue 20, fifteenth session; device side,
after overlay.sh): the wgmma kernel with one int8 query product for alternate tiles too (alt1_variant.py's file),
the launcher's int8_split_kv_rounds_query() answering True for every wgmma launch (the tests' references then
round the query as the kernel does), and, with T64=1, wgmma_pipeline() giving alternate-tile launches without a
window the tiles and rings 65-128-row launches take (WGMMA_ROWS_TILE_SIZE, WGMMA_ROWS_STAGES, WGMMA_VH_STAGES: 64
tokens, 2 int8 stages, 2 widened tiles, 1 ahead) where the block size is a multiple of that tile.
Usage: python experiments/int8_verify_gluon/alt1_install.py SITE_DIR  (repo root; env T64)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from alt1_variant import alt1_source  # noqa: E402

ops = os.path.join(sys.argv[1], "vllm/v1/attention/ops")
kernel = os.path.join(ops, "triton_int8_split_kv_wgmma.py")
text = alt1_source(open(kernel).read())
open(kernel, "w").write(text)
path = os.path.join(ops, "triton_int8_split_kv_attention.py")
s = open(path).read()


def rep(old, new):
    global s
    assert s.count(old) == 1, (s.count(old), old[:80])
    s = s.replace(old, new)


rep("""        and not _wgmma_tile_split(geometry, rows, num_tokens, max_partials)
    )""", """    )""")
if os.environ.get("T64") == "1":
    rep("""    if not tile_split and sliding_window == 0:""",
        """    if tile_split and sliding_window == 0 and block_size % WGMMA_ROWS_TILE_SIZE == 0:
        tile_size, stages = WGMMA_ROWS_TILE_SIZE, WGMMA_ROWS_STAGES
    if not tile_split and sliding_window == 0:""")
open(path, "w").write(s)
print("alt1 installed in", ops, "T64" if os.environ.get("T64") == "1" else "")
