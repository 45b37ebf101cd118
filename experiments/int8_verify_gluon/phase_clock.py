"""Where a tile's time goes in the series' wgmma verify kernel: per-phase %clock deltas (H200).

Builds, by edits to the series' module source (no copy kept here), a variant that reads the SM clock at the loop's
synchronising points and stores per-program sums of the deltas:
  wait   cp.async wait + fence + barrier at the top of the tile
  issue  the next tile's copies, block-table reads, Q.K issue
  widen  V widening + waiting for Q.K
  soft   softmax, accumulator rescale, fence + barrier before P.V
  pv     P.V issue + wait
Boundaries sit at volatile operations (waits, barriers, wgmma), so the split is approximate within a phase but the
sum is the loop.  Prints cycles per tile per phase (mean over programs, thread 0 of each) for a few cases, and the
kernel time of the instrumented and plain kernels.
Run from the repository root on a GPU machine with the fork installed."""
import importlib.util, json, os, sys, tempfile, types
sys.path.insert(0, "benchmarks/kernels")
import torch, triton
import benchmark_int8_kv_attention as B
from vllm.v1.attention.ops import triton_int8_split_kv_attention as M

SRC = "vllm/v1/attention/ops/triton_int8_split_kv_wgmma.py"
EDITS = [
    ("    RESCALE_THRESHOLD: gl.constexpr,\n):\n    NUM_WARPS: gl.constexpr = gl.num_warps()",
     "    RESCALE_THRESHOLD: gl.constexpr,\n    clk_ptr,\n):\n    NUM_WARPS: gl.constexpr = gl.num_warps()"),
    ("    for j in range(tile_lo, tile_hi):\n        stage = (j - tile_lo) % STAGES\n        async_copy.wait_group(STAGES - 2)\n        fence_async_shared()\n        gl.thread_barrier()\n",
     "    c_wait = tile_lo * 0\n    c_issue = tile_lo * 0\n    c_widen = tile_lo * 0\n    c_soft = tile_lo * 0\n    c_pv = tile_lo * 0\n    c_copy = tile_lo * 0\n"
     "    for j in range(tile_lo, tile_hi):\n        t0 = _clock(j)\n        stage = (j - tile_lo) % STAGES\n        async_copy.wait_group(STAGES - 2)\n        fence_async_shared()\n        gl.thread_barrier()\n        t1 = _clock(j)\n        c_wait += t1 - t0\n"),
    ("        # Q.K on the tensor cores while the threads widen V.\n",
     "        tq = _clock(j)\n        c_copy += tq - t1\n        # Q.K on the tensor cores while the threads widen V.\n"),
    ("        s_lo = warpgroup_mma(q_lo_smem, k_t, s_zero, use_acc=False, is_async=True)\n        vh_smem.store",
     "        s_lo = warpgroup_mma(q_lo_smem, k_t, s_zero, use_acc=False, is_async=True)\n        t2 = _clock(j)\n        c_issue += t2 - tq\n        vh_smem.store"),
    ("        s_hi, s_lo = warpgroup_mma_wait(0, deps=[s_hi, s_lo])\n",
     "        s_hi, s_lo = warpgroup_mma_wait(0, deps=[s_hi, s_lo])\n        t3 = _clock(j)\n        c_widen += t3 - t2\n"),
    ("        fence_async_shared()\n        gl.thread_barrier()\n        acc = warpgroup_mma(",
     "        fence_async_shared()\n        gl.thread_barrier()\n        t4 = _clock(j)\n        c_soft += t4 - t3\n        acc = warpgroup_mma("),
    ("        acc = warpgroup_mma_wait(0, deps=[acc])\n    async_copy.wait_group(0)\n",
     "        acc = warpgroup_mma_wait(0, deps=[acc])\n        c_pv += _clock(j) - t4\n    async_copy.wait_group(0)\n"
     "    slot = clk_ptr + ((gl.program_id(2) * gl.num_programs(1) + gl.program_id(1)) * gl.num_programs(0)"
     " + gl.program_id(0)) * 8\n"
     "    gl.store(slot + 0, c_wait)\n    gl.store(slot + 1, c_issue)\n    gl.store(slot + 2, c_widen)\n"
     "    gl.store(slot + 3, c_soft)\n    gl.store(slot + 4, c_pv)\n    gl.store(slot + 5, tile_hi - tile_lo)\n    gl.store(slot + 6, c_copy)\n"),
]
CLOCK = '''

@gluon.jit
def _clock(dep):
    return gl.inline_asm_elementwise(
        asm="mov.u32 $0, %clock;", constraints="=r,r", args=[dep], dtype=gl.int32, is_pure=False, pack=1
    )
'''


def build():
    s = open(SRC).read()
    for old, new in EDITS:
        assert s.count(old) == 1, old[:80]
        s = s.replace(old, new)
    s = s.replace("\n\n@gluon.jit\ndef _widen(x):", CLOCK + "\n\n@gluon.jit\ndef _widen(x):", 1)
    path = os.path.join(tempfile.mkdtemp(), "wgmma_clock.py")
    open(path, "w").write(s)
    spec = importlib.util.spec_from_file_location("wgmma_clock", path)
    mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
    return mod.kernel_int8_split_kv_verify_wgmma


class WithClock:
    """The instrumented kernel behind the series' launcher (one extra pointer argument)."""

    def __init__(self, kernel, clk):
        self.kernel, self.clk = kernel, clk

    def __getitem__(self, grid):
        self.grid = grid
        return lambda *a, **kw: self.kernel[grid](*a, **kw, clk_ptr=self.clk)


def main():
    args = types.SimpleNamespace(num_q_heads=24, num_kv_heads=4, head_size=256, copy_bytes=400 * 2**20,
                                 with_unified=False, no_errors=False)
    plain = M.kernel_int8_split_kv_verify_wgmma
    clocked = build()
    res = []
    for batch, ctx, qlen, bs in [(1, 131072, 6, 16), (1, 131072, 16, 16)][: int(os.environ.get('CASES', 4))]:
        case = B.Case(args, batch, ctx, qlen, bs)
        fn = B.make_impls(case, args)["int8_split_kv"][0]
        clk = torch.zeros(1 << 16, 8, dtype=torch.int32, device="cuda")
        w = WithClock(clocked, clk)
        M.kernel_int8_split_kv_verify_wgmma = w
        fn(0); torch.accelerator.synchronize()
        t_clock = B.time_graph(fn, case.copies)
        clk.zero_(); fn(0); torch.accelerator.synchronize()
        M.kernel_int8_split_kv_verify_wgmma = plain
        t_plain = B.time_graph(fn, case.copies)
        c = clk.cpu().double()
        used = c[:, 5] > 0
        tiles = c[used, 5].sum()
        row = dict(batch=batch, ctx=ctx, qlen=qlen, block=bs, grid=list(w.grid), programs=int(used.sum()),
                   tiles_per_program=round(float(c[used, 5].mean()), 1), us_plain=round(t_plain, 1),
                   us_clocked=round(t_clock, 1))
        for k, name in [(0, "wait"), (6, "copy"), (1, "issue"), (2, "widen"), (3, "soft"), (4, "pv")]:
            row[name] = round(float(c[used, k].sum() / tiles), 1)
        row["total"] = round(sum(row[n] for n in ["wait", "copy", "issue", "widen", "soft", "pv"]), 1)
        res.append(row); print(json.dumps(row), flush=True)
        del case; torch.cuda.empty_cache()
    json.dump(res, open(os.path.join(os.environ.get("OUT", "/tmp"), "phase_clock.json"), "w"), indent=1)
    print("\ncycles per tile (a thread of each program): wait copy qk-issue widen soft pv | total | us plain / clocked")
    for r in res:
        print(f"b{r['batch']} {r['ctx'] // 1024}K q{r['qlen']} bs{r['block']}: {r['wait']} {r['copy']} {r['issue']} {r['widen']} "
              f"{r['soft']} {r['pv']} | {r['total']} | {r['us_plain']} / {r['us_clocked']}")


if __name__ == "__main__":
    main()
