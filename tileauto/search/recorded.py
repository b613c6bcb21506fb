"""Recorded spaces: every config of a space with its measured outcome, loaded from a file.

Two formats are read, plain or gzipped JSON:

- Kernel Tuner's cache files (``tune_params``, ``tune_params_keys``, ``cache``): each cached
  record is one config, with ``time`` in milliseconds or a failure string
  (``"CompilationFailedConfig"``, ``"RuntimeFailedConfig"``...). Records marked
  ``"InvalidConfig"`` broke the kernel's constraints and are left out of the space. A file that
  Kernel Tuner was still writing (no closing braces) is read too. The file's ``objective``
  (default ``time``) is what ranks the configs when lower is better; when it is higher-is-better
  (``"objective_higher_is_better": true``, or, as Kernel Tuner never writes that flag, a
  throughput or efficiency such as ``GFLOP/s``), each record's ``time`` is read instead, and a
  record without one is refused. Any other string in place of a time is refused. A config cached under two keys
  is one config of the space, its best record kept.
- tileauto's trial exports (``tileauto cache export KEY --trials out.json``, format
  ``tileauto-trials/1``): each trial that was measured is one config; configs never tried are
  left out.
"""

from __future__ import annotations

import functools
import gzip
import json
import math
import numbers
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tileauto.records import LatencyStats, Trial, TrialStatus
from tileauto.space import ListSpace, Param, Space, config_id

TRIALS_FORMAT = "tileauto-trials/1"
_CHUNK = 1 << 20  # bytes read at a time
MAX_RECORD_BYTES = 256 << 20  # load() reads no more (decompressed); recorded GPU spaces are < 20 MB
_KT_FAILURES = {
    "CompilationFailedConfig": TrialStatus.COMPILE_ERROR,
    "RuntimeFailedConfig": TrialStatus.RUN_ERROR,
}
# the failures Kernel Tuner writes in place of a time (kernel_tuner/util.py's ErrorConfig kinds)
_KT_FAILURE_NAMES = {*_KT_FAILURES, "InvalidConfig", "ErrorConfig"}
# objectives Kernel Tuner reads as higher-is-better when the file does not say
# (kernel_tuner/util.py get_objective_defaults): throughputs and efficiencies
_KT_HIGHER = {"gflops", "gflop/s", "tflops", "tflop/s", "gb/s", "tb/s", "gflops/w", "tflops/w"}


@dataclass(frozen=True)
class RecordedSpace:
    """A space whose every config was measured, for replaying a search without compiling.

    Attributes:
        space: the configs (a :class:`tileauto.space.ListSpace`; parameters from the record).
        trials: each config's trial, index-aligned with ``space`` (failures included).
        kernel: the kernel's name, when the record says.
        device: the device it was measured on, when the record says.
        source: where it was loaded from ("" when built in memory).
        left_out: configs of the record that are not in the space, and why.
        family: the tuned call on every target and device, when the record says (a tileauto
            export: :func:`tileauto.cache.key.family_digest`): records of one family are the
            same problem measured elsewhere.
    """

    space: Space
    trials: tuple[Trial, ...]
    kernel: str = ""
    device: str = ""
    source: str = ""
    left_out: dict[str, int] = field(default_factory=dict)
    family: str = ""

    def __post_init__(self) -> None:
        if len(self.trials) != len(self.space):
            raise ValueError(
                f"a recorded space needs one trial per config: {len(self.space)} "
                f"configs, {len(self.trials)} trials"
            )
        for k, t in enumerate(self.trials):
            if t.ok and t.latency_ms is not None:
                _check_latency(t.latency_ms, f"trial {k}")
        if not any(t.ok and t.latency_ms is not None for t in self.trials):
            raise ValueError("a recorded space needs at least one config that passed")

    def __len__(self) -> int:
        return len(self.space)

    @functools.cached_property
    def optimum_ms(self) -> float:
        """The fastest recorded latency."""
        return min(t.latency_ms for t in self.trials if t.ok and t.latency_ms is not None)

    @functools.cached_property
    def digest(self) -> str:
        """16 hex digits of the parameters, the configs and each one's latency (or failure):
        what tells two recorded spaces apart (a prior's part of a cache key)."""
        import hashlib

        import numpy as np

        h = hashlib.blake2b(digest_size=8)
        h.update(repr([(p.names, list(p.values)) for p in self.space.params]).encode())
        h.update(np.ascontiguousarray(self.space.codes(np.arange(len(self)))).tobytes())
        lat = [t.latency_ms if t.ok and t.latency_ms is not None else -1.0 for t in self.trials]
        h.update(np.asarray(lat, dtype=np.float64).tobytes())
        return h.hexdigest()

    @property
    def failed(self) -> int:
        """How many configs failed when they were recorded."""
        return sum(not t.ok for t in self.trials)

    def within(self, share: float = 0.05) -> int:
        """How many configs are within ``share`` of the optimum (0.05: 5% slower at most).

        Raises:
            ValueError: ``share`` is not a number in [0, 1) (5% is 0.05, not 5).
        """
        limit = self.optimum_ms * (1 + check_share(share, "RecordedSpace.within"))
        return sum(t.ok and t.latency_ms is not None and t.latency_ms <= limit for t in self.trials)

    def describe(self) -> str:
        name = self.kernel or Path(self.source).name or "recorded space"
        device = f" on {self.device}" if self.device else ""
        return (
            f"{name}{device}: {len(self)} configs ({self.failed} failed), "
            f"{len(self.space.params)} parameters, optimum {self.optimum_ms:.4g} ms, "
            f"{self.within()} within 5%"
        )

    @classmethod
    def from_latencies(
        cls,
        configs: Sequence[dict[str, Any]] | Space,
        latencies_ms: Sequence[float | None],
        **info: Any,
    ) -> RecordedSpace:
        """A recorded space from configs and their latencies (None: the config failed). A
        config listed twice is one config, its best latency kept (counted in ``left_out``).

        Raises:
            ValueError: a latency that is not a finite number of milliseconds > 0 (named).
        """
        count = len(configs)
        if len(latencies_ms) != count:  # a config's own, one each
            raise ValueError(
                f"from_latencies needs one latency per config: {count} configs, "
                f"{len(latencies_ms)} latencies"
            )
        for i, t in enumerate(latencies_ms):
            if t is not None:
                _check_latency(t, f"latencies_ms[{i}]")
        if isinstance(configs, Space):
            trials = tuple(
                _trial(i, configs.config(i), None if t is None else float(t))
                for i, t in enumerate(latencies_ms)
            )
            return cls(configs, trials, **info)
        # a config listed twice is one config, its best latency kept (as load() keeps them)
        kept: list[dict[str, Any]] = []
        found: list[Trial] = []
        at: dict[str, int] = {}
        left_out = dict(info.pop("left_out", None) or {})
        for config, t in zip(configs, latencies_ms):
            cid = config_id(config)
            trial = _trial(at.get(cid, len(kept)), config, None if t is None else float(t))
            if _kept(trial, cid, at, found, left_out):
                kept.append(config)
        space = ListSpace(kept)
        trials = tuple(replace(t, config=space.config(i)) for i, t in enumerate(found))
        return cls(space, trials, left_out=left_out, **info)

    @classmethod
    def load(cls, path: str | Path, *, max_bytes: int | None = None) -> RecordedSpace:
        """Read a Kernel Tuner cache file or a tileauto trial export (JSON, maybe gzipped).

        Args:
            path: the file.
            max_bytes: the most bytes to read, after decompression (default
                :data:`MAX_RECORD_BYTES`, 256 MiB), an int >= 1; a larger file is refused
                after that many bytes (memory grows with the file, not with the limit).

        Raises:
            ValueError: the file is neither format (the message says what was found), is
                damaged (a truncated gzip, bytes that are not UTF-8), is larger than
                ``max_bytes``, or has a record that does not fit its format or a time that is
                not a finite number > 0 (the message names the file and the record); a
                ``max_bytes`` that is not an int >= 1.
        """
        if max_bytes is not None and (
            isinstance(max_bytes, bool)
            or not isinstance(max_bytes, numbers.Integral)
            or max_bytes < 1
        ):
            raise ValueError(
                f"RecordedSpace.load max_bytes must be an int >= 1 (bytes) or None, got "
                f"{type(max_bytes).__name__} {max_bytes!r:.60}"
            )
        path = Path(path)
        limit = MAX_RECORD_BYTES if max_bytes is None else int(max_bytes)
        raw = _read(path, limit)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(
                f"{path} is not UTF-8 text (byte {exc.start} is {raw[exc.start : exc.start + 1]!r}); "
                "a recorded space is JSON, plain or gzipped"
            ) from None
        data = _json(text, path)
        try:
            if isinstance(data, dict) and data.get("format") == TRIALS_FORMAT:
                return _from_tileauto(data, str(path))
            if isinstance(data, dict) and "cache" in data and "tune_params" in data:
                return _from_kernel_tuner(data, str(path))
        except (_Bad, ValueError) as exc:
            raise ValueError(f"{path}: {exc}") from None
        what = sorted(data)[:8] if isinstance(data, dict) else type(data).__name__
        raise ValueError(
            f"{path} is neither a Kernel Tuner cache file (keys tune_params, tune_params_keys, "
            f"cache) nor a tileauto trial export (format {TRIALS_FORMAT!r}); found {what}"
        )


def check_share(share: Any, owner: str) -> float:
    """A share of the optimum (0.05: 5% slower at most) as a float; ValueError naming
    ``owner``'s ``share`` unless it is a number in [0, 1)."""
    if not _is_number(share) or not 0.0 <= share < 1.0:
        raise ValueError(
            f"{owner} share must be a number in [0, 1) (0.05: within 5% of the optimum), got "
            f"{type(share).__name__} {share!r:.60}"
        )
    return float(share)


class _Bad(ValueError):
    """A record of a recorded-space file that does not fit its format (the file is added)."""


def _read(path: Path, limit: int) -> bytes:
    """The file's bytes, gunzipped, never more than ``limit`` of them (a bomb stops there)."""
    with open(path, "rb") as file:
        zipped = file.read(2) == b"\x1f\x8b"
        file.seek(0)
        if zipped:
            try:
                with gzip.GzipFile(fileobj=file) as unzipped:
                    raw = _upto(unzipped, limit + 1)
            except (OSError, EOFError, zlib.error) as exc:
                raise ValueError(
                    f"{path} is a damaged gzip file ({type(exc).__name__}: {exc}); "
                    "copy or download it again"
                ) from None
        else:
            raw = _upto(file, limit + 1)
    if len(raw) > limit:
        raise ValueError(
            f"{path} holds more than {limit:,} bytes{' decompressed' if zipped else ''}, the "
            "most RecordedSpace.load reads; pass max_bytes= to read a larger recorded space"
        )
    return raw


def _upto(file: Any, most: int) -> bytes:
    """At most ``most`` bytes of ``file``, read a chunk at a time (read(most) would allocate
    ``most`` bytes up front, whatever the file holds)."""
    chunks: list[bytes] = []
    got = 0
    while got < most:
        chunk = file.read(min(_CHUNK, most - got))
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _check_latency(value: Any, where: str) -> float:
    """A latency in ms as a float; ValueError unless it is a finite number > 0."""
    if not _is_number(value) or not math.isfinite(value) or value <= 0:
        raise _Bad(
            f"{where} has latency {value!r}: a recorded latency must be a finite number of "
            "milliseconds > 0"
        )
    return float(value)


def _check_seconds(record: dict[str, Any], keys: Sequence[str], where: str) -> None:
    """Recorded durations must be finite numbers >= 0 (or absent)."""
    for key in keys:
        value = record.get(key)
        if value is not None and (not _is_number(value) or not math.isfinite(value) or value < 0):
            raise _Bad(f"{where} has {key} {value!r}: expected a finite number >= 0, or none")


def _json(text: str, path: Path) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as first:
        # Kernel Tuner appends records as it tunes and closes the file only at the end
        body = text.rstrip().rstrip(",")
        for ending in ("}}", "}\n}", "\n}}"):
            try:
                return json.loads(body + ending)
            except json.JSONDecodeError:
                continue
        raise ValueError(f"{path} is not JSON: {first}") from None


def _trial(
    index: int,
    config: dict[str, Any],
    latency_ms: float | None,
    *,
    status: TrialStatus | None = None,
    samples_ms: Sequence[float] = (),
    compile_s: float | None = None,
    run_s: float | None = None,
    error: str | None = None,
) -> Trial:
    if latency_ms is None or not math.isfinite(latency_ms):
        return Trial(
            index,
            config,
            status or TrialStatus.RUN_ERROR,
            compile_s=compile_s,
            run_s=run_s,
            error=error or "failed when recorded",
        )
    latency = LatencyStats(latency_ms, latency_ms, latency_ms, latency_ms, latency_ms, 1)
    if len(samples_ms) > 1:
        spread = LatencyStats.from_samples_ns([s * 1e6 for s in samples_ms])
        # the record's objective stays the latency; the samples give the spread
        latency = LatencyStats(
            latency_ms,
            spread.p20_ms,
            spread.p80_ms,
            spread.min_ms,
            spread.mean_ms,
            spread.samples,
            spread.stdev_ms,
        )
    return Trial(index, config, TrialStatus.OK, latency=latency, compile_s=compile_s, run_s=run_s)


def _seconds(record: dict[str, Any], *keys: str) -> float | None:
    parts = [record.get(k) for k in keys]
    numbers = [float(p) for p in parts if isinstance(p, (int, float))]
    return sum(numbers) / 1000.0 if numbers else None


def _from_kernel_tuner(data: dict[str, Any], source: str) -> RecordedSpace:
    tune, cache = data["tune_params"], data["cache"]
    if not isinstance(tune, dict):
        raise _Bad(f"tune_params must map each parameter to its values, got {_kind(tune)}")
    if not isinstance(cache, dict):
        raise _Bad(f"cache must map each config's key to its record, got {_kind(cache)}")
    keys = data.get("tune_params_keys") or list(tune)
    if not isinstance(keys, list) or not all(isinstance(k, str) and k in tune for k in keys):
        raise _Bad(f"tune_params_keys must list names of tune_params {sorted(tune)}, got {keys!r}")
    if len(set(keys)) != len(keys):
        twice = sorted({k for k in keys if keys.count(k) > 1})
        raise _Bad(f"tune_params_keys names {twice} more than once: {keys!r}")
    params = [Param.of(k, tune[k]) for k in keys]
    allowed = [_values(p.values) for p in params]
    objective = data.get("objective", "time")
    if not isinstance(objective, str):
        raise _Bad(f"objective must be the name of a record's time, got {_kind(objective)}")
    higher = data.get("objective_higher_is_better")
    if higher is None:  # Kernel Tuner never writes it: its default for the objective's name
        higher = _higher_is_better(objective)
    if not isinstance(higher, bool):
        raise _Bad(f"objective_higher_is_better must be true or false, got {_kind(higher)}")
    configs: list[dict[str, Any]] = []
    trials: list[Trial] = []
    left_out: dict[str, int] = {}
    at: dict[str, int] = {}  # a config's position, by its id: one config cached twice is one
    timed = 0  # records that hold a time (a number or a failure name)
    for name, record in cache.items():
        where = f"cache[{name!r}]"
        if not isinstance(record, dict):
            raise _Bad(
                f"{where} must be an object of parameter values and times, got {_kind(record)}"
            )
        missing = [k for k in keys if k not in record]
        if missing:
            raise _Bad(f"{where} has no value for the parameters {missing}")
        for key, values in zip(keys, allowed):
            if not _among(record[key], values):
                raise _Bad(
                    f"{where} sets {key} to {record[key]!r}, which is not one of its "
                    f"tune_params values {tune[key]!r}"
                )
        time: Any = _kt_time(record, objective, higher, where)
        if isinstance(time, str) and time not in _KT_FAILURE_NAMES:
            raise _Bad(
                f"{where} has time {time!r}: expected a number of milliseconds or one of "
                f"Kernel Tuner's failures {sorted(_KT_FAILURE_NAMES)}"
            )
        if time is not None and not isinstance(time, str):
            time = _check_latency(time, f"{where} (its time)")
        timed += time is not None
        _check_seconds(record, ("compile_time", "verification_time", "benchmark_time"), where)
        samples = record.get("times") or ()
        if not isinstance(time, str) and time is not None:
            if not isinstance(samples, (list, tuple)):
                raise _Bad(f"{where} has times {samples!r}: expected a list of milliseconds")
            for k, sample in enumerate(samples):
                _check_latency(sample, f"{where} (times[{k}])")
        if time == "InvalidConfig":
            left_out["InvalidConfig (broke the kernel's constraints)"] = (
                left_out.get("InvalidConfig (broke the kernel's constraints)", 0) + 1
            )
            continue
        config = {k: record[k] for k in keys}
        failed = isinstance(time, str) or time is None
        cid = config_id(config)
        trial = _trial(
            at.get(cid, len(configs)),
            config,
            None if failed else float(time),
            status=_KT_FAILURES.get(time, TrialStatus.RUN_ERROR) if failed else None,
            samples_ms=samples,
            compile_s=_seconds(record, "compile_time"),
            run_s=_seconds(record, "verification_time", "benchmark_time"),
            error=str(time) if failed else None,
        )
        if _kept(trial, cid, at, trials, left_out):
            configs.append(config)
    if cache and not timed:
        read = "time" if higher or objective == "time" else f"{objective!r} (or 'time')"
        some = sorted(next(iter(cache.values())))[:12]
        raise _Bad(
            f"no record holds {read}, what ranks the configs (the file's objective is "
            f"{objective!r}); a record has {some}"
        )
    return RecordedSpace(
        _space(configs, params),
        tuple(trials),
        kernel=str(data.get("kernel_name", "")),
        device=str(data.get("device_name", "")),
        source=source,
        left_out=left_out,
    )


def _from_tileauto(data: dict[str, Any], source: str) -> RecordedSpace:
    configs: list[dict[str, Any]] = []
    trials: list[Trial] = []
    at: dict[str, int] = {}  # a config's position, by its id: one config recorded twice is one
    left_out: dict[str, int] = {}
    records = data.get("trials", [])
    if not isinstance(records, list):
        raise _Bad(f"trials must be a list of trial records, got {_kind(records)}")
    names: list[str] | None = None  # every config of an export sets every tuned parameter
    best = data.get("best_config")
    if isinstance(best, dict):
        names = sorted(best)
    for k, record in enumerate(records):
        where = f"trials[{k}]"
        status = _status(record, where)
        if names is None:
            names = sorted(record["config"])
        _check_names(record["config"], names, where)
        if status is TrialStatus.NOT_RUN:
            left_out["not run"] = left_out.get("not run", 0) + 1
            continue
        cid = config_id(record["config"])
        _check_seconds(record, ("compile_s", "run_s"), where)
        if record.get("latency"):
            try:
                trial = Trial.from_json({**record, "index": at.get(cid, len(configs))})
            except (KeyError, TypeError, AttributeError, ValueError) as exc:
                raise _Bad(f"{where} is not a trial record ({type(exc).__name__}: {exc})") from None
            if trial.ok and trial.latency_ms is not None:
                _check_latency(trial.latency_ms, f"{where} (its latency)")
        else:
            latency = record.get("latency_ms")
            if status.ok and latency is not None:
                latency = _check_latency(latency, f"{where} (its latency_ms)")
            trial = _trial(
                at.get(cid, len(configs)),
                dict(record["config"]),
                latency if status.ok else None,
                status=status,
                compile_s=record.get("compile_s"),
                run_s=record.get("run_s"),
                error=record.get("error"),
            )
        if trial.ok and trial.latency_ms is None:
            raise _Bad(
                f"{where} has status ok but no latency: a passing trial needs its latency_ms "
                "(or latency)"
            )
        if _kept(trial, cid, at, trials, left_out):
            configs.append(dict(record["config"]))
    return RecordedSpace(
        _space(configs, None),
        tuple(trials),
        kernel=str(data.get("kernel", "")),
        device=_device_name(data.get("device")),
        source=source,
        left_out=left_out,
        family=data["family"] if isinstance(data.get("family"), str) else "",
    )


REPEATED = "repeated config (its best record kept)"  # a left_out reason


def _kept(
    trial: Trial, cid: str, at: dict[str, int], trials: list[Trial], left_out: dict[str, int]
) -> bool:
    """Add ``trial`` (of the config ``cid``) to ``trials``; True when its config is new. A
    config recorded again keeps its better trial (a passing one over a failure, then the
    faster), and the other record counts in ``left_out``."""
    k = at.get(cid)
    if k is None:
        at[cid] = len(trials)
        trials.append(trial)
        return True
    left_out[REPEATED] = left_out.get(REPEATED, 0) + 1
    old = trials[k]
    if (
        trial.ok
        and trial.latency_ms is not None
        and (not old.ok or old.latency_ms is None or trial.latency_ms < old.latency_ms)
    ):
        trials[k] = trial
    return False


def _kt_time(record: dict[str, Any], objective: str, higher: bool, where: str) -> Any:
    """A Kernel Tuner record's latency (ms), failure string, or None. A lower-is-better
    objective is read as it is; with a higher-is-better one (a throughput), the record's
    ``time`` is read instead (a failure string under the objective counts as the failure)."""
    if not higher:
        return record.get(objective, record.get("time"))
    time = record.get("time")
    if time is None:
        value = record.get(objective)
        if isinstance(value, str) or value is None:
            return value
        raise _Bad(
            f"{where} has no 'time': the file's objective {objective!r} is higher-is-better "
            "(objective_higher_is_better), so it cannot rank configs as a latency, and each "
            "record's time in ms is read instead"
        )
    return time


def _higher_is_better(objective: str) -> bool:
    """Whether a Kernel Tuner objective is higher-is-better when its file does not say (Kernel
    Tuner's cache files never do): a throughput or an efficiency (``GFLOP/s``, ``GB/s``,
    ``GFLOPS/W``, a name ending in ``/s`` or ``/W``) is; ``time``, ``energy`` and any other
    name are not, as Kernel Tuner reads them."""
    name = objective.strip().lower()
    rate = name.endswith(("/s", "/w")) or "/s/" in name or "flops" in name
    return name in _KT_HIGHER or rate


def _check_names(config: dict[str, Any], names: list[str], where: str) -> None:
    """A trial export's config sets the same parameters as the others (a tuning fills every
    config with the factory's defaults): one missing or misspelt is a damaged record."""
    missing = [n for n in names if n not in config]
    extra = sorted(n for n in config if n not in names)
    if extra:
        raise _Bad(
            f"{where} sets {extra}, which are not the export's parameters {names}"
            + (f" (and has no value for {missing})" if missing else "")
        )
    if missing:
        raise _Bad(f"{where} has no value for the parameters {missing} (the export's: {names})")


def _device_name(value: Any) -> str:
    """A record's device as a short name. A tileauto export holds the device's fingerprint (a
    dict, :func:`tileauto.jit.target.device_fingerprint`): a GPU by its name (``NVIDIA H200``),
    a CPU by its kind, CPU name and vendor (``cpu znver4 amd``)."""
    if isinstance(value, dict):
        if value.get("name"):
            return str(value["name"])
        return " ".join(str(value[k]) for k in ("kind", "mcpu", "vendor") if value.get(k))
    return str(value or "")


def _kind(value: Any) -> str:
    return f"{type(value).__name__} {value!r}"[:80]


def _status(record: Any, where: str) -> TrialStatus:
    """A trial record's status, checked with its config."""
    if not isinstance(record, dict) or not isinstance(record.get("config"), dict):
        raise _Bad(f"{where} must be an object with a 'config' object and a 'status'")
    try:
        return TrialStatus(record.get("status"))
    except ValueError:
        names = ", ".join(s.value for s in TrialStatus)
        raise _Bad(
            f"{where} has status {record.get('status')!r}: expected one of {names}"
        ) from None


def _space(configs: list[dict[str, Any]], params: Sequence[Param] | None) -> ListSpace:
    """The configs as a space; a config whose values its parameters lack is named."""
    try:
        return ListSpace(configs, params)
    except ValueError as exc:
        raise _Bad(str(exc)) from None


def _values(values: Sequence[Any]) -> tuple[set[Any], set[str]]:
    """A parameter's values for quick membership: the hashable ones, and the ids of the rest."""
    plain, other = set(), set()
    for v in values:
        try:
            plain.add(v)
        except TypeError:
            other.add(config_id({"v": v}))
    return plain, other


def _among(value: Any, values: tuple[set[Any], set[str]]) -> bool:
    try:
        return value in values[0]
    except TypeError:  # a list or a dict: compared by its id
        return config_id({"v": value}) in values[1]
