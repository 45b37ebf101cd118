# SPDX-License-Identifier: Apache-2.0
"""A/B of programmatic dependent launch for the verify call, and a timeline
of one call's fixed costs (see pdl_variant.py).  On the lent GPU, from the
repository root with the fork overlaid:

    python3 experiments/int8_verify_gluon/pdl_ab.py

Each case (block 16, Qwen3.5-27B attention) times FA3 and the series, then
the variants and the series again in turns (CUDA graphs, cycling caches, as
the kernel benchmark), after checking each variant's output against the
series'.  Writes $OUT/pdl_ab.json and prints a table last.
"""

import importlib.util
import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.dirname(__file__))
from benchmarks.kernels import benchmark_int8_kv_attention as bench  # noqa: E402
from breakdown import bench_args  # noqa: E402
from pdl_variant import generate  # noqa: E402

split_kv = bench.split_kv
SERIES = (split_kv.kernel_int8_split_kv_verify_wgmma, split_kv.kernel_int8_split_kv_reduce)


def _load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class Launch:
    """`kernel[grid](...)` with extra keyword arguments."""

    def __init__(self, kernel, **extra):
        self.kernel, self.extra = kernel, extra

    def __getitem__(self, grid):
        k = self.kernel[grid]
        return lambda *a, **kw: k(*a, **kw, **self.extra)


def use(verify, reduce):
    split_kv.kernel_int8_split_kv_verify_wgmma = verify
    split_kv.kernel_int8_split_kv_reduce = reduce


def variants(paths, stamp_bufs=None):
    out = {}
    for name, (wp, rp) in paths.items():
        w = _load(wp, f"w_{name}").kernel_int8_split_kv_verify_wgmma
        r = _load(rp, f"r_{name}").kernel_int8_split_kv_reduce
        if name == "stamps":
            out[name] = (
                Launch(w, stamp_ptr=stamp_bufs[0]),
                Launch(r, stamp_ptr=stamp_bufs[1]),
            )
        elif name == "pdl":
            out[name] = (SERIES[0], Launch(r, launch_pdl=True))
        elif name == "pdl_trig":
            out[name] = (w, Launch(r, launch_pdl=True))
        else:  # pdl_all
            out[name] = (Launch(w, launch_pdl=True), Launch(r, launch_pdl=True))
    return out


def timeline(case, fn, bufs, num_programs_hint):
    """One eager call's stamps: us relative to the first consumer entry."""
    bufs[0].zero_()
    bufs[1].zero_()
    fn(0)
    torch.cuda.synchronize()
    s = bufs[0].view(-1, 8)
    s = s[(s[:, 0] > 0)]
    r = bufs[1].view(-1, 2)
    r = r[r[:, 0] > 0]
    if s.numel() == 0:
        return None
    t0 = s[:, [0, 4]].min().item()

    def us(x):
        return (x.double() - t0) / 1000.0

    c = [s[:, 4 * k : 4 * k + 4] for k in (0, 1)]
    c = [x[x[:, 0] > 0] for x in c]
    res = dict(programs=int(s.shape[0]))
    for k, x in enumerate(c):
        if x.numel() == 0:
            continue
        e, q, lend, end = (us(x[:, i]) for i in range(4))
        res[f"c{k}"] = dict(
            entry_max=round(e.max().item(), 2),
            entry_med=round(e.median().item(), 2),
            query_us_med=round((q - e).median().item(), 2),
            loop_us_med=round((lend - q).median().item(), 2),
            loop_us_max=round((lend - q).max().item(), 2),
            store_us_med=round((end - lend).median().item(), 2),
            end_med=round(end.median().item(), 2),
            end_max=round(end.max().item(), 2),
        )
    if r.numel():
        res["reduce"] = dict(
            programs=int(r.shape[0]),
            start_min=round(us(r[:, 0]).min().item(), 2),
            start_med=round(us(r[:, 0]).median().item(), 2),
            end_max=round(us(r[:, 1]).max().item(), 2),
        )
    return res


CASES = os.environ.get(
    "CASES",
    "1,32768,6;1,32768,8;1,32768,4;1,32768,1;1,8192,6;1,131072,6;1,131072,16;"
    "8,32768,8;8,32768,16",
)


def main():
    args = bench_args()
    paths = generate("/tmp/pdl")
    bufs = (
        torch.zeros(1 << 16, dtype=torch.int64, device="cuda"),
        torch.zeros(1 << 20, dtype=torch.int64, device="cuda"),
    )
    vs = variants(paths, bufs)
    order = ["series", "pdl", "pdl_trig", "pdl_all", "series2", "pdl_trig2", "pdl_all2"]
    results = []
    for spec in CASES.split(";"):
        b, ctx, q = (int(x) for x in spec.split(","))
        case = bench.Case(args, b, ctx, q, 16)
        impls = bench.make_impls(case, args)
        fa_name = next(n for n in impls if n.startswith("fa"))
        row = dict(batch=b, ctx=ctx, q=q)
        row["fa_us"] = round(bench.time_graph(impls[fa_name][0], case.copies_bf16), 2)
        fn = impls["int8_split_kv"][0]
        use(*SERIES)
        case.out.fill_(float("nan"))
        fn(0)
        torch.cuda.synchronize()
        ref = case.out.float().clone()
        for name in order:
            base = name.rstrip("2")
            kern = SERIES if base == "series" else vs[base]
            try:
                use(*kern)
                if base != "series" and name == base:
                    case.out.fill_(float("nan"))
                    fn(0)
                    torch.cuda.synchronize()
                    d = (case.out.float() - ref).abs().max() / ref.abs().max()
                    row[name + "_diff"] = d.item()
                    if not torch.isfinite(case.out).all() or d.item() > 1e-3:
                        print(f"{spec} {name}: output differs ({d.item()})", flush=True)
                        continue
                row[name] = round(bench.time_graph(fn, case.copies), 2)
            except Exception as e:  # noqa: BLE001
                print(f"{spec} {name} failed: {e!r}", flush=True)
            finally:
                use(*SERIES)
        try:
            use(*vs["stamps"])
            timeline(case, fn, bufs, 0)
            row["timeline"] = timeline(case, fn, bufs, 0)
        except Exception as e:  # noqa: BLE001
            print(f"{spec} stamps failed: {e!r}", flush=True)
        finally:
            use(*SERIES)
        results.append(row)
        print(json.dumps(row), flush=True)
        del case, impls
        torch.cuda.empty_cache()
    out = os.environ.get("OUT", "/tmp")
    with open(os.path.join(out, "pdl_ab.json"), "w") as f:
        json.dump(results, f, indent=1)
    print("\nb ctx q | FA3 | series x2 | pdl | pdl_trig x2 | pdl_all x2 | best/FA3 series, pdl_*")
    for r in results:
        ser = [r.get("series"), r.get("series2")]
        tr = [r.get("pdl_trig"), r.get("pdl_trig2")]
        al = [r.get("pdl_all"), r.get("pdl_all2")]
        best = lambda xs: min([x for x in xs if x] or [float("nan")])  # noqa: E731
        print(
            f"{r['batch']} {r['ctx']} {r['q']} | {r['fa_us']} | {ser} | {r.get('pdl')} | {tr} | {al} | "
            f"{r['fa_us'] / best(ser):.3f}, {r['fa_us'] / best([r.get('pdl')] + tr + al):.3f}"
        )
    print("\ntimeline (us from the first consumer entry; c0/c1 consumers, medians unless max)")
    for r in results:
        t = r.get("timeline")
        if t:
            print(f"{r['batch']} {r['ctx']} {r['q']}: {json.dumps(t)}")


if __name__ == "__main__":
    main()
