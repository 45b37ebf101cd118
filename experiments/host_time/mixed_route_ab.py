"""Where should an INT8 mixed step's prefill chunk go?  (issue 21, host time)

An INT8 per-token-head mixed step (decode rows + one prefill chunk) runs
four launches per layer: split-KV and its reduce for the decode rows, the
dequantiser and FlashAttention for the chunk.  BF16 on the Triton backend
launches the unified kernel once (twice with its segment reduce).  On the
host that is 2.1-3.5x BF16 Triton's time per step (host_time.py), but the
chunk's FlashAttention is what makes long INT8 prefills as fast as BF16's.
This script measures, on a GPU, both sides of a routing rule "small
chunks: the whole step on the unified kernel":

  int8-split    the series (decode rows on split-KV, chunk sectioned);
  int8-unified  the same layers with the prefill kernel set to UNIFIED
                (the whole step on the unified kernel, as the backend does
                where FlashAttention is missing);
  bf16-triton   BF16 cache, Triton backend (the unified kernel);

for batches of B decode rows plus one chunk of C tokens, every request over
`ctx` cached tokens, 16 layers, real block tables (distinct blocks, a cache
larger than L2), eager (mixed steps run attention outside CUDA graphs).
Per step: host time (builder + the layers' forward, no wait for the GPU)
and wall time (the same, then a synchronize), medians of `--steps`.

    python3 experiments/host_time/mixed_route_ab.py      # $OUT/mixed_route_ab.json

DEVICE=cpu runs one small case with the kernels stubbed as host_time.py
stubs them, to check the script only.
"""

import json
import math
import os
import statistics
import sys
import time
from types import SimpleNamespace

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "e2e"))
import host_time  # noqa: E402

from vllm.v1.attention.backend import CommonAttentionMetadata  # noqa: E402
from vllm.v1.attention.backends import triton_attn  # noqa: E402
from vllm.v1.attention.backends import triton_int8_per_token_head as int8_backend  # noqa: E402
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVQuantMode  # noqa: E402
from vllm.v1.worker import workspace  # noqa: E402

DEV = torch.device(os.environ.get("DEVICE", "cuda"))
H, KVH, D, BS = 24, 4, 256, 16
LAYERS = int(os.environ.get("LAYERS", 16))
STEPS = int(os.environ.get("STEPS", 20))
if DEV.type == "cuda":
    GRID = [(b, c, ctx) for b in (1, 8) for c in (16, 64, 256, 512, 2048)
            for ctx in (512, 4096, 32768)]
else:
    GRID = [(2, 16, 64)]
    LAYERS, STEPS = 2, 2


def sync():
    if DEV.type == "cuda":
        torch.cuda.synchronize()


def batch(num_decodes, chunk, ctx, gen):
    """num_decodes one-token rows and one chunk, each over ctx cached tokens,
    their blocks scattered over the cache."""
    query_lens = [1] * num_decodes + [chunk]
    seq_lens = [ctx + q for q in query_lens]
    blocks = [math.ceil(s / BS) for s in seq_lens]
    perm = torch.randperm(sum(blocks), generator=gen).to(torch.int32)
    table = torch.zeros(len(blocks), max(blocks), dtype=torch.int32)
    start = 0
    for i, n in enumerate(blocks):
        table[i, :n] = perm[start : start + n]
        start += n
    qsl = torch.tensor([0, *torch.tensor(query_lens).cumsum(0).tolist()], dtype=torch.int32)
    sl = torch.tensor(seq_lens, dtype=torch.int32)
    n = sum(query_lens)
    cam = CommonAttentionMetadata(
        query_start_loc=qsl.to(DEV), query_start_loc_cpu=qsl, seq_lens=sl.to(DEV),
        num_reqs=len(query_lens), num_actual_tokens=n, max_query_len=max(query_lens),
        max_seq_len=max(seq_lens), block_table_tensor=table.to(DEV),
        slot_mapping=torch.full((n,), -1, dtype=torch.int64, device=DEV),
        causal=True, seq_lens_cpu_upper_bound=sl,
    )
    return cam, sum(blocks)


def setup(kv, num_blocks):
    int8 = kv.startswith("int8")
    quant = KVQuantMode.INT8_PER_TOKEN_HEAD if int8 else KVQuantMode.NONE
    spec = FullAttentionSpec(block_size=BS, num_kv_heads=KVH, head_size=D,
                             dtype=torch.bfloat16, kv_quant_mode=quant)
    cache_dtype = host_time.KV_DTYPES["int8" if int8 else "bf16"]
    builder = triton_attn.TritonAttentionMetadataBuilder(spec, [], host_time._vllm_config(16), DEV)
    impls = [triton_attn.TritonAttentionImpl(H, D, D**-0.5, KVH, None, None, cache_dtype)
             for _ in range(LAYERS)]
    if kv == "int8-unified":
        for impl in impls:
            k = impl._int8_kernels
            impl._int8_kernels = int8_backend.Int8PerTokenHeadKernels(
                k.decode, int8_backend.Int8PrefillKernel.UNIFIED, None)
    shape = triton_attn.TritonAttentionBackend.get_kv_cache_shape(num_blocks, BS, KVH, D, cache_dtype)
    if int8:
        int8_backend.reserve_int8_prefill_workspace(builder)
        cache = torch.randint(-100, 100, shape, dtype=torch.int8, device=DEV)
        # Random bytes in the scale views are random floats (NaN and Inf
        # among them): give the K and V scales real values, so that the
        # outputs are finite and the two INT8 routes can be compared.
        views = triton_attn.int8_per_token_head_planar_views(cache, D)
        views[2].uniform_(0.005, 0.02)
        views[3].uniform_(0.005, 0.02)
    else:
        cache = torch.randn(shape, dtype=torch.bfloat16, device=DEV) * 0.1
    return builder, impls, cache


def run_case(kv, cam, num_blocks, layer):
    builder, impls, cache = setup(kv, num_blocks)
    n = cam.num_actual_tokens
    q = torch.randn(n, H, D, dtype=torch.bfloat16, device=DEV)
    k = torch.randn(n, KVH, D, dtype=torch.bfloat16, device=DEV)
    out = torch.empty_like(q)
    host, wall = [], []
    for i in range(3 + STEPS):
        sync()
        t0 = time.perf_counter()
        meta = builder.build(0, cam)
        for impl in impls:
            impl.forward(layer, q, k, k, cache, meta, out)
        t1 = time.perf_counter()
        sync()
        t2 = time.perf_counter()
        if i >= 3:
            host.append(t1 - t0)
            wall.append(t2 - t0)
    del cache
    return {"host_us": round(1e6 * statistics.median(host), 1),
            "wall_us": round(1e6 * statistics.median(wall), 1), "out": out.float()}


def main():
    if DEV.type == "cpu":
        # No FlashAttention here: the kernels stubbed as host_time.py stubs
        # them (so the INT8 routes' outputs differ; the check means nothing).
        host_time._stub_kernels({})
    workspace.init_workspace_manager(DEV)
    layer = SimpleNamespace(_q_scale=torch.ones(1, device=DEV), _k_scale=torch.ones(1, device=DEV),
                            _v_scale=torch.ones(1, device=DEV))
    gen = torch.Generator().manual_seed(0)
    rows = []
    for b, c, ctx in GRID:
        cam, num_blocks = batch(b, c, ctx, gen)
        row = {"decodes": b, "chunk": c, "context": ctx}
        outs = {}
        for kv in ("int8-split", "int8-unified", "bf16-triton"):
            r = run_case(kv, cam, num_blocks, layer)
            outs[kv] = r.pop("out")
            row[kv] = r
        # The two INT8 routes read the same cache: their outputs must agree.
        a, u = outs["int8-split"], outs["int8-unified"]
        row["int8_routes_max_abs_diff"] = float((a - u).abs().max())
        rows.append(row)
        print(json.dumps(row), flush=True)
    res = {"device": torch.cuda.get_device_name() if DEV.type == "cuda" else "cpu",
           "layers": LAYERS, "steps": STEPS, "rows": rows}
    with open(os.path.join(os.environ.get("OUT", "/tmp"), "mixed_route_ab.json"), "w") as f:
        json.dump(res, f, indent=1)
    print("\nB  chunk  ctx    | wall us: int8-split int8-unified bf16-triton | host us: split unified bf16 | diff")
    for r in rows:
        w = [r[k]["wall_us"] for k in ("int8-split", "int8-unified", "bf16-triton")]
        h = [r[k]["host_us"] for k in ("int8-split", "int8-unified", "bf16-triton")]
        print(f"{r['decodes']:<2} {r['chunk']:<6} {r['context']:<6} | {w[0]:>9} {w[1]:>12} {w[2]:>11} |"
              f" {h[0]:>8} {h[1]:>8} {h[2]:>8} | {r['int8_routes_max_abs_diff']:.3g}")


if __name__ == "__main__":
    main()
