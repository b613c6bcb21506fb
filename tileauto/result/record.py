"""AutotuneResult: the tuned config, its latency, the loaded kernel and every trial.

Built once, complete, by the session or a store; nothing sets its fields afterwards. Its
methods (TileLang's names) delegate to the report's table and plot, the summary and shipping:
the record presents itself through them, and none of them imports the record.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tileauto.records import Trial
from tileauto.report.plot import plot_trials
from tileauto.report.table import format_ms, format_table
from tileauto.result._origin import KernelOrigin, origin_of
from tileauto.result.shipping import load_result, problem_names, reported_name, save_result
from tileauto.result.summary import TuningResult


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
        cache_hit: whether it came from the disk cache (or a saved folder) without tuning.
        key: the cache key of the tuning problem (None when the tuning cache was off).
        extra: more facts about the run (``"problem"``: the problem arguments, if plain;
            ``"compile_args"``: the tuning's ``target_host``, ``execution_backend`` and
            ``pass_configs``, which a recompile on load uses;
            ``"entry"``: the factory's name and module, ``problem_key`` and ``family`` that
            the cache entry or saved folder it was read from gives, kept when it is saved).
        rebuild: compiles the best config again when the kernel's files are gone or changed
            and it must be saved (a tuning's; a loaded result's when it was loaded with
            ``factory=``; else None).
        origin: the saved folder or cache entry a loaded result was read from, with the
            sha256 of its kernel's files then (None for a result tuned in this process): a
            save copies those files only if they are still the ones it was loaded with.
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
    rebuild: Callable[[], Any] | None = field(default=None, repr=False, compare=False)
    origin: KernelOrigin | None = field(default=None, repr=False, compare=False)

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
        """The best config's trial (the default's, when it won and is not among the trials)."""
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
        best = self.best_trial
        return format_table(self.trials, best.index if best else None, self.default_trial)

    def as_tuning_result(self) -> TuningResult:
        """The cuTile-style view: best (mean, 95% margin, samples), successes, failures."""
        trials = list(self.trials)
        best = self.best_trial
        if best is not None and best not in trials:
            trials.append(best)  # the default config, when it won and is not in the list
        return TuningResult.from_trials(trials, self.config)

    def plot(self, path: str | Path) -> Path:
        """Draw the trials (latency per config, failures marked, the winner and the default
        highlighted) to ``path`` (.png or .svg). Needs matplotlib (``tileauto[plot]``)."""
        best = self.best_trial
        return plot_trials(
            self.trials,
            path,
            best_index=best.index if best is not None else None,
            default=self.default_trial,
            title=f"{reported_name(self)}: {self.config}, {format_ms(self.latency)} ms",
        )

    # -- shipping (tileauto.result.shipping) --------------------------------------------------
    def save_to_disk(self, path: str | Path, verbose: bool = False) -> Path:
        """Write this result to the folder ``path`` for another process or machine.

        The folder holds best_config.json, latency.json, trials.json, the kernel's shared
        library, sources and parameter description, and a manifest of sha256 hashes (see
        ``docs/cache_format.md``). It is written next to ``path`` and renamed into place, so
        ``path`` is never half-written. A saved result at ``path`` that holds nothing but
        its own files is replaced; anything else there is refused and left as it is. The
        manifest names the problem (factory, module, problem and family keys) as the cache
        entry of this result does. The kernel's files are copied from its folder only if
        they are the ones it was loaded with (a loaded result: their sha256 at load); when one
        is gone, or another save or tuning replaced it there, the best config is compiled again
        (a result tuned in this process, or loaded with ``factory=``). A save sweeps the
        staging folders that saves killed before they were done left beside ``path``.

        Raises:
            CacheError: a file, a link, or a non-empty folder other than a saved result alone
                is at ``path``; or a file of the kernel is gone or changed and this result
                cannot compile it again (the message names the file).
            OSError: the folder could not be written (the message names ``path``).
            ValueError: ``path`` is empty (give ``"."`` for the working directory).
        """
        return save_result(self, path, verbose=verbose)

    @classmethod
    def load_from_disk(
        cls, path: str | Path, compile_args: Any = None, *, factory: Any = None
    ) -> AutotuneResult:
        """Load a result written by :meth:`save_to_disk` (or a cache entry) without tuning.

        The stored shared library is loaded as is: no compile, no tuning. When it cannot run
        here (another CPU architecture or instruction set, another GPU, or a library that
        does not load), the stored best config is recompiled for this machine with a warning:
        from the stored TVMScript, or with ``factory`` (a ``@jit`` factory or plain factory)
        when given. The recompile uses the tuning's ``pass_configs``, ``target_host`` and
        ``execution_backend`` (a folder saved before they were recorded has none).

        Args:
            path: the folder (a symbolic link to it is followed; links inside it are refused).
            compile_args: a :class:`~tileauto.options.CompileArgs` or a dict of its fields.
                ``out_idx`` overrides the stored one; ``target`` (when not ``"auto"``),
                ``target_host`` and ``pass_configs`` are used when recompiling, in place of
                the tuning's (a field left at its default keeps the tuning's), and a target
                of another kind than the stored one forces a recompile.
            factory: recompile with this factory and the stored problem arguments instead of
                the stored TVMScript: the ``@jit`` factory, the ``@tileauto.autotune``
                function over it (its ``@jit`` factory is used: nothing is tuned), or a plain
                factory. The result keeps it: :meth:`save_to_disk` compiles the best config
                again when the folder's kernel files are gone or replaced meanwhile.

        Raises:
            CacheError: the folder is missing, holds no saved result (no ``manifest.json``),
                or is incomplete, corrupt, or writable by others.
            CompileError: the stored kernel cannot run here and its recompile failed (the
                warning before it says why it was recompiled).
            TypeError: ``factory`` or ``compile_args`` is not of a kind described above.
        """
        return load_result(cls, path, compile_args, factory=factory)

    @classmethod
    def from_stored(
        cls,
        stored: Any,
        kernel: Any,
        *,
        key: str | None = None,
        rebuild: Callable[[], Any] | None = None,
    ) -> AutotuneResult:
        """A result from a :class:`~tileauto.cache.entry.StoredResult` and its loaded kernel.

        ``key``: the entry's key (default: the one its manifest records); ``rebuild``: see
        the attribute. The result's :attr:`origin` is the folder ``stored`` was read from.
        """
        extra: dict[str, Any] = {"entry": problem_names(stored.manifest)}
        if stored.problem is not None:
            extra["problem"] = stored.problem
        if getattr(stored, "compile_args", None) is not None:  # kept when it is saved again
            extra["compile_args"] = stored.compile_args
        if getattr(stored, "search", None) is not None:  # how the search that stored it ran
            extra["search"] = stored.search
        return cls(
            config=dict(stored.config),
            latency=stored.latency_ms,
            ref_latency=stored.ref_latency_ms,
            kernel=kernel,
            trials=stored.trials,
            default_trial=stored.default_trial,
            tuning_s=stored.tuning_s,
            cache_hit=True,
            key=key if key is not None else stored.manifest.get("key"),
            extra=extra,
            rebuild=rebuild,
            origin=origin_of(stored, kernel),
        )
