# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Write random-weight Qwen3.5 hybrid models (and DFlash drafters) to a folder.

The models have the Qwen3.5 architecture that vLLM 0.26.0 loads as
``Qwen3_5ForConditionalGeneration`` (run it with ``language_model_only=True``,
``skip_tokenizer_init=True`` and token-id prompts): Gated DeltaNet (linear
attention) layers with a gated full-attention layer every 4th layer, 4 KV
heads of dimension 256 and 24 query heads.  Weight names follow the
Hugging Face checkpoint layout (``model.language_model.*``, ``lm_head``), so
vLLM's own weight mapper and loaders are exercised.

Presets:

- ``tiny``: 24 layers, hidden size 256, for correctness tests.
- ``27b-geometry``: hidden size 5,120 and the attention/GDN shapes of
  Qwen3.5-27B (GDN 16 key / 48 value heads of dimension 128, conv kernel 4),
  but only 20 layers, for speed measurements.
- ``27b-geometry-full-drafter``: ``27b-geometry`` whose DFlash drafter has
  full-attention layers, which vLLM runs non-causally (the draft block sees
  all of itself), like z-lab's standard DFlash drafters.
- ``qwen3.5-27b``: the whole Qwen3.5-27B text stack, as its published
  ``config.json`` has it and as ``benchmarks/kv_cache_capacity.py``'s preset
  of the same name describes it: 64 layers (16 full attention, every 4th; 48
  Gated DeltaNet), MLP 17,408, vocabulary 248,320.  About 54 GB in BF16:
  write it with ``--config-only`` and run it with vLLM's dummy loader.

All have at least 5 full-attention layers (one in four): with fewer, vLLM's
KV cache planner splits the drafter's 5 layers over several KV cache groups,
which its DFlash proposer rejects.

With ``--config-only`` no weights are written, only ``config.json`` and
``generation_config.json`` (target and drafter alike): what an engine with
``load_format="dummy"`` (vLLM's dummy loader, random weights) and
``skip_tokenizer_init=True`` reads.  The weights then are vLLM's random
ones, not this script's, so only speed and memory mean anything.

With ``--drafter`` a matching DFlash drafter (5 causal sliding-window layers,
window 2,048, except ``27b-geometry-full-drafter``'s) is written to
``<out>-dflash`` (or ``--drafter-out``).  It shares the target's embedding
and output head, like published DFlash drafters, so it ships neither.

The output is a pure function of the arguments: each tensor is drawn from its
own generator seeded by ``(seed, tensor name)``, so the same command writes
the same bytes.  The output head is scaled so that logits have a standard
deviation of ``--logit-std`` nats: a plain random init gives near-uniform
logits, where any comparison of two runs is a coin toss, and a scaled head
makes a genuine divergence (a large drop in the chosen token's logprob)
distinguishable from a tie within rounding.

With ``--successor-logit`` the output head also maps every ordinary token
to a fixed successor (a permutation made of cycles of the lengths in
``--successor-cycles``), and ``--residual-scale`` shrinks what each layer
adds to the residual stream.  Greedy decoding then follows the cycle of the
last prompt token, with every layer still shifting the logits, which is what
a speculative-decoding check needs: a prompt-lookup drafter finds the cycle
in the context and the target accepts its drafts.  The successor of each
token is written to ``successor.json``.

Example::

    python benchmarks/models/make_hybrid_model.py --preset tiny \\
        --out /tmp/models/qwen35-tiny --drafter
    python benchmarks/models/make_hybrid_model.py --preset qwen3.5-27b \\
        --out /tmp/models/qwen3.5-27b --drafter --config-only
"""

import argparse
import dataclasses
import hashlib
import json
import math
import os
from collections.abc import Callable, Iterator

import torch
from safetensors.torch import save_file

# Token ids the Qwen3.5 config needs; they are placed at the top of the
# vocabulary so that prompts drawn from [0, vocab_size - 8) never contain
# them.
_NUM_RESERVED_TOKENS = 8


@dataclasses.dataclass(frozen=True)
class TargetShape:
    """Geometry of the Qwen3.5 target model."""

    num_hidden_layers: int
    hidden_size: int
    intermediate_size: int
    vocab_size: int
    num_attention_heads: int = 24
    num_key_value_heads: int = 4
    head_dim: int = 256
    full_attention_interval: int = 4
    linear_num_key_heads: int = 16
    linear_num_value_heads: int = 48
    linear_key_head_dim: int = 128
    linear_value_head_dim: int = 128
    linear_conv_kernel_dim: int = 4
    max_position_embeddings: int = 262144


@dataclasses.dataclass(frozen=True)
class DrafterShape:
    """Geometry of the DFlash drafter (a Qwen3 decoder stack)."""

    num_hidden_layers: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    # None: full-attention layers, which vLLM runs non-causally (the draft
    # block sees itself whole), as in z-lab's Qwen3.5 DFlash drafters.
    sliding_window: int | None = 2048
    block_size: int = 16


# Qwen/Qwen3.5-27B's text config; the drafter has the shapes of
# z-lab/Qwen3.5-27B-DFlash (5 layers, 32 query / 8 KV heads x 128, MLP
# 17,408, target layers [1, 16, 31, 46, 61]), with sliding layers like the
# other presets' drafters.
_QWEN35_27B = TargetShape(
    num_hidden_layers=64,
    hidden_size=5120,
    intermediate_size=17408,
    vocab_size=248320,
)
_QWEN35_27B_DFLASH = DrafterShape(
    num_hidden_layers=5,
    intermediate_size=17408,
    num_attention_heads=32,
    num_key_value_heads=8,
    head_dim=128,
)

PRESETS: dict[str, tuple[TargetShape, DrafterShape]] = {
    "tiny": (
        TargetShape(
            num_hidden_layers=24,
            hidden_size=256,
            intermediate_size=1024,
            vocab_size=8192,
            linear_num_key_heads=4,
            linear_num_value_heads=12,
        ),
        # 8 KV heads x 128 has the per-token bytes of the target's 4 x 256,
        # so drafter and target layers share one KV page size.
        DrafterShape(
            num_hidden_layers=5,
            intermediate_size=1024,
            num_attention_heads=16,
            num_key_value_heads=8,
            head_dim=128,
        ),
    ),
    # 20 of Qwen3.5-27B's 64 layers (5 full attention).
    "27b-geometry": (
        dataclasses.replace(_QWEN35_27B, num_hidden_layers=20),
        _QWEN35_27B_DFLASH,
    ),
    "qwen3.5-27b": (_QWEN35_27B, _QWEN35_27B_DFLASH),
    # 27b-geometry with a drafter of full, non-causal attention layers (the
    # attention of z-lab's standard DFlash drafters).
    "27b-geometry-full-drafter": (
        dataclasses.replace(_QWEN35_27B, num_hidden_layers=20),
        dataclasses.replace(_QWEN35_27B_DFLASH, sliding_window=None),
    ),
}

# Cap on the bytes of one safetensors shard, so that the 27B-geometry model
# is never held in memory whole while it is written.
_SHARD_BYTES = 2 * 1024**3


def layer_types(shape: TargetShape) -> list[str]:
    """Qwen3.5's layer pattern: full attention every ``interval``-th layer."""
    return [
        "full_attention"
        if (i + 1) % shape.full_attention_interval == 0
        else "linear_attention"
        for i in range(shape.num_hidden_layers)
    ]


def reserved_token_ids(vocab_size: int) -> dict[str, int]:
    """Special token ids, all outside the range prompts are drawn from."""
    top = vocab_size - 1
    return {
        "dflash_mask_token_id": top,
        "image_token_id": top - 1,
        "video_token_id": top - 2,
        "vision_start_token_id": top - 3,
        "vision_end_token_id": top - 4,
        "eos_token_id": top - 5,
    }


def prompt_vocab_size(vocab_size: int) -> int:
    """Token ids below this are ordinary text tokens, safe for prompts."""
    return vocab_size - _NUM_RESERVED_TOKENS


def drafter_target_layer_ids(num_target_layers: int, num_ids: int = 5) -> list[int]:
    """Target layers whose hidden states feed the drafter.

    Spread like published DFlash drafters (e.g. ``[1, 16, 31, 46, 61]`` for
    64 layers): from layer 1 to three layers before the end.
    """
    last = max(1, num_target_layers - 3)
    ids = {round(1 + i * (last - 1) / (num_ids - 1)) for i in range(num_ids)}
    return sorted(ids)


def target_config(shape: TargetShape) -> dict:
    """``config.json`` of the target, as Qwen3.5 checkpoints lay it out."""
    special = reserved_token_ids(shape.vocab_size)
    # Qwen3.5 rotates a quarter of each 256-wide head and splits the 32
    # rotary frequency pairs over (t, h, w); text positions are equal in all
    # three, but vLLM still builds the mrope embedding from this section.
    if shape.head_dim != 256:
        raise ValueError("Qwen3.5's mrope_section assumes head_dim 256")
    mrope_section = [11, 11, 10]
    text_config = {
        "model_type": "qwen3_5_text",
        "architectures": ["Qwen3_5ForCausalLM"],
        "vocab_size": shape.vocab_size,
        "hidden_size": shape.hidden_size,
        "intermediate_size": shape.intermediate_size,
        "num_hidden_layers": shape.num_hidden_layers,
        "num_attention_heads": shape.num_attention_heads,
        "num_key_value_heads": shape.num_key_value_heads,
        "head_dim": shape.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": shape.max_position_embeddings,
        "rms_norm_eps": 1e-6,
        "attention_bias": False,
        "attn_output_gate": True,
        "full_attention_interval": shape.full_attention_interval,
        "layer_types": layer_types(shape),
        "linear_conv_kernel_dim": shape.linear_conv_kernel_dim,
        "linear_key_head_dim": shape.linear_key_head_dim,
        "linear_value_head_dim": shape.linear_value_head_dim,
        "linear_num_key_heads": shape.linear_num_key_heads,
        "linear_num_value_heads": shape.linear_num_value_heads,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 10_000_000,
            "partial_rotary_factor": 0.25,
            "mrope_section": mrope_section,
            "mrope_interleaved": True,
        },
        "tie_word_embeddings": False,
        "eos_token_id": special["eos_token_id"],
        "dtype": "bfloat16",
    }
    # vLLM builds no vision tower with language_model_only=True, but the
    # config class still parses one; keep it tiny in case anything does.
    vision_config = {
        "model_type": "qwen3_5",
        "depth": 1,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_heads": 2,
        "in_channels": 3,
        "patch_size": 16,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "out_hidden_size": shape.hidden_size,
        "num_position_embeddings": 2304,
        "deepstack_visual_indexes": [],
    }
    return {
        "architectures": ["Qwen3_5ForConditionalGeneration"],
        "model_type": "qwen3_5",
        "text_config": text_config,
        "vision_config": vision_config,
        "image_token_id": special["image_token_id"],
        "video_token_id": special["video_token_id"],
        "vision_start_token_id": special["vision_start_token_id"],
        "vision_end_token_id": special["vision_end_token_id"],
        "tie_word_embeddings": False,
        "dtype": "bfloat16",
    }


def drafter_config(target: TargetShape, drafter: DrafterShape) -> dict:
    """``config.json`` of the DFlash drafter (``DFlashDraftModel``)."""
    special = reserved_token_ids(target.vocab_size)
    return {
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",
        "vocab_size": target.vocab_size,
        "hidden_size": target.hidden_size,
        "intermediate_size": drafter.intermediate_size,
        "num_hidden_layers": drafter.num_hidden_layers,
        "num_attention_heads": drafter.num_attention_heads,
        "num_key_value_heads": drafter.num_key_value_heads,
        "head_dim": drafter.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": target.max_position_embeddings,
        "rms_norm_eps": 1e-6,
        "attention_bias": False,
        "rope_theta": 10_000_000,
        # All layers sliding: vLLM treats sliding DFlash layers as causal,
        # which every backend (TRITON_ATTN with an INT8 cache included) runs.
        # Without a window, all full attention (non-causal in vLLM).
        "layer_types": [
            "full_attention" if drafter.sliding_window is None else "sliding_attention"
        ]
        * drafter.num_hidden_layers,
        "sliding_window": drafter.sliding_window,
        "use_sliding_window": drafter.sliding_window is not None,
        "block_size": drafter.block_size,
        "target_hidden_size": target.hidden_size,
        "dflash_config": {
            "mask_token_id": special["dflash_mask_token_id"],
            "target_layer_ids": drafter_target_layer_ids(target.num_hidden_layers),
        },
        "tie_word_embeddings": False,
        "dtype": "bfloat16",
    }


def target_tensor_specs(
    shape: TargetShape,
    logit_std: float,
    residual_scale: float = 1.0,
    successor: bool = False,
) -> Iterator[tuple[str, tuple[int, ...], str, float]]:
    """Yield ``(name, shape, init, scale)`` of every target tensor.

    Linear weights have std ``1/sqrt(fan_in)``, which keeps activations O(1)
    through the random stack; the projections that write to the residual
    stream are further scaled by ``residual_scale``.  ``init`` is ``normal``
    (std ``scale``), ``const`` (filled with ``scale``), ``A_log`` or
    ``dt_bias`` (Gated DeltaNet's own initialisations), or ``successor``
    for the output head of a successor model (see :func:`successor_head`).
    """
    h = shape.hidden_size
    r = residual_scale
    prefix = "model.language_model"
    yield f"{prefix}.embed_tokens.weight", (shape.vocab_size, h), "normal", 1.0
    key_dim = shape.linear_num_key_heads * shape.linear_key_head_dim
    value_dim = shape.linear_num_value_heads * shape.linear_value_head_dim
    nv = shape.linear_num_value_heads
    for i, kind in enumerate(layer_types(shape)):
        p = f"{prefix}.layers.{i}"
        # Qwen3.5's RMSNorms store (weight - 1): zero is the identity.
        yield f"{p}.input_layernorm.weight", (h,), "const", 0.0
        yield f"{p}.post_attention_layernorm.weight", (h,), "const", 0.0
        if kind == "full_attention":
            q = shape.num_attention_heads * shape.head_dim
            kv = shape.num_key_value_heads * shape.head_dim
            # q_proj also produces the output gate: 2 x heads x head_dim.
            yield f"{p}.self_attn.q_proj.weight", (2 * q, h), "normal", h**-0.5
            yield f"{p}.self_attn.k_proj.weight", (kv, h), "normal", h**-0.5
            yield f"{p}.self_attn.v_proj.weight", (kv, h), "normal", h**-0.5
            yield f"{p}.self_attn.o_proj.weight", (h, q), "normal", r * q**-0.5
            yield f"{p}.self_attn.q_norm.weight", (shape.head_dim,), "const", 0.0
            yield f"{p}.self_attn.k_norm.weight", (shape.head_dim,), "const", 0.0
        else:
            la = f"{p}.linear_attn"
            conv_dim = 2 * key_dim + value_dim
            yield f"{la}.in_proj_qkv.weight", (conv_dim, h), "normal", h**-0.5
            yield f"{la}.in_proj_z.weight", (value_dim, h), "normal", h**-0.5
            yield f"{la}.in_proj_b.weight", (nv, h), "normal", h**-0.5
            yield f"{la}.in_proj_a.weight", (nv, h), "normal", h**-0.5
            k = shape.linear_conv_kernel_dim
            yield f"{la}.conv1d.weight", (conv_dim, 1, k), "normal", k**-0.5
            yield f"{la}.A_log", (nv,), "A_log", 0.0
            yield f"{la}.dt_bias", (nv,), "dt_bias", 0.0
            # The gated RMSNorm of the GDN output is a plain RMSNorm.
            yield f"{la}.norm.weight", (shape.linear_value_head_dim,), "const", 1.0
            yield f"{la}.out_proj.weight", (h, value_dim), "normal", r * value_dim**-0.5
        m = shape.intermediate_size
        yield f"{p}.mlp.gate_proj.weight", (m, h), "normal", h**-0.5
        yield f"{p}.mlp.up_proj.weight", (m, h), "normal", h**-0.5
        yield f"{p}.mlp.down_proj.weight", (h, m), "normal", r * m**-0.5
    yield f"{prefix}.norm.weight", (h,), "const", 0.0
    # The final norm gives unit-RMS hidden states, so std logit_std/sqrt(h)
    # gives logits of std logit_std.
    init = "successor" if successor else "normal"
    yield "lm_head.weight", (shape.vocab_size, h), init, logit_std * h**-0.5


def drafter_tensor_specs(
    target: TargetShape, drafter: DrafterShape
) -> Iterator[tuple[str, tuple[int, ...], str, float]]:
    """Yield ``(name, shape, init, scale)`` of every drafter tensor.

    Names are those of published DFlash checkpoints: no ``model.`` prefix,
    no embedding and no output head (both are shared with the target).
    """
    h = target.hidden_size
    q = drafter.num_attention_heads * drafter.head_dim
    kv = drafter.num_key_value_heads * drafter.head_dim
    m = drafter.intermediate_size
    for i in range(drafter.num_hidden_layers):
        p = f"layers.{i}"
        # Qwen3's RMSNorms store the weight itself: one is the identity.
        yield f"{p}.input_layernorm.weight", (h,), "const", 1.0
        yield f"{p}.post_attention_layernorm.weight", (h,), "const", 1.0
        yield f"{p}.self_attn.q_proj.weight", (q, h), "normal", h**-0.5
        yield f"{p}.self_attn.k_proj.weight", (kv, h), "normal", h**-0.5
        yield f"{p}.self_attn.v_proj.weight", (kv, h), "normal", h**-0.5
        yield f"{p}.self_attn.o_proj.weight", (h, q), "normal", q**-0.5
        yield f"{p}.self_attn.q_norm.weight", (drafter.head_dim,), "const", 1.0
        yield f"{p}.self_attn.k_norm.weight", (drafter.head_dim,), "const", 1.0
        yield f"{p}.mlp.gate_proj.weight", (m, h), "normal", h**-0.5
        yield f"{p}.mlp.up_proj.weight", (m, h), "normal", h**-0.5
        yield f"{p}.mlp.down_proj.weight", (h, m), "normal", m**-0.5
    num_aux = len(drafter_target_layer_ids(target.num_hidden_layers))
    yield "fc.weight", (h, num_aux * h), "normal", (num_aux * h) ** -0.5
    yield "hidden_norm.weight", (h,), "const", 1.0
    yield "norm.weight", (h,), "const", 1.0


def _name_seed(seed: int, name: str) -> int:
    digest = hashlib.sha256(f"{seed}:{name}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


@dataclasses.dataclass(frozen=True)
class SuccessorHead:
    """Output head that makes every ordinary token predict a fixed successor.

    Attributes:
        logit: Logit of a token's successor when the final hidden state is
            that token's (normalised) embedding, in nats.
        cycle_lengths: Lengths of the successor cycles, used round-robin
            until the ordinary tokens run out (the last cycle takes what is
            left).

    """

    logit: float
    cycle_lengths: tuple[int, ...] = (2, 3, 4, 6, 8, 12, 16, 24, 32, 48)


def successor_map(
    vocab_size: int, cycle_lengths: tuple[int, ...], seed: int
) -> list[int]:
    """``succ[t]``: the successor of token ``t``.

    The ordinary tokens, shuffled by ``seed``, are cut into cycles of the
    given lengths (round-robin); reserved tokens are their own successors.
    """
    if not cycle_lengths or min(cycle_lengths) < 1:
        raise ValueError(f"cycle lengths must be positive, got {cycle_lengths}")
    n = prompt_vocab_size(vocab_size)
    gen = torch.Generator(device="cpu").manual_seed(_name_seed(seed, "successor"))
    order = torch.randperm(n, generator=gen).tolist()
    succ = list(range(vocab_size))
    start, i = 0, 0
    while start < n:
        length = min(cycle_lengths[i % len(cycle_lengths)], n - start)
        cycle = order[start : start + length]
        for j, tok in enumerate(cycle):
            succ[tok] = cycle[(j + 1) % length]
        start, i = start + length, i + 1
    return succ


def successor_head(
    seed: int,
    shape: TargetShape,
    logit_std: float,
    head: SuccessorHead,
    embed_name: str = "model.language_model.embed_tokens.weight",
) -> torch.Tensor:
    """Random output head plus a term that maps each token to its successor.

    Row ``succ[t]`` gains ``logit / hidden_size`` times token ``t``'s
    embedding: a final hidden state equal to that embedding after the RMS
    norm (norm ``sqrt(hidden_size)``, like the unit-std embedding) then
    gives ``succ[t]`` a logit of about ``head.logit`` on top of the random
    part.
    """
    h, v = shape.hidden_size, shape.vocab_size
    gen = torch.Generator(device="cpu").manual_seed(_name_seed(seed, "lm_head.weight"))
    w = torch.randn((v, h), generator=gen, dtype=torch.float32).mul_(
        logit_std * h**-0.5
    )
    emb = make_tensor(seed, embed_name, (v, h), "normal", 1.0).float()
    succ = torch.tensor(successor_map(v, head.cycle_lengths, seed))
    ordinary = torch.arange(prompt_vocab_size(v))
    w[succ[ordinary]] += emb[ordinary] * (head.logit / h)
    return w.to(torch.bfloat16)


def make_tensor(
    seed: int, name: str, shape: tuple[int, ...], init: str, scale: float
) -> torch.Tensor:
    """One BF16 tensor, a pure function of its arguments."""
    if init == "const":
        return torch.full(shape, scale, dtype=torch.bfloat16)
    gen = torch.Generator(device="cpu").manual_seed(_name_seed(seed, name))
    if init == "normal":
        t = torch.randn(shape, generator=gen, dtype=torch.float32).mul_(scale)
    elif init == "A_log":
        # As Qwen3-Next initialises it: A ~ U(1, 16), stored as log(A).
        t = torch.empty(shape).uniform_(1.0, 16.0, generator=gen).log_()
    elif init == "dt_bias":
        # Softplus inverse of dt ~ logU(1e-3, 1e-1), as Mamba2/GDN do.
        u = torch.rand(shape, generator=gen)
        dt = torch.exp(u * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3))
        t = dt + torch.log(-torch.expm1(-dt))
    else:
        raise ValueError(f"unknown init {init!r} for {name}")
    return t.to(torch.bfloat16)


def write_safetensors(
    out_dir: str,
    specs: Iterator[tuple[str, tuple[int, ...], str, float]],
    seed: int,
    shard_bytes: int = _SHARD_BYTES,
    special: dict[str, Callable[[], torch.Tensor]] | None = None,
) -> list[str]:
    """Write ``specs`` as safetensors shards plus an index; return file names.

    ``special`` maps an ``init`` that :func:`make_tensor` does not know to a
    function that builds that tensor.
    """
    special = special or {}
    os.makedirs(out_dir, exist_ok=True)
    sizes = [0]
    # Group tensors into shards first (by byte size, in spec order), so that
    # shard names are known before any tensor is generated.
    plan: list[list[tuple[str, tuple[int, ...], str, float]]] = [[]]
    for spec in specs:
        nbytes = 2 * math.prod(spec[1])
        if plan[-1] and sizes[-1] + nbytes > shard_bytes:
            plan.append([])
            sizes.append(0)
        plan[-1].append(spec)
        sizes[-1] += nbytes
    n = len(plan)
    files = [f"model-{i + 1:05d}-of-{n:05d}.safetensors" for i in range(n)]
    if n == 1:
        files = ["model.safetensors"]
    weight_map: dict[str, str] = {}
    for fname, group in zip(files, plan):
        tensors = {
            name: special[init]()
            if init in special
            else make_tensor(seed, name, shape, init, scale)
            for name, shape, init, scale in group
        }
        save_file(tensors, os.path.join(out_dir, fname), metadata={"format": "pt"})
        del tensors
        weight_map.update({name: fname for name, *_ in group})
        print(f"  wrote {fname} ({len(group)} tensors)", flush=True)
    if n > 1:
        index = {"metadata": {"total_size": sum(sizes)}, "weight_map": weight_map}
        _write_json(os.path.join(out_dir, "model.safetensors.index.json"), index)
    return files


def _write_json(path: str, obj: dict) -> None:
    with open(path, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=True)
        f.write("\n")


def make_models(
    preset: str,
    out: str,
    *,
    seed: int = 0,
    logit_std: float = 6.0,
    drafter: bool = False,
    drafter_out: str | None = None,
    num_layers: int | None = None,
    vocab_size: int | None = None,
    shard_bytes: int = _SHARD_BYTES,
    residual_scale: float = 1.0,
    successor: SuccessorHead | None = None,
    config_only: bool = False,
) -> dict[str, str]:
    """Write the target (and optionally the drafter); return their folders.

    With ``config_only`` the folders get their configs and no weights (for
    vLLM's dummy loader).
    """
    if config_only and successor is not None:
        raise ValueError(
            "a successor model is defined by its weights: it cannot be config-only"
        )
    target_shape, drafter_shape = PRESETS[preset]
    overrides = {}
    if num_layers is not None:
        overrides["num_hidden_layers"] = num_layers
    if vocab_size is not None:
        overrides["vocab_size"] = vocab_size
    target_shape = dataclasses.replace(target_shape, **overrides)

    print(f"target ({preset}) -> {out}", flush=True)
    os.makedirs(out, exist_ok=True)
    _write_json(os.path.join(out, "config.json"), target_config(target_shape))
    eos = reserved_token_ids(target_shape.vocab_size)["eos_token_id"]
    _write_json(
        os.path.join(out, "generation_config.json"),
        {"eos_token_id": eos, "do_sample": False},
    )
    special = {}
    if successor is not None:
        special["successor"] = lambda: successor_head(
            seed, target_shape, logit_std, successor
        )
        succ = successor_map(target_shape.vocab_size, successor.cycle_lengths, seed)
        _write_json(
            os.path.join(out, "successor.json"),
            {
                "logit": successor.logit,
                "cycle_lengths": list(successor.cycle_lengths),
                "residual_scale": residual_scale,
                "successor": succ,
            },
        )
    if config_only:
        print("  config only: no weights (load it with load_format=dummy)", flush=True)
    else:
        write_safetensors(
            out,
            target_tensor_specs(
                target_shape, logit_std, residual_scale, successor is not None
            ),
            seed,
            shard_bytes,
            special,
        )
    result = {"target": out}
    if drafter:
        dout = drafter_out or f"{out.rstrip('/')}-dflash"
        print(f"DFlash drafter -> {dout}", flush=True)
        os.makedirs(dout, exist_ok=True)
        _write_json(
            os.path.join(dout, "config.json"),
            drafter_config(target_shape, drafter_shape),
        )
        if not config_only:
            write_safetensors(
                dout,
                drafter_tensor_specs(target_shape, drafter_shape),
                seed + 1,
                shard_bytes,
            )
        result["drafter"] = dout
    return result


def main(argv: list[str] | None = None) -> dict[str, str]:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    parser.add_argument("--out", required=True, help="target model folder")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--logit-std",
        type=float,
        default=6.0,
        help="standard deviation of the output logits, in nats",
    )
    parser.add_argument(
        "--drafter", action="store_true", help="also write a DFlash drafter"
    )
    parser.add_argument(
        "--drafter-out", default=None, help="drafter folder (default <out>-dflash)"
    )
    parser.add_argument(
        "--num-layers", type=int, default=None, help="override the preset"
    )
    parser.add_argument(
        "--vocab-size", type=int, default=None, help="override the preset"
    )
    parser.add_argument(
        "--residual-scale",
        type=float,
        default=1.0,
        help="scale of what each layer writes to the residual stream",
    )
    parser.add_argument(
        "--successor-logit",
        type=float,
        default=None,
        help="give the output head a successor map of this logit, in nats",
    )
    parser.add_argument(
        "--successor-cycles",
        type=int,
        nargs="+",
        default=list(SuccessorHead.cycle_lengths),
        help="cycle lengths of the successor map",
    )
    parser.add_argument(
        "--config-only",
        action="store_true",
        help="write the configs and no weights (for vLLM's load_format=dummy)",
    )
    args = parser.parse_args(argv)
    if args.config_only and args.successor_logit is not None:
        parser.error("--successor-logit needs weights: not with --config-only")
    successor = None
    if args.successor_logit is not None:
        successor = SuccessorHead(args.successor_logit, tuple(args.successor_cycles))
    return make_models(
        args.preset,
        args.out,
        seed=args.seed,
        logit_std=args.logit_std,
        drafter=args.drafter,
        drafter_out=args.drafter_out,
        num_layers=args.num_layers,
        vocab_size=args.vocab_size,
        residual_scale=args.residual_scale,
        successor=successor,
        config_only=args.config_only,
    )


if __name__ == "__main__":
    main()
