#!/usr/bin/env bash
# Carry Triton's and vLLM's compile caches from one call on the lent GPU
# machine to the next (every call gets a fresh machine, and an engine start
# there spends 100-130 s compiling and autotuning, most of it the Gated
# DeltaNet kernels).
#
#   bash experiments/device/jit_cache.sh restore
#       unpack .carry/jit/*.tar.xz (if any) into $HOME
#   bash experiments/device/jit_cache.sh save
#       pack ~/.triton/cache and ~/.cache/vllm/torch_compile_cache into
#       $OUT/jit_triton.tar.xz and $OUT/jit_torch.tar.xz, each only when it
#       is under 15 MiB (a file coming back from $OUT may hold 16 MiB)
#
# Both ends need TRITON_CACHE_AUTOTUNING=1 (the script exports it for the
# caller that sources it: `source experiments/device/jit_cache.sh restore`),
# so that autotuning results are cached with the kernels.  After a call,
# copy the returned archives into .carry/jit/ and name .carry/jit in the
# next call's carry list (with .carry/vllm026 the working tree holds about
# 20 MiB more).
export TRITON_CACHE_AUTOTUNING=1
_jit_dir=${JIT_CACHE_DIR:-.carry/jit}
case "${1:-}" in
restore)
    for _f in "$_jit_dir"/*.tar.xz; do
        [ -f "$_f" ] || { echo "jit cache: none in $_jit_dir"; break; }
        tar -xJf "$_f" -C "$HOME" && echo "jit cache: restored $_f ($(du -h "$_f" | cut -f1))"
    done
    ;;
save)
    for _pair in triton:.triton/cache torch:.cache/vllm/torch_compile_cache; do
        _name=${_pair%%:*} _src=${_pair#*:}
        [ -d "$HOME/$_src" ] || { echo "jit cache: no $_src"; continue; }
        tar -cJf "/tmp/jit_$_name.tar.xz" -C "$HOME" "$_src"
        _size=$(stat -c %s "/tmp/jit_$_name.tar.xz")
        if [ "$_size" -le $((15 * 1024 * 1024)) ]; then
            cp "/tmp/jit_$_name.tar.xz" "$OUT/" && echo "jit cache: saved jit_$_name.tar.xz ($_size bytes)"
        else
            echo "jit cache: jit_$_name.tar.xz is $_size bytes, over 15 MiB: not saved"
        fi
    done
    ;;
*)
    echo "usage: jit_cache.sh restore|save" >&2
    ;;
esac
