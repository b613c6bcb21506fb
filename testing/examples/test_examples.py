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
from collections.abc import Callable, Sequence
from functools import cache
from types import ModuleType
from typing import NamedTuple

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
# The kernels, each built by ``<name>_cpu.py`` and/or ``<name>_cuda.py`` under the same names
# ---------------------------------------------------------------------------------------------


def _gemm_inputs(M, N, K):
    return [torch.randn(M, K), torch.randn(K, N)], (M, N)


def _rows_inputs(M, N):
    return [torch.randn(M, N) * 4], (M, N)


def _silu_inputs(M, N):
    return [torch.randn(M, N) * 4, torch.randn(M, N)], (M, N)


def _rms_inputs(M, N):
    return [torch.randn(M, N) * 4, torch.rand(N) + 0.5], (M, N)


class Kernel(NamedTuple):
    factory: str  # the factory's name in the example module
    jit: str  # the name of the tileauto.jit kernel the example makes of it
    inputs: Callable  # (*size) -> (input tensors, output shape)
    ref: Callable  # the torch result for the input tensors


KERNELS = {
    "gemm": Kernel("gemm", "matmul", _gemm_inputs, lambda a, b: a @ b),
    "elementwise": Kernel(
        "silu_mul", "swiglu", _silu_inputs, lambda g, u: torch.nn.functional.silu(g) * u
    ),
    "softmax": Kernel(
        "softmax", "softmax_kernel", _rows_inputs, lambda x: torch.softmax(x, dim=-1)
    ),
    "rmsnorm": Kernel(
        "rmsnorm",
        "rmsnorm_kernel",
        _rms_inputs,
        lambda x, w: torch.nn.functional.rms_norm(x, (x.shape[-1],), w, 1e-6),
    ),
}


class Spec(NamedTuple):
    sizes: list  # problem sizes the tests check
    tol: dict  # assert_close tolerances
    picks: Sequence[int] = ()  # CPU: indices into configs() of more configs to check
    extra: Sequence[dict] = ()  # CPU: configs to check besides those of configs()


# (3, 40): a single partial-reduction step; (5, 7): shorter than one vector
_ROW_SIZES = [(64, 256), (37, 1001), (3, 40), (5, 7)]
_ROW_CONFIGS = [1, 7, 10, 14], [{"vec": 8, "rows": 3, "unroll": 3}]

CPU = {
    "gemm": Spec(
        [(128, 128, 128), (100, 72, 129)],  # the second is not divisible by any tile
        dict(rtol=1e-3, atol=2e-3),
        [1, 7, 8, 12],  # AVX-512 and AVX2 register tiles, both cache tilings
        [{"parallel": False, "unroll": 1, "block_K": 8}],
    ),
    "elementwise": Spec(
        [(64, 256), (37, 101)],
        dict(rtol=1e-5, atol=1e-5),
        [1, 6, 11, 13],
        [{"vec": 8, "block": 64, "unroll": 3}],
    ),
    "softmax": Spec(_ROW_SIZES, dict(rtol=1e-5, atol=1e-6), *_ROW_CONFIGS),
    "rmsnorm": Spec(_ROW_SIZES, dict(rtol=1e-5, atol=1e-5), *_ROW_CONFIGS),
}

CUDA = {
    "gemm": Spec([(1024, 1024, 1024), (256, 512, 128)], dict(rtol=1e-3, atol=4e-3)),
    "elementwise": Spec([(1024, 1024), (37, 1001)], dict(rtol=1e-5, atol=1e-5)),
    "softmax": Spec([(64, 4096), (7, 1001)], dict(rtol=1e-5, atol=1e-6)),
}


class Example(NamedTuple):
    mod: ModuleType  # the example module
    factory: Callable  # its factory
    jit: Callable  # its tileauto.jit kernel
    kernel: Kernel
    spec: Spec


def _example(name: str, device: str) -> Example:
    mod = _module(f"{name}_{device}")
    kernel, spec = KERNELS[name], {"cpu": CPU, "cuda": CUDA}[device][name]
    return Example(mod, getattr(mod, kernel.factory), getattr(mod, kernel.jit), kernel, spec)


# ---------------------------------------------------------------------------------------------
# CPU examples: the raw factory built with tvm.compile, and once the jit kernel
# ---------------------------------------------------------------------------------------------


def _cpu_cases():
    for name, spec in CPU.items():
        for size in spec.sizes:
            yield pytest.param(name, size, id=f"{name}-{'x'.join(map(str, size))}")


@pytest.mark.parametrize("name", list(CPU))
def test_cpu_configs_are_factory_keyword_arguments(name):
    ex = _example(name, "cpu")
    for size in ex.spec.sizes:
        _check_configs(ex.mod.configs(*size), ex.factory)
    assert ex.mod.get_configs is ex.mod.configs


@pytest.mark.parametrize(("name", "size"), list(_cpu_cases()))
def test_cpu_default_and_other_configs_match_torch(name, size):
    ex = _example(name, "cpu")
    candidates = ex.mod.configs(*size)
    picked = [candidates[i] for i in ex.spec.picks if i < len(candidates)]
    torch.manual_seed(0)
    args, out_shape = ex.kernel.inputs(*size)
    ref = ex.kernel.ref(*args)
    for cfg in [{}, *picked, *ex.spec.extra]:
        fn = _build_cpu(ex.factory(*size, **cfg))
        out = torch.full(out_shape, float("nan"))  # unwritten elements would show up as NaN
        fn(*args, out)
        torch.testing.assert_close(out, ref, **ex.spec.tol, msg=lambda m, cfg=cfg: f"{cfg}: {m}")


@pytest.mark.parametrize("name", list(CPU))
def test_cpu_jit_kernel_matches_torch(name):
    ex = _example(name, "cpu")
    size = ex.spec.sizes[-1]
    torch.manual_seed(1)
    args, _ = ex.kernel.inputs(*size)
    kernel = ex.jit(*size)  # tileauto.jit: compile the default config
    torch.testing.assert_close(kernel(*args), ex.kernel.ref(*args), **ex.spec.tol)


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


@pytest.mark.parametrize("name", list(CUDA))
def test_cuda_every_config_compiles_for_sm90(name):
    ex = _example(name, "cuda")
    mod = ex.mod
    for size in ex.spec.sizes:
        candidates = mod.configs(*size)
        _check_configs(candidates, ex.factory)
        for cfg in [{}] + candidates:
            func = ex.factory(*size, **cfg)
            source = mod.compile_cuda_source(func)
            assert "__global__" in source and "threadIdx.x" in source, cfg
            assert mod.lowered_gpu_ok(func), f"{cfg} breaks {mod.GPU_LIMITS}"


@pytest.mark.parametrize("name", list(CUDA))
def test_cuda_gpu_limits_are_checked(name):
    ex = _example(name, "cuda")
    mod = ex.mod
    func = ex.factory(*ex.spec.sizes[0])
    assert mod.lowered_gpu_ok(func)
    assert not mod.lowered_gpu_ok(func, dict(mod.GPU_LIMITS, max_threads_per_block=16))


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.parametrize("name", list(CUDA))
def test_cuda_default_config_compiles_to_ptx(name):
    ex = _example(name, "cuda")
    mod = ex.mod
    source = mod.compile_cuda_source(ex.factory(*ex.spec.sizes[-1]))
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


def test_gemm_cuda_space_holds_only_configs_the_kernel_accepts():
    mod = _module("gemm_cuda")
    space = mod.space(2048, 2048, 2048)
    assert len(space) == 970
    for cfg in space:
        mod.check_config(2048, 2048, 2048, **cfg)  # raises on a config the kernel refuses
        threads = (cfg["block_M"] // cfg["thread_M"]) * (cfg["block_N"] // cfg["thread_N"])
        assert threads >= 64 and cfg["thread_M"] * cfg["thread_N"] <= 128
    # the tiles must divide the problem: 96 admits only the 32-wide tiles
    assert {(c["block_M"], c["block_N"]) for c in mod.space(96, 96, 2048)} == {(32, 32)}
    func = mod.gemm(256, 256, 256, **space[len(space) // 2])
    assert "sm_90" in bytes(mod.ptx_of(mod.compile_cuda_source(func))).decode(errors="replace")


def test_cuda_kernels_precompile_in_parallel_without_a_gpu():
    """The build half of the gpu tests: every config of the CUDA GEMM through ``par_compile``
    (compile workers, sm_90, exported and loaded), then the calls compile nothing."""
    ex = _example("gemm", "cuda")
    size = ex.spec.sizes[1]
    cfgs = [{}] + ex.mod.configs(*size)
    jit = ex.jit.with_compile_args(target=dict(ex.mod.COMPILE_TARGET))
    defaults = {n: p.default for n, p in inspect.signature(ex.factory).parameters.items()}
    distinct = {tuple(sorted({**defaults, **cfg}.items())) for cfg in cfgs}
    assert len(distinct) == len(cfgs) - 1  # the default is among the configs: compiled once
    _module("_common").precompile(jit, size, cfgs)
    assert jit.compile_count == len(distinct)
    kernels = [jit(*size, **cfg) for cfg in cfgs]
    assert jit.compile_count == len(distinct)
    assert all(k.target.kind.name == "cuda" for k in kernels)
    assert {k.config["block_M"] for k in kernels} >= {32, 64, 128}


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
    ex = _example(name, "cuda")
    for size in ex.spec.sizes:
        torch.manual_seed(0)
        args, _ = ex.kernel.inputs(*size)
        args = [a.cuda() for a in args]
        ref = ex.kernel.ref(*args)
        cfgs = [{}] + ex.mod.configs(*size)
        _module("_common").precompile(ex.jit, size, cfgs)  # in parallel; the calls load them
        for cfg in cfgs:
            out = ex.jit(*size, **cfg)(*args)
            torch.testing.assert_close(
                out, ref, **ex.spec.tol, msg=lambda m, cfg=cfg: f"{cfg}: {m}"
            )


@pytest.mark.gpu
@CUDA_SKIP
@pytest.mark.parametrize("module", ["gemm_cuda", "elementwise_cuda", "softmax_cuda"])
def test_cuda_main_runs_on_gpu(module):
    argv = {"gemm_cuda": ["--size", "512"]}.get(module, ["--shape", "256", "1024"])
    assert _module(module).main(argv + ["--no-nvcc"]) == 0


def test_cuda_tuning_example_says_there_is_no_gpu(capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert _module("tune_gemm_cuda").main(["--size", "256"]) == 0
    assert "no CUDA GPU present" in capsys.readouterr().out


@pytest.mark.gpu
@CUDA_SKIP
def test_cuda_tuning_example_tunes_on_gpu(capsys):
    """The whole tuning on the GPU: parallel compiles, checks against torch.matmul, timing."""
    assert _module("tune_gemm_cuda").main(["--size", "1024", "--warmup", "5", "--rep", "20"]) == 0
    out = capsys.readouterr().out
    assert "tuned in" in out and "the tuned kernel matches torch.matmul" in out


def test_cuda_gemm_example_refuses_a_size_its_default_tiles_cannot_cover(capsys):
    """``--size 64`` ended in a ValueError traceback from the default config's check."""
    assert _module("gemm_cuda").main(["--size", "64", "--no-nvcc"]) == 2
    assert "--size must be a positive multiple of 128, got 64" in capsys.readouterr().err
