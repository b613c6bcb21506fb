"""Recorded spaces: every config of a space with its measured outcome, loaded from a file.

Two formats are read, plain or gzipped JSON:

- Kernel Tuner's cache files (``tune_params``, ``tune_params_keys``, ``cache``): each cached
  record is one config, with ``time`` in milliseconds or a failure string
  (``"CompilationFailedConfig"``, ``"RuntimeFailedConfig"``...). Records marked
  ``"InvalidConfig"`` broke the kernel's constraints and are left out of the space. A file that
  Kernel Tuner was still writing (no closing braces) is read too.
- tileauto's trial exports (``tileauto cache export KEY --trials out.json``, format
  ``tileauto-trials/1``): each trial that was measured is one config; configs never tried are
  left out.
"""

from __future__ import annotations

import functools
import gzip
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tileauto.records import LatencyStats, Trial, TrialStatus
from tileauto.space import ListSpace, Param, Space, config_id

TRIALS_FORMAT = "tileauto-trials/1"
_KT_FAILURES = {
    "CompilationFailedConfig": TrialStatus.COMPILE_ERROR,
    "RuntimeFailedConfig": TrialStatus.RUN_ERROR,
}


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
    """

    space: Space
    trials: tuple[Trial, ...]
    kernel: str = ""
    device: str = ""
    source: str = ""
    left_out: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if len(self.trials) != len(self.space):
            raise ValueError(
                f"a recorded space needs one trial per config: {len(self.space)} "
                f"configs, {len(self.trials)} trials"
            )
        if not any(t.ok and t.latency_ms is not None for t in self.trials):
            raise ValueError("a recorded space needs at least one config that passed")

    def __len__(self) -> int:
        return len(self.space)

    @functools.cached_property
    def optimum_ms(self) -> float:
        """The fastest recorded latency."""
        return min(t.latency_ms for t in self.trials if t.ok and t.latency_ms is not None)

    @property
    def failed(self) -> int:
        """How many configs failed when they were recorded."""
        return sum(not t.ok for t in self.trials)

    def within(self, share: float = 0.05) -> int:
        """How many configs are within ``share`` of the optimum (0.05: 5% slower at most)."""
        limit = self.optimum_ms * (1 + share)
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
        """A recorded space from configs and their latencies (None: the config failed)."""
        space = configs if isinstance(configs, Space) else ListSpace(configs)
        trials = tuple(
            _trial(i, space.config(i), None if t is None else float(t))
            for i, t in enumerate(latencies_ms)
        )
        return cls(space, trials, **info)

    @classmethod
    def load(cls, path: str | Path) -> RecordedSpace:
        """Read a Kernel Tuner cache file or a tileauto trial export (JSON, maybe gzipped).

        Raises:
            ValueError: the file is neither format (the message says what was found).
        """
        path = Path(path)
        raw = path.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        data = _json(raw.decode("utf-8"), path)
        if isinstance(data, dict) and data.get("format") == TRIALS_FORMAT:
            return _from_tileauto(data, str(path))
        if isinstance(data, dict) and "cache" in data and "tune_params" in data:
            return _from_kernel_tuner(data, str(path))
        what = sorted(data)[:8] if isinstance(data, dict) else type(data).__name__
        raise ValueError(
            f"{path} is neither a Kernel Tuner cache file (keys tune_params, tune_params_keys, "
            f"cache) nor a tileauto trial export (format {TRIALS_FORMAT!r}); found {what}"
        )


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
    keys = list(data.get("tune_params_keys") or data["tune_params"])
    params = [Param.of(k, data["tune_params"][k]) for k in keys]
    configs: list[dict[str, Any]] = []
    trials: list[Trial] = []
    left_out: dict[str, int] = {}
    for record in data["cache"].values():
        time = record.get(data.get("objective", "time"), record.get("time"))
        if time == "InvalidConfig":
            left_out["InvalidConfig (broke the kernel's constraints)"] = (
                left_out.get("InvalidConfig (broke the kernel's constraints)", 0) + 1
            )
            continue
        config = {k: record[k] for k in keys}
        failed = isinstance(time, str) or time is None
        trials.append(
            _trial(
                len(configs),
                config,
                None if failed else float(time),
                status=_KT_FAILURES.get(time, TrialStatus.RUN_ERROR) if failed else None,
                samples_ms=record.get("times") or (),
                compile_s=_seconds(record, "compile_time"),
                run_s=_seconds(record, "verification_time", "benchmark_time"),
                error=str(time) if failed else None,
            )
        )
        configs.append(config)
    return RecordedSpace(
        ListSpace(configs, params),
        tuple(trials),
        kernel=str(data.get("kernel_name", "")),
        device=str(data.get("device_name", "")),
        source=source,
        left_out=left_out,
    )


def _from_tileauto(data: dict[str, Any], source: str) -> RecordedSpace:
    configs: list[dict[str, Any]] = []
    trials: list[Trial] = []
    seen: set[str] = set()
    left_out: dict[str, int] = {}
    for record in data.get("trials", []):
        status = TrialStatus(record["status"])
        if status is TrialStatus.NOT_RUN:
            left_out["not run"] = left_out.get("not run", 0) + 1
            continue
        cid = config_id(record["config"])
        if cid in seen:
            continue
        seen.add(cid)
        if record.get("latency"):
            trial = Trial.from_json({**record, "index": len(configs)})
        else:
            latency = record.get("latency_ms")
            trial = _trial(
                len(configs),
                dict(record["config"]),
                float(latency) if status.ok and latency is not None else None,
                status=status,
                compile_s=record.get("compile_s"),
                run_s=record.get("run_s"),
                error=record.get("error"),
            )
        configs.append(dict(record["config"]))
        trials.append(trial)
    return RecordedSpace(
        ListSpace(configs),
        tuple(trials),
        kernel=str(data.get("kernel", "")),
        device=str(data.get("device") or ""),
        source=source,
        left_out=left_out,
    )
