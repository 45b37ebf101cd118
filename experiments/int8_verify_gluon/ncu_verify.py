"""Launch the verify kernel (q=$QLEN or 6, 128K, batch 1, block 16) a few times for Nsight Compute; optional variant name (variants.py)."""
import os, sys, types
sys.path.insert(0, "benchmarks/kernels")
import torch, benchmark_int8_kv_attention as B
if len(sys.argv) > 1:
    import variants
    B.split_kv = variants.load(sys.argv[1])
args = types.SimpleNamespace(num_q_heads=24, num_kv_heads=4, head_size=256, copy_bytes=400 * 2**20,
                             with_unified=False, no_errors=False)
case = B.Case(args, 1, 131072, int(os.environ.get("QLEN", 6)), 16)
fn = B.make_impls(case, args)["int8_split_kv"][0]
for i in range(3):
    fn(i % case.copies)
torch.accelerator.synchronize()
