# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Prefill attention on an INT8 per-token-head KV cache vs BF16 FlashAttention.

One chunk of ``query_len`` causal query tokens at the end of ``context``
cached tokens (batch 1), Qwen3.5-27B full-attention geometry by default.
Side by side in one run:

* ``fa_bf16``: FlashAttention varlen on a paged BF16 cache;
* ``triton_int8``: the Triton backend's upstream path (unified kernel,
  inline dequantisation);
* ``sectioned_int8``: the Triton backend's sectioned path (dequantise the
  context in sections, FlashAttention per section, LSE merge).

Writes a JSON and a PNG named after the GPU into ``--output-dir``.

Example:
    python benchmarks/kernels/benchmark_int8_kv_prefill.py \\
        --contexts 8192 32768 131072 --query-lens 2048 8192
"""

import argparse
import json
import math
import os

import torch

from vllm.platforms import current_platform
from vllm.triton_utils import triton
from vllm.utils.math_utils import next_power_of_2
from vllm.v1.attention.backends.fa_utils import (
    flash_attn_varlen_func,
    get_flash_attn_version,
)
from vllm.v1.attention.backends.triton_attn import (
    TritonAttentionImpl,
    TritonAttentionMetadata,
)
from vllm.v1.attention.ops.triton_int8_sectioned_prefill import (
    DEFAULT_QUERY_TILE_TOKENS,
    DEFAULT_SECTION_TOKENS,
    build_sectioned_prefill_metadata,
)
from vllm.v1.worker.workspace import init_workspace_manager

IMPLS = ("fa_bf16", "triton_int8", "sectioned_int8")
MiB = 2**20


def make_metadata(args, ctx, qlen, block_table, device):
    seq_len = ctx + qlen
    nq, hs, thr, seg = args.num_heads, args.head_size, 32, 16
    return TritonAttentionMetadata(
        num_actual_tokens=qlen,
        max_query_len=qlen,
        query_start_loc=torch.tensor([0, qlen], dtype=torch.int32, device=device),
        max_seq_len=seq_len,
        seq_lens=torch.tensor([seq_len], dtype=torch.int32, device=device),
        block_table=block_table,
        slot_mapping=torch.empty(0, dtype=torch.int64, device=device),
        seq_threshold_3D=thr,
        num_par_softmax_segments=seg,
        softmax_segm_output=torch.empty(
            (thr, nq, seg, next_power_of_2(hs)), dtype=torch.float32, device=device
        ),
        softmax_segm_max=torch.empty((thr, nq, seg), device=device),
        softmax_segm_expsum=torch.empty((thr, nq, seg), device=device),
        causal=True,
        use_cascade=False,
        common_prefix_len=0,
        cu_prefix_query_lens=None,
        prefix_kv_lens=None,
        suffix_kv_lens=None,
    )


def bench_one(args, ctx, qlen, fa_version, device):
    nq, nkv, hs, bs = args.num_heads, args.num_kv_heads, args.head_size, args.block_size
    dtype = torch.bfloat16
    seq_len = ctx + qlen
    num_blocks = math.ceil(seq_len / bs)
    block_table = torch.randperm(num_blocks, device=device, dtype=torch.int32)[None]
    pos = torch.arange(seq_len, device=device)
    slots = block_table[0, pos // bs].long() * bs + pos % bs

    # BF16 paged cache in FlashAttention's layout, filled with the sequence.
    k_seq = torch.randn(seq_len, nkv, hs, dtype=dtype, device=device)
    v_seq = torch.randn_like(k_seq)
    k_cache = torch.empty(num_blocks * bs, nkv, hs, dtype=dtype, device=device)
    v_cache = torch.empty_like(k_cache)
    k_cache[slots] = k_seq
    v_cache[slots] = v_seq
    k_cache = k_cache.view(num_blocks, bs, nkv, hs)
    v_cache = v_cache.view(num_blocks, bs, nkv, hs)

    # INT8 per-token-head cache as the Triton backend allocates (NHD) and
    # writes it.
    padded = 2 * (hs + 4)
    kv_int8 = torch.empty(num_blocks, bs, nkv, padded, dtype=torch.int8, device=device)
    kv_int8 = kv_int8.permute(0, 2, 1, 3)
    impl = TritonAttentionImpl(nq, hs, hs**-0.5, nkv, None, None, "int8_per_token_head")
    impl.do_kv_cache_update(None, k_seq, v_seq, kv_int8, slots)

    q = torch.randn(qlen, nq, hs, dtype=dtype, device=device)
    k_new, v_new = k_seq[ctx:], v_seq[ctx:]
    meta_upstream = make_metadata(args, ctx, qlen, block_table, device)
    meta_sectioned = make_metadata(args, ctx, qlen, block_table, device)
    meta_sectioned.prefill = build_sectioned_prefill_metadata(
        torch.tensor([0, qlen], dtype=torch.int32),
        torch.tensor([seq_len], dtype=torch.int32),
        first_request=0,
        device=device,
        section_tokens=args.section_tokens,
        query_tile_tokens=args.query_tile_tokens,
    )
    cu_q = torch.tensor([0, qlen], dtype=torch.int32, device=device)
    seqused_k = torch.tensor([seq_len], dtype=torch.int32, device=device)
    outs = {impl_name: torch.empty_like(q) for impl_name in IMPLS}

    def fa_bf16():
        flash_attn_varlen_func(
            q=q,
            k=k_cache,
            v=v_cache,
            out=outs["fa_bf16"],
            cu_seqlens_q=cu_q,
            max_seqlen_q=qlen,
            seqused_k=seqused_k,
            max_seqlen_k=seq_len,
            softmax_scale=impl.scale,
            causal=True,
            block_table=block_table,
            fa_version=fa_version,
        )

    def triton_int8():
        impl.forward(None, q, k_new, v_new, kv_int8, meta_upstream, outs["triton_int8"])

    def sectioned_int8():
        impl.forward(
            None, q, k_new, v_new, kv_int8, meta_sectioned, outs["sectioned_int8"]
        )

    fns = {
        "fa_bf16": fa_bf16,
        "triton_int8": triton_int8,
        "sectioned_int8": sectioned_int8,
    }
    rows = []
    for name in args.impls:
        fn = fns[name]
        fn()
        torch.accelerator.synchronize()
        base = torch.accelerator.memory_allocated()
        torch.accelerator.reset_peak_memory_stats()
        fn()
        torch.accelerator.synchronize()
        peak_extra = torch.accelerator.max_memory_allocated() - base
        us = 1000 * triton.testing.do_bench(fn, warmup=args.warmup_ms, rep=args.rep_ms)
        rows.append(
            {
                "context": ctx,
                "query_len": qlen,
                "impl": name,
                "us": round(us, 1),
                "peak_extra_mib": round(peak_extra / MiB, 1),
            }
        )
    ref = outs["fa_bf16"].float()
    for row in rows:
        out = outs[row["impl"]].float()
        row["rel_err_vs_fa_bf16"] = round(((out - ref).norm() / ref.norm()).item(), 5)
        row["nan"] = bool(out.isnan().any())
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-heads", type=int, default=24)
    parser.add_argument("--num-kv-heads", type=int, default=4)
    parser.add_argument("--head-size", type=int, default=256)
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument(
        "--contexts", type=int, nargs="+", default=[8192, 32768, 131072]
    )
    parser.add_argument("--query-lens", type=int, nargs="+", default=[2048, 8192])
    parser.add_argument("--impls", nargs="+", default=list(IMPLS), choices=IMPLS)
    parser.add_argument("--section-tokens", type=int, default=DEFAULT_SECTION_TOKENS)
    parser.add_argument(
        "--query-tile-tokens", type=int, default=DEFAULT_QUERY_TILE_TOKENS
    )
    parser.add_argument("--warmup-ms", type=int, default=25)
    parser.add_argument("--rep-ms", type=int, default=200)
    parser.add_argument("--output-dir", default="benchmarks/results")
    args = parser.parse_args()

    torch.manual_seed(0)
    device = torch.device(current_platform.device_type)
    # The sectioned path takes its scratch from vLLM's workspace manager,
    # which the model runner creates in a server.
    init_workspace_manager(device)
    gpu = current_platform.get_device_name()
    fa_version = get_flash_attn_version(head_size=args.head_size)
    rows = []
    for ctx in args.contexts:
        for qlen in args.query_lens:
            rows += bench_one(args, ctx, qlen, fa_version, device)
            torch.accelerator.empty_cache()

    by_key = {(r["context"], r["query_len"], r["impl"]): r for r in rows}
    header = (
        f"{'context':>8} {'query':>6} {'impl':>15} {'us':>11} "
        f"{'vs fa_bf16':>10} {'vs triton':>10} {'extra MiB':>10} {'rel err':>8}"
    )
    print(f"{gpu}, FlashAttention {fa_version}, section {args.section_tokens}")
    print(header)
    for r in rows:
        fa = by_key.get((r["context"], r["query_len"], "fa_bf16"))
        tr = by_key.get((r["context"], r["query_len"], "triton_int8"))
        r["ratio_vs_fa_bf16"] = round(r["us"] / fa["us"], 3) if fa else None
        r["speedup_vs_triton_int8"] = round(tr["us"] / r["us"], 2) if tr else None
        ratio = r["ratio_vs_fa_bf16"] or "-"
        speedup = r["speedup_vs_triton_int8"] or "-"
        print(
            f"{r['context']:>8} {r['query_len']:>6} {r['impl']:>15} "
            f"{r['us']:>11,.1f} {ratio:>10} {speedup:>10} "
            f"{r['peak_extra_mib']:>10} {r['rel_err_vs_fa_bf16']:>8}"
        )

    os.makedirs(args.output_dir, exist_ok=True)
    stem = os.path.join(
        args.output_dir, "int8_kv_prefill_" + gpu.lower().replace(" ", "_")
    )
    with open(stem + ".json", "w") as f:
        json.dump(
            {"gpu": gpu, "fa_version": fa_version, "args": vars(args), "rows": rows},
            f,
            indent=1,
        )
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no PNG written")
        return
    fig, axes = plt.subplots(
        1, len(args.query_lens), figsize=(6 * len(args.query_lens), 4)
    )
    for ax, qlen in zip(
        list(axes) if len(args.query_lens) > 1 else [axes], args.query_lens
    ):
        for name in args.impls:
            pts = [
                (r["context"], r["us"])
                for r in rows
                if r["query_len"] == qlen and r["impl"] == name
            ]
            ax.plot(*zip(*pts), marker="o", label=name)
        ax.set(
            xscale="log",
            yscale="log",
            xlabel="cached context (tokens)",
            ylabel="us per layer call",
            title=f"{qlen} query tokens, {gpu}",
        )
        ax.legend()
    fig.tight_layout()
    fig.savefig(stem + ".png", dpi=120)
    print(f"wrote {stem}.json and {stem}.png")


if __name__ == "__main__":
    main()
