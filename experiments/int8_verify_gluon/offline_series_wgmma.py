"""Offline sm_90 compile of a module's kernel_int8_split_kv_verify_wgmma (default: the series' file):
registers, spills, loop SASS histogram.  Usage: CUDA_VISIBLE_DEVICES= python offline_series_wgmma.py BLOCK [PATH]"""
import os, sys, re; sys.path.insert(0, "experiments/int8_verify_gluon")
from sass_stats import sass, loop_stats
import importlib.util
from triton.backends.compiler import GPUTarget
from triton.compiler import compile
from triton.experimental.gluon._runtime import GluonASTSource as ASTSource
bs = int(sys.argv[1])
path = sys.argv[2] if len(sys.argv) > 2 else "vllm/v1/attention/ops/triton_int8_split_kv_wgmma.py"
spec = importlib.util.spec_from_file_location("gws", path)
gw = importlib.util.module_from_spec(spec); spec.loader.exec_module(gw)
k = gw.kernel_int8_split_kv_verify_wgmma
consts = dict(num_query_heads=24, NUM_QUERIES_PER_KV=6, ROW_SPLITS=1, HEAD_SIZE=256, BLOCK_SIZE=bs, TILE_SIZE=32,
              STAGES=int(os.environ.get("STAGES", 3)), P_LOG2_SCALE=6.0, RESCALE_THRESHOLD=8.0)
if "VH" in os.environ: consts["VH_BUFFERS"] = int(os.environ["VH"])
ptrs = {"out_ptr": "*bf16", "q_ptr": "*bf16", "k_cache_ptr": "*i8", "v_cache_ptr": "*i8", "clk_ptr": "*i32",
        "block_table_ptr": "*i32", "seq_lens_ptr": "*i32", "query_start_loc_ptr": "*i32"}
sig, aligned = {}, []
for i, n in enumerate(k.arg_names):
    if n in consts: sig[n] = "constexpr"
    elif n == "qk_scale": sig[n] = "fp32"
    elif n == "num_segments": sig[n] = "i32"
    elif n.endswith("_ptr"): sig[n] = ptrs.get(n, "*fp32"); aligned.append(i)
    else:
        sig[n] = "i64"
        if n != "block_table_stride": aligned.append(i)
src = ASTSource(fn=k, signature=sig, constexprs={(k.arg_names.index(n),): v for n, v in consts.items()},
                attrs={(i,): [["tt.divisibility", 16]] for i in aligned})
c = compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=4))
u, s = sass(c)
open(f"/tmp/sass_series_wgmma_{bs}.txt", "w").write(s)
print(re.findall(r"REG:\d+ STACK:\d+ SHARED:\d+", u), "smem", c.metadata.shared)
for lo, hi, n, ops in loop_stats(s):
    print(hex(lo), hex(hi), n, dict(ops.most_common(40)))
open("/tmp/series_wgmma.ptx", "w").write(c.asm["ptx"])
