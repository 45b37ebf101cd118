"""Bytes in flight: sweep pipeline depth (stages) and tile of the series' kernels and the Gluon prototype (H200).

Hypothesis under test: the verify kernels are bound by memory latency (too few K/V bytes in flight per SM), not by
instruction issue, since the Gluon prototype issues ~1.5x fewer instructions per KV token than the swapped kernel
and is still 1.25x slower. Run from the repository root on a GPU machine with the fork installed."""
import sys, types, json, os, time
sys.path.insert(0, "benchmarks/kernels"); sys.path.insert(0, "experiments/int8_verify_gluon")
import torch, benchmark_int8_kv_attention as B
from vllm.v1.attention.ops import triton_int8_split_kv_attention as M
import gluon_verify as GV
G = M.Int8SplitKVGeometry
args = types.SimpleNamespace(num_q_heads=24, num_kv_heads=4, head_size=256, copy_bytes=400 * 2**20,
                             with_unified=False, no_errors=False)
sc = (torch.empty(M.MAX_PARTIALS, 24, 256, device="cuda"), torch.empty(M.MAX_PARTIALS, 24, device="cuda"),
      torch.empty(M.MAX_PARTIALS, 24, device="cuda"))
ONLY = set(sys.argv[1:])


def gluon(case, i, segs, tile, stages):
    kc, vc, ks, vs = case.int8[i]
    GV.kernel_int8_verify_rows_gluon[(4, case.batch, segs)](
        case.out, sc[0], sc[1], sc[2], case.q, kc, vc, ks, vs, case.block_table, case.seq_lens, case.cu_q,
        case.scale * 1.4426950408889634, segs, case.block_table.stride(0), kc.stride(0), kc.stride(2),
        ks.stride(0), ks.stride(2), case.q.stride(0), case.q.stride(1), case.out.stride(0), case.out.stride(1),
        num_query_heads=24, NUM_QUERIES_PER_KV=6, ROW_SPLITS=1, HEAD=256, BLOCK_SIZE=case.bs, TILE=tile,
        STAGES=stages, P_LOG2_SCALE=6.0, RESCALE_THRESHOLD=8.0, LAZY=1, DK=64, DV=32, num_warps=4)
    if segs > 1:
        M.kernel_int8_split_kv_reduce[(case.q.shape[0], 24, 4)](
            case.out, sc[0], sc[1], sc[2], case.cu_q, case.batch, segs, num_query_heads=24,
            out_stride_0=case.out.stride(0), out_stride_1=case.out.stride(1), HEAD_SIZE=256, HEAD_BLOCK=64,
            SEGMENT_CHUNK=32)


def variants(qlen):
    v = []
    rows = 6 * qlen
    if rows <= 16:
        for st in (2, 3, 4, 6):
            v.append((f"row_t32_s{st}", G(32, 128, 2, st, 16)))
        for st in (3, 4, 6, 8):
            v.append((f"row_t16_s{st}", G(16, 128, 2, st, 16)))
    elif rows <= 32:
        for st in (2, 3, 4):
            v.append((f"row_t32_s{st}", G(32, 128, 2, st, 32, pv_chunk=32)))
        for st in (3, 4, 6, 8):
            v.append((f"row_t16_s{st}", G(16, 128, 2, st, 32, pv_chunk=32)))
    else:
        for st in (3, 4, 5, 6, 8):
            v.append((f"swap_t16_s{st}_g64", G(16, 64, 4, st, 64, swap_ab=True)))
        for st in (2, 3, 4):
            v.append((f"swap_t32_s{st}_g64", G(32, 64, 4, st, 64, swap_ab=True)))
        for segs in (32, 128):
            v.append((f"swap_t16_s6_g{segs}", G(16, segs, 4, 6, 64, swap_ab=True)))
        if rows <= 64:
            for tile, st in ((16, 3), (16, 6), (16, 8), (32, 3), (32, 5)):
                v.append((f"gluon_t{tile}_s{st}", ("gluon", tile, st)))
    return v


res = []
cases = [(1, 131072, 6, 16), (1, 131072, 6, 1600), (1, 131072, 8, 16), (1, 32768, 6, 16), (8, 32768, 6, 16),
         (1, 131072, 4, 16), (1, 131072, 1, 16), (1, 131072, 16, 16)]
for batch, ctx, qlen, bs in cases:
    t0 = time.time()
    case = B.Case(args, batch, ctx, qlen, bs)
    exact = case.ref_first_request(*case.first_request(case.ref_kv)) if batch == 1 else None
    impls = B.make_impls(case, args)
    fa = [k for k in impls if k.startswith("fa")][0]
    row = dict(batch=batch, ctx=ctx, qlen=qlen, block=bs, fa3=round(B.time_graph(impls[fa][0], case.copies_bf16), 1),
               default=round(B.time_graph(impls["int8_split_kv"][0], case.copies), 1))
    for name, geo in variants(qlen):
        try:
            if isinstance(geo, tuple):
                fn = lambda i, t=geo[1], s=geo[2]: gluon(case, i, 64 if ctx > 40000 else 32, t, s)
            else:
                fn = B.make_impls(case, args, geo)["int8_split_kv"][0]
            fn(0); torch.accelerator.synchronize()
            if exact is not None:
                row[name + "_err"] = round(B.rel_err(case.out[:qlen], exact), 4)
            row[name] = round(B.time_graph(fn, case.copies), 1)
        except Exception as e:  # noqa: BLE001
            row[name + "_exc"] = repr(e)[:300]
    res.append(row)
    print(json.dumps(row), f"{time.time() - t0:.0f}s", flush=True)
    del case, impls; torch.cuda.empty_cache()
    json.dump(res, open(os.path.join(os.environ.get("OUT", "/tmp"), "sweep_stages.json"), "w"), indent=1)

print("\nFA3/variant (>1: faster than FA3)")
for r in res:
    best = sorted((v, k) for k, v in r.items() if isinstance(v, float) and k not in ("fa3",) and not k.endswith("_err"))
    print(f"b{r['batch']} ctx{r['ctx']} q{r['qlen']} bs{r['block']}: fa3 {r['fa3']} default {r['default']} "
          f"({r['fa3'] / r['default']:.2f}) best: " + ", ".join(f"{k} {v} ({r['fa3'] / v:.2f})" for v, k in best[:4]))
