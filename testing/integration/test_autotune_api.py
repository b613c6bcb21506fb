"""The decorator and the builder on real LLVM kernels: inputs, checks, keys, settings."""

from __future__ import annotations

import math

import pytest
import torch
from tune_kernels import inplace_scale, scale, scale_jit

import tileauto
from tileauto import TensorSupplyType, TrialStatus
from tileauto.language import next_power_of_2

FAST = {"warmup_iters": 1, "rep_iters": 3, "verbose": False}


def by_vec(func, args, *, warmup, rep, config, device):
    """A scripted timer: the latency is a function of the config (vec=8 wins)."""
    func(*args)
    return [{4: 2.0, 8: 1.0, 16: 3.0}.get(config["vec"], 9.0) * 1e6] * rep


def test_decorator_tunes_once_and_returns_the_cached_kernel():
    tuned = tileauto.autotune(configs=[{"vec": 4}, {"vec": 8}, {"vec": 16}], timer=by_vec, **FAST)(
        tileauto.jit(out_idx=[-1])(scale)
    )
    kernel = tuned(2048)
    assert kernel.config["vec"] == 8
    assert tuned(2048) is kernel
    assert tuned(n=2048) is kernel
    result = tuned.get_tuner_result(2048)
    assert result.config == {"vec": 8}
    assert [t.index for t in result.trials] == [0, 1, 2]
    assert all(t.ok and t.latency.samples == 3 for t in result.trials)
    a = torch.randn(2048)
    torch.testing.assert_close(kernel(a), a * 2)


def test_configs_callable_and_errors_before_compiling():
    impl = tileauto.jit(out_idx=[-1])(scale)
    tuned = tileauto.autotune(
        configs=lambda n: [{"vec": v} for v in (4, 8) if v <= n], timer=by_vec, **FAST
    )(impl)
    assert tuned(1024).config["vec"] == 8
    with pytest.raises(tileauto.ConfigSpaceError, match="empty"):
        tileauto.autotune(configs=[], **FAST)(impl)(512)
    with pytest.raises(tileauto.ConfigSpaceError, match="'block'.*not a parameter of scale"):
        tileauto.autotune(configs=[{"vec": 4}, {"block": 4}], **FAST)(impl)(512)
    with pytest.raises(TypeError, match="stacked on @tileauto.jit"):
        tileauto.autotune(configs=[{"vec": 4}])(scale)


def test_key_bucketing_shares_one_tuning():
    impl = tileauto.jit(out_idx=[-1])(scale)
    tuned = tileauto.autotune(
        configs=[{"vec": 4}, {"vec": 8}],
        key=lambda n, **_: next_power_of_2(n),
        timer=by_vec,
        **FAST,
    )(impl)
    k1000 = tuned(1000)
    k1020 = tuned(1020)
    assert len(tuned.results) == 1
    assert k1000 is not k1020 and k1020.config["vec"] == 8
    a = torch.randn(1020)
    torch.testing.assert_close(k1020(a), a * 2)
    tuned(2000)
    assert len(tuned.results) == 2


def by_vec_or_fixed(func, args, *, warmup, rep, config, device):
    """by_vec, for configs that may not set vec (the call fixed it)."""
    func(*args)
    return [{4: 2.0, 8: 1.0}.get(config.get("vec"), 9.0) * 1e6] * rep


def test_a_tunable_the_call_passes_is_fixed_in_a_key_bucket_too():
    # the bucket's config replaced it, and a first call that fixed it became the bucket's
    # tuning: every later call got the factory's default, never tuned
    impl = tileauto.jit(out_idx=[-1])(scale)
    tuned = tileauto.autotune(
        configs=[{"vec": 4}, {"vec": 8}], key=lambda n: next_power_of_2(n), timer=by_vec_or_fixed,
        **FAST,
    )(impl)  # fmt: skip
    first = tuned(1024, vec=16)  # the bucket's first call fixes vec: a tuning of the rest
    assert tuned.get_tuner_result(1024, vec=16).config == {}
    assert "<16 x float>" in first.get_kernel_source()  # the LLVM IR of a 16-wide vector
    free = tuned(1024)
    assert tuned.get_tuner_result(1024).config == {"vec": 8} and free.config == {"vec": 8}
    fixed = tuned(1000, vec=4)  # the bucket's winner is 8; this call says 4
    assert "<4 x float>" in fixed.get_kernel_source()
    assert "<8 x float>" in tuned(1000).get_kernel_source()
    a = torch.randn(1000)
    torch.testing.assert_close(fixed(a), a * 2)


def test_a_tunable_passed_at_its_default_value_is_fixed_in_memory_too():
    """``f(n)`` and ``f(n, vec=<default>)`` had one memory key (the defaults applied): the
    second call got the first's kernel, tuned or fixed, whichever came first."""
    for order in ("tuned first", "fixed first"):
        tuned = tileauto.autotune(configs=[{"vec": 4}, {"vec": 16}], timer=by_vec_or_fixed, **FAST)(
            tileauto.jit(out_idx=[-1])(scale)
        )  # scale's default vec is 8; 4 wins here (by_vec_or_fixed: 8 is not in the space)
        calls = [(), (("vec", 8),)] if order == "tuned first" else [(("vec", 8),), ()]
        kernels = {kw: tuned(512, **dict(kw)) for kw in calls}
        assert "<4 x float>" in kernels[()].get_kernel_source(), order
        assert "<8 x float>" in kernels[(("vec", 8),)].get_kernel_source(), order
        assert tuned.get_tuner_result(512).config == {"vec": 4}, order
        assert tuned.get_tuner_result(512, vec=8).config == {}, order


def test_a_bucket_tuned_under_another_key_function_is_not_reused():
    """Editing ``key=`` (``n // 64`` to ``n // 128``) reused the buckets tuned under the old
    one: bucket 1 tuned at n=64 served n=128 from the disk cache."""
    impl = tileauto.jit(out_idx=[-1])(scale)
    old = tileauto.autotune(configs=[{"vec": 4}, {"vec": 8}], key=lambda n: n // 64,
                            timer=by_vec, **FAST)(impl)  # fmt: skip
    old(64)
    assert not old.get_tuner_result(64).cache_hit
    new = tileauto.autotune(configs=[{"vec": 4}, {"vec": 8}], key=lambda n: n // 128,
                            timer=by_vec, **FAST)(impl)  # fmt: skip
    new(128)  # bucket 1 again, of another key function
    assert not new.get_tuner_result(128).cache_hit
    again = tileauto.autotune(configs=[{"vec": 4}, {"vec": 8}], key=lambda n: n // 64,
                              timer=by_vec, **FAST)(impl)  # fmt: skip
    again(100)  # the first key function's bucket 1: its entry
    assert again.get_tuner_result(100).cache_hit


def test_a_call_missing_a_problem_argument_is_refused_before_anything_compiles():
    tuned = tileauto.autotune(configs=[{"vec": 4}, {"vec": 8}], **FAST)(
        tileauto.jit(out_idx=[-1])(scale)
    )
    with pytest.raises(TypeError, match=r"scale\(n: 'int'.*missing a required argument: 'n'"):
        tuned(vec=4)
    assert tuned.results == {}


def test_an_error_inside_a_configs_callable_is_the_users_own():
    def space(n):
        return [{"vec": v} for v in range(None)]  # a bug of the user's

    tuned = tileauto.autotune(configs=space, **FAST)(tileauto.jit(out_idx=[-1])(scale))
    with pytest.raises(TypeError, match="'NoneType' object cannot be interpreted"):
        tuned(512)
    with pytest.raises(
        tileauto.ConfigSpaceError, match=r"cannot take the kernel's arguments \(512"
    ):
        tileauto.autotune(configs=lambda m, k: [{"vec": 4}], **FAST)(
            tileauto.jit(out_idx=[-1])(scale)
        )(512)


def test_from_kernel_of_a_jit_kernel_tunes_a_product_or_a_callable_space():
    kernel = tileauto.jit(out_idx=[-1])(scale)(1024, vec=16)
    for configs in (
        [{"vec": 4}, {"vec": 8}],
        tileauto.space.product(vec=[4, 8]),
        lambda n: [{"vec": 4}, {"vec": 8}],
    ):
        result = (
            tileauto.AutoTuner.from_kernel(kernel, configs)
            .set_profile_args(timer=by_vec_or_fixed, warmup_iters=1, rep_iters=3)
            .run()
        )
        assert result.config == {"vec": 8} and len(result.trials) == 2, configs


def test_disable_autotune_uses_the_defaults(monkeypatch):
    monkeypatch.setenv("TILEAUTO_DISABLE_AUTOTUNE", "1")
    tuned = tileauto.autotune(configs=[{"vec": 4}, {"vec": 16}], **FAST)(
        tileauto.jit(out_idx=[-1])(scale)
    )
    monkeypatch.setattr("tileauto.api.tune._said", set())
    with pytest.warns(RuntimeWarning, match="autotuning is disabled"):
        kernel = tuned(512)
    assert kernel.config["vec"] == 8
    assert tuned.results == {}


def test_builder_from_jit_kernel_and_from_plain_factory():
    result = (
        tileauto.AutoTuner.from_kernel(scale_jit(1024), [{"vec": 4}, {"vec": 8}])
        .set_compile_args(out_idx=[-1], target="llvm")
        .set_profile_args(warmup=1, rep=4, timer=by_vec)
        .run(verbose=False)
    )
    assert result.config == {"vec": 8}
    assert result.latency == pytest.approx(1.0)
    assert result.kernel.config["vec"] == 8

    def kernel(vec=8):
        return scale(256, vec=vec)

    result = (
        tileauto.AutoTuner.from_kernel(kernel, [{"vec": 4}, {"vec": 16}])
        .set_compile_args(out_idx=[-1])
        .set_profile_args(warmup=1, rep=3, timer=by_vec)
        .run(verbose=False)
    )
    assert result.config == {"vec": 4}
    assert result.default_trial.ok and result.speedup == pytest.approx(0.5)


def test_each_supply_type_is_seeded_and_reproducible(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEAUTO_AUTO_TUNING_DISABLE_CACHE", "1")
    sums = {}
    for supply in TensorSupplyType:
        out = tmp_path / f"{supply.name}.txt"
        for _ in range(2):  # the same seed gives the same data in a fresh run
            tileauto.AutoTuner.from_kernel(scale_jit(64), [{"vec": 4}]).set_profile_args(
                warmup=0, rep=2, supply_type=supply, manual_check_prog=_record(out)
            ).run(verbose=False)
        values = out.read_text().split()
        assert len(values) == 4 and len(set(values)) == 1, (supply, values)
        sums[supply] = float(values[0])
    assert sums[TensorSupplyType.Zero] == 0.0
    assert sums[TensorSupplyType.One] == 2.0 * 64
    assert (
        len(
            {
                sums[s]
                for s in (TensorSupplyType.Auto, TensorSupplyType.Uniform, TensorSupplyType.Integer)
            }
        )
        == 3
    )


def _record(path):
    """A check that runs in the run worker, so it reports through a file."""

    def check(results, reference):
        torch.testing.assert_close(results[0], reference[0])
        with open(path, "a") as f:
            f.write(f"{float(results[0].sum())!r}\n")

    return check


def test_supply_prog_and_captured_inputs_are_used_and_left_untouched(tmp_path):
    a = torch.arange(32, dtype=torch.float32)
    original = a.clone()
    out = tmp_path / "seen.pt"

    def check(results, reference):
        torch.save(results[0].clone(), out)

    with tileauto.set_autotune_inputs(a):
        tileauto.AutoTuner.from_kernel(scale_jit(32), [{"vec": 4}]).set_profile_args(
            warmup=0, rep=2, manual_check_prog=check
        ).run(verbose=False)
    torch.testing.assert_close(torch.load(out), original * 2)
    assert torch.equal(a, original)

    def supply(params):
        assert [p.name for p in params] == ["A"]
        return [torch.full((32,), 3.0)]

    tileauto.AutoTuner.from_kernel(scale_jit(32), [{"vec": 8}]).set_profile_args(
        warmup=0, rep=2, supply_prog=supply, manual_check_prog=check
    ).run(verbose=False)
    torch.testing.assert_close(torch.load(out), torch.full((32,), 6.0))


def test_symbolic_shapes_without_inputs_ask_for_inputs():
    from tvm import te

    def dyn(vec=4):
        n = te.var("n")
        A = te.placeholder((n,), "float32", name="A")
        return te.create_prim_func([A, te.compute((n,), lambda i: A[i] + 1, name="B")])

    with pytest.raises(tileauto.InputSupplyError, match="set_autotune_inputs"):
        tileauto.AutoTuner.from_kernel(dyn, [{"vec": 4}]).set_compile_args(out_idx=[-1]).run(**FAST)
    with tileauto.set_autotune_inputs(torch.randn(10)):
        result = (
            tileauto.AutoTuner.from_kernel(dyn, [{"vec": 4}])
            .set_compile_args(out_idx=[-1])
            .run(**FAST)
        )
    assert result.trials[0].ok


def test_check_paths():
    space = [{"vec": 4}, {"mode": "wrong"}]

    def run(**profile):
        return (
            tileauto.AutoTuner.from_kernel(scale_jit(256), space)
            .set_profile_args(warmup=0, rep=2, **profile)
            .run(verbose=False)
        )

    # ref_prog returning tensors
    r = run(ref_prog=lambda a: a * 2)
    assert [t.status for t in r.trials] == [TrialStatus.OK, TrialStatus.MISMATCH]
    assert "worst abs error" in r.trials[1].error
    # ref_prog taking inputs and outputs, returning a bool
    r = run(ref_prog=lambda a, b: bool(torch.allclose(b, a * 2)))
    assert [t.status for t in r.trials] == [TrialStatus.OK, TrialStatus.MISMATCH]
    assert "returned False" in r.trials[1].error

    # ref_prog raising
    def raising(a, b):
        torch.testing.assert_close(b, a * 2)
        return True

    r = run(ref_prog=raising)
    assert r.trials[1].status is TrialStatus.MISMATCH and "ref_prog raised" in r.trials[1].error
    # manual_check_prog against the default config's outputs
    r = run(manual_check_prog=lambda results, ref: torch.testing.assert_close(results[0], ref[0]))
    assert (
        r.trials[1].status is TrialStatus.MISMATCH
        and "manual_check_prog raised" in r.trials[1].error
    )
    # no reference at all: the default config's outputs are the reference
    r = run()
    assert [t.status for t in r.trials] == [TrialStatus.OK, TrialStatus.MISMATCH]
    # skip_check lets the wrong kernel through
    r = run(skip_check=True)
    assert all(t.ok for t in r.trials)


def inplace_512(vec=8):
    return inplace_scale(512, vec)


def test_inplace_kernel_gets_its_own_copies_and_user_tensors_stay_untouched():
    a = torch.randn(512)
    b = torch.zeros(512)
    a0, b0 = a.clone(), b.clone()
    with tileauto.set_autotune_inputs(a, b):
        result = (
            tileauto.AutoTuner.from_kernel(inplace_512, [{"vec": 4}, {"vec": 8}, {"vec": 16}])
            .set_profile_args(warmup=2, rep=3)
            .run(verbose=False)
        )
    assert all(t.ok for t in result.trials), [t.reason for t in result.trials]
    assert any("writes into input 'A'" in n for n in result.trials[0].notes)
    assert torch.equal(a, a0) and torch.equal(b, b0)


def test_key_bucket_is_shared_through_the_disk_cache_across_processes(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    here = Path(__file__).resolve().parent
    script = (
        f"import sys; sys.path.insert(0, {str(here)!r})\n"
        "import tileauto\n"
        "from tileauto.language import next_power_of_2\n"
        "from tune_kernels import scale\n"
        "impl = tileauto.jit(out_idx=[-1])(scale)\n"
        "tuned = tileauto.autotune(configs=[{'vec': 4}, {'vec': 16}], warmup=1, rep=3, verbose=False,\n"
        "    key=lambda n, **_: next_power_of_2(n))(impl)\n"
        "kernel = tuned(int(sys.argv[1]))\n"
        "r = tuned.get_tuner_result(int(sys.argv[1]))\n"
        "print(r.cache_hit, kernel.params[0].shape[0], r.config['vec'])\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": f"{here.parents[1]}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
    }
    first = subprocess.run(
        [sys.executable, "-c", script, "1000"], env=env, capture_output=True, text=True, timeout=300
    )
    assert first.returncode == 0, first.stderr[-2000:]
    second = subprocess.run(
        [sys.executable, "-c", script, "1020"], env=env, capture_output=True, text=True, timeout=300
    )
    assert second.returncode == 0, second.stderr[-2000:]
    hit, n, vec = second.stdout.split()
    assert first.stdout.split()[0] == "False"
    assert hit == "True" and n == "1020" and vec == first.stdout.split()[2]


def test_random_search_measures_only_its_budget_and_reports_the_rest():
    from tileauto.search import RandomSearch

    space = [{"vec": v} for v in (4, 16, 32)] + [{"vec": v, "repeat": 2} for v in (4, 16)]
    result = (
        tileauto.AutoTuner.from_kernel(scale_jit(1024), space)
        .set_profile_args(warmup=1, rep=3, search=RandomSearch(budget=2, seed=0), timer=by_vec)
        .run(verbose=False)
    )
    statuses = [t.status for t in result.trials]
    assert statuses.count(TrialStatus.NOT_RUN) == 3
    assert all(
        "RandomSearch(budget=2" in t.error for t in result.trials if t.status is TrialStatus.NOT_RUN
    )
    ran = [t for t in result.trials if t.ok]
    assert len(ran) == 2 and result.config in [t.config for t in ran]
    assert result.default_trial.ok
    with pytest.raises(TypeError, match="SearchStrategy"):
        tileauto.autotune(configs=space, search="bayesian")


# -- Triton's prune_configs_by through the decorator ----------------------------------------------
def test_pruning_to_one_config_still_gives_a_tuner_result():
    tuned = tileauto.autotune(
        configs=[{"vec": 4}, {"vec": 8}, {"vec": 16}],
        prune_configs_by={"perf_model": lambda n, vec, **rest: -vec, "top_k": 1},
        timer=by_vec,
        **FAST,
    )(scale_jit)
    kernel = tuned(256)
    result = tuned.get_tuner_result(256)  # Triton's best_config
    assert result is not None and result.config == {"vec": 16} and result.kernel is kernel
    assert result.trials == () and math.isnan(result.latency)  # compiled, never benchmarked


def test_a_result_never_timed_saves_strict_json_and_loads_its_nan_back(tmp_path):
    """``latency.json`` said ``"latency_ms": NaN``, which jq and JavaScript refuse."""
    import json

    tuned = tileauto.autotune(
        configs=[{"vec": 4}, {"vec": 8}],
        prune_configs_by={"perf_model": lambda n, vec, **rest: -vec, "top_k": 1},
        timer=by_vec,
        **FAST,
    )(scale_jit)
    tuned(256)
    result = tuned.get_tuner_result(256)
    saved = result.save_to_disk(tmp_path / "saved")

    def refuse(name):
        raise ValueError(f"not strict JSON: {name}")

    latency = json.loads((saved / "latency.json").read_text(), parse_constant=refuse)
    assert latency["latency_ms"] is None
    loaded = tileauto.AutotuneResult.load_from_disk(saved)
    assert math.isnan(loaded.latency) and loaded.config == {"vec": 8}


def test_prune_functions_run_once_per_tuning_key():
    calls = {"early": 0, "model": 0}

    def early(configs, named_args, **kwargs):
        calls["early"] += 1
        return configs

    def model(n, vec, **rest):
        calls["model"] += 1
        return vec

    tuned = tileauto.autotune(
        configs=[{"vec": 4}, {"vec": 8}, {"vec": 16}],
        prune_configs_by={"early_config_prune": early, "perf_model": model, "top_k": 2},
        key=lambda n, **_: next_power_of_2(n),
        timer=by_vec,
        **FAST,
    )(scale_jit)
    assert tuned(1000).config["vec"] == 8  # the model kept 4 and 8; the timer prefers 8
    assert calls == {"early": 1, "model": 3}
    assert tuned(1020).config["vec"] == 8  # the bucket's tuning is reused: nothing pruned again
    assert calls == {"early": 1, "model": 3}
    assert sorted(t.config["vec"] for t in tuned.get_tuner_result(1000).trials) == [4, 8]


# -- key= buckets with check_new_shapes ----------------------------------------------------------
def whole_blocks_double(n, block=8):
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


def test_tuner_result_is_the_one_that_served_the_call_after_check_new_shapes():
    tuned = tileauto.autotune(
        configs=[{"block": 8}, {"block": 128}],
        key=lambda n: "one bucket",
        check_new_shapes=True,
        timer=big_blocks_win,
        **FAST,
    )(tileauto.jit(out_idx=[-1], target="llvm")(whole_blocks_double))
    assert tuned(1024).config == {"block": 128}
    fallback = tuned(1000)  # 128 leaves a tail unwritten at 1000: 1000 is tuned on its own
    result = tuned.get_tuner_result(1000)
    assert result.config == {"block": 8} and result.kernel is fallback
    assert tuned.get_tuner_result(1024).config == {"block": 128}  # the bucket's own result
    checked = tuned(2048)  # 128 passes its check at 2048
    result = tuned.get_tuner_result(2048)
    assert result.config == {"block": 128} and result.kernel is checked


def test_check_new_shapes_checks_the_bucket_config_without_pruning_again():
    calls = []

    def whole_blocks_only(configs, named_args, **kwargs):
        calls.append(named_args["n"])
        return [c for c in configs if named_args["n"] % c["block"] == 0]

    tuned = tileauto.autotune(
        configs=[{"block": 8}, {"block": 128}],
        key=lambda n: "one bucket",
        check_new_shapes=True,
        prune_configs_by={"early_config_prune": whole_blocks_only},
        timer=big_blocks_win,
        **FAST,
    )(tileauto.jit(out_idx=[-1], target="llvm")(whole_blocks_double))
    assert tuned(1024).config == {"block": 128}
    # the check of 128 at 1000 fails; 1000 is then tuned, and pruned, on its own
    assert tuned(1000).config == {"block": 8}
    assert calls == [1024, 1000]
