"""The parent's side of running configs: one isolated run worker per device, replaced on failure.

A config that segfaults, hangs past its timeout or exhausts memory becomes a failed result with
its reason; the worker is replaced and the next config runs. The new worker makes the inputs
again, and the reference on them: ``ref_prog`` again, or the default config run again (a
``supply_prog`` need not make the same inputs twice: the old reference would not fit them).
"""

from __future__ import annotations

import dataclasses
import os
import threading
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from tileauto.artifact import KernelArtifact
from tileauto.jit.thread_pool import SPIN_VAR
from tileauto.options import ProfileArgs
from tileauto.records import RunOutcome, TrialStatus
from tileauto.run import worker as run_worker
from tileauto.run.session import RunRequest, SessionSpec, config_key
from tileauto.run.worker import spec_signature
from tileauto.utils.threads import background_thread
from tileauto.workers.procs import (
    RemoteJobError,
    Worker,
    WorkerCancelled,
    WorkerCrashed,
    WorkerTimeout,
    fork_unsafe_reason,
)


class Runner:
    """Validates and times configs in an isolated worker process (the local run stage).

    Made before anything is built; :meth:`prepare` gets the first built config, from which
    the session spec (parameters, outputs, device) is made and the worker prepares inputs and
    the reference in the background while the other configs compile.

    Args:
        profile: the tuning's profile arguments (the worker gets ``profile.for_worker()``).
        threads: CPU threads for the worker (TVM_NUM_THREADS, torch threads).
        memory_limit_mb: see ``TILEAUTO_RUN_MEMORY_LIMIT_MB``.
        device: the target's device type, to start the worker before the first build.
        captured: inputs captured with ``set_autotune_inputs`` (copied to the worker).
        timer: a custom timer (see :mod:`tileauto.run.timing`).
    """

    def __init__(
        self,
        profile: ProfileArgs,
        *,
        threads: int,
        memory_limit_mb: int = -1,
        device: str = "cpu",
        captured: Sequence[Any] | None = None,
        timer: Any = None,
    ) -> None:
        self.profile = profile
        self.timeout_s = profile.timeout
        self.threads = threads
        self.memory_limit_mb = memory_limit_mb
        self.device = device
        self.captured = captured
        self.timer = timer
        self.worker: Worker | None = None
        self.spec: SessionSpec | None = None
        # One session per kernel signature (configs may differ in a buffer's shape or dtype),
        # each set up in the worker the first time a config of that signature runs.
        self.first = ""
        self.specs: dict[str, SessionSpec] = {}
        self._ready: set[str] = set()  # signatures set up in the current worker
        self._setup_errors: dict[str, Exception] = {}  # a failed setup fails its later runs too
        self.reference_signature = ""  # where the default config ran
        # the default config's run, by signature: run again to make the reference in a new worker
        self._reference_runs: dict[str, RunRequest] = {}
        self._setup_lock = threading.Lock()
        # each config's warm-up and timed calls in its first timing: its re-timing (in a new
        # worker too, or on another Ray actor) makes as many (shared with a Ray runner's lanes)
        self.iters: dict[str, tuple[int, int]] = {}

    # -- the run stage ----------------------------------------------------------------------
    def start(self) -> None:
        """Fork the run worker now when the device is the CPU and this process allows it.

        Call it on the caller's thread before any other thread starts (see
        :func:`tileauto.workers.procs.fork_unsafe_reason`); otherwise the worker starts from
        the forkserver in :meth:`prepare`.
        """
        if self.device == "cpu" and self.worker is None and fork_unsafe_reason() is None:
            self.worker = self.make_worker("cpu", self.threads, self.memory_limit_mb, fork_ok=True)
            self.worker.start()

    def prepare(self, artifact: KernelArtifact) -> None:
        """Make the session spec from the first built config and set it up in the background.

        Raises:
            ValueError: ``inplace_args`` names positions that are not the kernel's inputs.
        """
        if self.spec is not None:
            return
        pa = self.profile
        self.spec = SessionSpec(
            params=artifact.params,
            out_pos=artifact.out_idx,
            device=artifact.device_type,
            profile=pa.for_worker(),
            captured=[
                t.detach().cpu().clone() if hasattr(t, "detach") else t  # scalars by value
                for t in self.captured
            ]
            if self.captured
            else None,
            inplace_args=_inplace_positions(pa.inplace_args, artifact),
            flush=pa.flush_cache if artifact.device_type == "cuda" else (pa.flush_cache or None),
            timer=self.timer,
            threads=self.threads,
        )
        self.first = self.reference_signature = spec_signature(self.spec)
        self.specs[self.first] = self.spec
        if self.worker is not None and artifact.device_type != self.device:
            self.worker.kill()  # forked for the CPU; a GPU needs a fresh process
            self.worker = None
        self.device = artifact.device_type
        if self.worker is None:
            self.worker = self.make_worker(self.device, self.threads, self.memory_limit_mb)

        def setup_now() -> None:
            try:
                self.ensure_setup()
            except Exception:  # noqa: BLE001 - raised again by the first run
                pass

        background_thread(setup_now, name="tileauto-run-setup")

    @staticmethod
    def make_worker(
        device: str, threads: int, memory_limit_mb: int = -1, *, fork_ok: bool = False
    ) -> Worker:
        """The run worker for ``device`` (``fork_ok`` only for the CPU: see Worker)."""
        env = {"TVM_NUM_THREADS": str(threads), "OMP_NUM_THREADS": str(threads)}
        if device == "cpu" and SPIN_VAR in os.environ:  # yours, or the busy-machine rule's
            env[SPIN_VAR] = os.environ[SPIN_VAR]
        limit = memory_limit_mb * 2**20 if memory_limit_mb > 0 else None
        return Worker(
            f"run-{device}", env=env, memory_limit_bytes=limit, fork_ok=fork_ok and device == "cpu"
        )

    def ensure_setup(self, key: str | None = None) -> None:
        """Set up the session of signature ``key`` unless it already is (thread-safe).

        A setup that failed is not tried again (a hung ``ref_prog`` would hang again): its
        error is raised at once.
        """
        key = self.first if key is None else key
        with self._setup_lock:
            if key in self._setup_errors:
                raise self._setup_errors[key]
            assert self.worker is not None, "prepare() comes first"
            if not self.worker.alive:
                self._ready.clear()  # a worker that died between jobs lost its sessions
            if key not in self._ready:
                self.setup(key)

    def setup(self, key: str | None = None) -> None:
        """Send the session (inputs, then the reference) to the worker.

        Making the inputs (``supply_prog``) and computing the reference (``ref_prog``) each
        obey the tuning's ``timeout``; past it the worker is killed and the error says which.

        Raises:
            InputSupplyError: the inputs could not be made in time.
            TileautoError: ``ref_prog`` did not return in time, or the worker crashed; or the
                user's own error from ``supply_prog``.
        """
        key = self.first if key is None else key
        spec = self.specs[key]
        rerun = self._reference_runs.get(key)
        try:
            sent = spec if rerun is None else _without_reference(spec)
            self._setup_step(run_worker.setup, (sent, False), self._inputs_name())
            if spec.profile.ref_prog is not None and not spec.profile.skip_check:
                self._setup_step(run_worker.compute_reference, (key,), "ref_prog")
            if rerun is not None:
                self._remake_reference(key, rerun)
        except WorkerCancelled:
            raise  # an interrupt, not a property of this setup: not remembered
        except Exception as exc:
            self._setup_errors[key] = exc
            raise
        self._ready.add(key)

    def _spec_for(self, artifact: KernelArtifact) -> str:
        """The signature of ``artifact``, with a session spec made for it if it is new."""
        if self.spec is None:
            self.prepare(artifact)
        assert self.spec is not None
        key = run_worker.artifact_signature(artifact)
        if key not in self.specs:
            self.specs[key] = dataclasses.replace(
                self.spec,
                params=artifact.params,
                out_pos=artifact.out_idx,
                reference=None,
                reference_inplace=None,
            )
        return key

    def _inputs_name(self) -> str:
        return "supply_prog" if self.profile.supply_prog is not None else "making the inputs"

    def _setup_step(self, fn: Callable[..., None], args: tuple, what: str) -> None:
        """One setup job under the tuning's timeout, its failure turned into a clear error."""
        from tileauto import errors

        kind = errors.InputSupplyError if what != "ref_prog" else errors.TileautoError
        assert self.worker is not None
        try:
            self.worker.call(fn, *args, timeout_s=self.timeout_s)
        except RemoteJobError as exc:
            raise _unwrap(exc) from None
        except WorkerTimeout:
            raise kind(
                f"{what} did not finish within the tuning's timeout of {self.timeout_s:g} s; the "
                "run worker was killed. Make it faster, or raise timeout= in the profile "
                "arguments"
            ) from None
        except WorkerCrashed as exc:
            raise kind(f"{what} crashed the run worker: {exc}") from None

    def run(
        self,
        artifact: KernelArtifact,
        config: dict,
        *,
        is_reference: bool = False,
        time_it: bool = True,
    ) -> RunOutcome:
        """Validate and time one compiled config; failures come back as statuses.

        Raises:
            TileautoError: the run worker died or hung in a program of the user's (a check
                program, a hook), which no config can run without; or the session's setup
                failed (see :meth:`setup`).
        """
        from tileauto.errors import InputSupplyError

        key = self._spec_for(artifact)
        try:
            self.ensure_setup(key)
        except InputSupplyError as exc:
            if key == self.first:
                raise  # the default config's inputs: no config can run
            # a config whose kernel takes other shapes than the inputs given (a padded one)
            return RunOutcome(TrialStatus.RUN_ERROR, error=f"its inputs do not fit: {exc}")
        if is_reference:
            self.reference_signature = key
        request = RunRequest(
            artifact=artifact, config=config, is_reference=is_reference, time_it=time_it
        )
        assert self.worker is not None
        try:
            outcome: RunOutcome = self.worker.call(
                run_worker.check_and_time, request, timeout_s=self.timeout_s
            )
        except WorkerCancelled:
            return RunOutcome(TrialStatus.CANCELLED, error="cancelled (the tuning was interrupted)")
        except WorkerTimeout as exc:
            failed = self._replaced(
                TrialStatus.TIMEOUT,
                f"timed out after {self.timeout_s:g} s; the run worker was killed and replaced",
            )
            return self._unless_in_program(exc, config, failed)
        except WorkerCrashed as exc:
            status = TrialStatus.OUT_OF_MEMORY if exc.out_of_memory else TrialStatus.CRASH
            failed = self._replaced(status, f"{exc}; the run worker was replaced")
            return self._unless_in_program(exc, config, failed)
        except RemoteJobError as exc:
            status = (
                TrialStatus.OUT_OF_MEMORY if exc.remote.out_of_memory else TrialStatus.RUN_ERROR
            )
            return RunOutcome(status, error=f"{exc.remote.type_name}: {exc.remote.message}")
        if outcome.reference is not None:
            self._keep_reference(key, outcome)
            self._reference_runs[key] = dataclasses.replace(request, time_it=False)
        if outcome.iters is not None:
            self.iters[config_key(config)] = outcome.iters
        return dataclasses.replace(outcome, reference=None, reference_inplace=None)

    def _unless_in_program(
        self, exc: WorkerTimeout | WorkerCrashed, config: Any, failed: RunOutcome
    ) -> RunOutcome:
        """``failed``, the config's own crash or timeout, unless the worker was in one of the
        user's programs then (``exc.phase``: ``manual_check_prog``, ``ref_prog``, a hook).

        Such a program's death is not the config's: it raises, and the tuning stops. A check
        program that crashes or hangs checks nothing; taken for the config's failure, it would
        fail the default config, and the configs after it would be compared with nothing and
        pass unchecked, however wrong.

        Raises:
            TileautoError: the program crashed the run worker, or ran past the timeout; the
                message names it, the config it ran for, and what the worker wrote.
        """
        if exc.phase is None:
            return failed
        raise _program_failure(exc, exc.phase, config, self.timeout_s) from None

    def _keep_reference(self, key: str, outcome: RunOutcome) -> None:
        """The default config's outputs, kept with the spec: the fallback of a new worker whose
        run of the default fails (:meth:`_remake_reference`)."""
        self.specs[key] = dataclasses.replace(
            self.specs[key],
            reference=outcome.reference,
            reference_inplace=outcome.reference_inplace,
        )

    def _remake_reference(self, key: str, request: RunRequest) -> None:
        """In a new worker, whose inputs were made again: run the default config on them again
        to make the reference (not checked, not timed). Should that run fail this time, the
        reference kept from the first worker is used, as before (right when the inputs are
        the same: seeded); a worker that died with it is set up again from the start."""
        assert self.worker is not None
        try:
            outcome = self.worker.call(run_worker.check_and_time, request, timeout_s=self.timeout_s)
        except WorkerCancelled:
            raise
        except (WorkerTimeout, WorkerCrashed) as exc:
            if exc.phase is not None:  # a check program's, not the run's: as in run()
                raise _program_failure(exc, exc.phase, request.config, self.timeout_s) from None
            outcome = None  # a timeout or a crash killed the worker: a new one starts below
        except RemoteJobError:
            outcome = None
        if outcome is not None and outcome.reference is not None:
            self._keep_reference(key, outcome)
            return
        spec = self.specs[key]
        if self.worker.alive:
            reference = (key, spec.reference, spec.reference_inplace)
            self._setup_step(run_worker.keep_reference, reference, "reference")
        else:
            self._setup_step(run_worker.setup, (spec, False), self._inputs_name())

    def retime(
        self, items: Sequence[tuple[KernelArtifact, dict]], rounds: int
    ) -> list[tuple[float, ...]] | RunOutcome | None:
        """Interleaved re-timing of validated configs: samples per item; the failure when the
        worker died, timed out or raised in it (a config crashed, hung, or its kernel or the
        timer raised: the worker is replaced); None when it could not re-time (a setup
        failed)."""
        requests = [
            RunRequest(artifact=a, config=c, iters=self.iters.get(config_key(c))) for a, c in items
        ]
        timeout_s = self.timeout_s * len(items)
        try:
            for key in dict.fromkeys(self._spec_for(a) for a, _ in items):
                self.ensure_setup(key)
            assert self.worker is not None
            return self.worker.call(run_worker.retime, requests, rounds, timeout_s=timeout_s)
        except WorkerTimeout as exc:
            message = f"timed out after {timeout_s:g} s; the run worker was killed and replaced"
            failed = self._replaced(TrialStatus.TIMEOUT, message)
            return self._unless_in_program(exc, [c for _, c in items], failed)  # a hook's
        except WorkerCrashed as exc:
            if isinstance(exc, WorkerCancelled):  # killed from outside: not the config's doing
                status = TrialStatus.CANCELLED
            else:
                status = TrialStatus.OUT_OF_MEMORY if exc.out_of_memory else TrialStatus.CRASH
            failed = self._replaced(status, f"{exc}; the run worker was replaced")
            if isinstance(exc, WorkerCancelled):
                return failed
            return self._unless_in_program(exc, [c for _, c in items], failed)
        except RemoteJobError as exc:  # the config's failure, as in run(): not "could not re-time"
            remote = exc.remote
            status = TrialStatus.OUT_OF_MEMORY if remote.out_of_memory else TrialStatus.RUN_ERROR
            # replaced: a GPU error from a race (an illegal address) leaves the device unusable
            message = f"{remote.type_name}: {remote.message}; the run worker was replaced"
            return self._replaced(status, message)
        except Exception:  # noqa: BLE001 - keep the first measurements
            return None

    def time_reference(self, warmup: int = 3, rep: int = 10) -> float | None:
        """Median latency (ms) of ref_prog, or None without one (or if it fails).

        A few iterations only: the reference's latency is informative, never compared.
        """
        if self.profile.ref_prog is None or self.spec is None:
            return None
        key = self.reference_signature
        try:
            self.ensure_setup(key)
            assert self.worker is not None
            return self.worker.call(
                run_worker.time_reference, warmup, rep, key, timeout_s=self.timeout_s
            )
        except Exception:  # noqa: BLE001 - the reference latency is informative only
            return None

    def close(self) -> None:
        """Stop the run worker (it holds nothing worth a graceful exit)."""
        self.kill()

    def kill(self) -> None:
        """Kill the run worker and everything it started, now."""
        if self.worker is not None:
            self.worker.kill()

    def _replaced(self, status: TrialStatus, message: str) -> RunOutcome:
        assert self.worker is not None
        self.worker.kill()
        self._ready.clear()
        return RunOutcome(status, error=message)


def _program_failure(
    exc: WorkerTimeout | WorkerCrashed, program: str, config: Any, timeout_s: float
) -> Exception:
    """The error that stops a tuning whose run worker died or hung in ``program``, one of the
    user's (see :meth:`Runner._unless_in_program`)."""
    from tileauto import errors

    # a check that cannot run checks nothing: no config may pass as if it had
    stops = "it runs for every config, so the tuning stops (no config passes unchecked)"
    # a list: the configs re-timed together (each given the timeout), not one config's run
    many = isinstance(config, list)
    where = f"while re-timing configs {config}" if many else f"on config {config}"
    if isinstance(exc, WorkerTimeout):
        limit = (
            f"{timeout_s * len(config):g} s ({timeout_s:g} s for each of the {len(config)})"
            if many
            else f"{timeout_s:g} s"
        )
        return errors.TileautoError(
            f"{program} did not return within the tuning's timeout of {limit} ({where}) and "
            f"the run worker was killed; {stops}: make {program} faster, or raise timeout= in "
            "the profile arguments"
        )
    return errors.TileautoError(
        f"{program} crashed the run worker ({exc.cause}) {where}; {stops}: fix "
        f"{program}{exc.output}"
    )


def _without_reference(spec: SessionSpec) -> SessionSpec:
    return dataclasses.replace(spec, reference=None, reference_inplace=None)


def _unwrap(exc: RemoteJobError) -> Exception:
    """Re-raise a setup failure as the user's kind of error, with the worker's message."""
    from tileauto import errors

    kind = getattr(errors, exc.remote.type_name, None)
    if isinstance(kind, type) and issubclass(kind, Exception):
        return kind(exc.remote.message)
    return errors.TileautoError(
        f"preparing the tuning inputs failed: {exc.remote.type_name}: {exc.remote.message}"
    )


def _inplace_positions(
    inplace_args: tuple[int, ...] | None, artifact: KernelArtifact
) -> tuple[int, ...] | None:
    """``inplace_args`` checked against the kernel's inputs (negative counts from the end).

    Positions come back sorted, as out_idx's do (a warning when they were not): the written
    inputs are results in input order, whatever the order given.

    Raises:
        ValueError: a position is not one of the kernel's inputs (names them), before any
            config is run, instead of an IndexError in every config.
    """
    if inplace_args is None:
        return None
    params = [p for i, p in enumerate(artifact.params) if i not in set(artifact.out_idx)]
    inputs = [p.name for p in params]
    listed = ", ".join(f"{k}: {n}" for k, n in enumerate(inputs))
    bad = [k for k in inplace_args if not -len(inputs) <= k < len(inputs)]
    if bad:
        raise ValueError(
            f"inplace_args={list(inplace_args)}: {bad} {'is' if len(bad) == 1 else 'are'} not "
            f"input positions; the kernel's {len(inputs)} inputs are {listed}"
        )
    scalars = [k for k in inplace_args if params[k].scalar]
    if scalars:
        names = ", ".join(params[k].name for k in scalars)
        raise ValueError(
            f"inplace_args={list(inplace_args)}: {scalars} name the scalar parameter(s) {names}, "
            f"passed by value: a kernel cannot write them; the kernel's inputs are {listed}"
        )
    given = list(dict.fromkeys(k % len(inputs) for k in inplace_args))
    if given != sorted(given):
        warnings.warn(
            f"inplace_args={list(inplace_args)}: the results are the outputs, then the written "
            f"inputs in input order, {sorted(given)}, and ref_prog's expected results are read "
            f"in that order too (as out_idx is); write inplace_args={sorted(given)} to say so",
            UserWarning,
            stacklevel=2,
        )
    return tuple(sorted(given))
