"""Compile and profile options: frozen records that validate their arguments on creation."""

from __future__ import annotations

import enum
import math
import numbers
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
    if isinstance(out_idx, bool) or not isinstance(out_idx, (int, Sequence)):
        raise TypeError(f"out_idx must be None, an int or a list of ints, got {out_idx!r}")
    items = [out_idx] if isinstance(out_idx, int) else list(out_idx)
    for item in items:
        if isinstance(item, bool) or not isinstance(item, int):
            raise TypeError(f"out_idx must be None, an int or a list of ints, got {out_idx!r}")
    return tuple(items)


@dataclass(frozen=True)
class CompileArgs:
    """How a factory's PrimFunc is compiled (``@jit`` arguments, ``set_compile_args``).

    Attributes:
        out_idx: parameters allocated and returned by a call (negative counts from the end).
        target: ``"auto"``, ``"llvm"``, ``"cuda"``, a dict or a ``tvm.target.Target``.
        target_host: host target for device targets (default: this CPU).
        execution_backend: ``"auto"`` or ``"tvm_ffi"`` (the only backend; calls go through DLPack).
        pass_configs: TVM ``PassContext`` options, e.g. ``{"tirx.disable_vectorize": True}``.
        verbose: log each compile.
    """

    out_idx: tuple[int, ...] | None = None
    target: Any = "auto"
    target_host: Any = None
    execution_backend: str = "auto"
    pass_configs: dict[str, Any] | None = None
    verbose: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "out_idx", _normalize_out_idx(self.out_idx))
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


KEY_KINDS = ("value", "text", "program", "describe", "strategy", "ms")


def option(
    default: Any, *, key: str | None = None, worker: bool = False, search: bool = False
) -> Any:
    """Declare a profile option once: its default, its part in the cache key, its destination.

    Args:
        default: the default value, or a zero-argument callable making a fresh one (``dict``).
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
    meta = {"key": key, "worker": worker, "search": search}
    if callable(default):
        return field(default_factory=default, metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class ProfileArgs:
    """How configs are fed, checked and timed (``@autotune`` arguments, ``set_profile_args``).

    See the tuning guide in ``docs/tuning.md`` for each field.
    """

    # Each option is declared once, here: its default, how it enters the cache key
    # (``key``, see :func:`option`) and whether the run worker needs it (``worker``). The
    # cache fingerprint and the worker's copy are derived from these declarations.
    warmup: float = option(25, key="ms", worker=True)  # ms of warm-up per config
    rep: float = option(100, key="ms", worker=True)  # ms of timed repetitions per config
    timeout: float = option(60.0)  # s per config (validate + time); not in the key
    supply_type: Any = option(None, key="text", worker=True)
    supply_prog: Callable[..., Any] | None = option(None, key="program", worker=True)
    ref_prog: Callable[..., Any] | None = option(None, key="program", worker=True)
    manual_check_prog: Callable[..., Any] | None = option(None, key="program", worker=True)
    skip_check: bool = option(False, key="value", worker=True)
    rtol: float = option(1e-2, key="value", worker=True)
    atol: float = option(1e-2, key="value", worker=True)
    max_mismatched_ratio: float = option(0.01, key="value", worker=True)
    cache_input_tensors: bool = option(True)
    inplace_args: tuple[int, ...] | None = option(None, key="value", worker=True)
    flush_cache: bool | None = option(None, key="value", worker=True)  # None: L2 on CUDA only
    seed: int = option(0, key="value", worker=True)
    retime_top_k: int = option(3, key="value")  # re-time the best few, interleaved (0: off)
    search: Any = option("auto", key="strategy", search=True)  # a name / a SearchStrategy
    max_trials: int | None = option(None, key="value", search=True)  # the most configs measured
    max_seconds: float | None = option(None, key="value", search=True)  # wall clock, whole tuning
    plateau: int | None = option(None, key="value", search=True)  # N trials without improvement
    num_threads: int | None = option(
        None
    )  # CPU threads (None: the settings'); keyed as run_threads
    backend: str = option("event", key="value")  # TileLang's timer name
    warmup_iters: int | None = option(None, key="value", worker=True)  # counts instead of ms
    rep_iters: int | None = option(None, key="value", worker=True)
    # on_trial(trial), in the caller: a detached copy of each trial, and a cache hit's marker
    on_trial: Callable[..., Any] | None = option(None)
    pre_hook: Callable[..., Any] | None = option(None, key="program", worker=True)
    post_hook: Callable[..., Any] | None = option(None, key="program", worker=True)
    prune_configs_by: dict[str, Any] | None = option(None)  # changes the space, which is keyed
    executor: str | None = option(None)  # "local" / "ray" (None: TILEAUTO_EXECUTOR); same results
    extra: dict[str, Any] = option(dict, key="describe")

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
        for name, most in (("warmup", MAX_WARMUP_MS), ("rep", MAX_REP_MS)):
            value = getattr(self, name)
            positive = value > 0 if _is_real(value) and name == "rep" else True
            if not _is_real(value) or not math.isfinite(value) or value < 0 or not positive:
                raise ValueError(
                    f"{name} must be a number of milliseconds {'> 0' if name == 'rep' else '>= 0'}"
                    f" (iteration counts go in {name}_iters), got {value!r}"
                )
            if value > most:
                raise ValueError(
                    f"{name}={value!r} ms is more than {most:,.0f} ms per config; for a count of "
                    f"iterations use {name}_iters"
                )
            object.__setattr__(self, name, float(value))
        for name, low in (("warmup_iters", 0), ("rep_iters", 1)):
            value = getattr(self, name)
            if value is None:
                continue
            if not _is_int(value) or not (low <= value <= MAX_ITERATIONS):
                raise ValueError(
                    f"{name} must be None or an int in [{low}, {MAX_ITERATIONS:,}], got {value!r}"
                )
            object.__setattr__(self, name, int(value))
        if not _is_real(self.timeout) or not self.timeout > 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {self.timeout!r}")
        for name in ("rtol", "atol"):
            value = getattr(self, name)
            # NaN compares False with everything, so a NaN bound would let any result pass
            if not _is_real(value) or not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        ratio = self.max_mismatched_ratio
        if not _is_real(ratio) or not (0.0 <= ratio <= 1.0):
            raise ValueError(f"max_mismatched_ratio must be a number in [0, 1], got {ratio!r}")
        for name in ("max_trials", "plateau"):
            value = getattr(self, name)
            if value is not None and (not _is_int(value) or value < 1):
                raise ValueError(f"{name} must be None or an int >= 1, got {value!r}")
        seconds = self.max_seconds
        if seconds is not None and (
            not _is_real(seconds) or not math.isfinite(seconds) or not seconds > 0
        ):
            raise ValueError(
                f"max_seconds must be None or a number of seconds > 0, got {seconds!r}"
            )
        if self.executor not in (None, *EXECUTORS):
            raise ValueError(
                f"executor must be None (TILEAUTO_EXECUTOR), 'local' or 'ray', got {self.executor!r}"
            )
        if self.backend not in TIMER_BACKENDS:
            raise ValueError(f"backend must be one of {TIMER_BACKENDS}, got {self.backend!r}")
        if not _is_int(self.seed) or not (0 <= self.seed < 2**63):
            raise ValueError(f"seed must be an int in [0, 2**63), got {self.seed!r}")
        object.__setattr__(self, "seed", int(self.seed))
        if not _is_int(self.retime_top_k) or self.retime_top_k < 0:
            raise ValueError(
                f"retime_top_k must be an int >= 0 (0 or 1: off), got {self.retime_top_k!r}"
            )
        object.__setattr__(self, "retime_top_k", int(self.retime_top_k))
        if self.inplace_args is not None:
            items = self.inplace_args
            if isinstance(items, (str, bytes)) or not isinstance(items, Sequence):
                items = [items] if _is_int(items) else None
            if items is None or not all(_is_int(k) for k in items):
                raise TypeError(
                    "inplace_args must be None or a list of input positions (ints), "
                    f"got {self.inplace_args!r}"
                )
            object.__setattr__(self, "inplace_args", tuple(int(k) for k in items))
        threads = self.num_threads
        if threads is not None and (
            isinstance(threads, bool) or not isinstance(threads, int) or threads < 1
        ):
            raise ValueError(
                f"num_threads must be None (the settings' thread count) or an int >= 1, got {threads!r}"
            )
        if threads is not None:
            from tileauto.settings import too_many_threads

            too_many = too_many_threads(threads)
            if too_many is not None:
                raise ValueError(f"num_threads={threads!r}: {too_many}")
        from tileauto.space import check_prune_configs_by

        check_prune_configs_by(self.prune_configs_by)
        if self.supply_type is not None and not isinstance(self.supply_type, TensorSupplyType):
            raise TypeError(
                "supply_type must be None or a tileauto.TensorSupplyType (e.g. "
                f"TensorSupplyType.Randn), got {self.supply_type!r}"
            )
        for name in ("skip_check", "cache_input_tensors"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if self.flush_cache is not None and not isinstance(self.flush_cache, bool):
            raise TypeError(f"flush_cache must be None, True or False, got {self.flush_cache!r}")
        for name in (
            "supply_prog",
            "ref_prog",
            "manual_check_prog",
            "on_trial",
            "pre_hook",
            "post_hook",
        ):
            value = getattr(self, name)
            if value is not None and not callable(value):
                raise TypeError(f"{name} must be callable, got {type(value).__name__}")
