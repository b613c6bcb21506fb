"""The run worker: hold each kernel signature's inputs and reference, check and time configs.

The parent sends one :class:`SessionSpec` per kernel signature (``setup``) and one
:class:`RunRequest` per config (``check_and_time``). The jobs are module functions (a worker
is sent a job by name) acting on the process's one :class:`RunWorker`. They run inside the
isolated run worker: a config that crashes or hangs takes only that process down, and the
user's tensors are never touched (every config gets fresh clones of the worker's copies).
While one of the user's programs runs (``ref_prog``, ``manual_check_prog``, the hooks), the
worker says so (:func:`tileauto.workers.phase.job_phase`): a crash or a hang there is that
program's, not the config's.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from tileauto.artifact import KernelArtifact, ParamSpec
from tileauto.jit import launcher
from tileauto.options import ProfileArgs
from tileauto.records import NOT_COMPARED_NOTE, RunOutcome, TrialStatus
from tileauto.run._busy import busy_note, runqueue_wait_s
from tileauto.run.buffers import canaries_intact, interleave, padded_clones, padded_outputs
from tileauto.run.check import (
    as_tensor,
    check_outputs,
    checker_form,
    checker_results,
    clones,
    first_unwritten,
    own_work,
)
from tileauto.run.inputs import make_inputs
from tileauto.run.session import RunRequest, RunSession, SessionSpec, config_key
from tileauto.run.timing import Flush, default_flush, default_timer, iterations
from tileauto.run.validate import Verdict, as_list
from tileauto.workers.phase import job_phase


def signature(params: Sequence[ParamSpec], out_pos: Sequence[int]) -> str:
    """A kernel's buffer signature: parameter names, shapes and dtypes, and its outputs.

    Configs may differ in it (a buffer padded to the tile, a dtype chosen by a config): each
    signature gets inputs of its own, made the same way whatever order configs arrive in.
    """
    return json.dumps([[[p.name, list(p.shape), p.dtype] for p in params], list(out_pos)])


def spec_signature(spec: SessionSpec) -> str:
    """The signature of the kernel a session spec describes."""
    return signature(spec.params, spec.out_pos)


def artifact_signature(artifact: KernelArtifact) -> str:
    """The signature of a built config."""
    return signature(artifact.params, artifact.out_idx)


# -- the jobs: what a parent sends to its run worker ------------------------------------------
def setup(spec: SessionSpec, reference: bool = True) -> None:
    """:meth:`RunWorker.setup` in this process's run worker."""
    process_worker().setup(spec, reference)


def compute_reference(key: str | None = None) -> None:
    """:meth:`RunWorker.compute_reference` in this process's run worker."""
    process_worker().compute_reference(key)


def keep_reference(key: str, reference: Any, inplace: Any) -> None:
    """Set a session's reference (the default config's outputs) in this process's run worker."""
    process_worker().keep_reference(key, reference, inplace)


def check_and_time(request: RunRequest) -> RunOutcome:
    """:meth:`RunWorker.check_and_time` in this process's run worker."""
    return process_worker().check_and_time(request)


def retime(requests: list[RunRequest], rounds: int) -> list[tuple[float, ...]]:
    """:meth:`RunWorker.retime` in this process's run worker."""
    return process_worker().retime(requests, rounds)


def time_reference(warmup: int, rep: int, key: str | None = None) -> float | None:
    """:meth:`RunWorker.time_reference` in this process's run worker."""
    return process_worker().time_reference(warmup, rep, key)


def process_worker() -> RunWorker:
    """This process's run worker, made on first use (a forked child makes its own)."""
    return _worker_of(os.getpid())


@functools.cache
def _worker_of(pid: int) -> RunWorker:
    return RunWorker()


class RunWorker:
    """A run worker's state: a session per kernel signature, and where the default config ran.

    One per process (:func:`process_worker`), which the jobs above act on; tests make their own.
    """

    def __init__(self) -> None:
        self.sessions: dict[str, RunSession] = {}
        self.reference_key: str | None = None  # the signature of the default config's run

    def setup(self, spec: SessionSpec, reference: bool = True) -> None:
        """Make inputs, compute the reference, remember everything for the runs that follow.

        With ``reference=False`` the reference is left to :meth:`compute_reference`, so that
        the parent can time the two apart (a hung ``supply_prog`` and a hung ``ref_prog`` are
        told apart in the error).
        """
        spec = dataclasses.replace(spec, profile=_marked_programs(spec.profile))
        torch.manual_seed(spec.profile.seed)
        if spec.device == "cpu":
            torch.set_num_threads(max(1, spec.threads))
            launcher.set_threads(max(1, spec.threads))  # the pool the tuned kernel runs on
        in_pos = tuple(i for i in range(len(spec.params)) if i not in set(spec.out_pos))
        inputs = make_inputs(
            spec.params,
            in_pos,
            captured=spec.captured,
            supply_prog=spec.profile.supply_prog,
            supply_type=spec.profile.supply_type,
            seed=spec.profile.seed,
            device=spec.device,
        )
        inputs = [
            t.to(spec.device).contiguous() if isinstance(t, torch.Tensor) else t for t in inputs
        ]
        session = RunSession(
            spec=spec,
            inputs=inputs,
            in_pos=in_pos,
            reference=spec.reference,
            inplace=spec.inplace_args,
        )
        if spec.reference_inplace is not None and session.inplace is None:
            session.inplace = spec.reference_inplace
        session.timer = spec.timer or default_timer(spec.device, spec.flush)
        key = spec_signature(spec)
        self.sessions[key] = session
        if reference:
            self.compute_reference(key)

    def keep_reference(self, key: str, reference: Any, inplace: Any) -> None:
        """Hold ``reference`` (the default config's outputs, made in an earlier worker) as the
        expected outputs of the session ``key``."""
        session = self.sessions[key]
        session.reference = reference  # as setup() holds a spec's reference
        if inplace is not None and session.inplace is None:
            session.inplace = inplace
        self.reference_key = key

    def compute_reference(self, key: str | None = None) -> None:
        """Run ``ref_prog`` once on a session's inputs (the expected outputs), if there is one.

        A ``ref_prog`` that raises fails every config of the session, with its message.
        """
        session = self._require(key)
        spec, inputs = session.spec, session.inputs
        if spec.profile.ref_prog is None or spec.profile.skip_check:
            return
        arity = _positional_arity(spec.profile.ref_prog)
        session.ref_checker = arity == len(inputs) + checker_results(spec)
        if session.ref_checker:
            return
        try:
            session.expected = spec.profile.ref_prog(*clones(inputs))
            _sync(spec.device)
        except Exception as exc:  # noqa: BLE001 - reported in every trial, tuning goes on
            session.ref_error = f"ref_prog raised {type(exc).__name__}: {exc}"
            if isinstance(exc, TypeError) and arity not in (-1, len(inputs)):
                session.ref_error += f"; {_form_read(session, arity)}"
        else:
            session.ref_error = _unusable_reference(session.expected)

    def time_reference(self, warmup: int, rep: int, key: str | None = None) -> float | None:
        """Median latency (ms) of the reference program on a session's inputs."""
        session = self._require(key)
        if session.spec.profile.ref_prog is None or session.ref_checker:
            return None
        args = clones(session.inputs)
        samples = []
        for i in range(warmup + rep):
            start = time.perf_counter_ns()
            session.spec.profile.ref_prog(*args)
            _sync(session.spec.device)
            if i >= warmup:
                samples.append(time.perf_counter_ns() - start)
        samples.sort()
        return samples[len(samples) // 2] / 1e6

    def retime(self, requests: list[RunRequest], rounds: int) -> list[tuple[float, ...]]:
        """Time already validated configs again, interleaved: ``rounds`` passes over them all.

        Noise on a shared machine comes in spells longer than one config's timing block;
        visiting every config in each round (starting at a different one each time) spreads a
        slow spell over all of them instead of letting it sink one. Returns nanosecond
        samples per request.
        """
        kernels = []
        for request in requests:
            session = self._require(artifact_signature(request.artifact))
            spec = session.spec
            func = _with_hooks(self._load(session, request.artifact), spec, request.artifact)
            with own_work(spec.device):
                ins = clones(session.inputs)
                outs, _ = padded_outputs(
                    request.artifact.params, request.artifact.out_idx, ins, spec.device
                )
            full = interleave(
                len(request.artifact.params), session.in_pos, ins, request.artifact.out_idx, outs
            )
            counts = (
                request.iters
                or session.iters.get(config_key(request.config))
                or iterations(spec.profile, func, full, spec.device, _flush_of(spec))
            )
            timer = session.timer
            assert timer is not None, "set up before any run"
            kernels.append((func, full, request.config, timer, counts[1]))
        rounds = max(1, min(rounds, min(k[4] for k in kernels)))
        samples: list[list[float]] = [[] for _ in kernels]
        for r in range(rounds):
            for j in range(len(kernels)):
                k = (j + r) % len(kernels)
                func, full, config, timer, n_rep = kernels[k]
                per_round = n_rep // rounds + (1 if r < n_rep % rounds else 0)  # n_rep in all
                got = timer(
                    func,
                    full,
                    warmup=min(2, n_rep),
                    rep=per_round,
                    config=config,
                    device=spec.device,
                )
                samples[k].extend(got)
        return [tuple(s) for s in samples]

    def check_and_time(self, request: RunRequest) -> RunOutcome:
        """Load, validate and time one config (in its signature's session)."""
        session = self._require(artifact_signature(request.artifact))
        start = time.perf_counter()
        outcome = self._check_and_time(session, request)
        return RunOutcome(**{**outcome.__dict__, "run_s": time.perf_counter() - start})

    def _check_and_time(self, session: RunSession, request: RunRequest) -> RunOutcome:
        spec = session.spec
        try:
            func = _with_hooks(self._load(session, request.artifact), spec, request.artifact)
        except Exception as exc:  # noqa: BLE001
            return RunOutcome(TrialStatus.RUN_ERROR, error=f"loading the library failed: {exc}")
        with own_work(spec.device):
            ins, in_bufs = padded_clones(session.inputs)
            outs, out_bufs = padded_outputs(
                request.artifact.params, request.artifact.out_idx, ins, spec.device
            )
        full = interleave(
            len(request.artifact.params), session.in_pos, ins, request.artifact.out_idx, outs
        )
        try:
            func(*full)
            _sync(spec.device)
        except Exception as exc:  # noqa: BLE001
            return RunOutcome(TrialStatus.RUN_ERROR, error=f"{type(exc).__name__}: {exc}")
        with own_work(spec.device):
            positions = list(session.in_pos) + list(request.artifact.out_idx)
            spilled = [
                p
                for p, buf in zip(positions, in_bufs + out_bufs)
                if buf is not None and not canaries_intact(buf)
            ]
            mutated = tuple(
                k for k, (a, b) in enumerate(zip(ins, session.inputs)) if not _same(a, b)
            )
        # the default config's outputs are this config's reference (for the default itself:
        # once they are kept, below); the trial's validation says so
        kept = spec.profile.ref_prog is None and session.reference is not None
        if spilled:
            spilled_names = ", ".join(spec.params[p].name for p in spilled)
            return RunOutcome(
                TrialStatus.OUT_OF_BOUNDS,
                error=f"wrote outside the bounds of {spilled_names}",
                reference_kept=kept,
            )
        notes = tuple(f"writes into input {spec.params[session.in_pos[k]].name!r}" for k in mutated)
        inplace = session.inplace if session.inplace is not None else mutated
        results = list(outs) + [ins[k] for k in inplace]
        names = [spec.params[p].name for p in request.artifact.out_idx] + [
            spec.params[session.in_pos[k]].name for k in inplace
        ]
        if spec.profile.ref_prog is None and not request.is_reference and session.reference is None:
            other = self._reference_signature_differs(session, names, results)
            if other is not None:
                notes += (other,)
        reference, reference_inplace = None, None
        if request.is_reference and spec.profile.ref_prog is None and not spec.profile.skip_check:
            with own_work(spec.device):
                missing = first_unwritten(names, results, None)
            if missing is not None:  # not a reference: it would fail every correct config
                return RunOutcome(
                    TrialStatus.MISMATCH,
                    error=f"{missing.message}; {DEFAULT_NOT_REFERENCE}",
                    notes=notes,
                    reference_kept=False,
                )
        if request.is_reference and spec.profile.ref_prog is None:
            session.reference = [r.detach().clone() for r in results]
            self.reference_key = spec_signature(spec)
            session.inplace = inplace
            reference, reference_inplace = [r.cpu() for r in results], inplace
            kept = True
            # the default config is its own reference; a manual check still sees its results
            verdict = (
                check_outputs(session, ins, results, names, mutated)
                if spec.profile.manual_check_prog is not None
                else Verdict(True)
            )
        else:
            verdict = check_outputs(session, ins, results, names, mutated)
        if not verdict.ok:
            # a default config that fails its manual check was kept as the reference all the
            # same: the parent keeps it too, for a replacement worker and other slots
            return RunOutcome(
                TrialStatus.MISMATCH,
                error=verdict.message,
                notes=notes,
                reference=reference,
                reference_inplace=reference_inplace,
                reference_kept=kept,
            )
        if verdict.note:  # a check that passed with something to say (a check skipped)
            notes += (verdict.note,)
        samples: tuple[float, ...] = ()
        if request.time_it:
            samples, busy = _time(session, func, full, request.config)
            notes += busy
        return RunOutcome(
            TrialStatus.OK,
            samples_ns=samples,
            notes=notes,
            reference=reference,
            reference_inplace=reference_inplace,
            reference_kept=kept,
            iters=session.iters.get(config_key(request.config)) if request.time_it else None,
        )

    def _reference_signature_differs(
        self, session: RunSession, names: list[str], results: list
    ) -> str | None:
        """A note when the default config ran with other buffers: no reference for these.

        Without a reference only floating-point results are checked for unwritten elements
        (NaN); the note names the integer and bool results, which nothing checked.
        """
        key = self.reference_key
        if key is None or key == spec_signature(session.spec):
            return None
        ref = self.sessions.get(key)
        theirs = {p.name: (list(p.shape), p.dtype) for p in (ref.spec.params if ref else ())}
        diffs = [
            f"{p.name} {list(p.shape)} {p.dtype} (default: {theirs[p.name][0]} {theirs[p.name][1]})"
            for p in session.spec.params
            if p.name in theirs and theirs[p.name] != (list(p.shape), p.dtype)
        ]
        what = "; ".join(diffs) if diffs else "other parameters"
        unchecked = [
            name for name, r in zip(names, results) if not (r.is_floating_point() or r.is_complex())
        ]
        if not unchecked:
            checked = "only checked for unwritten outputs"
        elif len(unchecked) == len(results):
            checked = f"not checked (integer or bool results: {', '.join(unchecked)})"
        else:
            checked = (
                "only its floating-point results checked for unwritten outputs, not its "
                f"integer or bool results {', '.join(unchecked)}"
            )
        return f"{NOT_COMPARED_NOTE}, whose buffers differ ({what}): {checked}; give a ref_prog to check it"

    def _require(self, key: str | None = None) -> RunSession:
        """The session of signature ``key`` (the only one when ``key`` is None)."""
        if key is None and len(self.sessions) == 1:
            return next(iter(self.sessions.values()))
        session = self.sessions.get(key) if key is not None else None
        if session is None:
            raise RuntimeError("run worker has no session for this kernel: setup() was not called")
        return session

    @staticmethod
    def _load(session: RunSession, artifact: KernelArtifact) -> Any:
        """The kernel's function, its library loaded once per session with TVM's runtime
        alone: a run worker started without the compiler (a Ray run actor) stays without it."""
        from tileauto.jit import runtime

        key = str(artifact.lib_path)
        if key not in session.modules:
            session.modules[key] = runtime.load_module(key, artifact.device_type)
            if artifact.device_type == "cpu":
                launcher.install(key)  # timed on the pool JITKernel runs it on
        return session.modules[key][artifact.func_name]


# Why a default config that leaves outputs unwritten is a mismatch, not the reference.
DEFAULT_NOT_REFERENCE = (
    "the default config is the reference when there is no ref_prog, and its results must be "
    "complete to be one: none is kept, and the other configs are only checked for unwritten "
    "outputs (give a ref_prog, or a default config that writes every output)"
)


def _form_read(session: RunSession, arity: int) -> str:
    """How ``ref_prog``'s form was read from its ``arity`` (its required positional
    parameters), for one that fits neither form and raised when called with the inputs."""
    spec = session.spec
    inputs = [spec.params[p] for p in session.in_pos]
    said = (
        f"ref_prog has {arity} required positional parameters, and tileauto tells its two "
        f"forms apart by that count: one that returns the expected results takes "
        f"{len(inputs)} (the inputs), a checker takes {checker_form(session)}. This one was "
        "taken for the first and called with the inputs alone"
    )
    if arity <= len(inputs) + checker_results(spec):
        return said
    tensors = ", ".join(f"{k}: {p.name}" for k, p in enumerate(inputs) if not p.scalar)
    return (
        f"{said}; a checker takes the new values of the inputs the kernel writes after the "
        f"outputs once they are declared: give inplace_args=[...] (input positions: {tensors})"
    )


def _unusable_reference(expected: Any) -> str | None:
    """Why ``ref_prog``'s return value cannot be compared with results (None when it can):
    said once, naming ``ref_prog``, rather than as a torch error in every config's run.

    None and bools are judged by the checks themselves (with messages of their own).
    """
    if expected is None or isinstance(expected, bool):
        return None
    for k, item in enumerate(as_list(expected)):
        if isinstance(item, torch.Tensor) or as_tensor(item) is not None:
            continue
        what = type(expected).__name__
        if isinstance(expected, (list, tuple)):
            what = f"a {what} whose item {k} is a {type(item).__name__}"
        else:
            what = f"a {what}"
        return (
            f"ref_prog returned {what}: return the expected results as a tensor, or a "
            "list or tuple of tensors (or numbers, arrays) in result order: outputs, then "
            "written inputs"
        )
    return None


def _time(
    session: RunSession, func: Any, full: list, config: dict[str, Any]
) -> tuple[tuple[float, ...], tuple[str, ...]]:
    """Time one checked config: its samples (ns) and a busy-machine note, if it earned one."""
    spec, timer = session.spec, session.timer
    assert timer is not None, "set up before any run"
    n_warmup, n_rep = iterations(spec.profile, func, full, spec.device, _flush_of(spec))
    session.iters[config_key(config)] = (n_warmup, n_rep)
    waited, start = runqueue_wait_s(), time.perf_counter()
    samples = tuple(
        timer(func, full, warmup=n_warmup, rep=n_rep, config=config, device=spec.device)
    )
    note = busy_note(waited, time.perf_counter() - start)
    return samples, (() if note is None else (note,))


def _flush_of(spec: SessionSpec) -> Flush | None:
    """The cache flush the session's timer does before each timed run, which the iteration
    counts include: the default timer's (``flush_cache``); None for a ``timer=`` of the
    user's, whose runs are what it makes them."""
    return default_flush(spec.device, spec.flush) if spec.timer is None else None


# The user's programs the worker calls while it checks and times configs, each run as a phase
# of the job (see _marked_programs).
MARKED_PROGRAMS = ("ref_prog", "manual_check_prog", "pre_hook", "post_hook")


def _marked_programs(profile: ProfileArgs) -> ProfileArgs:
    """``profile`` with each of the user's programs in ``MARKED_PROGRAMS`` run as a phase of the
    job named after it (:func:`~tileauto.workers.phase.job_phase`): should the worker die or
    hang in one, the parent blames that program, not the config being run."""
    marked: dict[str, Any] = {
        name: _in_phase(name, prog)
        for name in MARKED_PROGRAMS
        if (prog := getattr(profile, name)) is not None
    }
    return dataclasses.replace(profile, **marked) if marked else profile


def _in_phase(name: str, prog: Callable[..., Any]) -> Callable[..., Any]:
    # wraps: its signature stays the program's (ref_prog's arity says what it is)
    @functools.wraps(prog)
    def marked(*args: Any, **kwargs: Any) -> Any:
        with job_phase(name):
            return prog(*args, **kwargs)

    return marked


def _with_hooks(func: Any, spec: SessionSpec, artifact: KernelArtifact) -> Any:
    """The kernel with Triton's ``pre_hook``/``post_hook`` around each call (if any is set).

    Each hook gets a dict of parameter name to tensor; ``post_hook`` also gets
    ``exception=``: None after a call that returned, the exception of one that raised.
    """
    pre, post = spec.profile.pre_hook, spec.profile.post_hook
    if pre is None and post is None:
        return func
    names = [p.name for p in artifact.params]

    def hooked(*args: Any) -> Any:
        named = dict(zip(names, args))
        if pre is not None:
            pre(named)
        try:
            out = func(*args)
        except Exception as exc:
            if post is not None:
                post(named, exception=exc)
            raise
        if post is not None:
            post(named, exception=None)
        return out

    return hooked


def _positional_arity(fn: Callable[..., Any]) -> int:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return -1
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return -1
    return sum(
        p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
        for p in params
    )


def _same(a: Any, b: Any) -> bool:
    if not isinstance(a, torch.Tensor):
        return True  # a scalar argument is passed by value: the kernel cannot change it
    if a.is_floating_point():
        return bool(torch.equal(a, b) or ((a == b) | (torch.isnan(a) & torch.isnan(b))).all())
    return bool(torch.equal(a, b))


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()
