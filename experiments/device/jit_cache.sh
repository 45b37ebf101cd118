#!/usr/bin/env bash
# Carry Triton's and vLLM's compile caches from one call on the lent GPU
# machine to the next (every call gets a fresh machine, and an engine start
# there spends 100-160 s compiling and autotuning, most of it the Gated
# DeltaNet kernels and torch.compile).
#
#   source experiments/device/jit_cache.sh restore
#       unpack .carry/jit/*.tar.xz (if any) into $HOME, and export
#       TRITON_CACHE_AUTOTUNING=1
#   bash experiments/device/jit_cache.sh save
#       pack ~/.triton/cache and ~/.cache/vllm/torch_compile_cache into
#       $OUT/jit_triton.tar.xz and $OUT/jit_torch.tar.xz, each only when it
#       is under 15 MiB (a file coming back from $OUT may hold 16 MiB; and a
#       call's carry holds 64 MiB, 43 of them the slim vLLM of
#       .carry/vllm026, so about 20 MiB are left for the caches)
#   bash experiments/device/jit_cache.sh save-when-ready LOG [LOG ...] &
#       the same, in the background, once every LOG says an engine is
#       ready ("init engine"): the caches are complete then, and a call cut
#       at its time limit still brings them back
#
# Both ends need TRITON_CACHE_AUTOTUNING=1, so that autotuning results are
# cached with the kernels.  After a call, copy the returned archives into
# .carry/jit/ and name .carry/jit in the next call's carry list (with
# .carry/vllm026 the working tree holds up to 20 MiB more).
export TRITON_CACHE_AUTOTUNING=1
_jit_dir=${JIT_CACHE_DIR:-.carry/jit}

_jit_save() {
    local pair name src size
    for pair in triton:.triton/cache torch:.cache/vllm/torch_compile_cache; do
        name=${pair%%:*} src=${pair#*:}
        [ -d "$HOME/$src" ] || { echo "jit cache: no $src"; continue; }
        tar -cJf "/tmp/jit_$name.tar.xz" -C "$HOME" "$src"
        size=$(stat -c %s "/tmp/jit_$name.tar.xz")
        if [ "$size" -le $((15 * 1024 * 1024)) ]; then
            cp "/tmp/jit_$name.tar.xz" "$OUT/" && echo "jit cache: saved jit_$name.tar.xz ($size bytes)"
        else
            echo "jit cache: jit_$name.tar.xz is $size bytes, over 15 MiB: not saved"
        fi
    done
}

case "${1:-}" in
restore)
    for _f in "$_jit_dir"/*.tar.xz; do
        [ -f "$_f" ] || { echo "jit cache: none in $_jit_dir"; break; }
        tar -xJf "$_f" -C "$HOME" && echo "jit cache: restored $_f ($(du -h "$_f" | cut -f1))"
    done
    ;;
save)
    _jit_save
    ;;
save-when-ready)
    shift
    for _log in "$@"; do
        until [ -f "$_log" ] && grep -q "init engine" "$_log"; do sleep 5; done
    done
    _jit_save
    ;;
*)
    echo "usage: jit_cache.sh restore|save|save-when-ready LOG..." >&2
    ;;
esac
