"""Launch the warp-specialised verify kernel (q=$QLEN or 16, 128K, batch 1, block 16; ws_launch keyword arguments
from $WS_KW, e.g. "stages=6,ahead=4") a few times for Nsight Compute (ws_ncu.sh)."""
import os, sys, types
sys.path.insert(0, "benchmarks/kernels"); sys.path.insert(0, "experiments/int8_verify_gluon")
import torch, benchmark_int8_kv_attention as B
from vllm.v1.attention.ops import triton_int8_split_kv_attention as M
import ws_verify as W

args = types.SimpleNamespace(num_q_heads=24, num_kv_heads=4, head_size=256, copy_bytes=400 * 2**20,
                             with_unified=False, no_errors=False)
kw = {k: (v == "True" if v in ("True", "False") else int(v))
      for k, v in (p.split("=") for p in os.environ.get("WS_KW", "").split(",") if p)}
case = B.Case(args, 1, 131072, int(os.environ.get("QLEN", 16)), 16)
scratch = [torch.empty(M.MAX_PARTIALS, 24, 256, device="cuda"), torch.empty(M.MAX_PARTIALS, 24, device="cuda"),
           torch.empty(M.MAX_PARTIALS, 24, device="cuda")]
for i in range(3):
    W.ws_launch(case.q, *case.int8[i % case.copies], case.out, case.cu_q, case.seq_lens, case.block_table,
                case.qlen, case.ctx, case.scale, *scratch, **kw)
torch.cuda.synchronize()
