"""The series' wgmma verify kernel with its K/V/scale copies issued by TMA (one thread) instead of per-thread cp.async.

Built at import by edits to vllm/v1/attention/ops/triton_int8_split_kv_wgmma.py (no copy kept here).  Each 16-token
run of a tile is one TMA box per operand: K rows [16, HEAD] into the tile's rows of the 128-byte-swizzled K stage,
V^T [HEAD, 16] into a per-run stage that the widening reads, the scales [1, 16] into per-run slots that read back as
the tile's [TILE] scales; one mbarrier per stage counts the bytes.  `kernel_int8_split_kv_verify_wgmma` here is a
launcher-compatible object: the series' launcher calls it with the cache tensors and strides, and it adds the tensor
descriptors (row views of the caches' storage).  So `ab_runs.py` takes it as
VARIANTS="tma=experiments/int8_verify_gluon/tma_variant.py".

Why (phase_clock.py, H200): issuing a tile's cp.async copies took ~720 of its ~3,100 cycles per program.
Result (H200, ab_runs.py, 2026-12-02; results/kernels/int8_verify_tma_ab_nvidia_h200.json): correct (error against the
dequantised cache 0.0017, as the series) but 1.12-1.26x SLOWER than the series' cp.async kernel on every timed case
(128K batch 1 verify-6: 156.4 vs 130.5 us at blocks of 16, 152.7 vs 122.0 at 1600; verify-16 293.7 vs 243.3).  The
copy issue was hidden by the other program on the SM; TMA adds 15 CTA barriers per tile (one before each copy), the
mbarrier wait, and loses the early V read.  Descriptors are 4-D [block, KV head, token, channel] views of the planar
caches (a head's K rows start 520 * block_size bytes apart, not a multiple of 256), and each run's scales land in a
128-byte-aligned slot (TMA's shared-memory alignment; 64-byte slots gave "misaligned address").
Caveat (seen in an earlier standalone prototype, since removed): Triton puts a CTA barrier before every TMA copy,
8 per 32-token tile here.
Offline: `CUDA_VISIBLE_DEVICES= python experiments/int8_verify_gluon/tma_variant.py` compiles it for sm_90 and prints
registers, spills and whether ptxas serialised the wgmma."""
import importlib.util
import os
import re
import sys
import tempfile

SRC = "vllm/v1/attention/ops/triton_int8_split_kv_wgmma.py"

ISSUE_TMA = '''@gluon.jit
def _issue_tile(
    k_desc,
    v_desc,
    ks_desc,
    vs_desc,
    k_smem,
    v_smem,
    ks_smem,
    vs_smem,
    bars,
    stage,
    tile,
    blocks,
    kv_head,
    HEAD_SIZE: gl.constexpr,
    TILE_SIZE: gl.constexpr,
    BLOCK_SIZE: gl.constexpr,
):
    RUN_COUNT: gl.constexpr = TILE_SIZE // 16
    bar = bars.index(stage)
    mbarrier.expect(bar, RUN_COUNT * (2 * 16 * HEAD_SIZE + 2 * 16 * 4))
    runs = gl.arange(0, RUN_COUNT, layout=blocks.type.layout)
    for r in gl.static_range(RUN_COUNT):
        block = gl.sum(gl.where(runs == r, blocks, 0), axis=0)
        in_block = (tile * TILE_SIZE + 16 * r) % BLOCK_SIZE
        tma.async_copy_global_to_shared(
            k_desc,
            [block, kv_head, in_block, 0],
            bar,
            k_smem.index(stage).slice(16 * r, 16),
        )
        tma.async_copy_global_to_shared(
            v_desc,
            [block, kv_head, 0, in_block],
            bar,
            v_smem.index(stage * RUN_COUNT + r),
        )
        tma.async_copy_global_to_shared(ks_desc, [block, kv_head, in_block], bar, ks_smem.index(2 * (stage * RUN_COUNT + r)))
        tma.async_copy_global_to_shared(vs_desc, [block, kv_head, in_block], bar, vs_smem.index(2 * (stage * RUN_COUNT + r)))


'''

ISSUE_ARGS = '''                k_desc,
                v_desc,
                ks_desc,
                vs_desc,
                k_smem,
                v_smem,
                ks_smem,
                vs_smem,
                bars,
                STAGE_ARG,
                TILE_ARG,
                BLOCKS_ARG,
                kv_head_idx,
                                                                                        HEAD_SIZE,
                TILE_SIZE,
                BLOCK_SIZE,
            )
'''


def _sub(s, start, end, new, count=1):
    """Replace the text from `start` up to (not including) `end`."""
    a = s.index(start)
    b = s.index(end, a)
    return s[:a] + new + s[b:]


def build_source() -> str:
    s = open(SRC).read()
    s = s.replace(
        "        warpgroup_mma_wait,\n    )\n",
        "        warpgroup_mma_wait,\n    )\n"
        "    from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma\n",
        1,
    )
    s = _sub(s, "@gluon.jit\ndef _run_bases(", '@gluon.jit(do_not_specialize=', ISSUE_TMA)
    s = s.replace(
        "    RESCALE_THRESHOLD: gl.constexpr,\n):",
        "    RESCALE_THRESHOLD: gl.constexpr,\n    k_desc,\n    v_desc,\n    ks_desc,\n    vs_desc,\n"
        "):",
        1,
    )
    alloc_old_start = "    v_smem = gl.allocate_shared_memory(\n"
    alloc_new = (
        "    RUN_COUNT: gl.constexpr = TILE_SIZE // 16\n"
        "    v_smem = gl.allocate_shared_memory(\n"
        "        gl.int8, [STAGES * RUN_COUNT, 1, 1, HEAD_SIZE, 16], v_desc.layout\n    )\n"
        "    # 16-byte rows: no swizzle, so the boxes read back as [HEAD_SIZE, 16] tiles.\n"
        "    v_runs = v_smem._reinterpret(\n        gl.int8, [STAGES * RUN_COUNT, HEAD_SIZE, 16],\n"
        "        gl.NVMMASharedLayout.get_default_for([HEAD_SIZE, 16], gl.int8),\n    )\n"
        "    ks_smem = gl.allocate_shared_memory(\n"
        "        gl.float32, [STAGES * RUN_COUNT * 2, 1, 1, 16], ks_desc.layout\n    )\n"
        "    vs_smem = gl.allocate_shared_memory(\n"
        "        gl.float32, [STAGES * RUN_COUNT * 2, 1, 1, 16], vs_desc.layout\n    )\n"
        "    # A run's scales take 64 of a 128-byte slot (TMA writes 128-byte-aligned\n"
        "    # shared memory): read back as [runs, 16] per stage.\n"
        "    s_runs: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])\n"
        "    ks_rows = ks_smem._reinterpret(gl.float32, [STAGES, RUN_COUNT, 32], s_runs)\n"
        "    vs_rows = vs_smem._reinterpret(gl.float32, [STAGES, RUN_COUNT, 32], s_runs)\n"
        "    bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())\n"
        "    for s in gl.static_range(STAGES):\n        mbarrier.init(bars.index(s), count=1)\n"
    )
    s = _sub(s, alloc_old_start, "    vh_smem = gl.allocate_shared_memory(", alloc_new)
    # Drop the cp.async offsets; the prologue and loop issue by TMA.
    s = _sub(s, "    # Offsets of K and V^T bytes within their 16-token run", "    for p in gl.static_range(STAGES - 1):", "")
    pro = ISSUE_ARGS.replace("STAGE_ARG", "p").replace("TILE_ARG", "tile_lo + p").replace(
        "BLOCKS_ARG", "_tile_blocks(\n                    block_table_row, tile_lo + p, seq_len, TILE_SIZE, BLOCK_SIZE, RUNS\n                )")
    a = s.index("    for p in gl.static_range(STAGES - 1):")
    b = s.index("            _issue_tile(\n", a) + len("            _issue_tile(\n")
    c = s.index("        async_copy.commit_group()\n", b)
    s = s[:b] + pro + s[c + len("        async_copy.commit_group()\n"):]
    loop_top_old = s[s.index("        stage = (j - tile_lo) % STAGES\n"):s.index("        # Every thread is past the previous tile")]
    s = s.replace(loop_top_old, "        stage = (j - tile_lo) % STAGES\n"
                  "        mbarrier.wait(bars.index(stage), ((j - tile_lo) // STAGES) & 1)\n"
                  "        gl.thread_barrier()\n", 1)
    s = s.replace(
        "        # This tile's int8 V is read now, so that the copies issued next hide\n"
        "        # the shared-memory latency before it is widened.\n"
        "        v8 = v_smem.index(stage).load(V_LOAD)\n", "", 1)
    lp = ISSUE_ARGS.replace("STAGE_ARG", "(next_tile - tile_lo) % STAGES").replace("TILE_ARG", "next_tile").replace(
        "BLOCKS_ARG", "next_blocks").replace("\n                ", "\n                ")
    a = s.index("        if next_tile < tile_hi:\n            _issue_tile(\n")
    b = a + len("        if next_tile < tile_hi:\n            _issue_tile(\n")
    c = s.index("        async_copy.commit_group()\n", b)
    s = s[:b] + lp + s[c + len("        async_copy.commit_group()\n"):]
    s = s.replace(
        "        vh_smem.store(_widen(v8))\n",
        "        for r in gl.static_range(RUN_COUNT):\n"
        "            vh_smem.slice(16 * r, 16, dim=1).store(\n"
        "                _widen(v_runs.index(stage * RUN_COUNT + r).load(V_RUN))\n            )\n",
        1,
    )
    s = s.replace("        k_scale = ks_smem.index(stage).load(col_s)\n        v_scale = vs_smem.index(stage).load(col_s)\n",
                  "        k_scale = gl.convert_layout(gl.reshape(\n"
        "            ks_rows.index(stage).slice(0, 16, dim=1).load(S_RUNS), [TILE_SIZE]), col_s)\n"
        "        v_scale = gl.convert_layout(gl.reshape(\n"
        "            vs_rows.index(stage).slice(0, 16, dim=1).load(S_RUNS), [TILE_SIZE]), col_s)\n", 1)
    s = s.replace("    async_copy.wait_group(0)\n",
                  "    for s in gl.static_range(STAGES):\n        mbarrier.invalidate(bars.index(s))\n", 1)
    s = s.replace("    S_LOAD: gl.constexpr = gl.BlockedLayout([1], [32], [NUM_WARPS], [0])\n",
                  "    S_LOAD: gl.constexpr = gl.BlockedLayout([1], [32], [NUM_WARPS], [0])\n"
                  "    V_RUN: gl.constexpr = gl.BlockedLayout([1, 16], [32, 1], [NUM_WARPS, 1], [1, 0])\n"
                  "    S_RUNS: gl.constexpr = gl.BlockedLayout([1, 1], [2, 16], [NUM_WARPS, 1], [1, 0])\n", 1)
    return s


def load_module():
    path = os.path.join(tempfile.mkdtemp(), "wgmma_tma.py")
    open(path, "w").write(build_source())
    spec = importlib.util.spec_from_file_location("wgmma_tma", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _rows(t, row_elems):
    """The storage of `t` from its offset on, as rows of `row_elems` elements."""
    import torch
    n = t.untyped_storage().nbytes() // t.element_size() - t.storage_offset()
    return torch.as_strided(t, (n // row_elems, row_elems), (row_elems, 1))


class TmaLaunch:
    """Called like the series' Gluon kernel (kernel[grid](*args, **kwargs)); adds the tensor descriptors."""

    def __init__(self, kernel):
        self.kernel = kernel

    def __getitem__(self, grid):
        def launch(*args, **kw):
            from triton.experimental.gluon import language as gl
            from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
            k_cache, v_cache, k_scale, v_scale = args[5:9]
            bs, head = kw["BLOCK_SIZE"], kw["HEAD_SIZE"]
            lay = gl.NVMMASharedLayout.get_default_for
            # [block, KV head, token, channel] (K), [block, KV head, channel, token] (V^T),
            # [block, KV head, token] (scales): the planar views' own strides, permuted.
            kv, vv = k_cache.permute(0, 2, 1, 3), v_cache.permute(0, 2, 3, 1)
            ksv, vsv = k_scale.permute(0, 2, 1), v_scale.permute(0, 2, 1)
            descs = dict(
                k_desc=TensorDescriptor.from_tensor(kv, [1, 1, 16, head], lay([1, 1, 16, head], gl.int8)),
                v_desc=TensorDescriptor.from_tensor(vv, [1, 1, head, 16], lay([1, 1, head, 16], gl.int8)),
                ks_desc=TensorDescriptor.from_tensor(ksv, [1, 1, 16], lay([1, 1, 16], gl.float32)),
                vs_desc=TensorDescriptor.from_tensor(vsv, [1, 1, 16], lay([1, 1, 16], gl.float32)))
            return self.kernel[grid](*args, **kw, **descs)
        return launch


def _offline():
    """Compile for sm_90 on this machine: registers, spills, loop size, wgmma serialisation."""
    import torch
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    from triton.runtime.jit import mangle_type
    sys.path.insert(0, os.path.dirname(__file__))
    from sass_stats import build, loop_stats, sass, wgmma_serialized
    k = load_module().kernel_int8_split_kv_verify_wgmma
    bs = int(sys.argv[1]) if len(sys.argv) > 1 else 16
    lay = gl.NVMMASharedLayout.get_default_for
    i8, f32 = torch.empty(1 << 20, dtype=torch.int8), torch.empty(1 << 12, dtype=torch.float32)
    page, hs = 4 * 520 * bs, 520 * bs
    descs = dict(k_desc=TensorDescriptor(i8, [4, 4, bs, 256], [page, hs, 256, 1], [1, 1, 16, 256], lay([1, 1, 16, 256], gl.int8)),
                 v_desc=TensorDescriptor(i8, [4, 4, 256, bs], [page, hs, bs, 1], [1, 1, 256, 16], lay([1, 1, 256, 16], gl.int8)),
                 ks_desc=TensorDescriptor(f32, [4, 4, bs], [page // 4, hs // 4, 1], [1, 1, 16], lay([1, 1, 16], gl.float32)),
                 vs_desc=TensorDescriptor(f32, [4, 4, bs], [page // 4, hs // 4, 1], [1, 1, 16], lay([1, 1, 16], gl.float32)))
    types = {n: mangle_type(d) for n, d in descs.items()}
    consts = dict(num_query_heads=24, NUM_QUERIES_PER_KV=6, ROW_SPLITS=1, HEAD_SIZE=256, BLOCK_SIZE=bs, TILE_SIZE=32,
                  STAGES=3, P_LOG2_SCALE=6.0, RESCALE_THRESHOLD=8.0)
    c = build(None, k, consts, types=types, gluon=True)
    usage, s = sass(c)
    print(re.findall(r"REG:\d+ STACK:\d+ SHARED:\d+", usage), "smem", c.metadata.shared)
    for lo, hi, n, ops in loop_stats(s):
        print(hex(lo), hex(hi), n, dict(ops.most_common(24)))
    print("wgmma serialised:", wgmma_serialized(c))


if __name__ == "__main__":
    _offline()
else:
    kernel_int8_split_kv_verify_wgmma = TmaLaunch(load_module().kernel_int8_split_kv_verify_wgmma)
