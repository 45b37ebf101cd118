# SPDX-License-Identifier: Apache-2.0
"""A split-KV reduce that waits on memory once per chunk of segments.

The series' `kernel_int8_split_kv_reduce` makes three dependent trips to
memory per program: the query start (an early return for padding tokens),
then every chunk's maxima (the first pass), then the partial outputs and
sums (the second pass).  On an H200 it took 5.1-5.7 us of a 44-47 us verify
call at 32K (batch 1, 6-8 tokens) and 15.7-28.1 us of 247-373 us at batch 8
(`breakdown.py`, 2026-12-04): 6-12% of the call for reading 9-13 MB that the
split-KV kernel has just written.

This variant has the same signature and grid (so it can replace the series'
kernel in the launcher's module for an A/B in one process):
  * padding tokens are masked at the store instead of returning early, so
    the query-start load does not gate the others;
  * one pass with an online merge: each chunk's maxima, sums and outputs are
    loaded together and folded into a running maximum, so with up to
    SEGMENT_CHUNK partials (every verify step up to 16 segments with
    alternate tiles) the program waits on memory once;
  * `WideReduce` also gives each program a whole head when a token has at
    most 8 partials (a batch of many requests), where the launcher's grid
    runs 4 programs of 64 channels each over masked 32-row chunks.

    # CPU check against the series' reduce (Triton interpreter):
    CUDA_VISIBLE_DEVICES= TRITON_INTERPRET=1 .venv/bin/python \\
        experiments/int8_verify_gluon/reduce_variant.py
"""

import os
import sys

import torch
from vllm.triton_utils import tl, triton


@triton.jit(do_not_specialize=["num_seqs", "num_segments"])
def kernel_int8_split_kv_reduce_1pass(
    out_ptr,  # [num_tokens, num_query_heads, HEAD_SIZE]
    segm_out_ptr,  # [max_partials, num_query_heads, HEAD_SIZE] float32
    segm_max_ptr,  # [max_partials, num_query_heads] float32
    segm_expsum_ptr,  # [max_partials, num_query_heads] float32
    query_start_loc_ptr,  # [num_seqs + 1] int32
    num_seqs,
    num_segments,
    num_query_heads: tl.constexpr,
    out_stride_0: tl.int64,
    out_stride_1: tl.int64,
    HEAD_SIZE: tl.constexpr,
    HEAD_BLOCK: tl.constexpr,
    SEGMENT_CHUNK: tl.constexpr,
):
    token_idx = tl.program_id(0)
    head_idx = tl.program_id(1)
    num_tokens = tl.load(query_start_loc_ptr + num_seqs)
    offs_d = tl.program_id(2) * HEAD_BLOCK + tl.arange(0, HEAD_BLOCK)
    first = token_idx.to(tl.int64) * num_segments
    run_max = tl.full([], float("-inf"), tl.float32)
    expsum = tl.zeros([], tl.float32)
    acc = tl.zeros([HEAD_BLOCK], tl.float32)
    for s0 in range(0, num_segments, SEGMENT_CHUNK):
        offs_s = s0 + tl.arange(0, SEGMENT_CHUNK)
        seg_mask = offs_s < num_segments
        partial = (first + offs_s) * num_query_heads + head_idx
        segm_max = tl.load(segm_max_ptr + partial, mask=seg_mask, other=float("-inf"))
        segm_expsum = tl.load(segm_expsum_ptr + partial, mask=seg_mask, other=0.0)
        segm_out = tl.load(
            segm_out_ptr + partial[:, None] * HEAD_SIZE + offs_d[None, :],
            mask=seg_mask[:, None],
            other=0.0,
        )
        new_max = tl.maximum(run_max, tl.max(segm_max, axis=0))
        # Nothing seen yet: 0 keeps exp2(-inf - ref) = 0 instead of NaN.
        ref = tl.where(new_max == float("-inf"), 0.0, new_max)
        alpha = tl.exp2(run_max - ref)
        weight = tl.exp2(segm_max - ref)
        expsum = expsum * alpha + tl.sum(segm_expsum * weight, axis=0)
        acc = acc * alpha + tl.sum(segm_out * weight[:, None], axis=0)
        run_max = new_max
    acc = tl.where(expsum > 0.0, acc / expsum, 0.0)
    # Padding tokens past the last request have no partials: no store.
    tl.store(
        out_ptr + token_idx * out_stride_0 + head_idx * out_stride_1 + offs_d,
        acc.to(out_ptr.dtype.element_ty),
        mask=(offs_d < HEAD_SIZE) & (token_idx < num_tokens),
    )


class WideReduce:
    """The one-pass reduce with whole heads per program when a token has at
    most WIDE_PARTIALS partials (batches of many requests: a few segments
    each), else as launched.  Stands in for the series' kernel object:
    ``WideReduce()[grid](*args, **kwargs)`` rewrites the grid and the
    channel/segment blocks from the launcher's arguments."""

    WIDE_PARTIALS = 8

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            num_partials = args[6]
            if num_partials <= self.WIDE_PARTIALS:
                grid_ = (grid[0], grid[1], 1)
                kwargs = dict(
                    kwargs,
                    HEAD_BLOCK=kwargs["HEAD_SIZE"],
                    SEGMENT_CHUNK=self.WIDE_PARTIALS,
                )
            else:
                grid_ = grid
            return kernel_int8_split_kv_reduce_1pass[grid_](*args, **kwargs)

        return launch


def _check(device: str) -> None:
    """Same output as the series' reduce on random partials with empty
    segments, a fully empty row, padding tokens, and 1-128 segments."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
    from vllm.v1.attention.ops import triton_int8_split_kv_attention as split_kv

    g = torch.Generator().manual_seed(0)
    heads, hs = 6, 256
    for num_segments in (1, 2, 4, 8, 32, 64, 128):
        num_tokens, padded = 3, 4
        n = padded * num_segments
        segm_out = torch.randn(n, heads, hs, generator=g)
        segm_max = torch.randn(n, heads, generator=g) * 20
        segm_exp = torch.rand(n, heads, generator=g) + 0.1
        empty = torch.rand(n, heads, generator=g) < 0.3
        segm_max[empty] = float("-inf")
        segm_exp[empty] = 0.0
        segm_out[empty] = 0.0
        # Token 1, head 2: no segment saw a key.
        rows = slice(num_segments, 2 * num_segments)
        segm_max[rows, 2] = float("-inf")
        segm_exp[rows, 2] = 0.0
        segm_out[rows, 2] = 0.0
        # The padding token's slots hold garbage.
        segm_max[3 * num_segments :] = float("nan")
        qsl = torch.tensor([0, num_tokens], dtype=torch.int32)
        tensors = [t.to(device) for t in (segm_out, segm_max, segm_exp, qsl)]
        outs = []
        for kernel in (
            split_kv.kernel_int8_split_kv_reduce,
            kernel_int8_split_kv_reduce_1pass,
            WideReduce(),
        ):
            out = torch.full((padded, heads, hs), 7.0, device=device)
            kernel[(padded, heads, hs // 64)](
                out,
                *tensors,
                1,
                num_segments,
                num_query_heads=heads,
                out_stride_0=out.stride(0),
                out_stride_1=out.stride(1),
                HEAD_SIZE=hs,
                HEAD_BLOCK=64,
                SEGMENT_CHUNK=32,
            )
            outs.append(out.cpu())
        # Exact reference: softmax-weighted merge in float64.
        m = segm_max[: num_tokens * num_segments].double().view(num_tokens, -1, heads)
        w = torch.exp2(m - m.amax(1, keepdim=True).nan_to_num(0, 0, 0))
        w = w.nan_to_num(0.0)
        e = segm_exp[: num_tokens * num_segments].double().view(num_tokens, -1, heads)
        o = (
            segm_out[: num_tokens * num_segments]
            .double()
            .view(num_tokens, -1, heads, hs)
        )
        den = (w * e).sum(1)
        ref = (o * w[..., None]).sum(1) / den.clamp(min=1e-300)[..., None]
        ref[den == 0] = 0.0
        for name, out in zip(("series", "1pass", "wide"), outs, strict=True):
            err = (out[:num_tokens].double() - ref).abs().max().item()
            assert err < 1e-4, (name, num_segments, err)
            assert (out[num_tokens] == 7.0).all(), (name, "padding written")
        print(f"segments {num_segments}: all three match the float64 merge")


if __name__ == "__main__":
    _check("cuda" if torch.cuda.is_available() else "cpu")
