"""How fast can the verify kernel's producer stream the planar INT8 cache by itself? (issue 20, tenth session)

The ablations (README, top) found that with alternate tiles the producer's copies set the verify kernel's pace
(consumers reduced to Q.K take the series' time: 2.1 TB/s at 128K, batch 1, on an H100, against FA3's 2.8 there and
the decode kernel's 2.7-3.0, which runs several small programs per multiprocessor).  This probe runs the series'
own ``_producer`` (same copies, block-table reads and widening) with a sink (the default partition) that hands every
stage straight back, and reports the bandwidth for:
* programs per multiprocessor: ``PER_SM`` = 1 (the series: one program, all of a multiprocessor's copies in one
  producer) or 2 and 4 (as many independent producers, each streaming its own segment);
* ``STAGES`` / ``AHEAD`` (tiles copied ahead of the widening), within each configuration's shared memory;
* the producer's warps: 4 (the series) or 1-2;
* the widening on or off (``nowiden``: ablate_variant.py's form of the module);
* ws_verify.py's producer with its cp.async copies and with K / V^T by TMA (one thread, 16-token boxes; the scales
  by cp.async), at 1 and 2 programs per multiprocessor.
Context 128K and 32K, batch 1 and 8, blocks 16 and 1600, Qwen3.5-27B's 4 KV heads x 256; each configuration
streams the same bytes (the KV of every (request, KV head), split into PER_SM x 132 / (batch x heads) segments).
Needs an sm_90 GPU (Gluon).  Usage (repo root, fork installed): python experiments/int8_verify_gluon/copy_probe.py
Writes $OUT/copy_probe.json and prints a table."""
import importlib.util
import json
import os
import sys
import types

import torch

sys.path.insert(0, "benchmarks/kernels")
import benchmark_int8_kv_attention as B  # noqa: E402

SERIES = "vllm/v1/attention/ops/triton_int8_split_kv_wgmma.py"


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# The sink and the segment bounds both probe kernels use (appended to each generated module).
COMMON_SRC = '''

@gluon.jit
def _sink(ready, kfree, vhfree, n_tiles, STAGES: gl.constexpr, VH_STAGES: gl.constexpr):
    # Hands each tile's stages back as soon as the producer marks it ready.
    for i in range(n_tiles):
        mbarrier.wait(ready.index(i % STAGES), (i // STAGES) & 1)
        mbarrier.arrive(kfree.index(i % STAGES))
        mbarrier.arrive(vhfree.index(i % VH_STAGES))


@gluon.jit
def _segment(seq_lens_ptr, seq_idx, num_segments, TILE_SIZE: gl.constexpr):
    # (seq_len, first tile, tiles) of this program's segment.
    seq_len = gl.load(seq_lens_ptr + seq_idx)
    num_tiles = gl.cdiv(seq_len, TILE_SIZE)
    tiles_per_segment = gl.cdiv(num_tiles, num_segments)
    tile_lo = gl.program_id(2) * tiles_per_segment
    tile_hi = gl.minimum(tile_lo + tiles_per_segment, num_tiles)
    return seq_len, tile_lo, gl.maximum(tile_hi - tile_lo, 0)
'''


PROBE_SRC = '''


@gluon.jit
def copy_probe_kernel(
    k_cache_ptr,
    v_cache_ptr,
    k_scale_ptr,
    v_scale_ptr,
    block_table_ptr,
    seq_lens_ptr,
    num_segments,
    block_table_stride: gl.int64,
    stride_page: gl.int64,
    stride_head: gl.int64,
    stride_scale_page: gl.int64,
    stride_scale_head: gl.int64,
    HEAD_SIZE: gl.constexpr,
    BLOCK_SIZE: gl.constexpr,
    TILE_SIZE: gl.constexpr,
    STAGES: gl.constexpr,
    VH_STAGES: gl.constexpr,
    AHEAD: gl.constexpr,
    PRODUCER_WARPS: gl.constexpr,
    PRODUCER_REGS: gl.constexpr,
):
    kv_head_idx = gl.program_id(0)
    seq_idx = gl.program_id(1)
    seq_len, tile_lo, n_tiles = _segment(seq_lens_ptr, seq_idx, num_segments, TILE_SIZE)
    k_shared: gl.constexpr = gl.NVMMASharedLayout.get_default_for([TILE_SIZE, HEAD_SIZE], gl.int8)
    v_shared: gl.constexpr = gl.SwizzledSharedLayout(16, 1, 1, [1, 0])
    vh_shared: gl.constexpr = gl.NVMMASharedLayout.get_default_for([HEAD_SIZE, TILE_SIZE], gl.float16)
    s_shared: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])
    bar_layout: gl.constexpr = mbarrier.MBarrierLayout()
    k_smem = gl.allocate_shared_memory(gl.int8, [STAGES, TILE_SIZE, HEAD_SIZE], k_shared)
    v_smem = gl.allocate_shared_memory(gl.int8, [STAGES, HEAD_SIZE, TILE_SIZE], v_shared)
    ks_smem = gl.allocate_shared_memory(gl.float32, [STAGES, TILE_SIZE], s_shared)
    vs_smem = gl.allocate_shared_memory(gl.float32, [STAGES, TILE_SIZE], s_shared)
    vh_smem = gl.allocate_shared_memory(gl.float16, [VH_STAGES, HEAD_SIZE, TILE_SIZE], vh_shared)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], bar_layout)
    kfree = gl.allocate_shared_memory(gl.int64, [STAGES, 1], bar_layout)
    vhfree = gl.allocate_shared_memory(gl.int64, [VH_STAGES, 1], bar_layout)
    for s in gl.static_range(STAGES):
        mbarrier.init(ready.index(s), count=1)
        mbarrier.init(kfree.index(s), count=1)
    for h in gl.static_range(VH_STAGES):
        mbarrier.init(vhfree.index(h), count=1)
    block_table_row = block_table_ptr + seq_idx.to(gl.int64) * block_table_stride
    # The sink is the default partition (4 warps: a warp-specialised kernel's default needs a multiple of 4), the
    # producer a worker of PRODUCER_WARPS warps.
    gl.warp_specialize(
        [
            (_sink, (ready, kfree, vhfree, n_tiles, STAGES, VH_STAGES)),
            (
                _producer,
                (
                    k_smem,
                    v_smem,
                    ks_smem,
                    vs_smem,
                    vh_smem,
                    ready,
                    kfree,
                    vhfree,
                    block_table_row,
                    k_cache_ptr + kv_head_idx * stride_head,
                    v_cache_ptr + kv_head_idx * stride_head,
                    k_scale_ptr + kv_head_idx * stride_scale_head,
                    v_scale_ptr + kv_head_idx * stride_scale_head,
                    seq_len,
                    tile_lo,
                    n_tiles,
                    stride_page,
                    stride_scale_page,
                    HEAD_SIZE,
                    TILE_SIZE,
                    BLOCK_SIZE,
                    STAGES,
                    VH_STAGES,
                    AHEAD,
                ),
            ),
        ],
        [PRODUCER_WARPS],
        [PRODUCER_REGS],
    )
'''


def make_kernel(path, name):
    """The probe kernel next to the ``_producer`` of the module at ``path`` (one generated module per form)."""
    text = open(path).read() + COMMON_SRC + PROBE_SRC
    gen = f"/tmp/copy_probe_{name}.py"
    open(gen, "w").write(text)
    return load(gen, "copy_probe_" + name).copy_probe_kernel


PROBE_WS_SRC = '''


@gluon.jit
def copy_probe_ws_kernel(
    k_cache_ptr,
    v_cache_ptr,
    k_scale_ptr,
    v_scale_ptr,
    block_table_ptr,
    seq_lens_ptr,
    num_segments,
    block_table_stride: gl.int64,
    stride_page: gl.int64,
    stride_head: gl.int64,
    stride_scale_page: gl.int64,
    stride_scale_head: gl.int64,
    k_desc,
    v_desc,
    HEAD_SIZE: gl.constexpr,
    BLOCK_SIZE: gl.constexpr,
    TILE_SIZE: gl.constexpr,
    STAGES: gl.constexpr,
    VH_STAGES: gl.constexpr,
    AHEAD: gl.constexpr,
    USE_TMA: gl.constexpr,
    PRODUCER_WARPS: gl.constexpr,
    PRODUCER_REGS: gl.constexpr,
):
    kv_head_idx = gl.program_id(0)
    seq_idx = gl.program_id(1)
    seq_len, tile_lo, n_tiles = _segment(seq_lens_ptr, seq_idx, num_segments, TILE_SIZE)
    k_shared: gl.constexpr = gl.NVMMASharedLayout.get_default_for([TILE_SIZE, HEAD_SIZE], gl.int8)
    v_shared: gl.constexpr = gl.SwizzledSharedLayout(16, 1, 1, [1, 0])
    vh_shared: gl.constexpr = gl.NVMMASharedLayout.get_default_for([HEAD_SIZE, TILE_SIZE], gl.float16)
    s_shared: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])
    k_smem = gl.allocate_shared_memory(gl.int8, [STAGES, TILE_SIZE, HEAD_SIZE], k_shared)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    if USE_TMA:
        RUN_COUNT: gl.constexpr = TILE_SIZE // 16
        v_smem = gl.allocate_shared_memory(gl.int8, [STAGES * RUN_COUNT, 1, 1, HEAD_SIZE, 16], v_desc.layout)
        v_read = v_smem._reinterpret(
            gl.int8, [STAGES * RUN_COUNT, HEAD_SIZE, 16], gl.NVMMASharedLayout.get_default_for([HEAD_SIZE, 16], gl.int8)
        )
        tbar = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        for s in gl.static_range(STAGES):
            mbarrier.init(tbar.index(s), count=1)
    else:
        v_smem = gl.allocate_shared_memory(gl.int8, [STAGES, HEAD_SIZE, TILE_SIZE], v_shared)
        v_read = v_smem
        tbar = ready
    ks_smem = gl.allocate_shared_memory(gl.float32, [STAGES, TILE_SIZE], s_shared)
    vs_smem = gl.allocate_shared_memory(gl.float32, [STAGES, TILE_SIZE], s_shared)
    vh_smem = gl.allocate_shared_memory(gl.float16, [VH_STAGES, HEAD_SIZE, TILE_SIZE], vh_shared)
    kfree = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    vhfree = gl.allocate_shared_memory(gl.int64, [VH_STAGES, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(ready.index(s), count=1)
        mbarrier.init(kfree.index(s), count=1)
    for h in gl.static_range(VH_STAGES):
        mbarrier.init(vhfree.index(h), count=1)
    block_table_row = block_table_ptr + seq_idx.to(gl.int64) * block_table_stride
    gl.warp_specialize(
        [
            (_sink, (ready, kfree, vhfree, n_tiles, STAGES, VH_STAGES)),
            (
                _producer,
                (
                    k_smem, v_smem, v_read, ks_smem, vs_smem, vh_smem, tbar, ready, kfree, vhfree,
                    block_table_row,
                    k_cache_ptr + kv_head_idx * stride_head,
                    v_cache_ptr + kv_head_idx * stride_head,
                    k_scale_ptr + kv_head_idx * stride_scale_head,
                    v_scale_ptr + kv_head_idx * stride_scale_head,
                    k_desc, v_desc, kv_head_idx, seq_len, tile_lo, n_tiles, stride_page, stride_scale_page,
                    HEAD_SIZE, TILE_SIZE, BLOCK_SIZE, STAGES, VH_STAGES, AHEAD, USE_TMA, ready, False,
                ),
            ),
        ],
        [PRODUCER_WARPS],
        [PRODUCER_REGS],
    )
'''


def make_ws_kernel():
    """The probe around ws_verify.py's producer (its cp.async or TMA form), generated next to it."""
    text = open("experiments/int8_verify_gluon/ws_verify.py").read() + COMMON_SRC + PROBE_WS_SRC
    gen = "/tmp/copy_probe_ws.py"
    open(gen, "w").write(text)
    return load(gen, "copy_probe_ws")


def series_launch(kernel, case, segments, stages, ahead, vh, warps, regs):
    """fn(copy index) launching the probe kernel of the series' producer over ``segments`` per (request, KV head)."""

    def run(i):
        kc, vc, ks, vs = case.int8[i]
        cs, ss = kc.stride(), ks.stride()
        kernel[(4, case.batch, segments)](
            kc, vc, ks, vs, case.block_table, case.seq_lens, segments,
            case.block_table.stride()[0], cs[0], cs[2], ss[0], ss[2],
            HEAD_SIZE=256, BLOCK_SIZE=case.bs, TILE_SIZE=32, STAGES=stages, VH_STAGES=vh, AHEAD=ahead,
            PRODUCER_WARPS=warps, PRODUCER_REGS=regs, num_warps=4, maxnreg=regs,
        )

    return run


def ws_launch(ws_mod, case, segments, descs, stages, ahead, vh, warps, use_tma):
    """fn(copy index) launching ws_verify.py's producer (cp.async, or K / V^T by TMA with ``descs``)."""

    def run(i):
        kc, vc, ks, vs = case.int8[i]
        cs, ss = kc.stride(), ks.stride()
        ws_mod.copy_probe_ws_kernel[(4, case.batch, segments)](
            kc, vc, ks, vs, case.block_table, case.seq_lens, segments,
            case.block_table.stride()[0], cs[0], cs[2], ss[0], ss[2], descs[i]["k_desc"], descs[i]["v_desc"],
            HEAD_SIZE=256, BLOCK_SIZE=case.bs, TILE_SIZE=32, STAGES=stages, VH_STAGES=vh, AHEAD=ahead,
            USE_TMA=use_tma, PRODUCER_WARPS=warps, PRODUCER_REGS=96, num_warps=4, maxnreg=96,
        )

    return run


def time_into(row, key, fn, case):
    """us per call and TB/s of the INT8 cache into ``row``; a configuration that does not fit says so."""
    try:
        us = B.time_graph(fn, case.copies)
        row[key] = round(us, 1)
        row[key + "_tbps"] = round(case.int8_bytes / us / 1e6, 3)
    except Exception as e:
        row[key] = f"{type(e).__name__}: {str(e)[:120]}"
    print(key, row[key], flush=True)


def main():
    out_dir = os.environ.get("OUT", "/tmp")
    forms = {"series": SERIES}
    if os.path.exists("/tmp/ab/nowiden.py"):  # ablate_variant.py's output
        forms["nowiden"] = "/tmp/ab/nowiden.py"
    kernels = {name: make_kernel(path, name) for name, path in forms.items()}
    ws_mod = make_ws_kernel()
    args = types.SimpleNamespace(num_q_heads=24, num_kv_heads=4, head_size=256, copy_bytes=400 * 2**20,
                                 with_unified=False, no_errors=True)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    res = []
    cases = [(1, 131072, 16), (8, 131072, 16), (1, 32768, 16), (8, 32768, 16), (1, 131072, 1600)]
    # (programs per SM, STAGES, AHEAD, widened V tiles, producer warps): shared memory per program 98 / 131 / 82 /
    # 65 / 49 KB.  Producers of 1-2 warps: how much of the copy rate needs four warps (Triton pads the program to 8
    # warps either way, the sink's 4 included).
    configs = [(1, 4, 2, 2, 4), (1, 6, 4, 2, 4), (2, 3, 2, 2, 4), (3, 2, 1, 2, 4), (4, 2, 1, 1, 4),
               (2, 3, 2, 2, 1), (2, 3, 2, 2, 2), (4, 2, 1, 1, 2)]
    for batch, ctx, bs in cases:
        case = B.Case(args, batch, ctx, 1, bs)
        impls = B.make_impls(case, args)
        fa = [k for k in impls if k.startswith("fa")][0]
        row = dict(batch=batch, ctx=ctx, block=bs, int8_bytes=case.int8_bytes,
                   fa3_us=round(B.time_graph(impls[fa][0], case.copies_bf16), 1),
                   decode_us=round(B.time_graph(impls["int8_split_kv"][0], case.copies), 1))
        for name, kernel in kernels.items():
            for per_sm, stages, ahead, vh, warps in configs:
                segments = max(1, per_sm * sms // (batch * 4))
                # 64 registers let 4 programs of 8 warps share a multiprocessor; a 1-warp producer spills there.
                regs = 64 if per_sm > 2 else 96

                time_into(row, f"{name}_p{per_sm}_s{stages}a{ahead}_w{warps}",
                          series_launch(kernel, case, segments, stages, ahead, vh, warps, regs), case)
        # ws_verify.py's producer: the same cp.async form, and K / V^T by TMA (one thread, 16-token boxes).
        for use_tma in (False, True):
            descs = [ws_mod._tma_descriptors(kc, vc, 256, use_tma) for kc, vc, _, _ in case.int8]
            for per_sm, stages, ahead, vh, warps in [(1, 4, 2, 2, 4), (1, 6, 4, 2, 4), (2, 3, 2, 2, 4)]:
                segments = max(1, per_sm * sms // (batch * 4))
                time_into(row, f"ws_{'tma' if use_tma else 'cp'}_p{per_sm}_s{stages}a{ahead}_w{warps}",
                          ws_launch(ws_mod, case, segments, descs, stages, ahead, vh, warps, use_tma), case)
        row["fa3_bf16_tbps"] = round(case.bf16_bytes / row["fa3_us"] / 1e6, 3)
        row["decode_tbps"] = round(case.int8_bytes / row["decode_us"] / 1e6, 3)
        res.append(row)
        print(json.dumps(row), flush=True)
        json.dump(res, open(os.path.join(out_dir, "copy_probe.json"), "w"), indent=1)
        del case, impls
        torch.cuda.empty_cache()
    print("\nTB/s of the INT8 cache (FA3: of its BF16 cache)")
    for r in res:
        cols = " ".join(f"{k[:-5]} {v}" for k, v in r.items() if k.endswith("_tbps") and not isinstance(v, str))
        print(f"b{r['batch']} {r['ctx'] // 1024}K bs{r['block']}: {cols}")


if __name__ == "__main__":
    main()
