"""Time the series' split-KV launcher against variants of its module (names from variants.py in argv), same geometry.
Checks each against exact attention on batch-1 cases. Prints one JSON row per case and a ratio table last."""
import sys, types, json, os, time
sys.path.insert(0, "benchmarks/kernels")
import torch, benchmark_int8_kv_attention as B
import variants
mods = {"base": B.split_kv, **{name: variants.load(name) for name in sys.argv[1:]}}
args = types.SimpleNamespace(num_q_heads=24, num_kv_heads=4, head_size=256, copy_bytes=400 * 2**20,
                             with_unified=False, no_errors=False)
cases = [(1, 131072, 6, 16), (1, 131072, 6, 1600), (1, 131072, 8, 16), (1, 32768, 6, 16), (8, 32768, 6, 16),
         (8, 131072, 8, 1600), (1, 131072, 16, 16), (1, 131072, 4, 16), (1, 131072, 1, 16)]
res = []
for batch, ctx, qlen, bs in cases:
    case = B.Case(args, batch, ctx, qlen, bs)
    exact = case.ref_first_request(*case.first_request(case.ref_kv)) if batch == 1 else None
    impls = B.make_impls(case, args)
    fa = [k for k in impls if k.startswith("fa")][0]
    row = dict(batch=batch, ctx=ctx, qlen=qlen, block=bs, fa3=round(B.time_graph(impls[fa][0], case.copies_bf16), 1))
    for name, m in mods.items():
        B.split_kv = m
        try:
            fn = B.make_impls(case, args)["int8_split_kv"][0]
            fn(0); torch.accelerator.synchronize()
            if exact is not None:
                row[name + "_err"] = round(B.rel_err(case.out[:qlen], exact), 4)
            row[name] = round(B.time_graph(fn, case.copies), 1)
        except Exception as e:  # noqa: BLE001
            row[name + "_exc"] = repr(e)[:300]
    B.split_kv = mods["base"]
    res.append(row); print(json.dumps(row), flush=True)
    del case, impls; torch.cuda.empty_cache()
    json.dump(res, open(os.path.join(os.environ.get("OUT", "/tmp"), "variants.json"), "w"), indent=1)
print("\nFA3 time / variant time")
for r in res:
    print(f"b{r['batch']} {r['ctx'] // 1024}K q{r['qlen']} bs{r['block']}: " + "  ".join(
        f"{n} {r[n]} ({r['fa3'] / r[n]:.2f})" for n in mods if n in r))
