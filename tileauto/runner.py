"""The parent's side of running configs: one isolated run worker per device, replaced on failure.

A config that segfaults, hangs past its timeout or exhausts memory becomes a failed result with
its reason; the worker is replaced (inputs and reference are sent again) and the next config runs.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from dataclasses import dataclass

from tileauto import run_session
from tileauto.artifact import KernelArtifact
from tileauto.records import TrialStatus
from tileauto.run_session import (
    RunOutcome,
    RunRequest,
    SessionSpec,
    SetupInfo,
    spec_signature,
)
from tileauto.utils.procs import RemoteJobError, Worker, WorkerCrashed, WorkerTimeout


@dataclass(frozen=True)
class RunResult:
    """The outcome of running one config, as the tuner records it."""

    status: TrialStatus
    samples_ns: tuple[float, ...] = ()
    error: str | None = None
    notes: tuple[str, ...] = ()
    run_s: float = 0.0


class Runner:
    """Validates and times configs in an isolated worker process.

    Args:
        spec: inputs, checks and timing settings sent to the worker.
        timeout_s: limit for one config (validation plus timing); past it the worker is killed.
        threads: CPU threads for the worker (TVM_NUM_THREADS, torch threads).
        memory_limit_mb: see ``TILEAUTO_RUN_MEMORY_LIMIT_MB``.
        worker: a worker made by :meth:`make_worker` and started early (else one is made).
    """

    def __init__(
        self,
        spec: SessionSpec,
        *,
        timeout_s: float,
        threads: int,
        memory_limit_mb: int = -1,
        worker: Worker | None = None,
    ) -> None:
        self.spec = spec
        self.timeout_s = timeout_s
        self.worker = worker or self.make_worker(spec.device, threads, memory_limit_mb)
        # One session per kernel signature (configs may differ in a buffer's shape or dtype),
        # each set up in the worker the first time a config of that signature runs.
        self.first = spec_signature(spec)
        self.specs: dict[str, SessionSpec] = {self.first: spec}
        self._ready: set[str] = set()  # signatures set up in the current worker
        self._setup_errors: dict[str, Exception] = {}  # a failed setup fails its later runs too
        self.reference_signature = self.first  # where the default config ran
        self._setup_lock = threading.Lock()
        self.setup_info: SetupInfo | None = None
        self.replacements = 0

    @staticmethod
    def make_worker(
        device: str, threads: int, memory_limit_mb: int = -1, *, fork_ok: bool = False
    ) -> Worker:
        """The run worker for ``device`` (``fork_ok`` only for the CPU: see Worker)."""
        env = {"TVM_NUM_THREADS": str(threads), "OMP_NUM_THREADS": str(threads)}
        limit = memory_limit_mb * 2**20 if memory_limit_mb > 0 else None
        return Worker(
            f"run-{device}", env=env, memory_limit_bytes=limit, fork_ok=fork_ok and device == "cpu"
        )

    def start(self) -> threading.Thread:
        """Start the worker and prepare inputs and reference in the background (while compiling).

        A failure here is not lost: the first :meth:`run` sets up again and raises it.
        """

        def prepare() -> None:
            try:
                self.ensure_setup()
            except Exception:  # noqa: BLE001 - raised again by the first run
                pass

        thread = threading.Thread(target=prepare, daemon=True, name="tileauto-run-setup")
        thread.start()
        return thread

    def ensure_setup(self, key: str | None = None) -> None:
        """Set up the session of signature ``key`` unless it already is (thread-safe).

        A setup that failed is not tried again (a hung ``ref_prog`` would hang again): its
        error is raised at once.
        """
        key = self.first if key is None else key
        with self._setup_lock:
            if key in self._setup_errors:
                raise self._setup_errors[key]
            if not self.worker.alive:
                self._ready.clear()  # a worker that died between jobs lost its sessions
            if key not in self._ready:
                self.setup(key)

    def setup(self, key: str | None = None) -> SetupInfo:
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
        try:
            info = self._setup_step(run_session.setup, (spec, False), self._inputs_name())
            if spec.ref_prog is not None and not spec.skip_check:
                info = self._setup_step(run_session.compute_reference, (key,), "ref_prog")
        except Exception as exc:
            self._setup_errors[key] = exc
            raise
        self._ready.add(key)
        if self.setup_info is None:
            self.setup_info = info
        return info

    def _spec_for(self, artifact: KernelArtifact) -> str:
        """The signature of ``artifact``, with a session spec made for it if it is new."""
        key = run_session.artifact_signature(artifact)
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
        return "supply_prog" if self.spec.supply_prog is not None else "making the inputs"

    def _setup_step(self, fn: Callable[..., SetupInfo], args: tuple, what: str) -> SetupInfo:
        """One setup job under the tuning's timeout, its failure turned into a clear error."""
        from tileauto import errors

        kind = errors.InputSupplyError if what != "ref_prog" else errors.TileautoError
        try:
            return self.worker.call(fn, *args, timeout_s=self.timeout_s)
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
    ) -> RunResult:
        """Validate and time one compiled config; failures come back as statuses."""
        key = self._spec_for(artifact)
        self.ensure_setup(key)
        if is_reference:
            self.reference_signature = key
        request = RunRequest(
            artifact=artifact, config=config, is_reference=is_reference, time_it=time_it
        )
        try:
            outcome: RunOutcome = self.worker.call(
                run_session.run, request, timeout_s=self.timeout_s
            )
        except WorkerTimeout:
            return self._replaced(
                TrialStatus.TIMEOUT,
                f"timed out after {self.timeout_s:g} s; the run worker was killed and replaced",
            )
        except WorkerCrashed as exc:
            status = TrialStatus.OUT_OF_MEMORY if exc.out_of_memory else TrialStatus.CRASH
            return self._replaced(status, f"{exc}; the run worker was replaced")
        except RemoteJobError as exc:
            status = (
                TrialStatus.OUT_OF_MEMORY if exc.remote.out_of_memory else TrialStatus.RUN_ERROR
            )
            return RunResult(status, error=f"{exc.remote.type_name}: {exc.remote.message}")
        if outcome.reference is not None:
            # Kept so a replacement worker gets the same reference without re-running the default.
            self.specs[key] = dataclasses.replace(
                self.specs[key],
                reference=outcome.reference,
                reference_inplace=outcome.reference_inplace,
            )
        return RunResult(
            outcome.status, outcome.samples_ns, outcome.error, outcome.notes, outcome.run_s
        )

    def retime(
        self, items: list[tuple[KernelArtifact, dict]], rounds: int
    ) -> list[tuple[float, ...]] | None:
        """Interleaved re-timing of validated configs (None if the worker failed meanwhile)."""
        requests = [RunRequest(artifact=a, config=c) for a, c in items]
        try:
            for key in dict.fromkeys(self._spec_for(a) for a, _ in items):
                self.ensure_setup(key)
            return self.worker.call(
                run_session.retime, requests, rounds, timeout_s=self.timeout_s * len(items)
            )
        except Exception:  # noqa: BLE001 - keep the first measurements
            return None

    def time_reference(self, warmup: int, rep: int) -> float | None:
        """Median latency (ms) of ref_prog, or None without one (or if it fails)."""
        if self.spec.ref_prog is None:
            return None
        key = self.reference_signature
        try:
            self.ensure_setup(key)
            return self.worker.call(
                run_session.time_reference, warmup, rep, key, timeout_s=self.timeout_s
            )
        except Exception:  # noqa: BLE001 - the reference latency is informative only
            return None

    def close(self) -> None:
        self.worker.kill()

    def _replaced(self, status: TrialStatus, message: str) -> RunResult:
        self.worker.kill()
        self._ready.clear()
        self.replacements += 1
        return RunResult(status, error=message)


def _unwrap(exc: RemoteJobError) -> Exception:
    """Re-raise a setup failure as the user's kind of error, with the worker's message."""
    from tileauto import errors

    kind = getattr(errors, exc.remote.type_name, None)
    if isinstance(kind, type) and issubclass(kind, Exception):
        return kind(exc.remote.message)
    return errors.TileautoError(
        f"preparing the tuning inputs failed: {exc.remote.type_name}: {exc.remote.message}"
    )
