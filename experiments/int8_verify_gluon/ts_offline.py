"""Offline sm_90 compile of the token-split verify kernel (ts_verify.py):
registers and spills per partition, shared memory, the consumer loop's SASS.
    CUDA_VISIBLE_DEVICES= .venv/bin/python experiments/int8_verify_gluon/ts_offline.py [BLOCK] [N1]
(env REGS: consumer registers (224), INFLIGHT (0), STAGES (2))"""
import os, re, sys
sys.path.insert(0, "experiments/int8_verify_gluon")
from sass_stats import build, loop_stats, sass
import ts_verify as ts

bs = int(sys.argv[1]) if len(sys.argv) > 1 else 16
n1 = int(sys.argv[2]) if len(sys.argv) > 2 else 32
regs = int(os.environ.get("REGS", 224))
consts = dict(num_query_heads=24, NUM_QUERIES_PER_KV=6, HEAD_SIZE=256, BLOCK_SIZE=bs, N1=n1,
              STAGES=int(os.environ.get("STAGES", 2)), AHEAD=1, P_LOG2_SCALE=6.0,
              RESCALE_THRESHOLD=8.0, INFLIGHT=int(os.environ.get("INFLIGHT", 0)), CONSUMER_REGS=regs, SIGMA=bool(int(os.environ.get("SIGMA", 1))), QPAIR=bool(int(os.environ.get("QPAIR", 1))))
c = build(ts, ts.kernel_int8_verify_token_split, consts, gluon=True, maxnreg=ts.MAX_REGISTERS)
u, s = sass(c)
open(f"/tmp/ts_{bs}_{n1}.sass", "w").write(s)
open(f"/tmp/ts_{bs}_{n1}.ptx", "w").write(c.asm["ptx"])
print(re.findall(r"REG:\d+ STACK:\d+ SHARED:\d+", u), "smem", c.metadata.shared,
      "LDL/STL:", len(re.findall(r"\bLDL\b", s)), len(re.findall(r"\bSTL\b", s)))
for lo, hi, n, ops in loop_stats(s):
    if n > 60:
        print(hex(lo), hex(hi), n, f"{n / 4:.0f} per 32 tokens", dict(ops.most_common(16)))
