"""Compile and profile options: frozen records that validate their arguments on creation."""

from __future__ import annotations

import enum
import math
import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

EXECUTION_BACKENDS = ("auto", "tvm_ffi")
TIMER_BACKENDS = ("event", "auto", "cupti", "cudagraph")
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


@dataclass(frozen=True)
class ProfileArgs:
    """How configs are fed, checked and timed (``@autotune`` arguments, ``set_profile_args``).

    See the tuning guide in ``docs/tuning.md`` for each field.
    """

    warmup: float = 25  # milliseconds of warm-up per config (TileLang's and Triton's meaning)
    rep: float = 100  # milliseconds of timed repetitions per config
    timeout: float = 60.0
    supply_type: Any = None
    supply_prog: Callable[..., Any] | None = None
    ref_prog: Callable[..., Any] | None = None
    manual_check_prog: Callable[..., Any] | None = None
    skip_check: bool = False
    rtol: float = 1e-2
    atol: float = 1e-2
    max_mismatched_ratio: float = 0.01
    cache_input_tensors: bool = True
    inplace_args: tuple[int, ...] | None = None
    flush_cache: bool | None = None  # None: flush L2 on CUDA, not on the CPU
    seed: int = 0
    retime_top_k: int = 3  # re-time the best few, interleaved, before picking (0: off)
    search: Any = None  # None / 'exhaustive', or a tileauto.search.SearchStrategy
    num_threads: int | None = None  # CPU threads to tune and run with (None: the settings')
    backend: str = "event"  # TileLang's timer name: events on CUDA, the native loop on CPU
    warmup_iters: int | None = None  # a fixed count of warm-up runs instead of warmup ms
    rep_iters: int | None = None  # a fixed count of timed runs instead of rep ms
    on_trial: Callable[..., Any] | None = None  # on_trial(trial), in the caller, as measured
    pre_hook: Callable[..., Any] | None = None  # pre_hook(args) before each benchmarked call
    post_hook: Callable[..., Any] | None = None  # post_hook(args, exception=None | exc) after
    prune_configs_by: dict[str, Any] | None = None  # Triton's: early prune, perf model, top_k
    extra: dict[str, Any] = field(default_factory=dict)

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
