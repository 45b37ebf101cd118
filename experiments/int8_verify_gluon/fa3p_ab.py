"""A/B of ovl2_variant.py's kernels through the series' launcher (issue 20, tenth session).

Checks every kernel against attention on the dequantised cache (ragged contexts, several segments, blocks 16 and
1600, alternate-tile and 128-row modes), then times, per cell, FA3 once and the kernels that differ there twice
each (CUDA graphs, as the benchmark): "old" (the series' file, copied beside this one as _wgmma_head.py) and "new"
(the installed series) are the same kernel, so their spread is the noise.
Env: NO_CHECK=1 (time without checking), VARIANTS="name=path,..." (the kernels), MODE=split|rows|all (which cells), OUT (results dir).
Writes $OUT/fa3p_ab_<MODE>.json and prints a table last."""
import importlib.util
import json
import os
import sys
import time
import types

sys.path.insert(0, "benchmarks/kernels")
import torch  # noqa: E402

import benchmark_int8_kv_attention as B  # noqa: E402
from vllm.v1.attention.ops import triton_int8_split_kv_attention as M  # noqa: E402


def load(name, path):
    spec = importlib.util.spec_from_file_location("var_" + name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.kernel_int8_split_kv_verify_wgmma


KERNELS = {"new": M.kernel_int8_split_kv_verify_wgmma,
           "old": load("old", "experiments/int8_verify_gluon/_wgmma_head.py")}
for item in filter(None, os.environ.get("VARIANTS", "").split(",")):
    name, path = item.split("=")
    KERNELS[name] = load(name, path)
# Which kernels differ from the series in which mode (the rest is the series' code there).
SPLIT_ONLY = {"deep", "sfa3", "sfa3trim"}
ROWS_ONLY = {"fa3pu", "fa3putrim", "qreg", "t64", "t64s3", "s32"}
args = types.SimpleNamespace(num_q_heads=24, num_kv_heads=4, head_size=256, copy_bytes=400 * 2**20,
                             with_unified=False, no_errors=False)
MODE = os.environ.get("MODE", "all")
OUT = os.environ.get("OUT", "/tmp")


def use(name):
    M.kernel_int8_split_kv_verify_wgmma = KERNELS[name]


def kernels_for(qlen):
    rows_mode = 6 * qlen > 64
    return [k for k in KERNELS if not (rows_mode and k in SPLIT_ONLY) and not (not rows_mode and k in ROWS_ONLY)]


res = []
checks = [(1, 1000, 6, 16), (1, 1001, 6, 1600), (1, 997, 16, 16), (2, 70, 8, 16), (3, 4099, 12, 1600),
          (1, 33, 16, 16), (2, 20000, 16, 16), (3, 9001, 8, 1600), (2, 30001, 6, 16), (4, 5003, 4, 16),
          (1, 65536, 12, 16)]
# NO_CHECK=1: kernels that compute garbage on purpose (ablate_variant.py) are only timed.
for batch, ctx, qlen, bs in [] if os.environ.get("NO_CHECK") else checks:
    case = B.Case(args, batch, ctx, qlen, bs)
    deq = case.ref_first_request(*case.dequant_first_request())
    fn = B.make_impls(case, args)["int8_split_kv"][0]
    row = dict(batch=batch, ctx=ctx, qlen=qlen, block=bs)
    ref = None
    for name in kernels_for(qlen):
        use(name)
        case.out.fill_(float("nan"))
        fn(0)
        torch.accelerator.synchronize()
        row[name + "_err_deq"] = round(B.rel_err(case.out[:qlen], deq), 5)
        row[name + "_finite"] = bool(torch.isfinite(case.out).all())
        if ref is None:
            ref = case.out.float().clone()
        else:  # every request, against the series
            row[name + "_diff_new"] = round(B.rel_err(case.out.float(), ref), 5)
    res.append(row)
    print(json.dumps(row), flush=True)
    del case
ERR_MAX = float(os.environ.get("ERR_MAX", "0.03"))
ok = all(r[k + "_err_deq"] < ERR_MAX and r[k + "_finite"] and r.get(k + "_diff_new", 0) < 0.02
         for r in res for k in kernels_for(r["qlen"]))
print("CHECK", "ok" if ok else "FAILED", flush=True)
cells = []
if MODE in ("split", "all"):
    cells += [(1, 32768, 6, 16), (1, 32768, 8, 16), (1, 131072, 6, 16), (1, 131072, 8, 16), (8, 32768, 6, 16),
              (8, 32768, 8, 16), (8, 131072, 6, 16), (8, 131072, 8, 16), (1, 32768, 4, 16), (8, 32768, 6, 1600)]
if MODE in ("rows", "all"):
    cells += [(1, 32768, 16, 16), (1, 131072, 12, 16), (1, 131072, 16, 16), (8, 32768, 12, 16),
              (8, 32768, 16, 16), (8, 131072, 16, 16), (1, 131072, 16, 1600)]
if os.environ.get("TIMED"):
    cells = [tuple(map(int, c.split(","))) for c in os.environ["TIMED"].split(";")]
for batch, ctx, qlen, bs in cells if ok else []:
    t0 = time.time()
    case = B.Case(args, batch, ctx, qlen, bs)
    impls = B.make_impls(case, args)
    fa = [k for k in impls if k.startswith("fa")][0]
    row = dict(batch=batch, ctx=ctx, qlen=qlen, block=bs, fa3=round(B.time_graph(impls[fa][0], case.copies_bf16), 1))
    names = kernels_for(qlen)
    for rep in range(2):
        for name in names:
            use(name)
            row[f"{name}{rep}"] = round(B.time_graph(impls["int8_split_kv"][0], case.copies), 1)
    res.append(row)
    print(json.dumps(row), f"{time.time() - t0:.0f}s", flush=True)
    del case, impls
    torch.cuda.empty_cache()
    json.dump(res, open(os.path.join(OUT, f"fa3p_ab_{MODE}.json"), "w"), indent=1)
json.dump(res, open(os.path.join(OUT, f"fa3p_ab_{MODE}.json"), "w"), indent=1)
print("\nFA3 / time, best of two (series = min of old and new)")
for r in res:
    if "fa3" not in r:
        continue
    best = {k: min(r[k + "0"], r[k + "1"]) for k in KERNELS if k + "0" in r}
    series = min(best.pop("old"), best.pop("new"))
    cols = " ".join(f"{k} {v} ({r['fa3'] / v:.2f})" for k, v in best.items())
    print(f"b{r['batch']} {r['ctx'] // 1024}K q{r['qlen']} bs{r['block']}: fa3 {r['fa3']} series {series} "
          f"({r['fa3'] / series:.2f}) | {cols}")
