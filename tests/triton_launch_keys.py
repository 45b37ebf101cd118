# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Triton cache keys of kernel launches, computed without a GPU.

Tests that check that a warm-up builds every kernel variant the serving path
launches record the launches instead of running them, and compare the keys
under which Triton's JIT would cache them on an sm_90 GPU."""


def sm90_cache_key(kernel, args, kwargs) -> str:
    """The key under which Triton's JIT caches this launch's compiled
    variant on an sm_90 GPU."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import make_backend
    from triton.runtime.jit import (
        JITFunction,
        compute_cache_key,
        create_function_from_signature,
    )

    if not isinstance(kernel, JITFunction):
        # Triton's interpreter wraps the function; rebuild the JIT function
        # with the same decorator arguments.
        kernel = JITFunction(kernel.fn, **kernel.kwargs)
    backend = make_backend(GPUTarget("cuda", 90, 32))
    binder = create_function_from_signature(kernel.signature, kernel.params, backend)
    _, specialization, options = binder(*args, **kwargs)
    return compute_cache_key({}, specialization, options)


def record_cache_keys(monkeypatch, kernel) -> list[str]:
    """The cache keys of ``kernel``'s launches from now on (appended as they
    happen); the kernel itself does not run."""
    keys: list[str] = []

    def run(*args, grid, warmup, **kwargs):
        keys.append(sm90_cache_key(kernel, args, kwargs))

    monkeypatch.setattr(kernel, "run", run)
    return keys
