"""Check the Gluon prototype against exact attention and time it against the series' kernel and FA3 (H200).

Run from the repository root on a GPU machine with the fork installed (see README.md beside this file)."""
import sys, types, json, os, time
sys.path.insert(0, "benchmarks/kernels"); sys.path.insert(0, "experiments/int8_verify_gluon")
import torch, benchmark_int8_kv_attention as B
from vllm.v1.attention.ops import triton_int8_split_kv_attention as M
import gluon_verify as GV
args = types.SimpleNamespace(num_q_heads=24, num_kv_heads=4, head_size=256, copy_bytes=400 * 2**20, with_unified=False, no_errors=False)
sc = (torch.empty(1024, 24, 256, device="cuda"), torch.empty(1024, 24, device="cuda"), torch.empty(1024, 24, device="cuda"))

def launch(case, qlen, ctx, i, segs, tile=32, stages=3, lazy=1):
    kc, vc, ks, vs = case.int8[i]
    nq, nkv = 24, 4
    GV.kernel_int8_verify_rows_gluon[(nkv, case.batch, segs)](
        case.out, sc[0], sc[1], sc[2], case.q, kc, vc, ks, vs, case.block_table, case.seq_lens, case.cu_q,
        case.scale * 1.4426950408889634, segs, case.block_table.stride(0), kc.stride(0), kc.stride(2),
        ks.stride(0), ks.stride(2), case.q.stride(0), case.q.stride(1), case.out.stride(0), case.out.stride(1),
        num_query_heads=nq, NUM_QUERIES_PER_KV=6, ROW_SPLITS=1, HEAD=256, BLOCK_SIZE=case.bs, TILE=tile,
        STAGES=stages, P_LOG2_SCALE=6.0, RESCALE_THRESHOLD=8.0, LAZY=lazy, DK=64, DV=32, num_warps=4)
    if segs > 1:
        M.kernel_int8_split_kv_reduce[(case.q.shape[0], nq, 4)](
            case.out, sc[0], sc[1], sc[2], case.cu_q, case.batch, segs, num_query_heads=nq,
            out_stride_0=case.out.stride(0), out_stride_1=case.out.stride(1), HEAD_SIZE=256, HEAD_BLOCK=64, SEGMENT_CHUNK=32)

res = []
for ctx, qlen, bs, segs in [(1000, 6, 16, 4), (131072, 6, 16, 64), (131072, 8, 16, 64), (131072, 6, 1600, 64), (32768, 6, 16, 64)]:
    t0 = time.time()
    case = B.Case(args, 1, ctx, qlen, bs)
    exact = case.ref_first_request(*case.first_request(case.ref_kv))
    deq = case.ref_first_request(*case.dequant_first_request()) if ctx <= 4096 else None
    row = dict(ctx=ctx, qlen=qlen, block=bs)
    for tile in (16, 32):
        name = f"gluon_t{tile}"
        try:
            launch(case, qlen, ctx, 0, segs, tile=tile); torch.accelerator.synchronize()
            row[name + "_err"] = round(B.rel_err(case.out[:qlen], exact), 4)
            if deq is not None:
                row[name + "_err_deq"] = round(B.rel_err(case.out[:qlen], deq), 4)
            if ctx > 4096:
                row[name] = round(B.time_graph(lambda i: launch(case, qlen, ctx, i, segs, tile=tile), case.copies), 1)
        except Exception as e:
            row[name + "_exc"] = repr(e)[:400]
    if ctx > 4096:
        impls = B.make_impls(case, args)
        row["swapped"] = round(B.time_graph(impls["int8_split_kv"][0], case.copies), 1)
        fa = [k for k in impls if k.startswith("fa")][0]
        row["fa3"] = round(B.time_graph(impls[fa][0], case.copies_bf16), 1)
    res.append(row); print(json.dumps(row), f"{time.time()-t0:.0f}s", flush=True)
    del case; torch.cuda.empty_cache()
json.dump(res, open(os.path.join(os.environ.get("OUT", "/tmp"), "gluon.json"), "w"), indent=1)
