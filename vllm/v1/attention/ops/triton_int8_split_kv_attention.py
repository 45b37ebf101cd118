# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Split-KV attention over the INT8 per-token-head KV cache.

Decode and speculative verify (1..16 query tokens per request) are
memory-bound: each step streams the whole context once.  The kernel here

* reads the planar page layout of the Triton backend (see
  ``int8_per_token_head_planar_views`` in
  ``vllm/v1/attention/backends/triton_attn.py``): inside a page, each KV
  head's K rows, then its V values stored transposed (one row of
  ``block_size`` bytes per channel), then the fp32 K and V scales.  A KV
  tile of one head is a few contiguous runs of bytes, read with 16-byte
  vector loads straight into shared memory, and both dots take their int8
  operand from there the way they take fp16 (K with the head dimension
  contiguous, V with the token dimension contiguous);
* computes Q.K with int8 tensor-core dots and never widens K: each query
  row is split into two int8 parts, ``Q / s = q_hi + q_lo / 254`` with
  ``s = max|Q| / 127``, so ``254 * (q_hi . K) + q_lo . K`` (an exact int32)
  is Q.K to within 1.6e-5 of ``s * 127 * max|K|`` (Hopper's verify kernel
  with 65-128 rows rounds the row to one part instead: see
  :func:`int8_split_kv_rounds_query`);
* widens V to fp16 with a bit trick (``0x6400 | (v ^ 0x80)`` is the fp16
  value ``1152 + v``) instead of int -> float conversions, which issue at a
  quarter of the ALU rate; P.V runs as an fp16 dot with the V scales folded
  into P relative to a running V-scale reference, so fp16's range never
  limits bf16 models;
* packs the query heads that share a KV head and the query tokens of a
  request into the rows of a tile (``BLOCK_M`` rows per program; larger
  verify steps spread their rows over programs that read the same K/V
  tiles through L2); with ``PV_CHUNK`` the P.V product runs as dots of
  that many output channels, no wider than the rows, which makes Triton
  give each warp whole rows, so a row's softmax never leaves its warp;
* for larger verify steps, ``kernel_int8_split_kv_verify`` swaps the
  operands instead (``S^T = K Q^T``, ``O^T += V^T P^T``): the KV tile is the
  M axis of both dots and one program holds up to 64 query rows, so each
  K/V tile is read and widened once for all of them; on Hopper,
  ``kernel_int8_split_kv_verify_wgmma`` (Gluon, warpgroup MMA, in
  ``triton_int8_split_kv_wgmma.py``) does the same with the query rows on
  the M axis, reading Q and K from shared memory;
* rescales the output accumulator only when a row's running maximum grows
  by more than ``RESCALE_THRESHOLD`` (log2 units);
* splits the context into segments processed by separate programs and
  merges them with a log-sum-exp reduction.

The launch geometry is chosen in one place,
:func:`select_int8_split_kv_geometry`, from the GPU family's table in
``GEOMETRY_TABLES``.
"""

import dataclasses
import functools
import os
from dataclasses import dataclass
from types import MappingProxyType
from typing import NamedTuple

import torch

from vllm.logger import init_logger
from vllm.platforms import current_platform
from vllm.triton_utils import tl, triton
from vllm.utils.math_utils import cdiv, next_power_of_2

try:
    from vllm.v1.attention.ops.triton_int8_split_kv_wgmma import (
        MAX_REGISTERS as WGMMA_MAX_REGISTERS,
    )
    from vllm.v1.attention.ops.triton_int8_split_kv_wgmma import (
        kernel_int8_split_kv_verify_wgmma,
    )
except ImportError:  # No Triton, or a Triton without Gluon.
    kernel_int8_split_kv_verify_wgmma = None
    WGMMA_MAX_REGISTERS = None

logger = init_logger(__name__)

# Largest number of query tokens per request the kernel handles; longer
# queries (prefill) go elsewhere.
MAX_QUERY_LEN = 16
SUPPORTED_HEAD_SIZES = (64, 128, 256)
SUPPORTED_QUERY_DTYPES = (torch.float16, torch.bfloat16)
# (token, segment) partial-result slots the metadata builder allocates.  At
# 24 query heads x 256 dims this is 24 MiB; batches with more tokens get
# fewer segments (they fill the GPU with requests instead).
MAX_PARTIALS = 1024

# P is scaled by 2**P_LOG2_SCALE before it is rounded to the fp16 dot
# operand, so the small probabilities of long contexts stay normal fp16
# numbers; L carries the same factor, so it cancels.
P_LOG2_SCALE = 6.0
# The running maximum used as the softmax reference is only raised when a
# row's maximum exceeds it by more than this (log2 units), so the output
# accumulator is rescaled a few times per segment instead of every tile.
# P then stays below 2**(P_LOG2_SCALE + RESCALE_THRESHOLD) = 2**14, well
# inside fp16's range.
RESCALE_THRESHOLD = 8.0
# Widen V with PTX on CUDA; with Triton ops under the interpreter and on
# other platforms.
_PTX_WIDEN = current_platform.is_cuda() and os.environ.get("TRITON_INTERPRET") != "1"


@dataclass(frozen=True)
class Int8SplitKVGeometry:
    """Launch geometry of the split-KV kernel.

    Attributes:
        tile_size: KV tokens per loop iteration.
        num_segments: Context segments per (request, KV head); a power of 2.
        num_warps: Warps per program.
        num_stages: Software-pipelining depth of the KV loads.
        block_m: Query rows (query heads x query tokens) per program; a
            request's rows are spread over ``cdiv(rows, block_m)`` programs
            (with ``swap_ab``, whole query tokens per program).
        swap_ab: One program holds every query row of a (request, KV head)
            and puts the KV tile on the M axis of both dots, so each tile is
            read and widened once (``kernel_int8_split_kv_verify``).
        pv_chunk: Output channels per P.V dot of the row-packing kernel (0:
            one dot over the whole head).  Dots no wider than ``block_m`` (and
            tiles no longer than it) make Triton give each warp whole rows,
            so the softmax needs no cross-warp traffic.
        wgmma: Hopper only: the verify kernel on warpgroup MMA
            (``kernel_int8_split_kv_verify_wgmma``, one program per
            multiprocessor); ``block_m`` must be ``16 * num_warps``, the rows
            of each of its two consumer warpgroups, and ``num_stages`` is its
            int8 ring.  Elsewhere, and under Triton's interpreter, the same
            geometry runs the swapped kernel.
    """

    tile_size: int
    num_segments: int
    num_warps: int
    num_stages: int
    block_m: int = 16
    swap_ab: bool = False
    pv_chunk: int = 0
    wgmma: bool = False


class GeometryEntry(NamedTuple):
    """One row of a geometry table; the first row that covers a launch
    applies."""

    # Query rows (query heads per KV head x longest query) it covers.
    max_rows: int
    geometry: Int8SplitKVGeometry
    # Keys per KV head the batch may hold (number of requests x longest
    # context, clamped to a sliding window); None: any number.
    max_batch_keys: int | None = None

    def covers(self, rows: int, batch_keys: int) -> bool:
        return rows <= self.max_rows and (
            self.max_batch_keys is None or batch_keys <= self.max_batch_keys
        )


# Batches that hold at most this many keys per KV head run 17-32 query rows
# on the warpgroup-MMA kernel's alternate tiles rather than the split-P.V
# entry.  H200, 3-5 tokens x 6 heads: 1.10-1.23x FA3 against 0.88-1.15x at
# 32K with 1-8 requests and at 128K with 1-2; at 128K with 4-8 requests the
# split-P.V entry was 3-14% faster.
WGMMA_SHORT_BATCH_KEYS = 256 * 1024

# Geometry tables, one per GPU family (compute capability major version).
# Segment counts are for REFERENCE_SMS multiprocessors and
# REFERENCE_KV_HEADS KV heads per request; select_int8_split_kv_geometry
# scales them.  The last row of a table covers every query row it takes.
#
# Hopper (sm_90), measured on an H200 (benchmarks/kernels/
# benchmark_int8_kv_attention.py): verify steps of more than 32 rows run
# the warp-specialised warpgroup-MMA kernel, 32-token tiles in four int8
# stages, one program per multiprocessor: its two consumer warpgroups share
# each tile's copy and widening (12-16 tokens x 6 heads: 128 rows) or take
# alternate tiles of the same 64 rows (6-10 tokens).  17-32 rows (4 tokens
# x 6 heads) take it too in batches of few keys; in larger ones they split
# P.V into 32-channel dots so that each of 2 warps owns 16 rows: 1.1-1.5x
# faster than one P.V dot over the head with 4 warps.
_SM90_WGMMA = Int8SplitKVGeometry(32, 32, 4, 4, 64, wgmma=True)
_SM90_GEOMETRIES: tuple[GeometryEntry, ...] = (
    GeometryEntry(16, Int8SplitKVGeometry(32, 128, 2, 2, 16)),
    GeometryEntry(32, _SM90_WGMMA, max_batch_keys=WGMMA_SHORT_BATCH_KEYS),
    GeometryEntry(32, Int8SplitKVGeometry(32, 128, 2, 2, 32, pv_chunk=32)),
    GeometryEntry(16 * MAX_QUERY_LEN, _SM90_WGMMA),
)
# Ampere and Ada (sm_80/86/89): no timings yet.  Geometries that compile
# without register spills for sm_80 and sm_86 and fit sm_86's 99 KB of
# shared memory per block.
_SM8X_GEOMETRIES: tuple[GeometryEntry, ...] = (
    GeometryEntry(16, Int8SplitKVGeometry(32, 128, 2, 2, 16)),
    # The split P.V form of sm_90's 32-row entry (the same mma.sync code)
    # with 16-token tiles in three stages, since 32-token tiles spill on
    # sm_86: 0.94-1.16x FA3 at 4 tokens on an H200, where one P.V dot over
    # the head (the 64-row entry below) took 0.73-0.87x.
    GeometryEntry(32, Int8SplitKVGeometry(16, 128, 2, 3, 32, pv_chunk=32)),
    GeometryEntry(64, Int8SplitKVGeometry(32, 64, 4, 2, 32)),
    GeometryEntry(16 * MAX_QUERY_LEN, Int8SplitKVGeometry(32, 32, 4, 2, 32)),
)
GEOMETRY_TABLES: dict[int, tuple[GeometryEntry, ...]] = {
    8: _SM8X_GEOMETRIES,
    9: _SM90_GEOMETRIES,
}

# The tables' segment counts fill this many multiprocessors (an H200's)...
REFERENCE_SMS = 132
# ...with this many KV heads per request (Qwen3.5-27B's 4).  Tensor
# parallelism leaves fewer on each rank, so single-token decode gets
# proportionally more segments: with 2 KV heads at 128K, 62.9 instead of
# 79.3 us on an H200.  Verify steps were slower with more segments (6
# tokens at 128K: 184 instead of 171 us), so they keep the table's.
REFERENCE_KV_HEADS = 4
# Programs per multiprocessor beyond which larger batches get fewer segments.
PROGRAMS_PER_SM = 8
# The warpgroup-MMA kernel's 12 warps and 162-178 KB of shared memory (head
# size 256) take a whole multiprocessor; more segments than one such wave
# were slower (H200, 128K: 6 tokens 152 instead of 140 us, 16 tokens 219
# instead of 203 us).
WGMMA_PROGRAMS_PER_SM = 1
# Its widened V tiles, and the tiles copied ahead of the widening: deeper
# rings (6 stages, 4 tiles ahead, 3 widened tiles) changed nothing on an
# H200 (128K, 6 / 16 tokens: 132.7 / 205.3 us against 136.6 / 196.5).
WGMMA_VH_STAGES = 2
WGMMA_AHEAD = 2
# Without a window, where each 64-token tile lies in one cache block:
# 64-token tiles in two int8 stages, one copied ahead, and the query rounded
# once (see wgmma_pipeline).  H100, 32K-128K, batch 1 and 8, blocks of 1600
# (and 64), against 32-token tiles: 12-16 tokens 6-14% faster (128K, batch
# 1, 16 tokens: 143.7 instead of 159.6 us); 6-8 tokens (alternate tiles)
# 2-6% faster from HBM and 15-22% from L2, where the kernel runs at the
# pace it keeps on an H200 (128K, batch 1, 6 tokens: 127.6 / 93.0 instead
# of 132.2 / 116.3 us).  Blocks of 16 keep 32-token tiles: 3-8% slower
# there with 12-16 tokens, and one rounded query in 32-token alternate
# tiles 11% slower.
WGMMA_ROWS_TILE_SIZE = 64
WGMMA_ROWS_STAGES = 2


@functools.cache
def _device_properties() -> tuple[int | None, int]:
    """(compute capability major, multiprocessor count) of this device;
    (None, REFERENCE_SMS) where the platform cannot tell (CPU tests)."""
    if not current_platform.is_cuda_alike():
        return None, REFERENCE_SMS
    capability = current_platform.get_device_capability()
    return (capability.major if capability else None), (
        current_platform.num_compute_units()
    )


@functools.cache
def _replace_geometry(
    geometry: Int8SplitKVGeometry, **changes: int | bool
) -> Int8SplitKVGeometry:
    """``dataclasses.replace`` once per distinct result: it runs the
    constructor, about 2 us of host time per step (the results are few:
    a table's rows times power-of-two segment counts)."""
    return dataclasses.replace(geometry, **changes)


def geometry_table(
    capability_major: int | None,
) -> tuple[GeometryEntry, ...]:
    """The geometry table of a GPU family (the newest one when unknown)."""
    if capability_major is None:
        return GEOMETRY_TABLES[max(GEOMETRY_TABLES)]
    known = [major for major in GEOMETRY_TABLES if major <= capability_major]
    return GEOMETRY_TABLES[max(known) if known else min(GEOMETRY_TABLES)]


def select_int8_split_kv_geometry(
    max_query_len: int,
    max_seq_len: int,
    num_seqs: int,
    num_tokens: int,
    max_partials: int,
    *,
    num_queries_per_kv: int,
    num_kv_heads: int,
    sliding_window: int = 0,
    capability_major: int | None = None,
    num_sms: int | None = None,
) -> Int8SplitKVGeometry:
    """Choose the launch geometry for one split-KV launch.

    The base geometry is the first row of the GPU family's table that
    covers the step's query rows and the keys its batch holds.
    Decode wants many segments: the grid must fill the GPU with only
    ``num_seqs * num_kv_heads`` (request, KV head) pairs, so segments scale
    with the multiprocessor count and, for decode, inversely with the KV
    heads; short contexts, large batches and the scratch size then cut them.

    Only host integers are consulted, so the choice is fixed for a captured
    CUDA graph (captured with ``max_seq_len == max_model_len``).

    Args:
        max_query_len: Longest query of the batch (1..16).
        max_seq_len: Longest context (including the query) of the batch.
        num_seqs: Number of requests.
        num_tokens: Number of query tokens (rows of ``q``).
        max_partials: (token, segment) slots in the scratch buffers.
        num_queries_per_kv: Query heads per KV head.
        num_kv_heads: KV heads of the layer (on this rank).
        sliding_window: The layer's window (0: none); a request's rows then
            see at most ``sliding_window + max_query_len - 1`` keys, which
            the segments split instead of the whole context.
        capability_major: GPU family (compute capability major); this
            device's when None.
        num_sms: Multiprocessors; this device's when None.
    """
    if capability_major is None or num_sms is None:
        device_major, device_sms = _device_properties()
        capability_major = capability_major or device_major
        num_sms = num_sms or device_sms
    table = geometry_table(capability_major)
    rows = num_queries_per_kv * max_query_len
    # A sliding-window layer's rows see at most this many keys.
    if sliding_window > 0:
        max_seq_len = min(max_seq_len, sliding_window + max_query_len - 1)
    batch_keys = num_seqs * max_seq_len
    base = next(
        (e.geometry for e in table if e.covers(rows, batch_keys)),
        table[-1].geometry,
    )
    # Tiles that straddle cache blocks are read in runs of the largest power
    # of two dividing the block size: at least 16 tokens for any block size
    # the backend allows (a multiple of 16), so the tables' tiles always fit.
    tile_size = base.tile_size
    # Fewer multiprocessors, fewer segments (a power of two, at least 1).
    num_segments = base.num_segments * max(num_sms, 1) // REFERENCE_SMS
    num_segments = 1 << max(num_segments, 1).bit_length() - 1
    # Decode with fewer KV heads: more segments, as many programs.
    if max_query_len == 1 and 0 < num_kv_heads < REFERENCE_KV_HEADS:
        num_segments <<= (REFERENCE_KV_HEADS // num_kv_heads).bit_length() - 1
    # Short contexts (or windows): keep at least a few tiles per segment.
    while num_segments > 1 and num_segments * tile_size * 4 > max_seq_len:
        num_segments //= 2
    # Larger batches fill the GPU with requests; keep the grid ~constant.
    programs_per_seq = max(num_kv_heads, 1)
    max_programs = PROGRAMS_PER_SM * max(num_sms, 1)
    partials_per_segment = 1
    if base.wgmma:
        # One wave of programs, the row splits of each KV head included; up
        # to block_m rows its consumers take alternate tiles, each writing a
        # partial (the launcher falls back to one per segment when the
        # scratch cannot hold two).
        tile_split = rows <= base.block_m
        partials_per_segment = 2 if tile_split else 1
        programs_per_seq *= cdiv(rows, _wgmma_program_rows(base, tile_split))
        max_programs = WGMMA_PROGRAMS_PER_SM * max(num_sms, 1)
    while (
        num_segments > 1 and num_seqs * programs_per_seq * num_segments > max_programs
    ):
        num_segments //= 2
    # Stay within the scratch buffers (num_segments is a power of two).
    while (
        num_segments > 1
        and num_tokens * num_segments * partials_per_segment > max_partials
    ):
        num_segments //= 2
    return _replace_geometry(base, num_segments=num_segments)


def _wgmma_supported() -> bool:
    """Whether this process can run the warpgroup-MMA verify kernel: an
    sm_90 device (wgmma is Hopper's; later families lack it), Gluon, and
    compiled kernels rather than Triton's interpreter."""
    return (
        kernel_int8_split_kv_verify_wgmma is not None
        and _PTX_WIDEN
        and _device_properties()[0] == 9
    )


def _wgmma_program_rows(geometry: Int8SplitKVGeometry, tile_split: bool) -> int:
    """Query rows per program of the warpgroup-MMA kernel: its consumers'
    ``block_m`` rows each, or the same ``block_m`` rows with alternate
    tiles."""
    return geometry.block_m if tile_split else 2 * geometry.block_m


@functools.cache
def wgmma_pipeline(
    geometry: Int8SplitKVGeometry,
    tile_split: bool,
    sliding_window: int,
    block_size: int,
) -> MappingProxyType[str, int | bool]:
    """Tile size, rings, loop and query parts of the warpgroup-MMA kernel
    (its ``TILE_SIZE``, ``STAGES``, ``VH_STAGES``, ``AHEAD``, ``OVERLAP``
    and ``QUERY_PAIR``), computed once per distinct launch (read-only:
    every layer call of a step shares it).

    Without a window, where the block size is a multiple of
    ``WGMMA_ROWS_TILE_SIZE``, ``WGMMA_ROWS_TILE_SIZE``-token tiles in
    ``WGMMA_ROWS_STAGES`` int8 stages, Q.K taking the query rounded to
    int8 once.  Otherwise the geometry's tiles and the plain loop: with up
    to 64 rows (alternate tiles) the query's exact int8 pair; with 65-128
    rows the rounded query and ``OVERLAP``: the next tile's Q.K overlaps
    this tile's softmax, which holds a third widened V tile (see the
    kernel's loop)."""
    vh_stages = WGMMA_VH_STAGES
    tile_size, stages = geometry.tile_size, geometry.num_stages
    overlap = False
    query_pair = tile_split
    if sliding_window == 0:
        if block_size % WGMMA_ROWS_TILE_SIZE == 0:
            tile_size, stages = WGMMA_ROWS_TILE_SIZE, WGMMA_ROWS_STAGES
            # (The pair's second query stage spills the consumers'
            # registers at these tiles.)
            query_pair = False
        elif not tile_split:
            overlap = True
            vh_stages = max(vh_stages, 3)
    return MappingProxyType(
        dict(
            TILE_SIZE=tile_size,
            STAGES=stages,
            VH_STAGES=vh_stages,
            AHEAD=min(WGMMA_AHEAD, stages - 1),
            OVERLAP=overlap,
            QUERY_PAIR=query_pair,
        )
    )


def _wgmma_tile_split(
    geometry: Int8SplitKVGeometry, rows: int, num_tokens: int, max_partials: int
) -> bool:
    """Whether the warpgroup-MMA kernel's two consumers hold the same
    ``block_m`` rows and take alternate tiles (two partial results per
    segment) rather than ``block_m`` rows each: for up to ``block_m`` rows,
    when the scratch buffers hold the partials."""
    return (
        rows <= geometry.block_m
        and 2 * num_tokens * geometry.num_segments <= max_partials
    )


def int8_split_kv_rounds_query(
    geometry: Int8SplitKVGeometry,
    rows: int,
    num_tokens: int,
    max_partials: int,
    block_size: int,
    sliding_window: int = 0,
) -> bool:
    """Whether a split-KV launch rounds each query row to one int8 part.

    The kernels split a query row into int8 high and low parts, exact to
    1.6e-5 of the row's largest element, except Hopper's verify kernel
    where ``wgmma_pipeline`` says so (65-128 rows at the default geometry,
    and every launch in 64-token tiles): there Q.K takes the row rounded to
    int8 once, within 1/254 of its largest element (see
    ``triton_int8_split_kv_wgmma``).

    Args:
        geometry: The launch geometry (as passed or selected).
        rows: Query rows per KV head: query heads per KV head times the
            longest query.
        num_tokens: Number of query tokens (rows of ``q``).
        max_partials: Partial results the scratch buffers hold.
        block_size: Tokens per cache block.
        sliding_window: The layer's window (0: none).
    """
    if not (geometry.wgmma and _wgmma_supported()):
        return False
    tile_split = _wgmma_tile_split(geometry, rows, num_tokens, max_partials)
    pipeline = wgmma_pipeline(geometry, tile_split, sliding_window, block_size)
    return not pipeline["QUERY_PAIR"]


def _pv_chunk(geometry: Int8SplitKVGeometry, head_size: int) -> int:
    """Output channels per P.V dot of the row-packing kernel."""
    return min(geometry.pv_chunk or head_size, head_size)


def _run_tokens(block_size: int, tile_size: int) -> int:
    """Tokens per contiguous run of a tile: the tile itself when it divides
    the block, else the largest power of two dividing both."""
    if block_size % tile_size == 0:
        return tile_size
    return min(tile_size, block_size & -block_size)


def int8_split_kv_layer_supported(
    head_size: int,
    *,
    use_alibi: bool,
    softcap: float,
    use_sinks: bool,
    chunk_lookback: int,
) -> bool:
    """Whether an attention layer's configuration fits the split-KV kernel.

    Full and sliding-window attention qualify; ALiBi, soft-capping, sinks
    and chunked attention keep the unified kernel.  Fixed per layer, so
    callers decide it once.  Each launch must also have at most
    ``MAX_QUERY_LEN`` query tokens per request in ``SUPPORTED_QUERY_DTYPES``.
    """
    return (
        head_size in SUPPORTED_HEAD_SIZES
        and not use_alibi
        and softcap == 0
        and not use_sinks
        and chunk_lookback < 0
    )


@triton.jit
def _int8_to_dot_operand(x, WIDEN: tl.constexpr):
    """int8 -> fp16, exact.

    ``x ^ 0x80`` is ``x + 128`` as an unsigned byte, and the fp16 with bit
    pattern ``0x6400 | byte`` is ``1024 + byte``, so subtracting 1152 gives
    ``x``: integer and fp16x2 work instead of a quarter-rate int -> float
    conversion per value.  ``WIDEN == 2`` does it in PTX on packed bytes
    (one xor, two byte permutes and two fp16x2 subtractions per 4 values),
    ``WIDEN == 1`` in Triton ops (the interpreter and non-CUDA targets).
    """
    if WIDEN == 2:
        return tl.inline_asm_elementwise(
            asm="""{
            .reg .b32 t, m;
            xor.b32 t, $2, 0x80808080;
            mov.b32 m, 0x64806480;
            prmt.b32 $0, t, 0x64646464, 0x5150;
            prmt.b32 $1, t, 0x64646464, 0x5352;
            sub.f16x2 $0, $0, m;
            sub.f16x2 $1, $1, m;
            }""",
            constraints="=r,=r,r",
            args=[x],
            dtype=tl.float16,
            is_pure=True,
            pack=4,
        )
    else:
        flipped = (x ^ tl.full([], -128, tl.int8)).to(tl.uint8, bitcast=True)
        bits = flipped.to(tl.uint16) | tl.full([], 0x6400, tl.uint16)
        return bits.to(tl.float16, bitcast=True) - tl.full([], 1152.0, tl.float16)


@triton.jit
def _tile_block(
    block_table_row, tile_idx, TILE_SIZE: tl.constexpr, BLOCK_SIZE: tl.constexpr
):
    """Block-table entry of the cache block holding a tile's first token."""
    return tl.load(block_table_row + tile_idx * TILE_SIZE // BLOCK_SIZE)


@triton.jit
def _tile_offsets(
    block_table_row,
    stride_page,
    stride_scale_page,
    tile_idx,
    seq_len,
    BLOCK_SIZE: tl.constexpr,
    TILE_SIZE: tl.constexpr,
    RUN: tl.constexpr,
    HEAD_SIZE: tl.constexpr,
    MASKED: tl.constexpr,
    block=None,
):
    """Where the tokens of one KV tile lie: ``(k_rows, v_cols, scale_offs)``,
    the byte offsets (``[TILE_SIZE]``) of each token's K row and V column
    and the word offsets of its scales, from the start of the KV head.  A
    tile inside one block has its scales in one run: ``scale_offs`` is then
    the scalar offset of the first (a scalar base with small vector offsets
    leaves the loop a few registers more than a vector of 64-bit offsets).

    A tile is read in runs of ``RUN`` tokens that lie inside one cache block
    (``RUN == TILE_SIZE`` when the tile divides the block): one block-table
    entry per run (``block``, when the caller has already read the one
    entry of a tile inside one block).  Inside a run, K is ``RUN``
    contiguous rows of ``HEAD_SIZE`` bytes and V (stored transposed) is
    ``HEAD_SIZE`` rows of ``RUN`` contiguous bytes; the hints below let the
    compiler emit 16-byte loads for both.
    """
    tile_start = tile_idx * TILE_SIZE
    offs_t = tl.arange(0, TILE_SIZE)
    if RUN == TILE_SIZE:
        if block is None:
            block = _tile_block(block_table_row, tile_idx, TILE_SIZE, BLOCK_SIZE)
        block = block.to(tl.int64)
        slot0 = tile_start % BLOCK_SIZE
        k_base = tl.multiple_of(block * stride_page + slot0 * HEAD_SIZE, 16)
        k_rows = k_base + offs_t * HEAD_SIZE
        v_cols = tl.multiple_of(block * stride_page + slot0, 16) + offs_t
        scale_offs = block * stride_scale_page + slot0
    else:
        run_start = tile_start + (offs_t // RUN) * RUN
        if MASKED:
            block = tl.load(
                block_table_row + run_start // BLOCK_SIZE,
                mask=run_start < seq_len,
                other=0,
            )
        else:
            block = tl.load(block_table_row + run_start // BLOCK_SIZE)
        block = block.to(tl.int64)
        # Constant over each run of RUN tokens, and 16-byte aligned.
        base = tl.max_constancy(
            tl.multiple_of(block * stride_page + run_start % BLOCK_SIZE, 16), RUN
        )
        slot = run_start % BLOCK_SIZE + offs_t % RUN
        k_rows = tl.multiple_of(block * stride_page + slot * HEAD_SIZE, 16)
        v_cols = base + offs_t % RUN
        scale_offs = block * stride_scale_page + slot
    return k_rows, v_cols, scale_offs


@triton.jit
def _load_tile(
    k_head_ptr,
    v_head_ptr,
    ks_head_ptr,
    vs_head_ptr,
    block_table_row,
    stride_page,
    stride_scale_page,
    tile_idx,
    seq_len,
    HEAD_SIZE: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    TILE_SIZE: tl.constexpr,
    RUN: tl.constexpr,
    MASKED: tl.constexpr,
    TOKENS_FIRST: tl.constexpr = False,
    block=None,
    V_CHANNELS: tl.constexpr = 0,
):
    """K (``[HEAD_SIZE, TILE_SIZE]``), V (``[TILE_SIZE, HEAD_SIZE]``) and
    their scales for the tokens of one KV tile (see :func:`_tile_offsets`);
    with ``TOKENS_FIRST`` the transposes, K ``[TILE_SIZE, HEAD_SIZE]`` and V
    ``[HEAD_SIZE, TILE_SIZE]``.  With ``V_CHANNELS`` the V returned is
    ``v_cols``, for a caller that loads V in slices of channels
    (:func:`_load_v_channels`).
    """
    k_rows, v_cols, scale_offs = _tile_offsets(
        block_table_row,
        stride_page,
        stride_scale_page,
        tile_idx,
        seq_len,
        BLOCK_SIZE,
        TILE_SIZE,
        RUN,
        HEAD_SIZE,
        MASKED,
        block,
    )
    if RUN == TILE_SIZE:
        ks_ptrs = ks_head_ptr + scale_offs + tl.arange(0, TILE_SIZE)
        vs_ptrs = vs_head_ptr + scale_offs + tl.arange(0, TILE_SIZE)
    else:
        ks_ptrs = ks_head_ptr + scale_offs
        vs_ptrs = vs_head_ptr + scale_offs
    offs_d = tl.arange(0, HEAD_SIZE)
    if TOKENS_FIRST:
        k_ptrs = k_head_ptr + k_rows[:, None] + offs_d[None, :]
        v_ptrs = v_head_ptr + v_cols[None, :] + offs_d[:, None] * BLOCK_SIZE
    else:
        k_ptrs = k_head_ptr + k_rows[None, :] + offs_d[:, None]
        v_ptrs = v_head_ptr + v_cols[:, None] + offs_d[None, :] * BLOCK_SIZE
    if MASKED:
        valid = tile_idx * TILE_SIZE + tl.arange(0, TILE_SIZE) < seq_len
        token_rows, token_cols = valid[:, None], valid[None, :]
        K = tl.load(k_ptrs, mask=token_rows if TOKENS_FIRST else token_cols, other=0)
        k_scale = tl.load(ks_ptrs, mask=valid, other=0.0)
        v_scale = tl.load(vs_ptrs, mask=valid, other=0.0)
        if V_CHANNELS:
            V = v_cols
        else:
            V = tl.load(
                v_ptrs, mask=token_cols if TOKENS_FIRST else token_rows, other=0
            )
    else:
        K = tl.load(k_ptrs)
        k_scale = tl.load(ks_ptrs)
        v_scale = tl.load(vs_ptrs)
        V = v_cols if V_CHANNELS else tl.load(v_ptrs)
    return K, V, k_scale, v_scale


@triton.jit
def _load_v_channels(
    v_head_ptr,
    v_cols,
    tile_idx,
    seq_len,
    chunk: tl.constexpr,
    CHANNELS: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    TILE_SIZE: tl.constexpr,
    MASKED: tl.constexpr,
):
    """V ``[TILE_SIZE, CHANNELS]``: channels ``chunk * CHANNELS`` onwards of
    the tile whose V columns :func:`_load_tile` returned."""
    offs_c = chunk * CHANNELS + tl.arange(0, CHANNELS)
    v_ptrs = v_head_ptr + v_cols[:, None] + offs_c[None, :] * BLOCK_SIZE
    if MASKED:
        valid = tile_idx * TILE_SIZE + tl.arange(0, TILE_SIZE) < seq_len
        return tl.load(v_ptrs, mask=valid[:, None], other=0)
    return tl.load(v_ptrs)


@triton.jit
def _move_references(m_i, m_new, l_i, accs, v_ref, v_max):
    """Move each row's softmax reference to ``m_new`` and the V-scale
    reference to cover ``v_max``: the running sum of P takes the softmax
    correction, the accumulators (in units of ``v_ref``) both.  Returns the
    new ``(m_i, l_i, accs, v_ref)``."""
    new_v_ref = tl.maximum(v_ref, v_max)
    alpha = tl.exp2(m_i - m_new)
    factor = (alpha * (v_ref / new_v_ref))[:, None]
    scaled = ()
    for c in tl.static_range(len(accs)):
        scaled = scaled + (accs[c] * factor,)
    return m_new, l_i * alpha, scaled, new_v_ref


@triton.jit
def _segment_tiles(
    seq_len,
    q_len,
    segm_idx,
    num_segments,
    causal,
    TILE_SIZE: tl.constexpr,
    SLIDING_WINDOW: tl.constexpr,
):
    """This segment's KV tiles ``[tile_lo, tile_hi)`` (trailing segments may be
    empty); tiles in ``[full_lo, full_hi)`` are seen whole by every query
    row, the others are masked (the window's start, the causal end, the
    context's end).  The segments share the tiles that some row sees."""
    num_tiles = tl.cdiv(seq_len, TILE_SIZE)
    first_tile = 0
    if SLIDING_WINDOW > 0:
        # The first query token sees keys from seq_len - q_len - W + 1 on.
        first_tile = tl.maximum(seq_len - q_len - SLIDING_WINDOW + 1, 0) // TILE_SIZE
    tiles_per_segment = tl.cdiv(num_tiles - first_tile, num_segments)
    tile_lo = first_tile + segm_idx * tiles_per_segment
    tile_hi = tl.minimum(tile_lo + tiles_per_segment, num_tiles)
    full_lo = tile_lo
    if SLIDING_WINDOW > 0:
        # ...and the last one from seq_len - W on.
        full_lo = tl.minimum(
            tl.maximum(
                tl.cdiv(tl.maximum(seq_len - SLIDING_WINDOW, 0), TILE_SIZE), tile_lo
            ),
            tl.maximum(tile_hi, tile_lo),
        )
    # Keys every query row sees end at the first query token (causal), at
    # the context's end, or where the window of the first token ends.
    seen = tl.where(causal != 0, seq_len - q_len + 1, seq_len)
    if SLIDING_WINDOW > 0:
        seen = tl.minimum(seen, seq_len - q_len + SLIDING_WINDOW)
    full_hi = tl.minimum(tile_hi, seen // TILE_SIZE)
    return tile_lo, full_lo, tl.maximum(full_hi, full_lo), tile_hi


@triton.jit
def _kv_range(q_pos, causal, seq_len, SLIDING_WINDOW: tl.constexpr):
    """The keys ``[kv_lo, kv_hi)`` each query row (at position ``q_pos``)
    sees: up to its own position (causal) or the context's end, and with a
    sliding window |q_pos - kv_pos| < W (keys after the query exist only for
    non-causal steps: the unified kernel's band)."""
    kv_hi = tl.where(causal != 0, q_pos + 1, seq_len)
    kv_lo = kv_hi  # unused without a window
    if SLIDING_WINDOW > 0:
        kv_lo = q_pos - (SLIDING_WINDOW - 1)
        kv_hi = tl.minimum(kv_hi, q_pos + SLIDING_WINDOW)
    return kv_lo, kv_hi


@triton.jit
def _kv_mask(kv_pos, kv_lo, kv_hi, SLIDING_WINDOW: tl.constexpr):
    """Which keys (``kv_pos``, broadcast against the query rows' ranges from
    :func:`_kv_range`) the query rows see."""
    visible = kv_pos < kv_hi
    if SLIDING_WINDOW > 0:
        visible &= kv_pos >= kv_lo
    return visible


@triton.jit
def _loop_bounds(tile_lo, full_lo, full_hi, tile_hi, LOOP: tl.constexpr):
    """The tiles ``[lo, hi)`` of KV loop ``LOOP``: 0, the tiles every query
    row sees whole (no mask); 1, the last ones (past the context or partly
    hidden by the causal mask); 2, with a sliding window, the first ones (at
    the window's start).  Each loop walks its own tiles, so no loop carries
    the other's bounds (a loop over both ends spilled registers with a
    window)."""
    if LOOP == 0:
        lo = full_lo
        hi = full_hi
    elif LOOP == 1:
        lo = full_hi
        hi = tile_hi
    else:
        lo = tile_lo
        hi = full_lo
    return lo, hi


@triton.jit
def _loop_block(
    block_table_row, i, hi, TILE_SIZE: tl.constexpr, BLOCK_SIZE: tl.constexpr
):
    """The block-table entry of tile ``min(i, hi - 1)`` (tile 0's for an
    empty loop: a tile that exists)."""
    tile = tl.maximum(tl.minimum(i, hi - 1), 0)
    return _tile_block(block_table_row, tile, TILE_SIZE, BLOCK_SIZE)


# Context segments, the block-table row stride and causality are runtime
# arguments: a constexpr (or an integer that Triton specialises on) would
# compile a new variant for each short context or batch size the geometry
# selector cuts the segment count for, for each block-table width, and for
# the non-causal steps of a drafter.
@triton.jit(do_not_specialize=["num_segments", "block_table_stride", "causal"])
def kernel_int8_split_kv_attention(
    out_ptr,  # [num_tokens, num_query_heads, HEAD_SIZE]
    segm_out_ptr,  # [max_partials, num_query_heads, HEAD_SIZE] float32
    segm_max_ptr,  # [max_partials, num_query_heads] float32
    segm_expsum_ptr,  # [max_partials, num_query_heads] float32
    q_ptr,  # [num_tokens, num_query_heads, HEAD_SIZE]
    k_cache_ptr,  # int8 K rows (planar layout)
    v_cache_ptr,  # int8 V, transposed per block (planar layout)
    k_scale_ptr,  # fp32 K scales
    v_scale_ptr,  # fp32 V scales
    block_table_ptr,  # [num_seqs, max_num_blocks_per_seq] int32
    seq_lens_ptr,  # [num_seqs] int32
    query_start_loc_ptr,  # [num_seqs + 1] int32
    qk_scale,  # softmax scale * log2(e)
    num_segments,  # context segments per (request, KV head)
    causal,  # 1: query token i sees keys up to its own position; 0: all
    num_query_heads: tl.constexpr,
    q_stride_0: tl.int64,
    q_stride_1: tl.int64,
    out_stride_0: tl.int64,
    out_stride_1: tl.int64,
    block_table_stride: tl.int64,
    stride_page: tl.int64,  # bytes between cache blocks (K and V views)
    stride_head: tl.int64,  # bytes between KV heads
    stride_scale_page: tl.int64,  # fp32 words between cache blocks
    stride_scale_head: tl.int64,  # fp32 words between KV heads
    NUM_QUERIES_PER_KV: tl.constexpr,
    ROW_SPLITS: tl.constexpr,  # programs that share one (request, KV head)
    BLOCK_M: tl.constexpr,
    HEAD_SIZE: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    TILE_SIZE: tl.constexpr,
    RUN: tl.constexpr,
    WIDEN: tl.constexpr,
    P_LOG2_SCALE: tl.constexpr,  # P and l_i carry a factor 2**P_LOG2_SCALE
    RESCALE_THRESHOLD: tl.constexpr,
    PV_CHUNK: tl.constexpr,  # output channels per P.V dot (HEAD_SIZE: one dot)
    SLIDING_WINDOW: tl.constexpr,  # keys per query position (0: all)
):
    # The row splits of one (request, KV head) are adjacent program ids, so
    # they run together and share each K/V tile through L2.
    kv_head_idx = tl.program_id(0) // ROW_SPLITS
    row0 = tl.program_id(0) % ROW_SPLITS * BLOCK_M
    seq_idx = tl.program_id(1)
    segm_idx = tl.program_id(2)

    q_start = tl.load(query_start_loc_ptr + seq_idx)
    q_len = tl.load(query_start_loc_ptr + seq_idx + 1) - q_start
    seq_len = tl.load(seq_lens_ptr + seq_idx)
    if row0 >= q_len * NUM_QUERIES_PER_KV:
        return

    # Row r of the request is query token r // G, query head
    # kv_head_idx * G + r % G (G = NUM_QUERIES_PER_KV).
    offs_m = row0 + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_SIZE)
    q_tok = offs_m // NUM_QUERIES_PER_KV
    q_head = kv_head_idx * NUM_QUERIES_PER_KV + offs_m % NUM_QUERIES_PER_KV
    row_mask = q_tok < q_len
    token_idx = (q_start + q_tok).to(tl.int64)
    # The query tokens are the request's last q_len positions.
    q_pos = seq_len - q_len + q_tok

    # Q : (BLOCK_M, HEAD_SIZE) as two int8 parts, Q / s = q_hi + q_lo / 254.
    Q = tl.load(
        q_ptr
        + token_idx[:, None] * q_stride_0
        + q_head[:, None] * q_stride_1
        + offs_d[None, :],
        mask=row_mask[:, None],
        other=0.0,
    ).to(tl.float32)
    q_amax = tl.max(tl.abs(Q), axis=1)
    q_scale = tl.where(q_amax > 0.0, q_amax / 127.0, 1.0)
    Q = Q / q_scale[:, None]
    q_hi = tl.floor(Q + 0.5)
    q_lo = tl.floor((Q - q_hi) * 254.0 + 0.5).to(tl.int8)
    q_hi = q_hi.to(tl.int8)
    row_qk_scale = q_scale * (qk_scale / 254.0)

    tile_lo, full_lo, full_hi, tile_hi = _segment_tiles(
        seq_len, q_len, segm_idx, num_segments, causal, TILE_SIZE, SLIDING_WINDOW
    )

    # m_i: each row's softmax reference (log2 units; a finite sentinel until
    # the row sees a key, so that S - m_i never computes -inf - -inf); l_i:
    # the sum of P; accs:
    # the sum of P * v_scale * V in units of v_ref (the largest V scale seen
    # when the reference last moved), so P * v_scale / v_ref fits fp16, one
    # accumulator per PV_CHUNK output channels.
    m_i = tl.full([BLOCK_M], -3.0e38, tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    accs = (tl.zeros([BLOCK_M, PV_CHUNK], tl.float32),) * (HEAD_SIZE // PV_CHUNK)
    v_ref = tl.full([], 1e-30, tl.float32)
    block_table_row = block_table_ptr + seq_idx.to(tl.int64) * block_table_stride
    k_head_ptr = k_cache_ptr + kv_head_idx * stride_head
    v_head_ptr = v_cache_ptr + kv_head_idx * stride_head
    ks_head_ptr = k_scale_ptr + kv_head_idx * stride_scale_head
    vs_head_ptr = v_scale_ptr + kv_head_idx * stride_scale_head

    # The tiles that every query row sees whole, without masks, then the
    # masked ones (see _loop_bounds): the last ones and, with a sliding
    # window, the first ones.
    for loop in tl.static_range(3 if SLIDING_WINDOW > 0 else 2):
        lo, hi = _loop_bounds(tile_lo, full_lo, full_hi, tile_hi, loop)
        if loop > 0:
            # The masked loops' key ranges (computed once before all loops
            # instead, the kernels compile with the same spills).
            kv_lo, kv_hi = _kv_range(q_pos, causal, seq_len, SLIDING_WINDOW)
        for j in range(lo, hi):
            K, V, k_scale, v_scale = _load_tile(
                k_head_ptr,
                v_head_ptr,
                ks_head_ptr,
                vs_head_ptr,
                block_table_row,
                stride_page,
                stride_scale_page,
                j,
                seq_len,
                HEAD_SIZE,
                BLOCK_SIZE,
                TILE_SIZE,
                RUN,
                loop > 0,
                V_CHANNELS=PV_CHUNK < HEAD_SIZE,
            )
            # 254 * (q_hi . K) + q_lo . K from two independent int8 dots (each
            # an exact int32; summed in fp32, within 6e-8 of the exact sum).
            S_hi = tl.dot(q_hi, K, out_dtype=tl.int32).to(tl.float32)
            S_lo = tl.dot(q_lo, K, out_dtype=tl.int32).to(tl.float32)
            S = (S_hi * 254.0 + S_lo) * row_qk_scale[:, None] * k_scale[None, :]
            if loop > 0:
                kv_pos = j * TILE_SIZE + tl.arange(0, TILE_SIZE)
                S = tl.where(
                    _kv_mask(
                        kv_pos[None, :],
                        kv_lo[:, None],
                        kv_hi[:, None],
                        SLIDING_WINDOW,
                    ),
                    S,
                    float("-inf"),
                )

            # The reference moves only when some row's maximum exceeds it by
            # more than RESCALE_THRESHOLD (or a larger V scale arrives), so
            # most tiles skip rescaling the accumulator.
            tile_max = tl.max(S, axis=1)
            v_max = tl.max(v_scale, axis=0)
            if PV_CHUNK < HEAD_SIZE:
                # Split P.V dots: each warp owns whole rows, so each row moves
                # its own reference; a decision for the whole tile would cost
                # a cross-warp reduction on every tile.
                m_new = tl.where(tile_max > m_i + RESCALE_THRESHOLD, tile_max, m_i)
                m_i, l_i, accs, v_ref = _move_references(
                    m_i, m_new, l_i, accs, v_ref, v_max
                )
            else:
                growth = tl.where(tile_max > m_i, tile_max - m_i, 0.0)
                if tl.max(growth, axis=0) > RESCALE_THRESHOLD or v_max > v_ref:
                    m_i, l_i, accs, v_ref = _move_references(
                        m_i, tl.maximum(m_i, tile_max), l_i, accs, v_ref, v_max
                    )
            # P <= 2**(P_LOG2_SCALE + RESCALE_THRESHOLD).
            P = tl.exp2(S - (m_i - P_LOG2_SCALE)[:, None])
            l_i += tl.sum(P, axis=1)
            P_v = (P * (v_scale / v_ref)[None, :]).to(tl.float16)
            if PV_CHUNK < HEAD_SIZE:
                # V is the tile's V columns here; each dot reads its channels.
                new_accs = ()
                for c in tl.static_range(HEAD_SIZE // PV_CHUNK):
                    V_c = _load_v_channels(
                        v_head_ptr,
                        V,
                        j,
                        seq_len,
                        c,
                        PV_CHUNK,
                        BLOCK_SIZE,
                        TILE_SIZE,
                        loop > 0,
                    )
                    new_accs = new_accs + (
                        tl.dot(P_v, _int8_to_dot_operand(V_c, WIDEN), accs[c]),
                    )
                accs = new_accs
            else:
                accs = (tl.dot(P_v, _int8_to_dot_operand(V, WIDEN), accs[0]),)

    # Back to absolute units.
    if num_segments == 1:
        inv_l = tl.where(l_i > 0.0, 1.0 / l_i, 0.0)
        out_rows = out_ptr + token_idx * out_stride_0 + q_head * out_stride_1
        for c in tl.static_range(HEAD_SIZE // PV_CHUNK):
            offs_c = c * PV_CHUNK + tl.arange(0, PV_CHUNK)
            tl.store(
                out_rows[:, None] + offs_c[None, :],
                (accs[c] * (v_ref * inv_l)[:, None]).to(out_ptr.dtype.element_ty),
                mask=row_mask[:, None],
            )
    else:
        # Unnormalised partials; rows that saw no key store (-inf, 0, 0).
        partial = (token_idx * num_segments + segm_idx) * num_query_heads + q_head
        for c in tl.static_range(HEAD_SIZE // PV_CHUNK):
            offs_c = c * PV_CHUNK + tl.arange(0, PV_CHUNK)
            tl.store(
                segm_out_ptr + partial[:, None] * HEAD_SIZE + offs_c[None, :],
                accs[c] * v_ref,
                mask=row_mask[:, None],
            )
        tl.store(
            segm_max_ptr + partial,
            tl.where(l_i > 0.0, m_i, float("-inf")),
            mask=row_mask,
        )
        tl.store(segm_expsum_ptr + partial, l_i, mask=row_mask)


# Verify steps: every query row of a (request, KV head) in one program, with
# the KV tile on the M axis of both dots (S^T = K Q^T, O^T += V^T P^T), so
# each K/V tile is read and widened once however many rows share it.
@triton.jit(do_not_specialize=["num_segments", "block_table_stride", "causal"])
def kernel_int8_split_kv_verify(
    out_ptr,  # [num_tokens, num_query_heads, HEAD_SIZE]
    segm_out_ptr,  # [max_partials, num_query_heads, HEAD_SIZE] float32
    segm_max_ptr,  # [max_partials, num_query_heads] float32
    segm_expsum_ptr,  # [max_partials, num_query_heads] float32
    q_ptr,  # [num_tokens, num_query_heads, HEAD_SIZE]
    k_cache_ptr,  # int8 K rows (planar layout)
    v_cache_ptr,  # int8 V, transposed per block (planar layout)
    k_scale_ptr,  # fp32 K scales
    v_scale_ptr,  # fp32 V scales
    block_table_ptr,  # [num_seqs, max_num_blocks_per_seq] int32
    seq_lens_ptr,  # [num_seqs] int32
    query_start_loc_ptr,  # [num_seqs + 1] int32
    qk_scale,  # softmax scale * log2(e)
    num_segments,  # context segments per (request, KV head)
    causal,  # 1: query token i sees keys up to its own position; 0: all
    num_query_heads: tl.constexpr,
    q_stride_0: tl.int64,
    q_stride_1: tl.int64,
    out_stride_0: tl.int64,
    out_stride_1: tl.int64,
    block_table_stride: tl.int64,
    stride_page: tl.int64,  # bytes between cache blocks (K and V views)
    stride_head: tl.int64,  # bytes between KV heads
    stride_scale_page: tl.int64,  # fp32 words between cache blocks
    stride_scale_head: tl.int64,  # fp32 words between KV heads
    NUM_QUERIES_PER_KV: tl.constexpr,
    ROW_SPLITS: tl.constexpr,  # programs that share one (request, KV head)
    TOKENS_PER_PROGRAM: tl.constexpr,  # query tokens of each of them
    BLOCK_R: tl.constexpr,  # >= TOKENS_PER_PROGRAM * NUM_QUERIES_PER_KV
    HEAD_SIZE: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    TILE_SIZE: tl.constexpr,
    RUN: tl.constexpr,
    WIDEN: tl.constexpr,
    P_LOG2_SCALE: tl.constexpr,  # P and l carry a factor 2**P_LOG2_SCALE
    RESCALE_THRESHOLD: tl.constexpr,
    SLIDING_WINDOW: tl.constexpr,  # keys per query position (0: all)
):
    # The row splits of one (request, KV head) are adjacent program ids, so
    # they run together and share each K/V tile through L2.
    kv_head_idx = tl.program_id(0) // ROW_SPLITS
    tok0 = tl.program_id(0) % ROW_SPLITS * TOKENS_PER_PROGRAM
    seq_idx = tl.program_id(1)
    segm_idx = tl.program_id(2)

    q_start = tl.load(query_start_loc_ptr + seq_idx)
    q_len = tl.load(query_start_loc_ptr + seq_idx + 1) - q_start
    seq_len = tl.load(seq_lens_ptr + seq_idx)
    if tok0 >= q_len:
        return

    # Row r (a column of the transposed tiles) is query token tok0 + r // G,
    # query head kv_head_idx * G + r % G (G = NUM_QUERIES_PER_KV).
    offs_r = tl.arange(0, BLOCK_R)
    offs_d = tl.arange(0, HEAD_SIZE)
    q_tok = tok0 + offs_r // NUM_QUERIES_PER_KV
    q_head = kv_head_idx * NUM_QUERIES_PER_KV + offs_r % NUM_QUERIES_PER_KV
    row_mask = (offs_r < TOKENS_PER_PROGRAM * NUM_QUERIES_PER_KV) & (q_tok < q_len)
    token_idx = (q_start + q_tok).to(tl.int64)
    # The query tokens are the request's last q_len positions.
    q_pos = seq_len - q_len + q_tok
    kv_lo, kv_hi = _kv_range(q_pos, causal, seq_len, SLIDING_WINDOW)

    # Q^T : (HEAD_SIZE, BLOCK_R), as int8 in units of s = max|Q| / 127 over
    # all rows of the program: one scale keeps a row vector out of the loop,
    # and the two-part form below leaves a row 100x smaller than the largest
    # still within 1.6e-3 of its own |Q| x max|K|.
    q_t = tl.load(
        q_ptr
        + token_idx[None, :] * q_stride_0
        + q_head[None, :] * q_stride_1
        + offs_d[:, None],
        mask=row_mask[None, :],
        other=0.0,
    ).to(tl.float32)
    q_amax = tl.max(tl.max(tl.abs(q_t), axis=1), axis=0)
    q_scale = tl.where(q_amax > 0.0, q_amax / 127.0, 1.0)
    q_t = q_t / q_scale
    # Q / s = q_hi + q_lo / 254: 254 * (K . q_hi) + K . q_lo is exact.
    q_hi = tl.floor(q_t + 0.5)
    q_lo = tl.floor((q_t - q_hi) * 254.0 + 0.5).to(tl.int8)
    q_hi = q_hi.to(tl.int8)
    qk_unit = q_scale * (qk_scale / 254.0)
    # Round-trip the int8 query through memory that only this program
    # writes, and only after the loop: its rows of the output (2 * HEAD_SIZE
    # bytes each) without segments, else its partial-output slots.  A dot
    # operand that comes from a load is read from shared memory on every
    # tile instead of taking registers for the whole loop, which leaves the
    # loop room without spills.  Rows past the request are other programs'.
    if num_segments == 1:
        staging = (
            out_ptr + token_idx[None, :] * out_stride_0 + q_head[None, :] * out_stride_1
        ).to(tl.pointer_type(tl.int8), bitcast=True)
    else:
        partial = (token_idx * num_segments + segm_idx) * num_query_heads + q_head
        staging = (segm_out_ptr + partial[None, :] * HEAD_SIZE).to(
            tl.pointer_type(tl.int8), bitcast=True
        )
    staging += offs_d[:, None]
    tl.store(staging, q_hi, mask=row_mask[None, :])
    tl.store(staging + HEAD_SIZE, q_lo, mask=row_mask[None, :])
    tl.debug_barrier()
    q_hi = tl.load(staging, mask=row_mask[None, :], other=0)
    q_lo = tl.load(staging + HEAD_SIZE, mask=row_mask[None, :], other=0)

    tile_lo, full_lo, full_hi, tile_hi = _segment_tiles(
        seq_len, q_len, segm_idx, num_segments, causal, TILE_SIZE, SLIDING_WINDOW
    )

    # m_i: each row's softmax reference (log2 units; a finite sentinel until
    # the row sees a key, so that S - m_i never computes -inf - -inf); l_i:
    # the sum of P; acc: O^T in units of v_ref, as in kernel_int8_split_kv_attention.
    m_i = tl.full([BLOCK_R], -3.0e38, tl.float32)
    l_i = tl.zeros([BLOCK_R], tl.float32)
    acc = tl.zeros([HEAD_SIZE, BLOCK_R], tl.float32)
    v_ref = tl.full([], 1e-30, tl.float32)
    block_table_row = block_table_ptr + seq_idx.to(tl.int64) * block_table_stride
    k_head_ptr = k_cache_ptr + kv_head_idx * stride_head
    v_head_ptr = v_cache_ptr + kv_head_idx * stride_head
    ks_head_ptr = k_scale_ptr + kv_head_idx * stride_scale_head
    vs_head_ptr = v_scale_ptr + kv_head_idx * stride_scale_head

    # As in kernel_int8_split_kv_attention: the tiles every row sees whole,
    # then the masked ones.
    for loop in tl.static_range(3 if SLIDING_WINDOW > 0 else 2):
        lo, hi = _loop_bounds(tile_lo, full_lo, full_hi, tile_hi, loop)
        if RUN == TILE_SIZE:
            # Each tile lies in one cache block, whose block-table entry is
            # read one iteration ahead: read in the iteration that uses it,
            # Triton's pipeliner turns it into an asynchronous copy whose
            # wait also drains the next tile's K/V copies, so no load would
            # stay in flight across a tile's work.  (An empty loop reads a
            # tile that exists.)
            next_block = _loop_block(block_table_row, lo, hi, TILE_SIZE, BLOCK_SIZE)
        for j in range(lo, hi):
            if RUN == TILE_SIZE:
                block = next_block
                next_block = _loop_block(
                    block_table_row, j + 1, hi, TILE_SIZE, BLOCK_SIZE
                )
            else:
                block = None
            K, V, k_scale, v_scale = _load_tile(
                k_head_ptr,
                v_head_ptr,
                ks_head_ptr,
                vs_head_ptr,
                block_table_row,
                stride_page,
                stride_scale_page,
                j,
                seq_len,
                HEAD_SIZE,
                BLOCK_SIZE,
                TILE_SIZE,
                RUN,
                loop > 0,
                True,
                block,
            )
            S = tl.dot(K, q_hi, out_dtype=tl.int32) * 254
            S = tl.dot(K, q_lo, acc=S, out_dtype=tl.int32).to(tl.float32)
            S = S * (k_scale * qk_unit)[:, None]
            if loop > 0:
                kv_pos = j * TILE_SIZE + tl.arange(0, TILE_SIZE)
                S = tl.where(
                    _kv_mask(
                        kv_pos[:, None],
                        kv_lo[None, :],
                        kv_hi[None, :],
                        SLIDING_WINDOW,
                    ),
                    S,
                    float("-inf"),
                )

            # One reduction over the whole tile decides whether the reference
            # moves: some row's maximum exceeds it by more than
            # RESCALE_THRESHOLD, or a larger V scale arrives.
            excess = tl.max(S - m_i[None, :], axis=1)
            excess = tl.where(v_scale > v_ref, float("inf"), excess)
            if tl.max(excess, axis=0) > RESCALE_THRESHOLD:
                m_new = tl.maximum(m_i, tl.max(S, axis=0))
                new_v_ref = tl.maximum(v_ref, tl.max(v_scale, axis=0))
                alpha = tl.exp2(m_i - m_new)
                l_i = l_i * alpha
                acc = acc * (alpha * (v_ref / new_v_ref))[None, :]
                m_i = m_new
                v_ref = new_v_ref
            # P <= 2**(P_LOG2_SCALE + RESCALE_THRESHOLD).
            P = tl.exp2(S - (m_i - P_LOG2_SCALE)[None, :])
            l_i += tl.sum(P, axis=0)
            P_v = (P * (v_scale / v_ref)[:, None]).to(tl.float16)
            acc = tl.dot(_int8_to_dot_operand(V, WIDEN), P_v, acc)

    acc = acc * v_ref
    if num_segments == 1:
        inv_l = tl.where(l_i > 0.0, 1.0 / l_i, 0.0)
        tl.store(
            out_ptr
            + token_idx[None, :] * out_stride_0
            + q_head[None, :] * out_stride_1
            + offs_d[:, None],
            (acc * inv_l[None, :]).to(out_ptr.dtype.element_ty),
            mask=row_mask[None, :],
        )
    else:
        # Unnormalised partials; rows that saw no key store (-inf, 0, 0).
        partial = (token_idx * num_segments + segm_idx) * num_query_heads + q_head
        tl.store(
            segm_out_ptr + partial[None, :] * HEAD_SIZE + offs_d[:, None],
            acc,
            mask=row_mask[None, :],
        )
        tl.store(
            segm_max_ptr + partial,
            tl.where(l_i > 0.0, m_i, float("-inf")),
            mask=row_mask,
        )
        tl.store(segm_expsum_ptr + partial, l_i, mask=row_mask)


@triton.jit(do_not_specialize=["num_seqs", "num_segments"])
def kernel_int8_split_kv_reduce(
    out_ptr,  # [num_tokens, num_query_heads, HEAD_SIZE]
    segm_out_ptr,  # [max_partials, num_query_heads, HEAD_SIZE] float32
    segm_max_ptr,  # [max_partials, num_query_heads] float32
    segm_expsum_ptr,  # [max_partials, num_query_heads] float32
    query_start_loc_ptr,  # [num_seqs + 1] int32
    num_seqs,
    num_segments,
    num_query_heads: tl.constexpr,
    out_stride_0: tl.int64,
    out_stride_1: tl.int64,
    HEAD_SIZE: tl.constexpr,
    HEAD_BLOCK: tl.constexpr,  # channels per program
    SEGMENT_CHUNK: tl.constexpr,  # segments per loop iteration
):
    token_idx = tl.program_id(0)
    head_idx = tl.program_id(1)
    # Padding tokens past the last request have no partials.
    if token_idx >= tl.load(query_start_loc_ptr + num_seqs):
        return

    offs_d = tl.program_id(2) * HEAD_BLOCK + tl.arange(0, HEAD_BLOCK)
    first = token_idx.to(tl.int64) * num_segments
    # Two passes over the segments in chunks, so registers stay bounded for
    # any segment count: the overall maximum, then the weighted sums (whose
    # loads do not wait on each other).  Empty segments hold (-inf, 0, 0).
    overall_max = tl.full([], float("-inf"), tl.float32)
    for s0 in range(0, num_segments, SEGMENT_CHUNK):
        offs_s = s0 + tl.arange(0, SEGMENT_CHUNK)
        partial = (first + offs_s) * num_query_heads + head_idx
        segm_max = tl.load(
            segm_max_ptr + partial, mask=offs_s < num_segments, other=float("-inf")
        )
        overall_max = tl.maximum(overall_max, tl.max(segm_max, axis=0))
    # All segments empty: use 0 so that exp2(-inf - 0) = 0, not NaN.
    max_ref = tl.where(overall_max == float("-inf"), 0.0, overall_max)
    expsum = tl.zeros([], tl.float32)
    acc = tl.zeros([HEAD_BLOCK], tl.float32)
    for s0 in range(0, num_segments, SEGMENT_CHUNK):
        offs_s = s0 + tl.arange(0, SEGMENT_CHUNK)
        seg_mask = offs_s < num_segments
        partial = (first + offs_s) * num_query_heads + head_idx
        segm_max = tl.load(segm_max_ptr + partial, mask=seg_mask, other=float("-inf"))
        segm_expsum = tl.load(segm_expsum_ptr + partial, mask=seg_mask, other=0.0)
        weight = tl.exp2(segm_max - max_ref)
        segm_out = tl.load(
            segm_out_ptr + partial[:, None] * HEAD_SIZE + offs_d[None, :],
            mask=seg_mask[:, None],
            other=0.0,
        )
        expsum += tl.sum(segm_expsum * weight, axis=0)
        acc += tl.sum(segm_out * weight[:, None], axis=0)
    acc = tl.where(expsum > 0.0, acc / expsum, 0.0)
    tl.store(
        out_ptr + token_idx * out_stride_0 + head_idx * out_stride_1 + offs_d,
        acc.to(out_ptr.dtype.element_ty),
    )


def _check_planar_cache(
    data: torch.Tensor,
    scale: torch.Tensor,
    head_size: int,
    name: str,
    transposed: bool,
) -> None:
    """Check one half (K, or V stored transposed) of a planar INT8
    per-token-head cache."""
    if data.dtype != torch.int8 or data.dim() != 4 or data.shape[3] != head_size:
        raise ValueError(
            f"{name} must be a 4-D int8 [num_blocks, block_size, num_kv_heads, "
            f"{head_size}] view, got {data.dtype} with shape {tuple(data.shape)}"
        )
    block_size = data.shape[1]
    slot_stride, dim_stride = (1, block_size) if transposed else (head_size, 1)
    if data.stride(1) != slot_stride or data.stride(3) != dim_stride:
        raise ValueError(
            f"{name} must have the planar layout (strides (*, {slot_stride}, *, "
            f"{dim_stride})), got strides {data.stride()}"
        )
    if data.data_ptr() % 16 or data.stride(0) % 16 or data.stride(2) % 16:
        raise ValueError(
            f"{name} rows must start on 16-byte boundaries, got strides "
            f"{data.stride()} and address {data.data_ptr()}"
        )
    if (
        scale.dtype != torch.float32
        or scale.shape != data.shape[:3]
        or scale.stride(1) != 1
    ):
        raise ValueError(
            f"{name} scales must be float32 [num_blocks, block_size, num_kv_heads] "
            f"with consecutive slots contiguous, got {scale.dtype} with shape "
            f"{tuple(scale.shape)} and strides {scale.stride()}"
        )


def int8_split_kv_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    k_scale_cache: torch.Tensor,
    v_scale_cache: torch.Tensor,
    out: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    seqused_k: torch.Tensor,
    block_table: torch.Tensor,
    max_query_len: int,
    max_seq_len: int,
    softmax_scale: float,
    segm_output: torch.Tensor,
    segm_max: torch.Tensor,
    segm_expsum: torch.Tensor,
    geometry: Int8SplitKVGeometry | None = None,
    causal: bool = True,
    sliding_window: int = 0,
    validate: bool = True,
) -> None:
    """Attention of 1..16 query tokens per request on the INT8 cache.

    The query tokens of a request with ``q_len`` tokens and ``seq_len``
    context tokens (the query included) are its positions ``seq_len - q_len``
    to ``seq_len - 1``.  The token at position ``p`` attends to positions
    ``<= p`` (``causal``) or to the whole context, and with a
    ``sliding_window`` of ``W`` only to positions ``j`` with ``|p - j| < W``
    (as the unified kernel).  Launches a fixed grid of
    ``(num_kv_heads * row_splits, num_seqs, num_segments)`` programs plus a
    reduce kernel; nothing depends on device values, so it is CUDA-graph
    safe.

    Args:
        q: ``[num_tokens, num_query_heads, head_size]`` fp16/bf16.
        k_cache: ``[num_blocks, block_size, num_kv_heads, head_size]`` int8,
            planar: strides ``(page, head_size, head, 1)``, 16-byte aligned.
        v_cache: ``[num_blocks, block_size, num_kv_heads, head_size]`` int8,
            planar, V stored transposed within each block: strides
            ``(page, 1, head, block_size)``, 16-byte aligned.
        k_scale_cache: ``[num_blocks, block_size, num_kv_heads]`` float32,
            strides ``(page, 1, head)``.
        v_scale_cache: Same layout as ``k_scale_cache``.
        out: ``[num_tokens, num_query_heads, head_size]``, written.
        cu_seqlens_q: ``[num_seqs + 1]`` int32 query start offsets.
        seqused_k: ``[num_seqs]`` int32 context lengths.
        block_table: ``[num_seqs, max_num_blocks_per_seq]`` int32.
        max_query_len: Longest query (host int, at most ``MAX_QUERY_LEN``).
        max_seq_len: Longest context (host int); only picks the geometry.
        softmax_scale: Scale applied to Q.K.
        segm_output: ``[max_partials, num_query_heads, head_size]`` float32.
        segm_max: ``[max_partials, num_query_heads]`` float32.
        segm_expsum: ``[max_partials, num_query_heads]`` float32.
        geometry: Overrides :func:`select_int8_split_kv_geometry` (tests and
            tuning); ``num_segments`` must be a power of two.
        causal: Whether each query token sees only the positions up to its
            own (the query block of a decode or verify step), or the whole
            context (the draft block of a non-causal drafter such as
            DFlash's).
        sliding_window: Positions each query token sees, counting its own
            (``vLLM``'s ``sliding_window``); 0 for no window.
        validate: Check the arguments before launching (raising
            ``ValueError``).  Callers that checked a layer's caches and
            query layout on its first call and plan ``geometry`` with
            :func:`select_int8_split_kv_geometry` may pass False to keep the
            checks off their per-step path.
    """
    num_tokens, num_query_heads, head_size = q.shape
    if validate:
        _validate_inputs(
            q,
            k_cache,
            v_cache,
            k_scale_cache,
            v_scale_cache,
            out,
            max_query_len,
            segm_output,
            sliding_window,
        )
    _, block_size, num_kv_heads, _ = k_cache.shape
    num_seqs = seqused_k.shape[0]
    num_queries_per_kv = num_query_heads // num_kv_heads
    if geometry is None:
        geometry = select_int8_split_kv_geometry(
            max_query_len,
            max_seq_len,
            num_seqs,
            num_tokens,
            segm_output.shape[0],
            num_queries_per_kv=num_queries_per_kv,
            num_kv_heads=num_kv_heads,
            sliding_window=sliding_window,
        )
    num_segments = geometry.num_segments
    tile_size = geometry.tile_size
    run = _run_tokens(block_size, tile_size)
    pv_chunk = _pv_chunk(geometry, head_size)
    if validate:
        _validate_geometry(
            geometry, num_tokens, segm_output, block_size, head_size, run, pv_chunk
        )
    rows = num_queries_per_kv * max_query_len
    # Arguments every kernel takes (the Gluon one included).
    # One stride() call per tensor: half the host time of stride(dim) calls.
    q_strides, out_strides = q.stride(), out.stride()
    cache_strides, scale_strides = k_cache.stride(), k_scale_cache.stride()
    common = dict(
        num_query_heads=num_query_heads,
        q_stride_0=q_strides[0],
        q_stride_1=q_strides[1],
        out_stride_0=out_strides[0],
        out_stride_1=out_strides[1],
        block_table_stride=block_table.stride()[0],
        stride_page=cache_strides[0],
        stride_head=cache_strides[2],
        stride_scale_page=scale_strides[0],
        stride_scale_head=scale_strides[2],
        NUM_QUERIES_PER_KV=num_queries_per_kv,
        HEAD_SIZE=head_size,
        BLOCK_SIZE=block_size,
        TILE_SIZE=tile_size,
        P_LOG2_SCALE=P_LOG2_SCALE,
        RESCALE_THRESHOLD=RESCALE_THRESHOLD,
        SLIDING_WINDOW=sliding_window,
        num_warps=geometry.num_warps,
    )
    # The Triton kernels' own: their runs, widening and software pipeline.
    triton_only = dict(
        RUN=run,
        WIDEN=2 if _PTX_WIDEN else 1,
        num_stages=geometry.num_stages,
    )
    args = (
        out,
        segm_output,
        segm_max,
        segm_expsum,
        q,
        k_cache,
        v_cache,
        k_scale_cache,
        v_scale_cache,
        block_table,
        seqused_k,
        cu_seqlens_q,
        softmax_scale * 1.4426950408889634,  # log2(e): the kernels use exp2
        num_segments,
        int(causal),
    )
    if geometry.wgmma and not _wgmma_supported():
        geometry = _replace_geometry(geometry, wgmma=False, swap_ab=True)
    num_partials = num_segments
    if geometry.wgmma:
        tile_split = _wgmma_tile_split(geometry, rows, num_tokens, segm_output.shape[0])
        row_splits = cdiv(rows, _wgmma_program_rows(geometry, tile_split))
        if tile_split:
            num_partials = 2 * num_segments
        # (Its own tile size replaces the geometry's.)
        common.update(wgmma_pipeline(geometry, tile_split, sliding_window, block_size))
        kernel_int8_split_kv_verify_wgmma[
            (num_kv_heads * row_splits, num_seqs, num_segments)
        ](
            *args,
            ROW_SPLITS=row_splits,
            TILE_SPLIT=tile_split,
            maxnreg=WGMMA_MAX_REGISTERS,
            **common,
        )
    elif geometry.swap_ab:
        # Whole query tokens per program, at most block_m rows (one token's
        # heads at least), spread evenly over the programs of a KV head.
        max_tokens = max(1, geometry.block_m // num_queries_per_kv)
        row_splits = cdiv(max_query_len, max_tokens)
        tokens = cdiv(max_query_len, row_splits)
        kernel_int8_split_kv_verify[
            (num_kv_heads * row_splits, num_seqs, num_segments)
        ](
            *args,
            ROW_SPLITS=row_splits,
            TOKENS_PER_PROGRAM=tokens,
            # tl.dot needs at least 16 columns.
            BLOCK_R=max(16, next_power_of_2(tokens * num_queries_per_kv)),
            **common,
            **triton_only,
        )
    else:
        # tl.dot needs at least 16 rows.
        block_m = max(16, min(geometry.block_m, next_power_of_2(rows)))
        row_splits = cdiv(rows, block_m)
        kernel_int8_split_kv_attention[
            (num_kv_heads * row_splits, num_seqs, num_segments)
        ](
            *args,
            ROW_SPLITS=row_splits,
            BLOCK_M=block_m,
            PV_CHUNK=pv_chunk,
            **common,
            **triton_only,
        )
    if num_partials > 1:
        head_block = min(64, head_size)
        kernel_int8_split_kv_reduce[
            (num_tokens, num_query_heads, head_size // head_block)
        ](
            out,
            segm_output,
            segm_max,
            segm_expsum,
            cu_seqlens_q,
            num_seqs,
            num_partials,
            num_query_heads=num_query_heads,
            out_stride_0=out_strides[0],
            out_stride_1=out_strides[1],
            HEAD_SIZE=head_size,
            HEAD_BLOCK=head_block,
            SEGMENT_CHUNK=32,
        )


def _validate_inputs(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    k_scale_cache: torch.Tensor,
    v_scale_cache: torch.Tensor,
    out: torch.Tensor,
    max_query_len: int,
    segm_output: torch.Tensor,
    sliding_window: int,
) -> None:
    """The argument checks of :func:`int8_split_kv_attention` that do not
    depend on the geometry."""
    _, num_query_heads, head_size = q.shape
    if head_size not in SUPPORTED_HEAD_SIZES:
        raise ValueError(
            f"head_size {head_size} is not supported; expected one of "
            f"{SUPPORTED_HEAD_SIZES}"
        )
    if q.dtype not in SUPPORTED_QUERY_DTYPES or out.dtype != q.dtype:
        raise ValueError(
            f"q and out must both be float16 or bfloat16, got {q.dtype} and {out.dtype}"
        )
    if q.stride(2) != 1 or out.stride(2) != 1:
        raise ValueError("q and out must be contiguous in the head dimension")
    if sliding_window < 0:
        raise ValueError(f"sliding_window must be >= 0, got {sliding_window}")
    if not 1 <= max_query_len <= MAX_QUERY_LEN:
        raise ValueError(
            f"max_query_len {max_query_len} is outside 1..{MAX_QUERY_LEN}; "
            "use unified_attention for longer queries"
        )
    _check_planar_cache(k_cache, k_scale_cache, head_size, "k_cache", False)
    _check_planar_cache(v_cache, v_scale_cache, head_size, "v_cache", True)
    if (
        k_cache.shape != v_cache.shape
        or k_cache.stride(0) != v_cache.stride(0)
        or k_cache.stride(2) != v_cache.stride(2)
        or k_scale_cache.stride() != v_scale_cache.stride()
    ):
        raise ValueError(
            "k_cache and v_cache (and their scales) must have equal shapes and "
            f"strides, got {tuple(k_cache.shape)} / {tuple(v_cache.shape)}, "
            f"{k_cache.stride()} / {v_cache.stride()}, "
            f"{k_scale_cache.stride()} / {v_scale_cache.stride()}"
        )
    num_kv_heads = k_cache.shape[2]
    if num_query_heads % num_kv_heads:
        raise ValueError(
            f"{num_query_heads} query heads are not a multiple of "
            f"{num_kv_heads} KV heads"
        )
    if segm_output.shape[1:] != (num_query_heads, head_size):
        raise ValueError(
            f"segm_output must be [max_partials, {num_query_heads}, {head_size}], "
            f"got {tuple(segm_output.shape)}"
        )


def _validate_geometry(
    geometry: Int8SplitKVGeometry,
    num_tokens: int,
    segm_output: torch.Tensor,
    block_size: int,
    head_size: int,
    run: int,
    pv_chunk: int,
) -> None:
    """The checks of a launch geometry against the step and the cache
    (``run``, ``pv_chunk``: the launch's, from the geometry)."""
    num_segments = geometry.num_segments
    if num_segments & (num_segments - 1) or (
        num_segments > 1 and num_tokens * num_segments > segm_output.shape[0]
    ):
        raise ValueError(
            f"{num_segments} segments x {num_tokens} tokens do not fit the "
            f"{segm_output.shape[0]} partial slots (or are not a power of two)"
        )
    tile_size = geometry.tile_size
    if run < 16 and block_size % tile_size:
        raise ValueError(
            f"block_size {block_size} must be a multiple of 16 or of the KV tile "
            f"({tile_size} tokens)"
        )
    if pv_chunk < 16 or head_size % pv_chunk or pv_chunk & (pv_chunk - 1):
        raise ValueError(
            f"pv_chunk {geometry.pv_chunk} must be a power of two of at least 16 "
            f"output channels that divides head_size {head_size}"
        )
    if geometry.wgmma and (
        geometry.block_m != 16 * geometry.num_warps or tile_size % 16
    ):
        raise ValueError(
            f"a wgmma geometry needs block_m = 16 * num_warps and a tile of a "
            f"multiple of 16 tokens, got block_m {geometry.block_m}, "
            f"{geometry.num_warps} warps, tile {tile_size}"
        )
