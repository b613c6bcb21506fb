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
    monkeypatch.setattr("tileauto.api.tune._said", set())
    space = [{"vec": 4}, {"vec": 16}]
    with (
        caplog.at_level(logging.WARNING, logger="tileauto"),
        pytest.warns(RuntimeWarning, match="autotuning is disabled") as warned,
    ):
        results = [
            tileauto.AutoTuner.from_kernel(scale_jit(256), space)
            .set_profile_args(warmup=0, rep=2, ref_prog=double)
            .run(verbose=False)
            for _ in range(2)
        ]
    for result in results:
        assert len(result.trials) == 1 and result.trials[0].ok
        # the factory's default, named (result.config was {}: the defaults left implicit)
        assert result.config == result.kernel.config == {"vec": 8}
        assert not result.cache_hit
    said = [r for r in caplog.records if "autotuning is disabled" in r.getMessage()]
    assert len(said) == 1  # said once per process
    # and shown: the logger's records were seen by nobody without a handler of the user's
    assert sum("autotuning is disabled" in str(w.message) for w in warned) == 1


def test_disable_autotune_still_checks_the_default_config(monkeypatch):
    monkeypatch.setenv("TILEAUTO_DISABLE_AUTOTUNE", "1")
    tuner = tileauto.AutoTuner.from_kernel(scale_jit(256), [{"vec": 4}]).set_profile_args(
        warmup=0, rep=2, ref_prog=lambda a: a * 3
    )
    with pytest.raises(NoValidConfigError) as failed:
        tuner.run(verbose=False)
    # tuning is off, said: not "none of the 1 configs passed: [0] vec=8" (the user gave vec=4)
    message = str(failed.value)
    assert "tuning is off (TILEAUTO_DISABLE_AUTOTUNE=1)" in message
    assert "the default config vec=8 did not pass: mismatch" in message
    assert "[0]" not in message


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


def _bucketed(check_new_shapes, **options):
    return tileauto.autotune(
        configs=[{"block": 8}, {"block": 128}],
        key=lambda n: "one bucket",
        check_new_shapes=check_new_shapes,
        timer=big_blocks_win,
        warmup=0,
        rep=2,
        verbose=False,
        **options,
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


def test_the_memory_hit_marker_names_the_config_that_serves_the_call():
    # with check_new_shapes a call whose check failed is served by its own tuning's config:
    # its marker named the bucket's winner (block 128) where block 8 served it
    seen = []
    tuned = _bucketed(True, on_trial=seen.append)
    tuned(1024)
    assert tuned(1000).config == {"block": 8}
    seen.clear()
    assert tuned(1000).config == {"block": 8}  # from memory: one marker
    (marker,) = seen
    assert marker.cache_hit and marker.config == {"block": 8}


def parallel_double(n, block=8):
    """B = 2 * A in a parallel loop (the kernel runs on a thread pool)."""
    from tvm.script import tirx as T

    @T.prim_func
    def main(A: T.Buffer((n,), "float32"), B: T.Buffer((n,), "float32")):
        for i in T.parallel(n):
            B[i] = A[i] * T.float32(2)

    return main


@pytest.mark.parametrize("how", ["bucket", "disk hit", "one config left"])
def test_every_kernel_of_a_tuned_factory_runs_with_its_num_threads(how):
    # num_threads=1 held for the tuned call only: the bucket's other calls, a disk hit in a new
    # decorator and a space pruned to one config ran with every core
    def make():
        options = {"key": lambda n: n // 1000} if how != "one config left" else {}
        if how == "one config left":
            options["prune_configs_by"] = {"perf_model": lambda **kw: 1.0, "top_k": 1}
        return tileauto.autotune(
            configs=[{"block": 8}, {"block": 16}], num_threads=1, warmup=0, rep=2,
            verbose=False, **options,
        )(tileauto.jit(out_idx=[-1], target="llvm")(parallel_double))  # fmt: skip

    tuned = make()
    first = tuned(1024)
    assert first.num_threads == 1
    if how == "bucket":
        assert tuned(1536).num_threads == 1  # the bucket's config, compiled for this call
    elif how == "disk hit":
        assert make()(1024).num_threads == 1


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


# -- bad options fail at the call, naming the argument -------------------------------------------
def test_inplace_args_out_of_range_fails_before_any_config_runs():
    tuner = tileauto.AutoTuner.from_kernel(scale_jit(64), [{"vec": 4}, {"vec": 8}])
    tuner.set_profile_args(warmup=0, rep=2, inplace_args=[99])
    with pytest.raises(ValueError, match=r"inplace_args=\[99\]: \[99\] is not .* 0: A"):
        tuner.run(verbose=False)


def test_numpy_problem_sizes_are_python_ints_for_tvm():
    import numpy as np

    tuned = tileauto.autotune(configs=[{"vec": 4}, {"vec": 8}], warmup=0, rep=2, verbose=False)(
        scale_jit
    )
    kernel = tuned(np.int64(256))
    assert kernel is tuned(256)  # the same call, the same kernel
    a = torch.randn(256)
    torch.testing.assert_close(kernel(a), a * 2)
    jitted = scale_jit(np.int32(128))
    torch.testing.assert_close(jitted(a[:128]), a[:128] * 2)
    result = tileauto.AutoTuner.from_kernel(scale_jit(np.int64(64)), [{"vec": 4}]).run(
        verbose=False
    )
    assert result.trials[0].ok


def test_key_by_argument_names():
    tuned = tileauto.autotune(
        configs=[{"vec": 4}, {"vec": 8}], key=["n"], warmup=0, rep=2, verbose=False
    )(scale_jit)
    assert tuned(256).config
    with pytest.raises(ValueError, match=r"key=\['m'\]: 'm' is not a parameter of"):
        tileauto.autotune(configs=[{"vec": 4}], key=["m"])(scale_jit)


def test_tuning_result_view():
    result = (
        tileauto.AutoTuner.from_kernel(scale_jit(N), [{"vec": 8}, {"mode": "tail"}, {"vec": 4}])
        .set_profile_args(warmup_iters=0, rep_iters=5)
        .run(verbose=False)
    )
    view = result.as_tuning_result()
    assert view.best.config == result.config and view.best.samples == 5
    assert view.best.margin_ms >= 0 and view.best.mean_ms > 0
    assert [m.median_ms for m in view.successes] == sorted(m.median_ms for m in view.successes)
    ((config, kind, message),) = view.failures
    assert config["mode"] == "tail" and kind == "mismatch" and "unwritten" in message


# -- save_to_disk never publishes a folder that cannot be loaded ---------------------------------
def _tune_small():
    return (
        tileauto.AutoTuner.from_kernel(scale_jit(256), [{"vec": 4}, {"vec": 8}])
        .set_profile_args(warmup=0, rep=2)
        .run(verbose=False)
    )


def test_save_recompiles_a_kernel_whose_cache_entry_was_removed(tmp_path):
    import os
    import shutil
    from pathlib import Path

    _tune_small()
    hit = _tune_small()
    assert hit.cache_hit
    shutil.rmtree(Path(os.environ["TILEAUTO_CACHE_DIR"]) / "autotuner")  # `cache clear` elsewhere
    saved = hit.save_to_disk(tmp_path / "saved")
    back = tileauto.AutotuneResult.load_from_disk(saved)
    assert back.config == hit.config
    a = torch.randn(256)
    torch.testing.assert_close(back.kernel(a), a * 2)


def test_save_raises_and_publishes_nothing_when_the_library_cannot_be_had(tmp_path):
    first = _tune_small().save_to_disk(tmp_path / "first")
    loaded = tileauto.AutotuneResult.load_from_disk(first)
    (first / "kernel" / "kernel.so").unlink()  # gone, and a loaded folder has no factory
    with pytest.raises(tileauto.CacheError, match="kernel's library .* is gone"):
        loaded.save_to_disk(tmp_path / "second")
    assert not (tmp_path / "second").exists()


# -- on_trial, pre_hook and post_hook -------------------------------------------------------------
def test_on_trial_sees_each_complete_trial_as_it_is_measured():
    seen = []
    result = (
        tileauto.AutoTuner.from_kernel(scale_jit(256), [{"vec": 4}, {"mode": "compile"}])
        .set_profile_args(warmup=0, rep=2, on_trial=seen.append)
        .run(verbose=False)
    )
    by_index = {t.index: t for t in seen}
    assert by_index[0].ok and by_index[1].status is TrialStatus.COMPILE_ERROR
    assert -1 in by_index  # the default config (vec=8) is measured too
    assert [t.index for t in result.trials] == [0, 1]


def test_on_trial_that_raises_does_not_stop_tuning(caplog):
    def boom(trial):
        raise RuntimeError("progress bar broke")

    with caplog.at_level(logging.WARNING, logger="tileauto"):
        result = (
            tileauto.AutoTuner.from_kernel(scale_jit(256), [{"vec": 4}, {"vec": 16}])
            .set_profile_args(warmup=0, rep=2, on_trial=boom)
            .run(verbose=False)
        )
    assert all(t.ok for t in result.trials)
    assert sum("progress bar broke" in r.getMessage() for r in caplog.records) == 1


def test_pre_and_post_hooks_wrap_every_benchmarked_call(tmp_path):
    log_file = tmp_path / "hooks.txt"  # the hooks run in the run worker: they report to a file

    def pre(args):
        assert set(args) == {"A", "B"}
        args["B"].zero_()  # Triton's use: reset an output before each call
        with open(log_file, "a") as f:
            f.write("pre\n")

    def post(args, exception=None):
        with open(log_file, "a") as f:
            f.write(f"post {type(exception).__name__}\n")

    result = (
        tileauto.AutoTuner.from_kernel(scale_jit(256), [{"vec": 4}])
        .set_profile_args(warmup_iters=0, rep_iters=3, retime_top_k=0, pre_hook=pre, post_hook=post)
        .run(verbose=False)
    )
    assert all(t.ok for t in result.trials)
    lines = log_file.read_text().splitlines()
    assert lines and lines.count("pre") == lines.count("post NoneType")
    # two configs (vec=4 and the default), each: one checked call + 3 timed repetitions
    assert lines.count("pre") == 2 * (1 + 3)


def test_post_hook_gets_the_exception_of_a_failing_call(tmp_path):
    log_file = tmp_path / "hooks.txt"  # the hook runs in the run worker: it reports to a file

    def post(args, exception=None):
        with open(log_file, "a") as f:
            f.write(f"{type(exception).__name__}: {exception}\n".splitlines()[0] + "\n")

    result = (
        tileauto.AutoTuner.from_kernel(scale_jit(256), [{"vec": 4}, {"mode": "raise"}])
        .set_profile_args(warmup=0, rep=2, retime_top_k=0, post_hook=post)
        .run(verbose=False)
    )
    failed = next(t for t in result.trials if t.config.get("mode") == "raise")
    assert failed.status is TrialStatus.RUN_ERROR and "deliberate runtime failure" in failed.error
    lines = log_file.read_text().splitlines()
    assert any(line.startswith("NoneType") for line in lines)  # the calls that returned
    assert sum("deliberate runtime failure" in line for line in lines) == 1  # the one that raised


# -- Triton's prune_configs_by --------------------------------------------------------------------
def test_pruning_to_one_config_uses_it_without_benchmarking(tmp_path):
    calls = tmp_path / "timer.txt"

    def counting_timer(func, args, *, warmup, rep, config, device):
        with open(calls, "a") as f:
            f.write("timed\n")
        return [1e6] * rep

    tuned = tileauto.autotune(
        configs=[{"vec": 4}, {"vec": 8}, {"vec": 16}],
        prune_configs_by={"perf_model": lambda n, vec, **rest: -vec, "top_k": 1},
        timer=counting_timer,
        warmup=0,
        rep=2,
        verbose=False,
    )(scale_jit)
    kernel = tuned(256)
    assert kernel.config["vec"] == 16 and not calls.exists()  # compiled, never timed
    a = torch.randn(256)
    torch.testing.assert_close(kernel(a), a * 2)


def test_pruning_keeps_top_k_and_tunes_them():
    result = (
        tileauto.AutoTuner.from_kernel(scale_jit(256), [{"vec": 4}, {"vec": 8}, {"vec": 16}])
        .set_profile_args(
            warmup=0,
            rep=2,
            prune_configs_by={
                "early_config_prune": lambda configs, named: [c for c in configs if c["vec"] > 4],
                "perf_model": lambda n, vec, **rest: vec,
                "top_k": 1.0,
            },
        )
        .run(verbose=False)
    )
    assert [t.config["vec"] for t in result.trials] == [8, 16]


# -- pass_configs inside a config -----------------------------------------------------------------
def test_a_config_may_carry_its_own_pass_configs():
    no_vec = {"tirx.disable_vectorize": True}
    result = (
        tileauto.AutoTuner.from_kernel(
            scale_jit(256), [{"vec": 8}, {"vec": 8, "pass_configs": no_vec}]
        )
        .set_profile_args(warmup=0, rep=2)
        .run(verbose=False)
    )
    assert [t.config for t in result.trials][1]["pass_configs"] == no_vec
    assert all(t.ok for t in result.trials)
    assert "pass_configs" in result.table()  # shown in the report
    sources = {}
    for cfg in ({"vec": 8}, {"vec": 8, "pass_configs": no_vec}):
        one = (
            tileauto.AutoTuner.from_kernel(scale_jit(256), [cfg])
            .set_profile_args(warmup=0, rep=2)
            .run(verbose=False)
        )
        assert one.kernel.config == cfg or one.kernel.config.get("pass_configs") == cfg.get(
            "pass_configs"
        )
        sources[bool(cfg.get("pass_configs"))] = one.kernel.get_kernel_source()
    # the option reached the compiler: TVM's own 8-lane vectors without it, none with it. LLVM's
    # loop vectorizer may then vectorize the scalar loop itself (on AVX2, 8 lanes too: its
    # loads are named %wide.load); it never touches a loop TVM vectorized already
    assert "<8 x float>" in sources[False] and "wide.load" not in sources[False]
    assert sources[True] != sources[False]
    assert "<8 x float>" not in sources[True] or "wide.load" in sources[True]


def test_pass_configs_in_a_config_must_be_a_dict():
    with pytest.raises(tileauto.ConfigSpaceError, match=r"\['pass_configs'\] must be a dict"):
        tileauto.AutoTuner.from_kernel(scale_jit(64), [{"pass_configs": 3}]).run(verbose=False)


# -- inputs per kernel signature ------------------------------------------------------------------
def padded_double(n, block=8, dtype="float32"):
    """B = 2 * A over buffers padded up to a multiple of the block: the shape is the config's."""
    from tvm.script import tirx as T

    m = -(-n // block) * block

    @T.prim_func
    def main(A: T.Buffer((m,), dtype), B: T.Buffer((m,), dtype)):
        for i in range(m):
            B[i] = A[i] * T.Cast(dtype, 2)

    return main


PADDED_JIT = tileauto.jit(out_idx=[-1], target="llvm")(padded_double)
PADDED_SPACE = [{"block": 8}, {"block": 48}, {"block": 64, "dtype": "float64"}, {"block": 50}]


@pytest.mark.parametrize("ref_prog", [double, None], ids=["ref_prog", "no-ref_prog"])
def test_configs_with_other_buffer_shapes_and_dtypes_get_inputs_of_their_own(ref_prog):
    def tune():
        return (
            tileauto.AutoTuner.from_kernel(PADDED_JIT(100), PADDED_SPACE)
            .set_profile_args(warmup=0, rep=2, ref_prog=ref_prog)
            .run(verbose=False)
        )

    first, second = tune(), tune()
    assert all(t.ok for t in first.trials), [t.error for t in first.trials]
    assert first.default_trial is not None and first.default_trial.ok
    if ref_prog is None:  # the default config (block=8, m=104) is the reference of its shape
        by_block = {t.config["block"]: t for t in first.trials}
        assert not any("not compared" in n for n in by_block[8].notes)
        assert any("not compared with the default config" in n for n in by_block[48].notes)
        assert any("A [128] float64" in n for n in by_block[64].notes)
    # deterministic: the same statuses whatever order the configs finished compiling in
    assert [t.status for t in second.trials] == [t.status for t in first.trials]


def test_a_wrong_config_of_another_shape_is_caught_by_ref_prog():
    def padded_triple_at_50(n, block=8):
        from tvm.script import tirx as T

        m = -(-n // block) * block
        factor = 3.0 if block == 50 else 2.0

        @T.prim_func
        def main(A: T.Buffer((m,), "float32"), B: T.Buffer((m,), "float32")):
            for i in range(m):
                B[i] = A[i] * T.float32(factor)

        return main

    result = (
        tileauto.AutoTuner.from_kernel(
            tileauto.jit(out_idx=[-1], target="llvm")(padded_triple_at_50)(100),
            [{"block": 8}, {"block": 50}],
        )
        .set_profile_args(warmup=0, rep=2, ref_prog=double)
        .run(verbose=False)
    )
    wrong = next(t for t in result.trials if t.config["block"] == 50)
    assert wrong.status is TrialStatus.MISMATCH


# -- warmup and rep are milliseconds, as in TileLang and Triton ----------------------------------
def _recording_timer(path):
    def timer(func, args, *, warmup, rep, config, device):
        with open(path, "a") as f:
            f.write(f"{config.get('mode', 'ok')} {warmup} {rep}\n")
        func(*args)
        return [1e6] * rep

    return timer


def test_rep_in_milliseconds_gives_a_slow_config_fewer_iterations(tmp_path):
    log_file = tmp_path / "counts.txt"  # the timer runs in the run worker
    result = (
        tileauto.AutoTuner.from_kernel(
            scale_jit(1 << 16), [{"vec": 8}, {"mode": "slow", "repeat": 256}]
        )
        .set_profile_args(warmup=5, rep=20, retime_top_k=0, timer=_recording_timer(log_file))
        .run(verbose=False)
    )
    assert all(t.ok for t in result.trials)
    counts = {}
    for line in log_file.read_text().splitlines():
        mode, warmup, rep = line.split()
        counts[mode] = (int(warmup), int(rep))
    assert counts["ok"][1] > counts["slow"][1] >= 3  # same milliseconds, fewer slow calls
    assert counts["ok"][0] > 0


def test_iteration_counts_are_exact_when_given(tmp_path):
    log_file = tmp_path / "counts.txt"
    (
        tileauto.AutoTuner.from_kernel(scale_jit(256), [{"vec": 8}])
        .set_profile_args(
            warmup_iters=2, rep_iters=7, retime_top_k=0, timer=_recording_timer(log_file)
        )
        .run(verbose=False)
    )
    assert set(log_file.read_text().splitlines()) == {"ok 2 7"}


# -- scalar kernel parameters ---------------------------------------------------------------------
def test_kernels_with_scalar_parameters_are_called_with_values():
    from tune_kernels import first_n, scaled_by

    kernel = tileauto.jit(out_idx=[-1], target="llvm")(scaled_by)(64)
    a = torch.randn(64)
    torch.testing.assert_close(kernel(a, 2.5), a * 2.5)
    torch.testing.assert_close(kernel(a, 3), a * 3)
    with pytest.raises(tileauto.KernelArgumentError, match="'alpha': expected a scalar float32"):
        kernel(a, "2.5")
    sized = tileauto.jit(out_idx=[-1], target="llvm")(first_n)()  # n sizes A and B
    torch.testing.assert_close(sized(a[:10], 10), a[:10] * 2)


def test_tuning_a_scalar_kernel_without_inputs_names_the_ways_to_give_them():
    from tune_kernels import scaled_by

    tuner = tileauto.AutoTuner.from_kernel(
        tileauto.jit(out_idx=[-1], target="llvm")(scaled_by)(64), [{"vec": 4}]
    ).set_profile_args(warmup=0, rep=2)
    with pytest.raises(ValueError, match="set_autotune_inputs.*supply_prog") as info:
        tuner.run(verbose=False)
    assert "alpha" in str(info.value)


def test_scalar_inputs_from_set_autotune_inputs_and_supply_prog():
    from tune_kernels import scaled_by

    impl = tileauto.jit(out_idx=[-1], target="llvm")(scaled_by)

    def ref(a, alpha):
        return a * alpha

    a = torch.randn(64)
    with tileauto.set_autotune_inputs(a, 1.5):
        result = (
            tileauto.AutoTuner.from_kernel(impl(64), [{"vec": 4}, {"vec": 8}])
            .set_profile_args(warmup=0, rep=2, ref_prog=ref)
            .run(verbose=False)
        )
    assert all(t.ok for t in result.trials)

    def supply(params):
        assert [p.is_scalar for p in params] == [False, True]
        return [torch.randn(64), 0.5]

    result = (
        tileauto.AutoTuner.from_kernel(impl(64), [{"vec": 4}])
        .set_profile_args(warmup=0, rep=2, supply_prog=supply, ref_prog=ref)
        .run(verbose=False)
    )
    assert all(t.ok for t in result.trials)
