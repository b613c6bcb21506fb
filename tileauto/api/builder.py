"""The programmatic builder: ``AutoTuner.from_kernel(k, configs).set_compile_args(...).run()``.

TileLang's API, argument for argument; :meth:`AutoTuner.run` is a :func:`tileauto.api.tune.tune`
call.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any

from tileauto.api.tune import check_api_options, tune
from tileauto.jit.impl import JITImpl
from tileauto.jit.kernel import JITKernel
from tileauto.options import CompileArgs, ProfileArgs
from tileauto.result.record import AutotuneResult
from tileauto.space import ProductSpace, Space, materialize
from tileauto.space.resolve import call_configs
from tileauto.tune import defaults

_KEEP: Any = type("Keep", (), {"__repr__": lambda self: "<keep>"})()  # an argument not given


# set_profile_args' positional parameters: TileLang's, in its order
_POSITIONAL = (
    "warmup",
    "rep",
    "timeout",
    "supply_type",
    "ref_prog",
    "supply_prog",
    "rtol",
    "atol",
    "max_mismatched_ratio",
    "skip_check",
    "manual_check_prog",
    "cache_input_tensors",
    "backend",
)


class AutoTuner:
    """The programmatic builder: ``AutoTuner.from_kernel(k, configs).set_compile_args(...).run()``."""

    def __init__(self, fn: Callable[..., Any], configs: Any) -> None:
        self.fn = fn
        self.configs = materialize(configs)
        self.args: tuple = ()
        self.kwargs: dict[str, Any] = {}
        self.jit_impl: JITImpl | None = None
        self.compile_args = CompileArgs()
        self.profile_args = ProfileArgs()
        self.timer: Any = None
        self.verbose = True
        self.store: Any = None

    @classmethod
    def from_kernel(cls, kernel: Any, configs: Any) -> AutoTuner:
        """Start from a factory of the tunable keyword arguments, a ``@jit`` factory, or a JITKernel.

        A JITKernel made by a ``@jit`` factory keeps its problem arguments; each config
        re-elaborates the factory with them.
        """
        if isinstance(kernel, JITKernel):
            if kernel.origin is None:
                raise TypeError(
                    "from_kernel: this JITKernel was not made by a @jit factory, so it cannot be re-elaborated"
                )
            impl, args, kwargs = kernel.origin
            tuner = cls(impl.factory, configs)
            tuner.jit_impl = impl
            tuned = _space_names(tuner.configs, tuple(args), dict(kwargs))
            # a tunable the kernel was built with, by keyword or by position: the configs
            # decide it (left in, it would be fixed, and nothing tuned)
            tuner.args, tuner.kwargs = _without(impl.factory, tuple(args), dict(kwargs), tuned)
            tuner.compile_args = impl.compile_args
            return tuner
        if isinstance(kernel, JITImpl):
            tuner = cls(kernel.factory, configs)
            tuner.jit_impl = kernel
            tuner.compile_args = kernel.compile_args
            return tuner
        if not callable(kernel):
            raise TypeError(
                f"from_kernel expects a kernel factory or a JITKernel, got {type(kernel).__name__}"
            )
        return cls(kernel, configs)

    def set_compile_args(
        self,
        out_idx: Any = _KEEP,
        target: Any = _KEEP,
        execution_backend: Any = _KEEP,
        target_host: Any = _KEEP,
        verbose: Any = _KEEP,
        pass_configs: Any = _KEEP,
    ) -> AutoTuner:
        """Set how each config is compiled (the ``@jit`` arguments), in TileLang's order.

        An argument not given keeps its value: the ``@jit`` kernel's when the tuner was made
        ``from_kernel`` of one, else the default (``out_idx=None``, ``target="auto"``,
        ``execution_backend="auto"``, ``target_host=None``, ``verbose=False``,
        ``pass_configs=None``).
        """
        given = {
            k: v
            for k, v in (
                ("out_idx", out_idx),
                ("target", target),
                ("execution_backend", execution_backend),
                ("target_host", target_host),
                ("verbose", verbose),
                ("pass_configs", pass_configs),
            )
            if v is not _KEEP
        }
        self.compile_args = dataclasses.replace(self.compile_args, **given)
        return self

    def set_profile_args(
        self,
        warmup: float = 25,
        rep: float = 100,
        timeout: float = 60.0,
        supply_type: Any = None,
        ref_prog: Any = None,
        supply_prog: Any = None,
        rtol: float = 1e-2,
        atol: float = 1e-2,
        max_mismatched_ratio: float = 0.01,
        skip_check: bool = False,
        manual_check_prog: Any = None,
        cache_input_tensors: bool = True,
        backend: str = "event",
        **more: Any,
    ) -> AutoTuner:
        """Set how configs are fed, checked and timed, in TileLang's positional order.

        See :func:`autotune` for each argument. Every other profile option (``inplace_args``,
        ``flush_cache``, ``seed``, ``search``, ``retime_top_k``, ``num_threads``, the hooks...),
        ``timer`` and ``store`` (where tunings are kept: see :func:`autotune`) are taken by
        keyword. Each call sets all of them: what it leaves out is back to its default.
        """
        # every other profile option, by keyword (declared once, in ProfileArgs)
        known = tuple(f.name for f in dataclasses.fields(ProfileArgs) if f.name not in _POSITIONAL)
        keywords = {k: more.pop(k) for k in known if k in more}
        timer = more.pop("timer", None)
        store = more.pop("store", None)
        check_api_options(timer=timer, verbose=True)
        defaults.check_store(store)
        if more:
            raise TypeError(
                f"set_profile_args got unexpected arguments {sorted(more)}; it takes TileLang's "
                f"arguments and {sorted((*known, 'timer', 'store'))}"
            )
        given = {
            k: v for k, v in locals().items() if k not in ("self", "more", "keywords", "store")
        }
        self.profile_args = ProfileArgs.from_arguments({**given, **keywords})
        # replaced as the profile arguments are: a later call without them drops them
        self.timer, self.store = timer, store
        return self

    def run(
        self,
        warmup: float | None = None,
        rep: float | None = None,
        timeout: float | None = None,
        verbose: bool | None = None,
        *,
        warmup_iters: int | None = None,
        rep_iters: int | None = None,
    ) -> AutotuneResult:
        """Tune and return the :class:`AutotuneResult` (with the best kernel loaded).

        ``warmup``, ``rep`` (milliseconds), ``timeout``, ``warmup_iters`` and ``rep_iters``
        given here override those of :meth:`set_profile_args` for this run.
        """
        if verbose is not None:
            check_api_options(timer=None, verbose=verbose)
        given = (
            ("warmup", warmup),
            ("rep", rep),
            ("timeout", timeout),
            ("warmup_iters", warmup_iters),
            ("rep_iters", rep_iters),
        )
        changes: dict[str, Any] = {k: v for k, v in given if v is not None}
        profile = (
            dataclasses.replace(self.profile_args, **changes) if changes else self.profile_args
        )
        return tune(
            self.fn,
            self.args,
            self.kwargs,
            self.configs,
            self.compile_args,
            profile,
            timer=self.timer,
            verbose=self.verbose if verbose is None else verbose,
            jit_impl=self.jit_impl,
            store=self.store,
        )


def _without(
    factory: Any, args: tuple, kwargs: dict[str, Any], names: set[str]
) -> tuple[tuple, dict[str, Any]]:
    """The call ``factory(*args, **kwargs)`` without the arguments named ``names``, wherever
    they were given: the positional ones after the first left out become keywords."""
    sig = inspect.signature(factory)
    bound = sig.bind_partial(*args, **kwargs).arguments
    if not names & bound.keys():
        return args, kwargs
    kinds = {name: p.kind for name, p in sig.parameters.items()}
    if inspect.Parameter.VAR_POSITIONAL in kinds.values():  # *args: only keywords can go
        return args, {k: v for k, v in kwargs.items() if k not in names}
    out_args: list[Any] = []
    out_kwargs: dict[str, Any] = {}
    for name, value in bound.items():
        if name in names:
            continue
        if kinds[name] is inspect.Parameter.POSITIONAL_ONLY:
            out_args.append(value)
        elif kinds[name] is inspect.Parameter.VAR_KEYWORD:
            out_kwargs.update(value)
        else:
            out_kwargs[name] = value
    return tuple(out_args), out_kwargs


def _space_names(configs: Any, args: tuple, kwargs: dict[str, Any]) -> set[str]:
    """The names the configs set: a list's keys, a product's names, or those of the space a
    callable returns for the kernel's arguments."""
    if callable(configs) and not isinstance(configs, Space):
        configs = call_configs(configs, args, kwargs)
    if isinstance(configs, ProductSpace):
        return set(configs.names)
    if isinstance(configs, (list, tuple)):
        return {k for c in configs if isinstance(c, dict) for k in c}
    return set()
