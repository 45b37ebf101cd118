"""Time the warpgroup-MMA verify kernel with 8 warps (128 rows per program) against 4 (64 rows, two programs per
KV head) for 12-16 query tokens at 128K (H200), through the series' launcher with a geometry override."""
import sys, types, json, os
sys.path.insert(0, "benchmarks/kernels")
import torch, benchmark_int8_kv_attention as B
from vllm.v1.attention.ops import triton_int8_split_kv_attention as M
G = M.Int8SplitKVGeometry
args = types.SimpleNamespace(num_q_heads=24, num_kv_heads=4, head_size=256, copy_bytes=400 * 2**20,
                             with_unified=False, no_errors=False)
res = []
for qlen, bs in [(16, 16), (12, 1600), (16, 1600), (8, 16)]:
    case = B.Case(args, 1, 131072, qlen, bs)
    exact = case.ref_first_request(*case.first_request(case.ref_kv))
    row = dict(qlen=qlen, block=bs)
    for name, geo in [("w4g32", G(32, 32, 4, 3, 64, wgmma=True)), ("w8s2g32", G(32, 32, 8, 2, 128, wgmma=True)),
                      ("w8s2g64", G(32, 64, 8, 2, 128, wgmma=True)), ("w8s2g16", G(32, 16, 8, 2, 128, wgmma=True))]:
        try:
            fn = B.make_impls(case, args, geo)["int8_split_kv"][0]
            fn(0); torch.accelerator.synchronize()
            row[name + "_err"] = round(B.rel_err(case.out[:qlen], exact), 4)
            row[name] = round(B.time_graph(fn, case.copies), 1)
        except Exception as e:  # noqa: BLE001
            row[name + "_exc"] = repr(e)[:300]
    print(json.dumps(row), flush=True); res.append(row)
    del case; torch.cuda.empty_cache()
json.dump(res, open(os.path.join(os.environ.get("OUT", "/tmp"), "probe_8warps.json"), "w"), indent=1)
