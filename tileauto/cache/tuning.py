"""The tuning cache: one entry per (problem, space), measurements kept per config.

    autotuner/<key>/             the full answer for one problem and one config space
    measurements/<problem>/<config>.json   one trial per config, reused when the space changes

so adding one config to a space measures only that config.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tileauto.cache import disk
from tileauto.cache.entry import read_result, write_result
from tileauto.cache.key import digest, function_fingerprint, tensor_content_hash, versions
from tileauto.errors import CacheError
from tileauto.keys import bind_arguments, describe_value
from tileauto.options import CompileArgs, ProfileArgs
from tileauto.records import Trial, TrialStatus
from tileauto.settings import Settings
from tileauto.space import config_id, full_config, tunable_parameters

# Failures that depend on the moment (load, memory) are measured again; the rest are reused.
_TRANSIENT = {
    TrialStatus.TIMEOUT,
    TrialStatus.OUT_OF_MEMORY,
    TrialStatus.NOT_RUN,
    TrialStatus.COMPILE_TIMEOUT,
}


def _callable_key(fn: Any) -> Any:
    return function_fingerprint(fn) if fn is not None else None


def profile_fingerprint(profile: ProfileArgs, timer: Any = None) -> dict[str, Any]:
    """The parts of the profile arguments that change which config wins or passes."""
    return {
        "warmup": profile.warmup,
        "rep": profile.rep,
        "supply_type": str(profile.supply_type),
        "supply_prog": _callable_key(profile.supply_prog),
        "ref_prog": _callable_key(profile.ref_prog),
        "manual_check_prog": _callable_key(profile.manual_check_prog),
        "skip_check": profile.skip_check,
        "rtol": profile.rtol,
        "atol": profile.atol,
        "max_mismatched_ratio": profile.max_mismatched_ratio,
        "inplace_args": profile.inplace_args,
        "flush_cache": profile.flush_cache,
        "seed": profile.seed,
        "timer": _callable_key(timer),
    }


def _plain(value: Any) -> bool:
    return isinstance(value, (bool, int, float, str, type(None))) or (
        isinstance(value, (list, tuple)) and all(_plain(v) for v in value)
    )


class TuningStore:
    """The cache entry of one tuning problem (None-safe: a disabled cache is ``None``)."""

    def __init__(
        self,
        root: Path,
        key: str,
        problem_key: str,
        meta: dict[str, Any],
        full_ids: dict[str, dict[str, Any]],
        problem_call: dict | None,
    ) -> None:
        self.root = root
        self.key = key
        self.problem_key = problem_key
        self.meta = meta
        self.full_ids = full_ids
        self.problem_call = problem_call
        self.entry_dir = root / "autotuner" / key
        self.measure_dir = root / "measurements" / problem_key
        self._hold: Any = None

    @classmethod
    def open(
        cls,
        settings: Settings,
        factory: Callable[..., Any],
        args: tuple,
        kwargs: dict[str, Any],
        space: list[dict[str, Any]],
        compile_args: CompileArgs,
        profile: ProfileArgs,
        captured: Any,
        timer: Any = None,
    ) -> TuningStore | None:
        """The store for this problem, or None when the tuning cache is off."""
        if not settings.tuning_cache_enabled:
            return None
        from tileauto.jit.target import (
            device_fingerprint,
            device_type_of,
            resolve_target,
            target_json,
        )

        target = resolve_target(compile_args.target, compile_args.target_host)
        bound = bind_arguments(factory, args, kwargs)
        problem = {
            "versions": versions(),
            "factory": function_fingerprint(factory),
            "name": getattr(factory, "__qualname__", "kernel"),
            "args": {
                k: describe_value(v)
                for k, v in bound.items()
                if k not in {c for cfg in space for c in cfg}
            },
            "compile": compile_args.fingerprint(),
            "target": target_json(target),
            "device": device_fingerprint(device_type_of(target)),
            "profile": profile_fingerprint(profile, timer),
            "inputs": [describe_value(t) for t in captured] if captured else None,
            "inputs_sha256": tensor_content_hash(captured),
        }
        problem_key = digest(problem)
        defaults = tunable_parameters(factory)
        keys = {k for c in space for k in c}
        full = [full_config(c, defaults, keys) for c in space]
        full_ids = {config_id(c): c for c in full}
        key = digest({"problem": problem_key, "space": [config_id(c) for c in full]})
        meta = {
            "key": key,
            "problem_key": problem_key,
            "kernel": problem["name"],
            "device": problem["device"],
        }
        call = (
            {"args": list(args), "kwargs": kwargs}
            if _plain(list(args)) and _plain(list(kwargs.values()))
            else None
        )
        return cls(settings.cache_dir, key, problem_key, meta, full_ids, call)

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold this key's lock: concurrent tuners of one key tune it once."""
        try:
            lock_cm = disk.key_lock(self.root, self.key)
            lock_cm.__enter__()
        except OSError as exc:  # read-only cache: tune without the lock
            disk.warn(f"cannot lock {self.key} ({exc}); tuning without the cache lock")
            yield
            return
        try:
            yield
        finally:
            lock_cm.__exit__(None, None, None)

    def load(self, verbose: bool = False) -> Any:
        """The cached AutotuneResult, or None on a miss (a bad entry is a warned miss)."""
        if not self.entry_dir.exists():
            return None
        problem = disk.verify(
            self.entry_dir, expect={"key": self.key, **{k: v for k, v in versions().items()}}
        )
        if problem is not None:
            disk.warn(f"entry {self.key} is unusable ({problem}); tuning again")
            return None
        try:
            result = read_result(self.entry_dir, verified=True)
        except (CacheError, OSError, ValueError, KeyError) as exc:
            disk.warn(f"entry {self.key} could not be loaded ({exc}); tuning again")
            return None
        result.key = self.key
        if verbose:
            print(
                f"tileauto: using cached tuning {self.key} ({result.config}, {result.latency:.4f} ms)",
                flush=True,
            )
        return result

    def known_trials(self) -> dict[str, Trial]:
        """Trials measured before for configs of this space (by config id)."""
        out: dict[str, Trial] = {}
        if not self.measure_dir.is_dir() or disk.unsafe_reason(self.measure_dir):
            return out
        for cid, config in self.full_ids.items():
            path = self.measure_dir / f"{digest(cid)}.json"
            try:
                data = json.loads(path.read_text())
                trial = Trial.from_json(data)
            except (OSError, ValueError, KeyError, TypeError):
                continue
            if trial.config == config and trial.status not in _TRANSIENT:
                out[cid] = trial
        return out

    def save(self, result: Any) -> None:
        """Store the result and each config's trial; a failure to write is a warning only."""
        if self.problem_call is not None:
            result.extra["problem"] = self.problem_call
        try:
            disk.make_private_dir(self.measure_dir)
            for trial in [
                *result.trials,
                *([result.default_trial] if result.default_trial else []),
            ]:
                self._write_trial(trial)
            write_result(result, self.entry_dir, extra_manifest=self.meta)
            result.key = self.key
        except OSError as exc:
            disk.warn(
                f"could not write entry {self.key} ({exc}); the tuned kernel is returned but not cached"
            )

    def _write_trial(self, trial: Trial) -> None:
        cid = config_id(trial.config)
        tmp = self.measure_dir / f".{digest(cid)}.tmp"
        tmp.write_text(json.dumps(trial.to_json(), default=repr))
        tmp.replace(self.measure_dir / f"{digest(cid)}.json")
