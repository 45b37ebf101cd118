"""What would the verify kernel take with more memory bandwidth than the H100 has? (issue 20, fourteenth session)

On the H100 every copy form and FA3 stream 2.5-3.1 TB/s (its HBM), so timings there cannot show whether a kernel
would go faster on the H200 (4.8 TB/s): the series' verify times are the same on both cards while FA3 is ~1.37x
faster on the H200.  This probe removes the HBM from the picture on any card: the block table of every request
points, at random, into a small pool of pages (about ``POOL_MB`` MB of INT8 cache, twice that of BF16 for FA3), so
the kernels do all their work (same sequence lengths, same number of tiles, same splits) but read from L2.  A
kernel whose ``l2`` time is well below its ``hbm`` time is memory-bound on this card; one whose two times match is
bound by something else (issue, latency, its own pipeline), and that bound is what it meets on the H200 too.
L2 also answers faster than HBM, so a kernel limited by its bytes in flight (latency) speeds up there as well.  The
``half`` rows tell those apart: the HBM-sized cache with half the programs (half the segments), each streaming twice
the tiles.  Then the HBM is about as loaded as the H200's under a full grid; a kernel capped per multiprocessor takes
twice its full-grid time, one capped by the HBM less.

Times (us per call, CUDA graphs, ``benchmark_int8_kv_attention.time_graph``) for FA3 (BF16), the series'
``int8_split_kv_attention`` at 1-16 query tokens, and the series' producer alone (``copy_probe.py``'s
``series_p1_s4a2_w4`` and ``ws_tma_p1_s4a2_w4``), each with the HBM-sized pool and the L2-sized one.
Needs an sm_90 GPU (Gluon, FA3).  Usage (repo root, fork installed):
    python experiments/int8_verify_gluon/l2_probe.py
Writes $OUT/l2_probe.json and prints a table.
"""
import dataclasses
import json
import os
import sys
import types

import torch

sys.path.insert(0, "benchmarks/kernels")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchmark_int8_kv_attention as B  # noqa: E402
import copy_probe as CP  # noqa: E402

from vllm.v1.attention.ops import triton_int8_split_kv_attention as SK  # noqa: E402

QLENS = [int(x) for x in os.environ.get("QLENS", "1 4 6 8 12 16").split()]
CELLS = [tuple(int(v) for v in c.split(",")) for c in
         os.environ.get("CELLS", "1,131072,16;1,131072,1600;8,32768,16").split(";")]
POOL_MB = float(os.environ.get("POOL_MB", "8"))
# Extra pipelines for 65-128-row launches, "name:TILE_SIZE=64,STAGES=2,VH_STAGES=2,AHEAD=1,OVERLAP=0;...": each is
# timed as int8_<name> (wgmma_pipeline() replaced for the call) and checked against the series' output.
# Two more keys (fifteenth session): SPLIT=1 gives the pipeline to launches of up to 64 rows (alternate tiles) instead,
# and KERNEL=<a KVARIANTS name> runs that kernel with it.
PIPES = {n: dict((k, v if k == "KERNEL" else int(v)) for k, v in (kv.split("=") for kv in spec.split(",")))
         for n, spec in (p.split(":") for p in os.environ.get("PIPES", "").split(";") if p)}


def alias_block_table(case, pool_mb):
    """Points every block-table entry at one of a few pages (about pool_mb MB of INT8 cache)."""
    page_bytes = case.bs * case.nkv * 2 * (case.hs + 4)
    pool = max(2, round(pool_mb * 2**20 / page_bytes))
    pool = min(pool, case.block_table.numel())
    g = torch.Generator(device=case.block_table.device).manual_seed(1)
    case.block_table.copy_(torch.randint(0, pool, case.block_table.shape, device=case.block_table.device,
                                         generator=g, dtype=torch.int32))
    return pool, pool * page_bytes


def producer_fns(case, kernel, ws_mod, sms, load=1.0):
    """copy_probe.py's series producer and ws_verify.py's TMA producer (1 program per SM at load 1; at load 0.5
    half as many programs, each with twice the tiles)."""
    segments = max(1, int(sms * load) // (case.batch * 4))
    descs = [ws_mod._tma_descriptors(kc, vc, 256, True) for kc, vc, _, _ in case.int8]
    return {"producer_cp": CP.series_launch(kernel, case, segments, 4, 2, 2, 4, 96),
            "producer_tma": CP.ws_launch(ws_mod, case, segments, descs, 4, 2, 2, 4, True)}


# Other kernels in place of the series' wgmma kernel, "name=path,...": timed as int8_<name>; diffs against the series'
# output are recorded (meaningless for ablate_variant.py's kernels, which drop work on purpose).
KVARIANTS = dict(kv.split("=") for kv in os.environ.get("KVARIANTS", "").split(",") if kv)


def load_kernel(name, path):
    return CP.load(path, "kvar_" + name).kernel_int8_split_kv_verify_wgmma


def with_attr(fn, name, value):
    """fn with the split-KV module's ``name`` replaced by ``value`` for the call (the launcher looks both the wgmma
    kernel and wgmma_pipeline() up there at each call)."""

    def run(i):
        orig = getattr(SK, name)
        setattr(SK, name, value)
        try:
            fn(i)
        finally:
            setattr(SK, name, orig)

    return run


def pipeline(pipe):
    """wgmma_pipeline() answering ``pipe`` for 65-128-row launches (with SPLIT=1: for alternate-tile launches)."""
    orig = SK.wgmma_pipeline
    pipe = dict(pipe)
    split = bool(pipe.pop("SPLIT", 0))
    pipe.pop("KERNEL", None)

    def patched(geometry, tile_split, sliding_window, block_size):
        base = dict(orig(geometry, tile_split, sliding_window, block_size))
        if tile_split == split:
            base.update(pipe)
            base["OVERLAP"] = bool(base["OVERLAP"])
        return types.MappingProxyType(base)

    return patched


def timed(fn, copies):
    try:
        return round(B.time_graph(fn, copies), 1)
    except Exception as e:  # a form that does not launch here says so
        return f"{type(e).__name__}: {str(e)[:120]}"


def main():
    out_dir = os.environ.get("OUT", "/tmp")
    gpu = torch.cuda.get_device_name(0)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print(gpu, "L2", torch.cuda.get_device_properties(0).L2_cache_size // 2**20, "MB", flush=True)
    kernel = CP.make_kernel(CP.SERIES, "series")
    ws_mod = CP.make_ws_kernel()
    kvariants = {n: load_kernel(n, p) for n, p in KVARIANTS.items()}
    res = []
    for batch, ctx, bs in CELLS:
        for mode in ("hbm", "l2"):
            args = types.SimpleNamespace(num_q_heads=24, num_kv_heads=4, head_size=256,
                                         copy_bytes=400 * 2**20 if mode == "hbm" else 0,
                                         with_unified=False, no_errors=True)
            for qlen in QLENS:
                case = B.Case(args, batch, ctx, qlen, bs)
                row = dict(gpu=gpu, batch=batch, ctx=ctx, block=bs, qlen=qlen, mode=mode,
                           int8_bytes=case.int8_bytes, bf16_bytes=case.bf16_bytes,
                           copies=case.copies, copies_bf16=case.copies_bf16)
                if mode == "l2":
                    row["pool_pages"], row["pool_int8_bytes"] = alias_block_table(case, POOL_MB)
                impls = B.make_impls(case, args)
                fa = [k for k in impls if k.startswith("fa")]
                if fa:
                    row["fa3_us"] = timed(impls[fa[0]][0], case.copies_bf16)
                row["int8_us"] = timed(impls["int8_split_kv"][0], case.copies)
                series = impls["int8_split_kv"][0]
                variants = {n: with_attr(series, "kernel_int8_split_kv_verify_wgmma", k) for n, k in kvariants.items()}
                for n, p in PIPES.items():
                    # (up to 32 rows run the Triton kernel, which no pipeline changes)
                    if qlen * 6 > 32 and (qlen * 6 > 64) != bool(p.get("SPLIT", 0)):
                        fn = with_attr(series, "wgmma_pipeline", pipeline(p))
                        if "KERNEL" in p:
                            fn = with_attr(fn, "kernel_int8_split_kv_verify_wgmma", kvariants[p["KERNEL"]])
                        variants[n] = fn
                if variants and qlen > 1:
                    impls["int8_split_kv"][0](0)
                    ref = case.out.clone()
                    for name, fn in variants.items():
                        try:
                            case.out.zero_()
                            fn(0)
                            row[f"int8_{name}_diff"] = float((case.out.float() - ref.float()).abs().max()
                                                             / ref.float().abs().max())
                        except Exception as e:
                            row[f"int8_{name}_diff"] = f"{type(e).__name__}: {str(e)[:200]}"
                        row[f"int8_{name}_us"] = timed(fn, case.copies)
                geo = SK.select_int8_split_kv_geometry(
                    qlen, ctx, batch, batch * qlen, SK.MAX_PARTIALS, num_queries_per_kv=6, num_kv_heads=4)
                row["num_segments"] = geo.num_segments
                if mode == "hbm" and geo.num_segments > 1:
                    half = dataclasses.replace(geo, num_segments=geo.num_segments // 2)
                    row["int8_half_us"] = timed(B.make_impls(case, args, geometry=half)["int8_split_kv"][0],
                                                case.copies)
                if qlen == QLENS[0]:
                    for name, fn in producer_fns(case, kernel, ws_mod, sms).items():
                        row[name + "_us"] = timed(fn, case.copies)
                    if mode == "hbm":
                        for name, fn in producer_fns(case, kernel, ws_mod, sms, load=0.5).items():
                            row[name + "_half_us"] = timed(fn, case.copies)
                for k in [k for k in row if k.endswith("_us") and not isinstance(row[k], str)]:
                    nbytes = case.bf16_bytes if k.startswith("fa3") else case.int8_bytes
                    row[k[:-3] + "_tbps"] = round(nbytes / row[k] / 1e6, 3)
                print(json.dumps(row), flush=True)
                res.append(row)
                json.dump(res, open(os.path.join(out_dir, "l2_probe.json"), "w"), indent=1)
                del case, impls
                torch.cuda.empty_cache()
    print(f"\n{gpu}: us per call, hbm [half: half the programs] / l2 (logical TB/s of each kernel's cache at l2), FA3 / INT8 ratio")
    by = {(r["batch"], r["ctx"], r["block"], r["qlen"], r["mode"]): r for r in res}
    for batch, ctx, bs in CELLS:
        for qlen in QLENS:
            h, l2 = by.get((batch, ctx, bs, qlen, "hbm")), by.get((batch, ctx, bs, qlen, "l2"))
            if not h or not l2:
                continue
            cols = []
            for k in ("fa3", "int8", "producer_cp", "producer_tma"):
                if k + "_us" in h:
                    half = f" half {h[k + '_half_us']}" if k + "_half_us" in h else ""
                    cols.append(f"{k} {h[k + '_us']}{half} / {l2[k + '_us']} ({l2.get(k + '_tbps', '-')})")
            for k in [k for k in h if k.startswith("int8_") and k.endswith("_us") and k not in ("int8_us", "int8_half_us")]:
                cols.append(f"{k[:-3]} {h[k]} / {l2.get(k, '-')} (diff {h.get(k[:-3] + '_diff')})")
            ratio = [round(r["fa3_us"] / r["int8_us"], 2) if all(isinstance(r.get(x), float)
                     for x in ("fa3_us", "int8_us")) else "-" for r in (h, l2)]
            print(f"b{batch} {ctx // 1024}K bs{bs} q{qlen}: " + "; ".join(cols) + f"; FA3/INT8 {ratio[0]} / {ratio[1]}")


if __name__ == "__main__":
    main()
