"""A/B in one process through the series' launcher: the wgmma kernel in the working tree against the committed one
(saved beside this file as _wgmma_head.py by `git show HEAD:vllm/v1/attention/ops/triton_int8_split_kv_wgmma.py`;
OLD_STAGES=3 launches it with three stages whatever the table says).  Checks both against attention on the
dequantised cache (ragged contexts, blocks 16/1600), then times them and FA3 (H200)."""
import importlib.util, sys, types, json, os, time
sys.path.insert(0, "benchmarks/kernels")
import torch, benchmark_int8_kv_attention as B
from vllm.v1.attention.ops import triton_int8_split_kv_attention as M
OLD = "experiments/int8_verify_gluon/_wgmma_head.py"
if not os.path.exists(OLD):
    sys.exit(f"{OLD} is missing: write it with `git show HEAD:vllm/v1/attention/ops/triton_int8_split_kv_wgmma.py > {OLD}`")
spec = importlib.util.spec_from_file_location("wgmma_head", OLD)
old = importlib.util.module_from_spec(spec); spec.loader.exec_module(old)


class Fixed:
    """A Gluon kernel launched with some constexprs fixed."""

    def __init__(self, kernel, **fixed):
        self.kernel, self.fixed = kernel, fixed

    def __getitem__(self, grid):
        return lambda *a, **kw: self.kernel[grid](*a, **{**kw, **self.fixed})


old_kernel = old.kernel_int8_split_kv_verify_wgmma
if os.environ.get("OLD_STAGES"):
    old_kernel = Fixed(old_kernel, STAGES=int(os.environ["OLD_STAGES"]))
KERNELS = {"new": M.kernel_int8_split_kv_verify_wgmma, "old": old_kernel}
# VARIANTS="name=path,...": more kernels (same signature) to check and time beside these two.
for item in filter(None, os.environ.get("VARIANTS", "").split(",")):
    name, path = item.split("=")
    spec = importlib.util.spec_from_file_location("var_" + name, path)
    mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
    KERNELS[name] = mod.kernel_int8_split_kv_verify_wgmma
args = types.SimpleNamespace(num_q_heads=24, num_kv_heads=4, head_size=256, copy_bytes=400 * 2**20,
                             with_unified=False, no_errors=False)


def use(name):
    M.kernel_int8_split_kv_verify_wgmma = KERNELS[name]


res = []
for batch, ctx, qlen, bs in [(1, 1000, 6, 16), (1, 1001, 6, 1600), (1, 997, 16, 16), (2, 70, 8, 16),
                             (3, 4099, 12, 1600), (1, 33, 16, 16)]:
    case = B.Case(args, batch, ctx, qlen, bs)
    deq = case.ref_first_request(*case.dequant_first_request())
    fn = B.make_impls(case, args)["int8_split_kv"][0]
    row = dict(batch=batch, ctx=ctx, qlen=qlen, block=bs)
    for name in KERNELS:
        use(name); case.out.fill_(float("nan")); fn(0); torch.accelerator.synchronize()
        row[name + "_err_deq"] = round(B.rel_err(case.out[:qlen], deq), 5)
        row[name + "_finite"] = bool(torch.isfinite(case.out).all())
    res.append(row); print(json.dumps(row), flush=True)
ERR_MAX = float(os.environ.get("ERR_MAX", "0.01"))  # relative error against the dequantised cache
ok = all(r[k + "_err_deq"] < ERR_MAX and r[k + "_finite"] for r in res for k in KERNELS)
print("CHECK", "ok" if ok else "FAILED", flush=True)
timed = [(1, 32768, 8, 16), (8, 32768, 8, 16), (1, 32768, 16, 16), (1, 131072, 6, 16), (1, 131072, 6, 1600), (1, 131072, 8, 16), (1, 131072, 16, 16), (1, 131072, 12, 1600),
         (1, 32768, 6, 16), (8, 32768, 6, 16), (8, 131072, 8, 1600), (8, 32768, 16, 16)]
if os.environ.get("TIMED"):  # "batch,ctx,qlen,block;..."
    timed = [tuple(map(int, c.split(","))) for c in os.environ["TIMED"].split(";")]
for batch, ctx, qlen, bs in timed if ok else []:
    t0 = time.time()
    case = B.Case(args, batch, ctx, qlen, bs)
    impls = B.make_impls(case, args)
    fa = [k for k in impls if k.startswith("fa")][0]
    row = dict(batch=batch, ctx=ctx, qlen=qlen, block=bs, fa3=round(B.time_graph(impls[fa][0], case.copies_bf16), 1))
    for rep in range(2):
        for name in KERNELS:
            use(name)
            row[f"{name}{rep}"] = round(B.time_graph(impls["int8_split_kv"][0], case.copies), 1)
    res.append(row); print(json.dumps(row), f"{time.time() - t0:.0f}s", flush=True)
    del case, impls; torch.cuda.empty_cache()
    json.dump(res, open(os.path.join(os.environ.get("OUT", "/tmp"), "ab_runs.json"), "w"), indent=1)
print("\nFA3 / time (old, new; best of two)")
for r in res:
    if "fa3" in r:
        o = min(r["old0"], r["old1"])
        print(f"b{r['batch']} {r['ctx'] // 1024}K q{r['qlen']} bs{r['block']}: fa3 {r['fa3']} old {o} ({r['fa3'] / o:.2f})"
              + "".join(f" {k} {min(r[k + '0'], r[k + '1'])} ({min(r[k + '0'], r[k + '1']) / o:.3f})"
                        for k in KERNELS if k != "old"))
