"""A/B in one process: the prototype (gluon_wgmma.py, LAZY=1) against the series' launcher (Gluon kernel in
vllm/v1/attention/ops/triton_int8_split_kv_wgmma.py), 128K batch 1, alternating twice (H200)."""
import sys, types, json, os
sys.path.insert(0, "benchmarks/kernels"); sys.path.insert(0, "experiments/int8_verify_gluon")
import torch, benchmark_int8_kv_attention as B
import check_wgmma as C  # noqa: E402  (defines launch(); its checks run only under __main__)
args = types.SimpleNamespace(num_q_heads=24, num_kv_heads=4, head_size=256, copy_bytes=400 * 2**20,
                             with_unified=False, no_errors=False)
res = []
for qlen, bs in [(6, 16), (8, 16), (8, 1600)]:
    case = B.Case(args, 1, 131072, qlen, bs)
    series = B.make_impls(case, args)["int8_split_kv"][0]
    row = dict(qlen=qlen, block=bs)
    for rep in range(2):
        row[f"proto{rep}"] = round(B.time_graph(lambda i: C.launch(case, i, 64, tile=32, stages=3, lazy=1), case.copies), 1)
        row[f"series{rep}"] = round(B.time_graph(series, case.copies), 1)
    print(json.dumps(row), flush=True); res.append(row)
    del case; torch.cuda.empty_cache()
json.dump(res, open(os.path.join(os.environ.get("OUT", "/tmp"), "ab.json"), "w"), indent=1)
