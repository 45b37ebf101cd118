#!/usr/bin/env bash
# A/B of 0012 (Gated DeltaNet metadata without stream syncs) on the lent GPU,
# from a checkout of the branch that carries it (`make patches` there):
#   1. its GPU test (no synchronizing call while the metadata is built);
#   2. the tiny model's DFlash step profile (A decodes while B's prompt is
#      prefilled in chunks) with the commit and without it, vLLM's sync
#      check on (VLLM_GPU_SYNC_CHECK=warn).
# Carry [".carry/vllm026", "dist/patches", ".carry/scripts", ".carry/main_patches"],
# .carry/main_patches being main's export (dist/patches/v0.26.0 of a main
# checkout).  About 7 minutes on a fresh machine.
cd "$(dirname "$0")/../.."
source .carry/vllm026/install.sh >/dev/null
export PYTHONUNBUFFERED=1 VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1
[ -f tests/v1/attention/utils.py ] || cp .carry/scripts/ut/attention_utils.py tests/v1/attention/utils.py
bash .carry/vllm026/overlay.sh dist/patches/v0.26.0 >/dev/null
python3 -m pytest -q -p no:cacheprovider tests/v1/attention/test_gdn_spec_metadata.py \
    > "$OUT/gdn_sync_test.txt" 2>&1
echo "GPU test rc=$?"; tail -3 "$OUT/gdn_sync_test.txt"
for variant in with without; do
    if [ "$variant" = without ]; then
        bash .carry/vllm026/overlay.sh .carry/main_patches >/dev/null
    fi
    VLLM_GPU_SYNC_CHECK=warn timeout 240 python3 benchmarks/e2e/step_profile.py \
        --results-dir "/tmp/sp_$variant" --kv bf16-fa --spec dflash --context 8192 \
        --concurrent 8192 16389 --decode-steps 8 --profile-steps 2 --label "_gdn_$variant" \
        > "$OUT/gdn_$variant.log" 2>&1
    echo "$variant: rc=$? sync warnings: $(grep -ci 'synchroniz' "$OUT/gdn_$variant.log")"
    cp /tmp/sp_$variant/step_profile_gdn_$variant.json "$OUT/" 2>/dev/null
    grep -h "concurrent\|single" "$OUT/gdn_$variant.log" | tail -3 | cut -c1-300
done
