"""Check and time ws_verify (warp-specialised verify kernel) against the series' kernel and FA3 (H200).
Usage: python ws_runs.py check | time      (results: $OUT/ws_runs.json, appended per mode)
Env: WS_VARIANTS=name,... (a subset of VARIANTS), WS_TIMED="batch,ctx,qlen,block;..." (the timed cases).
Run with PYTHONUNBUFFERED=1 and a `timeout` on each mode: a hand-off bug hangs the GPU instead of failing."""
import json, os, sys, time, types
sys.path.insert(0, "benchmarks/kernels"); sys.path.insert(0, "experiments/int8_verify_gluon")
import torch, benchmark_int8_kv_attention as B
from vllm.v1.attention.ops import triton_int8_split_kv_attention as M
import ws_verify as W

args = types.SimpleNamespace(num_q_heads=24, num_kv_heads=4, head_size=256, copy_bytes=400 * 2**20,
                             with_unified=False, no_errors=False)
VARIANTS = {  # name -> ws_launch keyword arguments ("series": whatever the installed series' launcher runs)
    # Memory in flight: int8 stages and tiles copied ahead of the widening (one program per SM).
    "s4a2": dict(stages=4, ahead=2, vh_stages=3),
    "s5a3": dict(stages=5, ahead=3, vh_stages=3),
    "s6a4": dict(stages=6, ahead=4, vh_stages=3),
    "s6a5": dict(stages=6, ahead=5, vh_stages=3),
    # Without the consumers' turns (no gain in run 2; the windowed form then needs no spill), 2 fp16 tiles.
    "s6a4np": dict(stages=6, ahead=4, vh_stages=2, pingpong=0),
    # pingpong=2: no turns, Q.K's two products chained into one int32 accumulator (254 * hi, then + lo), which
    # leaves the registers for 64-token tiles (fewer softmax steps, rescales and hand-offs per token).
    "c32": dict(stages=4, ahead=2, vh_stages=2, pingpong=2),
    "t64c": dict(stages=2, ahead=1, vh_stages=2, pingpong=2, tile=64),
    "t64c3": dict(stages=3, ahead=2, vh_stages=2, pingpong=2, tile=64),
    # pingpong=3: chained Q.K plus FA3's intra-warpgroup overlap (the next tile's high product during this tile's
    # softmax, its low product beside this P.V); 3 widened tiles (a consumer waits for its next tile while holding one).
    "o32": dict(stages=4, ahead=2, vh_stages=3, pingpong=3),
    # split_ready: the producer signals a tile's K (ready) before widening its V (vready), so Q.K never waits for
    # the widening; with it the overlap needs no third widened tile (the 3rd costs 32 B of spills: i % 3).
    "o32v2": dict(stages=4, ahead=2, vh_stages=2, pingpong=3),
    "o32k": dict(stages=4, ahead=2, vh_stages=2, pingpong=3, split_ready=True),
    "c32k": dict(stages=4, ahead=2, vh_stages=2, pingpong=2, split_ready=True),
    # K and V^T by TMA from one producer thread (scales by cp.async).
    "tma_s4a2": dict(stages=4, ahead=2, vh_stages=3, use_tma=True),
    "tma_s6a4": dict(stages=6, ahead=4, vh_stages=3, use_tma=True),
}
if os.environ.get("WS_VARIANTS"):
    VARIANTS = {k: VARIANTS[k] for k in os.environ["WS_VARIANTS"].split(",")}
scratch = [torch.empty(M.MAX_PARTIALS, 24, 256, device="cuda"), torch.empty(M.MAX_PARTIALS, 24, device="cuda"),
           torch.empty(M.MAX_PARTIALS, 24, device="cuda")]
out_path = os.path.join(os.environ.get("OUT", "/tmp"), "ws_runs.json")
res = json.load(open(out_path)) if os.path.exists(out_path) else []


def ws_fn(case, **kw):
    def fn(i):
        W.ws_launch(case.q, *case.int8[i], case.out, case.cu_q, case.seq_lens, case.block_table, case.qlen,
                    case.ctx, case.scale, *scratch, **kw)
    return fn


mode = sys.argv[1]
if mode == "check":
    ok = True
    for batch, ctx, qlen, bs in [(1, 1000, 6, 16), (1, 1001, 6, 1600), (1, 997, 16, 16), (2, 70, 8, 16),
                                 (3, 4099, 12, 1600), (1, 33, 16, 16), (1, 40000, 6, 16), (2, 40000, 16, 1600),
                                 (1, 5000, 1, 16), (1, 300, 2, 16), (3, 6, 6, 16), (2, 31, 6, 16), (1, 64, 16, 16)]:
        case = B.Case(args, batch, ctx, qlen, bs)
        deq = case.ref_first_request(*case.dequant_first_request())
        row = dict(mode="check", batch=batch, ctx=ctx, qlen=qlen, block=bs)
        case.out.fill_(float("nan")); B.make_impls(case, args)["int8_split_kv"][0](0); torch.cuda.synchronize()
        row["series_err"] = round(B.rel_err(case.out[:qlen], deq), 5)
        for name, kw in list(VARIANTS.items()):
            t0 = time.time()
            case.out.fill_(float("nan"))
            try:
                ws_fn(case, **kw)(0); torch.cuda.synchronize()
            except Exception as e:  # a variant that does not compile is dropped, the others go on
                msg = [ln for ln in str(e).splitlines() if ln.strip()][-3:]
                print(f"VARIANT {name} FAILED: {type(e).__name__}:", *msg, sep="\n  ", flush=True)
                del VARIANTS[name]; ok = False
                continue
            row[name + "_err"] = round(B.rel_err(case.out[:qlen], deq), 5)
            row[name + "_finite"] = bool(torch.isfinite(case.out).all())
            ok &= row[name + "_err"] < 0.01 and row[name + "_finite"]
            row[name + "_s"] = round(time.time() - t0, 1)
        res.append(row); print(json.dumps(row), flush=True)
        json.dump(res, open(out_path, "w"), indent=1)
    json.dump(list(VARIANTS), open(out_path + ".ok", "w"))
    print("CHECK", "ok" if ok else "FAILED", flush=True)
    sys.exit(0 if ok else 1)

if os.path.exists(out_path + ".ok"):  # the variants that passed the check
    VARIANTS = {k: v for k, v in VARIANTS.items() if k in json.load(open(out_path + ".ok"))}
timed = [(1, 131072, 6, 16), (1, 131072, 16, 16), (1, 131072, 8, 1600), (1, 131072, 12, 1600),
         (1, 32768, 6, 16), (8, 32768, 16, 16), (8, 131072, 8, 1600), (1, 131072, 4, 16)]
if os.environ.get("WS_TIMED"):  # "batch,ctx,qlen,block;..."
    timed = [tuple(int(x) for x in c.split(",")) for c in os.environ["WS_TIMED"].split(";")]
for batch, ctx, qlen, bs in timed:
    t0 = time.time()
    case = B.Case(args, batch, ctx, qlen, bs)
    impls = B.make_impls(case, args)
    fa = [k for k in impls if k.startswith("fa")][0]
    row = dict(mode="time", batch=batch, ctx=ctx, qlen=qlen, block=bs,
               fa3=round(B.time_graph(impls[fa][0], case.copies_bf16), 1),
               series=round(B.time_graph(impls["int8_split_kv"][0], case.copies), 1))
    for name, kw in VARIANTS.items():
        row[name] = round(B.time_graph(ws_fn(case, **kw), case.copies), 1)
    row["series2"] = round(B.time_graph(impls["int8_split_kv"][0], case.copies), 1)
    res.append(row); print(json.dumps(row), f"{time.time() - t0:.0f}s", flush=True)
    json.dump(res, open(out_path, "w"), indent=1)
    del case, impls; torch.cuda.empty_cache()
print("\nFA3 / time")
for r in res:
    if r.get("mode") == "time":
        s = min(r["series"], r["series2"])
        print(f"b{r['batch']} {r['ctx'] // 1024}K q{r['qlen']} bs{r['block']}: fa3 {r['fa3']} series {s} "
              f"({r['fa3'] / s:.2f})" + "".join(f" {k} {r[k]} ({r['fa3'] / r[k]:.2f})" for k in VARIANTS))
