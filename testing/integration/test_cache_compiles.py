"""Tunings that differ only in their checks or their timing share compiles, real LLVM ones.

A config's compile is keyed by what it depends on (the factory, the call, the config, the
compile arguments, the target), so a second tuning of the space with another reference,
tolerance, warm-up or budget compiles nothing. Its measurements are taken too when the first
tuning's checks were at least as strict, and its trials say so. Compiles run in threads of
this process (``TILEAUTO_COMPILE_ISOLATION=thread``), so ``COMPILES`` counts every one.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from cache_kernels import SCALE_ADD_CONFIGS, ref_scale_add, tune_scale_add

from tileauto.jit import compiler

pytestmark = pytest.mark.timeout(600)
EARLIER = "measured by an earlier tuning checked against a reference program"


@pytest.fixture(autouse=True)
def compiles_here(monkeypatch):
    monkeypatch.setenv("TILEAUTO_COMPILE_ISOLATION", "thread")


def compiled_during(tune) -> tuple[object, int]:
    before = compiler.COMPILES.count
    result = tune()
    return result, compiler.COMPILES.count - before


def kernel_entries(cache: Path) -> int:
    folder = cache / "kernels"
    return sum(not p.name.startswith(".") for p in folder.iterdir()) if folder.is_dir() else 0


def borrowed(result) -> list[dict]:
    return [t.config for t in result.trials if any(EARLIER in n for n in t.notes)]


def check(result) -> None:
    a = torch.rand(1024)
    torch.testing.assert_close(result.kernel(a), ref_scale_add(a))


def test_a_tuning_without_the_reference_compiles_nothing_but_checks_again(tileauto_env):
    first, n = compiled_during(lambda: tune_scale_add(ref_prog=ref_scale_add))
    assert n == len(SCALE_ADD_CONFIGS)  # the default config (block 16) is one of them
    assert kernel_entries(tileauto_env) == n
    second, again = compiled_during(lambda: tune_scale_add())
    assert again == 0
    assert not second.cache_hit and second.key != first.key  # another tuning, not a hit
    # a pass against the ref_prog is none against the default config's outputs, which this
    # tuning compares with (a config unlike the default passed unmeasured and won)
    assert borrowed(second) == []
    assert all(t.ok and t.run_s for t in second.trials)
    check(second)


def test_a_tuning_timed_otherwise_compiles_nothing_but_measures_again(tileauto_env):
    first, n = compiled_during(lambda: tune_scale_add(ref_prog=ref_scale_add))
    second, again = compiled_during(lambda: tune_scale_add(ref_prog=ref_scale_add, rep=4))
    assert n > 0 and again == 0
    assert borrowed(second) == []  # another timing: every config is timed again
    assert all(t.ok and t.run_s for t in second.trials)
    check(second)


def test_looser_earlier_checks_lend_compiles_not_measurements(tileauto_env):
    first, n = compiled_during(lambda: tune_scale_add(skip_check=True))
    second, again = compiled_during(lambda: tune_scale_add(ref_prog=ref_scale_add))
    assert n > 0 and again == 0
    assert all(not t.notes or "earlier tuning" not in " ".join(t.notes) for t in second.trials)
    assert [t.validation.value for t in second.trials] == ["reference"] * len(second.trials)
    check(second)


def test_with_the_kernel_cache_off_every_config_compiles(tileauto_env, monkeypatch):
    tune_scale_add(ref_prog=ref_scale_add)
    monkeypatch.setenv("TILEAUTO_DISABLE_CACHE", "1")
    _, again = compiled_during(lambda: tune_scale_add())
    assert again == len(SCALE_ADD_CONFIGS)


def test_a_damaged_kernel_entry_is_compiled_again_with_a_warning(tileauto_env):
    tune_scale_add(ref_prog=ref_scale_add)
    libraries = sorted((tileauto_env / "kernels").glob("*/kernel/kernel.so"))
    libraries[0].write_bytes(libraries[0].read_bytes()[:100])  # truncated
    with pytest.warns(RuntimeWarning, match="does not match its sha256"):
        second, again = compiled_during(lambda: tune_scale_add(rep=4))
    assert again == 1
    check(second)
