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
    reduce in place of the series' (same process, alternating twice).
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
from reduce_variant import kernel_int8_split_kv_reduce_1pass  # noqa: E402

SERIES_REDUCE = split_kv.kernel_int8_split_kv_reduce


@contextlib.contextmanager
def reduce_kernel(kernel):
    """Launch `kernel` wherever the series' launcher launches its reduce."""
    split_kv.kernel_int8_split_kv_reduce = kernel
    try:
        yield
    finally:
        split_kv.kernel_int8_split_kv_reduce = SERIES_REDUCE


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


def main():
    args = types.SimpleNamespace(
        num_q_heads=24,
        num_kv_heads=4,
        head_size=256,
        copy_bytes=400 * 2**20,
        with_unified=False,
        no_errors=True,
        calls=24,
    )
    results = []
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
        for name, (g, reduce) in variants.items():
            fn = bench.make_impls(case, args, g)["int8_split_kv"][0]
            try:
                with reduce_kernel(reduce):
                    us = bench.time_graph(fn, case.copies)
                    if name in ("series", "reduce1p"):
                        row["kernels" + name[6:]] = profile_split(fn)
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
        "1-pass reduce (x2) vs series (x2) | kernels (eager us)"
    )
    for r in results:
        s = r.get("series", {})
        ks = "; ".join(f"{k[:28]} {v}" for k, v in r.get("kernels", {}).items())
        ks1 = "; ".join(f"{k[:28]} {v}" for k, v in r.get("kernels1p", {}).items())
        ab = [r.get(n, {}).get("us") for n in ("reduce1p", "reduce1p2", "series2")]
        print(
            f"{r['batch']} {r['ctx']} {r['q']} | {r['fa_us']} | "
            f"{s.get('us')} ({s.get('segments')}) | "
            f"{r.get('seg/2', {}).get('us')} | {r.get('seg*2', {}).get('us')} | "
            f"{ab[0]}, {ab[1]} vs {s.get('us')}, {ab[2]} | {ks} | 1p: {ks1}"
        )


if __name__ == "__main__":
    main()
