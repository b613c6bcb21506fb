"""``@autotune`` over ``@jit``: a tuning per tuning key, then the kernel from memory.

The decorator, its stacked ``@autotune.param`` / ``@autotune.constraint`` space, and Triton's
``key=["M", "N"]`` form. Each tuning is a :func:`tileauto.api.tune.tune` call.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

from tileauto._logging import get_logger
from tileauto.api.tune import (
    check_api_options,
    default_of_space,
    resolved_space,
    say_once,
    tune,
)
from tileauto.cache.args import (
    CallCache,
    bind_arguments,
    call_key,
    describe_value,
    freeze,
    passed_arguments,
)
from tileauto.errors import ConfigSpaceError, NoValidConfigError
from tileauto.jit.impl import JITImpl
from tileauto.jit.kernel import JITKernel
from tileauto.options import ProfileArgs
from tileauto.report.observer import TrialObserver
from tileauto.result.record import AutotuneResult
from tileauto.search import resolve_search
from tileauto.settings import Settings
from tileauto.space import (
    Param,
    ProductSpace,
    config_id,
    materialize,
    merged_pass_configs,
    product,
    resolve_configs,
    split_pass_configs,
    tunable_parameters,
)
from tileauto.space.resolve import call_accepting
from tileauto.tune import defaults
from tileauto.tune._ending import tuning_off_variable

log = get_logger("autotuner")


def key_by_names(factory: Callable[..., Any], names: Any) -> Callable[..., Any]:
    """``key=["M", "N"]``: the tuning key is the values of these arguments (Triton's form).

    Raises:
        ValueError: a name is not a string or not a parameter of the factory.
    """
    import inspect

    params = inspect.signature(factory).parameters
    for name in names:
        if not isinstance(name, str) or name not in params:
            raise ValueError(
                f"key={list(names)!r}: {name!r} is not a parameter of "
                f"{getattr(factory, '__qualname__', factory)}{inspect.signature(factory)}"
            )
    names = tuple(names)

    def key(*args: Any, **kwargs: Any) -> tuple:
        bound = bind_arguments(factory, args, kwargs, partial=True)
        return tuple((n, bound.get(n)) for n in names)

    key.__qualname__ = f"key_by_names{names}"
    return key


class AutoTuneImpl:
    """A ``@jit`` factory under ``@autotune``: tunes once per tuning key, then returns the kernel."""

    def __init__(
        self,
        jit_impl: Callable[..., Any],
        configs: Any,
        profile_args: ProfileArgs,
        key: Callable[..., Any] | Sequence[str] | None,
        timer: Any,
        verbose: bool,
        check_new_shapes: bool = False,
        store: Any = None,
    ) -> None:
        if isinstance(jit_impl, StackedParams):
            if configs is not None:
                raise ConfigSpaceError(
                    "give the space once: autotune(configs=...) or stacked "
                    f"@autotune.param(...) decorators, not both (params: {jit_impl.names()})"
                )
            configs, jit_impl = jit_impl.space(), jit_impl.target
        if not isinstance(jit_impl, JITImpl):
            raise TypeError(
                "@autotune must be stacked on @tileauto.jit: @autotune(...) above @jit(...) above the "
                f"factory; got {type(jit_impl).__name__}"
            )
        if configs is None:
            raise ConfigSpaceError(
                "autotune(configs=...) is required: a list of dicts, a tileauto.space.product(...) "
                "or a callable returning one; or stack @autotune.param(name, values) decorators "
                "under @autotune(...)"
            )
        self.jit_impl = jit_impl
        self.configs = materialize(configs)
        self.profile_args = profile_args
        if isinstance(key, (list, tuple)):
            key = key_by_names(jit_impl.factory, key)
        if key is not None and not callable(key):
            raise TypeError(
                f"key must be a callable of the factory's arguments or a list of their names, "
                f"got {type(key).__name__}"
            )
        self.key: Callable[..., Any] | None = key
        self.timer = timer
        self.verbose = verbose
        self.check_new_shapes = check_new_shapes
        self.store = store
        self.results: dict[Any, AutotuneResult] = {}
        self._served: dict[Any, AutotuneResult] = {}  # a bucket's calls checked on their own
        self._with_passes: dict[str, JITImpl] = {}  # @jit variants for configs' pass_configs
        # a tunable the call passes is fixed, even at its default: another kernel than tuning's
        self._kernels = CallCache(jit_impl.factory, fixed=self._tunable_names)
        # calls of positional ints only (sizes), by their tuple: what _kernels answers them with
        self._int_calls: dict[tuple, JITKernel] = {}
        # tells on_trial of the hits of this decorator's memory (a session tells its own)
        self._observer = TrialObserver(
            profile_args.on_trial, getattr(jit_impl.factory, "__name__", "kernel")
        )
        functools.update_wrapper(self, jit_impl.factory)

    def _tuning_key(self, args: tuple, kwargs: dict[str, Any]) -> Any:
        factory = self.jit_impl.factory
        if self.key is None:
            return self._kernels.key(args, kwargs)
        # a tunable the call passes is fixed: the call tunes the rest of the space, a bucket
        # of its own (the bucket's config must not replace it, nor its tuning serve the others)
        passed = passed_arguments(factory, args, kwargs)
        fixed = {k: v for k, v in passed.items() if k in self._tunable_names()}
        value = call_accepting(self.key, "key", args, kwargs)
        return freeze(describe_value((value, fixed) if fixed else value))

    def _key_code(self) -> str | None:
        """The ``key`` function's code, as the cache keys code: a bucket tuned under another
        ``key`` (``n // 64`` edited to ``n // 128``) is another tuning. None where the
        function cannot be keyed (its buckets then go by their values alone, as before)."""
        code = self.__dict__.get("_key_digest", False)
        if code is False:
            from tileauto.cache.key import digest, function_fingerprint

            try:
                code = digest(function_fingerprint(self.key))
            except Exception:  # noqa: BLE001 - an unkeyable key function: its values only
                code = None
            self.__dict__["_key_digest"] = code
        return code

    def _tunable_names(self) -> frozenset[str]:
        """The names a config of the space may set (a callable space: every tunable)."""
        names = self.__dict__.get("_names")
        if names is None:
            if isinstance(self.configs, ProductSpace):
                names = frozenset(self.configs.names)
            elif isinstance(self.configs, list):
                names = frozenset(k for c in self.configs if isinstance(c, dict) for k in c)
            else:
                names = frozenset(tunable_parameters(self.jit_impl.factory))
            self.__dict__["_names"] = names
        return names

    def __call__(self, *args: Any, **kwargs: Any) -> JITKernel:
        if not kwargs:  # the lookup: the same sizes again, a dict lookup and a type check
            kernel = self._int_calls.get(args)
            if kernel is not None:
                for value in args:
                    if type(value) is not int:  # 64.0 and True equal 64 and 1 as keys
                        break
                else:
                    return kernel
        if not self._observer.active:  # the common call: nothing to tell, nothing to add
            kernel = self._kernels.get(args, kwargs, self._kernel_for)
            if not kwargs and all(type(value) is int for value in args):
                self._int_calls[args] = kernel  # the observer tells nothing: served as is
            return kernel
        made: list[bool] = []

        def make(args: tuple, kwargs: dict[str, Any]) -> JITKernel:
            made.append(True)
            return self._kernel_for(args, kwargs)

        kernel = self._kernels.get(args, kwargs, make)
        if not made:  # this call's kernel was in memory: the observer gets its marker trial
            result = self.get_tuner_result(*args, **kwargs)  # what serves it (check_new_shapes)
            if result is not None:
                self._observer.cache_hit(result)
        return kernel

    def _kernel_for(self, args: tuple, kwargs: dict[str, Any]) -> JITKernel:
        if Settings.from_env().disable_autotune and not self.profile_args.has_check:
            say_once(
                f"autotuning is disabled ({tuning_off_variable()}): compiling the default "
                "config only"
            )
            factory = self.jit_impl.factory
            space = resolve_configs(self.configs, factory, args, kwargs)
            return self._compile_config(args, kwargs, default_of_space(factory, space))
        bind_arguments(self.jit_impl.factory, args, kwargs, partial=True)  # fails before tuning
        tkey = self._tuning_key(args, kwargs)
        result = self.results.get(tkey)
        if result is not None:  # the bucket's tuning is in memory: no tuning, a marker trial
            self._observer.cache_hit(result)
        if result is None:
            configs, pruned = self.configs, False
            if self.profile_args.prune_configs_by:  # pruned here once, as Triton on a key miss
                factory = self.jit_impl.factory
                configs = resolved_space(self.configs, factory, args, kwargs, self.profile_args)
                pruned = True
                if len(configs) == 1 and not self.profile_args.has_check:
                    return self._use_unbenchmarked(args, kwargs, tkey, configs[0])
            result = tune(
                self.jit_impl.factory,
                args,
                kwargs,
                configs,
                self.jit_impl.compile_args,
                self.profile_args,
                timer=self.timer,
                verbose=self.verbose,
                jit_impl=self.jit_impl,
                bucket=None if self.key is None else (tkey, self._key_code()),
                pruned=pruned,
                store=self.store,
            )
            self.results[tkey] = result
            if self.key is None or not result.cache_hit:
                return result.kernel
            # a bucket's cached entry may hold another shape: compile its config for this call
        # another call in the same tuning bucket: reuse the config, compile for these arguments
        if self.check_new_shapes:
            return self._checked_reuse(args, kwargs, result)
        return self._compile_config(args, kwargs, result.config)

    def _use_unbenchmarked(
        self, args: tuple, kwargs: dict[str, Any], tkey: Any, config: dict[str, Any]
    ) -> Any:
        """The one config ``prune_configs_by`` left, compiled and used without benchmarking it
        (as Triton does), kept as this tuning key's result with no trials and a NaN latency."""
        kernel = self._compile_config(args, kwargs, config)
        self.results[tkey] = AutotuneResult(
            config=dict(config), latency=math.nan, ref_latency=None, kernel=kernel
        )
        return kernel

    def _compile_config(self, args: tuple, kwargs: dict[str, Any], config: dict[str, Any]) -> Any:
        """``@jit``-compile one config for this call (its own ``pass_configs`` merged in)."""
        arguments, own = split_pass_configs(config)
        impl = self.jit_impl
        if own:
            key = config_id(own)
            cached = self._with_passes.get(key)
            if cached is not None:
                impl = cached
            else:
                merged = merged_pass_configs(self.jit_impl.compile_args.pass_configs, own)
                compile_args = dataclasses.replace(self.jit_impl.compile_args, pass_configs=merged)
                impl = self._with_passes[key] = JITImpl(self.jit_impl.factory, compile_args)
        # the call's own arguments win: a tunable it passes is fixed (docs/tuning.md)
        passed = passed_arguments(self.jit_impl.factory, args, kwargs)
        kernel = impl(*args, **kwargs, **{k: v for k, v in arguments.items() if k not in passed})
        if isinstance(kernel, JITKernel) and kernel.num_threads is not None:
            # run with the count a tuning of this call runs with (tune() does the same)
            settings = Settings.from_env().with_num_threads(self.profile_args.num_threads)
            kernel.use_threads(settings.run_threads())
        return kernel

    def _checked_reuse(
        self, args: tuple, kwargs: dict[str, Any], bucket_result: AutotuneResult
    ) -> JITKernel:
        """The bucket's winner for this call, once checked here; this call tuned if it fails.

        The check is a tuning of the one config at these arguments (against ``ref_prog``, or
        the default config's results), so it is cached on disk like any tuning.
        """
        compile_args, factory = self.jit_impl.compile_args, self.jit_impl.factory
        # the bucket's config is checked as it is: the prune functions chose it already
        quick = dataclasses.replace(
            self.profile_args, retime_top_k=0, search="exhaustive", prune_configs_by=None
        )
        served = call_key(factory, args, kwargs)
        try:
            checked = tune(
                factory, args, kwargs, [bucket_result.config], compile_args, quick,
                timer=self.timer, verbose=self.verbose, jit_impl=self.jit_impl, store=self.store,
            )  # fmt: skip
            self._served[served] = checked
            return checked.kernel
        except NoValidConfigError as exc:
            log.warning(
                "%s: the tuning bucket's config %s fails at these arguments (%s); tuning them",
                getattr(factory, "__name__", "kernel"),
                bucket_result.config,
                str(exc).splitlines()[-1].strip(),
            )
        own = tune(
            factory, args, kwargs, self.configs, compile_args, self.profile_args,
            timer=self.timer, verbose=self.verbose, jit_impl=self.jit_impl, store=self.store,
        )  # fmt: skip
        self._served[served] = own
        return own.kernel

    def get_tuner_result(self, *args: Any, **kwargs: Any) -> AutotuneResult | None:
        """The AutotuneResult that served these arguments, if they were tuned.

        Calls of one tuning bucket share the bucket's result, except with ``check_new_shapes``:
        a call whose check ran has its own (the check's, or its own tuning's when it failed).
        """
        served = self._served.get(call_key(self.jit_impl.factory, args, kwargs))
        return served if served is not None else self.results.get(self._tuning_key(args, kwargs))

    def __repr__(self) -> str:
        return f"AutoTuneImpl({self.jit_impl!r})"


def autotune(
    func: Callable[..., Any] | None = None,
    *,
    configs: Any = None,
    warmup: float = 25,
    rep: float = 100,
    timeout: float = 60.0,
    supply_type: Any = None,
    supply_prog: Callable[..., Any] | None = None,
    ref_prog: Callable[..., Any] | None = None,
    manual_check_prog: Callable[..., Any] | None = None,
    skip_check: bool = False,
    rtol: float = 1e-2,
    atol: float = 1e-2,
    max_mismatched_ratio: float = 0.01,
    cache_input_tensors: bool = True,
    inplace_args: Any = None,
    flush_cache: bool | None = None,
    seed: int = 0,
    retime_top_k: int = 3,
    search: Any = "auto",
    max_trials: int | None = None,
    max_seconds: float | None = None,
    plateau: int | None = None,
    backend: str = "event",
    num_threads: int | None = None,
    warmup_iters: int | None = None,
    rep_iters: int | None = None,
    on_trial: Callable[..., Any] | None = None,
    pre_hook: Callable[..., Any] | None = None,
    post_hook: Callable[..., Any] | None = None,
    prune_configs_by: dict[str, Any] | None = None,
    executor: str | None = None,
    key: Callable[..., Any] | list[str] | None = None,
    check_new_shapes: bool = False,
    timer: Any = None,
    verbose: bool = True,
    store: Any = None,
) -> Any:
    """Tune a ``@jit`` factory over ``configs`` on its first call per tuning key.

    Args:
        configs: a list of dicts of tunable arguments, a :class:`tileauto.space.Space`
            (``tileauto.space.product(...)``: kept lazy, never expanded), or a callable of
            the factory's arguments returning one; or stacked
            ``@autotune.param(name, values)`` decorators under this one.
        warmup / rep: milliseconds of warm-up and of timed repetitions per config, as in
            TileLang and Triton: the counts come from a first estimate of one call (at least
            3 timed runs, at most 1,000,000). ``warmup_iters`` / ``rep_iters`` give counts
            instead.
        timeout: seconds one config may take to validate and time before it is killed.
        supply_type / supply_prog: how inputs are made when none are captured with
            :func:`set_autotune_inputs`.
        ref_prog: reference program: returns expected outputs (compared under rtol, atol,
            max_mismatched_ratio), or, when it takes inputs and outputs, returns a bool.
        manual_check_prog: ``check(results, reference)`` raising or returning False on mismatch.
        skip_check: time without validating.
        inplace_args: input positions the kernel writes into (detected when not given).
        retime_top_k: after every config is timed, the best few and the default config are
            timed again, interleaved round by round, and the pick uses those samples (0 or 1:
            off). This keeps a slow spell of a shared machine from deciding the winner.
        backend: TileLang's timer choice. ``"event"`` (default) and ``"auto"``: CUDA events
            around each repetition on a GPU, the native loop on the CPU. ``"cupti"`` and
            ``"cudagraph"`` are accepted for TileLang code; on the CPU every backend is the
            native loop, and on CUDA they time with events too (with a warning).
        on_trial: called in this process with each :class:`~tileauto.Trial` (complete, with
            its index) as soon as it is measured, failures included: progress in your code.
            It gets a copy (its ``error`` cut to 2,048 characters) that says how the config
            was validated (``trial.validation``); a disk or memory cache hit gives it one
            marker trial (``trial.cache_hit``, the stored winner, not a measurement). A
            callback that raises is reported once and not called again.
        pre_hook / post_hook: Triton's hooks, run in the run worker around every call of a
            config's kernel (the check and each timed repetition): ``pre_hook(args)`` before
            and ``post_hook(args, exception=None)`` after, ``args`` being a dict of parameter
            name to tensor; when the call raises, ``post_hook`` gets the exception and the
            error goes on. Timed repetitions include the hooks, as in Triton.
        prune_configs_by: Triton's ``{"early_config_prune": fn(configs, named_args, **kwargs),
            "perf_model": fn(**args, **kwargs, **config), "top_k": int or fraction}``, run
            once per tuning key: the early prune keeps a sublist (``named_args``: the
            positional arguments by name), then the ``top_k`` configs the perf model rates
            fastest are kept (a fraction of what the early prune kept keeps at least one).
            When one config is left and no check is given, ``@autotune`` compiles it without
            benchmarking; ``get_tuner_result`` has it, with no trials and a NaN latency.
        max_trials / max_seconds / plateau: budgets of the search: the most configs measured,
            the most seconds of the whole tuning (wall clock; the batch in flight finishes),
            and a stop after this many trials in a row without an improvement beyond the
            best's timing spread. Configs left untried are reported as ``not_run`` with the
            reason, never as failures.
        executor: where configs are compiled and timed: ``"local"`` (worker processes of
            this machine) or ``"ray"`` (a Ray cluster; see ``docs/scale.md``). Default:
            ``TILEAUTO_EXECUTOR``, else local. Results and cache entries are the same.
        search: which configs to measure: ``"auto"`` (default: every config of a space of
            up to 256, a guided search of 5% of a larger one, at least 256 configs),
            ``"exhaustive"``, ``"guided"``, ``"random"``, or a
            :class:`tileauto.search.SearchStrategy` such as ``GuidedSearch(budget=200)``
            (see ``docs/search.md``).
        num_threads: CPU threads to tune with and to run the returned kernel with (default:
            ``TILEAUTO_NUM_THREADS``, else ``TVM_NUM_THREADS``, else every core).
        key: maps the call's arguments to a tuning key; calls with equal keys share a tuning.
            A callable of the factory's arguments, or a list of argument names (Triton's
            ``key=["M", "N"]``: the values of those arguments are the key).
            By default a call whose arguments differ from the tuned ones reuses the bucket's
            config unchecked (compiled for its arguments).
        check_new_shapes: with ``key=``, check the bucket's config once per new set of
            arguments (against ``ref_prog``, or the default config's results) and tune those
            arguments on their own when it fails. The check is cached like a tuning, and
            ``get_tuner_result`` returns the check's result (or the own tuning's) for them.
        timer: a custom timer (see :mod:`tileauto.run.timing`), e.g. a scripted one in tests.
        verbose: print the report table and a progress bar.
        store: where tunings are looked up and kept: None (the disk cache, with the fleet's
            Redis of ``TILEAUTO_REMOTE_CACHE`` behind it when set), ``"local"`` (the disk
            cache alone), a ``redis://`` / ``rediss://`` URL, a
            :class:`tileauto.cache.remote.RemoteCache`, or a store object
            (``docs/scale.md``, Fleet).
    """
    profile_args = ProfileArgs.from_arguments(locals())
    defaults.check_store(store)
    resolve_search(search)  # a bad strategy fails at decoration, not at the first call
    check_api_options(timer=timer, verbose=verbose, check_new_shapes=check_new_shapes)

    def wrap(jit_impl: Callable[..., Any]) -> AutoTuneImpl:
        return AutoTuneImpl(
            jit_impl, configs, profile_args, key, timer, verbose, check_new_shapes, store
        )

    return wrap(func) if func is not None else wrap


class StackedParams:
    """A ``@jit`` factory under ``@autotune.param`` / ``@autotune.constraint`` decorators.

    ``@autotune(...)`` above them tunes the product of the parameters (the top one varies
    slowest) under the constraints: ``tileauto.space.product(*params, constraints=...)``.
    """

    def __init__(self, target: Any) -> None:
        if isinstance(target, StackedParams):
            self.target: Any = target.target
            self.params: list[Param] = list(target.params)
            self.constraints: list[Any] = list(target.constraints)
        else:
            self.target, self.params, self.constraints = target, [], []

    def names(self) -> list[str]:
        return [p.name for p in self.params]

    def space(self) -> ProductSpace:
        if not self.params:
            raise ConfigSpaceError(
                "@autotune.constraint(...) needs @autotune.param(name, values) decorators too"
            )
        return product(*self.params, constraints=self.constraints)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(
            f"@autotune.param({', '.join(map(repr, self.names()))}) declares a space for "
            "@tileauto.autotune(...): put @tileauto.autotune(...) above the param decorators"
        )


def _param(name: str | Sequence[str], values: Any) -> Callable[[Any], StackedParams]:
    """``@autotune.param("block_M", [32, 64])``, or tied names with a tuple per value:
    ``@autotune.param("micro_M, micro_N", [(4, 16), (8, 32)])`` (tilus style).

    Stack them under ``@autotune(...)`` and over ``@jit(...)``; the space is their product.

    Raises:
        ConfigSpaceError: a bad name or values (named), at decoration.
    """
    declared = Param.of(name, values)

    def wrap(target: Any) -> StackedParams:
        stacked = StackedParams(target)
        if set(declared.names) & {n for p in stacked.params for n in p.names}:
            raise ConfigSpaceError(f"@autotune.param({declared.name!r}) is declared twice")
        stacked.params.insert(0, declared)  # decorators apply bottom-up: the top one is first
        return stacked

    return wrap


def _constraint(*rules: Any) -> Callable[[Any], StackedParams]:
    """``@autotune.constraint("block_M % micro_M == 0", ...)``: rules of the stacked space
    (expressions or callables of a config, as ``product(constraints=...)`` takes them)."""

    def wrap(target: Any) -> StackedParams:
        stacked = StackedParams(target)
        stacked.constraints[:0] = rules
        return stacked

    return wrap


autotune.param = _param  # type: ignore[attr-defined]
autotune.constraint = _constraint  # type: ignore[attr-defined]
