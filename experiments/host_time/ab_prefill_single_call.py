# Same-process A/B of the sectioned prefill on a GPU: the plan before the
# single-call path (own tokens, sections, LSE merge) against today's.
#   git show cff11df:vllm/v1/attention/ops/triton_int8_sectioned_prefill.py > /tmp/old_sp.py
#   OUT=/tmp python3 experiments/host_time/ab_prefill_single_call.py
# H200 result: results/kernels/int8_kv_prefill_single_call_ab_nvidia_h200.json
import os
# A/B of the sectioned prefill: the committed plan (own tokens, each context
# section, LSE merge) against the single-call plan, same process, same data.
import importlib.util, json, math, os, sys
import torch
from triton.testing import do_bench, do_bench_cudagraph
sys.argv = ["x"]
spec = importlib.util.spec_from_file_location("bench", "benchmarks/kernels/benchmark_int8_kv_prefill.py")
bench = importlib.util.module_from_spec(spec); spec.loader.exec_module(bench)
spec = importlib.util.spec_from_file_location("old_sp", os.environ.get("OLD_SP", "/tmp/old_sp.py"))
old = importlib.util.module_from_spec(spec); spec.loader.exec_module(old)
from vllm.v1.attention.backends import triton_int8_per_token_head as backend
from vllm.v1.attention.ops import triton_int8_sectioned_prefill as new
from vllm.v1.attention.backends.triton_attn import TritonAttentionImpl
from vllm.v1.worker.workspace import init_workspace_manager
dev = torch.device("cuda")
init_workspace_manager(dev)
nq, nkv, hs, bs = 24, 4, 256, 16
class A: pass
args = A(); args.num_heads, args.num_kv_heads, args.head_size, args.block_size = nq, nkv, hs, bs
rows = []
for ctx, qlen in [(512, 512), (4096, 512), (4096, 2048), (16384, 512), (16384, 2048), (16384, 8192), (30720, 2048), (0, 2048), (0, 8192), (65536, 2048)]:
    seq_len = ctx + qlen
    nb = math.ceil(seq_len / bs)
    bt = torch.randperm(nb, device=dev, dtype=torch.int32)[None]
    pos = torch.arange(seq_len, device=dev)
    slots = bt[0, pos // bs].long() * bs + pos % bs
    k_seq = torch.randn(seq_len, nkv, hs, dtype=torch.bfloat16, device=dev); v_seq = torch.randn_like(k_seq)
    kv = torch.empty(nb, bs, nkv, 2 * (hs + 4), dtype=torch.int8, device=dev).permute(0, 2, 1, 3)
    impl = TritonAttentionImpl(nq, hs, hs**-0.5, nkv, None, None, "int8_per_token_head")
    impl.do_kv_cache_update(None, k_seq, v_seq, kv, slots)
    q = torch.randn(qlen, nq, hs, dtype=torch.bfloat16, device=dev)
    outs = {}
    res = {"context": ctx, "query_len": qlen}
    for name, mod in (("old", old), ("new", new)):
        backend.sectioned_prefill_attention = mod.sectioned_prefill_attention
        meta = bench.make_metadata(args, ctx, qlen, bt, dev)
        meta.prefill = mod.build_sectioned_prefill_metadata(
            torch.tensor([0, qlen], dtype=torch.int32), torch.tensor([seq_len], dtype=torch.int32), 0, dev)
        out = torch.empty_like(q); outs[name] = out
        fn = lambda: impl.forward(None, q, k_seq[ctx:], v_seq[ctx:], kv, meta, out)
        fn(); torch.accelerator.synchronize()
        res[f"{name}_eager_us"] = round(1000 * do_bench(fn, warmup=25, rep=200), 1)
        res[f"{name}_graph_us"] = round(1000 * do_bench_cudagraph(fn, rep=200), 1)
    res["max_abs_diff"] = (outs["old"].float() - outs["new"].float()).abs().max().item()
    res["graph_new_over_old"] = round(res["new_graph_us"] / res["old_graph_us"], 3)
    rows.append(res)
    print(res, flush=True)
json.dump(rows, open(os.environ["OUT"] + "/ab_prefill_single_call.json", "w"), indent=1)
print(f"{'ctx':>6} {'q':>5} {'old eager':>10} {'new eager':>10} {'old graph':>10} {'new graph':>10} {'new/old':>8} {'maxdiff':>8}")
for r in rows:
    print(f"{r['context']:>6} {r['query_len']:>5} {r['old_eager_us']:>10} {r['new_eager_us']:>10} {r['old_graph_us']:>10} {r['new_graph_us']:>10} {r['graph_new_over_old']:>8} {r['max_abs_diff']:>8.4f}")
