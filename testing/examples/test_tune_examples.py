"""The decorator and the builder on the example kernels, tuned for real on the CPU."""

from __future__ import annotations

import elementwise_cpu
import gemm_cpu
import pytest
import rmsnorm_cpu
import softmax_cpu
import torch

import tileauto


@pytest.mark.timeout(300)
def test_autotune_decorator_on_the_gemm_example():
    tuned = tileauto.autotune(
        configs=lambda M, N, K: gemm_cpu.configs(M, N, K)[:4],
        warmup=2,
        rep=5,
        ref_prog=torch.matmul,
        rtol=1e-3,
        atol=1e-3,
        verbose=False,
    )(gemm_cpu.matmul)
    kernel = tuned(96, 80, 64)
    result = tuned.get_tuner_result(96, 80, 64)
    assert all(t.ok for t in result.trials), [t.reason for t in result.trials]
    assert result.config in gemm_cpu.configs(96, 80, 64)[:4]
    assert result.latency == min(t.latency_ms for t in result.trials)
    a, b = torch.randn(96, 64), torch.randn(64, 80)
    torch.testing.assert_close(kernel(a, b), a @ b, rtol=1e-3, atol=1e-3)
    assert tuned(96, 80, 64) is kernel


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "module, factory, shape, reference",
    [
        (softmax_cpu, softmax_cpu.softmax_kernel, (64, 96), lambda x: torch.softmax(x, dim=-1)),
        (rmsnorm_cpu, rmsnorm_cpu.rmsnorm_kernel, (64, 96), rmsnorm_cpu.reference),
        (
            elementwise_cpu,
            elementwise_cpu.swiglu,
            (64, 96),
            lambda g, u: torch.nn.functional.silu(g) * u,
        ),
    ],
)
def test_autotuner_builder_on_the_row_and_elementwise_examples(module, factory, shape, reference):
    configs = module.configs(*shape)[:3]
    result = (
        tileauto.AutoTuner.from_kernel(factory(*shape), configs)
        .set_profile_args(warmup=2, rep=5, ref_prog=reference, rtol=1e-4, atol=1e-4)
        .run(verbose=False)
    )
    assert [t.index for t in result.trials] == [0, 1, 2]
    assert all(t.ok for t in result.trials), [t.reason for t in result.trials]
    assert result.ref_latency is not None and result.ref_latency > 0
    assert result.kernel.config.items() >= result.config.items()
