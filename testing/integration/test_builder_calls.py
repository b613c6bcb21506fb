"""The builder and the tuning's start, as a new user drives them (from a hunt): a kernel built
with its tunable passed by position, a CUDA tuning on a machine without a GPU, target_host
errors, a configs callable that cannot take the kernel's arguments, a timer set then dropped."""

from __future__ import annotations

import pytest
import torch
from tune_kernels import scale_jit
from tvm import s_tir, te

import tileauto
from tileauto.errors import ConfigSpaceError, TileautoError

FAST = {"warmup": 1, "rep": 3}


def by_vec(func, args, *, warmup, rep, config, device):
    func(*args)
    return [{4: 2.0, 8: 1.0}.get(config.get("vec"), 9.0) * 1e6] * rep


def test_a_kernel_built_with_its_tunable_by_position_is_tuned_over_the_configs():
    """``from_kernel(scale_jit(1024, 16), configs)`` measured one empty config and returned
    ``{}``: only keyword tunables were taken out of the kernel's call, a positional one fixed
    the tuning to the kernel's own value."""
    result = (
        tileauto.AutoTuner.from_kernel(scale_jit(1024, 16), [{"vec": 4}, {"vec": 8}])
        .set_profile_args(**FAST, timer=by_vec)
        .run(verbose=False)
    )
    assert [t.config for t in result.trials] == [{"vec": 4}, {"vec": 8}]
    assert result.config == {"vec": 8}


def test_set_profile_args_again_drops_a_timer_it_is_not_given():
    """A timer stayed for every later set_profile_args (docs: each call sets every profile
    argument anew), so real timings could never come back."""
    tuner = tileauto.AutoTuner.from_kernel(scale_jit(1024), [{"vec": 4}, {"vec": 8}])
    tuner.set_profile_args(**FAST, timer=by_vec)
    assert tuner.timer is by_vec
    tuner.set_profile_args(**FAST)
    assert tuner.timer is None


def test_a_configs_callable_that_cannot_take_the_arguments_is_a_config_space_error():
    """It was the private ``_DoesNotFit`` out of ``from_kernel``."""
    with pytest.raises(ConfigSpaceError, match="configs is a callable but it cannot take"):
        tileauto.AutoTuner.from_kernel(scale_jit(1024), lambda m, k: [{"vec": 4}])


@pytest.mark.parametrize("host, shown", [(5, "target_host must be"), ("nonsense", "target_host=")])
def test_a_bad_target_host_is_named_as_target_host(host, shown, monkeypatch):
    """It was named ``target``, and with TILEAUTO_DEFAULT_TARGET set it blamed that variable."""
    for default in (None, "llvm"):
        if default is not None:
            monkeypatch.setenv("TILEAUTO_DEFAULT_TARGET", default)
        with pytest.raises(ValueError, match=shown) as info:
            tileauto.jit(out_idx=[-1], target_host=host)(lambda n, vec=8: None)(8)
        assert "TILEAUTO_DEFAULT_TARGET" not in str(info.value)


def _add1(n, threads=64):
    A = te.placeholder((n,), "float32", name="A")
    B = te.compute((n,), lambda i: A[i] + 1, name="B")
    sch = s_tir.Schedule(te.create_prim_func([A, B]))
    (i,) = sch.get_loops(sch.get_sblock("B"))
    bx, tx = sch.split(i, [None, threads])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    return sch.mod["main"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without a GPU")
def test_tuning_a_cuda_kernel_without_a_gpu_stops_before_compiling():
    """It compiled every config, then failed on making the inputs with torch's "not
    compiled with CUDA enabled", naming neither the GPU nor par_compile."""
    kernel = tileauto.jit(out_idx=[-1], target={"kind": "cuda", "arch": "sm_90"})(_add1)
    tuner = tileauto.AutoTuner.from_kernel(kernel(1024), [{"threads": 32}, {"threads": 128}])
    with pytest.raises(TileautoError, match=r"torch sees none .* par_compile") as info:
        tuner.set_profile_args(**FAST).run(verbose=False)
    assert "not compiled with CUDA" not in str(info.value)
