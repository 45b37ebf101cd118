"""The series' wgmma verify kernel with the block table read ahead in chunks (issue 20, tenth session).

Nsight Compute on an H100 (results/kernels/series_ncu_h100/, 128K, 6 tokens, where the producer sets the pace):
10% of the producer's stall samples sit on the first use of the block-table entries it loaded one iteration
earlier (long scoreboard: under the KV stream that load outlives an iteration).  Here the producer copies the
entries of 64 tiles at a time into shared memory (cp.async, 4 bytes a thread, in the copy group of the iteration
64 tiles before they are needed: two chunks of 64 x TILE_SIZE / 16 entries), and reads each tile's entries with
one shared-memory load.  Entries past the context are not copied and are replaced by block 0 when read.
Writes OUT_DIR/btring.py.  Usage: python experiments/int8_verify_gluon/btring_variant.py [OUT_DIR]."""
import os
import sys

SRC = os.environ.get("SRC", "vllm/v1/attention/ops/triton_int8_split_kv_wgmma.py")
out_dir = sys.argv[1] if len(sys.argv) > 1 else "/tmp/wv"
os.makedirs(out_dir, exist_ok=True)
s = open(SRC).read()


def rep(old, new, count=1):
    global s
    assert s.count(old) == count, (s.count(old), old[:80])
    s = s.replace(old, new)


rep('''def _producer(
    k_smem,''', '''def _producer(
    bt_smem,
    k_smem,''')
rep('''                _producer,
                (
                    k_smem,''', '''                _producer,
                (
                    bt_smem,
                    k_smem,''')
rep('''    vhfree = gl.allocate_shared_memory(gl.int64, [VH_STAGES, 1], bar_layout)
''', '''    vhfree = gl.allocate_shared_memory(gl.int64, [VH_STAGES, 1], bar_layout)
    # Block-table entries of two chunks of 64 tiles (see _producer).
    bt_smem = gl.allocate_shared_memory(
        gl.int32,
        [2, 64, TILE_SIZE // 16],
        gl.SwizzledSharedLayout(1, 1, 1, [1, 0]),
    )
''')
rep('''    blocks = _tile_blocks(
        block_table_row, tile_lo, seq_len, TILE_SIZE, BLOCK_SIZE, RUNS
    )
    for nxt in range(n_tiles + AHEAD):
        if nxt < n_tiles:
            mbarrier.wait(kfree.index(nxt % STAGES), ((nxt // STAGES) & 1) ^ 1)
''', '''    # Block-table entries come through shared memory, 64 tiles at a time, a
    # chunk ahead: a global load of the next tile's entries outlives an
    # iteration under the KV stream.
    BT_CHUNK: gl.constexpr = 64
    RPT: gl.constexpr = TILE_SIZE // 16
    BT_COPY: gl.constexpr = gl.BlockedLayout(
        [1, 1], [32 // RPT, RPT], [NUM_WARPS, 1], [1, 0]
    )
    bt_off = gl.expand_dims(
        gl.arange(0, BT_CHUNK, layout=gl.SliceLayout(1, BT_COPY)) * TILE_SIZE, 1
    ) + gl.expand_dims(gl.arange(0, RPT, layout=gl.SliceLayout(0, BT_COPY)) * 16, 0)
    pos0 = tile_lo * TILE_SIZE + bt_off
    async_copy.async_copy_global_to_shared(
        bt_smem.index(0), block_table_row + pos0 // BLOCK_SIZE, mask=pos0 < seq_len
    )
    async_copy.commit_group()
    async_copy.wait_group(0)
    gl.thread_barrier()
    runs = gl.arange(0, RPT, layout=RUNS)
    # The same bytes as one row of entries per tile (the layout is linear).
    bt_rows = bt_smem._reinterpret(
        gl.int32, [2 * BT_CHUNK, RPT], gl.SwizzledSharedLayout(1, 1, 1, [0])
    )
    for nxt in range(n_tiles + AHEAD):
        if nxt % BT_CHUNK == 0:
            pos_n = (tile_lo + nxt + BT_CHUNK) * TILE_SIZE + bt_off
            async_copy.async_copy_global_to_shared(
                bt_smem.index((nxt // BT_CHUNK + 1) % 2),
                block_table_row + pos_n // BLOCK_SIZE,
                mask=pos_n < seq_len,
            )
        if nxt < n_tiles:
            mbarrier.wait(kfree.index(nxt % STAGES), ((nxt // STAGES) & 1) ^ 1)
            run_pos = (tile_lo + nxt) * TILE_SIZE + runs * 16
            blocks = (
                bt_rows.index(nxt % (2 * BT_CHUNK)).load(RUNS)
            )
            blocks = gl.where(run_pos < seq_len, blocks, 0)
''')
rep('''        async_copy.commit_group()
        blocks = _tile_blocks(
            block_table_row, tile_lo + nxt + 1, seq_len, TILE_SIZE, BLOCK_SIZE, RUNS
        )
''', '''        async_copy.commit_group()
''')
open(os.path.join(out_dir, "btring.py"), "w").write(s)
print("wrote", os.path.join(out_dir, "btring.py"))

# vh4 / btvh4: four widened V tiles with alternate tiles (the launcher passes two): with two, consumer c's tiles
# c, c + 2, ... all widen into buffer c, so the producer cannot widen a consumer's next tile before that consumer's
# P.V of its current one is done (7% of the producer's stall samples wait for that buffer at 128K, 6 tokens).
sys.path.insert(0, os.path.dirname(__file__))
from ovl2_variant import four_widened_tiles  # noqa: E402


def vh4(text):
    return four_widened_tiles(text, "TILE_SPLIT and SLIDING_WINDOW == 0")


open(os.path.join(out_dir, "btvh4.py"), "w").write(vh4(s))
open(os.path.join(out_dir, "vh4.py"), "w").write(vh4(open(SRC).read()))
print("wrote", os.path.join(out_dir, "btvh4.py"), os.path.join(out_dir, "vh4.py"))
