"""The asynchronous scheduler's computed-token correction on a CUDA device.

update_num_computed_tokens_for_batch_change is compiled by torch.compile
(dynamic=True).  Dynamic shapes specialise sizes 0 and 1, so as upstream
calls it (no unbacked marks) it compiles again whenever this step's or the
previous step's number of requests moves between one and more.  This script
runs one batch sequence twice in one process:

1. ``unmarked``: the compiled function called directly, as 0.26.0 calls it
   (no warm-up): graphs compiled and the time of each call;
2. ``series``: the series' warm-up, then the public function (unbacked
   per-request sizes) under ``error_on_recompile``: graphs and call times.

Each call's result is checked against vLLM's correction run eagerly.  Prints a
table; writes $OUT/correction_cuda.json.
"""

import json
import os
import time

import torch
import torch._dynamo
from torch._dynamo.utils import counters

from vllm.v1.spec_decode import utils as U

DEV = torch.device(os.environ.get("DEVICE", "cuda"))  # DEVICE=cpu: a dry run
MAX_REQS = 256
SEQUENCE = (1, 1, 2, 2, 1, 3, 16, 1, 5, 2, 1)


def sync():
    if DEV.type == "cuda":
        torch.cuda.synchronize()


# vLLM's own correction run eagerly (the function torch.compile wraps): the
# reference each compiled call is checked against.
EAGER = U._update_num_computed_tokens_for_batch_change._torchdynamo_orig_callable


def run(name, fn, warmup=None):
    torch._dynamo.reset()
    counters.clear()
    # The runner's device buffers, created outside inference mode.
    num_computed = torch.zeros(MAX_REQS, dtype=torch.int32, device=DEV)
    num_accepted = torch.ones(MAX_REQS, dtype=torch.int32, device=DEV)
    prev_positions = torch.zeros(MAX_REQS, dtype=torch.int64, device=DEV)
    prev_drafts = torch.zeros(MAX_REQS, dtype=torch.int32, device=DEV)
    out = {"name": name, "calls": []}
    if warmup is not None:
        t0 = time.perf_counter()
        warmup(num_computed, num_accepted, prev_positions, prev_drafts)
        sync()
        out["warmup_s"] = round(time.perf_counter() - t0, 3)
        out["graphs_after_warmup"] = counters["stats"]["unique_graphs"]
    g = torch.Generator().manual_seed(0)
    prev_n = 1
    ok = True
    with torch.inference_mode(), torch._dynamo.config.patch(
        error_on_recompile=warmup is not None
    ):
        for n in SEQUENCE:
            num_computed.copy_(torch.randint(0, 4096, (MAX_REQS,), generator=g))
            num_accepted.copy_(torch.randint(1, 7, (MAX_REQS,), generator=g))
            prev_drafts.copy_(torch.randint(0, 2, (MAX_REQS,), generator=g))
            prev = torch.randint(-1, prev_n, (n,), generator=g)
            prev_positions[:n].copy_(prev)
            valid = torch.randint(1, 7, (prev_n,), generator=g, dtype=torch.int32)
            host = torch.randint(0, 4096, (n,), generator=g, dtype=torch.int32)
            valid_d, host_d = valid.to(DEV), host.to(DEV)
            exp_computed, exp_accepted = num_computed.clone(), num_accepted[:n].clone()
            EAGER(exp_computed, exp_accepted, prev_positions[:n], valid_d, prev_drafts, host_d)
            sync()
            t0 = time.perf_counter()
            fn(num_computed, num_accepted[:n], prev_positions[:n], valid_d, prev_drafts, host_d)
            sync()
            ms = (time.perf_counter() - t0) * 1e3
            good = torch.equal(num_computed[:n], exp_computed[:n]) and torch.equal(
                num_accepted[:n], exp_accepted
            )
            ok &= good
            out["calls"].append({"reqs": n, "prev_reqs": prev_n, "ms": round(ms, 2), "ok": good,
                                 "graphs": counters["stats"]["unique_graphs"]})
            prev_n = n
    out["ok"] = ok
    out["graphs"] = counters["stats"]["unique_graphs"]
    return out


results = [
    run("unmarked", U._update_num_computed_tokens_for_batch_change),
    run("series", U.update_num_computed_tokens_for_batch_change,
        U.warmup_update_num_computed_tokens_for_batch_change),
]
res = {"device": torch.cuda.get_device_name() if DEV.type == "cuda" else "cpu", "torch": torch.__version__, "runs": results}
with open(os.path.join(os.environ.get("OUT", "/tmp"), "correction_cuda.json"), "w") as f:
    json.dump(res, f, indent=1)
print(res["device"], res["torch"])
print("run       warm-up s  graphs  ok   per-call ms (reqs after prev_reqs)")
for r in results:
    calls = " ".join(f"{c['ms']}({c['reqs']}<{c['prev_reqs']})" for c in r["calls"])
    print(f"{r['name']:9s} {r.get('warmup_s', '-')!s:9s}  {r['graphs']:6d}  {r['ok']!s:5s} {calls}")
