"""Same-process A/B for 17-32 query rows (3-5 tokens x 6 heads) on Hopper: the series' table entry (row-packing
mma.sync kernel, split P.V) against the warpgroup-MMA kernel's alternate-tile mode (the table without its 32-row
entry), over batch and context, FA3 on the same data.  Usage: python route_17_32.py  (results: $OUT/route_17_32.json)"""
import json, os, sys, time, types
sys.path.insert(0, "benchmarks/kernels")
import torch, benchmark_int8_kv_attention as B
from vllm.v1.attention.ops import triton_int8_split_kv_attention as M

args = types.SimpleNamespace(num_q_heads=24, num_kv_heads=4, head_size=256, copy_bytes=400 * 2**20,
                             with_unified=False, no_errors=False)
table = M.GEOMETRY_TABLES[9]
no32 = tuple(e for e in table if e[0] != 32)
out_path = os.path.join(os.environ.get("OUT", "/tmp"), "route_17_32.json")
res = []
cases = [(b, ctx, q, 16) for q in (4, 3, 5) for ctx in (32768, 131072) for b in (1, 2, 4, 8)]
cases += [(1, 131072, 4, 1600), (4, 131072, 4, 1600), (8, 32768, 4, 1600)]
for batch, ctx, qlen, bs in cases:
    t0 = time.time()
    case = B.Case(args, batch, ctx, qlen, bs)
    impls = B.make_impls(case, args)
    fa = [k for k in impls if k.startswith("fa")][0]
    fn = impls["int8_split_kv"][0]
    row = dict(batch=batch, ctx=ctx, qlen=qlen, block=bs, fa3=round(B.time_graph(impls[fa][0], case.copies_bf16), 1))
    row["table"] = round(B.time_graph(fn, case.copies), 1)
    M.GEOMETRY_TABLES[9] = no32
    try:
        deq = case.ref_first_request(*case.dequant_first_request())
        case.out.fill_(float("nan")); fn(0); torch.cuda.synchronize()
        row["wgmma_err"] = round(B.rel_err(case.out[:qlen], deq), 5)
        row["wgmma"] = round(B.time_graph(fn, case.copies), 1)
    finally:
        M.GEOMETRY_TABLES[9] = table
    row["table2"] = round(B.time_graph(fn, case.copies), 1)
    res.append(row); print(json.dumps(row), f"{time.time() - t0:.0f}s", flush=True)
    json.dump(res, open(out_path, "w"), indent=1)
    del case, impls; torch.cuda.empty_cache()
print("\nFA3 / time: table entry (min of two) vs wgmma alternate tiles")
for r in res:
    t = min(r["table"], r["table2"])
    print(f"b{r['batch']} {r['ctx'] // 1024}K q{r['qlen']} bs{r['block']}: fa3 {r['fa3']} table {t} ({r['fa3'] / t:.2f}) "
          f"wgmma {r['wgmma']} ({r['fa3'] / r['wgmma']:.2f}) err {r['wgmma_err']}")
