"""Spaces through the real tuner: stacked ``@autotune.param``, a lazy product, the guided default.

Real LLVM compiles of the test kernel (``scale``); latencies come from a scripted timer, a
function of the config, so the winner is known and the tests do not depend on the machine.
"""

from __future__ import annotations

import math
import platform
import types

import pytest
from tune_kernels import scale

import tileauto
from tileauto import TrialStatus
from tileauto.errors import ConfigSpaceError
from tileauto.space import ProductSpace, product

FAST = {"warmup_iters": 1, "rep_iters": 3, "verbose": False}


def valley(func, args, *, warmup, rep, config, device):
    """A scripted timer: one smooth valley, fastest at vec=8, repeat=3 (1 ms)."""
    func(*args)
    vec, repeat = config.get("vec", 8), config.get("repeat", 1)
    ms = 1.0 + abs(math.log2(vec) - 3) + abs(repeat - 3) / 4
    return [ms * 1e6] * rep


def slow_scale(n: int, vec: int = 8, repeat: int = 1):
    return scale(n, vec, "slow", repeat)


def test_stacked_params_are_the_product_of_their_values_under_the_constraints():
    @tileauto.autotune(timer=valley, **FAST)
    @tileauto.autotune.param("vec", [4, 8, 16])
    @tileauto.autotune.param("repeat", [1, 3, 5])
    @tileauto.autotune.constraint("vec * repeat <= 40")
    @tileauto.jit(out_idx=[-1])
    def kernel(n: int, vec: int = 8, repeat: int = 1):
        return slow_scale(n, vec, repeat)

    assert isinstance(kernel.configs, ProductSpace)
    expected = product(vec=[4, 8, 16], repeat=[1, 3, 5], constraints=["vec * repeat <= 40"])
    assert list(kernel.configs) == list(expected)  # the top decorator varies slowest
    assert kernel.configs.pruned == {"vec * repeat <= 40": 2}  # (16, 3) and (16, 5)
    kernel(1024)
    result = kernel.get_tuner_result(1024)
    assert result.config == {"vec": 8, "repeat": 3}
    assert [t.index for t in result.trials] == list(range(7))
    assert all(t.ok for t in result.trials)
    table = result.table()
    assert "vec=8, repeat=3" in table


def test_tied_stacked_params_and_the_errors_of_a_stack():
    @tileauto.autotune(timer=valley, **FAST)
    @tileauto.autotune.param("vec, repeat", [(4, 1), (8, 3)])
    @tileauto.jit(out_idx=[-1])
    def tied(n: int, vec: int = 8, repeat: int = 1):
        return slow_scale(n, vec, repeat)

    assert list(tied.configs) == [{"vec": 4, "repeat": 1}, {"vec": 8, "repeat": 3}]

    impl = tileauto.jit(out_idx=[-1])(slow_scale)
    stacked = tileauto.autotune.param("vec", [4, 8])(impl)
    with pytest.raises(TypeError, match=r"put @tileauto.autotune\(...\) above"):
        stacked(1024)
    with pytest.raises(ConfigSpaceError, match="not both"):
        tileauto.autotune(configs=[{"vec": 4}])(stacked)
    with pytest.raises(ConfigSpaceError, match="declared twice"):
        tileauto.autotune.param("vec", [16])(stacked)
    with pytest.raises(ConfigSpaceError, match="repeats a value"):
        tileauto.autotune.param("vec", [4, 4])
    unknown = tileauto.autotune(**FAST)(tileauto.autotune.param("tile", [1, 2])(impl))
    with pytest.raises(ConfigSpaceError, match=r"\['tile'\], which is not a parameter"):
        unknown(1024)  # before anything compiles


def test_a_budgeted_product_measures_its_budget_and_a_later_tuning_reuses_the_measurements():
    space = product(vec=[4, 8, 16, 32], repeat=[1, 2, 3], constraints=["vec * repeat <= 48"])
    impl = tileauto.jit(out_idx=[-1])(slow_scale)
    first = tileauto.autotune(configs=space, search="random", max_trials=4, timer=valley, **FAST)(
        impl
    )
    first(2048)
    result = first.get_tuner_result(2048)
    measured = [t for t in result.trials if t.status is not TrialStatus.NOT_RUN]
    never = [t for t in result.trials if t.status is TrialStatus.NOT_RUN]
    assert len(result.trials) == len(space) == 10
    assert len(measured) == 4 and len(never) == 6
    assert all(t.error.startswith("never tried: search stopped: max_trials") for t in never)
    assert "6 config(s) of the space never tried (not failures; not listed)" in result.table()

    # the same problem searched exhaustively: a new tuning entry, the 4 measurements reused
    again = tileauto.autotune(configs=space, search="exhaustive", timer=valley, **FAST)(impl)
    again(2048)
    full = again.get_tuner_result(2048)
    assert not full.cache_hit and full.config == {"vec": 8, "repeat": 3}
    reused = {t.index: t.compile_s for t in measured}
    for t in full.trials:
        if t.index in reused:  # measured by the first tuning: not compiled again
            assert t.compile_s == reused[t.index]
    assert all(t.ok for t in full.trials)


def test_a_large_product_is_never_expanded_and_counts_its_untried_configs():
    # 4 x 4,000 = 16,000 configs: above the listing limit, so the untried are counted
    space = product(vec=[4, 8, 16, 32], repeat=list(range(1, 4001)))
    impl = tileauto.jit(out_idx=[-1])(slow_scale)
    tuned = tileauto.autotune(configs=space, max_trials=6, timer=valley, **FAST)(impl)
    tuned(256)
    result = tuned.get_tuner_result(256)
    assert len(result.trials) == 6  # the measured configs only, each with its index
    assert all(0 <= t.index < len(space) and t.config == space[t.index] for t in result.trials)
    best = min((t for t in result.trials if t.ok), key=lambda t: t.latency_ms)
    assert result.config == best.config
    search = result.extra["search"]
    assert search["stop_reason"] == "max_trials" and search["measured"] == 6
    assert search["never_tried"] == len(space) - 6 == 15_994
    assert (
        f"{15_994:,} config(s) of the space never tried"
        in tuned.get_tuner_result(256).log_path.read_text()
    )
    # (the re-run hits the cache entry, keyed by the product's description)
    again = tileauto.autotune(configs=space, max_trials=6, timer=valley, **FAST)(impl)
    again(256)
    hit = again.get_tuner_result(256)
    assert hit.cache_hit and hit.extra["search"] == search  # stored with the entry


def test_a_call_fixing_a_tunable_tunes_the_rest_of_a_product_under_the_calls_value():
    """The product was expanded into dicts (minutes and gigabytes for millions of configs),
    and its constraint read over the product's vec values: repeat=5 was tuned with vec=16."""
    space = product(vec=[4, 8, 16], repeat=[1, 3, 5], constraints=["vec * repeat <= 40"])
    tuned = tileauto.autotune(configs=space, timer=valley, **FAST)(
        tileauto.jit(out_idx=[-1])(slow_scale)
    )
    tuned(256, vec=16)
    result = tuned.get_tuner_result(256, vec=16)
    assert [t.config for t in result.trials] == [{"repeat": 1}]  # 16 * 3 > 40
    assert result.config == {"repeat": 1} and all(t.ok for t in result.trials)
    assert "<16 x float>" in result.kernel.get_kernel_source()


def test_a_default_measured_after_the_budget_ran_out_counts_as_measured():
    """A budget spent before the first batch (max_seconds tiny): the default config, a config
    of the space, is measured anyway (the reference), and was counted as never tried."""
    space = product(vec=[4, 8, 16], repeat=[1, 3])  # the default (8, 1) is one of them
    tuned = tileauto.autotune(configs=space, max_seconds=1e-9, timer=valley, **FAST)(
        tileauto.jit(out_idx=[-1])(slow_scale)
    )
    tuned(256)
    result = tuned.get_tuner_result(256)
    search = result.extra["search"]
    ok = [t for t in result.trials if t.ok]
    assert [t.config for t in ok] == [{"vec": 8, "repeat": 1}]
    assert (search["measured"], search["never_tried"]) == (1, 5), search
    assert all("1 measured, 5 never tried" in t.error for t in result.trials if not t.ok)


def test_auto_is_the_default_and_guides_a_space_above_its_exhaustive_size():
    pytest.importorskip("sklearn", reason="the guided search needs the search extra")
    from tileauto.search.resolve import AUTO_EXHAUSTIVE_MAX

    space = product(vec=[2, 4, 8, 16, 32, 64], repeat=list(range(1, 61)))  # 360 configs
    assert len(space) > AUTO_EXHAUSTIVE_MAX
    seen = []
    tuned = tileauto.autotune(
        configs=space, max_trials=40, timer=valley, on_trial=seen.append, **FAST
    )(tileauto.jit(out_idx=[-1])(slow_scale))
    tuned(512)
    result = tuned.get_tuner_result(512)
    measured = [t for t in result.trials if t.status is not TrialStatus.NOT_RUN]
    assert len(measured) == 40 and len({t.index for t in measured}) == 40
    never = [t for t in result.trials if t.status is TrialStatus.NOT_RUN]
    assert never and "auto(budget=None)" in never[0].error
    assert result.config == min((t for t in measured if t.ok), key=lambda t: t.latency_ms).config
    # 40 of 360 configs: the guided search finds the valley floor's neighbourhood
    assert result.latency <= 1.5  # ms, scripted: the floor is 1.0, a random config ~3.6


def wide_scale(
    n: int, vec: int = 8, repeat: int = 1, a0=0, a1=0, a2=0, a3=0, a4=0, a5=0, a6=0, a7=0,
    a8=0, a9=0, a10=0,
):  # fmt: skip
    """``scale`` with eleven parameters it ignores: a product of 4 x 10^12 configs."""
    return scale(n, vec, "slow", repeat)


def test_exhaustive_under_max_trials_measures_the_first_configs_of_a_huge_product():
    space = product(
        vec=[4, 8, 16, 32], **{f"a{k}": list(range(10)) for k in range(11)}, repeat=list(range(10))
    )
    assert len(space) == 4 * 10**12
    impl = tileauto.jit(out_idx=[-1])(wide_scale)
    tuned = tileauto.autotune(
        configs=space, search="exhaustive", max_trials=5, timer=valley, **FAST
    )(impl)
    tuned(256)
    result = tuned.get_tuner_result(256)
    default = space.find({"vec": 8, "repeat": 1, **{f"a{k}": 0 for k in range(11)}})
    # the default config is measured first (the reference) and is one of the five
    assert sorted(t.index for t in result.trials) == [0, 1, 2, 3, default]
    assert all(t.ok for t in result.trials) and result.extra["search"]["measured"] == 5
    assert result.extra["search"]["never_tried"] == len(space) - 5


def far_valley(func, args, *, warmup, rep, config, device):
    """A scripted timer whose floor (1 ms at vec=32, repeat=40) is far from the default."""
    func(*args)
    vec, repeat = config.get("vec", 8), config.get("repeat", 1)
    ms = 1.0 + abs(math.log2(vec) - 5) + abs(repeat - 40) / 8
    return [ms * 1e6] * rep


def test_a_tuning_of_the_same_kernel_elsewhere_in_the_cache_is_the_prior():
    pytest.importorskip("sklearn", reason="the guided search needs the search extra")
    from tileauto.search import AutoSearch

    space = product(vec=[2, 4, 8, 16, 32, 64], repeat=list(range(1, 61)))  # 360 configs

    def tune(n, trials, search="auto"):
        tuned = tileauto.autotune(
            configs=space, max_trials=trials, timer=far_valley, search=search, **FAST
        )(tileauto.jit(out_idx=[-1])(slow_scale))
        tuned(n)
        return tuned.get_tuner_result(n)

    first = tune(512, 40)  # another problem size: another entry of the same kernel
    assert first.latency < 2.0
    # 8 trials (the default and 7 proposals) of a 360-config space: with the first tuning as
    # its prior, the guided search starts where the first one ended
    helped = tune(1024, 8)
    alone = tune(2048, 8, search=AutoSearch(prior=None))
    assert helped.latency <= first.latency < alone.latency


def shape_valley(func, args, *, warmup, rep, config, device):
    """A scripted timer whose floor depends on the problem size: at n=512, vec=32 and
    repeat=40; at every other size, vec=2 and repeat=5."""
    func(*args)
    best_vec, best_repeat = (32, 40) if args[0].numel() == 512 else (2, 5)
    vec, repeat = config.get("vec", 8), config.get("repeat", 1)
    ms = 1.0 + abs(math.log2(vec / best_vec)) + abs(repeat - best_repeat) / 8
    return [ms * 1e6] * rep


@pytest.mark.skipif(
    platform.machine() not in ("x86_64", "AMD64"),
    reason="the other device is this kernel compiled for a generic x86-64 CPU",
)
def test_the_same_problem_on_another_target_leads_the_first_batch_among_other_sizes(
    tileauto_env, tmp_path, monkeypatch
):
    """The cache prior: the same call tuned for another CPU, and two other sizes tuned here
    since, that agree with each other and not with it. The first batch tries the same
    problem's best, which the other sizes' consensus would outvote. The same holds on another
    machine, from what `tileauto cache prior` exported (its files name the call's family)."""
    pytest.importorskip("sklearn", reason="the guided search needs the search extra")
    from tileauto.cache.priors import export_prior
    from tileauto.search import GuidedSearch, RecordedSpace

    space = product(vec=[2, 4, 8, 16, 32, 64], repeat=[1, 5, 10, 20, 40, 60])  # 36 configs

    def tune(n, trials=None, target="auto", search="auto"):
        tuned = tileauto.autotune(
            configs=space, max_trials=trials, timer=shape_valley, search=search, **FAST
        )(tileauto.jit(out_idx=[-1], target=target)(slow_scale))
        tuned(n)
        return tuned.get_tuner_result(n)

    elsewhere = tune(512, target={"kind": "llvm", "mcpu": "x86-64"})  # every config measured
    assert elsewhere.config == {"vec": 32, "repeat": 40}
    for n in (1024, 2048):  # other sizes here, since: their floor is elsewhere
        assert tune(n).config == {"vec": 2, "repeat": 5}
    here = tune(512, trials=4, search=GuidedSearch())
    assert here.config == {"vec": 32, "repeat": 40} and here.latency == 1.0

    exported = export_prior(tileauto_env, "slow_scale", tmp_path / "priors")
    families = {RecordedSpace.load(p).family for p in exported}
    assert len(exported) == 4 and len(families) == 3 and "" not in families  # 512 twice
    monkeypatch.setenv("TILEAUTO_CACHE_DIR", str(tmp_path / "another machine"))
    there = tune(512, trials=4, search=GuidedSearch(prior=str(tmp_path / "priors")))
    assert there.config == {"vec": 32, "repeat": 40}  # its family's records, apart


def test_a_kernel_of_the_same_name_in_another_module_is_not_the_prior(tileauto_env):
    """Two files' ``slow_scale`` are two kernels: one's tunings never steer the other's."""
    pytest.importorskip("sklearn", reason="the guided search needs the search extra")
    from tileauto.cache.priors import kernel_entries
    from tileauto.search import AutoSearch

    other = types.FunctionType(
        slow_scale.__code__, {**slow_scale.__globals__, "__name__": "pkg.other_kernels"},
        "slow_scale", slow_scale.__defaults__,
    )  # fmt: skip
    other.__qualname__ = slow_scale.__qualname__
    space = product(vec=[2, 4, 8, 16, 32, 64], repeat=list(range(1, 61)))  # 360 configs

    def tune(factory, n, trials, search="auto"):
        tuned = tileauto.autotune(
            configs=space, max_trials=trials, timer=far_valley, search=search, **FAST
        )(tileauto.jit(out_idx=[-1])(factory))
        tuned(n)
        return tuned.get_tuner_result(n)

    first = tune(other, 512, 40)  # the far valley found, by the other module's kernel
    assert first.latency < 2.0
    mine = tune(slow_scale, 1024, 8)
    alone = tune(slow_scale, 2048, 8, search=AutoSearch(prior=None))
    assert mine.latency == alone.latency > first.latency  # the other's tuning was no prior
    entries = kernel_entries(tileauto_env, "slow_scale")
    assert sorted(e.manifest["module"] for e in entries) == [
        "other_kernels", "test_search_spaces", "test_search_spaces"
    ]  # fmt: skip
    assert len(kernel_entries(tileauto_env, "slow_scale", "other_kernels")) == 1
