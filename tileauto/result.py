"""AutotuneResult: the tuned config, its latency, the loaded kernel and every trial."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tileauto.records import Trial


@dataclass
class AutotuneResult:
    """What a tuning run returns (and what the cache stores).

    Attributes:
        config: the best config (the tunable arguments).
        latency: its median latency in ms.
        ref_latency: the reference program's median latency in ms (None without ref_prog).
        kernel: the best kernel, ready to call.
        trials: one record per config, index-aligned with the config list.
        default_trial: the factory's default config, always measured.
        tuning_s: wall time of the run.
        log_path: the log file of this run, if one was written.
        cache_hit: whether it came from the disk cache without tuning.
    """

    config: dict[str, Any]
    latency: float
    ref_latency: float | None
    kernel: Any
    trials: tuple[Trial, ...] = ()
    default_trial: Trial | None = None
    tuning_s: float = 0.0
    log_path: Path | None = None
    cache_hit: bool = False
    key: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def default_latency(self) -> float | None:
        """Median latency of the default config (ms), if it ran."""
        t = self.default_trial
        return t.latency_ms if t is not None and t.ok else None

    @property
    def speedup(self) -> float | None:
        """Default latency over best latency."""
        d = self.default_latency
        return d / self.latency if d and self.latency else None

    @property
    def best_trial(self) -> Trial | None:
        for t in self.trials:
            if t.ok and t.config == self.config:
                return t
        return (
            self.default_trial
            if self.default_trial and self.default_trial.config == self.config
            else None
        )

    def table(self) -> str:
        """The per-config report table."""
        from tileauto.report import format_table

        best = self.best_trial
        return format_table(self.trials, best.index if best else None, self.default_trial)

    def save_to_disk(self, path: str | Path, *, verbose: bool = False) -> Path:
        """Write this result to ``path`` (a directory) so another process or machine can load it.

        The directory holds best_config.json, latency.json, trials.json, the kernel's sources
        and shared library, and a manifest of file hashes. No pickle is needed to load it.
        """
        from tileauto.cache.entry import write_result

        return write_result(self, Path(path))

    @classmethod
    def load_from_disk(
        cls, path: str | Path, compile_args: Any = None, *, factory: Any = None
    ) -> AutotuneResult:
        """Load a result written by :meth:`save_to_disk` (or a cache entry) without tuning.

        When the stored library cannot be loaded on this machine, the stored best config is
        recompiled with ``factory`` (or the JITImpl whose kernel this was, if given) and a
        warning says so.
        """
        from tileauto.cache.entry import read_result

        return read_result(Path(path), compile_args=compile_args, factory=factory)
