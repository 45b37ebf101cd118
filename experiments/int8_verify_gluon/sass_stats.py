"""Offline compile of split-KV kernels (a module path + kernel name) for an arch; dump SASS stats."""
import importlib.util, os, re, subprocess, sys, tempfile, json, collections
from triton import knobs
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource, compile

def load_mod(path):
    spec = importlib.util.spec_from_file_location("kmod_" + os.path.basename(path)[:-3], path)
    m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); return m

def build(mod, kernel, constants, arch=90, num_warps=4, num_stages=3, extra_ptrs=None, types=None, gluon=False,
          maxnreg=None):
    """Compile `kernel` for sm_<arch> without a GPU.  Pointers are 16-byte aligned, other runtime integers i64 and
    divisible by 16 (as the JIT specialises them) except block_table_stride; `types` overrides any argument's type
    (e.g. "i32" or a tensor descriptor's mangled type), unaligned; `gluon` compiles a Gluon kernel; `maxnreg` caps
    registers per thread (warp-specialised kernels divide them between partitions)."""
    pointers = {"out_ptr": "*bf16", "q_ptr": "*bf16", "k_cache_ptr": "*i8", "v_cache_ptr": "*i8",
                "block_table_ptr": "*i32", "seq_lens_ptr": "*i32", "query_start_loc_ptr": "*i32"}
    if extra_ptrs: pointers.update(extra_ptrs)
    types = types or {}
    signature, aligned = {}, []
    for i, name in enumerate(kernel.arg_names):
        if name in constants: signature[name] = "constexpr"
        elif name in types: signature[name] = types[name]
        elif name == "qk_scale": signature[name] = "fp32"
        elif name in ("num_segments", "causal"): signature[name] = "i32"
        elif name.endswith("_ptr"):
            signature[name] = pointers.get(name, "*fp32"); aligned.append(i)
        else:
            signature[name] = "i64"
            if name != "block_table_stride": aligned.append(i)
    source_cls = ASTSource
    if gluon:
        from triton.experimental.gluon._runtime import GluonASTSource as source_cls
    src = source_cls(fn=kernel, signature=signature,
                     constexprs={(kernel.arg_names.index(k),): v for k, v in constants.items()},
                     attrs={(i,): [["tt.divisibility", 16]] for i in aligned})
    options = dict(num_warps=num_warps, num_stages=num_stages)
    if maxnreg is not None:
        options["maxnreg"] = maxnreg
    return compile(src, target=GPUTarget("cuda", arch, 32), options=options)


def wgmma_serialized(compiled, arch=90):
    """Whether ptxas serialises the kernel's wgmma (said only in its verbose log)."""
    with tempfile.TemporaryDirectory() as tmp:
        p = os.path.join(tmp, "k.ptx"); open(p, "w").write(compiled.asm["ptx"])
        log = subprocess.run([knobs.nvidia.ptxas.path, f"-arch=sm_{arch}a", "-v", p, "-o", os.path.join(tmp, "k.cubin")],
                             capture_output=True, text=True)
    return "serialized" in log.stdout + log.stderr

def sass(compiled):
    with tempfile.TemporaryDirectory() as tmp:
        p = os.path.join(tmp, "k.cubin"); open(p, "wb").write(compiled.asm["cubin"])
        usage = subprocess.run([knobs.nvidia.cuobjdump.path, "--dump-resource-usage", p], capture_output=True, text=True).stdout
        s = subprocess.run([knobs.nvidia.cuobjdump.path, "-sass", p], capture_output=True, text=True).stdout
    return usage, s

def loop_stats(s):
    lines = [l for l in s.splitlines() if re.match(r"\s+/\*[0-9a-f]{4,5}\*/", l)]
    # find backward branches => loops
    addr = []
    for l in lines:
        m = re.match(r"\s+/\*([0-9a-f]{4,5})\*/\s+(.*?);", l)
        if m: addr.append((int(m.group(1), 16), m.group(2)))
    loops = []
    for a, ins in addr:
        if "BRA" in ins:
            t = re.search(r"0x([0-9a-f]+)", ins)
            if t and int(t.group(1), 16) < a: loops.append((int(t.group(1), 16), a))
    res = []
    for lo, hi in loops:
        body = [ins for a, ins in addr if lo <= a <= hi]
        ops = collections.Counter(re.sub(r"^@!?U?P\w+\s+", "", i).split()[0].split(".")[0] for i in body)
        res.append((lo, hi, len(body), ops))
    return res

if __name__ == "__main__":
    pass
