"""Compile and profile options: frozen records that validate their arguments on creation."""

from __future__ import annotations

import enum
import math
import numbers
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

EXECUTION_BACKENDS = ("auto", "tvm_ffi")
TIMER_BACKENDS = ("event", "auto", "cupti", "cudagraph")
EXECUTORS = ("local", "ray")
MAX_ITERATIONS = 1_000_000  # one sample of 8 bytes each is kept per timed iteration
MAX_WARMUP_MS = 60_000.0  # per config: a typo such as rep=10**9 fails at the call
MAX_REP_MS = 600_000.0


class TensorSupplyType(enum.Enum):
    """Generators for tuning inputs (static shapes only). Seeded: the same seed, the same data."""

    Auto = "auto"  # floats: randn; ints: small integers in [-2, 2]; bool: random
    Integer = "integer"  # integers in [-2, 2] (0..3 for unsigned), cast to the dtype
    Uniform = "uniform"  # uniform in [-1, 1)
    Normal = "normal"  # normal(0, 1)
    Randn = "randn"  # torch.randn
    Zero = "zero"
    One = "one"


def _is_int(value: Any) -> bool:
    """An int (numpy's included), not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_real(value: Any) -> bool:
    """An int or float (numpy's included), not a bool or a string."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _normalize_out_idx(out_idx: Any) -> tuple[int, ...] | None:
    if out_idx is None:
        return None
    if isinstance(out_idx, bool) or not isinstance(out_idx, (numbers.Integral, Sequence)):
        raise TypeError(f"out_idx must be None, an int or a list of ints, got {out_idx!r}")
    given = [out_idx] if isinstance(out_idx, numbers.Integral) else list(out_idx)
    for item in given:
        if isinstance(item, bool) or not isinstance(item, numbers.Integral):
            raise TypeError(f"out_idx must be None, an int or a list of ints, got {out_idx!r}")
    items = [int(i) for i in given]  # numpy's ints are Python's (as in configs)
    same_sign = all(i >= 0 for i in items) or all(i < 0 for i in items)
    if same_sign and items != sorted(items):
        warnings.warn(
            f"out_idx={items}: a call returns the outputs in parameter order, "
            f"{sorted(items)}, and ref_prog's expected outputs are read in that order too "
            f"(TileLang keeps the order given); write out_idx={sorted(items)} to say so",
            UserWarning,
            stacklevel=4,
        )
    return tuple(items)


@dataclass(frozen=True)
class CompileArgs:
    """How a factory's PrimFunc is compiled (``@jit`` arguments, ``set_compile_args``).

    Attributes:
        out_idx: parameters allocated and returned by a call (negative counts from the end).
        target: ``"auto"``, ``"llvm"``, ``"cuda"``, a dict or a ``tvm.target.Target``.
        target_host: host target for device targets (default: this CPU).
        execution_backend: ``"auto"`` or ``"tvm_ffi"`` (the only backend; calls go through DLPack);
            None is ``"auto"``.
        pass_configs: TVM ``PassContext`` options, e.g. ``{"tirx.disable_vectorize": True}``.
        verbose: log each compile (a plain call's, and each config a tuning compiles); None is
            False.
    """

    out_idx: tuple[int, ...] | None = None
    target: Any = "auto"
    target_host: Any = None
    execution_backend: str = "auto"
    pass_configs: dict[str, Any] | None = None
    verbose: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "out_idx", _normalize_out_idx(self.out_idx))
        # TileLang's set_compile_args passes None for "the default" in every argument
        if self.execution_backend is None:
            object.__setattr__(self, "execution_backend", "auto")
        if self.verbose is None:
            object.__setattr__(self, "verbose", False)
        if self.execution_backend not in EXECUTION_BACKENDS:
            raise ValueError(
                f"execution_backend must be one of {EXECUTION_BACKENDS}, "
                f"got {self.execution_backend!r}"
            )
        if not isinstance(self.verbose, bool):
            raise TypeError(f"verbose must be True or False, got {self.verbose!r}")
        if self.pass_configs is not None and not isinstance(self.pass_configs, dict):
            raise TypeError(
                f"pass_configs must be a dict of TVM pass options, got {type(self.pass_configs).__name__}"
            )

    def fingerprint(self) -> dict[str, Any]:
        """The JSON-able part that changes the compiled kernel (for cache keys)."""
        return {
            "out_idx": list(self.out_idx) if self.out_idx is not None else None,
            "target": str(self.target) if not isinstance(self.target, dict) else self.target,
            "target_host": str(self.target_host) if self.target_host is not None else None,
            "execution_backend": self.execution_backend,
            "pass_configs": {k: str(v) for k, v in sorted((self.pass_configs or {}).items())},
        }


# -- the checks of the profile options: each returns the value to keep, or raises naming it --
Check = Callable[[str, Any], Any]


def _milliseconds(most: float, *, positive: bool = False) -> Check:
    def check(name: str, value: Any) -> float:
        if (
            not _is_real(value)
            or not math.isfinite(value)
            or value < 0
            or (positive and not value > 0)
        ):
            raise ValueError(
                f"{name} must be a number of milliseconds {'> 0' if positive else '>= 0'}"
                f" (iteration counts go in {name}_iters), got {value!r}"
            )
        if value > most:
            raise ValueError(
                f"{name}={value!r} ms is more than {most:,.0f} ms per config; for a count of "
                f"iterations use {name}_iters"
            )
        return float(value)

    return check


def _iterations(low: int) -> Check:
    def check(name: str, value: Any) -> int | None:
        if value is None:
            return None
        if not _is_int(value) or not (low <= value <= MAX_ITERATIONS):
            raise ValueError(
                f"{name} must be None or an int in [{low}, {MAX_ITERATIONS:,}], got {value!r}"
            )
        return int(value)

    return check


def _seconds(name: str, value: Any) -> Any:
    from tileauto.settings import MAX_SECONDS

    # inf is no limit, and a hang would hold the run for good; past MAX_SECONDS a timer overflows
    if not _is_real(value) or not 0 < value <= MAX_SECONDS:
        raise ValueError(
            f"{name} must be a positive number of seconds, at most {MAX_SECONDS:.0f}, got {value!r}"
        )
    return value


def _tolerance(name: str, value: Any) -> Any:
    # NaN compares False with everything, so a NaN bound would let any result pass
    if not _is_real(value) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return value


def _ratio(name: str, value: Any) -> Any:
    if not _is_real(value) or not (0.0 <= value <= 1.0):
        raise ValueError(f"{name} must be a number in [0, 1], got {value!r}")
    return value


def _budget(name: str, value: Any) -> Any:
    if value is not None and (not _is_int(value) or value < 1):
        raise ValueError(f"{name} must be None or an int >= 1, got {value!r}")
    return value


def _budget_seconds(name: str, value: Any) -> Any:
    if value is not None and (not _is_real(value) or not math.isfinite(value) or not value > 0):
        raise ValueError(f"{name} must be None or a number of seconds > 0, got {value!r}")
    return value


def _executor(name: str, value: Any) -> Any:
    if value not in (None, *EXECUTORS):
        raise ValueError(
            f"{name} must be None (TILEAUTO_EXECUTOR), 'local' or 'ray', got {value!r}"
        )
    return value


def _backend(name: str, value: Any) -> Any:
    if value not in TIMER_BACKENDS:
        raise ValueError(f"{name} must be one of {TIMER_BACKENDS}, got {value!r}")
    return value


def _seed(name: str, value: Any) -> int:
    if not _is_int(value) or not (0 <= value < 2**63):
        raise ValueError(f"{name} must be an int in [0, 2**63), got {value!r}")
    return int(value)


def _retime_top_k(name: str, value: Any) -> int:
    if not _is_int(value) or value < 0:
        raise ValueError(f"{name} must be an int >= 0 (0 or 1: off), got {value!r}")
    return int(value)


def _positions(name: str, value: Any) -> tuple[int, ...] | None:
    if value is None:
        return None
    items = value
    if isinstance(items, (str, bytes)) or not isinstance(items, Sequence):
        items = [items] if _is_int(items) else None
    if items is None or not all(_is_int(k) for k in items):
        raise TypeError(f"{name} must be None or a list of input positions (ints), got {value!r}")
    return tuple(int(k) for k in items)


def _threads(name: str, value: Any) -> int | None:
    if value is None:
        return None
    if not _is_int(value) or value < 1:
        raise ValueError(
            f"{name} must be None (the settings' thread count) or an int >= 1, got {value!r}"
        )
    value = int(value)  # numpy's ints too, kept as Python's
    from tileauto.machine import too_many_threads

    too_many = too_many_threads(value)
    if too_many is not None:
        raise ValueError(f"{name}={value!r}: {too_many}")
    return value


def check_workers(name: str, value: Any) -> int | None:
    """``value`` as a count of compile workers: None (the settings' count) or an int from 1 to
    the CPUs this process may use; else a ValueError naming ``name``."""
    if value is None:
        return None
    if not _is_int(value) or value < 1:
        raise ValueError(
            f"{name} must be None (the settings' worker count) or an int >= 1, got {value!r}"
        )
    from tileauto.machine import too_many_threads

    too_many = too_many_threads(int(value), "compile workers")
    if too_many is not None:
        raise ValueError(f"{name}={value!r}: {too_many}")
    return int(value)


def check_seconds(name: str, value: Any) -> float | None:
    """``value`` as a time limit: None (the settings' limit) or a positive number of seconds, at
    most ``MAX_SECONDS``; else a ValueError naming ``name``."""
    if value is None:
        return None
    return float(_seconds(name, value))


def _prune_configs_by(name: str, value: Any) -> Any:
    from tileauto.space import check_prune_configs_by

    check_prune_configs_by(value)
    return value


def _supply_type(name: str, value: Any) -> Any:
    if value is not None and not isinstance(value, TensorSupplyType):
        raise TypeError(
            f"{name} must be None or a tileauto.TensorSupplyType (e.g. "
            f"TensorSupplyType.Randn), got {value!r}"
        )
    return value


def _flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return value


def _optional_flag(name: str, value: Any) -> bool | None:
    if value is not None and not isinstance(value, bool):
        raise TypeError(f"{name} must be None, True or False, got {value!r}")
    return value


def _program(name: str, value: Any) -> Any:
    if value is not None and not callable(value):
        raise TypeError(f"{name} must be callable, got {type(value).__name__}")
    return value


KEY_KINDS = ("value", "text", "program", "describe", "strategy", "ms")


def option(
    default: Any,
    check: Check | None = None,
    *,
    key: str | None = None,
    worker: bool = False,
    search: bool = False,
) -> Any:
    """Declare a profile option once: its default, its check, its part in the cache key, its
    destination.

    Args:
        default: the default value, or a zero-argument callable making a fresh one (``dict``).
        check: ``check(name, value)`` returns the value to keep (normalized: numpy numbers
            become Python's) or raises an error that names the option.
        key: how the option enters the tuning cache key (None: it does not change which config
            wins, e.g. ``timeout``): ``"value"`` as it is, ``"text"`` as ``str(value)``,
            ``"program"`` a callable by its source and what it reaches, ``"describe"`` any
            value walked by the key describer, ``"strategy"`` a search strategy by its
            ``describe()``, ``"ms"`` milliseconds that count only when no ``<name>_iters``
            count replaces them (keyed as ``<name>_ms``).
        worker: whether the run worker needs it (it is sent with the session, others are not).
        search: it changes only which configs are measured (a strategy, a budget), not a
            config's measurement: keyed in the tuning entry, not in the measurements' folder,
            so tunings with other strategies or budgets reuse each other's measurements.
    """
    if key is not None and key not in KEY_KINDS:
        raise ValueError(f"key must be None or one of {KEY_KINDS}, got {key!r}")
    meta = {"key": key, "worker": worker, "search": search, "check": check}
    if callable(default):
        return field(default_factory=default, metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class ProfileArgs:
    """How configs are fed, checked and timed (``@autotune`` arguments, ``set_profile_args``).

    See the tuning guide in ``docs/tuning.md`` for each field.
    """

    # Each option is declared once, here: its default, its check, how it enters the cache key
    # (``key``, see :func:`option`) and whether the run worker needs it (``worker``). The
    # checks, the cache fingerprint and the worker's copy are derived from these declarations.
    warmup: float = option(25, _milliseconds(MAX_WARMUP_MS), key="ms", worker=True)
    rep: float = option(100, _milliseconds(MAX_REP_MS, positive=True), key="ms", worker=True)
    timeout: float = option(60.0, _seconds)  # per config (validate + time); not in the key
    supply_type: Any = option(None, _supply_type, key="text", worker=True)
    supply_prog: Callable[..., Any] | None = option(None, _program, key="program", worker=True)
    ref_prog: Callable[..., Any] | None = option(None, _program, key="program", worker=True)
    manual_check_prog: Callable[..., Any] | None = option(
        None, _program, key="program", worker=True
    )
    skip_check: bool = option(False, _flag, key="value", worker=True)
    rtol: float = option(1e-2, _tolerance, key="value", worker=True)
    atol: float = option(1e-2, _tolerance, key="value", worker=True)
    max_mismatched_ratio: float = option(0.01, _ratio, key="value", worker=True)
    cache_input_tensors: bool = option(True, _flag)
    inplace_args: tuple[int, ...] | None = option(None, _positions, key="value", worker=True)
    flush_cache: bool | None = option(
        None, _optional_flag, key="value", worker=True
    )  # None: L2 on CUDA only
    seed: int = option(0, _seed, key="value", worker=True)
    retime_top_k: int = option(3, _retime_top_k, key="value")  # the best few again (0: off)
    search: Any = option("auto", key="strategy", search=True)  # a name / a SearchStrategy
    max_trials: int | None = option(None, _budget, key="value", search=True)
    max_seconds: float | None = option(None, _budget_seconds, key="value", search=True)
    plateau: int | None = option(None, _budget, key="value", search=True)  # trials, no gain
    num_threads: int | None = option(None, _threads)  # None: the settings'; keyed as run_threads
    backend: str = option("event", _backend, key="value")  # TileLang's timer name
    warmup_iters: int | None = option(None, _iterations(0), key="value", worker=True)
    rep_iters: int | None = option(None, _iterations(1), key="value", worker=True)
    # on_trial(trial), in the caller: a detached copy of each trial, and a cache hit's marker
    on_trial: Callable[..., Any] | None = option(None, _program)
    pre_hook: Callable[..., Any] | None = option(None, _program, key="program", worker=True)
    post_hook: Callable[..., Any] | None = option(None, _program, key="program", worker=True)
    prune_configs_by: dict[str, Any] | None = option(None, _prune_configs_by)  # the space's
    executor: str | None = option(None, _executor)  # None: TILEAUTO_EXECUTOR; same results

    @classmethod
    def from_arguments(cls, arguments: dict[str, Any]) -> ProfileArgs:
        """The record of the profile fields among ``arguments`` (an API call's ``locals()``).

        The API functions list their options once, in their signatures; this picks the ones
        that are profile fields, so a new field needs no copy here.
        """
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in arguments.items() if k in names})

    @property
    def has_check(self) -> bool:
        """Whether configs are checked against something the user gave (ref_prog, a check)."""
        return not self.skip_check and (
            self.ref_prog is not None or self.manual_check_prog is not None
        )

    def for_worker(self) -> ProfileArgs:
        """A copy with only what the run worker needs (the rest back to defaults).

        The caller-side options (``on_trial``, ``search``, ``prune_configs_by``...) may hold
        objects that do not pickle, and the worker has no use for them.
        """
        keep = {f.name for f in fields(self) if f.metadata.get("worker")}
        blank = ProfileArgs()
        return replace(
            self, **{f.name: getattr(blank, f.name) for f in fields(self) if f.name not in keep}
        )

    def __post_init__(self) -> None:
        for f in fields(self):
            check = f.metadata.get("check")
            if check is not None:
                object.__setattr__(self, f.name, check(f.name, getattr(self, f.name)))
