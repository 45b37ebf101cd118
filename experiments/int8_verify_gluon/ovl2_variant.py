"""Variants of the series' wgmma verify kernel (issue 20, 2026-12-06, tenth session).

* ``trim``: the softmax's per-element work cut where the SASS shows it (all modes):
  the row's query scale multiplies the exp2 argument through one FFMA instead of
  an FMUL per score (the row maximum is taken before it: the scale is positive),
  and the V-scale factor of P is ``v_scale * (1 / v_ref)`` (one division a tile)
  instead of a full-range division per column (24 instructions a thread a tile,
  8 of them predicated range fix-ups).
* ``fa3p`` / ``fa3pu``: the 65-128-row loop in FlashAttention-3's order: tile i's
  Q.K and tile i-1's P.V issued together, tile i's softmax during that P.V, the
  previous tile's P operand kept live through the wait (``deps``) so that ptxas
  does not reuse its registers (and wait) halfway through the softmax, which is
  what made ``fa3order_variant.py`` slower; ``fa3pu`` runs the full tiles in a
  loop without mask code.  (A first form that kept a P.V in flight across the
  loop's back edge made ptxas serialise every wgmma, C7514; removed.)
* ``sfa3``: the same order for alternate tiles, four widened V tiles.
* ``...trim``: with ``trim``.
* ``deep`` (alternate tiles only): 6 int8 stages, 4 tiles copied ahead.

Writes OUT_DIR/{trim,deep,fa3p,fa3ptrim,fa3pu,fa3putrim,sfa3,sfa3trim}.py.
Usage: python experiments/int8_verify_gluon/ovl2_variant.py [OUT_DIR] (repo root)."""
import os
import re
import sys

SRC = os.environ.get("SRC", "vllm/v1/attention/ops/triton_int8_split_kv_wgmma.py")
BASE = open(SRC).read()


def rep(s, old, new):
    assert s.count(old) == 1, (s.count(old), old[:80])
    return s.replace(old, new)


def trim(s):
    s = rep(s, '''    S = (
        s_int.to(gl.float32)
        * gl.expand_dims(row_qk_scale, 1)
        * gl.expand_dims(k_scale, 0)
    )
    if masked:''', '''    # Scores without the row's query scale (positive): it enters the row
    # maximum once and the exp2 argument through one FFMA.
    S = s_int.to(gl.float32) * gl.expand_dims(k_scale, 0)
    if masked:''')
    s = rep(s, '''    tile_max = gl.max(S, axis=1)
    new_v_ref = gl.maximum(gl.max(v_scale, axis=0), v_ref)''', '''    tile_max = gl.max(S, axis=1) * row_qk_scale
    new_v_ref = gl.maximum(gl.max(v_scale, axis=0), v_ref)
    inv_v_ref = 1.0 / new_v_ref''')
    s = rep(s, '''        v_ratio = gl.where(new_v_ref > v_ref, v_ref / new_v_ref, 1.0)
        alpha = gl.where(m_new > m_i, alpha, 1.0)
        acc = _rescale_if_moved(acc, gl.convert_layout(alpha * v_ratio, row_o))''',
              '''        v_ratio = gl.where(new_v_ref > v_ref, v_ref * inv_v_ref, 1.0)
        alpha = gl.where(m_new > m_i, alpha, 1.0)
        acc = _rescale_if_moved(acc, gl.convert_layout(alpha * v_ratio, row_o))''')
    s = rep(s, '''    P = gl.exp2(S - gl.expand_dims(m_new - P_LOG2_SCALE, 1))
    l_i += gl.sum(P, axis=1)
    P_v = gl.convert_layout(
        (P * gl.expand_dims(v_scale / new_v_ref, 0)).to(gl.float16), p_layout
    )
    return P_v, acc, m_new, l_i, new_v_ref''', '''    P = gl.exp2(
        gl.fma(
            S,
            gl.expand_dims(row_qk_scale, 1),
            gl.expand_dims(P_LOG2_SCALE - m_new, 1),
        )
    )
    l_i += gl.sum(P, axis=1)
    P_v = gl.convert_layout(
        (P * gl.expand_dims(v_scale * inv_v_ref, 0)).to(gl.float16), p_layout
    )
    return P_v, acc, m_new, l_i, new_v_ref''')
    return s


def factor_only(s):
    # The softmax can return the rows' rescale factor instead of applying it.
    s = rep(s, '''    SKIP_UNMOVED: gl.constexpr,
):''', '''    SKIP_UNMOVED: gl.constexpr,
    FACTOR_ONLY: gl.constexpr = False,
):''')
    return rep(s, '''        acc = _rescale_if_moved(acc, gl.convert_layout(alpha * v_ratio, row_o))''',
               '''        if FACTOR_ONLY:
            acc = gl.convert_layout(alpha * v_ratio, row_o)
        else:
            acc = _rescale_if_moved(acc, gl.convert_layout(alpha * v_ratio, row_o))''')


KERNEL_ROWS = "    # Each consumer warpgroup holds 64 rows.\n    ROWS: gl.constexpr = 64\n"


def retarget(s, names, decls):
    """In the kernel's body (after its ROWS line), pass the constexprs ``names``
    maps to instead of the launcher's, declared by ``decls``."""
    head, body = s.split(KERNEL_ROWS, 1)
    for old, new in names.items():
        body = re.sub(rf"\b{old}\b(?=,|\))", new, body)
    return head + KERNEL_ROWS + decls + body


def four_widened_tiles(s, cond):
    # Four widened V tiles where ``cond`` (constexprs of the kernel) holds,
    # whatever VH_STAGES the launcher passes.
    return retarget(
        s,
        {"VH_STAGES": "VHS"},
        f"    if {cond}:\n        VHS: gl.constexpr = 4\n"
        "    else:\n        VHS: gl.constexpr = VH_STAGES\n",
    )


def deep(s):
    # Alternate tiles: 6 int8 stages, 4 tiles copied ahead.
    return retarget(
        s,
        {"STAGES": "STG", "AHEAD": "AHD"},
        "    if TILE_SPLIT:\n        STG: gl.constexpr = 6\n        AHD: gl.constexpr = 4\n"
        "    else:\n        STG: gl.constexpr = STAGES\n        AHD: gl.constexpr = AHEAD\n",
    )


def fa3p(s):
    # FlashAttention-3's order (fa3order_variant.py), nothing in flight across
    # the loop's back edge (a P.V carried across it, as a first form here
    # tried, makes ptxas serialise every wgmma: C7514), and the previous
    # tile's P operand live until its P.V is waited for.
    s = factor_only(s)
    start = s.index("        gl.static_assert(VH_STAGES > 2)\n")
    end = s.index("    rows = my_row0 + gl.arange(0, ROWS, layout=row_o)\n")
    loop = '''        p_layout: gl.constexpr = gl.DotOperandLayout(
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
            P_v, factor, m_i, l_i, v_ref = _softmax_tile(
                s_int, k_scale, v_scale, tile_lo, m_i, l_i, acc, v_ref,
                row_qk_scale, t_col, seq_len, q_pos, kv_limit, full_lo, full_hi,
                TILE_SIZE, P_LOG2_SCALE, RESCALE_THRESHOLD, SLIDING_WINDOW, True, True,
            )
            # (Only its layout is read: the softmax returns the rows' factor.)
            o_shape = gl.zeros([ROWS, HEAD_SIZE], gl.float32, o_layout)
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
                P_prev = P_v
                P_v, factor, m_i, l_i, v_ref = _softmax_tile(
                    s_int, k_scale, v_scale, tile_lo + i, m_i, l_i, o_shape, v_ref,
                    row_qk_scale, t_col, seq_len, q_pos, kv_limit, full_lo, full_hi,
                    TILE_SIZE, P_LOG2_SCALE, RESCALE_THRESHOLD, SLIDING_WINDOW, True,
                    True,
                )
                # The previous tile's P operand stays live until its P.V is
                # done, so that the softmax does not write its registers.
                acc, P_prev = warpgroup_mma_wait(0, deps=[acc, P_prev])
                mbarrier.arrive(vhfree.index(h))
                acc = _rescale_if_moved(acc, factor)
                h = gl.where(h == VH_STAGES - 1, 0, h + 1)
            acc = warpgroup_mma(
                P_v, vh_smem.index(h).permute([1, 0]), acc, is_async=True
            )
            acc = warpgroup_mma_wait(0, deps=[acc])
            mbarrier.arrive(vhfree.index(h))

'''
    return s[:start] + loop + s[end:]


def fa3pu(s):
    # fa3p with the full tiles in a loop of their own whose softmax has no
    # masking code (ptxas if-converts fa3p's masked branch into ~60
    # predicated instructions that every tile issues), the masked tail tiles
    # in a second loop.
    s = fa3p(s)
    s = rep(s, '''    FACTOR_ONLY: gl.constexpr = False,
):''', '''    FACTOR_ONLY: gl.constexpr = False,
    MASKS: gl.constexpr = True,
):''')
    s = rep(s, '''    masked = (j >= full_hi) | (j < full_lo)
    if masked:
        # Slots''', '''    masked = MASKS and ((j >= full_hi) | (j < full_lo))
    if masked:
        # Slots''')
    start = s.index("            h = 0\n            for i in range(1, my_tiles):\n")
    end = s.index("            acc = warpgroup_mma(\n                P_v, vh_smem.index(h)", start)
    body = s[start:end]
    loop_body = body.split("            for i in range(1, my_tiles):\n", 1)[1]
    unmasked = loop_body.replace("TILE_SIZE, P_LOG2_SCALE, RESCALE_THRESHOLD, SLIDING_WINDOW, True,\n                    True,",
                                 "TILE_SIZE, P_LOG2_SCALE, RESCALE_THRESHOLD, SLIDING_WINDOW, True,\n                    True, False,")
    assert unmasked != loop_body
    new = ("            h = 0\n"
           "            # Tiles before full_hi need no mask (no window here: full_lo is\n"
           "            # tile_lo).\n"
           "            n_full = gl.minimum(gl.maximum(full_hi - tile_lo, 1), my_tiles)\n"
           "            for i in range(1, n_full):\n" + unmasked +
           "            for i in range(n_full, my_tiles):\n" + loop_body)
    return s[:start] + new + s[end:]


SPLIT_STEP = """                s = i % STAGES
                mbarrier.wait(ready.index(s), (i // STAGES) & 1)
                k_t = k_smem.index(s).permute([1, 0])
                s_int = warpgroup_mma(
                    q_hi_smem, k_t, s_zero, use_acc=False, is_async=True
                )
                k_scale = ks_smem.index(s).load(col_s)
                v_scale = vs_smem.index(s).load(col_s)
                s_int = warpgroup_mma_wait(0, deps=[s_int])
                s_int = warpgroup_mma(
                    q_lo_smem, k_t, s_int * 254, use_acc=True, is_async=True
                )
                # The previous tile's P.V runs during this tile's softmax.
                acc = warpgroup_mma(
                    P_v, vh_smem.index(h).permute([1, 0]), acc, is_async=True
                )
                s_int = warpgroup_mma_wait(1, deps=[s_int])
                mbarrier.arrive(kfree.index(s))
                P_prev = P_v
                P_v, factor, m_i, l_i, v_ref = _softmax_tile(
                    s_int, k_scale, v_scale, tile_lo + i, m_i, l_i, o_shape, v_ref,
                    row_qk_scale, t_col, seq_len, q_pos, kv_limit, full_lo, full_hi,
                    TILE_SIZE, P_LOG2_SCALE, RESCALE_THRESHOLD, SLIDING_WINDOW, True,
                    True, MASKS_FLAG,
                )
                acc, P_prev = warpgroup_mma_wait(0, deps=[acc, P_prev])
                mbarrier.arrive(vhfree.index(h))
                acc = _rescale_if_moved(acc, factor)
                h = i % VH_STAGES
"""


def split_fa3(s):
    # On top of fa3pu: alternate tiles (up to 64 rows, no window) in
    # FlashAttention-3's order too: tile i's Q.K pair, then the consumer's
    # previous tile's P.V during tile i's softmax.  A consumer then holds
    # the widened V of its previous tile (i - 2) while waiting for tile i,
    # so the producer needs four widened tiles (with two, both are the
    # same buffer: a hang).
    s = rep(s, "    if TILE_SPLIT or SLIDING_WINDOW > 0:\n        for _ in range(my_tiles):\n",
            "    if TILE_SPLIT and SLIDING_WINDOW == 0:\n" + """        gl.static_assert(VH_STAGES > 3)
        p_layout: gl.constexpr = gl.DotOperandLayout(
            operand_index=0, parent=o_layout, k_width=2
        )
        if my_tiles > 0:
            s = i % STAGES
            mbarrier.wait(ready.index(s), (i // STAGES) & 1)
            s_int, k_scale, v_scale = _tile_qk(
                q_hi_smem,
                q_lo_smem,
                k_smem.index(s).permute([1, 0]),
                ks_smem.index(s),
                vs_smem.index(s),
                s_zero,
                QUERY_PAIR,
            )
            mbarrier.arrive(kfree.index(s))
            P_v, factor, m_i, l_i, v_ref = _softmax_tile(
                s_int, k_scale, v_scale, tile_lo + i, m_i, l_i, acc, v_ref,
                row_qk_scale, t_col, seq_len, q_pos, kv_limit, full_lo, full_hi,
                TILE_SIZE, P_LOG2_SCALE, RESCALE_THRESHOLD, SLIDING_WINDOW, True, True,
            )
            # (Only its layout is read: the softmax returns the rows' factor.)
            o_shape = gl.zeros([ROWS, HEAD_SIZE], gl.float32, o_layout)
            h = i % VH_STAGES
            # This consumer's tiles before full_hi need no mask.
            n_full = gl.minimum(
                gl.maximum((full_hi - tile_lo - C + 1) // 2, 1), my_tiles
            )
            for _ in range(1, n_full):
                i += 2
""" + SPLIT_STEP.replace("MASKS_FLAG", "False") + """            for _ in range(n_full, my_tiles):
                i += 2
""" + SPLIT_STEP.replace("MASKS_FLAG", "True") + """            acc = warpgroup_mma(
                P_v, vh_smem.index(h).permute([1, 0]), acc, is_async=True
            )
            acc = warpgroup_mma_wait(0, deps=[acc])
            mbarrier.arrive(vhfree.index(h))
    elif TILE_SPLIT or SLIDING_WINDOW > 0:
        for _ in range(my_tiles):
""")
    return four_widened_tiles(s, "TILE_SPLIT and SLIDING_WINDOW == 0")


if __name__ == "__main__":
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "/tmp/wv"
    os.makedirs(out_dir, exist_ok=True)
    variants = {"trim": trim(BASE), "deep": deep(BASE), "fa3p": fa3p(BASE), "fa3ptrim": fa3p(trim(BASE)),
                "fa3pu": fa3pu(BASE), "fa3putrim": fa3pu(trim(BASE)),
                "sfa3": split_fa3(fa3pu(BASE)), "sfa3trim": split_fa3(fa3pu(trim(BASE)))}
    for name, text in variants.items():
        open(os.path.join(out_dir, name + ".py"), "w").write(text)
        print("wrote", os.path.join(out_dir, name + ".py"))
