"""Shared test set-up: an isolated cache per test and a clean ``TILEAUTO_*`` environment.

Every test gets ``TILEAUTO_CACHE_DIR`` pointing at its own temporary folder, and every other
``TILEAUTO_*`` variable from the caller's shell is removed, so a developer's settings never
change a test's outcome. The same clean-up is done once for the whole session (with a session
cache folder), so module-scoped fixtures and worker processes started by them (which keep the
environment they started with) never see the caller's settings or the real cache either.
Tests marked ``gpu`` are skipped where torch sees no CUDA GPU.
"""

from __future__ import annotations

import functools
import os
import shutil
import signal
import sys
import tempfile

import pytest

# helpers shared by tests in several folders (e.g. second_user.py)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

GPU_SKIP_REASON = "needs a CUDA GPU (torch.cuda.is_available() is False)"

# Variables a test may rely on from the outside (e.g. a CI switch); everything else is cleared.
_KEEP = {"TILEAUTO_ALLOW_MISSING_NATIVE"}
_ALIASES = {"DISABLE_AUTOTUNE"}  # other tuners' names that tileauto reads too


@functools.lru_cache(maxsize=1)
def cuda_available() -> bool:
    import torch

    try:
        return bool(torch.cuda.is_available())
    except Exception:  # a broken driver counts as no GPU
        return False


def _clear_tileauto_env(delete) -> None:
    for name in list(os.environ):
        if (name.startswith("TILEAUTO_") or name in _ALIASES) and name not in _KEEP:
            delete(name)


_SESSION_CACHE: str | None = None


def pytest_configure(config: pytest.Config) -> None:
    global _SESSION_CACHE
    # started in the background by a shell without job control (`cmd &` in a script), the
    # test run begins with SIGINT ignored, and so would every process it starts: the Ctrl-C
    # tests need it delivered as in a terminal (a caught signal is reset to the default at
    # exec, an ignored one stays ignored)
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    _clear_tileauto_env(lambda name: os.environ.pop(name, None))
    _SESSION_CACHE = tempfile.mkdtemp(prefix="tileauto-test-cache-")
    os.environ["TILEAUTO_CACHE_DIR"] = _SESSION_CACHE


def pytest_unconfigure(config: pytest.Config) -> None:
    if _SESSION_CACHE is not None:
        shutil.rmtree(_SESSION_CACHE, ignore_errors=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if gpu_items and not cuda_available():
        skip = pytest.mark.skip(reason=GPU_SKIP_REASON)
        for item in gpu_items:
            item.add_marker(skip)


_SPIN = "TVM_THREAD_POOL_SPIN_COUNT"


@pytest.fixture(autouse=True)
def tileauto_env(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    """A private cache dir and no inherited ``TILEAUTO_*`` settings, for every test.

    Two things a test may change in this process without asking are put back after it:
    the busy-machine rule's ``TVM_THREAD_POOL_SPIN_COUNT`` (``tileauto.jit.thread_pool`` sets it in
    ``os.environ`` when a tuning or a kernel load finds the machine busy; later tests and the
    processes they start would inherit it) and the main thread's CPU affinity (TVM's pool
    pins the thread that starts it to the cores of its size: one core on a 2-core x86
    machine when ``TVM_NUM_THREADS`` is unset, and every process that thread starts later
    inherits the mask).
    """
    from tileauto.jit import thread_pool as cpu_pool

    _clear_tileauto_env(lambda name: monkeypatch.delenv(name, raising=False))
    cache_dir = tmp_path_factory.mktemp("tileauto-cache")
    monkeypatch.setenv("TILEAUTO_CACHE_DIR", str(cache_dir))
    spin = os.environ.get(_SPIN)
    affinity = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    yield cache_dir
    if os.environ.get(_SPIN) != spin:
        if spin is None:
            os.environ.pop(_SPIN, None)
        else:
            os.environ[_SPIN] = spin
        cpu_pool._forget()
    if affinity is not None and os.sched_getaffinity(0) != affinity:
        os.sched_setaffinity(0, affinity)


@pytest.fixture(autouse=True, scope="module")
def _no_threads_left_by_torch_compile():
    """Stop the threads ``torch.compile`` leaves in this process after a module that used it.

    Inductor starts a tqdm monitor thread (its compile progress bar) and a compile thread
    pool; while they live, a tuning cannot fork its workers (other Python threads run) and
    starts them from the forkserver, so a later test of the fork path would skip. A user's
    process keeps them (docs/torch.md says what that costs).
    """
    yield
    if "torch._inductor.async_compile" not in sys.modules:
        return
    import tqdm
    from torch._inductor import async_compile

    monitor = tqdm.tqdm.monitor
    if monitor is not None:
        monitor.exit()
    async_compile.shutdown_compile_workers()
    if async_compile.AsyncCompile.pool.cache_info().currsize:
        async_compile.AsyncCompile.pool().shutdown(wait=True)
        async_compile.AsyncCompile.pool.cache_clear()
