"""Offline sm_90 compile of ws_verify.kernel_int8_split_kv_verify_ws: registers per partition, spills, shared memory,
loop SASS histograms.  Usage: CUDA_VISIBLE_DEVICES= python offline_ws.py BLOCK TILE_SPLIT [STAGES VH AHEAD REGS MAXNREG]
(env PINGPONG=0|1|2|3, TMA=0|1, SPLIT=0|1: K signalled before the widening)"""
import os, re, sys; sys.path.insert(0, "experiments/int8_verify_gluon")
from sass_stats import build, load_mod, loop_stats, sass
k = load_mod("experiments/int8_verify_gluon/ws_verify.py").kernel_int8_split_kv_verify_ws
a = [int(x) for x in sys.argv[1:]] + [None] * 8
bs, split = a[0], a[1]
stages, vh, ahead, regs, maxnreg = a[2] or 4, a[3] or 3, a[4] or 2, a[5] or 224, a[6] or 168
consts = dict(num_query_heads=24, NUM_QUERIES_PER_KV=6, ROW_SPLITS=1, HEAD_SIZE=256, BLOCK_SIZE=bs, TILE_SIZE=int(os.environ.get("TILE", 32)),
              P_LOG2_SCALE=6.0, RESCALE_THRESHOLD=8.0, SLIDING_WINDOW=int(os.environ.get("WINDOW", 0)), TILE_SPLIT=bool(split), STAGES=stages,
              VH_STAGES=vh, AHEAD=ahead, CONSUMER_REGS=regs, PINGPONG=int(os.environ.get("PINGPONG", 1)),
              USE_TMA=bool(int(os.environ.get("TMA", 0))), SPLIT_READY=bool(int(os.environ.get("SPLIT", 0))))
types = {}
if consts["USE_TMA"]:
    import torch
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    from triton.runtime.jit import mangle_type
    lay = gl.NVMMASharedLayout.get_default_for
    i8 = torch.empty(1 << 20, dtype=torch.int8)
    page, hs = 4 * 520 * bs, 520 * bs
    types = {n: mangle_type(d) for n, d in dict(
        k_desc=TensorDescriptor(i8, [4, 4, bs, 256], [page, hs, 256, 1], [1, 1, 16, 256], lay([1, 1, 16, 256], gl.int8)),
        v_desc=TensorDescriptor(i8, [4, 4, 256, bs], [page, hs, bs, 1], [1, 1, 256, 16], lay([1, 1, 256, 16], gl.int8)),
    ).items()}
else:
    consts.update(k_desc=None, v_desc=None)
c = build(None, k, consts, types=types, gluon=True, maxnreg=maxnreg)
u, s = sass(c)
open(f"/tmp/sass_ws_{bs}_{split}.txt", "w").write(s)
open(f"/tmp/ws_{bs}_{split}.ptx", "w").write(c.asm["ptx"])
print(re.findall(r"REG:\d+ STACK:\d+ SHARED:\d+", u), "smem", c.metadata.shared, "warps", c.metadata.num_warps)
print("setmaxnreg:", re.findall(r"USETMAXREG[^;]*", s))
print("local ld/st:", len(re.findall(r"\b(LDL|STL)\b", s)))
for lo, hi, n, ops in loop_stats(s):
    print(hex(lo), hex(hi), n, dict(ops.most_common(24)))
