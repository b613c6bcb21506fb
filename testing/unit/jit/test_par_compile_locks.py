"""``par_compile``'s kernel-cache locks: taken in chunks of 8 per worker, at least 32 (another
process compiling the same configs takes the next ones), never more than the open-file limit
allows, and a config another process holds is left to the end.

The builds are scripted (no compiler): what is asserted is which configs each build gets and
how many locks are held at once.
"""

from __future__ import annotations

import contextlib
import resource

import pytest

import tileauto
from tileauto.cache.kernels import KernelStore
from tileauto.jit import impl
from tileauto.records import BuildResult, BuildStatus


def factory(n, block=1):  # never compiled: the builds are scripted
    raise AssertionError("a scripted build must not elaborate the factory")


@pytest.fixture
def scripted(monkeypatch):
    """The builds (a list of the blocks each build got) and the peak of locks held at once;
    ``elsewhere``: blocks whose lock another process holds until this one waits for it."""
    state = {"builds": [], "held": set(), "peak": 0, "elsewhere": set()}

    def build(self, pending, *rest):
        state["builds"].append([p.kwargs["block"] for p in pending])
        failed = BuildStatus.ERROR
        return {n: BuildResult(n, {}, failed, error="scripted") for n in range(len(pending))}

    real = KernelStore.locked

    @contextlib.contextmanager
    def locked(self, *, wait=True):
        if not wait and self.key in state["elsewhere"]:
            yield False  # another process builds it: given up only when waited for
            return
        with real(self, wait=wait) as got:
            state["held"].add(self.key)
            state["peak"] = max(state["peak"], len(state["held"]))
            try:
                yield got
            finally:
                state["held"].discard(self.key)

    monkeypatch.setattr(impl.JITImpl, "_build", build)
    monkeypatch.setattr(KernelStore, "locked", locked)
    return state


def keys(kernel, blocks):
    settings = tileauto.settings.Settings.from_env()
    return {kernel._store(settings, {"n": 64, "block": b}).key for b in blocks}


def test_locks_are_taken_about_one_per_worker_and_held_configs_are_left_to_the_end(scripted):
    kernel = tileauto.jit(factory, target="llvm")
    scripted["elsewhere"] = keys(kernel, [0])
    out = kernel.par_compile([{"n": 64, "block": b} for b in range(70)], num_workers=2)
    assert [type(k).__name__ for k in out] == ["CompileFailure"] * 70
    # chunks of 32 (8 per worker, at least 32): another process compiling the same configs
    # finds the next chunk free, so the work is shared; block 0, held elsewhere, is waited for
    # last (that process stored nothing)
    assert scripted["builds"] == [list(range(1, 32)), list(range(32, 64)), list(range(64, 70)), [0]]
    assert scripted["peak"] == 32


def test_no_more_locks_than_half_the_files_left_under_ulimit_n(scripted, monkeypatch):
    kernel = tileauto.jit(factory, target="llvm")
    monkeypatch.setattr(impl, "_open_files", lambda: 100, raising=False)
    monkeypatch.setattr(resource, "getrlimit", lambda which: (106, 4096))
    kernel.par_compile([{"n": 64, "block": b} for b in range(8)], num_workers=1)
    assert scripted["peak"] <= 3 and sorted(sum(scripted["builds"], [])) == list(range(8))


def test_the_chunk_size_follows_the_workers_and_the_open_file_limit(monkeypatch):
    monkeypatch.setattr(impl, "_open_files", lambda: 100)
    monkeypatch.setattr(resource, "getrlimit", lambda which: (160, 160))
    assert impl.locks_at_once(2) == 30  # (160 - 100) // 2, under the 32 of a chunk
    monkeypatch.setattr(resource, "getrlimit", lambda which: (1000, 1000))
    assert impl.locks_at_once(2) == 32 and impl.locks_at_once(8) == 64  # 8 a worker
    assert impl.locks_at_once(64) == impl._LOCKS_AT_ONCE
    monkeypatch.setattr(resource, "getrlimit", lambda which: (101, 160))
    assert impl.locks_at_once(8) == 1  # nothing left: one at a time, never none
    monkeypatch.setattr(resource, "getrlimit", lambda which: (resource.RLIM_INFINITY,) * 2)
    assert impl.locks_at_once(10_000) == impl._LOCKS_AT_ONCE
