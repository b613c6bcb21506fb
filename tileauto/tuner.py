"""The one orchestrator of a tuning run: build in parallel, validate and time, pick, report.

    problem -> [cache] -> Builder.build (parallel, killable) -> Runner.run (isolated worker)
            -> trials (index-aligned with configs) -> best -> AutotuneResult -> [cache]

On a CPU target nothing is timed while compile jobs load the same cores; the run worker starts
(and prepares inputs) while compiling. On a GPU, configs run as soon as they are built.
"""

from __future__ import annotations

import queue
import shutil
import threading
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

from tileauto._logging import get_logger
from tileauto.artifact import KernelArtifact
from tileauto.builder import Builder, BuildRequest, BuildResult, BuildStatus
from tileauto.errors import NoValidConfigError
from tileauto.problem import TuningOutcome, TuningProblem
from tileauto.records import LatencyStats, Trial, TrialStatus
from tileauto.report import failure_summary, format_table, write_log
from tileauto.run_session import SessionSpec
from tileauto.runner import Runner
from tileauto.space import baseline_config, config_id, full_config, tunable_parameters
from tileauto.utils.procs import Worker

log = get_logger("tuner")

_BUILD_STATUS = {
    BuildStatus.ERROR: TrialStatus.COMPILE_ERROR,
    BuildStatus.TIMEOUT: TrialStatus.COMPILE_TIMEOUT,
    BuildStatus.CRASH: TrialStatus.COMPILE_CRASH,
}


class Tuner:
    """Runs a :class:`TuningProblem` to a :class:`TuningOutcome`."""

    def __init__(self, problem: TuningProblem) -> None:
        self.problem = problem
        p = problem
        self.defaults = tunable_parameters(p.factory)
        keys = {k for c in p.configs for k in c}
        self.full = [full_config(c, self.defaults, keys) for c in p.configs]
        self.default_full = baseline_config(p.configs, self.defaults, keys)
        self.device = "cpu"
        self.workers = 1
        self.compile_wall_s = 0.0
        self.runner: Runner | None = None
        self._run_worker: Worker | None = None  # started early, handed to the runner
        self.by_id: dict[str, dict[str, Any]] = {}
        self.index_of: dict[str, int] = {}
        self._on_trial_failed = False

    def run(self) -> TuningOutcome:
        p = self.problem
        start = time.perf_counter()
        staging = p.settings.staging_dir / f"tune-{uuid.uuid4().hex[:12]}"
        ids = [config_id(c) for c in self.full]
        default_id = config_id(self.default_full)
        unique = list(dict.fromkeys(ids))  # the space in order, each config once
        self.by_id = {config_id(c): c for c in [self.default_full, *self.full]}
        self.index_of = {}  # config id -> first position in the space (-1: the default only)
        for i, cid in enumerate(ids):
            self.index_of.setdefault(cid, i)
        self.workers = max(1, min(p.settings.compile_workers(), len(unique) + 1))
        builder = Builder(
            p.factory,
            p.compile_args,
            workers=self.workers,
            isolation=p.settings.compile_isolation,
            timeout_s=p.settings.compile_timeout_s,
            staging_dir=staging,
        )
        self._start_workers(builder)
        strategy = p.search
        strategy.start(len(unique))
        measured: dict[str, Trial] = {}
        artifacts: dict[str, KernelArtifact] = {}
        proposed: set[int] = set()
        ref_latency = None
        bar = _progress(0, p.verbose, p.name)
        try:
            # round 1 always measures the default config first: the reference and the baseline
            round_ids = [default_id]
            while True:
                picks = [
                    i for i in strategy.propose() if 0 <= i < len(unique) and i not in proposed
                ]
                proposed.update(picks)
                round_ids += [unique[i] for i in picks if unique[i] not in round_ids]
                if not round_ids:
                    break
                self._measure(round_ids, builder, measured, artifacts, default_id, bar)
                if not picks:
                    break
                strategy.observe({i: measured[unique[i]] for i in picks})
                round_ids = []
            if self.runner is not None:
                self._retime(measured, artifacts, default_id)
                ref_latency = self.runner.time_reference(
                    3,
                    10,  # iterations: the reference's latency is informative only
                )
        except BaseException:
            builder.cancel()  # an error or Ctrl-C: stop compiling too, not only running
            raise
        finally:
            bar.close()
            builder.close_forked_workers()
            if self.runner is not None:
                self.runner.close()
            elif self._run_worker is not None:
                self._run_worker.kill()
        for cid in unique:
            if cid not in measured and cid not in p.known_trials:
                measured[cid] = Trial(
                    -1,
                    self.by_id[cid],
                    TrialStatus.NOT_RUN,
                    error=f"not proposed by {strategy.describe()}",
                )
        order = [default_id, *unique]
        return self._finish(measured, order, default_id, artifacts, ref_latency, start, staging)

    def _retime(
        self, measured: dict[str, Trial], artifacts: dict[str, KernelArtifact], default_id: str
    ) -> None:
        """Time the best few configs (and the default) again, interleaved, before picking.

        Each config was timed in one block; a slow spell of a shared machine can sink one
        block. Re-timing the contenders in rounds that visit each of them in turn makes the
        comparison between them fair (the same spell hits all of them).
        """
        assert self.runner is not None
        top_k = self.problem.profile_args.retime_top_k
        ranked = sorted(
            (t.latency_ms, cid)
            for cid, t in measured.items()
            if t.ok and t.latency_ms is not None and cid in artifacts and cid != default_id
        )
        chosen = [cid for _, cid in ranked[:top_k]]
        if top_k < 2 or len(chosen) < 2:
            return
        if default_id in artifacts and measured[default_id].ok:
            chosen.append(default_id)  # the baseline of every speedup, timed the same way
        start = time.perf_counter()
        samples = self.runner.retime(
            [(artifacts[c], measured[c].config) for c in chosen], rounds=10
        )
        if samples is None:
            return
        share = (time.perf_counter() - start) / len(chosen)
        for cid, got in zip(chosen, samples, strict=True):
            if got:
                t = measured[cid]
                measured[cid] = replace(
                    t,
                    latency=LatencyStats.from_samples_ns(got),
                    run_s=(t.run_s or 0.0) + share,
                    notes=(*t.notes, f"re-timed interleaved with the best {len(chosen)}"),
                )

    def _measure(
        self,
        round_ids: list[str],
        builder: Builder,
        measured: dict[str, Trial],
        artifacts: dict[str, KernelArtifact],
        default_id: str,
        bar: Any,
    ) -> None:
        """Build one round in parallel and run each config (CPU: after all its compiles)."""
        p = self.problem
        start = time.perf_counter()
        for cid in round_ids:
            if cid in p.known_trials and cid != default_id:
                self._record(measured, cid, p.known_trials[cid])  # measured by an earlier run
        to_build = [cid for cid in round_ids if cid not in measured]
        requests = [
            BuildRequest(index=k, config=self.by_id[cid], args=p.args, kwargs=p.kwargs)
            for k, cid in enumerate(to_build)
        ]
        bar.total = (bar.total or 0) + 2 * len(requests)
        arrivals: queue.Queue[BuildResult | None] = queue.Queue()
        thread = threading.Thread(
            target=self._build_all, args=(builder, requests, arrivals), daemon=True
        )
        thread.start()
        pending: dict[str, BuildResult] = {}
        while True:
            result = arrivals.get()
            if result is None:
                break
            cid = to_build[result.index]
            bar.update(1)
            pending[cid] = result
            if result.ok and result.artifact is not None:
                artifacts[cid] = result.artifact
                if self.runner is None:
                    self.device = result.artifact.device_type
                    self.runner = self._make_runner(result.artifact)
            # a GPU runs configs as they arrive; a CPU waits until nothing else loads its cores
            if (
                self.device != "cpu"
                and self.runner is not None
                and (default_id in measured or default_id in pending)
            ):
                self._run_pending(self.runner, pending, measured, default_id, bar, round_ids)
        thread.join()
        self.compile_wall_s += time.perf_counter() - start
        if self.runner is not None:
            self._run_pending(self.runner, pending, measured, default_id, bar, round_ids)
        for cid, result in pending.items():
            self._record(measured, cid, self._trial(result, None))

    # -- phases ----------------------------------------------------------------------------
    def _start_workers(self, builder: Builder) -> None:
        """Fork the compile workers and the run worker now, if this process allows it.

        Done here, on the caller's thread before this run starts any thread; see
        :meth:`Builder.fork_unsafe_reason`. Otherwise workers start from the forkserver as
        they are needed.
        """
        if not builder.start_workers():
            return
        p = self.problem
        worker = Runner.make_worker(
            "cpu", p.settings.run_threads(), p.settings.run_memory_limit_mb, fork_ok=True
        )
        worker.start()
        self._run_worker = worker

    def _build_all(
        self, builder: Builder, requests: list[BuildRequest], arrivals: queue.Queue
    ) -> None:
        try:
            builder.build(requests, on_result=arrivals.put)
        finally:
            arrivals.put(None)

    def _make_runner(self, artifact: KernelArtifact) -> Runner:
        p = self.problem
        pa = p.profile_args
        inplace = _inplace_positions(pa.inplace_args, artifact)
        spec = SessionSpec(
            params=artifact.params,
            out_pos=artifact.out_idx,
            device=artifact.device_type,
            captured=[
                t.detach().cpu().clone() if hasattr(t, "detach") else t  # scalars by value
                for t in p.captured_inputs
            ]
            if p.captured_inputs
            else None,
            supply_prog=pa.supply_prog,
            supply_type=pa.supply_type,
            seed=pa.seed,
            ref_prog=pa.ref_prog,
            manual_check_prog=pa.manual_check_prog,
            skip_check=pa.skip_check,
            rtol=pa.rtol,
            atol=pa.atol,
            max_mismatched_ratio=pa.max_mismatched_ratio,
            inplace_args=inplace,
            warmup=pa.warmup,
            rep=pa.rep,
            warmup_iters=pa.warmup_iters,
            rep_iters=pa.rep_iters,
            flush=pa.flush_cache if artifact.device_type == "cuda" else (pa.flush_cache or None),
            timer=p.timer,
            threads=p.settings.run_threads(),
            pre_hook=pa.pre_hook,
            post_hook=pa.post_hook,
        )
        worker, self._run_worker = self._run_worker, None
        if worker is not None and artifact.device_type != "cpu":
            worker.kill()
            worker = None
        runner = Runner(
            spec,
            timeout_s=pa.timeout,
            threads=p.settings.run_threads(),
            memory_limit_mb=p.settings.run_memory_limit_mb,
            worker=worker,
        )
        runner.start()
        return runner

    def _run_pending(
        self,
        runner: Runner,
        pending: dict[str, BuildResult],
        measured: dict[str, Trial],
        default_id: str,
        bar: Any,
        order: list[str],
    ) -> None:
        """Run every built config not yet run, the default first, in space order."""
        p = self.problem
        for cid in sorted(pending, key=lambda c: (c != default_id, order.index(c))):
            result = pending.pop(cid)
            if not result.ok or result.artifact is None:
                self._record(measured, cid, self._trial(result, None))
                bar.update(1)
                continue
            is_default = cid == default_id
            reuse = p.known_trials.get(cid)
            if reuse is not None and is_default:
                # measured before (cache): run once only to produce the reference outputs
                run = runner.run(result.artifact, result.config, is_reference=True, time_it=False)
                self._record(measured, cid, reuse if run.status.ok else self._trial(result, run))
            else:
                run = runner.run(result.artifact, result.config, is_reference=is_default)
                self._record(measured, cid, self._trial(result, run))
            bar.update(1)
            bar.set_postfix_str(_postfix(measured))

    def _record(self, measured: dict[str, Trial], cid: str, trial: Trial) -> None:
        """Keep a config's trial, at its index in the space, and report it to ``on_trial``."""
        trial = trial.at_index(self.index_of.get(cid, -1))
        measured[cid] = trial
        on_trial = self.problem.profile_args.on_trial
        if on_trial is None:
            return
        try:
            on_trial(trial)
        except Exception as exc:  # noqa: BLE001 - a progress callback must not stop tuning
            if not self._on_trial_failed:
                self._on_trial_failed = True
                log.warning("on_trial raised %s: %s (tuning goes on)", type(exc).__name__, exc)

    def _trial(self, build: BuildResult, run: Any) -> Trial:
        if not build.ok:
            return Trial(
                index=-1,
                config=build.config,
                status=_BUILD_STATUS[build.status],
                compile_s=build.compile_s,
                error=build.error,
            )
        if run is None:
            return Trial(
                -1,
                build.config,
                TrialStatus.NOT_RUN,
                compile_s=build.compile_s,
                error="no run worker was available",
            )
        latency = (
            LatencyStats.from_samples_ns(run.samples_ns)
            if run.status.ok and run.samples_ns
            else None
        )
        status = run.status
        error = run.error
        if status.ok and latency is None:
            status, error = TrialStatus.RUN_ERROR, "the timer returned no samples"
        return Trial(
            -1, build.config, status, latency, build.compile_s, run.run_s, error, run.notes
        )

    def _finish(
        self,
        measured: dict[str, Trial],
        order: list[str],
        default_id: str,
        artifacts: dict[str, KernelArtifact],
        ref_latency: float | None,
        start: float,
        staging: Path,
    ) -> TuningOutcome:
        p = self.problem
        for cid, trial in p.known_trials.items():
            measured.setdefault(cid, trial)
        trials = tuple(measured[config_id(c)].at_index(i) for i, c in enumerate(self.full))
        default_trial = measured[default_id]
        default_index = next((i for i, c in enumerate(self.full) if config_id(c) == default_id), -1)
        default_trial = default_trial.at_index(default_index)
        # The winner comes from the user's space; the default config is the baseline only.
        candidates = [t for t in trials if t.ok]
        elapsed = time.perf_counter() - start
        if not candidates:
            table = format_table(
                trials, None, default_trial, title=f"autotune {p.name}: no config passed"
            )
            log_path = write_log(
                p.settings.logs_dir, p.name, table, trials, {"default": default_trial.to_json()}
            )
            shutil.rmtree(staging, ignore_errors=True)
            raise NoValidConfigError(
                f"autotune {p.name}: none of the {len(trials)} configs passed"
                + (
                    ""
                    if default_trial.ok or default_index >= 0
                    else f" (the default config: {default_trial.reason})"
                )
                + f":\n{failure_summary(trials)}"
                + (f"\nfull log: {log_path}" if log_path else ""),
                trials=trials,
            )
        best = min(candidates, key=lambda t: (t.latency_ms, t.index))
        title = f"autotune {p.name}: {len(trials)} configs, {sum(t.ok for t in trials)} passed, {elapsed:.1f} s"
        table = format_table(trials, best.index, default_trial, title=title)
        log_path = write_log(
            p.settings.logs_dir,
            p.name,
            table,
            trials,
            {
                "default": default_trial.to_json(),
                "ref_latency_ms": ref_latency,
                "best": best.to_json(),
            },
        )
        if p.verbose:
            print(table + (f"\nlog: {log_path}" if log_path else ""), flush=True)
        return TuningOutcome(
            trials=trials,
            default_trial=default_trial,
            best=best,
            best_artifact=artifacts.get(config_id(best.config)),
            ref_latency_ms=ref_latency,
            tuning_s=elapsed,
            log_path=log_path,
            staging=staging,
            compile_wall_s=self.compile_wall_s,
            workers=self.workers,
        )


def _postfix(measured: dict[str, Trial]) -> str:
    ok = [t for t in measured.values() if t.ok and t.latency_ms is not None]
    best = min((t.latency_ms for t in ok), default=None)  # type: ignore[type-var]
    return f"best {best:.4f} ms" if best is not None else "no valid config yet"


class _NoBar:
    total = 0

    def update(self, n: int = 1) -> None: ...
    def set_postfix_str(self, s: str) -> None: ...
    def close(self) -> None: ...


def _progress(total: int, verbose: bool, name: str) -> Any:
    if not verbose:
        return _NoBar()
    from tqdm.auto import tqdm

    class Bar(tqdm):
        # No monitor thread: it outlives the bar, and a live thread stops the next tuning of
        # this process from forking its workers (see Builder.fork_unsafe_reason).
        monitor_interval = 0

    return Bar(total=total, desc=f"autotune {name}", unit="step", leave=False, disable=None)


def _inplace_positions(
    inplace_args: tuple[int, ...] | None, artifact: KernelArtifact
) -> tuple[int, ...] | None:
    """``inplace_args`` checked against the kernel's inputs (negative counts from the end).

    Raises:
        ValueError: a position is not one of the kernel's inputs (names them), before any
            config is run, instead of an IndexError in every config.
    """
    if inplace_args is None:
        return None
    inputs = [p.name for i, p in enumerate(artifact.params) if i not in set(artifact.out_idx)]
    bad = [k for k in inplace_args if not -len(inputs) <= k < len(inputs)]
    if bad:
        raise ValueError(
            f"inplace_args={list(inplace_args)}: {bad} {'is' if len(bad) == 1 else 'are'} not "
            f"input positions; the kernel's {len(inputs)} inputs are "
            f"{', '.join(f'{k}: {n}' for k, n in enumerate(inputs))}"
        )
    return tuple(dict.fromkeys(k % len(inputs) for k in inplace_args))
