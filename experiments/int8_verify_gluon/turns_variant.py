"""Variant of the series' wgmma verify kernel (65-128 rows, no window) whose
two consumers take turns on the tensor cores (FlashAttention-3's
inter-warpgroup ping-pong): a consumer's GEMM phase (P.V of its tile and
Q.K of its next tile) runs while the other one computes its softmax, handed
over by a pair of mbarriers.  Tried before with the high/low query pair (no
gain, ws_verify.py PINGPONG=1); with one Q.K product a GEMM phase is 384
tensor cycles per tile at full rate against 512, so the softmax may hide it.
Writes OUT_DIR/turns.py, where a consumer hands the turn over once its GEMMs
are done, and OUT_DIR/turns_issue.py, where it hands it over as soon as they
are issued (FlashAttention-3's order: the other consumer's GEMMs then queue
right behind on the tensor cores instead of waiting for the wait's return).
Usage: python turns_variant.py [OUT_DIR] (repo root)"""
import os
import sys

SRC = "vllm/v1/attention/ops/triton_int8_split_kv_wgmma.py"
out_dir = sys.argv[1] if len(sys.argv) > 1 else "/tmp/wv"
os.makedirs(out_dir, exist_ok=True)
s = open(SRC).read()


def rep(old, new, count=1):
    global s
    assert s.count(old) == count, (s.count(old), old[:80])
    s = s.replace(old, new)


# The consumers get the turn barriers: their signature, then both calls.
for indent, count in (("    ", 1), (" " * 20, 2)):
    rep(
        "".join(f"{indent}{a},\n" for a in ("ready", "kfree", "vhfree", "out_ptr")),
        "".join(f"{indent}{a},\n" for a in ("ready", "kfree", "vhfree", "turn", "out_ptr")),
        count,
    )
rep('''    vhfree = gl.allocate_shared_memory(gl.int64, [VH_STAGES, 1], bar_layout)''',
    '''    vhfree = gl.allocate_shared_memory(gl.int64, [VH_STAGES, 1], bar_layout)
    turn = gl.allocate_shared_memory(gl.int64, [2, 1], bar_layout)
    mbarrier.init(turn.index(0), count=1)
    mbarrier.init(turn.index(1), count=1)''')

start = s.index("        gl.static_assert(TILE_SIZE == 32 and VH_STAGES > 2)\n")
end = s.index("    rows = my_row0 + gl.arange(0, ROWS, layout=row_o)\n")
loop = '''        gl.static_assert(VH_STAGES > 1)
        # Phase k of consumer 0 follows phase k - 1 of consumer 1, phase k of
        # consumer 1 follows phase k of consumer 0; t tiles make t + 1 phases.
        if my_tiles > 0:
            if C == 0:
                mbarrier.wait(turn.index(0), 1)
            else:
                mbarrier.wait(turn.index(1), 0)
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
            mbarrier.arrive(turn.index(1 - C))
            h = 0
            for it in range(my_tiles):
                P_v, acc, m_i, l_i, v_ref = _softmax_tile(
                    s_int,
                    k_scale,
                    v_scale,
                    tile_lo + it,
                    m_i,
                    l_i,
                    acc,
                    v_ref,
                    row_qk_scale,
                    t_col,
                    seq_len,
                    q_pos,
                    kv_limit,
                    full_lo,
                    full_hi,
                    TILE_SIZE,
                    P_LOG2_SCALE,
                    RESCALE_THRESHOLD,
                    SLIDING_WINDOW,
                    True,
                )
                if C == 0:
                    mbarrier.wait(turn.index(0), it & 1)
                else:
                    mbarrier.wait(turn.index(1), (it + 1) & 1)
                acc = warpgroup_mma(
                    P_v, vh_smem.index(h).permute([1, 0]), acc, is_async=True
                )
                has_next = it + 1 < my_tiles
                s_n = (it + 1) % STAGES
                # After the last tile this Q.K reads a stage that may be
                # refilling; its result is not used.
                mbarrier.wait(
                    ready.index(s_n), ((it + 1) // STAGES) & 1, pred=has_next
                )
                s_nxt = warpgroup_mma(
                    q_hi_smem,
                    k_smem.index(s_n).permute([1, 0]),
                    s_zero,
                    use_acc=False,
                    is_async=True,
                )
                # AT_ISSUE
                k_scale = ks_smem.index(s_n).load(col_s)
                v_scale = vs_smem.index(s_n).load(col_s)
                acc, s_int = warpgroup_mma_wait(0, deps=[acc, s_nxt])
                mbarrier.arrive(vhfree.index(h))
                mbarrier.arrive(kfree.index(s_n), pred=has_next)
                # WHEN_DONE
                h = gl.where(h == VH_STAGES - 1, 0, h + 1)

'''
body = s[:start] + loop + s[end:]
# Where a consumer hands the turn over: one variant per marker.
ARRIVE = "                mbarrier.arrive(turn.index(1 - C))\n"
for name, where in (("turns", "WHEN_DONE"), ("turns_issue", "AT_ISSUE")):
    text = body
    for marker in ("AT_ISSUE", "WHEN_DONE"):
        line = f"                # {marker}\n"
        assert text.count(line) == 1, marker
        text = text.replace(line, ARRIVE if marker == where else "")
    open(os.path.join(out_dir, name + ".py"), "w").write(text)
    print("wrote", os.path.join(out_dir, name + ".py"))
