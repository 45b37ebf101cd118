"""Where the INT8 mixed step's host time goes with real launches (issue 21).

benchmarks/e2e/host_time.py --launch (H100, 2026-12-06) gave the INT8 mixed step's builder 317-348 us against BF16's
17-22 and 174-185 us of Python per layer call against 95, where builder_profile.py timed the same builder's parts at
54-78 us.  This runs host_time.py (--launch, its default shapes, 100 steps) for the INT8 cache alone under cProfile
(its decode, verify and mixed steps; the mixed step's builder dominates the builder's time) and prints the
builder's and the layer call's callees by cumulative time and the functions with the most own time.
Needs a CUDA device and the fork installed.  Usage (repo root):
    python experiments/host_time/profile_launch.py [OUT_DIR]     -> OUT_DIR/profile_launch_mixed.{prof,txt}"""
import cProfile
import io
import os
import pstats
import sys

sys.path.insert(0, "benchmarks/e2e")
import host_time  # noqa: E402

out = sys.argv[1] if len(sys.argv) > 1 else "/tmp"
prof = cProfile.Profile()
prof.enable()
host_time.main(["--launch", "--kv", "int8", "--steps", "100", "--warmup", "10"])
prof.disable()
prof.dump_stats(os.path.join(out, "profile_launch_mixed.prof"))
buf = io.StringIO()
st = pstats.Stats(prof, stream=buf)
st.sort_stats("tottime").print_stats(35)
st.sort_stats("cumulative").print_callees(r"triton_attn.py:\d+\(build\)")
st.sort_stats("cumulative").print_callees(r"split_int8_step|build_sectioned_prefill_metadata")
st.sort_stats("cumulative").print_callees(r"forward_int8_per_token_head|sectioned_prefill_attention")
open(os.path.join(out, "profile_launch_mixed.txt"), "w").write(buf.getvalue())
print(buf.getvalue()[:12000])
