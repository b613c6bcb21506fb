"""The stores a session reads and writes: the disk cache, and one in memory (tests, notebooks).

Both are :class:`tileauto.tune.stages.TrialStore`: ``load`` (a stored result, ready to call),
``known_trials`` (configs measured before), ``locked`` (one tuner per problem), ``save_trial``
(one trial, as soon as it is measured), ``save``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from tileauto.records import TRANSIENT, Trial
from tileauto.result.record import AutotuneResult
from tileauto.space import config_id


class DiskStore:
    """One problem's entry in the disk cache (a :class:`tileauto.cache.tuning.TuningStore`).

    Loading is the fast path of a warm start: verify the entry, read its JSON, load its
    library with the TVM runtime. Nothing is compiled and no worker process is started. An
    entry whose library does not load is a miss with a warning.

    Args:
        entry: the cache entry (``TuningStore.open``).
        on_wait: called when another process holds this problem's lock (to tell the user).
        rebuild: ``rebuild(config)`` compiles a stored config again; each loaded result keeps
            it, so that saving the result still works when the entry is removed meanwhile.
    """

    def __init__(
        self,
        entry: Any,
        on_wait: Callable[[], None] | None = None,
        rebuild: Callable[[dict[str, Any]], Any] | None = None,
    ) -> None:
        self.entry = entry
        self.key: str = entry.key
        self.on_wait = on_wait
        self.rebuild = rebuild

    def load(self) -> AutotuneResult | None:
        from tileauto.jit.kernel import JITKernel

        stored = self.entry.load()
        if stored is None:
            return None
        try:
            kernel = JITKernel(stored.artifact)
        except Exception as exc:  # noqa: BLE001 - treat as a miss: tune again
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            self.entry.report(f"autotuner/{self.key} does not load ({first}); tuning again")
            return None
        rebuild = self.rebuild
        again = functools.partial(rebuild, dict(stored.config)) if rebuild is not None else None
        return AutotuneResult.from_stored(stored, kernel, key=self.key, rebuild=again)

    def known_trials(self) -> dict[str, Trial]:
        return self.entry.known_trials()

    def locked(self) -> contextlib.AbstractContextManager[None]:
        return self.entry.locked(self.on_wait)

    def save_trial(self, trial: Trial) -> None:
        self.entry.save_trial(trial)

    def save(self, result: AutotuneResult) -> str | None:
        return self.entry.save(result)


@dataclass
class _Shelf:
    results: dict[str, AutotuneResult] = field(default_factory=dict)
    trials: dict[str, dict[str, Trial]] = field(default_factory=dict)
    locks: dict[str, threading.RLock] = field(default_factory=dict)
    guard: threading.Lock = field(default_factory=threading.Lock)


class MemoryStore:
    """A store in this process's memory: the disk cache's behaviour, without files.

    Stores made with the same ``shelf`` share results, measurements and locks (one shelf is
    one cache). Measured failures that depend on the moment (timeouts, out of memory, not
    run) are measured again and never replace a measurement, as with the disk cache.

    Example::

        shelf = MemoryStore.new_shelf()
        first = defaults.session(problem, store=MemoryStore("gemm", shelf)).run()
        again = defaults.session(problem, store=MemoryStore("gemm", shelf)).run()
        assert again.cache_hit
    """

    def __init__(self, key: str = "memory", shelf: Any = None) -> None:
        self.key = key
        self.shelf: _Shelf = shelf if shelf is not None else _Shelf()
        self.saves = 0

    @staticmethod
    def new_shelf() -> Any:
        """A new, empty in-memory cache for several stores to share."""
        return _Shelf()

    def load(self) -> AutotuneResult | None:
        stored = self.shelf.results.get(self.key)
        if stored is None:
            return None
        return dataclasses.replace(stored, cache_hit=True, log_path=None, extra=dict(stored.extra))

    def known_trials(self) -> dict[str, Trial]:
        trials = self.shelf.trials.get(self.key, {})
        return {cid: t for cid, t in trials.items() if t.status not in TRANSIENT}

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        with self.shelf.guard:
            lock = self.shelf.locks.setdefault(self.key, threading.RLock())
        with lock:
            yield

    def save_trial(self, trial: Trial) -> None:
        if trial.status not in TRANSIENT:  # not measured, or measured again anyway
            self.shelf.trials.setdefault(self.key, {})[config_id(trial.config)] = trial

    def save(self, result: AutotuneResult) -> str | None:
        kept = dataclasses.replace(result, key=self.key, extra=dict(result.extra), rebuild=None)
        self.shelf.results[self.key] = kept
        for trial in (*result.trials, *([result.default_trial] if result.default_trial else [])):
            self.save_trial(trial)
        self.saves += 1
        return self.key
