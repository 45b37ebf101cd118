# SPDX-License-Identifier: Apache-2.0
"""Variant of the series' warpgroup-MMA verify kernel whose two consumers
merge their partial results in the program (alternate-tile mode, up to 64
rows), so each segment writes one partial instead of two.

Why: at 32K, batch 1, 6-8 tokens the series' call writes 9.4 MB of fp32
partials (two per segment) next to 68 MB of K/V, and its reduce kernel reads
them again: 5.1-5.7 us of a 44-47 us call is the reduce alone
(`breakdown.py`, H200, 2026-12-04).

How (TILE_SPLIT only; the 65-128-row mode is unchanged):
  * a dedicated 64 KB fp32 shared buffer (the alternate-tile mode uses 165 KB
    of sm_90's 227), plus one row vector each for the softmax reference and
    the sum, and a one-shot mbarrier;
  * consumer 1, after its last tile, stores its v_ref-scaled accumulator, its
    references and sums there, syncs its warpgroup and arrives;
  * consumer 0 waits, rescales both to the larger reference and adds consumer
    1's accumulator from shared memory elementwise (no second accumulator in
    registers), then writes the one partial of the segment.

For an A/B through the series' launcher (which still expects two partials per
segment in this mode) the variant writes its partial densely, at
``token * num_segments + segment`` (the layout of one partial per segment),
and `MergedReduce` launches the reduce over half the partials the launcher
asks for.  The series form would instead set one partial per segment in the
launcher and write the output directly when there is one segment.

    python3 experiments/int8_verify_gluon/merge_variant.py /tmp/wv
    CUDA_VISIBLE_DEVICES= python3 \\
        experiments/int8_verify_gluon/offline_series_wgmma.py 16 1 /tmp/wv/merge.py
"""

import os
import sys

SERIES = "vllm/v1/attention/ops/triton_int8_split_kv_wgmma.py"


def _replace(src: str, old: str, new: str, count: int = 1) -> str:
    if src.count(old) != count:
        raise SystemExit(f"expected {count} x {old[:60]!r}, found {src.count(old)}")
    return src.replace(old, new)


def generate(src: str) -> str:
    # Consumer parameters: the merge buffers.
    src = _replace(
        src,
        """    TILE_SPLIT: gl.constexpr,
    C: gl.constexpr,  # which consumer (0 or 1)
):""",
        """    TILE_SPLIT: gl.constexpr,
    C: gl.constexpr,  # which consumer (0 or 1)
    mo_smem,
    mm_smem,
    ml_smem,
    mdone,
):""",
    )
    # The end of the consumer: merge, then one partial per segment.
    start = src.index("    acc = acc * v_ref\n    if TILE_SPLIT:")
    end = src.index("@gluon.jit", start)
    tail = """    acc = acc * v_ref
    if TILE_SPLIT:
        if C == 1:
            mo_smem.store(acc)
            mm_smem.store(m_i)
            ml_smem.store(l_i)
            gl.thread_barrier()
            mbarrier.arrive(mdone.index(0))
        else:
            mbarrier.wait(mdone.index(0), 0)
            m_1 = mm_smem.load(row_s)
            l_1 = ml_smem.load(row_s)
            m_new = gl.maximum(m_i, m_1)
            a_0 = gl.convert_layout(gl.exp2(m_i - m_new), row_o)
            a_1 = gl.convert_layout(gl.exp2(m_1 - m_new), row_o)
            l_i = l_i * gl.exp2(m_i - m_new) + l_1 * gl.exp2(m_1 - m_new)
            m_i = m_new
            acc = acc * gl.expand_dims(a_0, 1) + mo_smem.load(
                o_layout
            ) * gl.expand_dims(a_1, 1)
            l_o = gl.convert_layout(l_i, row_o)
    if TILE_SPLIT:
        if C == 0:
            _store_partial(
                acc, m_i, l_o, token_idx, q_head, row_mask, offs_d, segm_idx,
                num_segments, segm_out_ptr, segm_max_ptr, segm_expsum_ptr,
                num_query_heads, HEAD_SIZE, row_o,
            )
    elif num_segments == 1:
        inv_l = gl.where(l_o > 0.0, 1.0 / l_o, 0.0)
        gl.store(
            out_ptr
            + gl.expand_dims(token_idx * out_stride_0 + q_head * out_stride_1, 1)
            + gl.expand_dims(offs_d, 0),
            (acc * gl.expand_dims(inv_l, 1)).to(out_ptr.dtype.element_ty),
            mask=gl.expand_dims(row_mask, 1),
        )
    else:
        _store_partial(
            acc, m_i, l_o, token_idx, q_head, row_mask, offs_d, segm_idx,
            num_segments, segm_out_ptr, segm_max_ptr, segm_expsum_ptr,
            num_query_heads, HEAD_SIZE, row_o,
        )


@gluon.jit
def _store_partial(
    acc, m_i, l_o, token_idx, q_head, row_mask, offs_d, segm_idx, num_segments,
    segm_out_ptr, segm_max_ptr, segm_expsum_ptr,
    num_query_heads: gl.constexpr, HEAD_SIZE: gl.constexpr, row_o: gl.constexpr,
):
    # One unnormalised partial per segment; rows that saw no key store
    # (-inf, 0, 0).
    partial = (token_idx * num_segments + segm_idx) * num_query_heads + q_head
    gl.store(
        segm_out_ptr
        + gl.expand_dims(partial * HEAD_SIZE, 1)
        + gl.expand_dims(offs_d, 0),
        acc,
        mask=gl.expand_dims(row_mask, 1),
    )
    m_o = gl.convert_layout(m_i, row_o)
    gl.store(
        segm_max_ptr + partial, gl.where(l_o > 0.0, m_o, float("-inf")), mask=row_mask
    )
    gl.store(segm_expsum_ptr + partial, l_o, mask=row_mask)


"""
    src = src[:start] + tail + src[end:]
    # Allocations and the barrier, in the kernel.
    src = _replace(
        src,
        """    for h in gl.static_range(VH_STAGES):
        mbarrier.init(vhfree.index(h), count=CONSUMERS_PER_TILE)
""",
        """    for h in gl.static_range(VH_STAGES):
        mbarrier.init(vhfree.index(h), count=CONSUMERS_PER_TILE)
    mo_shared: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])
    MERGE_ROWS: gl.constexpr = ROWS if TILE_SPLIT else 1
    mo_smem = gl.allocate_shared_memory(
        gl.float32, [MERGE_ROWS, HEAD_SIZE], mo_shared
    )
    mm_smem = gl.allocate_shared_memory(gl.float32, [ROWS], s_shared)
    ml_smem = gl.allocate_shared_memory(gl.float32, [ROWS], s_shared)
    mdone = gl.allocate_shared_memory(gl.int64, [1, 1], bar_layout)
    mbarrier.init(mdone.index(0), count=1)
""",
    )
    # Pass them to both consumers.
    for c in (0, 1):
        src = _replace(
            src,
            f"""                    TILE_SPLIT,
                    {c},
                ),""",
            f"""                    TILE_SPLIT,
                    {c},
                    mo_smem,
                    mm_smem,
                    ml_smem,
                    mdone,
                ),""",
        )
    return src


class MergedReduce:
    """Stands in for the series' reduce kernel object while the merge variant
    runs: the launcher asks for ``2 * num_segments`` partials in the
    alternate-tile mode, the variant wrote ``num_segments``.  Set
    ``halve`` from the verify launch (`MergedVerify`)."""

    def __init__(self, reduce_kernel):
        self.reduce_kernel = reduce_kernel
        self.halve = False

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            args = list(args)
            if self.halve:
                args[6] //= 2
            return self.reduce_kernel[grid](*args, **kwargs)

        return launch


class MergedVerify:
    """The merge variant's kernel, telling `MergedReduce` whether this launch
    ran in the alternate-tile mode."""

    def __init__(self, kernel, reduce: MergedReduce):
        self.kernel, self.reduce = kernel, reduce

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.reduce.halve = bool(kwargs["TILE_SPLIT"])
            return self.kernel[grid](*args, **kwargs)

        return launch


if __name__ == "__main__":
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "/tmp/wv"
    os.makedirs(out_dir, exist_ok=True)
    with open(SERIES) as f:
        text = generate(f.read())
    with open(os.path.join(out_dir, "merge.py"), "w") as f:
        f.write(text)
    print(os.path.join(out_dir, "merge.py"))
