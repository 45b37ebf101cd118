"""Variant of the series' wgmma kernel whose accumulator rescale is skipped by
each warp when none of its rows' factors moved (a warp vote, no cross-warp
traffic): the 128 FMUL per thread per tile of `acc * alpha * v_ref / new_v_ref`
run only in tiles where some row's softmax reference or the V-scale reference
moved.  Writes the variant next to OUT (default /tmp/wv/vote.py).
Usage: python vote_variant.py [OUT] [PACK]   (PACK: acc elements per asm block)"""
import re, sys

SRC = "vllm/v1/attention/ops/triton_int8_split_kv_wgmma.py"
out = sys.argv[1] if len(sys.argv) > 1 else "/tmp/wv/vote.py"
pack = int(sys.argv[2]) if len(sys.argv) > 2 else 64
s = open(SRC).read()

old = "    acc = acc * gl.expand_dims(gl.convert_layout(alpha * (v_ref / new_v_ref), row_o), 1)\n"
assert old in s
new = (
    "    # Exactly 1 where nothing moved (v_ref * rcp(v_ref) need not be).\n"
    "    v_ratio = gl.where(new_v_ref > v_ref, v_ref / new_v_ref, 1.0)\n"
    "    alpha = gl.where(m_new > m_i, alpha, 1.0)\n"
    "    factor = gl.convert_layout(alpha * v_ratio, row_o)\n"
    "    acc = _rescale_if_moved(acc, factor)\n"
)
s = s.replace(old, new)

# The warp vote: each thread holds rows r and r + 8 of the accumulator, the 2
# elements of its row vector (replicated over the lanes of a quad), and votes
# over both; the rescale block reads the flag of its first element.
helpers = f'''
@gluon.jit
def _warp_any_moved(factor):
    # 1 in every lane of a warp where some row's factor differs from 1.
    return gl.inline_asm_elementwise(
        asm="""{{
        .reg .pred p, q;
        setp.ne.f32 p, $2, 0f3F800000;
        setp.ne.or.f32 p, $3, 0f3F800000, p;
        vote.sync.any.pred q, p, 0xffffffff;
        selp.u32 $0, 1, 0, q;
        mov.u32 $1, $0;
        }}""",
        constraints="=r,=r,f,f",
        args=[factor],
        dtype=gl.int32,
        is_pure=True,
        pack=2,
    )


@gluon.jit
def _rescale_if_moved(acc, factor):
    moved = _warp_any_moved(factor)
    f2 = gl.expand_dims(factor, 1)
    m2 = gl.expand_dims(moved, 1)
    f2, m2 = gl.broadcast(f2, m2)
    acc, f2 = gl.broadcast(acc, f2)
    acc, m2 = gl.broadcast(acc, m2)
    return gl.inline_asm_elementwise(
        asm=ASM_RESCALE,
        constraints=CONSTRAINTS_RESCALE,
        args=[acc, f2, m2],
        dtype=gl.float32,
        is_pure=True,
        pack={pack},
    )

'''
P = pack
lines = ["{", ".reg .pred q;", f"setp.ne.u32 q, ${3 * P}, 0;", "@!q bra.uni SKIP;"]
lines += [f"mul.f32 ${i}, ${P + i}, ${2 * P + i};" for i in range(P)]
lines += ["bra.uni DONE;", "SKIP:"]
lines += [f"mov.f32 ${i}, ${P + i};" for i in range(P)]
lines += ["DONE:", "}"]
asm = "\\n".join(lines)
cons = ",".join(["=f"] * P + ["f"] * P + ["f"] * P + ["r"] * P)
consts = f'ASM_RESCALE: gl.constexpr = gl.constexpr("{asm}")\nCONSTRAINTS_RESCALE: gl.constexpr = gl.constexpr("{cons}")\n'
anchor = "@gluon.jit\ndef _softmax_tile("
assert anchor in s
s = s.replace(anchor, consts + helpers + "\n" + anchor)
open(out, "w").write(s)
print("wrote", out, "pack", pack)
