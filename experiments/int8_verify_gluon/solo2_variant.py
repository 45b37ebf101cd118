"""Alternate-tile mode (up to 64 rows) as two programs per multiprocessor, each one consumer warpgroup plus a
two-warp producer (issue 20, tenth session; offline only, for the GPU call after copy_probe.py).

The ablations (README, top) found one producer per multiprocessor setting the pace with alternate tiles.  Here a
program is the consumer (the default partition: 4 warps, 64 rows, every tile of its segment, the series' code with
TILE_SPLIT's query pair) and the producer as a two-warp worker at 56 registers: at the series' ``maxnreg=168``, six
warps leave the consumer 224 registers ((6 x 168 - 2 x 56) / 4) and take 32K registers, so two programs share a
multiprocessor (with two int8 stages: 2 x 97 KB of shared memory) and two producers stream it.  (solo_variant.py's
first form, a four-warp producer, needed eight warps per program and so 128 registers at launch, under the 158
ptxas wants for the P.V wgmma.)  The partial layout stays the series' (two per segment): a program writes its partial
to slot 2 s and an empty one (-inf, 0, zeros) to 2 s + 1, so the series' launcher and reduce serve it unchanged once
run with ``WGMMA_PROGRAMS_PER_SM = 2``, ``STAGES=2``, ``AHEAD=1`` (fa3p_ab.py: ``PER_SM2=solo2``).
Writes OUT_DIR/solo2.py.  Usage: python experiments/int8_verify_gluon/solo2_variant.py [OUT_DIR]."""
import os
import sys

SRC = os.environ.get("SRC", "vllm/v1/attention/ops/triton_int8_split_kv_wgmma.py")
out_dir = sys.argv[1] if len(sys.argv) > 1 else "/tmp/wv"
os.makedirs(out_dir, exist_ok=True)


def rep(s, old, new):
    assert s.count(old) == 1, (s.count(old), old[:80])
    return s.replace(old, new)


def solo2(s):
    s = rep(s, "        my_tiles = (n_tiles - C + 1) // 2\n",
            "        my_tiles = n_tiles if SOLO else (n_tiles - C + 1) // 2\n")
    s = rep(s, "            i += 2 if TILE_SPLIT else 1\n", "            i += 2 if TILE_SPLIT and not SOLO else 1\n")
    s = rep(s, """        gl.store(segm_expsum_ptr + partial, l_o, mask=row_mask)
""", """        gl.store(segm_expsum_ptr + partial, l_o, mask=row_mask)
        if TILE_SPLIT and SOLO:
            # The other consumer's slot of the series' layout: empty.
            gl.store(
                segm_out_ptr
                + gl.expand_dims((partial + num_query_heads) * HEAD_SIZE, 1)
                + gl.expand_dims(offs_d, 0),
                gl.zeros_like(acc),
                mask=gl.expand_dims(row_mask, 1),
            )
            gl.store(
                segm_max_ptr + partial + num_query_heads,
                gl.full_like(l_o, float("-inf")),
                mask=row_mask,
            )
            gl.store(
                segm_expsum_ptr + partial + num_query_heads,
                gl.zeros_like(l_o),
                mask=row_mask,
            )
""")
    start = s.index("    gl.warp_specialize(\n")
    end = s.index("        [CONSUMER_REGISTERS, CONSUMER_REGISTERS],\n    )\n") + len(
        "        [CONSUMER_REGISTERS, CONSUMER_REGISTERS],\n    )\n")
    call = s[start:end]
    p0 = call.index("            (\n                _producer,")
    c0 = call.index("            (\n                _consumer,")
    c1 = call.index("            (\n                _consumer,", c0 + 10)
    producer_t, consumer0_t = call[p0:c0], call[c0:c1]
    solo_call = ("    gl.warp_specialize(\n        [\n" + consumer0_t + producer_t
                 + "        ],\n        [2],\n        [SOLO_PRODUCER_REGISTERS],\n    )\n")
    indent = lambda t: "".join("    " + line if line.strip() else line for line in t.splitlines(True))
    s = s[:start] + "    if TILE_SPLIT and SOLO:\n" + indent(solo_call) + "    else:\n" + indent(call) + s[end:]
    s = rep(s, "CONSUMER_REGISTERS = gl.constexpr(224)\n",
            "CONSUMER_REGISTERS = gl.constexpr(224)\n"
            "# One consumer (the default partition) and a two-warp producer per program with alternate tiles.\n"
            "SOLO = gl.constexpr(True)\nSOLO_PRODUCER_REGISTERS = gl.constexpr(56)\n")
    return s


open(os.path.join(out_dir, "solo2.py"), "w").write(solo2(open(SRC).read()))
print("wrote", os.path.join(out_dir, "solo2.py"))
