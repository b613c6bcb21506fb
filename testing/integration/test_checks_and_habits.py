"""Checks that let no wrong kernel win, and the TileLang call shapes users bring with them."""

from __future__ import annotations

import logging

import pytest
import torch
from tune_kernels import scale, scale_jit

import tileauto
from tileauto import NoValidConfigError, TrialStatus

N = 4000  # the tail mode leaves 32 elements (0.8%) unwritten: under the default 1% ratio


def tail_wins(func, args, *, warmup, rep, config, device):
    """A scripted timer under which the config that skips work would be the fastest."""
    func(*args)
    return [(0.5 if config["mode"] == "tail" else 1.0) * 1e6] * rep


def double(a):
    return a * 2


# -- unwritten outputs ---------------------------------------------------------------------------
@pytest.mark.parametrize("ref_prog", [double, None], ids=["ref_prog", "default-as-reference"])
def test_a_config_that_leaves_outputs_unwritten_never_wins(ref_prog):
    result = (
        tileauto.AutoTuner.from_kernel(scale_jit(N), [{"vec": 8}, {"mode": "tail"}])
        .set_profile_args(warmup=0, rep=2, ref_prog=ref_prog, timer=tail_wins)
        .run(verbose=False)
    )
    tail = next(t for t in result.trials if t.config.get("mode") == "tail")
    assert tail.status is TrialStatus.MISMATCH
    assert tail.error.startswith("unwritten output: 32 elements of B"), tail.error
    assert result.config.get("mode", "ok") == "ok"
    a = torch.randn(N)
    torch.testing.assert_close(result.kernel(a), a * 2)


def test_unwritten_output_fails_even_with_a_permissive_manual_check():
    result = (
        tileauto.AutoTuner.from_kernel(scale_jit(N), [{"vec": 8}, {"mode": "tail"}])
        .set_profile_args(
            warmup=0, rep=2, ref_prog=double, manual_check_prog=lambda r, e: True, timer=tail_wins
        )
        .run(verbose=False)
    )
    tail = next(t for t in result.trials if t.config.get("mode") == "tail")
    assert tail.status is TrialStatus.MISMATCH and "unwritten output" in tail.error


# -- manual_check_prog always gets lists ---------------------------------------------------------
@pytest.mark.parametrize(
    "ref_prog",
    [lambda a: a * 2, lambda a: (a * 2,), lambda a: [a * 2], None],
    ids=["tensor", "tuple", "list", "no-ref_prog"],
)
def test_manual_check_prog_receives_lists(ref_prog, tmp_path):
    log = tmp_path / "seen.txt"  # the check runs in the run worker: it reports through a file

    def check(outputs, expected):
        with open(log, "a") as f:
            f.write(f"{type(outputs).__name__} {type(expected).__name__}\n")
        torch.testing.assert_close(outputs[0], expected[0])  # the docs' own idiom

    result = (
        tileauto.AutoTuner.from_kernel(scale_jit(256), [{"vec": 4}, {"vec": 8}])
        .set_profile_args(warmup=0, rep=2, ref_prog=ref_prog, manual_check_prog=check)
        .run(verbose=False)
    )
    assert all(t.ok for t in result.trials), [t.error for t in result.trials]
    seen = log.read_text().splitlines()
    assert seen and set(seen) == {"list list"}


# -- TILEAUTO_DISABLE_AUTOTUNE on both paths ---------------------------------------------------
def test_disable_autotune_runs_only_the_default_config_in_the_builder(monkeypatch, caplog):
    monkeypatch.setenv("TILEAUTO_DISABLE_AUTOTUNE", "1")
    monkeypatch.setattr("tileauto.autotuner._said", set())
    space = [{"vec": 4}, {"vec": 16}]
    with caplog.at_level(logging.WARNING, logger="tileauto"):
        results = [
            tileauto.AutoTuner.from_kernel(scale_jit(256), space)
            .set_profile_args(warmup=0, rep=2, ref_prog=double)
            .run(verbose=False)
            for _ in range(2)
        ]
    for result in results:
        assert len(result.trials) == 1 and result.trials[0].ok
        assert result.kernel.config.get("vec", 8) == 8  # the factory's default
        assert not result.cache_hit
    said = [r for r in caplog.records if "autotuning is disabled" in r.getMessage()]
    assert len(said) == 1  # said once per process


def test_disable_autotune_still_checks_the_default_config(monkeypatch):
    monkeypatch.setenv("TILEAUTO_DISABLE_AUTOTUNE", "1")
    tuner = tileauto.AutoTuner.from_kernel(scale_jit(256), [{"vec": 4}]).set_profile_args(
        warmup=0, rep=2, ref_prog=lambda a: a * 3
    )
    with pytest.raises(NoValidConfigError, match="mismatch"):
        tuner.run(verbose=False)


def test_disable_autotune_with_no_defaults_uses_the_first_config(monkeypatch):
    monkeypatch.setenv("TILEAUTO_DISABLE_AUTOTUNE", "1")

    def no_defaults(vec):
        return scale(256, vec=vec)

    result = (
        tileauto.AutoTuner.from_kernel(no_defaults, [{"vec": 16}, {"vec": 4}])
        .set_compile_args(out_idx=[-1], target="llvm")
        .set_profile_args(warmup=0, rep=2)
        .run(verbose=False)
    )
    assert [t.config for t in result.trials] == [{"vec": 16}]
    kernel = result.kernel
    a = torch.randn(256)
    torch.testing.assert_close(kernel(a), a * 2)


# -- inherited compile arguments and TileLang's positional order ---------------------------------
def test_set_compile_args_keeps_what_it_is_not_given():
    tuner = tileauto.AutoTuner.from_kernel(scale_jit(256), [{"vec": 4}, {"vec": 8}])
    tuner.set_compile_args(target="llvm")
    assert tuner.compile_args.out_idx == (-1,) or tuner.compile_args.out_idx == (1,)
    result = tuner.set_profile_args(warmup=0, rep=2).run(verbose=False)
    a = torch.randn(256)
    torch.testing.assert_close(result.kernel(a), a * 2)  # B is still allocated and returned


def test_set_compile_args_and_set_profile_args_take_tilelang_positional_order(tmp_path):
    def supply(params):
        return [torch.full(p.shape, 1.5, dtype=p.dtype) for p in params]

    seen = tmp_path / "ref.txt"  # ref_prog runs in the run worker: it reports through a file

    def ref(a):
        seen.write_text(str(float(a[0])))
        return a * 2

    tuner = tileauto.AutoTuner.from_kernel(scale, [{"vec": 4}, {"vec": 8}])
    tuner.args = (256,)
    # TileLang: (out_idx, target, execution_backend, target_host, verbose, pass_configs)
    tuner.set_compile_args([-1], "llvm", "auto", None, False, None)
    # TileLang: (warmup, rep, timeout, supply_type, ref_prog, supply_prog, rtol, atol, ratio, ...)
    tuner.set_profile_args(0, 2, 30, None, ref, supply, 1e-3, 1e-3, 0.0, False, None, True, "event")
    result = tuner.run(verbose=False)
    assert all(t.ok for t in result.trials)
    assert seen.read_text() == "1.5"  # ref_prog ran on supply_prog's inputs
    assert tuner.profile_args.rtol == 1e-3 and tuner.profile_args.max_mismatched_ratio == 0.0


@pytest.mark.parametrize("backend", ["event", "auto", "cupti", "cudagraph"])
def test_backend_is_accepted(backend):
    tuner = tileauto.AutoTuner.from_kernel(scale_jit(256), [{"vec": 8}]).set_profile_args(
        warmup=0, rep=2, backend=backend
    )
    assert tuner.run(verbose=False).trials[0].ok


def test_bad_backend_names_the_argument():
    with pytest.raises(ValueError, match=r"backend must be one of .*'nvtx'"):
        tileauto.autotune(configs=[{"vec": 8}], backend="nvtx")


def test_compile_args_and_kernel_param_are_importable_from_the_package():
    from tileauto import CompileArgs, KernelParam, ProfileArgs

    assert CompileArgs(out_idx=-1).out_idx == (-1,)
    assert ProfileArgs().backend == "event"
    assert KernelParam("A", torch.float32, (4,)).shape == (4,)


# -- key= buckets: a config tuned at one shape, checked at another --------------------------------
def blocked_double(n, block=8):
    """B = 2 * A over whole blocks only: a block that does not divide n leaves a tail unwritten."""
    from tvm.script import tirx as T

    whole = n // block * block

    @T.prim_func
    def main(A: T.Buffer((n,), "float32"), B: T.Buffer((n,), "float32")):
        for i in range(whole):
            B[i] = A[i] * T.float32(2)

    return main


def big_blocks_win(func, args, *, warmup, rep, config, device):
    func(*args)
    return [(1.0 if config["block"] == 128 else 2.0) * 1e6] * rep


def _bucketed(check_new_shapes):
    return tileauto.autotune(
        configs=[{"block": 8}, {"block": 128}],
        key=lambda n: "one bucket",
        check_new_shapes=check_new_shapes,
        timer=big_blocks_win,
        warmup=0,
        rep=2,
        verbose=False,
    )(tileauto.jit(out_idx=[-1], target="llvm")(blocked_double))


def test_bucket_reuse_is_unchecked_by_default():
    tuned = _bucketed(False)
    assert tuned(1024).config == {"block": 128}  # 128 divides 1024: right, and fastest
    kernel = tuned(1000)  # same bucket: block=128 reused as documented, leaving 104 unwritten
    assert kernel.config == {"block": 128}


def test_check_new_shapes_validates_the_bucket_winner_and_tunes_on_failure():
    tuned = _bucketed(True)
    assert tuned(1024).config == {"block": 128}
    kernel = tuned(1000)
    assert kernel.config == {"block": 8}  # the check failed at 1000; tuning 1000 picked 8
    a = torch.randn(1000)
    torch.testing.assert_close(kernel(a), a * 2)
    assert tuned(2048).config == {"block": 128}  # the check passes at 2048: the winner stays


def test_generator_configs_serve_every_call():
    tuned = tileauto.autotune(configs=({"vec": v} for v in (4, 8)), warmup=0, rep=2, verbose=False)(
        scale_jit
    )
    assert tuned(256).config and tuned(512).config


def test_main_functions_as_config_values_are_rejected_before_compiling():
    with pytest.raises(tileauto.ConfigSpaceError, match=r"configs\[0\]\['mode'\] is a function"):
        tileauto.AutoTuner.from_kernel(scale_jit(64), [{"mode": double}]).run(verbose=False)


# -- TileLang-style factories: tunables without defaults ------------------------------------------
def scale_no_defaults(vec):
    return scale(256, vec=vec)


def test_tunables_without_defaults_tune_and_hit_the_cache():
    def run():
        return (
            tileauto.AutoTuner.from_kernel(scale_no_defaults, [{"vec": 16}, {"vec": 4}])
            .set_compile_args(out_idx=[-1], target="llvm")
            .set_profile_args(warmup=0, rep=2)
            .run(verbose=False)
        )

    first = run()
    assert not first.cache_hit and all(t.ok for t in first.trials)
    assert first.default_trial.config == {"vec": 16}  # the first config is the baseline
    second = run()
    assert second.cache_hit and second.config == first.config


def test_decorated_factory_without_defaults():
    tuned = tileauto.autotune(configs=[{"vec": 4}, {"vec": 16}], warmup=0, rep=2, verbose=False)(
        tileauto.jit(out_idx=[-1], target="llvm")(scale)
    )
    assert tuned(256) is tuned(n=256)

    @tileauto.autotune(configs=[{"vec": 4}, {"vec": 16}], warmup=0, rep=2, verbose=False)
    @tileauto.jit(out_idx=[-1], target="llvm")
    def no_default(n, vec):
        return scale(n, vec=vec)

    kernel = no_default(256)
    assert kernel is no_default(n=256) and kernel.config["vec"] in (4, 16)
    a = torch.randn(256)
    torch.testing.assert_close(kernel(a), a * 2)


def test_passing_a_tuned_argument_fixes_it_and_tunes_the_rest():
    space = [{"vec": 4}, {"vec": 16}, {"vec": 16, "mode": "slow", "repeat": 4}]
    tuned = tileauto.autotune(configs=space, warmup=0, rep=2, verbose=False)(scale_jit)
    kernel = tuned(256, vec=4)
    result = tuned.get_tuner_result(256, vec=4)
    # vec is fixed at 4: two distinct remainders are tuned, filled with the factory's defaults
    assert [t.config for t in result.trials] == [
        {"mode": "ok", "repeat": 1},
        {"mode": "slow", "repeat": 4},
    ]
    assert "vec" not in result.config
    a = torch.randn(256)
    torch.testing.assert_close(kernel(a), a * 2)
