"""Variant of the series' wgmma kernel whose Q.K runs in fp16: the producer
widens each tile's K (as it widens V) into a ring beside the widened V, the
consumers hold the query in fp16 (scaled per row by a power of two, so bf16
queries are exact) and run one fp16 wgmma per tile instead of the chained
int8 high and low products (same tensor work; no wait between the two
products and no x254 step, and in the overlap loop the whole next-tile Q.K
runs during this tile's softmax).  Writes OUT (default /tmp/wv/f16k.py).
Env STAGES_CAP: int8 stages used at most (shared memory: the K ring adds
VH_STAGES x 16 KB).
Usage: python f16k_variant.py [OUT]"""
import os, sys

SRC = "vllm/v1/attention/ops/triton_int8_split_kv_wgmma.py"
out = sys.argv[1] if len(sys.argv) > 1 else "/tmp/wv/f16k.py"
s = open(SRC).read()


def rep(old, new, count=1):
    global s
    n = s.count(old)
    assert n == count, (n, old[:80])
    s = s.replace(old, new)


# --- producer: widen K too -------------------------------------------------
rep('''    vh_smem,
    ready,
    kfree,
    vhfree,
    block_table_row,''', '''    vh_smem,
    kh_smem,
    ready,
    kfree,
    vhfree,
    block_table_row,''')
rep('''            vh_smem.index(h).store(_widen(v8))''', '''            vh_smem.index(h).store(_widen(v8))
            k8 = k_smem.index(i % STAGES).load(ROW_LOAD)
            kh_smem.index(h).store(_widen(k8))''')

# --- Q.K in fp16 ---------------------------------------------------------------
rep('''@gluon.jit
def _chained_qk(q_hi_smem, q_lo_smem, k_t, ks, vs, s_zero):''', '''@gluon.jit
def _f16_qk(q16_smem, kh_t, ks, vs, s_zero):
    col_s: gl.constexpr = gl.SliceLayout(0, s_zero.type.layout)
    s = warpgroup_mma(q16_smem, kh_t, s_zero, use_acc=False, is_async=True)
    k_scale = ks.load(col_s)
    v_scale = vs.load(col_s)
    return warpgroup_mma_wait(0, deps=[s]), k_scale, v_scale


@gluon.jit
def _chained_qk(q_hi_smem, q_lo_smem, k_t, ks, vs, s_zero):''')

# consumer signature: q_hi_smem/q_lo_smem -> q16_smem/kh_smem
rep('''def _consumer(
    q_hi_smem,
    q_lo_smem,
    k_smem,''', '''def _consumer(
    q16_smem,
    kh_smem,
    k_smem,''')
rep('''    s_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[NUM_WARPS, 1], instr_shape=[16, TILE_SIZE, 32]
    )''', '''    s_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[NUM_WARPS, 1], instr_shape=[16, TILE_SIZE, 16]
    )''')
rep('''    q_amax = gl.max(gl.abs(Q), axis=1)
    q_scale = gl.where(q_amax > 0.0, q_amax / 127.0, 1.0)
    Q = Q / gl.expand_dims(q_scale, 1)
    q_hi = gl.floor(Q + 0.5)
    q_lo_smem.store(gl.floor((Q - q_hi) * 254.0 + 0.5).to(gl.int8))
    q_hi_smem.store(q_hi.to(gl.int8))
    fence_async_shared()
    gl.thread_barrier()
    row_qk_scale = gl.convert_layout(q_scale * (qk_scale / 254.0), row_s)''', '''    q_amax = gl.max(gl.abs(Q), axis=1)
    # A power of two with |Q / q_scale| <= 2**15: bf16 queries stay exact.
    q_scale = gl.where(q_amax > 0.0, gl.exp2(gl.ceil(gl.log2(q_amax)) - 14.0), 1.0)
    q16_smem.store((Q / gl.expand_dims(q_scale, 1)).to(gl.float16))
    fence_async_shared()
    gl.thread_barrier()
    row_qk_scale = gl.convert_layout(q_scale * qk_scale, row_s)''')
rep('''    s_zero = gl.zeros([ROWS, TILE_SIZE], gl.int32, s_layout)''',
    '''    s_zero = gl.zeros([ROWS, TILE_SIZE], gl.float32, s_layout)''')
rep('''            s_int, k_scale, v_scale = _chained_qk(
                q_hi_smem,
                q_lo_smem,
                k_smem.index(s).permute([1, 0]),''', '''            s_int, k_scale, v_scale = _f16_qk(
                q16_smem,
                kh_smem.index(i % VH_STAGES).permute([1, 0]),''')
rep('''            s_int, k_scale, v_scale = _chained_qk(
                q_hi_smem,
                q_lo_smem,
                k_smem.index(0).permute([1, 0]),''', '''            s_int, k_scale, v_scale = _f16_qk(
                q16_smem,
                kh_smem.index(0).permute([1, 0]),''')
rep('''            k_n = k_smem.index(s_n).permute([1, 0])
            s_nxt = warpgroup_mma(q_hi_smem, k_n, s_zero, use_acc=False, is_async=True)''', '''            h_n = gl.where(h == VH_STAGES - 1, 0, h + 1)
            k_n = kh_smem.index(h_n).permute([1, 0])
            s_nxt = warpgroup_mma(q16_smem, k_n, s_zero, use_acc=False, is_async=True)''')
rep('''            s_nxt = warpgroup_mma_wait(0, deps=[s_nxt])
            s_nxt = warpgroup_mma(
                q_lo_smem, k_n, s_nxt * 254, use_acc=True, is_async=True
            )
''', '')

# --- kernel: shared memory and arguments -------------------------------------
cap = int(os.environ.get("STAGES_CAP", "0"))
if cap:
    # Fewer int8 stages than the launcher's STAGES (renamed STAGES_IN).
    rep("    STAGES: gl.constexpr,  # int8 stages (K, V, scales)\n",
        "    STAGES_IN: gl.constexpr,  # int8 stages (K, V, scales)\n")
    rep('''    # Each consumer warpgroup holds 64 rows.
    ROWS: gl.constexpr = 64''', f'''    # Each consumer warpgroup holds 64 rows.
    ROWS: gl.constexpr = 64
    STAGES: gl.constexpr = min(STAGES_IN, {cap})''')
rep('''    q_hi0 = gl.allocate_shared_memory(gl.int8, [ROWS, HEAD_SIZE], q_shared)
    q_lo0 = gl.allocate_shared_memory(gl.int8, [ROWS, HEAD_SIZE], q_shared)
    q_hi1 = gl.allocate_shared_memory(gl.int8, [ROWS, HEAD_SIZE], q_shared)
    q_lo1 = gl.allocate_shared_memory(gl.int8, [ROWS, HEAD_SIZE], q_shared)''', '''    q16_shared: gl.constexpr = gl.NVMMASharedLayout.get_default_for(
        [ROWS, HEAD_SIZE], gl.float16
    )
    kh_shared: gl.constexpr = gl.NVMMASharedLayout.get_default_for(
        [TILE_SIZE, HEAD_SIZE], gl.float16
    )
    q16_0 = gl.allocate_shared_memory(gl.float16, [ROWS, HEAD_SIZE], q16_shared)
    q16_1 = gl.allocate_shared_memory(gl.float16, [ROWS, HEAD_SIZE], q16_shared)
    kh_smem = gl.allocate_shared_memory(
        gl.float16, [VH_STAGES, TILE_SIZE, HEAD_SIZE], kh_shared
    )''')
rep('''                    vh_smem,
                    ready,
                    kfree,
                    vhfree,
                    block_table_row,''', '''                    vh_smem,
                    kh_smem,
                    ready,
                    kfree,
                    vhfree,
                    block_table_row,''')
rep('''                    q_hi0,
                    q_lo0,''', '''                    q16_0,
                    kh_smem,''')
rep('''                    q_hi1,
                    q_lo1,''', '''                    q16_1,
                    kh_smem,''')
if cap:
    # The launcher passes STAGES= by keyword: hand it on as STAGES_IN.
    s += """

class _StagesIn:
    def __init__(self, kernel):
        self.kernel = kernel

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            kwargs["STAGES_IN"] = kwargs.pop("STAGES")
            return self.kernel[grid](*args, **kwargs)

        return launch


kernel_int8_split_kv_verify_wgmma = _StagesIn(kernel_int8_split_kv_verify_wgmma)
"""
open(out, "w").write(s)
print("wrote", out)
