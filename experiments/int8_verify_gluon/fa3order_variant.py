"""Variant of the series' wgmma verify kernel (65-128 rows, no window) whose
consumers order a tile's work as FlashAttention-3's mainloop does: tile i's
Q.K and tile i-1's P.V are issued together, tile i's softmax runs while
that P.V is on the tensor cores, and the accumulator is rescaled (where a
warp's rows moved) after it.  The series' loop issues tile i+1's Q.K
during tile i's softmax but waits for tile i's P.V before the next softmax,
so a tile costs softmax + P.V; with one int8 Q.K product, P.V is the longer
product.  Writes OUT_DIR/fa3order.py.
Usage: python fa3order_variant.py [OUT_DIR]   (from the repo root)"""
import os
import sys

SRC = "vllm/v1/attention/ops/triton_int8_split_kv_wgmma.py"
out_dir = sys.argv[1] if len(sys.argv) > 1 else "/tmp/wv"
os.makedirs(out_dir, exist_ok=True)
s = open(SRC).read()


def rep(old, new):
    global s
    assert s.count(old) == 1, (s.count(old), old[:80])
    s = s.replace(old, new)


# Softmax without the accumulator: returns the rows' rescale factor.
rep('''@gluon.jit
def _consumer(''', '''@gluon.jit
def _softmax_p(
    s_int,
    k_scale,
    v_scale,
    j,
    m_i,
    l_i,
    v_ref,
    row_qk_scale,
    t_col,
    seq_len,
    q_pos,
    kv_limit,
    full_lo,
    full_hi,
    row_o: gl.constexpr,
    p_layout: gl.constexpr,
    TILE_SIZE: gl.constexpr,
    P_LOG2_SCALE: gl.constexpr,
    RESCALE_THRESHOLD: gl.constexpr,
):
    pos = j * TILE_SIZE + t_col
    masked = (j >= full_hi) | (j < full_lo)
    if masked:
        k_scale = gl.where(pos < seq_len, k_scale, 0.0)
        v_scale = gl.where(pos < seq_len, v_scale, 0.0)
    S = (
        s_int.to(gl.float32)
        * gl.expand_dims(row_qk_scale, 1)
        * gl.expand_dims(k_scale, 0)
    )
    if masked:
        kv_pos = gl.expand_dims(pos, 0)
        visible = kv_pos < gl.expand_dims(kv_limit, 1)
        S = gl.where(visible, S, float("-inf"))
    tile_max = gl.max(S, axis=1)
    new_v_ref = gl.maximum(gl.max(v_scale, axis=0), v_ref)
    m_new = gl.where(tile_max > m_i + RESCALE_THRESHOLD, tile_max, m_i)
    alpha = gl.exp2(m_i - m_new)
    l_i = l_i * alpha
    v_ratio = gl.where(new_v_ref > v_ref, v_ref / new_v_ref, 1.0)
    alpha = gl.where(m_new > m_i, alpha, 1.0)
    factor = gl.convert_layout(alpha * v_ratio, row_o)
    P = gl.exp2(S - gl.expand_dims(m_new - P_LOG2_SCALE, 1))
    l_i += gl.sum(P, axis=1)
    P_v = gl.convert_layout(
        (P * gl.expand_dims(v_scale / new_v_ref, 0)).to(gl.float16), p_layout
    )
    return P_v, factor, m_new, l_i, new_v_ref


@gluon.jit
def _consumer(''')

start = s.index("        gl.static_assert(TILE_SIZE == 32 and VH_STAGES > 2)\n")
end = s.index("    rows = my_row0 + gl.arange(0, ROWS, layout=row_o)\n")
new_loop = '''        gl.static_assert(TILE_SIZE == 32 and VH_STAGES > 2)
        p_layout: gl.constexpr = gl.DotOperandLayout(
            operand_index=0, parent=o_layout, k_width=2
        )
        if my_tiles > 0:
            mbarrier.wait(ready.index(0), 0)
            s_int, k_scale, v_scale = _tile_qk(
                q_hi_smem,
                q_lo_smem,
                k_smem.index(0).permute([1, 0]),
                ks_smem.index(0),
                vs_smem.index(0),
                s_zero,
                QUERY_PAIR,
            )
            mbarrier.arrive(kfree.index(0))
            P_v, factor, m_i, l_i, v_ref = _softmax_p(
                s_int, k_scale, v_scale, tile_lo, m_i, l_i, v_ref, row_qk_scale,
                t_col, seq_len, q_pos, kv_limit, full_lo, full_hi, row_o, p_layout,
                TILE_SIZE, P_LOG2_SCALE, RESCALE_THRESHOLD,
            )
            h = 0
            for i in range(1, my_tiles):
                s_i = i % STAGES
                mbarrier.wait(ready.index(s_i), (i // STAGES) & 1)
                s_int = warpgroup_mma(
                    q_hi_smem, k_smem.index(s_i).permute([1, 0]), s_zero,
                    use_acc=False, is_async=True,
                )
                acc = warpgroup_mma(
                    P_v, vh_smem.index(h).permute([1, 0]), acc, is_async=True
                )
                k_scale = ks_smem.index(s_i).load(col_s)
                v_scale = vs_smem.index(s_i).load(col_s)
                s_int = warpgroup_mma_wait(1, deps=[s_int])
                mbarrier.arrive(kfree.index(s_i))
                P_v, factor, m_i, l_i, v_ref = _softmax_p(
                    s_int, k_scale, v_scale, tile_lo + i, m_i, l_i, v_ref,
                    row_qk_scale, t_col, seq_len, q_pos, kv_limit, full_lo,
                    full_hi, row_o, p_layout, TILE_SIZE, P_LOG2_SCALE,
                    RESCALE_THRESHOLD,
                )
                acc = warpgroup_mma_wait(0, deps=[acc])
                mbarrier.arrive(vhfree.index(h))
                acc = _rescale_if_moved(acc, factor)
                h = gl.where(h == VH_STAGES - 1, 0, h + 1)
            acc = warpgroup_mma(
                P_v, vh_smem.index(h).permute([1, 0]), acc, is_async=True
            )
            acc = warpgroup_mma_wait(0, deps=[acc])
            mbarrier.arrive(vhfree.index(h))

'''
s = s[:start] + new_loop + s[end:]
open(os.path.join(out_dir, "fa3order.py"), "w").write(s)
print("wrote", out_dir + "/fa3order.py")
