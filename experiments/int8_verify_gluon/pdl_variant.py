# SPDX-License-Identifier: Apache-2.0
"""Programmatic dependent launch (PDL) for the verify call, and a timeline
of its fixed costs (outside the series).

Why: at 32K, batch 1, 6-8 tokens the call is 44-47 us against a linear
extrapolation from 128K of about 30 us of tile work; the reduce and the
partial bytes were ruled out (`breakdown.py`, 2026-12-05).  What is left is
fixed per call: the launches of two dependent kernels, each program's
query quantisation and pipeline fill, the tail of the grid, the partial
store.  Two things here, both generated from the series' own source (no
copy kept):

  * Variants that let the reduce kernel launch before the split-KV kernel
    ends (Hopper's griddepcontrol, as upstream's LoRA kernels use it):
      pdl       the reduce launched with launch_pdl, waiting with
                gdc_wait after its early return (which reads only the
                step's metadata);
      pdl_trig  and the split-KV programs signal launch_dependents at
                entry, so the reduce's programs become resident as soon as
                every split-KV program has started;
      pdl_all   and the split-KV kernel itself launched with launch_pdl,
                waiting before its warp-specialised body, the reduce
                signalling at entry (a chain across calls).
  * `stamps`: the series' kernels with %globaltimer stamps per program
    (consumer entry, query quantised, loop end, partial stored; the
    reduce's entry and end), for a timeline of one eager call.

    python3 experiments/int8_verify_gluon/pdl_variant.py /tmp/pdl   # writes the variants
    CUDA_VISIBLE_DEVICES= python3 experiments/int8_verify_gluon/offline_series_wgmma.py 16 1 /tmp/pdl/wgmma_trig.py
"""

import os
import re
import sys

WGMMA = "vllm/v1/attention/ops/triton_int8_split_kv_wgmma.py"
SPLIT = "vllm/v1/attention/ops/triton_int8_split_kv_attention.py"

def _asm_helper(name: str, asm: str, out: str, dtype: str) -> str:
    """Source of a one-instruction Gluon helper; ``dep`` orders it."""
    return f'''
@gluon.jit
def {name}(dep):
    return gl.inline_asm_elementwise(
        asm="{asm}",
        constraints="={out},r",
        args=[dep],
        dtype=gl.{dtype},
        is_pure=False,
        pack=1,
    )

'''


HELPERS = "\n" + "".join(
    _asm_helper(*h)
    for h in (
        ("_gdc_launch", "griddepcontrol.launch_dependents; mov.u32 $0, $1;", "r", "int32"),
        ("_gdc_wait", "griddepcontrol.wait; mov.u32 $0, $1;", "r", "int32"),
        ("_gtimer", "mov.u64 $0, %globaltimer;", "l", "int64"),
    )
)


def _replace(src: str, old: str, new: str, count: int = 1) -> str:
    if src.count(old) != count:
        raise SystemExit(f"expected {count} x {old[:70]!r}, found {src.count(old)}")
    return src.replace(old, new)


def wgmma_variant(src: str, trigger: bool, wait: bool, stamps: bool) -> str:
    src = _replace(src, "\n\n@gluon.jit\ndef _tile_blocks(", HELPERS + "\n@gluon.jit\ndef _tile_blocks(")
    anchor = "    seq_len = gl.load(seq_lens_ptr + seq_idx)\n"
    extra = ""
    if trigger:
        extra += "    seq_len = _gdc_launch(seq_len)\n"
    if wait:
        extra += "    seq_len = _gdc_wait(seq_len)\n"
    src = _replace(src, anchor, anchor + extra)
    if not stamps:
        return src
    # A stamp_ptr argument for the kernel and the consumers.
    src = _replace(
        src,
        "    SLIDING_WINDOW: gl.constexpr,  # keys per query position (0: all)\n):",
        "    SLIDING_WINDOW: gl.constexpr,  # keys per query position (0: all)\n    stamp_ptr,\n):",
    )
    src = _replace(
        src,
        "    C: gl.constexpr,  # which consumer (0 or 1)\n):",
        "    C: gl.constexpr,  # which consumer (0 or 1)\n    stamp_ptr,\n):",
    )
    for c in (0, 1):
        src = _replace(
            src,
            f"                    TILE_SPLIT,\n                    {c},\n                ),",
            f"                    TILE_SPLIT,\n                    {c},\n                    stamp_ptr,\n                ),",
        )
    # Consumer: entry, query in shared memory, loop end, partial stored.
    src = _replace(
        src,
        "    NUM_WARPS: gl.constexpr = gl.num_warps()\n    ROWS: gl.constexpr = 16 * NUM_WARPS\n"
        "    # Scores (int32)",
        "    NUM_WARPS: gl.constexpr = gl.num_warps()\n    ROWS: gl.constexpr = 16 * NUM_WARPS\n"
        "    pid_lin = (gl.program_id(2) * gl.num_programs(1) + gl.program_id(1)) * gl.num_programs(0)"
        " + gl.program_id(0)\n"
        "    slot = stamp_ptr + pid_lin.to(gl.int64) * 8 + C * 4\n"
        "    gl.store(slot + 0, _gtimer(n_tiles))\n"
        "    # Scores (int32)",
    )
    src = _replace(
        src,
        "    fence_async_shared()\n    gl.thread_barrier()\n    row_qk_scale =",
        "    fence_async_shared()\n    gl.thread_barrier()\n    gl.store(slot + 1, _gtimer(n_tiles))\n    row_qk_scale =",
    )
    src = _replace(
        src,
        "    rows = my_row0 + gl.arange(0, ROWS, layout=row_o)\n",
        "    gl.store(slot + 2, _gtimer(n_tiles))\n    rows = my_row0 + gl.arange(0, ROWS, layout=row_o)\n",
    )
    src = _replace(
        src,
        "        gl.store(segm_expsum_ptr + partial, l_o, mask=row_mask)\n",
        "        gl.store(segm_expsum_ptr + partial, l_o, mask=row_mask)\n"
        "    gl.store(slot + 3, _gtimer(n_tiles))\n",
    )
    return src


def reduce_variant(split_src: str, wait: bool, trigger: bool, stamps: bool) -> str:
    """The series' reduce kernel as a module of its own, edited."""
    m = re.search(
        r"@triton\.jit\(do_not_specialize=\[\"num_seqs\", \"num_segments\"\]\)\n"
        r"def kernel_int8_split_kv_reduce\(.*?\n(?=\n\ndef )",
        split_src,
        re.S,
    )
    if not m:
        raise SystemExit("reduce kernel not found")
    src = m.group(0)
    if stamps:
        src = _replace(src, "    SEGMENT_CHUNK: tl.constexpr,  # segments per loop iteration\n):",
                       "    SEGMENT_CHUNK: tl.constexpr,  # segments per loop iteration\n    stamp_ptr,\n):")
        src = _replace(
            src,
            "    head_idx = tl.program_id(1)\n",
            "    head_idx = tl.program_id(1)\n"
            "    pid_lin = (tl.program_id(2) * tl.num_programs(1) + head_idx) * tl.num_programs(0) + token_idx\n"
            "    rslot = stamp_ptr + pid_lin.to(tl.int64) * 2\n"
            "    tl.store(rslot, _gtimer(token_idx))\n",
        )
        src = _replace(
            src,
            "        acc.to(out_ptr.dtype.element_ty),\n    )\n",
            "        acc.to(out_ptr.dtype.element_ty),\n    )\n    tl.store(rslot + 1, _gtimer(token_idx))\n",
        )
    pre = ""
    if trigger:
        pre += "    tl.extra.cuda.gdc_launch_dependents()\n"
    src = _replace(src, "    token_idx = tl.program_id(0)\n", "    token_idx = tl.program_id(0)\n" + pre)
    if wait:
        src = _replace(
            src,
            "    offs_d = tl.program_id(2) * HEAD_BLOCK",
            "    tl.extra.cuda.gdc_wait()\n    offs_d = tl.program_id(2) * HEAD_BLOCK",
        )
    head = (
        "# SPDX-License-Identifier: Apache-2.0\n# Generated by pdl_variant.py from the series' reduce.\n"
        "import triton\nimport triton.language as tl\n\n\n"
        "@triton.jit\ndef _gtimer(dep):\n"
        "    return tl.inline_asm_elementwise('mov.u64 $0, %globaltimer;', '=l,r', [dep],"
        " dtype=tl.int64, is_pure=False, pack=1)\n\n\n"
    )
    return head + src + "\n"


VARIANTS = {
    # name: (split-KV trigger, split-KV wait, reduce wait, reduce trigger, stamps)
    "pdl": (False, False, True, False, False),
    "pdl_trig": (True, False, True, False, False),
    "pdl_all": (True, True, True, True, False),
    "stamps": (False, False, False, False, True),
}


def generate(out_dir: str) -> dict[str, tuple[str, str]]:
    os.makedirs(out_dir, exist_ok=True)
    wsrc = open(WGMMA).read()
    ssrc = open(SPLIT).read()
    paths = {}
    for name, (trig, wait, rwait, rtrig, stamps) in VARIANTS.items():
        wp = os.path.join(out_dir, f"wgmma_{name}.py")
        rp = os.path.join(out_dir, f"reduce_{name}.py")
        with open(wp, "w") as f:
            f.write(wgmma_variant(wsrc, trig, wait, stamps))
        with open(rp, "w") as f:
            f.write(reduce_variant(ssrc, rwait, rtrig, stamps))
        paths[name] = (wp, rp)
    return paths


if __name__ == "__main__":
    for name, (wp, rp) in generate(sys.argv[1] if len(sys.argv) > 1 else "/tmp/pdl").items():
        print(name, wp, rp)
