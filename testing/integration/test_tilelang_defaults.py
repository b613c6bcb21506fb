"""Default configs as TileLang writes them: ``block=None`` placeholders the configs fill,
tunables without defaults, configs with pass options of their own, and the variable that
turns tuning off, named as the user set it."""

from __future__ import annotations

import warnings

import pytest
import torch
from tvm import s_tir, te

import tileauto
from tileauto import TrialStatus
from tileauto.records import Validation
from tileauto.tune._ending import tuning_off_variable

N = 256


def scaled(n, block=None, fast=None):
    """TileLang's habit: ``=None`` defaults the configs fill; ``fast`` computes A*3 (wrong)."""
    A = te.placeholder((n,), "float32", name="A")
    B = te.compute((n,), lambda i: A[i] * (3.0 if fast else 2.0), name="B")
    sch = s_tir.Schedule(te.create_prim_func([A, B]))
    (i,) = sch.get_loops(sch.get_sblock("B"))
    sch.split(i, [None, block])  # block=None: no factor, the default does not compile
    return sch.mod["main"]


def tuned(factory, configs, **profile):
    return (
        tileauto.AutoTuner.from_kernel(factory, configs)
        .set_compile_args(out_idx=[-1], target="llvm")
        .set_profile_args(warmup=0, rep=2, **profile)
        .run(verbose=False)
    )


def test_a_none_default_the_configs_set_makes_the_first_config_the_reference():
    configs = [{"block": 16, "fast": False}, {"block": 64, "fast": True}]
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # the reference passed: nothing to say
        result = tuned(lambda block=None, fast=None: scaled(N, block, fast), configs)
    assert result.default_trial.config == configs[0] and result.default_trial.ok
    assert [t.status for t in result.trials] == [TrialStatus.OK, TrialStatus.MISMATCH]
    assert result.config == configs[0]  # not the wrong fast=True config, unchecked
    a = torch.randn(N)
    torch.testing.assert_close(result.kernel(a), a * 2)


def test_a_failing_default_without_ref_prog_is_said_once():
    def broken_default(block=7):
        if block == 7:
            raise ValueError("block=7 is not supported")
        return scaled(N, block)

    with pytest.warns(RuntimeWarning, match="could not be checked against anything") as said:
        result = tuned(broken_default, [{"block": 16}, {"block": 64}])
    assert sum("could not be checked" in str(w.message) for w in said) == 1
    message = next(str(w.message) for w in said if "could not be checked" in str(w.message))
    assert "the default config block=7 failed (compile_error: ValueError" in message
    assert not result.default_trial.ok
    assert all(t.ok and t.validation is Validation.SKIPPED for t in result.trials)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # with a ref_prog: checked, no warning
        checked = tuned(broken_default, [{"block": 16}], ref_prog=lambda a: a * 2)
    assert checked.trials[0].validation is Validation.REFERENCE


def test_a_config_that_leaves_out_a_required_tunable_is_refused():
    def no_defaults(block, unroll):
        return scaled(N, block)

    with pytest.raises(TypeError, match=r"configs\[1\] = \{'block': 32\} does not set 'unroll'"):
        tuned(no_defaults, [{"block": 16, "unroll": True}, {"block": 32}])


def test_a_config_without_pass_configs_has_no_such_key():
    @tileauto.autotune(
        configs=[{"block": 16}, {"block": 64, "pass_configs": {"tirx.disable_vectorize": True}}],
        warmup=0,
        rep=2,
        verbose=False,
    )
    @tileauto.jit(out_idx=[-1], target="llvm")
    def add(n, block=64):
        return scaled(n, block)

    kernel = add(N)
    result = add.get_tuner_result(N)
    assert [t.config for t in result.trials] == [
        {"block": 16},
        {"block": 64, "pass_configs": {"tirx.disable_vectorize": True}},
    ]
    assert kernel.config == result.config
    again = add(N, **{k: v for k, v in result.config.items() if k != "pass_configs"})
    a = torch.randn(N)
    torch.testing.assert_close(again(a), a * 2)  # the tuned config given back: no TypeError


@pytest.mark.parametrize(
    ("environ", "named"),
    [
        ({"DISABLE_AUTOTUNE": "1"}, "DISABLE_AUTOTUNE=1"),
        (
            {"TILEAUTO_DISABLE_AUTOTUNE": "true", "DISABLE_AUTOTUNE": "1"},
            "TILEAUTO_DISABLE_AUTOTUNE=true",
        ),
        ({"TILEAUTO_DISABLE_AUTOTUNE": "", "DISABLE_AUTOTUNE": "yes"}, "DISABLE_AUTOTUNE=yes"),
    ],
)
def test_the_variable_that_turns_tuning_off_is_named_as_set(environ, named):
    assert tuning_off_variable(environ) == named


def test_disable_autotune_alias_is_named_in_its_warnings(monkeypatch):
    monkeypatch.setenv("DISABLE_AUTOTUNE", "1")
    monkeypatch.setattr("tileauto.api.tune._said", set())
    with pytest.warns(RuntimeWarning, match=r"autotuning is disabled \(DISABLE_AUTOTUNE=1\)"):
        tuned(lambda block=16: scaled(N, block), [{"block": 32}])
    with pytest.raises(tileauto.NoValidConfigError, match=r"tuning is off \(DISABLE_AUTOTUNE=1\)"):
        tuned(lambda block=16: scaled(N, block), [{"block": 32}], ref_prog=lambda a: a * 3)

    @tileauto.autotune(configs=[{"block": 32}], warmup=0, rep=2, verbose=False)
    @tileauto.jit(out_idx=[-1], target="llvm")
    def add(n, block=16):
        return scaled(n, block)

    with pytest.warns(RuntimeWarning) as said:
        add(N)
    messages = [str(w.message) for w in said]
    assert any("(DISABLE_AUTOTUNE=1): compiling the default config" in m for m in messages)
    assert not any("TILEAUTO_DISABLE_AUTOTUNE" in m for m in messages), messages
