"""Launch the series' verify call (split-KV kernel and its reduce) a few times for Nsight Compute: batch $BATCH (1),
context $CTX (131072), $QLEN (6) tokens, block $BLOCK (16), Qwen3.5-27B attention (24/4 heads, head 256)."""
import os
import sys
import types

import torch

sys.path.insert(0, "benchmarks/kernels")
import benchmark_int8_kv_attention as B  # noqa: E402

args = types.SimpleNamespace(num_q_heads=24, num_kv_heads=4, head_size=256, copy_bytes=400 * 2**20,
                             with_unified=False, no_errors=True)
case = B.Case(args, int(os.environ.get("BATCH", 1)), int(os.environ.get("CTX", 131072)),
              int(os.environ.get("QLEN", 6)), int(os.environ.get("BLOCK", 16)))
fn = B.make_impls(case, args)["int8_split_kv"][0]
for i in range(3):
    fn(i % case.copies)
torch.accelerator.synchronize()
