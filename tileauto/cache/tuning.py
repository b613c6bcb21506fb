"""The tuning cache: one entry per (problem, config space), measurements kept per config.

    autotuner/<key>/                                the answer for one problem and one space
    measurements/<base>/<checks>/<config>.json      one trial per config, whatever space it came from
    measurements/<base>/<checks>.json               what those trials were checked with

``<base>`` hashes everything that changes a measurement except its checks (versions, the
factory's fingerprint, the bound arguments, compile options, how configs are timed, input
layouts, target, device); ``<checks>`` hashes the checks (``ref_prog``, ``manual_check_prog``,
``skip_check`` and the tolerances); ``<key>`` adds the list of configs. Adding a config to the
space is a new key whose other configs are already measured, so only the new one is measured.
A tuning under other checks finds the measurements of its siblings under the same ``<base>``:
it takes those whose checks were at least as strict as its own (:func:`at_least_as_strict`),
and the failures to compile, which no check changes.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from tileauto._logging import get_logger
from tileauto.cache import disk, folders
from tileauto.cache._checks import (
    CHECK_FREE,
    CHECK_OPTIONS,
    EARLIER_CHECKS,
    PASSED,
    at_least_as_strict,
    checks_record,
    describe_checks,
    read_checks,
)
from tileauto.cache.args import bind_arguments, passed_arguments
from tileauto.cache.entry import (
    KIND_TUNED,
    REQUIRED_TUNED,
    StoredResult,
    fill_result,
    read_result,
)
from tileauto.cache.key import (
    UnkeyableError,
    describe_arguments,
    describe_key_value,
    digest,
    factory_module,
    family_digest,
    function_fingerprint,
    report_unkeyable,
    versions,
)
from tileauto.cache.locks import best_effort_lock
from tileauto.options import CompileArgs, ProfileArgs
from tileauto.records import TRANSIENT, Trial, TrialStatus
from tileauto.settings import Settings
from tileauto.space import ProductSpace, config_id, tunable_parameters
from tileauto.space.view import SpaceView

log = get_logger("cache")

# the transient failures of a config that ran: a pass stored for it is forgotten (see
# TuningStore._forget_trial); a config not run or cancelled says nothing of its kernel
_REMEASURED = frozenset({TrialStatus.TIMEOUT, TrialStatus.OUT_OF_MEMORY})

MEASUREMENTS = "measurements"


def _callable_key(fn: Any, owner: str) -> Any:
    return function_fingerprint(fn, owner=owner) if fn is not None else None


def profile_fingerprint(
    profile: ProfileArgs, timer: Any = None, *, part: str = "problem"
) -> dict[str, Any]:
    """The parts of the profile arguments that change which config passes or wins.

    Read from each option's declaration (``key=`` in :class:`~tileauto.options.ProfileArgs`),
    so a new option is keyed where it is declared. Programs count by their source (and what
    they close over), so a ``ref_prog`` or a ``supply_prog`` keeps the cache on.

    ``part="problem"``: what changes a config's measurement (the measurements' folder);
    ``part="search"``: what changes only which configs are measured (the strategy, the
    budgets), keyed in the tuning entry, so that every strategy shares the measurements.
    """
    out: dict[str, Any] = {}
    for f in fields(profile):
        kind, value = f.metadata.get("key"), getattr(profile, f.name)
        if kind is None or (f.metadata.get("search", False) != (part == "search")):
            continue
        if kind == "ms":  # milliseconds count only when no iteration count replaces them
            out[f"{f.name}_ms"] = value if getattr(profile, f"{f.name}_iters") is None else None
        elif kind == "value":
            out[f.name] = list(value) if isinstance(value, tuple) else value
        elif kind == "text":
            out[f.name] = str(value)
        elif kind == "program":
            out[f.name] = _callable_key(value, f.name)
        elif kind == "strategy":
            describe = getattr(value, "describe", None)
            if value is None:  # the default
                value = "auto"
            out[f.name] = (
                value
                if isinstance(value, str)
                else (describe() if describe is not None else repr(value))
            )
        else:  # "describe"
            out[f.name] = describe_key_value(value)
    if part == "problem":
        out["timer"] = None if timer is None else describe_key_value(timer)
    return out


class TuningStore:
    """The cache entry of one tuning problem. :meth:`open` returns None when the cache is off."""

    def __init__(
        self,
        settings: Settings,
        key: str,
        problem_key: str,
        meta: dict[str, Any],
        full_ids: dict[str, dict[str, Any]] | None,
        base_config: dict[str, Any] | None = None,
        product: ProductSpace | None = None,
    ) -> None:
        self.settings = settings
        self.root = settings.cache_dir
        self.key = key
        self.problem_key = problem_key
        self.meta = meta
        self.full_ids = full_ids
        self.base_config = dict(base_config or {})
        self.product = product  # a lazy space: measurements are found by listing the folder
        self.entry_dir = self.root / KIND_TUNED / key
        self.base_dir = self.root / MEASUREMENTS / problem_key  # see place_measurements
        self.measure_dir = self.base_dir / "checks"
        self.checks: dict[str, Any] = {}
        self.report = disk.OnceWarner()
        # what the measurement files hold now, as this store read or wrote them (by identity)
        self._stored: dict[str, dict[str, Any]] = {}
        self._trial_writes = True  # off after a failed write: save() then reports it, once
        self._writable = False

    @classmethod
    def open(
        cls,
        settings: Settings,
        factory: Callable[..., Any],
        args: tuple,
        kwargs: dict[str, Any],
        space: SpaceView | list[dict[str, Any]] | ProductSpace,
        compile_args: CompileArgs,
        profile: ProfileArgs,
        captured: Any,
        timer: Any = None,
        *,
        target: str,
        device: dict[str, Any],
        bucket: Any = None,
    ) -> TuningStore | None:
        """The store for this problem, or None when there is none for this run.

        None when the tuning cache is off, or when something the factory (or a program of
        the profile arguments) reaches cannot be keyed: that is logged once, and the run
        tunes without the cache.

        Args:
            target: the resolved target as JSON text (``jit.target.target_json``).
            device: the device fingerprint (``jit.target.device_fingerprint``).
            bucket: the ``key=`` value of ``@autotune``: it replaces the call's arguments in
                the key, so every call of a bucket shares one entry across processes.
        """
        if not settings.tuning_cache_enabled:
            return None
        defaults = tunable_parameters(factory)
        view = space if isinstance(space, SpaceView) else SpaceView(space, defaults)
        lazy = view.product
        bound = bind_arguments(factory, args, kwargs, partial=True)  # tunables may lack defaults
        try:
            profile_part = profile_fingerprint(profile, timer)
            problem = {
                "versions": versions(),
                "factory": function_fingerprint(factory),
                "name": getattr(factory, "__qualname__", "kernel"),
                # The arguments the call gives; the others are the factory's defaults.
                "args": describe_arguments(passed_arguments(factory, args, kwargs))
                if bucket is None
                else {"bucket": describe_key_value(bucket, content=False)},
                "compile": compile_args.fingerprint(),
                "target": target,
                "device": device,
                # On a CPU the run worker's thread count decides which tiling wins.
                "run_threads": settings.run_threads() if device.get("kind") == "cpu" else None,
                "profile": profile_part,
                # Captured inputs count by layout, not values: fresh random inputs still hit.
                "inputs": describe_arguments(dict(enumerate(captured))) if captured else None,
            }
            # A measurement is named by every tunable argument's value, not only the space's
            # keys, so that it is found again when a config with a new key joins the space.
            base = {k: describe_key_value(bound[k], content=False) for k in defaults if k in bound}
            search = profile_fingerprint(profile, part="search")
            if lazy is not None:  # a product is keyed by its description, never expanded
                described = lazy.describe()
                described["constraints"] = [
                    rule
                    if isinstance(rule, str)
                    else function_fingerprint(rule, owner="constraint")
                    for rule in described["constraints"]
                ]
        except UnkeyableError as exc:  # no key: this run tunes without the cache
            report_unkeyable(getattr(factory, "__qualname__", "kernel"), exc)
            return None
        problem_key = digest(problem)
        # the measurements' folders: the problem without its checks, then the checks
        timing = {k: v for k, v in profile_part.items() if k not in CHECK_OPTIONS}
        base_key = digest({**problem, "profile": timing})
        checks = checks_record({k: profile_part[k] for k in CHECK_OPTIONS})
        checks_key = digest(checks)
        # a list is keyed by its filled configs' ids in order, as the session's view has them
        space_key: Any = {"product": described} if lazy is not None else view.listed_ids()
        key = digest({"problem": problem_key, "space": space_key, "search": search})
        meta = {
            **versions(),
            "kind": KIND_TUNED,
            "key": key,
            "problem_key": problem_key,
            # this call on every target and device: the cache prior reads its entries first
            "family": family_digest(problem["factory"], problem["args"]),
            "kernel": problem["name"],
            "module": factory_module(factory),  # a prior is the same module's same name
            "target": target,
            "device": device,
        }
        store = cls(settings, key, problem_key, meta, view.listed_configs(), base, lazy)
        store.place_measurements(base_key, checks_key, checks)
        return store

    def place_measurements(self, base_key: str, checks_key: str, checks: dict[str, Any]) -> None:
        """Keep the measurements in ``measurements/<base_key>/<checks_key>/``, checked with
        ``checks`` (a :func:`checks_record`), beside those of the same problem's other checks."""
        self.base_dir = self.root / MEASUREMENTS / base_key
        self.measure_dir = self.base_dir / checks_key
        self.checks = dict(checks)

    # -- reading --------------------------------------------------------------------------------
    def load(self) -> StoredResult | None:
        """The stored result, or None on a miss. A bad entry is a miss with one warning."""
        if not self.entry_dir.exists():
            return None
        expect = {"key": self.key, "kind": KIND_TUNED, **versions()}
        problem = disk.verify(self.entry_dir, expect, required=REQUIRED_TUNED)
        if problem is None:
            try:
                return read_result(self.entry_dir, disk.read_manifest(self.entry_dir))
            except (OSError, ValueError, KeyError, TypeError) as exc:
                problem = f"unreadable records ({type(exc).__name__}: {exc})"
        self.report(f"entry autotuner/{self.key} is unusable: {problem}; tuning again")
        return None

    def known_trials(self) -> dict[str, Trial]:
        """Trials measured before for the configs of this space, by config id.

        First this problem's own; then, for the configs left, the passes measured under checks
        at least as strict as this problem's, and the failures to compile measured under any
        checks (each with a note that says so: the session writes them into this problem's
        folder as it records them). A measurement is used only from folders and files of this
        user's that nobody else can write, and only when its sha256 matches: an edited file is
        measured again.
        """
        out: dict[str, Trial] = {}
        if not self.base_dir.is_dir():
            return out
        try:
            unsafe = self._unsafe_measurements()
        except OSError as exc:
            unsafe = f"unreadable ({exc})"
        if unsafe is not None:
            self.report(f"ignoring measurements/{self.base_dir.name}: {unsafe}")
            return out
        bad = 0
        if self.measure_dir.is_dir():
            for cid, config, path in self._candidates(self.measure_dir):
                identity = self.measurement_id(config)
                trial = _read_measurement(path, identity)
                if trial is None:
                    bad += 1
                elif trial.status not in TRANSIENT:
                    out[cid] = replace(trial, config=dict(config))  # named as this space names it
                    self._stored[identity] = _measured_part(trial)
        if bad:
            self.report(
                f"{bad} measurement file(s) in measurements/{self.problem_key} are corrupt, "
                "modified, unsigned (older tileauto) or not yours; those configs are measured again"
            )
        for folder, checks in self._siblings():
            reusable = CHECK_FREE | (PASSED if at_least_as_strict(checks, self.checks) else set())
            why = f"{EARLIER_CHECKS} {describe_checks(checks)}"
            for cid, config, path in self._candidates(folder):
                if cid in out:
                    continue
                trial = _read_measurement(path, self.measurement_id(config))
                if trial is not None and trial.status in reusable:
                    note = (
                        f"{why}: not measured again"
                        if trial.status in PASSED
                        else "failed to compile in an earlier tuning of this problem (no check "
                        "changes that): not compiled again"
                    )
                    out[cid] = replace(trial, config=dict(config), notes=(*trial.notes, note))
        return out

    def _siblings(self) -> Iterator[tuple[Path, dict[str, Any]]]:
        """(folder, checks) of each other set of checks this problem was measured under."""
        for record in sorted(self.base_dir.glob("*.json")):
            folder = record.with_suffix("")
            if folder == self.measure_dir or not folder.is_dir():
                continue
            checks = read_checks(record)
            if checks is None or digest(checks) != folder.name:
                continue  # not a record this tileauto wrote, or edited
            if disk.unsafe_reason(folder) is None:
                yield folder, checks

    def _candidates(self, folder: Path) -> Iterator[tuple[str, dict[str, Any], Path]]:
        """(config id, config, file) of each measurement file in ``folder`` that may hold a
        config of this space: a list's configs are looked up by name; a product's folder is
        listed (it holds the configs measured, far fewer than the product has)."""
        if self.full_ids is not None:
            for cid, config in self.full_ids.items():
                path = folder / f"{digest(self.measurement_id(config))}.json"
                if path.exists():
                    yield cid, config, path
            return
        assert self.product is not None
        names = self.product.names
        for path in sorted(folder.glob("*.json")):
            try:
                with open(path) as f:
                    identity = json.load(f)["config"]
                values = json.loads(identity)
                config = {n: values[n] for n in sorted(names)}
            except (OSError, ValueError, KeyError, TypeError):
                continue  # not a measurement of this space (checked again when read)
            if self.product.find(config) >= 0 and self.measurement_id(config) == identity:
                yield config_id(config), config, path

    def _unsafe_measurements(self) -> str | None:
        """Why the measurement folders cannot be trusted (see ``folders.folder_problem``), or None."""
        for folder in (self.root, self.base_dir.parent, self.base_dir):
            reason = folders.folder_problem(folder)
            if reason is not None:
                return reason
        return disk.unsafe_reason(self.measure_dir) if self.measure_dir.is_dir() else None

    # -- writing --------------------------------------------------------------------------------
    @contextlib.contextmanager
    def locked(self, on_wait: Callable[[], None] | None = None) -> Iterator[None]:
        """Hold this key's lock: concurrent tuners of one key tune it once, the rest load.

        ``on_wait`` is called once if another process holds it (to tell the user).
        """

        def waiting() -> None:
            log.info("waiting for another process tuning %s", self.key)
            if on_wait is not None:
                on_wait()

        with best_effort_lock(self.root / ".locks", f"{KIND_TUNED}-{self.key}", waiting):
            yield

    def save_trial(self, trial: Trial) -> bool:
        """Store one config's trial as soon as it is measured: a run killed later keeps it.

        Written as :meth:`save` writes it (fsynced, then renamed into place), under the rules
        of :meth:`_store_trial`. Returns whether a file was written. A failed write is not an
        error: later trials are then left to :meth:`save`, which warns if it fails too.
        """
        if not self._trial_writes:
            return False
        try:
            return self._store_trial(trial)
        except OSError as exc:
            self._trial_writes = False
            log.info("measurements/%s: not written as measured (%s)", self.problem_key, exc)
            return False

    def save(self, result: Any) -> str | None:
        """Store the result and each config's measured trial; its key, or None if not written.

        A failed write is a warning, not an error. ``result`` is not modified.
        """
        try:
            trials = [*result.trials, *([result.default_trial] if result.default_trial else [])]
            for trial in trials:
                self._store_trial(trial)
            disk.write_entry(
                self.entry_dir,
                lambda out: fill_result(result, out),
                self.meta,
                self.settings.staging_dir,
            )
            disk.sweep(self.entry_dir.parent)
        except OSError as exc:
            disk.warn(
                f"could not write autotuner/{self.key} ({exc}); the tuned kernel is returned "
                "but not cached"
            )
            return None
        return self.key

    def measurement_id(self, config: dict[str, Any]) -> str:
        """The identity of a config's measurement: the value of every tunable argument."""
        return config_id({**self.base_config, **config})

    def _store_trial(self, trial: Trial) -> bool:
        """Write a measured trial's file, unless there is nothing to write.

        A trial with a status of ``records.TRANSIENT`` is not written: not run and cancelled
        configs were not measured, and a timeout or an out-of-memory kill is measured again
        anyway; so a tuning never replaces another's measurement (a concurrent one's, of this
        problem under another key) with a record of a config it did not measure. A trial that
        the file already holds (read by :meth:`known_trials` or written here) is not written
        again.

        Raises:
            OSError: the folder is unsafe or the file cannot be written.
        """
        identity = self.measurement_id(trial.config)
        if trial.status in TRANSIENT:
            if trial.status in _REMEASURED and identity in self._stored:
                self._forget_trial(identity)  # it hung or ran out of memory when re-timed
            return False
        measured = _measured_part(trial)
        if self._stored.get(identity) == measured:
            return False
        if not self._writable:
            self._make_measure_dir()
        try:
            self._write_trial(trial)
        except FileNotFoundError:
            # the folder went while this tuning ran (``tileauto cache clear``): what the clear
            # deleted stays deleted, but this and every later trial is stored in a new folder
            self._make_measure_dir()
            self._write_trial(trial)
        self._stored[identity] = measured
        return True

    def _make_measure_dir(self) -> None:
        """Create this problem's measurement folder (private) and its checks record.

        Raises:
            OSError: a folder is unsafe or cannot be created.
        """
        self._writable = False
        folders.make_private_dir(self.measure_dir)
        for folder in (self.base_dir, self.base_dir.parent, self.root):  # measurements/
            folders.check_private(folder)
        _write_whole(self.measure_dir.with_suffix(".json"), self.checks)
        self._writable = True

    def _forget_trial(self, identity: str) -> None:
        """Delete the stored measurement of ``identity``: this tuning measured it again and it
        timed out or ran out of memory, which is not written (it is measured again anyway),
        so the next tuning must not find the pass it replaced."""
        self._stored.pop(identity, None)
        with contextlib.suppress(FileNotFoundError):
            (self.measure_dir / f"{digest(identity)}.json").unlink()

    def _write_trial(self, trial: Trial) -> None:
        identity = self.measurement_id(trial.config)
        body = {"config": identity, "trial": trial.to_json()}
        record = {"format": MEASUREMENT_FORMAT, **body, "sha256": _measurement_hash(body)}
        _write_whole(self.measure_dir / f"{digest(identity)}.json", record)


def _write_whole(path: Path, data: Any) -> None:
    """Write ``data`` as JSON to a temporary file of mode 600, fsync it, rename it into place."""
    tmp = path.parent / f".{path.name}.{uuid.uuid4().hex[:8]}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with open(fd, "w") as f:
            json.dump(data, f, default=repr)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)


MEASUREMENT_FORMAT = (
    3  # 3: in measurements/<base>/<checks>/; another is not read (docs/cache_format.md)
)


def _measured_part(trial: Trial) -> dict[str, Any]:
    """What a trial measured: its record without where a space lists it or how it was found."""
    data = trial.to_json()
    for name in ("index", "config", "cache_hit"):
        data.pop(name, None)
    return data


def _measurement_hash(body: dict[str, Any]) -> str:
    """The sha256 of a measurement's config and trial, as JSON with sorted keys."""
    text = json.dumps(body, sort_keys=True, default=repr, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _read_measurement(path: Path, identity: str) -> Trial | None:
    """The trial in a measurement file, or None if it is not this user's, modified or corrupt.

    The file is opened without following a link and checked through its descriptor: a
    regular file of this user's, writable by nobody else.
    """
    data = folders.read_own_json(path)
    if not isinstance(data, dict):
        return None
    try:
        if data.get("format") != MEASUREMENT_FORMAT or data.get("config") != identity:
            return None
        body = {"config": data["config"], "trial": data["trial"]}
        if data.get("sha256") != _measurement_hash(body):
            return None
        trial = Trial.from_json(data["trial"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return trial
