# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Decode / speculative-verify attention over the INT8 per-token-head cache.

Times, side by side on the same data, upstream's unified Triton kernel on the
INT8 cache (byte-addressed and with aligned row loads), the split-KV INT8 kernel,
upstream's Triton kernel on a BF16 cache and BF16 FlashAttention.  Each
number is the median time of one layer call, taken from CUDA-graph replays
that cycle through more cache copies than fit in L2.

Example:
    python benchmarks/kernels/benchmark_int8_kv_attention.py --quick
"""

import argparse
import json
import math
import os
import time

import torch

from vllm.platforms import current_platform
from vllm.triton_utils import triton
from vllm.v1.attention.ops import triton_unified_attention as tua
from vllm.v1.attention.ops.triton_int8_split_kv_attention import (
    MAX_PARTIALS,
    Int8SplitKVGeometry,
    int8_split_kv_attention,
    select_int8_split_kv_geometry,
)
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
L2_BYTES = 60 * 2**20


class Case:
    """One batch of requests: BF16 and INT8 caches built from the same data."""

    def __init__(self, args, batch: int, ctx: int, qlen: int, copies_bytes: int):
        self.batch, self.ctx, self.qlen = batch, ctx, qlen
        nq, nkv, hs = args.num_q_heads, args.num_kv_heads, args.head_size
        bs = args.block_size
        self.nq, self.nkv, self.hs, self.bs = nq, nkv, hs, bs
        blocks_per_seq = triton.cdiv(ctx, bs)
        num_blocks = batch * blocks_per_seq
        self.int8_bytes = batch * ctx * nkv * 2 * (hs + 4)
        self.bf16_bytes = batch * ctx * nkv * 2 * hs * 2
        self.copies = max(1, min(24, math.ceil(copies_bytes / self.int8_bytes)))
        self.copies_bf16 = max(1, min(12, math.ceil(copies_bytes / self.bf16_bytes)))
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
                num_blocks, bs, nkv, hs, dtype=torch.bfloat16, device=DEVICE
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
        hs, pad = self.hs, self.hs + 4
        raw = torch.empty(*k.shape[:3], 2 * pad, dtype=torch.int8, device=DEVICE)
        words = raw.view(torch.float32)
        for half, x in enumerate((k, v)):
            s = x.float().abs().amax(-1).clamp(min=1e-6) / 127.0
            raw[..., half * pad : half * pad + hs] = (
                torch.round(x.float() / s[..., None]).clamp(-127, 127).to(torch.int8)
            )
            words[..., (half * pad + hs) // 4] = s
        kc, vc = raw.split(pad, dim=-1)
        return kc, vc, words[..., hs // 4], words[..., (pad + hs) // 4]

    def dequant_first_request(self):
        kc, vc, ks, vs = self.int8[0]
        blocks = self.block_table[0, : triton.cdiv(self.ctx, self.bs)].long()
        out = []
        for c, s in ((kc, ks), (vc, vs)):
            x = c[blocks, ..., : self.hs].float() * s[blocks][..., None]
            out.append(x.reshape(-1, self.nkv, self.hs)[: self.ctx])
        return out

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

    def bf16_first_request(self):
        k, v = self.ref_kv
        blocks = self.block_table[0, : triton.cdiv(self.ctx, self.bs)].long()
        return [x[blocks].reshape(-1, self.nkv, self.hs)[: self.ctx] for x in (k, v)]


def _unified(case, k, v, ks=None, vs=None, int8=False):
    seg = 16
    thr = 128 // case.nkv
    tua.unified_attention(
        q=case.q,
        k=k,
        v=v,
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
        num_par_softmax_segments=seg,
        softmax_segm_output=case.segm[0],
        softmax_segm_max=case.segm[1],
        softmax_segm_expsum=case.segm[2],
        kv_quant_mode=KVQuantMode.INT8_PER_TOKEN_HEAD if int8 else KVQuantMode.NONE,
        k_scale_cache=ks,
        v_scale_cache=vs,
    )


def make_impls(case, geometry=None, integer_qk=False):
    """name -> (fn(copy_idx), uses_int8_cache)."""
    thr = 128 // case.nkv
    case.segm = (
        torch.empty(thr, case.nq, 16, case.hs, device=DEVICE),
        torch.empty(thr, case.nq, 16, device=DEVICE),
        torch.empty(thr, case.nq, 16, device=DEVICE),
    )
    case.scratch = (
        torch.empty(MAX_PARTIALS, case.nq, case.hs, device=DEVICE),
        torch.empty(MAX_PARTIALS, case.nq, device=DEVICE),
        torch.empty(MAX_PARTIALS, case.nq, device=DEVICE),
    )
    inline_v_offset = tua._int8_kv_inline_v_offset

    def int8_bytes(i):
        # Upstream behaviour: byte-addressed loads, scattered scale loads.
        tua._int8_kv_inline_v_offset = lambda *a: -1
        try:
            _unified(case, *case.int8[i], int8=True)
        finally:
            tua._int8_kv_inline_v_offset = inline_v_offset

    def int8_aligned(i):
        _unified(case, *case.int8[i], int8=True)

    def split_kv(i):
        kc, vc, _, _ = case.int8[i]
        int8_split_kv_attention(
            case.q,
            kc,
            vc,
            case.out,
            case.cu_q,
            case.seq_lens,
            case.block_table,
            case.qlen,
            case.ctx,
            case.scale,
            *case.scratch,
            integer_qk=integer_qk,
            geometry=geometry,
        )

    def triton_bf16(i):
        _unified(case, *case.bf16[i])

    impls = {
        "triton_int8_upstream": (int8_bytes, True),
        "triton_int8_aligned": (int8_aligned, True),
        "int8_split_kv": (split_kv, True),
        "triton_bf16": (triton_bf16, False),
    }
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


def time_graph(fn, copies: int, calls: int = 24, reps: int = 20) -> dict:
    """Median us per call over CUDA-graph replays cycling through copies."""
    t0 = time.perf_counter()
    fn(0)
    torch.accelerator.synchronize()
    first = time.perf_counter() - t0
    # Slow kernels (upstream INT8 verify: tens of ms) get fewer calls.
    t0 = time.perf_counter()
    fn(0)
    torch.accelerator.synchronize()
    est_us = (time.perf_counter() - t0) * 1e6
    calls = max(1, min(calls, round(20000 / max(est_us, 1.0))))
    reps = reps if est_us < 2000 else 5
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for i in range(min(copies, 3)):
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
    times.sort()
    del graph
    return {
        "us": round(times[len(times) // 2], 2),
        "us_min": round(times[0], 2),
        "first_call_s": round(first, 2),
    }


def copy_bandwidth() -> float:
    src = torch.empty(2**30, dtype=torch.uint8, device=DEVICE)
    dst = torch.empty_like(src)
    ms = triton.testing.do_bench(lambda: dst.copy_(src), warmup=50, rep=200)
    return 2 * src.numel() / (ms * 1e-3) / 1e9


def rel_err(out, ref) -> float:
    return ((out.float() - ref.float()).norm() / ref.float().norm()).item()


def run_case(args, case, rows, geometry=None, impl_filter=None, tag=None):
    impls = make_impls(case, geometry, args.integer_qk)
    exact = deq_ref = None
    if not args.no_errors and case.batch == 1:
        exact = case.ref_first_request(*case.bf16_first_request())
        deq_ref = case.ref_first_request(*case.dequant_first_request())
    for name, (fn, is_int8) in impls.items():
        if impl_filter and name not in impl_filter:
            continue
        slow = case.qlen > 1 and case.ctx * case.batch > 131072
        if name == "triton_int8_upstream" and slow and args.skip_slow:
            continue
        copies = case.copies if is_int8 else case.copies_bf16
        try:
            row = time_graph(fn, copies, calls=args.calls)
        except Exception as e:  # noqa: BLE001
            print(f"{name} failed: {e!r}")
            continue
        kv_bytes = case.int8_bytes if is_int8 else case.bf16_bytes
        row.update(
            batch=case.batch,
            ctx=case.ctx,
            qlen=case.qlen,
            impl=tag or name,
            copies=copies,
            kv_bytes=kv_bytes,
            gbps=round(kv_bytes / (row["us"] * 1e-6) / 1e9, 1),
        )
        if geometry is not None:
            row["geometry"] = geometry.__dict__
        if exact is not None:
            fn(0)
            out = case.out[: case.qlen]
            row["nan"] = bool(out.isnan().any())
            row["rel_err_vs_exact"] = round(rel_err(out, exact), 5)
            if is_int8:
                row["rel_err_vs_dequant"] = round(rel_err(out, deq_ref), 5)
                row["max_abs_vs_dequant"] = (out.float() - deq_ref).abs().max().item()
        rows.append(row)
        print(json.dumps(row), flush=True)


def sweep(args, rows):
    """Time split-KV geometries; prints the best per (batch, ctx, qlen)."""
    num_cases = len(args.query_lens) * len(args.contexts) * len(args.batch_sizes)
    best = {}
    for qlen in args.query_lens:
        for ctx in args.contexts:
            for batch in args.batch_sizes:
                deadline = time.time() + args.sweep_seconds / num_cases
                case = Case(args, batch, ctx, qlen, args.copy_bytes)
                tiles = (16, 32, 64) if qlen == 1 else (32, 64, 16)
                seg_choices = (64, 128, 32, 16) if qlen == 1 else (16, 32, 8, 64)
                for tile in tiles:
                    for segs in seg_choices:
                        if segs * batch * qlen > MAX_PARTIALS:
                            continue
                        for warps, stages in ((4, 2), (4, 3), (8, 2)):
                            if time.time() > deadline:
                                break
                            geo = Int8SplitKVGeometry(tile, segs, warps, stages)
                            n = len(rows)
                            run_case(args, case, rows, geo, ["int8_split_kv"], "sweep")
                            if len(rows) > n:
                                key = (batch, ctx, qlen)
                                if key not in best or rows[-1]["us"] < best[key][0]:
                                    best[key] = (rows[-1]["us"], geo.__dict__)
                del case
                torch.accelerator.empty_cache()
    for key, val in sorted(best.items()):
        print("BEST", key, val)
    return best


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8])
    parser.add_argument(
        "--contexts", type=int, nargs="+", default=[8192, 32768, 65536, 131072]
    )
    parser.add_argument("--query-lens", type=int, nargs="+", default=[1, 6, 16])
    parser.add_argument("--num-q-heads", type=int, default=24)
    parser.add_argument("--num-kv-heads", type=int, default=4)
    parser.add_argument("--head-size", type=int, default=256)
    parser.add_argument(
        "--block-size",
        type=int,
        default=16,
        help="tokens per cache block (Qwen3.5-27B with an INT8 cache: 1600)",
    )
    parser.add_argument("--calls", type=int, default=24, help="calls per graph")
    parser.add_argument(
        "--copy-bytes", type=int, default=400 * 2**20, help="bytes of caches to cycle"
    )
    parser.add_argument("--integer-qk", action="store_true")
    parser.add_argument("--no-errors", action="store_true")
    parser.add_argument(
        "--skip-slow",
        action="store_true",
        help="skip upstream INT8 verify beyond 128K tokens per batch (slow)",
    )
    parser.add_argument("--quick", action="store_true", help="batch 1, 32K/128K")
    parser.add_argument("--sweep", action="store_true", help="tune the geometry")
    parser.add_argument("--sweep-seconds", type=float, default=240)
    parser.add_argument("--output-dir", default="benchmarks/results")
    args = parser.parse_args()
    if args.quick:
        args.batch_sizes, args.contexts = [1], [32768, 131072]

    gpu = current_platform.get_device_name()
    rows: list[dict] = []
    result = {
        "gpu": gpu,
        "geometry": {
            "nq": args.num_q_heads,
            "nkv": args.num_kv_heads,
            "hs": args.head_size,
            "block": args.block_size,
        },
        "copy_gbps": round(copy_bandwidth(), 1),
        "rows": rows,
    }
    print(f"{gpu}: copy bandwidth {result['copy_gbps']} GB/s")
    if args.sweep:
        best = sweep(args, rows)
        result["best"] = {str(k): v for k, v in best.items()}
    else:
        for qlen in args.query_lens:
            for ctx in args.contexts:
                for batch in args.batch_sizes:
                    case = Case(args, batch, ctx, qlen, args.copy_bytes)
                    geo = select_int8_split_kv_geometry(
                        qlen, ctx, batch, batch * qlen, MAX_PARTIALS
                    )
                    print("geometry", batch, ctx, qlen, geo)
                    run_case(args, case, rows)
                    del case
                    torch.accelerator.empty_cache()
        print_table(rows)

    os.makedirs(args.output_dir, exist_ok=True)
    stem = "int8_kv_attention_" + gpu.replace(" ", "_").lower()
    if args.block_size != 16:
        stem += f"_block{args.block_size}"
    if args.sweep:
        stem += "_sweep"
    path = os.path.join(args.output_dir, stem + ".json")
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    print("wrote", path)
    if not args.sweep:
        plot(rows, os.path.join(args.output_dir, stem + ".png"), gpu)


def print_table(rows):
    impls = sorted({r["impl"] for r in rows})
    keys = sorted({(r["batch"], r["ctx"], r["qlen"]) for r in rows})
    print(f"{'batch':>5} {'ctx':>7} {'q':>3} " + " ".join(f"{i:>20}" for i in impls))
    for key in keys:
        cells = []
        for impl in impls:
            r = [
                x
                for x in rows
                if (x["batch"], x["ctx"], x["qlen"], x["impl"])
                == (
                    *key,
                    impl,
                )
            ]
            cells.append(
                f"{r[0]['us']:>11.1f} {r[0]['gbps']:>6.0f}GB/s" if r else " " * 20
            )
        print(f"{key[0]:>5} {key[1]:>7} {key[2]:>3} " + " ".join(cells))


def plot(rows, path, gpu):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed; no plot")
        return
    qlens = sorted({r["qlen"] for r in rows})
    batches = sorted({r["batch"] for r in rows})
    fig, axes = plt.subplots(
        len(batches),
        len(qlens),
        figsize=(5 * len(qlens), 4 * len(batches)),
        squeeze=False,
    )
    for bi, batch in enumerate(batches):
        for qi, qlen in enumerate(qlens):
            ax = axes[bi][qi]
            for impl in sorted({r["impl"] for r in rows}):
                pts = sorted(
                    (r["ctx"], r["us"])
                    for r in rows
                    if r["impl"] == impl and r["batch"] == batch and r["qlen"] == qlen
                )
                if pts:
                    ax.plot(*zip(*pts), marker="o", label=impl)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_title(f"batch {batch}, {qlen} query tokens")
            ax.set_xlabel("context")
            ax.set_ylabel("us per layer call")
            ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.suptitle(f"INT8 vs BF16 KV attention, {gpu}")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    print("wrote", path)


if __name__ == "__main__":
    main()
