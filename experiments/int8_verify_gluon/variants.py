"""Variants of the series' split-KV module, built by one edit each to its source (no copies of the module here).

    import variants; m = variants.load("hilo")   # a module with the series' launcher and the edited kernel

hilo: the swapped verify kernel's two Q.K dots as independent chains (254 * S_hi + S_lo in fp32), measured on an
      H200 on 2026-12-02 as "variant_ops" in results/kernels/int8_verify_structure_experiments_2_nvidia_h200.json.
stage_q: the row-packing kernel stages its int8 query through memory as the swapped kernel does (offline SASS only).
"""
import importlib.util
import os
import tempfile

import vllm.v1.attention.ops.triton_int8_split_kv_attention as series

EDITS = {
    "hilo": [(
        """            S = tl.dot(K, q_hi, out_dtype=tl.int32) * 254
            S = tl.dot(K, q_lo, acc=S, out_dtype=tl.int32).to(tl.float32)
""",
        """            S_hi = tl.dot(K, q_hi, out_dtype=tl.int32).to(tl.float32)
            S_lo = tl.dot(K, q_lo, out_dtype=tl.int32).to(tl.float32)
            S = S_hi * 254.0 + S_lo
""")],
    "stage_q": [(
        """    q_hi = q_hi.to(tl.int8)
    row_qk_scale = q_scale * (qk_scale / 254.0)
""",
        """    q_hi = q_hi.to(tl.int8)
    row_qk_scale = q_scale * (qk_scale / 254.0)
    if num_segments == 1:
        staging = (
            out_ptr + token_idx[:, None] * out_stride_0 + q_head[:, None] * out_stride_1
        ).to(tl.pointer_type(tl.int8), bitcast=True)
    else:
        partial = (token_idx * num_segments + segm_idx) * num_query_heads + q_head
        staging = (segm_out_ptr + partial[:, None] * HEAD_SIZE).to(
            tl.pointer_type(tl.int8), bitcast=True
        )
    staging += offs_d[None, :]
    tl.store(staging, q_hi, mask=row_mask[:, None])
    tl.store(staging + HEAD_SIZE, q_lo, mask=row_mask[:, None])
    tl.debug_barrier()
    q_hi = tl.load(staging, mask=row_mask[:, None], other=0)
    q_lo = tl.load(staging + HEAD_SIZE, mask=row_mask[:, None], other=0)
""")],
}


def source(name: str) -> str:
    """The series' module source with the variant's edits applied (each must match exactly once)."""
    with open(series.__file__) as f:
        text = f.read()
    for old, new in EDITS[name]:
        if text.count(old) != 1:
            raise ValueError(f"variant {name!r}: its anchor no longer matches the series' module once")
        text = text.replace(old, new)
    return text


def load(name: str):
    """Import the variant from a file (Triton's JIT reads kernel source from files)."""
    path = os.path.join(tempfile.mkdtemp(prefix="int8_variant_"), f"variant_{name}.py")
    with open(path, "w") as f:
        f.write(source(name))
    spec = importlib.util.spec_from_file_location(f"variant_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
