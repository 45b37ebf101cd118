# cProfile of the INT8 mixed step's host side on a GPU (H200 output:
# results/e2e/host_time_mixed_profile_nvidia_h200.txt).
# cProfile of the INT8 mixed step's host side on the GPU, each step queued
# behind a spinning kernel (so that any wait for the device shows).
import cProfile, pstats, sys, time, io
import torch
sys.path.insert(0, "benchmarks/e2e")
import host_time
from types import SimpleNamespace
from vllm.model_executor.warmup.triton_attn_warmup import _warmup_batch
from vllm.v1.worker import workspace
dev = torch.device("cuda")
workspace.init_workspace_manager(dev)
# host_time.py's INT8 builder, 16 layers and cache.
b, impls, kv = host_time._setup("int8", SimpleNamespace(layers=16, batch=8, num_blocks=64), dev)
layer = SimpleNamespace(_q_scale=torch.ones(1, device=dev), _k_scale=torch.ones(1, device=dev), _v_scale=torch.ones(1, device=dev))
for name, (ql, cl) in {"mixed": ([1] * 8 + [512], [4096] * 9), "decode": ([1] * 8, [4096] * 8)}.items():
    cam = _warmup_batch(ql, cl, 16, dev)
    n = cam.num_actual_tokens
    q = torch.zeros(n, 24, 256, dtype=torch.bfloat16, device=dev)
    k = torch.zeros(n, 4, 256, dtype=torch.bfloat16, device=dev)
    out = torch.empty_like(q)
    def step(busy):
        torch.accelerator.synchronize()
        if busy:
            torch.cuda._sleep(40_000_000)
        t0 = time.perf_counter()
        meta = b.build(0, cam)
        t1 = time.perf_counter()
        for im in impls:
            im.forward(layer, q, k, k, kv, meta, out)
        t2 = time.perf_counter()
        return t1 - t0, t2 - t1
    for _ in range(10):
        step(True)
    for busy in (False, True):
        r = sorted(step(busy) for _ in range(50))
        bs = sorted(x[0] for x in r)[25] * 1e6
        fs = sorted(x[1] for x in r)[25] * 1e6
        print(f"{name} busy={busy}: build {bs:.1f} us, forward {fs / 16:.1f} us/layer")
    pr = cProfile.Profile()
    for _ in range(30):
        torch.accelerator.synchronize()
        torch.cuda._sleep(40_000_000)
        pr.enable()
        meta = b.build(0, cam)
        for im in impls:
            im.forward(layer, q, k, k, kv, meta, out)
        pr.disable()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(30)
    print(f"=== {name} (30 steps x 16 layers)")
    print(s.getvalue()[:6000])
