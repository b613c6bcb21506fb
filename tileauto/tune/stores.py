"""The stores a session reads and writes: the disk cache (a fleet's Redis behind it), in memory.

The in-memory one is for tests and notebooks. Each is a :class:`tileauto.tune.stages.TrialStore`: ``load`` (a stored result, ready to call),
``known_trials`` (configs measured before), ``locked`` (one tuner per problem), ``save_trial``
(one trial, as soon as it is measured), ``save``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tileauto._logging import get_logger
from tileauto.artifact import KernelArtifact
from tileauto.records import TRANSIENT, Trial
from tileauto.result.record import AutotuneResult
from tileauto.space import config_id

log = get_logger("cache")


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

    @property
    def family(self) -> str | None:
        """This call on every target and device (:func:`tileauto.cache.key.family_digest`)."""
        family = self.entry.meta.get("family")
        return family if isinstance(family, str) else None

    def locked(self) -> contextlib.AbstractContextManager[None]:
        return self.entry.locked(self.on_wait)

    def save_trial(self, trial: Trial) -> None:
        self.entry.save_trial(trial)

    def save(self, result: AutotuneResult) -> str | None:
        return self.entry.save(result)


class FleetStore:
    """The disk cache first, then a Redis that a fleet shares (:mod:`tileauto.cache.remote`).

    A disk hit is returned as :class:`DiskStore` returns it. A remote hit becomes a disk
    entry: its records, and its kernel when signed under this process's key; else its winner
    is compiled here (one compile, no tuning) and, with a ``check``, run once against the
    reference. ``locked`` holds the disk lock, then the fleet's lease of the key (or returns
    as soon as another process publishes it); ``save`` writes the disk entry, then publishes
    it. A fault of the remote level is one warning and the tuning goes on locally.

    Args:
        local: the disk cache entry of the problem.
        remote: the fleet's cache (a :class:`tileauto.cache.remote.RemoteCache`).
        check: ``check(artifact, config)``: why a compiled winner fails the reference, or
            None (None: no reference was given, nothing to check).
        on_wait: called with the lease's holder while another process tunes the key.
        limit_s: this tuning's time limit (a holder past its own is taken over).
        family: the factory's problem on every device (:func:`~tileauto.cache.remote.family_of`).
    """

    def __init__(
        self,
        local: DiskStore,
        remote: Any,
        *,
        check: Callable[[KernelArtifact, dict[str, Any]], str | None] | None = None,
        on_wait: Callable[[Any], None] | None = None,
        limit_s: float | None = None,
        family: str | None = None,
    ) -> None:
        self.local = local
        self.remote = remote
        self.key: str = local.key
        self.check = check
        self.on_wait = on_wait
        self.limit_s = limit_s
        self.family = family

    # -- reading --------------------------------------------------------------------------------
    def load(self) -> AutotuneResult | None:
        hit = self.local.load()
        if hit is not None:
            return hit
        entry = self.remote.get(self.key)
        if entry is None:
            return None
        try:
            return self._from_remote(entry)
        except Exception as exc:  # noqa: BLE001 - a winner that does not compile: tune here
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            self.remote.report(
                f"remote entry {self.key} at {self.remote.address} is unusable here "
                f"({type(exc).__name__}: {first}); tuning again"
            )
            return None

    def _from_remote(self, entry: Any) -> AutotuneResult | None:
        """The remote entry as a disk entry, loaded; None when it does not belong here."""
        from tileauto.cache import disk
        from tileauto.cache.entry import write_kernel_dir

        store = self.local.entry
        config = self._space_config(entry.config)
        if config is None:
            self.remote.report(
                f"remote entry {self.key} at {self.remote.address} names {entry.config}, which "
                "is not a config of this space; ignored"
            )
            return None
        signed = entry.kernel is not None and entry.record.get("target") == store.meta["target"]
        if signed:

            def fill(out: Path) -> None:
                entry.write_records(out)
                entry.write_kernel(out)

        else:
            if self.local.rebuild is None:
                return None
            artifact = self.local.rebuild(dict(config))  # one compile: no tuning
            problem = self.check(artifact, dict(config)) if self.check is not None else None
            if problem is not None:
                self.remote.report(
                    f"remote entry {self.key} at {self.remote.address}: its winner {config} "
                    f"fails the check here ({problem}); tuning again"
                )
                return None

            def fill(out: Path) -> None:
                entry.write_records(out)
                write_kernel_dir(artifact, out)

        try:
            disk.write_entry(store.entry_dir, fill, store.meta, store.settings.staging_dir)
            hit = self.local.load()
        except OSError as exc:  # a read-only cache: the entry lives in a private folder
            log.info("remote entry %s not written to the disk cache (%s)", self.key, exc)
            hit = self._load_private(fill)
        if hit is None:
            return None
        how = "signed kernel" if signed else "compiled here"
        return dataclasses.replace(
            hit, extra={**hit.extra, "remote": {"address": self.remote.address, "kernel": how}}
        )

    def _load_private(self, fill: Callable[[Path], None]) -> AutotuneResult | None:
        from tileauto.cache import disk, folders
        from tileauto.cache.entry import read_result
        from tileauto.jit.kernel import JITKernel

        store = self.local.entry
        folder = folders.private_fallback_dir("remote") / f"{self.key}-{uuid.uuid4().hex[:8]}"
        folder.mkdir(mode=0o700)
        fill(folder)
        manifest = disk.seal(folder, store.meta)
        stored = read_result(folder, manifest)
        return AutotuneResult.from_stored(stored, JITKernel(stored.artifact), key=self.key)

    def _space_config(self, config: dict[str, Any]) -> dict[str, Any] | None:
        """``config`` as this problem's space holds it, None when the space lacks it (a forged
        entry). Compared as JSON, which the entry went through: a tuple of the user's is a
        list in it, and the space's tuple is what the winner is compiled with."""
        store = self.local.entry
        if store.product is not None:
            names = store.product.names
            if not set(config) <= set(names):
                return None
            index = store.product.find({n: config.get(n, store.base_config.get(n)) for n in names})
            return store.product.config(index) if index >= 0 else None
        full = store.full_ids or {}
        exact = full.get(config_id(config))
        if exact is not None:
            return dict(exact)
        wanted = {k: config_id({"v": v}) for k, v in config.items()}
        for candidate in full.values():  # an entry that names only some keys
            if all(
                k in candidate and config_id({"v": candidate[k]}) == w for k, w in wanted.items()
            ):
                return dict(candidate)
        return None

    def known_trials(self) -> dict[str, Trial]:
        return self.local.known_trials()

    def trials_elsewhere(self) -> list[Any]:
        """The trials the fleet measured for this factory and problem on other targets or
        devices (:class:`~tileauto.cache.remote.ForeignTrials`): what the search can
        transfer. [] without a family (an unkeyable call) or when Redis fails."""
        if self.family is None:
            return []
        meta = self.local.entry.meta
        return self.remote.trials_elsewhere(self.family, meta["target"], meta["device"])

    # -- the fleet's lease ----------------------------------------------------------------------
    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        with self.local.locked():
            lease = self._take_lease()
            try:
                yield
            finally:
                if lease is not None:
                    for fault in lease.stop():
                        self.remote.fault(fault, f"renewing the lease of {self.key}")
                    try:
                        lease.release()
                    except Exception as exc:  # noqa: BLE001 - it expires by itself
                        self.remote.fault(exc, f"releasing the lease of {self.key}")

    def _take_lease(self) -> Any:
        """This process's lease of the key, or None: published meanwhile, or Redis failed."""
        try:
            lease = self.remote.lease(self.key, self.limit_s)
            if not self.remote.wait_for(self.key, lease, self.on_wait):
                return None  # another process published it: the session loads it
        except Exception as exc:  # noqa: BLE001 - any fault: this process tunes on its own
            self.remote.fault(exc, f"taking the lease of {self.key}")
            return None
        try:
            lease.keep_renewed(self.remote.connection())
        except OSError as exc:  # no helper process: the lease expires, the tuning goes on
            self.remote.fault(exc, f"renewing the lease of {self.key}")
        return lease

    # -- writing --------------------------------------------------------------------------------
    def save_trial(self, trial: Trial) -> None:
        self.local.save_trial(trial)

    def save(self, result: AutotuneResult) -> str | None:
        key = self.local.save(result)
        try:
            self._publish(result, written=key is not None)
        except Exception as exc:  # noqa: BLE001 - the disk entry stays; the fleet tunes it
            self.remote.fault(exc, f"publishing {self.key}")
        return key

    def _publish(self, result: AutotuneResult, *, written: bool) -> None:
        from tileauto.cache.entry import KERNEL_DIR, fill_result
        from tileauto.cache.remote import record_of_entry

        store = self.local.entry
        meta = {**store.meta, "family": self.family}
        if written:
            record = record_of_entry(store.entry_dir, meta)
            self.remote.put(self.key, record, store.entry_dir / KERNEL_DIR, self.family)
            return
        with tempfile.TemporaryDirectory(prefix="tileauto-publish-") as tmp:
            fill_result(result, Path(tmp))
            record = record_of_entry(Path(tmp), meta)
            self.remote.put(self.key, record, Path(tmp) / KERNEL_DIR, self.family)


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
