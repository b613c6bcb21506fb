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
own); it never chooses one. On a CPU target nothing is timed while compile jobs load the same
cores: a round is built, then run. On a GPU configs run as soon as they are built.
"""

from __future__ import annotations

import dataclasses
import functools
import queue
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeAlias

from tileauto.artifact import KernelArtifact
from tileauto.errors import NoValidConfigError
from tileauto.records import (
    NEVER_TRIED,
    BuildRequest,
    BuildResult,
    RunOutcome,
    SessionSummary,
    Trial,
    TrialStatus,
    Validation,
)
from tileauto.report.console import default_reporter
from tileauto.report.notes import note
from tileauto.report.observer import TrialObserver
from tileauto.result.record import AutotuneResult
from tileauto.search import SearchStrategy, resolve_search
from tileauto.space import config_id, tunable_parameters
from tileauto.tune._ending import never_listed, no_winner_message, stored_facts
from tileauto.tune._retime import retime_contenders
from tileauto.tune._trials import trial_of, validation_of, warn_if_busy
from tileauto.tune.problem import TuningProblem
from tileauto.tune.stages import (
    BuilderMaker,
    BuildStage,
    KernelLoader,
    LoadingBuildStage,
    MultiSlotRunStage,
    NotingReporter,
    Reporter,
    RunStage,
    Store,
    TrialStore,
)
from tileauto.utils.threads import background_thread

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
        self._measured: dict[str, Trial] = {}
        self._artifacts: dict[str, KernelArtifact] = {}
        self._prepared = False
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
                f"tileauto: using cached tuning {hit.key} ({hit.config}, {hit.latency:.4f} ms)"
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
        with kill_workers_on_sigterm():
            return self._tune_here()

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
        self.known = self.store.known_trials() if self.store is not None else {}
        if self.known and self.view.holds_sequences:
            self.known = {cid: self._own(t) for cid, t in self.known.items()}
        self._tell_borrowed()
        builder = self._builder(scratch.path)
        runner = self._runner()
        self.reporter.started(p.name, self.view.size_bound)
        ref_latency = None
        stop_reason = None
        try:
            builder.start()  # fork workers now, before this run starts any thread
            runner.start()
            stop_reason = self._search_loop(builder, runner)
            if self._prepared:
                self._retime(runner)
                ref_latency = runner.time_reference()
            self._build_known_winner(builder)
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
        try:
            return self._finish(ref_latency, stop_reason)
        finally:
            scratch.remove()

    # -- the search loop ----------------------------------------------------------------------
    def _search_loop(self, builder: BuildStage, runner: RunStage) -> str | None:
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
            if index >= 0 and cid != self.default_id:
                known[index] = trial
        pending_default = [self.default_id]

        def measure(indices: list[int]) -> list[tuple[int, Trial]]:
            """The batch, built in parallel and run: a list, so that a budget that runs out
            in the middle of it still counts every config measured (run_search's contract)."""
            ids = [view.id_at(i) for i in indices]
            ids = pending_default + [c for c in ids if c not in pending_default]
            pending_default.clear()
            self._measure(ids, builder, runner)
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
            self._measure(pending_default, builder, runner)
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

    def _measure(self, round_ids: list[str], builder: BuildStage, runner: RunStage) -> None:
        """Build one round in parallel and run each config (CPU: after all its compiles)."""
        start = time.perf_counter()
        for cid in round_ids:
            if cid in self.known and cid != self.default_id:
                self._record(cid, self.known[cid])  # measured by an earlier run
        to_build = [cid for cid in round_ids if cid not in self._measured]
        p = self.problem
        requests = [
            BuildRequest(index=k, config=self.view.config(cid), args=p.args, kwargs=p.kwargs)
            for k, cid in enumerate(to_build)
        ]
        self.reporter.steps(2 * len(requests))
        arrivals: queue.Queue[BuildResult | None] = queue.Queue()
        broken: list[BaseException] = []  # the builder itself failed (not a config)

        def build_all() -> None:
            try:
                builder.build(requests, arrivals.put)
            except BaseException as exc:  # noqa: BLE001 - raised on the session's thread
                broken.append(exc)
            finally:
                arrivals.put(None)

        # a thread that leaves SIGINT to this one, which wakes every 0.1 s: Ctrl-C is never
        # delivered to a thread that ignores it (a native pool's, say) and lost
        thread = background_thread(build_all, name="tileauto-build")
        pending: dict[str, BuildResult] = {}
        device = "cpu"
        built_all = False
        while not built_all:
            try:
                got = [arrivals.get(timeout=0.1)]
            except queue.Empty:
                continue
            # with it, every result that arrived while the last ones ran: a runner with
            # several device slots (run_many: GPUs) times them at once
            while got[-1] is not None:
                try:
                    got.append(arrivals.get_nowait())
                except queue.Empty:
                    break
            built_all = got[-1] is None
            for result in got:
                if result is None:
                    break
                cid = to_build[result.index]
                self.reporter.step()
                pending[cid] = result
                if result.ok and result.artifact is not None:
                    self._artifacts[cid] = result.artifact
                    device = result.artifact.device_type
                    if not self._prepared:
                        runner.prepare(result.artifact)
                        self._prepared = True
            # a GPU runs configs as they arrive; a CPU waits until nothing else loads its cores
            if (
                not built_all
                and device != "cpu"
                and self._prepared
                and self._default_ready(pending)
            ):
                self._run_pending(runner, pending, round_ids)
        thread.join()
        if broken:
            raise broken[0]
        self.compile_wall_s += time.perf_counter() - start
        if self._prepared:
            self._run_pending(runner, pending, round_ids)
        for cid, result in pending.items():
            self._record(cid, self._trial(result, None))

    def _default_ready(self, pending: dict[str, BuildResult]) -> bool:
        return self.default_id in self._measured or self.default_id in pending

    def _run_pending(
        self, runner: RunStage, pending: dict[str, BuildResult], order: list[str]
    ) -> None:
        """Run every built config not yet run, the default first, in space order.

        A run stage with several device slots (``run_many``: Ray actors on several nodes or
        GPUs) runs the configs after the default in parallel; they are still recorded and
        reported in this order.
        """
        ordered = sorted(pending, key=lambda c: (c != self.default_id, order.index(c)))
        jobs: list[str] = []  # to be recorded after the default, in this order
        for cid in ordered:
            result = pending[cid]
            if cid == self.default_id and result.ok and result.artifact is not None:
                self._run_default(runner, cid, pending.pop(cid))
            else:
                jobs.append(cid)
        built = [c for c in jobs if pending[c].ok and pending[c].artifact is not None]
        outcomes: dict[str, RunOutcome] = {}
        recorded = 0

        def record_ready() -> None:  # the jobs whose turn has come and whose run is over
            nonlocal recorded
            while recorded < len(jobs):
                cid = jobs[recorded]
                if cid in built and cid not in outcomes:
                    return
                result = pending.pop(cid)
                self._record(cid, self._trial(result, outcomes.pop(cid, None)))
                self.reporter.step()
                recorded += 1

        if isinstance(runner, MultiSlotRunStage) and len(built) > 1:
            items = [(self._artifacts[c], pending[c].config) for c in built]
            for k, run in runner.run_many(items):
                outcomes[built[k]] = run
                record_ready()
        while recorded < len(jobs):
            cid = jobs[recorded]
            if cid in built and cid not in outcomes:
                outcomes[cid] = runner.run(
                    self._artifacts[cid], pending[cid].config, is_reference=False
                )
            record_ready()

    def _run_default(self, runner: RunStage, cid: str, result: BuildResult) -> None:
        """The default config: it makes the reference outputs the others are checked against."""
        reuse = self.known.get(cid)
        artifact = self._artifacts[cid]
        if reuse is not None:
            # measured before (cache): run once only to produce the reference outputs
            run = runner.run(artifact, result.config, is_reference=True, time_it=False)
            self._record(cid, reuse if run.status.ok else self._trial(result, run))
        else:
            run = runner.run(artifact, result.config, is_reference=True)
            self._record(cid, self._trial(result, run))
        self.reporter.step()

    def _retime(self, runner: RunStage) -> None:
        """Time the best few configs (and the default) again, interleaved, before picking."""
        top_k = self.problem.profile_args.retime_top_k
        retime_contenders(runner, self._measured, self._artifacts, self.default_id, top_k)

    def _build_known_winner(self, builder: BuildStage) -> None:
        """The winner, when an earlier run measured it, has no library here: build it while
        the builder is open (a builder behind the kernel cache loads the earlier compile)."""

        def rank(cid: str, trial: Trial) -> tuple[float, int]:
            return (trial.latency_ms or 0.0, self.view.position(cid))

        pool = {**self.known, **self._measured}
        ranked = sorted(
            (rank(cid, t), cid)
            for cid, t in pool.items()
            if t.ok and t.latency_ms is not None and self.view.position(cid) >= 0
        )
        if not ranked or ranked[0][1] in self._artifacts:
            return
        cid, p = ranked[0][1], self.problem
        request = BuildRequest(index=0, config=self.view.config(cid), args=p.args, kwargs=p.kwargs)
        built: list[BuildResult] = []
        builder.build([request], built.append)
        if built and built[0].ok and built[0].artifact is not None:
            self._artifacts[cid] = built[0].artifact

    # -- trials ---------------------------------------------------------------------------------
    def _record(self, cid: str, trial: Trial) -> None:
        """Keep a config's trial, complete (its index in the space), and report it."""
        trial = trial.at_index(self.view.position(cid))
        self._measured[cid] = trial
        if isinstance(self.store, TrialStore):  # an interrupted or killed run keeps it
            self.store.save_trial(trial)
        self.reporter.trial(trial)
        self.observer.trial(trial)  # a detached copy; a failing callback is switched off

    def _trial(self, build: BuildResult, run: RunOutcome | None) -> Trial:
        cid = config_id(build.config)
        validation = Validation.SKIPPED
        if run is not None:
            default = self._measured.get(self.default_id)
            is_default = cid == self.default_id
            pa = self.problem.profile_args
            validation = validation_of(pa, run, is_default=is_default, default=default)
        return trial_of(self.view.position(cid), build, run, validation)

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
        if not candidates:
            message = no_winner_message(p.name, trials, default_trial, self.view, self.stop)
            log_path = self._report_end(trials, None, stop_reason, message, default_trial)
            raise NoValidConfigError(
                message + (f"\nfull log: {log_path}" if log_path else ""), trials=trials
            )
        best = min(candidates, key=lambda t: (t.latency_ms, t.index))
        warn_if_busy(p.name, candidates, p.device_type)
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
        if trials is None:  # interrupted or failed: what was measured so far
            trials = tuple(sorted(self._measured.values(), key=lambda t: t.index))
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
                never_tried=never_listed(self.view, self.stop, trials),
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
