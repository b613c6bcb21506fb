"""The one orchestrator of a tuning run: cache lookup, the search loop, the pick, the save.

    TuningSession.run()
      store.load() -------------------------------------------------> hit: the stored result
      store.locked(): store.load() again (another process may have tuned it meanwhile)
        known = store.known_trials()            measured before, not measured again
        default config first (the reference and the baseline)
        loop: search.ask() -> builder.build() -> runner.run() -> reporter.trial() -> search.tell()
        retime the best few, interleaved; pick the fastest that passed
        result = AutotuneResult(...) -> store.save(result) -> reporter.finished(summary)

The session is handed its builder and runner (:mod:`tileauto.tune.defaults` makes the problem's
own); it never chooses one. How a round of configs is built and run (on a CPU, built then run;
on a GPU, run as they are built): :mod:`tileauto.tune._rounds`.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeAlias

from tileauto.artifact import KernelArtifact
from tileauto.errors import NoValidConfigError
from tileauto.records import NEVER_TRIED, SessionSummary, Trial, TrialStatus
from tileauto.report.console import default_reporter
from tileauto.report.notes import note
from tileauto.report.observer import TrialObserver
from tileauto.report.table import format_ms
from tileauto.result.record import AutotuneResult
from tileauto.search import SearchStrategy, StopReason, resolve_search
from tileauto.space import config_id, tunable_parameters
from tileauto.tune._ending import (
    never_listed,
    no_winner_message,
    stored_facts,
    warn_if_unchecked,
)
from tileauto.tune._rounds import Rounds
from tileauto.tune._trials import warn_if_busy
from tileauto.tune.problem import TuningProblem
from tileauto.tune.stages import (
    BuilderMaker,
    BuildStage,
    KernelLoader,
    LoadingBuildStage,
    NotingReporter,
    Reporter,
    RunStage,
    Store,
    TrialStore,
)

RunnerMaker: TypeAlias = Callable[[], RunStage]
"""Makes the run stage when a session tunes (a cache hit needs none)."""

# configs a builder is sized from, at most: a constrained product is not counted for it
_BUILDER_SIZING = 4096


class TuningSession:
    """Runs one :class:`TuningProblem` to an :class:`~tileauto.result.record.AutotuneResult`.

    Args:
        problem: the factory, its arguments, the space and the options.
        builder: compiles configs; or a :data:`~tileauto.tune.stages.BuilderMaker` that makes
            one in this run's scratch folder when it tunes (the default builders).
        runner: checks and times them; or a :data:`RunnerMaker` that makes one when the run
            tunes (the default runners: a cache hit never imports the run stage).
        store: the cache entry of this problem (None: nothing is read or stored).
        search: which configs to measure (None: the problem's ``search`` option).
        reporter: progress, table and the trial log (None: the console and a JSON-lines log
            in the settings' logs folder).
        load_kernel: makes the winner's callable kernel (None: the builder's own; the
            ``@jit`` loader is :func:`tileauto.tune._winner.kernel_loader`).
        rebuild: compiles a config of this problem again; a result keeps it, so that saving
            it still works when its files are gone (None: such a result cannot be saved).

    The problem's defaults for every stage: :func:`tileauto.tune.defaults.session`.

    After :meth:`run`, ``compile_wall_s`` (from the start until the last compile ended) and
    ``workers`` tell how the builds went.
    """

    def __init__(
        self,
        problem: TuningProblem,
        *,
        builder: BuildStage | BuilderMaker | None = None,
        runner: RunStage | RunnerMaker | None = None,
        store: Store | None = None,
        search: SearchStrategy | None = None,
        reporter: Reporter | None = None,
        load_kernel: KernelLoader | None = None,
        rebuild: Callable[[TuningProblem, dict[str, Any]], Any] | None = None,
    ) -> None:
        if builder is None or runner is None:
            missing = " and ".join(
                n for n, v in (("builder", builder), ("runner", runner)) if v is None
            )
            raise TypeError(
                f"TuningSession needs its stages: {missing} not given; give them, or make the "
                "session with tileauto.tune.defaults.session(problem, ...), which fills in the "
                "local (or Ray) stages for each one left out"
            )
        self.problem = problem
        p = problem
        self.staging = p.settings.staging_dir  # this run's own folder in it once it tunes
        self.defaults = tunable_parameters(p.factory)
        self.view = p.view
        self.default_id = self.view.default_id
        self.builder = builder
        # a builder made when the run tunes tells its worker count then
        self.workers = builder.workers if isinstance(builder, BuildStage) else 0
        self.runner: RunStage | RunnerMaker = runner
        self.store = store
        self.search = search if search is not None else resolve_search(p.profile_args.search)
        if reporter is None:
            reporter = default_reporter(p.settings.logs_dir, p.name, p.verbose)
        self.reporter = reporter
        if load_kernel is None:
            if not isinstance(builder, LoadingBuildStage):
                raise TypeError(
                    "TuningSession(load_kernel=None) needs a builder that loads its own kernels;"
                    " give load_kernel=, or make the session with tileauto.tune.defaults.session"
                )
            load_kernel = builder.load_kernel
        self.load_kernel: KernelLoader = load_kernel
        self.rebuild = rebuild
        self.compile_wall_s = 0.0
        self.known: dict[str, Trial] = {}
        self._measured: dict[str, Trial] = {}  # the rounds' (the same dict), and never-tried
        self._artifacts: dict[str, KernelArtifact] = {}
        self._unranked: set[str] = set()  # contenders left out of the pick (see Rounds.retime)
        self.observer = TrialObserver(p.profile_args.on_trial, p.name)  # the user's on_trial
        self._started = 0.0
        self.stop: Any = None  # the search's SearchOutcome (why it stopped), after run()

    # -- the whole run ------------------------------------------------------------------------
    def run(self) -> AutotuneResult:
        """The stored result of this problem, or a new tuning (stored when a store is given)."""
        if self.store is None:
            return self._tune()
        hit = self._cached()
        if hit is not None:
            return hit
        with self.store.locked():
            # another process may have tuned it while this one waited for the lock
            hit = self._cached()
            return hit if hit is not None else self._tune()

    def _cached(self) -> AutotuneResult | None:
        assert self.store is not None
        hit = self.store.load()
        if hit is not None:
            hit = self._own_result(hit)
            self.observer.cache_hit(hit)  # a marker trial, never stored as a measurement
            self._tell(
                f"tileauto: using cached tuning {hit.key} ({hit.config}, "
                f"{format_ms(hit.latency)} ms)"
            )
        return hit

    def _own(self, trial: Trial) -> Trial:
        """A stored trial with the space's own config values (:meth:`SpaceView.own`)."""
        config = self.view.own(trial.config)
        return trial if config is trial.config else replace(trial, config=config)

    def _own_result(self, hit: AutotuneResult) -> AutotuneResult:
        """A stored result with the space's own config values: a tuple the user gave is a
        list in the cache's JSON, and the caller must get the tuple back."""
        if not self.view.holds_sequences:
            return hit
        config = self.view.own(hit.config)
        trials = tuple(self._own(t) for t in hit.trials)
        default = hit.default_trial
        default = self._own(default) if default is not None else None
        if config is hit.config and default is hit.default_trial:
            if all(a is b for a, b in zip(trials, hit.trials)):
                return hit
        rebuild = hit.rebuild
        if config is not hit.config and self.rebuild is not None:
            rebuild = functools.partial(self.rebuild, self.problem, config)
        return replace(hit, config=config, trials=trials, default_trial=default, rebuild=rebuild)

    def _tell(self, message: str) -> None:
        """A one-line note to the user, through the reporter when it takes notes."""
        if isinstance(self.reporter, NotingReporter):
            self.reporter.note(message)
        else:
            note(message, show=self.problem.verbose)

    def _tell_borrowed(self) -> None:
        """Say how many configs an earlier tuning under checks at least as strict measured
        (the store lends them: see each trial's notes), since they are not measured again."""
        from tileauto.cache.tuning import EARLIER_CHECKS

        borrowed = sum(any(EARLIER_CHECKS in n for n in t.notes) for t in self.known.values())
        if borrowed:
            self._tell(
                f"tileauto: autotune {self.problem.name}: {borrowed} config(s) measured by an "
                "earlier tuning whose checks were at least as strict are not measured again "
                "(each trial's notes say how it was checked)"
            )

    def _tune(self) -> AutotuneResult:
        from tileauto.workers.safety import kill_workers_on_sigterm

        # a SIGTERM kills the workers and removes this run's scratch folder, as Ctrl-C does
        try:
            with kill_workers_on_sigterm():
                return self._tune_here()
        except KeyboardInterrupt as exc:
            # a Ctrl-C that lands while a library handles an exception of its own (psutil
            # reading a process that just ended) would print that one too ("During handling
            # of the above exception ..."): the interrupt is the whole story
            exc.__suppress_context__ = True
            raise

    def _tune_here(self) -> AutotuneResult:
        from tileauto.cache.hygiene import prune_kernels, prune_logs
        from tileauto.cache.locks import writable_staging

        self._started = time.perf_counter()
        # a read-only cache dir still tunes (with a warning), staging in a private folder
        settings = writable_staging(self.problem.settings)
        self.problem = p = dataclasses.replace(self.problem, settings=settings)
        prune_logs(settings)  # logs past their age or the size cap (cheap: milliseconds)
        prune_kernels(settings)  # compiles used longest ago, past the kernel cache's size cap
        scratch = _claim_staging(settings.staging_dir)  # `cache clear` leaves it while we live
        self.staging = scratch.path
        try:
            # a SettingsError (too many compile workers, a memory limit above the machine's)
            # or a broken store ends the run here: its scratch folder goes with it
            self.known = self.store.known_trials() if self.store is not None else {}
            if self.known and self.view.holds_sequences:
                self.known = {cid: self._own(t) for cid, t in self.known.items()}
            self._tell_borrowed()
            builder = self._builder(scratch.path)
            runner = self._runner()
        except BaseException:
            scratch.remove()
            raise
        self.reporter.started(p.name, self.view.entries_bound)  # as the finish line counts
        rounds = Rounds(
            p, self.view, builder, runner, self.reporter, self.known, self._keep, self._store
        )
        self._measured, self._artifacts = rounds.measured, rounds.artifacts
        self._unranked = rounds.unranked
        ref_latency = None
        stop_reason = None
        try:
            builder.start()  # fork workers now, before this run starts any thread
            runner.start()
            stop_reason = self._search_loop(rounds)
            if rounds.prepared:
                rounds.retime()
                ref_latency = runner.time_reference()
            rounds.build_winner()
        except BaseException as exc:
            # an error or Ctrl-C: kill compiles and the run worker now, never wait for them
            builder.cancel()
            runner.kill()
            self._report_end(None, None, stop_reason, f"{type(exc).__name__}: {exc}")
            scratch.remove()
            raise
        finally:
            builder.close()
            runner.close()
            self.compile_wall_s = rounds.compile_wall_s
        try:
            return self._finish(ref_latency, stop_reason)
        finally:
            scratch.remove()

    # -- the search loop ----------------------------------------------------------------------
    def _search_loop(self, rounds: Rounds) -> str | None:
        """Measure the default config, then what the strategy asks for, within the budgets.

        The loop is :func:`tileauto.search.run_search`, the same one replays drive; this
        session's ``measure`` builds a batch in parallel and runs it (the default config rides
        with the first batch: it is the reference). Returns why the search stopped when
        configs were left untried (None when every config was measured).
        """
        from tileauto.search import run_search

        pa = self.problem.profile_args
        view = self.view
        known = {}
        for cid, trial in self.known.items():
            index = view.search_index(cid)
            # a pass an earlier run could not check is asked for again (rounds.unchecked)
            if index >= 0 and cid != self.default_id and not rounds.unchecked(trial):
                known[index] = trial
        pending_default = [self.default_id]

        def measure(indices: list[int]) -> list[tuple[int, Trial]]:
            """The batch, built in parallel and run: a list, so that a budget that runs out
            in the middle of it still counts every config measured (run_search's contract)."""
            ids = [view.id_at(i) for i in indices]
            ids = pending_default + [c for c in ids if c not in pending_default]
            pending_default.clear()
            rounds.measure(ids)
            return [(i, self._measured[view.id_at(i)]) for i in indices]

        outcome = run_search(
            self.search,
            view.search_space,
            measure,
            max_trials=pa.max_trials,
            max_seconds=pa.max_seconds,
            plateau=pa.plateau,
            parallelism=self.workers,
            seed=pa.seed,
            known=known,
            started_at=time.monotonic() - (time.perf_counter() - self._started),
            # the default is measured anyway (the reference): in the space, it is a trial too
            first=[i for i in [view.search_index(self.default_id)] if i >= 0],
        )
        if pending_default:  # the strategy asked for nothing: the default is still measured
            rounds.measure(pending_default)
            index = view.search_index(self.default_id)
            outcome = _with_default(outcome, index, self._measured[self.default_id])
        why = f"{outcome.describe()} ({self.search.describe()})"
        if view.lists_never_tried():
            for cid in view.all_ids():
                if cid not in self._measured and cid not in self.known:
                    self._measured[cid] = Trial(
                        view.position(cid),
                        view.config(cid),
                        TrialStatus.NOT_RUN,
                        error=f"{NEVER_TRIED}: {why}",
                    )
        self.stop = outcome
        return why if outcome.never_tried != 0 else None  # None: not counted, some left

    def _keep(self, trial: Trial) -> None:
        """A trial the rounds recorded: stored at once (an interrupted or killed run keeps it),
        reported, and handed to the user's ``on_trial``."""
        self._store(trial)
        self.reporter.trial(trial)
        self.observer.trial(trial)  # a detached copy; a failing callback is switched off

    def _store(self, trial: Trial) -> None:
        if isinstance(self.store, TrialStore):
            self.store.save_trial(trial)

    # -- the end --------------------------------------------------------------------------------
    def _finish(self, ref_latency: float | None, stop_reason: str | None) -> AutotuneResult:
        p = self.problem
        measured = self._measured
        for cid, trial in self.known.items():
            measured.setdefault(cid, trial.at_index(self.view.position(cid)))
        trials = self.view.ordered(measured)
        default_index = self.view.default_index
        default_trial = measured[self.default_id].at_index(default_index)
        # The winner comes from the user's space; the default config is the baseline only.
        candidates = [t for t in trials if t.ok]
        # a contender that could not be re-timed with the others is not compared with them
        unranked = {self.view.position(cid) for cid in self._unranked}
        ranked = [t for t in candidates if t.index not in unranked]
        candidates = ranked or candidates
        if not candidates:
            message = no_winner_message(
                p.name,
                trials,
                default_trial,
                self.view,
                self.stop,
                tuning_off=p.settings.disable_autotune,
            )
            log_path = self._report_end(trials, None, stop_reason, message, default_trial)
            raise NoValidConfigError(
                message + (f"\nfull log: {log_path}" if log_path else ""), trials=trials
            )
        best = min(candidates, key=lambda t: (t.latency_ms, t.index))
        warn_if_busy(p.name, candidates, p.device_type)
        warn_if_unchecked(p, default_trial, candidates)
        config = dict(best.config)
        measured_result = AutotuneResult(
            config=config,
            latency=float(best.latency_ms or 0.0),
            ref_latency=ref_latency,
            kernel=self.load_kernel(self._artifacts.get(config_id(config)), dict(config)),
            trials=trials,
            default_trial=default_trial,
            tuning_s=time.perf_counter() - self._started,
            extra=stored_facts(p, self.search, self.stop),
            rebuild=functools.partial(self.rebuild, p, config) if self.rebuild else None,
        )
        key = self.store.save(measured_result) if self.store is not None else None
        log_path = self._report_end(
            trials, best, stop_reason, None, default_trial, ref_latency, key
        )
        # what the caller gets: the stored record, with where it was stored and logged
        return replace(measured_result, key=key, log_path=log_path)

    def _report_end(
        self,
        trials: tuple[Trial, ...] | None,
        best: Trial | None,
        stop_reason: str | None,
        error: str | None,
        default_trial: Trial | None = None,
        ref_latency: float | None = None,
        key: str | None = None,
    ) -> Path | None:
        if trials is None:  # interrupted or failed: the configs of the space measured so far
            view = self.view
            found = [(view.position(cid), t) for cid, t in self._measured.items()]
            trials = tuple(t.at_index(i) for i, t in sorted(found, key=lambda f: f[0]) if i >= 0)
            # the rest were not measured (a default outside the space is its own row)
            never = len(view) - len(trials) if view.counted else None
        else:
            never = never_listed(self.view, self.stop, trials)
        default = default_trial or self._measured.get(self.default_id)
        return self.reporter.finished(
            SessionSummary(
                name=self.problem.name,
                trials=trials,
                best=best,
                default=default,
                ref_latency_ms=ref_latency,
                elapsed_s=time.perf_counter() - self._started,
                stop_reason=stop_reason,
                key=key,
                error=error,
                never_tried=never,
                pruned=self.problem.pruned,
            )
        )

    def _runner(self) -> RunStage:
        """The runner of this run: the one given, or made now (the first time it tunes)."""
        if not isinstance(self.runner, RunStage):
            self.runner = self.runner()
        return self.runner

    def _builder(self, staging_dir: Path) -> BuildStage:
        """The builder of this run: the one given, or made now in the run's scratch folder."""
        if isinstance(self.builder, BuildStage):
            return self.builder
        builder = self.builder(staging_dir, self.view.count_upto(_BUILDER_SIZING))
        self.workers = builder.workers
        return builder


def _claim_staging(staging_dir: Path) -> Any:
    """This run's staging folder, claimed (``tune-<pid>-<id>``), or an unclaimed temp folder."""
    import tempfile

    from tileauto.cache.scratch import ScratchDir, claim_scratch_dir
    from tileauto.workers.safety import remove_on_sigterm

    try:
        scratch = claim_scratch_dir(staging_dir, "tune")
    except OSError:
        scratch = ScratchDir(Path(tempfile.mkdtemp(prefix="tileauto-tune-")), None)
    remove_on_sigterm(scratch)
    return scratch


def _with_default(outcome: Any, index: int, trial: Trial) -> Any:
    """``outcome`` with the default config's trial, measured after the search stopped before
    its first batch, counted where the default is a config of the space (``index`` >= 0):
    measured, not never tried."""
    if index < 0 or index in outcome.trials:
        return outcome
    trials = {**outcome.trials, index: trial}
    left = None if outcome.never_tried is None else max(0, outcome.never_tried - 1)
    ranked = [(t.latency_ms, i) for i, t in trials.items() if t.ok and t.latency_ms is not None]
    return replace(
        outcome,
        trials=trials,
        never_tried=left,
        best_index=min(ranked)[1] if ranked else None,
        stop_reason=StopReason.DONE if left == 0 else outcome.stop_reason,
    )
