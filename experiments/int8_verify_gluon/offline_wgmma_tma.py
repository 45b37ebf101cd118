"""Offline sm_90 compile of gluon_wgmma_tma.kernel_int8_verify_wgmma_tma: registers, spills, loop SASS histogram.
Usage: CUDA_VISIBLE_DEVICES= python offline_wgmma_tma.py BLOCK STAGES"""
import sys, re; sys.path.insert(0, "experiments/int8_verify_gluon")
import torch
from sass_stats import sass, loop_stats
import importlib.util
from triton.backends.compiler import GPUTarget
from triton.compiler import compile
from triton.runtime.jit import mangle_type
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
from triton.experimental.gluon._runtime import GluonASTSource as ASTSource
spec = importlib.util.spec_from_file_location("gwt", "experiments/int8_verify_gluon/gluon_wgmma_tma.py")
gw = importlib.util.module_from_spec(spec); spec.loader.exec_module(gw)
k = gw.kernel_int8_verify_wgmma_tma
bs, stages = [int(x) for x in sys.argv[1:3]]


def descs(bs):
    """Descriptors over small CPU stand-ins (only dtype, block shape and layout reach the signature)."""
    kc = torch.empty(64 * 256, dtype=torch.int8); vc = torch.empty(64 * 256, dtype=torch.int8)
    sc = torch.empty(64 * 16, dtype=torch.float32)
    return dict(
        k_desc=TensorDescriptor(kc, [64, 256], [256, 1], [16, 256], gl.NVMMASharedLayout.get_default_for([16, 256], gl.int8)),
        v_desc=TensorDescriptor(vc, [64 * 256 // bs, bs], [bs, 1], [256, 16], gl.NVMMASharedLayout.get_default_for([256, 16], gl.int8)),
        ks_desc=TensorDescriptor(sc, [64, 16], [16, 1], [1, 16], gl.NVMMASharedLayout.get_default_for([1, 16], gl.float32)),
        vs_desc=TensorDescriptor(sc, [64, 16], [16, 1], [1, 16], gl.NVMMASharedLayout.get_default_for([1, 16], gl.float32)))


if __name__ == "__main__":
    consts = dict(num_query_heads=24, NUM_QUERIES_PER_KV=6, ROW_SPLITS=1, HEAD=256, BLOCK_SIZE=bs, STAGES=stages,
                  P_LOG2_SCALE=6.0, RESCALE_THRESHOLD=8.0)
    ptrs = {"out_ptr": "*bf16", "q_ptr": "*bf16", "block_table_ptr": "*i32", "seq_lens_ptr": "*i32",
            "query_start_loc_ptr": "*i32"}
    d = descs(bs)
    sig, aligned = {}, []
    for i, n in enumerate(k.arg_names):
        if n in consts: sig[n] = "constexpr"
        elif n in d: sig[n] = mangle_type(d[n])
        elif n == "qk_scale": sig[n] = "fp32"
        elif n in ("num_segments",): sig[n] = "i32"
        elif n.endswith("_ptr"): sig[n] = ptrs.get(n, "*fp32"); aligned.append(i)
        else:
            sig[n] = "i32" if n.endswith("_rows") else "i64"
            if n != "block_table_stride" and not n.endswith("_rows"): aligned.append(i)
    print({n: sig[n] for n in d})
    src = ASTSource(fn=k, signature=sig, constexprs={(k.arg_names.index(n),): v for n, v in consts.items()},
                    attrs={(i,): [["tt.divisibility", 16]] for i in aligned})
    c = compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=4))
    u, s = sass(c)
    open(f"/tmp/sass_wgmma_tma_{bs}_{stages}.txt", "w").write(s)
    print(re.findall(r"REG:\d+ STACK:\d+ SHARED:\d+", u), "smem", c.metadata.shared)
    for lo, hi, n, ops in loop_stats(s):
        print(hex(lo), hex(hi), n, dict(ops.most_common(40)))
    open(f"/tmp/wgmma_tma_{bs}_{stages}.ttgir", "w").write(c.asm["ttgir"])
    open(f"/tmp/wgmma_tma_{bs}_{stages}.llir", "w").write(c.asm["llir"])
