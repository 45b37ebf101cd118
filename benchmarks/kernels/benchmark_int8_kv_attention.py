# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Decode / speculative-verify attention over the INT8 per-token-head cache.

Times, side by side on the same data, the split-KV INT8 kernel and BF16
FlashAttention (FA3 on Hopper, FA2 elsewhere), optionally upstream's unified
Triton kernel on the INT8 cache.  Caches are laid out exactly as the Triton
backend lays them out (``int8_per_token_head_planar_views``).  Each number
is the median time of one layer call, taken from CUDA-graph replays that
cycle through more cache copies than fit in L2; TB/s counts the INT8 cache
bytes a call must read.  Errors are measured on the first request against
attention on the dequantised cache and against exact attention on the BF16
K/V the cache was quantised from.

Examples:
    python benchmarks/kernels/benchmark_int8_kv_attention.py --quick
    python benchmarks/kernels/benchmark_int8_kv_attention.py \\
        --block-sizes 16 208 1600 --query-lens 1 2 6 12 16
    python benchmarks/kernels/benchmark_int8_kv_attention.py --select
"""

import argparse
import dataclasses
import json
import math
import os
import time

import torch

from vllm.platforms import current_platform
from vllm.triton_utils import triton
from vllm.v1.attention.backends.triton_attn import (
    TritonAttentionBackend,
    int8_per_token_head_planar_views,
)
from vllm.v1.attention.ops import triton_int8_split_kv_attention as split_kv
from vllm.v1.attention.ops.triton_unified_attention import unified_attention
from vllm.v1.kv_cache_interface import KVQuantMode

try:
    from vllm.vllm_flash_attn import flash_attn_varlen_func
    from vllm.vllm_flash_attn.flash_attn_interface import (
        FA2_AVAILABLE,
        FA3_AVAILABLE,
    )
except ImportError:
    flash_attn_varlen_func = None
    FA2_AVAILABLE = FA3_AVAILABLE = False

DEVICE = "cuda"
G = split_kv.Int8SplitKVGeometry
# Geometries tried by --select, by the tables' row classes (rows = query
# heads per KV head x query tokens); each class holds its sm_90 table entry
# (the warpgroup-MMA one runs the swapped kernel on other GPUs).
SELECT_CANDIDATES = {
    16: [G(32, 128, 2, 2, 16), G(64, 128, 2, 2, 16), G(32, 64, 4, 2, 16)],
    32: [
        G(32, 128, 2, 2, 32, pv_chunk=32),
        G(16, 128, 2, 3, 32, pv_chunk=32),
        G(16, 128, 2, 2, 32, pv_chunk=32),
        G(16, 256, 2, 3, 32, pv_chunk=32),
        G(16, 64, 2, 3, 32, pv_chunk=32),
        G(32, 64, 4, 2, 32),
    ],
    256: [
        G(32, 32, 4, 4, 64, wgmma=True),
        G(16, 64, 4, 3, 64, swap_ab=True),
        G(32, 64, 4, 2, 64, swap_ab=True),
        G(32, 64, 4, 3, 64, swap_ab=True),
        G(16, 64, 4, 2, 64, swap_ab=True),
        G(32, 64, 4, 2, 32, swap_ab=True),
        G(32, 32, 4, 2, 32),
    ],
}
SELECT_QUERY_LENS = {16: 1, 32: 4, 256: 6}


class Case:
    """One batch of requests: BF16 and INT8 caches built from the same data."""

    def __init__(self, args, batch, ctx, qlen, block_size):
        self.batch, self.ctx, self.qlen, self.bs = batch, ctx, qlen, block_size
        nq, nkv, hs = args.num_q_heads, args.num_kv_heads, args.head_size
        self.nq, self.nkv, self.hs = nq, nkv, hs
        blocks_per_seq = triton.cdiv(ctx, block_size)
        num_blocks = batch * blocks_per_seq
        self.int8_bytes = batch * ctx * nkv * 2 * (hs + 4)
        self.bf16_bytes = batch * ctx * nkv * 2 * hs * 2
        copies_bytes = args.copy_bytes
        self.copies = max(1, min(16, math.ceil(copies_bytes / self.int8_bytes)))
        self.copies_bf16 = max(1, min(8, math.ceil(copies_bytes / self.bf16_bytes)))
        g = torch.Generator(device=DEVICE).manual_seed(0)
        self.q = torch.randn(
            batch * qlen, nq, hs, dtype=torch.bfloat16, device=DEVICE, generator=g
        )
        self.cu_q = torch.arange(
            0, (batch + 1) * qlen, qlen, dtype=torch.int32, device=DEVICE
        )
        self.seq_lens = torch.full((batch,), ctx, dtype=torch.int32, device=DEVICE)
        self.block_table = (
            torch.randperm(num_blocks, device=DEVICE, generator=g)
            .view(batch, blocks_per_seq)
            .to(torch.int32)
        )
        self.bf16, self.int8 = [], []
        for c in range(max(self.copies, self.copies_bf16)):
            k = torch.randn(
                num_blocks, block_size, nkv, hs, dtype=torch.bfloat16, device=DEVICE
            )
            v = torch.randn_like(k)
            if c < self.copies_bf16:
                self.bf16.append((k, v))
            if c < self.copies:
                self.int8.append(self._quantize(k, v))
            if c == 0:
                self.ref_kv = (k, v)
            del k, v
        self.out = torch.empty_like(self.q)
        self.scale = hs**-0.5

    def _quantize(self, k, v):
        """The backend's planar cache holding k and v."""
        num_blocks, bs, nkv, hs = k.shape
        shape = TritonAttentionBackend.get_kv_cache_shape(
            num_blocks, bs, nkv, hs, "int8_per_token_head"
        )
        kv_cache = torch.empty(shape, dtype=torch.int8, device=DEVICE)
        views = int8_per_token_head_planar_views(kv_cache, hs)
        for x, data, scale in ((k, views[0], views[2]), (v, views[1], views[3])):
            s = x.float().abs().amax(-1).clamp(min=1e-6) / 127.0
            data.copy_(torch.round(x.float() / s[..., None]).clamp(-127, 127))
            scale.copy_(s)
        return views

    def first_request(self, kv):
        blocks = self.block_table[0, : triton.cdiv(self.ctx, self.bs)].long()
        return [x[blocks].reshape(-1, self.nkv, self.hs)[: self.ctx] for x in kv]

    def dequant_first_request(self):
        kc, vc, ks, vs = self.int8[0]
        return self.first_request(
            (kc.float() * ks[..., None], vc.float() * vs[..., None])
        )

    def ref_first_request(self, k, v):
        q = self.q[: self.qlen].float()
        g = self.nq // self.nkv
        k = k.float().repeat_interleave(g, dim=1)
        v = v.float().repeat_interleave(g, dim=1)
        s = torch.einsum("qhd,khd->hqk", q, k) * self.scale
        mask = torch.triu(
            torch.ones(self.qlen, self.ctx, device=DEVICE, dtype=torch.bool),
            diagonal=self.ctx - self.qlen + 1,
        )
        s.masked_fill_(mask, float("-inf"))
        return torch.einsum("hqk,khd->qhd", s.softmax(-1), v)


def make_impls(case, args, geometry=None):
    """name -> (fn(copy_idx), uses_int8_cache)."""
    scratch = (
        torch.empty(split_kv.MAX_PARTIALS, case.nq, case.hs, device=DEVICE),
        torch.empty(split_kv.MAX_PARTIALS, case.nq, device=DEVICE),
        torch.empty(split_kv.MAX_PARTIALS, case.nq, device=DEVICE),
    )

    def int8_split_kv(i):
        kc, vc, ks, vs = case.int8[i]
        split_kv.int8_split_kv_attention(
            case.q,
            kc,
            vc,
            ks,
            vs,
            case.out,
            case.cu_q,
            case.seq_lens,
            case.block_table,
            case.qlen,
            case.ctx,
            case.scale,
            *scratch,
            geometry=geometry,
        )

    impls = {"int8_split_kv": (int8_split_kv, True)}
    if args.with_unified:
        segments, thr = 16, 128 // case.nkv
        segm = (
            torch.empty(thr, case.nq, segments, case.hs, device=DEVICE),
            torch.empty(thr, case.nq, segments, device=DEVICE),
            torch.empty(thr, case.nq, segments, device=DEVICE),
        )

        def triton_int8_unified(i):
            kc, vc, ks, vs = case.int8[i]
            unified_attention(
                q=case.q,
                k=kc,
                v=vc,
                out=case.out,
                cu_seqlens_q=case.cu_q,
                max_seqlen_q=case.qlen,
                seqused_k=case.seq_lens,
                max_seqlen_k=case.ctx,
                softmax_scale=case.scale,
                causal=True,
                window_size=(-1, -1),
                block_table=case.block_table,
                softcap=0,
                q_descale=None,
                k_descale=None,
                v_descale=None,
                seq_threshold_3D=thr,
                num_par_softmax_segments=segments,
                softmax_segm_output=segm[0],
                softmax_segm_max=segm[1],
                softmax_segm_expsum=segm[2],
                kv_quant_mode=KVQuantMode.INT8_PER_TOKEN_HEAD,
                k_scale_cache=ks,
                v_scale_cache=vs,
            )

        impls["triton_int8_unified"] = (triton_int8_unified, True)

    fa_version = 3 if current_platform.is_device_capability_family(90) else 2
    if flash_attn_varlen_func is not None and (
        FA3_AVAILABLE if fa_version == 3 else FA2_AVAILABLE
    ):

        def fa(i):
            k, v = case.bf16[i]
            flash_attn_varlen_func(
                q=case.q,
                k=k,
                v=v,
                max_seqlen_q=case.qlen,
                cu_seqlens_q=case.cu_q,
                max_seqlen_k=case.ctx,
                seqused_k=case.seq_lens,
                softmax_scale=case.scale,
                causal=True,
                block_table=case.block_table,
                out=case.out,
                fa_version=fa_version,
            )

        impls[f"fa{fa_version}_bf16"] = (fa, False)
    return impls


def time_graph(fn, copies: int, calls: int = 24, reps: int = 15) -> float:
    """Median us per call over CUDA-graph replays cycling through copies."""
    fn(0)
    torch.accelerator.synchronize()
    t0 = time.perf_counter()
    fn(0)
    torch.accelerator.synchronize()
    est_us = (time.perf_counter() - t0) * 1e6
    # Slow kernels (the unified kernel's verify: many ms) get fewer calls.
    calls = max(1, min(calls, round(20000 / max(est_us, 1.0))))
    reps = reps if est_us < 2000 else 5
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for i in range(min(copies, 2)):
            fn(i)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(calls):
            fn(i % copies)
    graph.replay()
    torch.accelerator.synchronize()
    times = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000 / calls)
    del graph
    return sorted(times)[len(times) // 2]


def copy_bandwidth() -> float:
    """Device copy bandwidth in TB/s (bytes read + written)."""
    src = torch.empty(2**30, dtype=torch.uint8, device=DEVICE)
    dst = torch.empty_like(src)
    ms = triton.testing.do_bench(lambda: dst.copy_(src), warmup=50, rep=200)
    return 2 * src.numel() / (ms * 1e-3) / 1e12


def rel_err(out, ref) -> float:
    return ((out.float() - ref.float()).norm() / ref.float().norm()).item()


def run_case(args, case, rows, geometry=None, only=None, errors=True):
    """Times every implementation on one case; returns its rows."""
    impls = make_impls(case, args, geometry)
    exact = deq_ref = None
    if errors and not args.no_errors and case.batch == 1:
        exact = case.ref_first_request(*case.first_request(case.ref_kv))
        deq_ref = case.ref_first_request(*case.dequant_first_request())
    new = []
    for name, (fn, is_int8) in impls.items():
        if only and name not in only:
            continue
        copies = case.copies if is_int8 else case.copies_bf16
        try:
            us = time_graph(fn, copies, calls=args.calls)
        except Exception as e:  # noqa: BLE001
            print(f"{name} failed: {e!r}", flush=True)
            continue
        row = dict(
            batch=case.batch,
            ctx=case.ctx,
            qlen=case.qlen,
            block=case.bs,
            impl=name,
            us=round(us, 2),
            int8_tbps=round(case.int8_bytes / (us * 1e-6) / 1e12, 3),
        )
        if name == "int8_split_kv":
            geo = geometry or split_kv.select_int8_split_kv_geometry(
                case.qlen,
                case.ctx,
                case.batch,
                case.batch * case.qlen,
                split_kv.MAX_PARTIALS,
                num_queries_per_kv=case.nq // case.nkv,
                num_kv_heads=case.nkv,
            )
            row["geometry"] = dataclasses.asdict(geo)
        if exact is not None:
            fn(0)
            out = case.out[: case.qlen]
            row["rel_err_vs_exact"] = round(rel_err(out, exact), 5)
            if is_int8:
                row["rel_err_vs_dequant"] = round(rel_err(out, deq_ref), 5)
        new.append(row)
        print(json.dumps(row), flush=True)
    fa = next((r for r in new if r["impl"].startswith("fa")), None)
    for r in new:
        if fa is not None and r is not fa:
            r["speedup_vs_fa"] = round(fa["us"] / r["us"], 3)
    rows.extend(new)
    return new


def compiled_spills() -> dict[tuple[str, object], int]:
    """Register spills of every split-KV kernel variant the JIT compiled so
    far, keyed by (kernel, variant)."""
    spills = {}
    for name in (
        "kernel_int8_split_kv_attention",
        "kernel_int8_split_kv_verify",
        "kernel_int8_split_kv_verify_wgmma",
    ):
        fn = getattr(split_kv, name, None)
        for caches in getattr(fn, "device_caches", {}).values():
            for key, compiled in caches[0].items():
                compiled._init_handles()
                spills[name, key] = compiled.n_spills
    return spills


def select(args, rows):
    """Time SELECT_CANDIDATES on 128K contexts; returns the best per class.

    A candidate whose kernel spills registers on this GPU (any of the
    variants its runs compiled) is left out, as the tables' offline spill
    test would reject it."""
    best = {}
    for max_rows, candidates in SELECT_CANDIDATES.items():
        qlen = SELECT_QUERY_LENS[max_rows]
        totals = {}
        spilling = set()
        for block_size in args.select_block_sizes:
            case = Case(args, 1, 131072, qlen, block_size)
            for geo in candidates:
                before = compiled_spills()
                new = run_case(
                    args, case, rows, geo, only={"int8_split_kv"}, errors=False
                )
                after = compiled_spills()
                if any(after[k] for k in after.keys() - before.keys()):
                    spilling.add(geo)
                    print("SELECT spills, left out:", geo, flush=True)
                if new:
                    new[0]["impl"] = "select"
                    totals.setdefault(geo, []).append(new[0]["us"])
            del case
            torch.accelerator.empty_cache()
        for geo in spilling:
            totals.pop(geo, None)
        if not totals:
            raise SystemExit(f"--select: every candidate for {max_rows} rows spills")
        runs = max(len(v) for v in totals.values())
        ranked = sorted(
            ((sum(v) / len(v), g) for g, v in totals.items() if len(v) == runs),
            key=lambda t: t[0],
        )
        best[max_rows] = ranked[0][1]
        print("SELECT", max_rows, ranked[:3], flush=True)
    return best


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8])
    parser.add_argument(
        "--contexts", type=int, nargs="+", default=[8192, 32768, 65536, 131072]
    )
    parser.add_argument(
        "--query-lens", type=int, nargs="+", default=[1, 2, 4, 6, 8, 12, 16]
    )
    parser.add_argument(
        "--block-sizes",
        type=int,
        nargs="+",
        default=[16, 64, 1600],
        help="tokens per kernel block: the backend's block, or the cache block "
        "when it is not split (Qwen3.5-27B with an INT8 cache: 1600)",
    )
    parser.add_argument("--num-q-heads", type=int, default=24)
    parser.add_argument("--num-kv-heads", type=int, default=4)
    parser.add_argument("--head-size", type=int, default=256)
    parser.add_argument("--calls", type=int, default=24, help="calls per graph")
    parser.add_argument(
        "--copy-bytes", type=int, default=400 * 2**20, help="bytes of caches to cycle"
    )
    parser.add_argument(
        "--max-batch-tokens",
        type=int,
        default=8 * 131072,
        help="skip batch x context above this (memory)",
    )
    parser.add_argument("--with-unified", action="store_true")
    parser.add_argument("--no-errors", action="store_true")
    parser.add_argument(
        "--quick", action="store_true", help="32K and 128K contexts only"
    )
    parser.add_argument(
        "--select",
        action="store_true",
        help="time candidate geometries at 128K first and use the best",
    )
    parser.add_argument("--select-block-sizes", type=int, nargs="+", default=[16, 1600])
    parser.add_argument(
        "--plan",
        choices=["grid", "targets"],
        default="grid",
        help="grid: every combination of the lists above; targets: decode and "
        "verify at 8K-128K (block 16, batch 1), batch 8 at 32K-128K, and "
        "blocks 208/1600 at 64K/128K",
    )
    parser.add_argument("--output-dir", default="benchmarks/results")
    parser.add_argument("--tag", default="", help="suffix of the output files")
    parser.add_argument(
        "--replot", metavar="JSON", help="redraw the plot of a results file (no GPU)"
    )
    args = parser.parse_args()
    if args.replot:
        with open(args.replot) as f:
            result = json.load(f)
        plot(result["rows"], args.replot.removesuffix(".json") + ".png", result["gpu"])
        return
    if args.quick:
        args.contexts = [32768, 131072]

    gpu = current_platform.get_device_name()
    rows: list[dict] = []
    result = {
        "gpu": gpu,
        "shape": {
            "nq": args.num_q_heads,
            "nkv": args.num_kv_heads,
            "hs": args.head_size,
        },
        "copy_tbps": round(copy_bandwidth(), 3),
        "rows": rows,
    }
    print(f"{gpu}: copy bandwidth {result['copy_tbps']} TB/s", flush=True)
    if args.select:
        best = select(args, rows)
        major = current_platform.get_device_capability().major
        # Rows only: --select times one request, so the table it writes has
        # no rows for batches of few keys.
        table = tuple(
            split_kv.GeometryEntry(16 * split_kv.MAX_QUERY_LEN if r == 256 else r, g)
            for r, g in sorted(best.items())
        )
        split_kv.GEOMETRY_TABLES[major] = table
        result["table"] = [(e.max_rows, dataclasses.asdict(e.geometry)) for e in table]
        print("table", table, flush=True)
    cases = [
        (qlen, ctx, batch, bs)
        for bs in args.block_sizes
        for batch in args.batch_sizes
        for ctx in args.contexts
        for qlen in args.query_lens
        if batch * ctx <= args.max_batch_tokens
    ]
    if args.plan == "targets":
        k = 1024
        cases = (
            [(q, c * k, 1, 16) for c in (8, 32, 64, 128) for q in (1, 2, 6, 12, 16)]
            + [(q, c * k, 8, 16) for c in (32, 64, 128) for q in (1, 6)]
            + [
                (q, c * k, 1, bs)
                for bs in (208, 1600)
                for c in (64, 128)
                for q in (1, 6, 16)
            ]
            + [(1, c * k, 8, bs) for bs in (208, 1600) for c in (64, 128)]
        )
    for i, (qlen, ctx, batch, bs) in enumerate(cases):
        case = Case(args, batch, ctx, qlen, bs)
        print(f"[{i + 1}/{len(cases)}] batch {batch} ctx {ctx} q {qlen} block {bs}")
        run_case(args, case, rows)
        del case
        torch.accelerator.empty_cache()
    print_table(rows)

    os.makedirs(args.output_dir, exist_ok=True)
    stem = "int8_kv_attention_" + gpu.replace(" ", "_").lower() + args.tag
    path = os.path.join(args.output_dir, stem + ".json")
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    print("wrote", path)
    plot(rows, os.path.join(args.output_dir, stem + ".png"), gpu)


def print_table(rows):
    """split-KV vs FlashAttention, one line per case."""
    print(
        f"{'block':>5} {'batch':>5} {'ctx':>7} {'q':>3} {'split-KV us':>12} "
        f"{'FA us':>9} {'vs FA':>6} {'TB/s':>6} {'err deq':>8} {'err exact':>9}"
    )
    for r in rows:
        if r["impl"] != "int8_split_kv":
            continue
        fa = next(
            (
                x
                for x in rows
                if x["impl"].startswith("fa")
                and (x["batch"], x["ctx"], x["qlen"], x["block"])
                == (r["batch"], r["ctx"], r["qlen"], r["block"])
            ),
            None,
        )
        print(
            f"{r['block']:>5} {r['batch']:>5} {r['ctx']:>7} {r['qlen']:>3} "
            f"{r['us']:>12.1f} {fa['us'] if fa else float('nan'):>9.1f} "
            f"{r.get('speedup_vs_fa', float('nan')):>6.2f} {r['int8_tbps']:>6.2f} "
            f"{r.get('rel_err_vs_dequant', float('nan')):>8.4f} "
            f"{r.get('rel_err_vs_exact', float('nan')):>9.4f}"
        )


def plot(rows, path, gpu):
    """split-KV speed relative to FlashAttention: one panel per (block size,
    batch), one colour per query length in every panel."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed; no plot")
        return
    split = [r for r in rows if r["impl"] == "int8_split_kv" and "speedup_vs_fa" in r]
    blocks = sorted({r["block"] for r in split})
    batches = sorted({r["batch"] for r in split})
    qlens = sorted({r["qlen"] for r in split})
    if not split:
        return
    colors = {q: f"C{i}" for i, q in enumerate(qlens)}
    fig, axes = plt.subplots(
        len(batches),
        len(blocks),
        figsize=(4.5 * len(blocks), 3.6 * len(batches)),
        squeeze=False,
    )
    for bi, batch in enumerate(batches):
        for ki, block in enumerate(blocks):
            ax = axes[bi][ki]
            for qlen in qlens:
                pts = sorted(
                    (r["ctx"], r["speedup_vs_fa"])
                    for r in split
                    if (r["block"], r["batch"], r["qlen"]) == (block, batch, qlen)
                )
                if pts:
                    ax.plot(
                        *zip(*pts),
                        marker="o",
                        color=colors[qlen],
                        label=f"{qlen} query token{'s' if qlen > 1 else ''}",
                    )
            ax.axhline(1.0, color="k", lw=0.8)
            ax.set_xscale("log", base=2)
            ax.set_ylim(0, max(1.6, max(r["speedup_vs_fa"] for r in split) * 1.05))
            ax.set_title(f"block {block}, batch {batch}")
            ax.set_xlabel("context (tokens)")
            ax.set_ylabel("FA time / INT8 time (>1: INT8 faster)")
            ax.grid(True, which="both", alpha=0.3)
            if ax.lines[1:]:
                ax.legend(fontsize=7)
    fig.suptitle(f"split-KV INT8 vs BF16 FlashAttention, {gpu}")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    print("wrote", path)


if __name__ == "__main__":
    main()
