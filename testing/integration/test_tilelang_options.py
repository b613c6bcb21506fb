"""TileLang habits on real LLVM kernels: decorator stacking, set_compile_args, verbose, targets."""

from __future__ import annotations

import logging

import pytest
from tune_kernels import scale

import tileauto
from tileauto import AutoTuner
from tileauto.errors import TileautoError
from tileauto.options import CompileArgs

FAST = {"warmup_iters": 1, "rep_iters": 3, "verbose": False}


def scale256(vec: int = 8):
    """A factory of the tunables only, as ``AutoTuner.from_kernel`` takes them."""
    return scale(256, vec)


def tuner_of(configs, *compile_args, **compile_kwargs):
    tuner = AutoTuner.from_kernel(scale256, configs)
    return tuner.set_compile_args(*compile_args, **compile_kwargs).set_profile_args(
        warmup_iters=1, rep_iters=3
    )


def test_jit_over_autotune_is_a_type_error_not_a_hang():
    # it shared the autotuner's call cache and its lock, and the first call waited for itself
    tuned = tileauto.autotune(configs=[{"vec": 4}, {"vec": 8}], **FAST)(
        tileauto.jit(out_idx=[-1])(scale)
    )
    with pytest.raises(TypeError, match=r"@autotune object 'scale' \(AutoTuneImpl\).*outer @jit"):
        tileauto.jit(out_idx=[-1])(tuned)
    with pytest.raises(TypeError, match=r"@jit object 'scale' \(JITImpl\)"):
        tileauto.jit(out_idx=[-1])(tileauto.jit(out_idx=[-1])(scale))


def test_jit_keeps_its_own_state_whatever_the_factory_holds():
    def factory(n: int, vec: int = 8):
        return scale(n, vec)

    factory._kernels = "the factory's"  # type: ignore[attr-defined]
    factory.compile_count = -1  # type: ignore[attr-defined]
    impl = tileauto.jit(out_idx=[-1])(factory)
    assert impl._kernels != "the factory's" and impl.compile_count == 0
    assert impl.__name__ == "factory" and impl.__wrapped__ is factory
    impl(64)
    assert impl.compile_count == 1


def test_none_means_the_default_in_set_compile_args():
    assert CompileArgs(execution_backend=None, verbose=None) == CompileArgs()
    tuner = tuner_of([{"vec": 4}], [-1], None, None, None, None, None)
    assert tuner.compile_args == CompileArgs(out_idx=[-1], target=None)


def test_verbose_logs_each_config_a_tuning_compiles(caplog):
    caplog.set_level(logging.WARNING, logger="tileauto.builder")
    tuner_of([{"vec": 4}, {"vec": 16}], [-1], "llvm", verbose=True).run(verbose=False)
    compiled = [r.getMessage() for r in caplog.records if r.name == "tileauto.builder"]
    for vec in (4, 8, 16):  # the two configs and the default
        assert any(f"compiled scale256 config {{'vec': {vec}}} in" in m for m in compiled), compiled
    assert all(m.endswith(": ok") for m in compiled), compiled


def test_verbose_off_logs_no_compile(caplog):
    caplog.set_level(logging.WARNING, logger="tileauto.builder")
    tuner_of([{"vec": 4}], [-1], "llvm").run(verbose=False)
    assert not [r for r in caplog.records if r.name == "tileauto.builder"]


@pytest.mark.parametrize("target", ["metal", "vulkan", "opencl"])
def test_a_target_tileauto_cannot_run_is_refused_before_compiling(target, caplog):
    caplog.set_level(logging.WARNING, logger="tileauto.builder")
    tuner = tuner_of([{"vec": 4}, {"vec": 8}], [-1], target, verbose=True)
    with pytest.raises(TileautoError, match=rf"for target '{target}'.*'llvm'.*'cuda'"):
        tuner.run(verbose=False)
    assert not [r for r in caplog.records if r.name == "tileauto.builder"]  # nothing compiled
