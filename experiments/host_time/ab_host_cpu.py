# Host Python of a mixed step (batch 8 decode rows + one 512-token chunk over
# 4K, 16 layers), old vs new sectioned-prefill plan, kernels and FlashAttention
# stubbed; CPU only.
#   git show cff11df:vllm/v1/attention/ops/triton_int8_sectioned_prefill.py > /tmp/old_sp.py
#   CUDA_VISIBLE_DEVICES= TRITON_INTERPRET=1 .venv/bin/python experiments/host_time/ab_host_cpu.py
import os
import time, torch, sys, importlib.util, statistics
sys.path.insert(0,'benchmarks/e2e')
import host_time
from types import SimpleNamespace
from vllm.model_executor.warmup.triton_attn_warmup import _warmup_batch
from vllm.v1.attention.backends import triton_attn, triton_int8_per_token_head as m
from vllm.v1.attention.ops import triton_int8_sectioned_prefill as new, triton_int8_split_kv_attention as skv
spec_=importlib.util.spec_from_file_location("old_sp", os.environ.get("OLD_SP", "/tmp/old_sp.py"))
old=importlib.util.module_from_spec(spec_); spec_.loader.exec_module(old)
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVQuantMode
from vllm.v1.worker import workspace
class NoLaunch:
    def __getitem__(self, grid): return lambda *a, **k: None
for n in ("kernel_int8_split_kv_attention","kernel_int8_split_kv_verify","kernel_int8_split_kv_verify_wgmma","kernel_int8_split_kv_reduce"):
    setattr(skv, n, NoLaunch())
for mod in (old, new):
    mod._dequant_int8_pth_section_kernel = NoLaunch()
old.merge_attn_states = lambda *a, **k: None
dev=torch.device('cpu')
workspace.init_workspace_manager(dev)
spec=FullAttentionSpec(block_size=16,num_kv_heads=4,head_size=256,dtype=torch.bfloat16,kv_quant_mode=KVQuantMode.INT8_PER_TOKEN_HEAD)
b=triton_attn.TritonAttentionMetadataBuilder(spec,[],host_time._vllm_config(16),dev)
impls=[triton_attn.TritonAttentionImpl(24,256,256**-0.5,4,None,None,"int8_per_token_head") for _ in range(16)]
lse=torch.zeros(24,512)
fa_calls=[0]
def fake_fa(*a):
    fa_calls[0]+=1; return lse
for im in impls:
    im._int8_kernels = m.Int8PerTokenHeadKernels(m.Int8DecodeKernel.SPLIT_KV, m.Int8PrefillKernel.SECTIONED_FLASH_ATTN, fake_fa)
shape=triton_attn.TritonAttentionBackend.get_kv_cache_shape(64,16,4,256,"int8_per_token_head")
kv=torch.zeros(shape,dtype=torch.int8)
layer=SimpleNamespace(_q_scale=torch.ones(1),_k_scale=torch.ones(1),_v_scale=torch.ones(1))
cam=_warmup_batch([1]*8+[512],[4096]*9,16,dev)
n=cam.num_actual_tokens
q=torch.zeros(n,24,256,dtype=torch.bfloat16); k=torch.zeros(n,4,256,dtype=torch.bfloat16); out=torch.empty_like(q)
res={}
for rnd in range(3):
  for name, mod in (("old",old),("new",new)):
    m.build_sectioned_prefill_metadata = mod.build_sectioned_prefill_metadata
    m.sectioned_prefill_attention = mod.sectioned_prefill_attention
    ts=[]
    for i in range(220):
        t0=time.perf_counter()
        meta=b.build(0,cam)
        for im in impls: im.forward(layer,q,k,k,kv,meta,out)
        if i>=20: ts.append(time.perf_counter()-t0)
    res.setdefault(name,[]).append(statistics.median(ts)*1e6)
    fa_calls[0]=0; meta=b.build(0,cam); impls[0].forward(layer,q,k,k,kv,meta,out)
    print(name, round(res[name][-1],1), "us per step; FA calls per layer", fa_calls[0])
print({k: round(statistics.median(v),1) for k,v in res.items()})
