"""Offline sm_90 compile of a module's kernel_int8_split_kv_verify_wgmma (default: the series' file): registers,
spills, loop SASS histogram, wgmma serialisation.
Usage: CUDA_VISIBLE_DEVICES= python offline_series_wgmma.py BLOCK [PATH]   (env STAGES, VH for variants that take them)"""
import os, re, sys; sys.path.insert(0, "experiments/int8_verify_gluon")
from sass_stats import build, load_mod, loop_stats, sass, wgmma_serialized
bs = int(sys.argv[1])
path = sys.argv[2] if len(sys.argv) > 2 else "vllm/v1/attention/ops/triton_int8_split_kv_wgmma.py"
k = load_mod(path).kernel_int8_split_kv_verify_wgmma
consts = dict(num_query_heads=24, NUM_QUERIES_PER_KV=6, ROW_SPLITS=1, HEAD_SIZE=256, BLOCK_SIZE=bs, TILE_SIZE=32,
              STAGES=int(os.environ.get("STAGES", 3)), P_LOG2_SCALE=6.0, RESCALE_THRESHOLD=8.0,
              SLIDING_WINDOW=0)
if "VH" in os.environ: consts["VH_BUFFERS"] = int(os.environ["VH"])
c = build(None, k, consts, extra_ptrs={"clk_ptr": "*i32"}, gluon=True)
u, s = sass(c)
open(f"/tmp/sass_series_wgmma_{bs}.txt", "w").write(s)
open("/tmp/series_wgmma.ptx", "w").write(c.asm["ptx"])
print(re.findall(r"REG:\d+ STACK:\d+ SHARED:\d+", u), "smem", c.metadata.shared)
for lo, hi, n, ops in loop_stats(s):
    print(hex(lo), hex(hi), n, dict(ops.most_common(40)))
print("wgmma serialised:", wgmma_serialized(c))
