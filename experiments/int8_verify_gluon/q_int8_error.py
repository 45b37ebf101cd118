# What one int8 Q per row (instead of the high/low pair) costs in accuracy against the *unquantised*
# reference, next to what the int8 cache itself costs (fp64, CPU):
#   .venv/bin/python experiments/int8_verify_gluon/q_int8_error.py
import torch, math
torch.manual_seed(0)
def quant_rows(x):  # per-row int8, symmetric
    s = x.abs().amax(-1, keepdim=True).clamp_min(1e-12) / 127
    return torch.round(x / s).clamp(-127, 127), s
def attn(q, k, v, scale):
    p = torch.softmax((q @ k.T) * scale, -1)
    return p @ v
res = {}
for outliers in (False, True):
  for trial in range(4):
    n, d, rows = 4096, 256, 96
    k = torch.randn(n, d, dtype=torch.float64)
    v = torch.randn(n, d, dtype=torch.float64)
    q = torch.randn(rows, d, dtype=torch.float64)
    if outliers:  # a few large K channels, as real models have
        k[:, :8] *= 12; q[:, :8] *= 3
    scale = d ** -0.5 * 2.0  # sharper softmax
    ref = attn(q, k, v, scale)
    kq, ks = quant_rows(k); vq, vs = quant_rows(v)
    kd, vd = kq * ks, vq * vs
    cache = attn(q, kd, vd, scale)                      # exact Q, int8 cache (hi/lo pair ~ exact)
    qq, qs = quant_rows(q)
    single = attn(qq * qs, kd, vd, scale)               # one int8 Q per row
    qb = q.to(torch.bfloat16).double(); kb = k.to(torch.bfloat16).double(); vb = v.to(torch.bfloat16).double()
    s = (qb @ kb.T) * scale; p = torch.softmax(s, -1).to(torch.bfloat16).double()
    bf16 = p @ vb                                        # FA-like: bf16 inputs, bf16 P
    e = lambda x: ((x - ref).norm() / ref.norm()).item()
    ed = lambda x: ((x - cache).norm() / cache.norm()).item()
    for name, x in (("int8 cache, exact Q", cache), ("int8 cache, int8 Q", single), ("bf16 (FA-like)", bf16)):
        res.setdefault((outliers, name), []).append((e(x), ed(x)))
for (o, name), v in res.items():
    import statistics
    print(f"outliers={o!s:5} {name:22} rel err vs fp64 exact {statistics.mean(a for a,_ in v):.5f}   vs dequantised-cache attention {statistics.mean(b for _,b in v):.5f}")
