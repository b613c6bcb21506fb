"""The kernel cache cleared while a tuning loads its kernels from it.

A tuning takes the configs compiled before from ``kernels/`` (any tuning of the same factory,
call and target compiled them). ``tileauto cache clear``, ``verify --delete`` or another
process's size cap may delete those entries while it runs: the tuning still runs every config
it loaded, stores no failure of its own making, and returns a winner that loads.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import torch
from tune_kernels import scale

import tileauto
from tileauto.cache import catalog

CONFIGS = [{"vec": v} for v in (4, 8, 16, 32)]


def scale_1024(vec):
    return scale(1024, vec=vec)


def _tune(on_trial=None):
    return (
        tileauto.AutoTuner.from_kernel(scale_1024, CONFIGS)
        .set_compile_args(out_idx=[-1], target="llvm")
        .set_profile_args(warmup=0, rep=2, on_trial=on_trial)
        .run(verbose=False)
    )


def test_kernels_cleared_while_a_tuning_loads_them_cost_it_nothing():
    root = Path(os.environ["TILEAUTO_CACHE_DIR"])
    _tune()  # compiles every config into kernels/
    catalog.clear(root, kinds=("autotuner",))  # the tuned entry and measurements go: tuned again
    shutil.rmtree(root / "measurements", ignore_errors=True)
    cleared = []

    def clear_kernels(trial):  # after the first trial: the loaded kernels' entries go
        if not cleared:
            cleared.append(catalog.clear(root, kinds=("kernels",)))

    result = _tune(on_trial=clear_kernels)
    assert cleared and not list((root / "kernels").glob("[0-9a-f]*"))  # they did go
    assert all(t.ok for t in result.trials), [(t.config, t.reason) for t in result.trials]
    a = torch.randn(1024)
    torch.testing.assert_close(result.kernel(a), a * 2)
    third = _tune()  # what the second stored: no failure of its making
    assert all(t.ok for t in third.trials)
