"""Editing what a factory reaches is a miss with the new, correct kernel (issue 14, point 1).

Each version of a small TE factory is written to its own folder and imported fresh, as a new
process started after the edit would see it; the disk cache (``TILEAUTO_CACHE_DIR``, one per
test) is shared by the versions. ``OFFSET`` and ``helper`` are read only inside the lambda of
``te.compute``, which is where a stale key used to hand back the old kernel.
"""

from __future__ import annotations

import importlib
import itertools
import logging
import sys
import warnings
from pathlib import Path

import pytest
import torch

import tileauto
from tileauto.cache import key as cache_key

pytestmark = pytest.mark.timeout(300)
_folders = itertools.count()

KERNEL = """
import io

from tvm import s_tir, te

OFFSET = 0.0
NOTES = io.StringIO()  # a stream: its contents change as it is used, so it cannot be keyed


def helper(x):
    return x * 2.0


def add_offset(n, block=8):
    A = te.placeholder((n,), "float32", name="A")
    B = te.compute((n,), lambda i: helper(A[i]) + OFFSET, name="B")
    sch = s_tir.Schedule(te.create_prim_func([A, B]))
    (i,) = sch.get_loops(sch.get_sblock("B"))
    sch.split(i, [None, block])
    return sch.mod["main"]


def noted_add(n, block=8):
    print("elaborating", n, block, file=NOTES)
    return add_offset(n, block)
"""


def load(tmp_path: Path, source: str):
    """Import ``source`` as module ``staleness_kernels`` from a folder of its own."""
    folder = tmp_path / f"v{next(_folders)}"
    folder.mkdir()
    (folder / "staleness_kernels.py").write_text(source)
    sys.modules.pop("staleness_kernels", None)
    sys.path.insert(0, str(folder))
    try:
        importlib.invalidate_caches()
        return importlib.import_module("staleness_kernels")
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop("staleness_kernels", None)


def jitted(factory):
    """A new JITImpl (an empty in-memory cache), as a new process would have."""
    return tileauto.jit(out_idx=[-1], target="llvm")(factory)


def by_block(func, args, *, warmup, rep, config, device):
    """A scripted timer (block 16 wins): the winner does not depend on the machine's load."""
    func(*args)
    return [{8: 2.0, 16: 1.0}[config["block"]] * 1e6] * rep


def tuned(factory):
    return tileauto.autotune(
        configs=[{"block": 8}, {"block": 16}], warmup=1, rep=3, timer=by_block, verbose=False
    )(jitted(factory))


def entries(cache: Path, kind: str) -> list[Path]:
    base = cache / kind
    return sorted(p for p in base.iterdir() if not p.name.startswith(".")) if base.is_dir() else []


def test_jit_editing_a_global_read_in_the_lambda_is_a_miss_with_the_new_result(
    tileauto_env, tmp_path
):
    a = torch.rand(64)
    first = jitted(load(tmp_path, KERNEL).add_offset)
    torch.testing.assert_close(first(64)(a), a * 2.0)
    assert first.compile_count == 1

    again = jitted(load(tmp_path, "# a comment\n" + KERNEL).add_offset)
    torch.testing.assert_close(again(64)(a), a * 2.0)
    assert again.compile_count == 0, "an unrelated edit should still load the cached kernel"

    edited = jitted(load(tmp_path, KERNEL.replace("OFFSET = 0.0", "OFFSET = 1.0")).add_offset)
    torch.testing.assert_close(edited(64)(a), a * 2.0 + 1.0)
    assert edited.compile_count == 1, "an edited OFFSET loaded the old kernel"

    helper = jitted(load(tmp_path, KERNEL.replace("x * 2.0", "x * 3.0")).add_offset)
    torch.testing.assert_close(helper(64)(a), a * 3.0)
    assert helper.compile_count == 1, "an edited helper loaded the old kernel"
    assert len(entries(tileauto_env, "kernels")) == 3


def test_autotune_editing_a_global_read_in_the_lambda_is_a_miss_with_the_new_result(
    tileauto_env, tmp_path
):
    a = torch.rand(64)
    first = tuned(load(tmp_path, KERNEL).add_offset)
    torch.testing.assert_close(first(64)(a), a * 2.0)
    assert not first.get_tuner_result(64).cache_hit

    again = tuned(load(tmp_path, KERNEL + "\n\ndef unrelated():\n    return 1\n").add_offset)
    torch.testing.assert_close(again(64)(a), a * 2.0)
    assert again.get_tuner_result(64).cache_hit, "an unrelated edit should still hit"

    edited = tuned(load(tmp_path, KERNEL.replace("OFFSET = 0.0", "OFFSET = 1.0")).add_offset)
    kernel = edited(64)
    result = edited.get_tuner_result(64)
    assert not result.cache_hit, "an edited OFFSET loaded the old tuned kernel"
    assert result.key != first.get_tuner_result(64).key
    torch.testing.assert_close(kernel(a), a * 2.0 + 1.0)
    assert kernel.config["block"] == 16
    assert len(entries(tileauto_env, "autotuner")) == 2


def test_an_unkeyable_global_is_one_warning_and_nothing_cached(tileauto_env, tmp_path, caplog):
    cache_key._REPORTED.messages.clear()
    caplog.set_level(logging.WARNING, logger="tileauto.cache")
    a = torch.rand(64)
    module = load(tmp_path, KERNEL)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            impl = jitted(module.noted_add)
            torch.testing.assert_close(impl(64)(a), a * 2.0)
            assert impl.compile_count == 1  # no disk cache: every new JITImpl compiles
        result = tuned(module.noted_add)
        torch.testing.assert_close(result(64)(a), a * 2.0)
    warned = [str(w.message) for w in caught if "cannot key" in str(w.message)]
    assert len(warned) == 1 and "'NOTES'" in warned[0]  # once, though keyed three times
    assert entries(tileauto_env, "kernels") == [] and entries(tileauto_env, "autotuner") == []
    said = [r.getMessage() for r in caplog.records if "cannot key" in r.getMessage()]
    assert said == [
        "noted_add: cannot key global 'NOTES' (object of type _io.StringIO: an I/O stream or "
        "a generator, whose state changes as it is used): results are not cached"
    ]
