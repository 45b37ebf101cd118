"""Ablations of the series' wgmma verify kernel: where a tile's time goes (issue 20, tenth session).

Each variant drops one part of the work and keeps every barrier, so it runs (and never hangs) but computes
garbage; only its time means something:
* ``nowiden``: the producer copies but does not widen V (no LDS / widening / STS);
* ``nocopy``: the producer issues no copies (no DRAM traffic) but widens what the stage holds;
* ``nosoftmax``: the consumers' softmax is one conversion (P = S as fp16);
* ``nopv``: the consumers issue no P.V;
* ``bare``: nosoftmax + nopv (the consumers only run Q.K and the barriers: the producer's pace);
* ``idle``: nowiden + nocopy (the producer only runs the barriers: the consumers' pace);
* ``nofence``: the producer's proxy fence before it marks a tile ready is gone (its SASS is MEMBAR.ALL.CTA +
  FENCE.VIEW.ASYNC.S: if the MEMBAR waits for the producer's copies still in flight, every tile waits for the
  copies of the tiles after it, whatever the ring's depth);
* ``cfence``: correct form of nofence: each consumer issues the proxy fence after it acquires a tile (mbarrier
  wait), so the producer never fences with copies in flight.
Alternate tiles only (4-10 tokens; eleventh session): the producer alone streams the cache in 109 us at b1 128K
(copy_probe.py, its sink a partition of a different kernel) where consumers that only run Q.K take 129, the series'
time.  Whether that is the consumers' latency between a tile's arrival and its release, or their tensor and
shared-memory work beside the copies:
* ``sinkc``: the consumers hand each tile back as soon as it arrives (no Q.K, softmax or P.V): the series' own
  structure with copy_probe.py's sink;
* ``sleep250`` / ``sleep1000``: the same with a ``nanosleep`` of that many nanoseconds (PTX: up to about twice
  that) between a tile's arrival and its release, a delay without tensor or shared-memory work.
Writes OUT_DIR/<name>.py.  Usage: python experiments/int8_verify_gluon/ablate_variant.py [OUT_DIR]."""
import os
import re
import sys

SRC = os.environ.get("SRC", "vllm/v1/attention/ops/triton_int8_split_kv_wgmma.py")
out_dir = sys.argv[1] if len(sys.argv) > 1 else "/tmp/wv"
os.makedirs(out_dir, exist_ok=True)
BASE = open(SRC).read()


def rep(s, old, new):
    assert s.count(old) == 1, (s.count(old), old[:80])
    return s.replace(old, new)


def nowiden(s):
    return rep(s, '''            v8 = v_smem.index(i % STAGES).load(V_LOAD)
            h = i % VH_STAGES
            mbarrier.wait(vhfree.index(h), ((i // VH_STAGES) & 1) ^ 1)
            vh_smem.index(h).store(_widen(v8))''', '''            h = i % VH_STAGES
            mbarrier.wait(vhfree.index(h), ((i // VH_STAGES) & 1) ^ 1)''')


def nocopy(s):
    # Every cp.async of _issue_tile behind `if False:` (the address math stays).
    for copy in (
        "async_copy.async_copy_global_to_shared(k_smem.index(stage), k_ptrs)",
        "async_copy.async_copy_global_to_shared(v_smem.index(stage), v_ptrs)",
        "async_copy.async_copy_global_to_shared(ks_smem.index(stage), ks_head_ptr + s_off)\n"
        "    async_copy.async_copy_global_to_shared(vs_smem.index(stage), vs_head_ptr + s_off)",
    ):
        s = rep(s, "    " + copy, "    if False:\n        " + copy.replace("\n    ", "\n        "))
    return s


def nosoftmax(s):
    start = s.index("    row_o: gl.constexpr = gl.SliceLayout(1, acc.type.layout)\n    p_layout")
    end = s.index("\n\n\n@gluon.jit\ndef _consumer(")
    body = '''    p_layout: gl.constexpr = gl.DotOperandLayout(
        operand_index=0, parent=acc.type.layout, k_width=2
    )
    P_v = gl.convert_layout(s_int.to(gl.float16), p_layout)
    return P_v, acc, m_i, l_i, v_ref'''
    return s[:start] + body + s[end:]


def nopv(s):
    pv = re.compile(r"            acc = warpgroup_mma\(\n                P_v, vh_smem\.index\(h\)\.permute\(\[1, 0\]\), acc, "
                    r"is_async=True\n            \)\n")
    assert len(pv.findall(s)) == 2, len(pv.findall(s))
    return pv.sub("            acc = acc + gl.convert_layout(P_v, s_layout).to(gl.float32).sum() * 0.0\n", s)


def nofence(s):
    return rep(s, """            vh_smem.index(h).store(_widen(v8))
            # The copied K and the widened V are visible to the tensor cores.
            fence_async_shared()
""", """            vh_smem.index(h).store(_widen(v8))
""")


def cfence(s):
    s = nofence(s)
    s = rep(s, """            mbarrier.wait(ready.index(s), (i // STAGES) & 1)
""", """            mbarrier.wait(ready.index(s), (i // STAGES) & 1)
            fence_async_shared()
""")
    s = rep(s, """            mbarrier.wait(ready.index(0), 0)
""", """            mbarrier.wait(ready.index(0), 0)
            fence_async_shared()
""")
    return rep(s, """            mbarrier.wait(ready.index(s_n), ((i + 1) // STAGES) & 1, pred=has_next)
""", """            mbarrier.wait(ready.index(s_n), ((i + 1) // STAGES) & 1, pred=has_next)
            fence_async_shared()
""")


def handover(s, sleep_ns=0):
    # The alternate-tile loop's body between a tile's arrival and the next: release it at once (after the sleep).
    arrival = "            mbarrier.wait(ready.index(s), (i // STAGES) & 1)\n"
    start = s.index(arrival) + len(arrival)
    end = s.index("            i += 2 if TILE_SPLIT else 1\n", start)
    body = ""
    if sleep_ns:
        body = (
            "            gl.inline_asm_elementwise(\n"
            f'                asm="nanosleep.u32 {sleep_ns}; mov.u32 $0, $1;",\n'
            '                constraints="=r,r",\n'
            "                args=[gl.full([1], 0, gl.int32, gl.BlockedLayout([1], [32], [NUM_WARPS], [0]))],\n"
            "                dtype=gl.int32,\n"
            "                is_pure=False,\n"
            "                pack=1,\n"
            "            )\n"
        )
    body += ("            mbarrier.arrive(kfree.index(s))\n"
             "            mbarrier.arrive(vhfree.index(i % VH_STAGES))\n")
    return s[:start] + body + s[end:]


variants = {"sinkc": handover(BASE), "sleep250": handover(BASE, 250), "sleep1000": handover(BASE, 1000),
            "nofence": nofence(BASE), "cfence": cfence(BASE), "nowiden": nowiden(BASE), "nocopy": nocopy(BASE), "nosoftmax": nosoftmax(BASE), "nopv": nopv(BASE),
            "bare": nopv(nosoftmax(BASE)), "idle": nocopy(nowiden(BASE))}
for name, text in variants.items():
    open(os.path.join(out_dir, name + ".py"), "w").write(text)
    print("wrote", os.path.join(out_dir, name + ".py"))
