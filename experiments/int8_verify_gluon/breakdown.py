# SPDX-License-Identifier: Apache-2.0
"""Where a verify call's time goes, and how it moves with the segment count.

For each case (batch, context, query tokens, block 16, Qwen3.5-27B attention
geometry), on the lent GPU:
  * the series' call as the benchmark times it (CUDA graph, cycling caches),
    and FA3 beside it;
  * the same call with the segment count halved and doubled (where the
    scratch allows), to see whether the short-context cells are bound by the
    one-wave segment rule;
  * a torch-profiler split of one eager call into the split-KV kernel and its
    reduce (device time of each kernel).
  * with REDUCE_AB=1, the same call with `reduce_variant.py`'s one-pass
    reduce in place of the series' (same process, alternating twice);
  * with MERGE=path (a file `merge_variant.py` wrote), the call with that
    verify kernel, whose consumers merge their partials in the program
    (checked first against the series' output on ragged batches).
Writes $OUT/breakdown.json and prints a short table last.

    python3 experiments/int8_verify_gluon/breakdown.py
    REDUCE_AB=1 SEGMENTS=0 python3 experiments/int8_verify_gluon/breakdown.py
"""

import contextlib
import dataclasses
import json
import os
import sys
import types

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
from benchmarks.kernels import benchmark_int8_kv_attention as bench  # noqa: E402

split_kv = bench.split_kv
sys.path.insert(0, os.path.dirname(__file__))
from reduce_variant import (  # noqa: E402
    WideReduce,
    kernel_int8_split_kv_reduce_1pass,
)

SERIES_REDUCE = split_kv.kernel_int8_split_kv_reduce
SERIES_VERIFY = split_kv.kernel_int8_split_kv_verify_wgmma


def load_merge_variant(path, base_reduce=None):
    """(verify, reduce) stand-ins for the merge variant in `path`, with the
    series' reduce or `base_reduce`."""
    import importlib.util

    from merge_variant import MergedReduce, MergedVerify

    spec = importlib.util.spec_from_file_location("merge_variant_kernel", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    reduce = MergedReduce(base_reduce or SERIES_REDUCE)
    return MergedVerify(mod.kernel_int8_split_kv_verify_wgmma, reduce), reduce


@contextlib.contextmanager
def kernels(verify, reduce):
    """Launch these wherever the series' launcher launches its verify
    kernel and its reduce."""
    split_kv.kernel_int8_split_kv_verify_wgmma = verify
    split_kv.kernel_int8_split_kv_reduce = reduce
    try:
        yield
    finally:
        split_kv.kernel_int8_split_kv_verify_wgmma = SERIES_VERIFY
        split_kv.kernel_int8_split_kv_reduce = SERIES_REDUCE


def check_merge(args, merge) -> list[dict]:
    """The merge variant's output against the series' on ragged cases."""
    rows = []
    for b, ctx, q, bs in [
        (1, 1000, 6, 16),
        (1, 1001, 6, 1600),
        (2, 70, 8, 16),
        (3, 4099, 8, 1600),
        (1, 33, 6, 16),
        (1, 997, 16, 16),
        (4, 40000, 4, 16),
    ]:
        case = bench.Case(args, b, ctx, q, bs)
        fn = bench.make_impls(case, args)["int8_split_kv"][0]
        case.out.fill_(float("nan"))
        fn(0)
        ref = case.out.clone()
        case.out.fill_(float("nan"))
        with kernels(*merge):
            fn(0)
        torch.cuda.synchronize()
        diff = (case.out.float() - ref.float()).abs().max() / ref.float().abs().max()
        rows.append(
            dict(
                batch=b,
                ctx=ctx,
                q=q,
                block=bs,
                rel_max_diff=diff.item(),
                finite=bool(torch.isfinite(case.out).all()),
            )
        )
        print(json.dumps(rows[-1]), flush=True)
    return rows


def reduce_kernel(kernel):
    """Launch `kernel` wherever the series' launcher launches its reduce."""
    return kernels(SERIES_VERIFY, kernel)


CASES = os.environ.get(
    "CASES",
    "1,32768,6;1,32768,8;1,32768,4;1,32768,16;8,32768,6;8,32768,8;8,32768,16;"
    "1,131072,6;1,131072,16;1,32768,1",
)


def profile_split(fn, reps=5):
    """Device us per call of each kernel launched by fn (eager)."""
    fn(0)
    torch.cuda.synchronize()
    acts = [torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as prof:
        for _ in range(reps):
            fn(0)
        torch.cuda.synchronize()
    out = {}
    for e in prof.key_averages():
        t = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0)
        if t and e.count:
            out[e.key[:60]] = round(t / reps, 2)
    return out


def bench_args() -> types.SimpleNamespace:
    """The kernel benchmark's arguments for Qwen3.5-27B attention (24 / 4
    heads, head 256), caches cycled over 400 MiB, errors not checked."""
    return types.SimpleNamespace(
        num_q_heads=24,
        num_kv_heads=4,
        head_size=256,
        copy_bytes=400 * 2**20,
        with_unified=False,
        no_errors=True,
        calls=24,
    )


def main():
    args = bench_args()
    results = []
    merge = None
    if os.environ.get("MERGE"):
        merge = load_merge_variant(os.environ["MERGE"])
        checks = check_merge(args, merge)
        results.append({"merge_check": checks})
        if not all(r["finite"] and r["rel_max_diff"] < 0.02 for r in checks):
            print("MERGE CHECK FAILED: not timed", flush=True)
            merge = None
    for spec in CASES.split(";"):
        b, ctx, q = (int(x) for x in spec.split(","))
        case = bench.Case(args, b, ctx, q, 16)
        geo = split_kv.select_int8_split_kv_geometry(
            q,
            ctx,
            b,
            b * q,
            split_kv.MAX_PARTIALS,
            num_queries_per_kv=6,
            num_kv_heads=4,
        )
        row = dict(batch=b, ctx=ctx, q=q, geometry=dataclasses.asdict(geo))
        impls = bench.make_impls(case, args)
        fa_name = next(n for n in impls if n.startswith("fa"))
        row["fa_us"] = round(bench.time_graph(impls[fa_name][0], case.copies_bf16), 2)
        variants = {"series": (geo, SERIES_REDUCE)}
        if os.environ.get("SEGMENTS", "1") == "1":
            for name, f in (("seg/2", 0.5), ("seg*2", 2)):
                n = int(geo.num_segments * f)
                if n >= 1 and b * q * n * 2 <= split_kv.MAX_PARTIALS:
                    g = dataclasses.replace(geo, num_segments=n)
                    variants[name] = (g, SERIES_REDUCE)
        if os.environ.get("REDUCE_AB") == "1":
            variants["reduce1p"] = (geo, kernel_int8_split_kv_reduce_1pass)
            variants["series2"] = (geo, SERIES_REDUCE)
            variants["reduce1p2"] = (geo, kernel_int8_split_kv_reduce_1pass)
            variants["wide"] = (geo, WideReduce())
        if merge is not None:
            variants["merge"] = (geo, merge)
            variants["series3"] = (geo, (SERIES_VERIFY, SERIES_REDUCE))
            variants["merge2"] = (geo, merge)
            variants["merge1p"] = (
                geo,
                load_merge_variant(
                    os.environ["MERGE"], kernel_int8_split_kv_reduce_1pass
                ),
            )
        for name, (g, reduce) in variants.items():
            fn = bench.make_impls(case, args, g)["int8_split_kv"][0]
            swap = kernels(*reduce) if isinstance(reduce, tuple) else None
            try:
                with swap or reduce_kernel(reduce):
                    us = bench.time_graph(fn, case.copies)
                    if name in ("series", "reduce1p", "merge"):
                        row["kernels_" + name] = profile_split(fn)
                    if name == "reduce1p":
                        # Same output as the series' reduce on this case.
                        fn(0)
                        new = case.out.clone()
                        with reduce_kernel(SERIES_REDUCE):
                            fn(0)
                        row["reduce1p_max_diff"] = (new - case.out).abs().max().item()
            except Exception as e:  # noqa: BLE001
                print(f"{spec} {name} failed: {e!r}", flush=True)
                continue
            row[name] = dict(segments=g.num_segments, us=round(us, 2))
        results.append(row)
        print(json.dumps(row), flush=True)
        del case
        torch.cuda.empty_cache()
    out = os.environ.get("OUT", "/tmp")
    with open(os.path.join(out, "breakdown.json"), "w") as f:
        json.dump(results, f, indent=1)
    print(
        "\nb ctx q | FA3 us | series us (seg) | seg/2 | seg*2 | "
        "1-pass reduce (x2) vs series (x2) (wide) | kernels (eager us)"
    )
    for r in results:
        s = r.get("series", {})
        if "merge_check" in r:
            continue
        ks = "; ".join(f"{k[:28]} {v}" for k, v in r.get("kernels_series", {}).items())
        ks1 = "; ".join(
            f"{k[:28]} {v}" for k, v in r.get("kernels_reduce1p", {}).items()
        )
        ab = [
            r.get(n, {}).get("us") for n in ("reduce1p", "reduce1p2", "series2", "wide")
        ]
        print(
            f"{r['batch']} {r['ctx']} {r['q']} | {r['fa_us']} | "
            f"{s.get('us')} ({s.get('segments')}) | "
            f"{r.get('seg/2', {}).get('us')} | {r.get('seg*2', {}).get('us')} | "
            f"{ab[0]}, {ab[1]} vs {s.get('us')}, {ab[2]} (wide {ab[3]}) | {ks} | "
            f"1p: {ks1}"
        )
        if "merge" in r:
            us = {n: r.get(n, {}).get("us") for n in ("merge", "merge2", "series3")}
            print(
                f"   merge: {us['merge']}, {us['merge2']} vs series "
                f"{s.get('us')}, {us['series3']} (with the 1-pass reduce: "
                f"{r.get('merge1p', {}).get('us')}) | {r.get('kernels_merge')}"
            )


if __name__ == "__main__":
    main()
