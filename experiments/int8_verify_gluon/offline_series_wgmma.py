"""Offline sm_90 compile of a module's kernel_int8_split_kv_verify_wgmma (default: the series' file): registers,
spills, loop SASS histogram, wgmma serialisation.
Usage: CUDA_VISIBLE_DEVICES= python offline_series_wgmma.py BLOCK TILE_SPLIT [PATH]
(env STAGES (4), VH (2 with TILE_SPLIT or WINDOW, else 3), AHEAD (2), WINDOW (0), TILE (32),
OVERLAP (1 for 32-token tiles without TILE_SPLIT or WINDOW, where the kernel has it), QPAIR (1 for TILE_SPLIT with
32-token tiles, where the kernel takes it))"""
import os, re, sys; sys.path.insert(0, "experiments/int8_verify_gluon")
from sass_stats import build, load_mod, loop_stats, sass, wgmma_serialized
bs, split = int(sys.argv[1]), bool(int(sys.argv[2]))
path = sys.argv[3] if len(sys.argv) > 3 else "vllm/v1/attention/ops/triton_int8_split_kv_wgmma.py"
mod = load_mod(path)
# (t64_variant.py's modules wrap the Gluon kernel to set their launch constants.)
k = getattr(mod, "_gluon_kernel", mod.kernel_int8_split_kv_verify_wgmma)
consts = dict(num_query_heads=24, NUM_QUERIES_PER_KV=6, ROW_SPLITS=1, HEAD_SIZE=256, BLOCK_SIZE=bs, TILE_SIZE=int(os.environ.get("TILE", 32)),
              STAGES=int(os.environ.get("STAGES", 4)), VH_STAGES=int(os.environ.get("VH", 2 if split or "WINDOW" in os.environ else 3)),
              AHEAD=int(os.environ.get("AHEAD", 2)), TILE_SPLIT=split, P_LOG2_SCALE=6.0, RESCALE_THRESHOLD=8.0,
              SLIDING_WINDOW=int(os.environ.get("WINDOW", 0)))
# Kernels since OVERLAP was added take the consumers' loop from the launcher (wgmma_pipeline()).
if "OVERLAP" in k.arg_names:
    consts["OVERLAP"] = int(os.environ.get("OVERLAP", int(not split and "WINDOW" not in os.environ and consts["TILE_SIZE"] == 32)))
# Kernels since QUERY_PAIR was added take the query's parts from the launcher too (the pair only for alternate
# 32-token tiles; env QPAIR overrides).
if "QUERY_PAIR" in k.arg_names:
    consts["QUERY_PAIR"] = int(os.environ.get("QPAIR", int(split and consts["TILE_SIZE"] == 32)))
c = build(None, k, consts, gluon=True, maxnreg=mod.MAX_REGISTERS)
u, s = sass(c)
open(f"/tmp/sass_series_wgmma_{bs}_{int(split)}.txt", "w").write(s)
open("/tmp/series_wgmma.ptx", "w").write(c.asm["ptx"])
print(re.findall(r"REG:\d+ STACK:\d+ SHARED:\d+", u), "smem", c.metadata.shared,
      "local ld/st:", len(re.findall(r"\b(LDL|STL)\b", s)))
for lo, hi, n, ops in loop_stats(s):
    if n > 100:
        print(hex(lo), hex(hi), n, dict(ops.most_common(12)))
print("wgmma serialised:", wgmma_serialized(c))
