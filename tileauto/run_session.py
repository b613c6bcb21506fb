"""The run worker's side of tuning: hold the inputs and the reference, validate and time configs.

The parent sends one :class:`SessionSpec` (``setup``) and then one :class:`RunRequest` per
config (``run``). Everything here runs inside the isolated run worker: a config that crashes or
hangs takes only this process down, and the user's tensors are never touched (the worker holds
copies, and every config gets fresh clones of them).
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from tileauto.artifact import KernelArtifact, ParamSpec
from tileauto.buffers import canaries_intact, interleave, padded_clones, padded_outputs
from tileauto.inputs import TensorSupplyType, make_inputs
from tileauto.records import TrialStatus
from tileauto.timing import Timer, default_timer
from tileauto.validate import Verdict, as_list, check_bool, compare, unwritten


@dataclass
class SessionSpec:
    """Everything the run worker needs once per tuning run (picklable)."""

    params: tuple[ParamSpec, ...]
    out_pos: tuple[int, ...]
    device: str
    captured: list[torch.Tensor] | None = None
    supply_prog: Callable[..., Any] | None = None
    supply_type: TensorSupplyType | None = None
    seed: int = 0
    ref_prog: Callable[..., Any] | None = None
    manual_check_prog: Callable[..., Any] | None = None
    skip_check: bool = False
    rtol: float = 1e-2
    atol: float = 1e-2
    max_mismatched_ratio: float = 0.01
    inplace_args: tuple[int, ...] | None = None
    warmup: int = 25
    rep: int = 100
    flush: bool | None = None
    timer: Timer | None = None
    threads: int = 1
    reference: list[torch.Tensor] | None = None
    reference_inplace: tuple[int, ...] | None = None


@dataclass(frozen=True)
class SetupInfo:
    """What setup learned: the reference program's latency and any problem with it."""

    ref_latency_ms: float | None
    ref_error: str | None
    input_names: tuple[str, ...]


@dataclass(frozen=True)
class RunRequest:
    """Run one compiled config: validate it, then time it."""

    artifact: KernelArtifact
    config: dict[str, Any]
    is_reference: bool = False
    time_it: bool = True


@dataclass(frozen=True)
class RunOutcome:
    """The worker's answer for one RunRequest."""

    status: TrialStatus
    samples_ns: tuple[float, ...] = ()
    error: str | None = None
    notes: tuple[str, ...] = ()
    reference: list[torch.Tensor] | None = None
    reference_inplace: tuple[int, ...] | None = None
    run_s: float = 0.0


@dataclass
class _Session:
    spec: SessionSpec
    inputs: list[torch.Tensor]
    in_pos: tuple[int, ...]
    expected: Any = None  # ref_prog's outputs (reference mode)
    ref_checker: bool = False  # ref_prog is called with inputs and results, returns bool
    reference: list[torch.Tensor] | None = None
    inplace: tuple[int, ...] | None = None
    timer: Timer | None = None
    ref_error: str | None = None
    modules: dict[str, Any] = field(default_factory=dict)


_SESSION: _Session | None = None


def setup(spec: SessionSpec, reference: bool = True) -> SetupInfo:
    """Make inputs, compute the reference, remember everything for the runs that follow.

    With ``reference=False`` the reference is left to :func:`compute_reference`, so that the
    parent can time the two apart (a hung ``supply_prog`` and a hung ``ref_prog`` are told
    apart in the error).
    """
    global _SESSION
    torch.manual_seed(spec.seed)
    if spec.device == "cpu":
        torch.set_num_threads(max(1, spec.threads))
    in_pos = tuple(i for i in range(len(spec.params)) if i not in set(spec.out_pos))
    inputs = make_inputs(
        spec.params,
        in_pos,
        captured=spec.captured,
        supply_prog=spec.supply_prog,
        supply_type=spec.supply_type,
        seed=spec.seed,
        device=spec.device,
    )
    inputs = [t.to(spec.device).contiguous() for t in inputs]
    session = _Session(
        spec=spec, inputs=inputs, in_pos=in_pos, reference=spec.reference, inplace=spec.inplace_args
    )
    if spec.reference_inplace is not None and session.inplace is None:
        session.inplace = spec.reference_inplace
    session.timer = spec.timer or default_timer(spec.device, spec.flush)
    _SESSION = session
    if reference:
        return compute_reference()
    return SetupInfo(None, None, tuple(spec.params[p].name for p in in_pos))


def compute_reference() -> SetupInfo:
    """Run ``ref_prog`` once on the session inputs (the expected outputs), if there is one."""
    session = _require()
    spec, inputs = session.spec, session.inputs
    ref_latency, ref_error = None, None
    if spec.ref_prog is not None and not spec.skip_check:
        n_results = len(spec.out_pos) + len(spec.inplace_args or ())
        session.ref_checker = _positional_arity(spec.ref_prog) == len(inputs) + max(1, n_results)
        if not session.ref_checker:
            try:
                start = time.perf_counter()
                session.expected = spec.ref_prog(*_clones(inputs))
                _sync(spec.device)
                ref_latency = (time.perf_counter() - start) * 1e3
            except Exception as exc:  # noqa: BLE001 - reported to the user, tuning goes on
                ref_error = f"ref_prog raised {type(exc).__name__}: {exc}"
            session.ref_error = ref_error
    return SetupInfo(ref_latency, ref_error, tuple(spec.params[p].name for p in session.in_pos))


def time_reference(warmup: int, rep: int) -> float | None:
    """Median latency (ms) of the reference program on the session inputs."""
    session = _require()
    if session.spec.ref_prog is None or session.ref_checker:
        return None
    args = _clones(session.inputs)
    samples = []
    for i in range(warmup + rep):
        start = time.perf_counter_ns()
        session.spec.ref_prog(*args)
        _sync(session.spec.device)
        if i >= warmup:
            samples.append(time.perf_counter_ns() - start)
    samples.sort()
    return samples[len(samples) // 2] / 1e6


def retime(requests: list[RunRequest], rounds: int) -> list[tuple[float, ...]]:
    """Time already validated configs again, interleaved: ``rounds`` passes over all of them.

    Noise on a shared machine comes in spells longer than one config's timing block; visiting
    every config in each round (starting at a different one each time) spreads a slow spell
    over all of them instead of letting it sink one. Returns nanosecond samples per request.
    """
    session = _require()
    spec = session.spec
    timer = session.timer
    assert timer is not None
    kernels = []
    for request in requests:
        func = _load(session, request.artifact)
        ins = [t.clone() for t in session.inputs]
        outs, _ = padded_outputs(
            request.artifact.params, request.artifact.out_idx, ins, spec.device
        )
        full = interleave(
            len(request.artifact.params), session.in_pos, ins, request.artifact.out_idx, outs
        )
        kernels.append((func, full, request.config))
    rounds = max(1, min(rounds, spec.rep))
    samples: list[list[float]] = [[] for _ in kernels]
    for r in range(rounds):
        per_round = spec.rep // rounds + (1 if r < spec.rep % rounds else 0)  # rep in total
        for j in range(len(kernels)):
            k = (j + r) % len(kernels)
            func, full, config = kernels[k]
            got = timer(
                func,
                full,
                warmup=min(2, spec.warmup),
                rep=per_round,
                config=config,
                device=spec.device,
            )
            samples[k].extend(got)
    return [tuple(s) for s in samples]


def run(request: RunRequest) -> RunOutcome:
    """Load, validate and time one config in this worker."""
    session = _require()
    start = time.perf_counter()
    outcome = _run(session, request)
    return RunOutcome(**{**outcome.__dict__, "run_s": time.perf_counter() - start})


def _run(session: _Session, request: RunRequest) -> RunOutcome:
    spec = session.spec
    try:
        func = _load(session, request.artifact)
    except Exception as exc:  # noqa: BLE001
        return RunOutcome(TrialStatus.RUN_ERROR, error=f"loading the library failed: {exc}")
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
    spilled = [
        p
        for p, buf in zip(list(session.in_pos) + list(request.artifact.out_idx), in_bufs + out_bufs)
        if not canaries_intact(buf)
    ]
    if spilled:
        names = ", ".join(spec.params[p].name for p in spilled)
        return RunOutcome(TrialStatus.OUT_OF_BOUNDS, error=f"wrote outside the bounds of {names}")
    mutated = tuple(k for k, (a, b) in enumerate(zip(ins, session.inputs)) if not _same(a, b))
    notes = tuple(f"writes into input {spec.params[session.in_pos[k]].name!r}" for k in mutated)
    inplace = session.inplace if session.inplace is not None else mutated
    results = list(outs) + [ins[k] for k in inplace]
    names = [spec.params[p].name for p in request.artifact.out_idx] + [
        spec.params[session.in_pos[k]].name for k in inplace
    ]
    reference, reference_inplace = None, None
    if request.is_reference and spec.ref_prog is None:
        session.reference = [r.detach().clone() for r in results]
        session.inplace = inplace
        reference, reference_inplace = [r.cpu() for r in results], inplace
        # the default config is its own reference; a manual check still sees its results
        verdict = (
            _check(session, ins, results, names, mutated)
            if spec.manual_check_prog is not None
            else Verdict(True)
        )
    else:
        verdict = _check(session, ins, results, names, mutated)
    if not verdict.ok:
        return RunOutcome(TrialStatus.MISMATCH, error=verdict.message, notes=notes)
    samples: tuple[float, ...] = ()
    if request.time_it:
        timer = session.timer
        assert timer is not None
        samples = tuple(
            timer(
                func,
                full,
                warmup=spec.warmup,
                rep=spec.rep,
                config=request.config,
                device=spec.device,
            )
        )
    return RunOutcome(
        TrialStatus.OK,
        samples_ns=samples,
        notes=notes,
        reference=reference,
        reference_inplace=reference_inplace,
    )


def _check(
    session: _Session, ins: list, results: list, names: list[str], mutated: tuple[int, ...]
) -> Verdict:
    spec = session.spec
    if spec.skip_check:
        return Verdict(True)
    if session.inplace is not None and spec.inplace_args is None:
        extra = [k for k in mutated if k not in session.inplace]
        if extra:
            bad = ", ".join(repr(spec.params[session.in_pos[k]].name) for k in extra)
            return Verdict(
                False, f"writes into input {bad}, which the reference config leaves unchanged"
            )
    expected: Any = None
    checked: Verdict | None = None  # the verdict of a ref_prog that checks (takes the results)
    if spec.ref_prog is not None:
        if session.ref_checker:
            try:
                value = spec.ref_prog(*_clones(session.inputs), *results)
            except Exception as exc:  # noqa: BLE001
                checked = Verdict(False, f"ref_prog raised {type(exc).__name__}: {exc}")
            else:
                checked = check_bool(value)
        else:
            expected = session.expected
            if session.ref_error is not None:
                return Verdict(False, f"no reference: {session.ref_error}")
            if isinstance(expected, bool):
                return Verdict(
                    False,
                    "ref_prog(*inputs) returned a bool without seeing the outputs: to check with a "
                    "bool, make ref_prog take the inputs followed by the results",
                )
            if expected is None:
                return Verdict(False, "ref_prog returned None: return the expected outputs")
    else:
        expected = session.reference
    expected_list = None if expected is None else as_list(expected)
    for k, (name, r) in enumerate(zip(names, results)):
        want = expected_list[k] if expected_list is not None and k < len(expected_list) else None
        if not isinstance(want, torch.Tensor) or want.numel() != r.numel():
            want = None  # compare() reports a reference of another size
        else:
            want = want.reshape(r.shape).to(r.device)
        missing = unwritten(name, r, want)
        if missing is not None:  # missing work fails whatever the tolerances or the checker
            return missing
    if checked is not None and not checked.ok:
        return checked
    if spec.manual_check_prog is not None:
        try:
            # always lists, as TileLang passes them, whatever ref_prog returned
            value = spec.manual_check_prog(list(results), expected_list)
        except Exception as exc:  # noqa: BLE001
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            return Verdict(False, f"manual_check_prog raised {type(exc).__name__}: {first}")
        return Verdict(value is not False, "manual_check_prog returned False")
    if expected is None or session.ref_checker:
        return Verdict(True)
    return compare(
        results,
        expected,
        rtol=spec.rtol,
        atol=spec.atol,
        max_mismatched_ratio=spec.max_mismatched_ratio,
        names=names,
    )


def _require() -> _Session:
    if _SESSION is None:
        raise RuntimeError("run worker has no session: setup() was not called")
    return _SESSION


def _load(session: _Session, artifact: KernelArtifact) -> Any:
    import tvm

    key = str(artifact.lib_path)
    if key not in session.modules:
        session.modules[key] = tvm.runtime.load_module(key)
    return session.modules[key][artifact.func_name]


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


def _clones(tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    return [t.clone() for t in tensors]


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.is_floating_point():
        return bool(torch.equal(a, b) or ((a == b) | (torch.isnan(a) & torch.isnan(b))).all())
    return bool(torch.equal(a, b))


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()
