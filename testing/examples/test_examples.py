"""The example kernels in ``examples/``: they compile, match torch, and their configs are valid.

CPU examples are checked through the raw factory compiled with plain ``tvm.compile`` (the
default config and a few others, including sizes the tiles do not divide) and once through
the ``tileauto.jit`` kernel the example exports. CUDA examples are compiled for ``sm_90``
without a GPU (every config of their ``configs()``); tests marked ``gpu`` also run them.
"""

from __future__ import annotations

import importlib
import inspect
import shutil
from functools import cache

import pytest
import torch
import tvm

CUDA_SKIP = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU (torch.cuda.is_available() is False)"
)


@cache
def _module(name: str):
    return importlib.import_module(name)


@cache
def _host_target() -> tvm.target.Target:
    return tvm.target.Target.from_device("cpu")


def _build_cpu(func: tvm.tirx.PrimFunc):
    return tvm.compile(func, target=_host_target())["main"]


def _tunables(factory) -> set[str]:
    return {
        name
        for name, p in inspect.signature(factory).parameters.items()
        if p.default is not inspect.Parameter.empty
    }


def _check_configs(configs: list, factory) -> None:
    assert isinstance(configs, list) and 8 <= len(configs) <= 32, len(configs)
    allowed = _tunables(factory)
    seen = []
    for cfg in configs:
        assert isinstance(cfg, dict) and cfg, cfg
        assert set(cfg) <= allowed, f"{cfg} names parameters outside {sorted(allowed)}"
        assert cfg not in seen, f"duplicate config {cfg}"
        seen.append(cfg)


# ---------------------------------------------------------------------------------------------
# CPU examples: (module, factory, jit-wrapped name, sizes, make inputs, reference, tolerances)
# ---------------------------------------------------------------------------------------------


def _gemm_inputs(M, N, K):
    return [torch.randn(M, K), torch.randn(K, N)], (M, N)


def _gemm_ref(a, b):
    return a @ b


def _rows_inputs(M, N):
    return [torch.randn(M, N) * 4], (M, N)


def _silu_inputs(M, N):
    return [torch.randn(M, N) * 4, torch.randn(M, N)], (M, N)


def _rms_inputs(M, N):
    return [torch.randn(M, N) * 4, torch.rand(N) + 0.5], (M, N)


CPU = {
    "gemm": dict(
        module="gemm_cpu",
        factory="gemm",
        jit="matmul",
        sizes=[(128, 128, 128), (100, 72, 129)],  # the second is not divisible by any tile
        inputs=_gemm_inputs,
        ref=_gemm_ref,
        tol=dict(rtol=1e-3, atol=2e-3),
        picks=[1, 7, 8, 12],  # AVX-512 and AVX2 register tiles, both cache tilings
        extra=[{"parallel": False, "unroll": 1, "block_K": 8}],
    ),
    "elementwise": dict(
        module="elementwise_cpu",
        factory="silu_mul",
        jit="swiglu",
        sizes=[(64, 256), (37, 101)],
        inputs=_silu_inputs,
        ref=lambda g, u: torch.nn.functional.silu(g) * u,
        tol=dict(rtol=1e-5, atol=1e-5),
        picks=[1, 6, 11, 13],
        extra=[{"vec": 8, "block": 64, "unroll": 3}],
    ),
    "softmax": dict(
        module="softmax_cpu",
        factory="softmax",
        jit="softmax_kernel",
        # (3, 40): a single partial-reduction step; (5, 7): shorter than one vector
        sizes=[(64, 256), (37, 1001), (3, 40), (5, 7)],
        inputs=_rows_inputs,
        ref=lambda x: torch.softmax(x, dim=-1),
        tol=dict(rtol=1e-5, atol=1e-6),
        picks=[1, 7, 10, 14],
        extra=[{"vec": 8, "rows": 3, "unroll": 3}],
    ),
    "rmsnorm": dict(
        module="rmsnorm_cpu",
        factory="rmsnorm",
        jit="rmsnorm_kernel",
        sizes=[(64, 256), (37, 1001), (3, 40), (5, 7)],
        inputs=_rms_inputs,
        ref=lambda x, w: torch.nn.functional.rms_norm(x, (x.shape[-1],), w, 1e-6),
        tol=dict(rtol=1e-5, atol=1e-5),
        picks=[1, 7, 10, 14],
        extra=[{"vec": 8, "rows": 3, "unroll": 3}],
    ),
}


def _cpu_cases():
    for name, spec in CPU.items():
        for size in spec["sizes"]:
            yield pytest.param(name, size, id=f"{name}-{'x'.join(map(str, size))}")


@pytest.mark.parametrize("name", list(CPU))
def test_cpu_configs_are_factory_keyword_arguments(name):
    spec = CPU[name]
    mod = _module(spec["module"])
    factory = getattr(mod, spec["factory"])
    for size in spec["sizes"]:
        _check_configs(mod.configs(*size), factory)
    assert mod.get_configs is mod.configs


@pytest.mark.parametrize(("name", "size"), list(_cpu_cases()))
def test_cpu_default_and_other_configs_match_torch(name, size):
    spec = CPU[name]
    mod = _module(spec["module"])
    factory = getattr(mod, spec["factory"])
    candidates = mod.configs(*size)
    chosen = [{}] + [candidates[i] for i in spec["picks"] if i < len(candidates)] + spec["extra"]
    torch.manual_seed(0)
    args, out_shape = spec["inputs"](*size)
    ref = spec["ref"](*args)
    for cfg in chosen:
        fn = _build_cpu(factory(*size, **cfg))
        out = torch.full(out_shape, float("nan"))  # unwritten elements would show up as NaN
        fn(*args, out)
        torch.testing.assert_close(out, ref, **spec["tol"], msg=lambda m, cfg=cfg: f"{cfg}: {m}")


@pytest.mark.parametrize("name", list(CPU))
def test_cpu_jit_kernel_matches_torch(name):
    spec = CPU[name]
    mod = _module(spec["module"])
    size = spec["sizes"][-1]
    torch.manual_seed(1)
    args, _ = spec["inputs"](*size)
    kernel = getattr(mod, spec["jit"])(*size)  # tileauto.jit: compile the default config
    torch.testing.assert_close(kernel(*args), spec["ref"](*args), **spec["tol"])


def test_gemm_cpu_rejects_tiles_that_do_not_nest():
    gemm = _module("gemm_cpu").gemm
    with pytest.raises(ValueError, match="micro_N"):
        gemm(64, 64, 64, block_N=48, micro_N=32, vec=16)
    with pytest.raises(ValueError, match="positive"):
        gemm(0, 64, 64)


@pytest.mark.parametrize(
    ("module", "argv"),
    [
        ("gemm_cpu", ["--size", "96"]),
        ("elementwise_cpu", ["--shape", "33", "65"]),
        ("softmax_cpu", ["--shape", "33", "65"]),
        ("rmsnorm_cpu", ["--shape", "33", "65"]),
    ],
)
def test_cpu_main_runs(module, argv, capsys):
    assert _module(module).main(argv) == 0
    assert "default" in capsys.readouterr().out


# ---------------------------------------------------------------------------------------------
# CUDA examples: compile without a GPU; run with one
# ---------------------------------------------------------------------------------------------

CUDA = {
    "gemm": dict(
        module="gemm_cuda",
        factory="gemm",
        jit="matmul",
        sizes=[(1024, 1024, 1024), (256, 512, 128)],
        inputs=_gemm_inputs,
        ref=_gemm_ref,
        tol=dict(rtol=1e-3, atol=4e-3),
    ),
    "elementwise": dict(
        module="elementwise_cuda",
        factory="silu_mul",
        jit="swiglu",
        sizes=[(1024, 1024), (37, 1001)],
        inputs=_silu_inputs,
        ref=lambda g, u: torch.nn.functional.silu(g) * u,
        tol=dict(rtol=1e-5, atol=1e-5),
    ),
    "softmax": dict(
        module="softmax_cuda",
        factory="softmax",
        jit="softmax_kernel",
        sizes=[(64, 4096), (7, 1001)],
        inputs=_rows_inputs,
        ref=lambda x: torch.softmax(x, dim=-1),
        tol=dict(rtol=1e-5, atol=1e-6),
    ),
}


@pytest.mark.parametrize("name", list(CUDA))
def test_cuda_every_config_compiles_for_sm90(name):
    spec = CUDA[name]
    mod = _module(spec["module"])
    factory = getattr(mod, spec["factory"])
    for size in spec["sizes"]:
        candidates = mod.configs(*size)
        _check_configs(candidates, factory)
        for cfg in [{}] + candidates:
            func = factory(*size, **cfg)
            source = mod.compile_cuda_source(func)
            assert "__global__" in source and "threadIdx.x" in source, cfg
            assert mod.lowered_gpu_ok(func), f"{cfg} breaks {mod.GPU_LIMITS}"


@pytest.mark.parametrize("name", list(CUDA))
def test_cuda_gpu_limits_are_checked(name):
    spec = CUDA[name]
    mod = _module(spec["module"])
    func = getattr(mod, spec["factory"])(*spec["sizes"][0])
    assert mod.lowered_gpu_ok(func)
    assert not mod.lowered_gpu_ok(func, dict(mod.GPU_LIMITS, max_threads_per_block=16))


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.parametrize("name", list(CUDA))
def test_cuda_default_config_compiles_to_ptx(name):
    spec = CUDA[name]
    mod = _module(spec["module"])
    source = mod.compile_cuda_source(getattr(mod, spec["factory"])(*spec["sizes"][-1]))
    ptx = mod.ptx_of(source)
    text = bytes(ptx).decode(errors="replace")
    assert ".entry" in text and "sm_90" in text


def test_gemm_cuda_rejects_sizes_the_tiles_do_not_divide():
    mod = _module("gemm_cuda")
    with pytest.raises(ValueError, match="multiples"):
        mod.gemm(1000, 1024, 1024)
    with pytest.raises(ValueError, match="threads"):
        mod.gemm(1024, 1024, 1024, thread_M=1, thread_N=1)  # 128 x 128 threads
    assert mod.configs(1000, 1000, 1000) == []  # nothing divides: nothing proposed


def test_cuda_main_compiles_without_a_gpu(capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    mod = _module("softmax_cuda")
    assert mod.main(["--shape", "8", "256", "--no-nvcc"]) == 0
    out = capsys.readouterr().out
    assert "CUDA source" in out and "no CUDA GPU present" in out


@pytest.mark.gpu
@CUDA_SKIP
@pytest.mark.parametrize("name", list(CUDA))
def test_cuda_configs_match_torch_on_gpu(name):
    spec = CUDA[name]
    mod = _module(spec["module"])
    jitted = getattr(mod, spec["jit"])
    for size in spec["sizes"]:
        torch.manual_seed(0)
        args, _ = spec["inputs"](*size)
        args = [a.cuda() for a in args]
        ref = spec["ref"](*args)
        for cfg in [{}] + mod.configs(*size):
            out = jitted(*size, **cfg)(*args)
            torch.testing.assert_close(
                out, ref, **spec["tol"], msg=lambda m, cfg=cfg: f"{cfg}: {m}"
            )


@pytest.mark.gpu
@CUDA_SKIP
@pytest.mark.parametrize("module", ["gemm_cuda", "elementwise_cuda", "softmax_cuda"])
def test_cuda_main_runs_on_gpu(module):
    argv = {"gemm_cuda": ["--size", "512"]}.get(module, ["--shape", "256", "1024"])
    assert _module(module).main(argv + ["--no-nvcc"]) == 0
