"""``par_compile(timeout_s=...)`` with ``TILEAUTO_COMPILE_ISOLATION=thread``: no compile in a
thread can be stopped, so the timeout is ignored, and that is said (once per process)."""

from __future__ import annotations

import threading
import warnings

import pytest

import tileauto
from tileauto.jit import impl
from tileauto.records import BuildResult, BuildStatus


def factory(n, block=1):  # never compiled: the builds are scripted
    raise AssertionError("a scripted build must not elaborate the factory")


@pytest.fixture
def scripted(monkeypatch):
    def build(self, pending, *rest):
        failed = BuildStatus.ERROR
        return {n: BuildResult(n, {}, failed, error="scripted") for n in range(len(pending))}

    monkeypatch.setattr(impl.JITImpl, "_build", build)
    monkeypatch.setattr(impl, "_THREAD_TIMEOUT_WARNED", threading.Event(), raising=False)
    monkeypatch.setenv("TILEAUTO_DISABLE_CACHE", "1")


def par_compile(block, **kw):
    kernel = tileauto.jit(factory, target="llvm")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kernel.par_compile([{"n": 64, "block": block}], **kw)
    return [str(w.message) for w in caught if w.category is RuntimeWarning]


def test_a_timeout_with_compiles_in_threads_is_said_to_be_ignored_once(scripted, monkeypatch):
    assert par_compile(1, timeout_s=5) == []  # process isolation: the timeout holds
    monkeypatch.setenv("TILEAUTO_COMPILE_ISOLATION", "thread")
    assert par_compile(2) == []  # no timeout given: nothing to say
    (said,) = par_compile(3, timeout_s=5)
    assert "timeout_s is ignored with TILEAUTO_COMPILE_ISOLATION=thread" in said
    assert par_compile(4, timeout_s=5) == []  # once per process
