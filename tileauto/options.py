"""Compile and profile options: frozen records that validate their arguments on creation."""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

EXECUTION_BACKENDS = ("auto", "tvm_ffi")
TIMER_BACKENDS = ("event", "auto", "cupti", "cudagraph")


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

    warmup: int = 25
    rep: int = 100
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
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def has_check(self) -> bool:
        """Whether configs are checked against something the user gave (ref_prog, a check)."""
        return not self.skip_check and (
            self.ref_prog is not None or self.manual_check_prog is not None
        )

    def __post_init__(self) -> None:
        for name in ("warmup", "rep"):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, int)
                or value < (1 if name == "rep" else 0)
            ):
                raise ValueError(
                    f"{name} must be an int >= {1 if name == 'rep' else 0}, got {value!r}"
                )
        if not isinstance(self.timeout, (int, float)) or not self.timeout > 0:
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
        threads = self.num_threads
        if threads is not None and (
            isinstance(threads, bool) or not isinstance(threads, int) or threads < 1
        ):
            raise ValueError(
                f"num_threads must be None (the settings' thread count) or an int >= 1, got {threads!r}"
            )
        for name in ("supply_prog", "ref_prog", "manual_check_prog"):
            value = getattr(self, name)
            if value is not None and not callable(value):
                raise TypeError(f"{name} must be callable, got {type(value).__name__}")
