"""Puts alt1's form into an installed vLLM tree, for GPU tests of it (issue 20, fifteenth session; device side,
after overlay.sh): the wgmma kernel with one int8 query product for alternate tiles too (alt1_variant.py's file),
the launcher's int8_split_kv_rounds_query() answering True for every wgmma launch (the tests' references then
round the query as the kernel does), and, with T64=1, wgmma_pipeline() giving alternate-tile launches without a
window 64-token tiles (2 int8 stages, 2 widened tiles, 1 ahead) where the block size is a multiple of 64.
Usage: python experiments/int8_verify_gluon/alt1_install.py SITE_DIR  (repo root; env T64)."""
import os
import subprocess
import sys

ops = os.path.join(sys.argv[1], "vllm/v1/attention/ops")
subprocess.run([sys.executable, "experiments/int8_verify_gluon/alt1_variant.py", "/tmp/wv"], check=True)
open(os.path.join(ops, "triton_int8_split_kv_wgmma.py"), "w").write(open("/tmp/wv/alt1.py").read())
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
        """    if tile_split and sliding_window == 0 and block_size % 64 == 0:
        tile_size, stages, vh_stages = 64, 2, 2
    if not tile_split and sliding_window == 0:""")
open(path, "w").write(s)
print("alt1 installed in", ops, "T64" if os.environ.get("T64") == "1" else "")
