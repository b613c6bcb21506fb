"""The rounds of a tuning: each batch of configs built in parallel, then run, each a trial.

    measure(ids): builder.build(batch) -> arrivals (a thread) -> the default first (the
                  reference) -> runner.run(each) -> record(trial)
    retime():     the best few and the default again, interleaved
    build_winner(): the winner's library when an earlier tuning measured it

On a CPU target nothing is timed while compile jobs load the same cores: a round is built,
then run. On a GPU configs run as soon as they are built, once the default has been.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable
from dataclasses import replace

from tileauto.artifact import KernelArtifact
from tileauto.records import (
    NOT_COMPARED_NOTE,
    BuildRequest,
    BuildResult,
    RunOutcome,
    Trial,
    Validation,
)
from tileauto.space import config_id
from tileauto.space.view import SpaceView
from tileauto.tune._retime import contenders, retime_contenders
from tileauto.tune._trials import trial_of, validation_of
from tileauto.tune.problem import TuningProblem
from tileauto.tune.stages import BuildStage, MultiSlotRunStage, Reporter, RunStage
from tileauto.utils.threads import background_thread

NOT_RETIMED = "not re-timed: its kernel from the earlier run could not be loaded or built"


class Rounds:
    """Measures one tuning's configs with its builder and runner, and keeps what came of them.

    Args:
        problem: the factory's arguments and the profile options (checks, retiming).
        view: the session's view of the space (its configs and their ids).
        builder, runner: the session's stages, started.
        reporter: told each step and each trial.
        known: trials an earlier tuning measured (by config id): recorded, not measured again;
            the default's is run once more for its reference outputs, not timed.
        keep: the session's hand-off of each recorded trial (the store, the reporter, the
            user's on_trial).

    ``measured`` (by config id) and ``artifacts`` (each built config's library) are the
    session's to read; ``compile_wall_s`` sums the time from each round's start until its last
    compile ended.
    """

    def __init__(
        self,
        problem: TuningProblem,
        view: SpaceView,
        builder: BuildStage,
        runner: RunStage,
        reporter: Reporter,
        known: dict[str, Trial],
        keep: Callable[[Trial], None],
        store_again: Callable[[Trial], None] | None = None,
    ) -> None:
        self.problem = problem
        self.view = view
        self.default_id = self.view.default_id
        self.builder = builder
        self.runner = runner
        self.reporter = reporter
        self.known = known
        self.keep = keep
        # a trial recorded before whose measurement changed (it failed when re-timed): stored
        # again, not reported again
        self.store_again = store_again
        self.measured: dict[str, Trial] = {}
        self.artifacts: dict[str, KernelArtifact] = {}
        self.prepared = False  # the runner has its inputs (from the first library built)
        # contenders measured before whose library could not be had: not re-timed, not ranked
        self.unranked: set[str] = set()
        self.compile_wall_s = 0.0

    def measure(self, round_ids: list[str]) -> None:
        """Build one round in parallel and run each config (CPU: after all its compiles)."""
        start = time.perf_counter()
        for cid in round_ids:
            if cid in self.known and cid != self.default_id and self._stands(self.known[cid]):
                self.record(cid, self.known[cid])  # measured by an earlier run
        to_build = [cid for cid in round_ids if cid not in self.measured]
        requests = [self._request(k, cid) for k, cid in enumerate(to_build)]
        self.reporter.steps(2 * len(requests))
        arrivals: queue.Queue[BuildResult | None] = queue.Queue()
        broken: list[BaseException] = []  # the builder itself failed (not a config)

        def build_all() -> None:
            try:
                self.builder.build(requests, arrivals.put)
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
                    self.artifacts[cid] = result.artifact
                    device = result.artifact.device_type
                    if not self.prepared:
                        self.runner.prepare(result.artifact)
                        self.prepared = True
            # a GPU runs configs as they arrive; a CPU waits until nothing else loads its cores
            default_ready = self.default_id in self.measured or self.default_id in pending
            if not built_all and device != "cpu" and self.prepared and default_ready:
                self._run_pending(pending, round_ids)
        thread.join()
        if broken:
            raise broken[0]
        self.compile_wall_s += time.perf_counter() - start
        if self.prepared:
            self._run_pending(pending, round_ids)
        for cid, result in pending.items():
            self.record(cid, self.trial(result, None))
        if self.default_id in self.measured:  # the known passes that do not stand are gone:
            for cid in [c for c, t in self.known.items() if not self._stands(t)]:
                if cid not in self.measured:  # not re-timed, not ranked, never the winner
                    del self.known[cid]

    def _request(self, index: int, cid: str) -> BuildRequest:
        p = self.problem
        return BuildRequest(index=index, config=self.view.config(cid), args=p.args, kwargs=p.kwargs)

    def _run_pending(self, pending: dict[str, BuildResult], order: list[str]) -> None:
        """Run every built config not yet run, the default first, in space order.

        A run stage with several device slots (``run_many``: Ray actors on several nodes or
        GPUs) runs the configs after the default in parallel; they are still recorded and
        reported in this order.
        """
        runner = self.runner
        ordered = sorted(pending, key=lambda c: (c != self.default_id, order.index(c)))
        jobs: list[str] = []  # to be recorded after the default, in this order
        for cid in ordered:
            result = pending[cid]
            if cid == self.default_id and result.ok and result.artifact is not None:
                self._run_default(cid, pending.pop(cid))
            else:
                jobs.append(cid)
        # passes an earlier run could not check, asked for with the default config to be
        # checked: the default failed again, so nothing would check them, and their earlier
        # trials stand (not run again)
        stand = {c for c in jobs if c != self.default_id and self._earlier_stands(c)}
        built = [
            c for c in jobs if c not in stand and pending[c].ok and pending[c].artifact is not None
        ]
        outcomes: dict[str, RunOutcome] = {}
        recorded = 0

        def record_ready() -> None:  # the jobs whose turn has come and whose run is over
            nonlocal recorded
            while recorded < len(jobs):
                cid = jobs[recorded]
                if cid in built and cid not in outcomes:
                    return
                result = pending.pop(cid)
                if cid in stand:
                    self.record(cid, self.known[cid])
                else:
                    self.record(cid, self.trial(result, outcomes.pop(cid, None)))
                self.reporter.step()
                recorded += 1

        if isinstance(runner, MultiSlotRunStage) and len(built) > 1:
            items = [(self.artifacts[c], pending[c].config) for c in built]
            for k, run in runner.run_many(items):
                outcomes[built[k]] = run
                record_ready()
        while recorded < len(jobs):
            cid = jobs[recorded]
            if cid in built and cid not in outcomes:
                outcomes[cid] = runner.run(
                    self.artifacts[cid], pending[cid].config, is_reference=False
                )
            record_ready()

    def _run_default(self, cid: str, result: BuildResult) -> None:
        """The default config: it makes the reference outputs the others are checked against."""
        reuse = self.known.get(cid)
        artifact = self.artifacts[cid]
        if reuse is not None and reuse.ok:
            # passed before (cache): run once only to produce the reference outputs (a
            # failure stored before is measured again: it runs to make the reference anyway)
            run = self.runner.run(artifact, result.config, is_reference=True, time_it=False)
            self.record(cid, reuse if run.status.ok else self.trial(result, run))
        else:
            run = self.runner.run(artifact, result.config, is_reference=True)
            self.record(cid, self.trial(result, run))
        self.reporter.step()

    def retime(self) -> None:
        """Time the best few configs (and the default) again, interleaved, before picking.

        The best of *every* known trial take part: those an earlier run measured (a resumed
        or widened tuning) have no library in this run yet, so theirs is built now (a builder
        behind the kernel cache loads the earlier compile). One whose kernel cannot be had is
        noted and left out of the ranking (``unranked``): its single-block timing is not
        compared with the others' interleaved ones. A run that timed no config itself (every
        measurement borrowed) re-times nothing: it measures nothing again.
        """
        top_k = self.problem.profile_args.retime_top_k
        fresh = any(
            t.ok and cid != self.default_id and cid in self.artifacts
            for cid, t in self.measured.items()
        )
        if not fresh:  # every timing is an earlier run's (a run that re-timed its best): as is
            return
        for cid, trial in self.known.items():  # measured before, not asked for by the search
            if cid not in self.measured and self.view.position(cid) >= 0:
                self.measured[cid] = trial.at_index(self.view.position(cid))
        if top_k >= 2:
            self._load_contenders(contenders(self.measured, self.default_id, top_k))
        before = {cid: t.status for cid, t in self.measured.items()}
        retime_contenders(self.runner, self.measured, self.artifacts, self.default_id, top_k)
        for cid, trial in self.measured.items():
            # failed when re-timed: stored at once, as a later run must not serve its first
            # timing as a pass (the winner is picked from the others, or none passed)
            if trial.status is not before.get(cid) and self.store_again is not None:
                self.store_again(trial)

    def _load_contenders(self, chosen: list[str]) -> None:
        """Build (or load from the kernel cache) the libraries of contenders measured by an
        earlier run; note and leave unranked each that cannot be had."""
        missing = [cid for cid in chosen if cid not in self.artifacts]
        if len(chosen) < 2 or not missing:
            return
        built: list[BuildResult] = []
        self.builder.build([self._request(k, cid) for k, cid in enumerate(missing)], built.append)
        errors = {cid: "it was not built" for cid in missing}
        for result in built:
            cid = missing[result.index]
            if result.ok and result.artifact is not None:
                self.artifacts[cid] = result.artifact
                del errors[cid]
            else:
                errors[cid] = f"{result.status.value}: {result.error}"
        for cid, why in errors.items():
            self.unranked.add(cid)
            t = self.measured[cid]
            self.measured[cid] = replace(
                t, notes=(*t.notes, f"{NOT_RETIMED} ({why}): not ranked against those re-timed")
            )

    def build_winner(self) -> None:
        """The winner, when an earlier run measured it, has no library here: build it while
        the builder is open (a builder behind the kernel cache loads the earlier compile)."""

        def rank(cid: str, trial: Trial) -> tuple[float, int]:
            return (trial.latency_ms or 0.0, self.view.position(cid))

        pool = {**self.known, **self.measured}
        ranked = sorted(
            (rank(cid, t), cid)
            for cid, t in pool.items()
            if t.ok
            and t.latency_ms is not None
            and self.view.position(cid) >= 0
            and cid not in self.unranked
        )
        if not ranked or ranked[0][1] in self.artifacts:
            return
        cid = ranked[0][1]
        built: list[BuildResult] = []
        self.builder.build([self._request(0, cid)], built.append)
        if built and built[0].ok and built[0].artifact is not None:
            self.artifacts[cid] = built[0].artifact

    def unchecked(self, trial: Trial) -> bool:
        """Whether an earlier run's trial is a pass that was checked against nothing because
        that run had no reference (its default config failed before its outputs were kept):
        the search measures it again (see :meth:`_stands`)."""
        pa = self.problem.profile_args
        if pa.skip_check or not trial.ok or trial.validation is not Validation.SKIPPED:
            return False
        # one compared with nothing for a reason of its own (its buffers differ) is as it was
        return not any(n.startswith(NOT_COMPARED_NOTE) for n in trial.notes)

    def _earlier_stands(self, cid: str) -> bool:
        """Whether ``cid`` has an earlier run's trial that is this run's too (:meth:`_stands`)."""
        trial = self.known.get(cid)
        return trial is not None and self._stands(trial)

    def _stands(self, trial: Trial) -> bool:
        """Whether an earlier run's trial is this run's too: every one but an unchecked pass
        where this run has or may have a reference (a ``ref_prog``, or a default config that
        passed or is not measured yet): that config is measured again, and checked."""
        if not self.unchecked(trial):
            return True
        if self.problem.profile_args.ref_prog is not None:
            return False
        default = self.measured.get(self.default_id)
        return default is not None and not default.ok

    def record(self, cid: str, trial: Trial) -> None:
        """Keep a config's trial, complete (its index in the space), and report it."""
        trial = trial.at_index(self.view.position(cid))
        self.measured[cid] = trial
        self.keep(trial)

    def trial(self, build: BuildResult, run: RunOutcome | None) -> Trial:
        """The trial of a build and its run (None: not run), checked as the options say."""
        cid = config_id(build.config)
        validation = Validation.SKIPPED
        if run is not None:
            default = self.measured.get(self.default_id)
            is_default = cid == self.default_id
            pa = self.problem.profile_args
            validation = validation_of(pa, run, is_default=is_default, default=default)
        return trial_of(self.view.position(cid), build, run, validation)
