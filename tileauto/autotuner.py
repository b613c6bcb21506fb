"""The user-facing tuning API: ``@autotune`` over ``@jit``, and the ``AutoTuner`` builder."""

from __future__ import annotations

import dataclasses
import functools
import shutil
import uuid
from collections.abc import Callable
from typing import Any

from tileauto._logging import get_logger
from tileauto.errors import ConfigSpaceError, NoValidConfigError
from tileauto.inputs import captured_inputs
from tileauto.jit.impl import JITImpl, process_scratch_dir
from tileauto.jit.kernel import JITKernel
from tileauto.keys import (
    CallCache,
    bind_arguments,
    call_key,
    default_config,
    describe_value,
    freeze,
)
from tileauto.options import CompileArgs, ProfileArgs
from tileauto.result import AutotuneResult
from tileauto.search import resolve_search
from tileauto.settings import Settings
from tileauto.space import baseline_config, materialize, resolve_configs
from tileauto.tuner import Tuner, TuningProblem

log = get_logger("autotuner")

_KEEP: Any = type("Keep", (), {"__repr__": lambda self: "<keep>"})()  # an argument not given


def tune(
    factory: Callable[..., Any],
    args: tuple,
    kwargs: dict[str, Any],
    configs: Any,
    compile_args: CompileArgs,
    profile_args: ProfileArgs,
    *,
    timer: Any = None,
    verbose: bool = True,
    jit_impl: JITImpl | None = None,
    bucket: Any = None,
) -> AutotuneResult:
    """Tune ``factory(*args, **kwargs, **config)`` over ``configs``; the shared core of both APIs.

    With the tuning cache on, a valid entry is returned at once; otherwise the key's lock is
    held while tuning so concurrent processes tune one key once (the others wait, then load).
    """
    from tileauto.cache.disk import writable_staging
    from tileauto.cache.tuning import TuningStore
    from tileauto.jit.target import device_fingerprint, device_type_of, resolve_target, target_json

    # the thread-count rule (docs/tuning.md): the option, then the variables, then every core
    settings = Settings.from_env().with_num_threads(profile_args.num_threads)
    space = resolve_configs(configs, factory, args, kwargs)
    if settings.disable_autotune:
        return _run_default(
            factory, args, kwargs, space, compile_args, profile_args, settings, timer, jit_impl
        )
    captured = captured_inputs()
    target = resolve_target(compile_args.target, compile_args.target_host)
    if profile_args.backend in ("cupti", "cudagraph") and device_type_of(target) == "cuda":
        _say_once(
            f"backend={profile_args.backend!r} is timed with CUDA events (tileauto has no "
            f"{profile_args.backend} timer): pass backend='event' to silence this"
        )
    store = TuningStore.open(
        settings,
        factory,
        args,
        kwargs,
        space,
        compile_args,
        profile_args,
        captured,
        timer,
        target=target_json(target),
        device=device_fingerprint(device_type_of(target)),
        bucket=bucket,
    )
    if store is not None:
        hit = AutotuneResult.from_cache(store, verbose=verbose)
        if hit is not None:
            return _run_with_tuned_threads(hit, settings)
    settings = writable_staging(settings)  # a read-only cache dir still tunes (with a warning)
    run = functools.partial(
        _tune_now,
        factory,
        args,
        kwargs,
        space,
        compile_args,
        profile_args,
        settings,
        captured,
        timer,
        verbose,
        jit_impl,
    )
    if store is None:
        return _run_with_tuned_threads(run(None), settings)
    with store.locked(verbose=verbose):
        # another process may have tuned it while this one waited for the lock
        hit = AutotuneResult.from_cache(store, verbose=verbose)
        return _run_with_tuned_threads(hit if hit is not None else run(store), settings)


def _run_with_tuned_threads(result: AutotuneResult, settings: Settings) -> AutotuneResult:
    """Give the kernel the thread count it was tuned with (the run worker's, in the key)."""
    kernel = result.kernel
    if isinstance(kernel, JITKernel) and kernel.num_threads is not None:
        kernel.use_threads(settings.run_threads())
    return result


_said: set[str] = set()  # what this process was told once (autotuning disabled)


def _say_once(message: str) -> None:
    if message not in _said:
        _said.add(message)
        log.warning("%s", message)


def default_of_space(factory: Callable[..., Any], space: list[dict[str, Any]]) -> dict[str, Any]:
    """The config that runs when tuning is off: the factory's defaults, else the first config.

    Only the keys without a default are set (the factory fills in the rest).
    """
    defaults = default_config(factory)
    keys = {k for cfg in space for k in cfg}
    chosen = baseline_config(space, defaults, keys)
    return {k: v for k, v in chosen.items() if k not in defaults or v != defaults[k]}


def _run_default(
    factory: Callable[..., Any],
    args: tuple,
    kwargs: dict[str, Any],
    space: list[dict[str, Any]],
    compile_args: CompileArgs,
    profile_args: ProfileArgs,
    settings: Settings,
    timer: Any,
    jit_impl: JITImpl | None,
) -> AutotuneResult:
    """TILEAUTO_DISABLE_AUTOTUNE=1: run the default config alone, checked when a check is given.

    Nothing is read from or written to the tuning cache: the result is not a tuning.
    """
    _say_once(
        "autotuning is disabled (TILEAUTO_DISABLE_AUTOTUNE=1): running the default config "
        "only; nothing is tuned or cached"
    )
    chosen = default_of_space(factory, space)
    profile = dataclasses.replace(profile_args, retime_top_k=0, search=None)
    return _tune_now(
        factory,
        args,
        kwargs,
        [chosen],
        compile_args,
        profile,
        writable_staging_of(settings),
        captured_inputs(),
        timer,
        False,
        jit_impl,
        None,
    )


def writable_staging_of(settings: Settings) -> Settings:
    """The settings with a staging dir this process can write (see ``writable_staging``)."""
    from tileauto.cache.disk import writable_staging

    return writable_staging(settings)


def _tune_now(
    factory: Callable[..., Any],
    args: tuple,
    kwargs: dict[str, Any],
    space: list[dict[str, Any]],
    compile_args: CompileArgs,
    profile_args: ProfileArgs,
    settings: Settings,
    captured: Any,
    timer: Any,
    verbose: bool,
    jit_impl: JITImpl | None,
    store: Any,
) -> AutotuneResult:
    problem = TuningProblem(
        factory=factory,
        args=args,
        kwargs=kwargs,
        configs=space,
        compile_args=compile_args,
        profile_args=profile_args,
        settings=settings,
        captured_inputs=captured,
        timer=timer,
        verbose=verbose,
        name=getattr(factory, "__name__", "kernel"),
        known_trials=store.known_trials() if store is not None else {},
        search=resolve_search(profile_args.search),
    )
    outcome = Tuner(problem).run()
    try:
        artifact = outcome.best_artifact
        if artifact is not None:
            keep = process_scratch_dir(settings) / f"best-{uuid.uuid4().hex[:12]}"
            shutil.copytree(artifact.directory, keep)
            kernel = JITKernel(artifact.moved_to(keep))
        else:  # the best config was measured in an earlier run (cache): compile it now
            impl = jit_impl or JITImpl(factory, compile_args)
            kernel = impl(*args, **{**kwargs, **outcome.best.config})
    finally:
        shutil.rmtree(outcome.staging, ignore_errors=True)
    result = AutotuneResult(
        config=dict(outcome.best.config),
        latency=float(outcome.best.latency_ms or 0.0),
        ref_latency=outcome.ref_latency_ms,
        kernel=kernel,
        trials=outcome.trials,
        default_trial=outcome.default_trial,
        tuning_s=outcome.tuning_s,
        log_path=outcome.log_path,
    )
    if store is not None:
        store.save(result)
    return result


class AutoTuneImpl:
    """A ``@jit`` factory under ``@autotune``: tunes once per tuning key, then returns the kernel."""

    def __init__(
        self,
        jit_impl: JITImpl,
        configs: Any,
        profile_args: ProfileArgs,
        key: Callable[..., Any] | None,
        timer: Any,
        verbose: bool,
        check_new_shapes: bool = False,
    ) -> None:
        if not isinstance(jit_impl, JITImpl):
            raise TypeError(
                "@autotune must be stacked on @tileauto.jit: @autotune(...) above @jit(...) above the "
                f"factory; got {type(jit_impl).__name__}"
            )
        if configs is None:
            raise ConfigSpaceError(
                "autotune(configs=...) is required: a list of dicts or a callable returning one"
            )
        self.jit_impl = jit_impl
        self.configs = materialize(configs)
        self.profile_args = profile_args
        self.key = key
        self.timer = timer
        self.verbose = verbose
        self.check_new_shapes = check_new_shapes
        self.results: dict[Any, AutotuneResult] = {}
        self._kernels = CallCache(jit_impl.factory)
        functools.update_wrapper(self, jit_impl.factory)

    def _tuning_key(self, args: tuple, kwargs: dict[str, Any]) -> Any:
        if self.key is None:
            return call_key(self.jit_impl.factory, args, kwargs)
        return freeze(describe_value(self.key(*args, **kwargs)))

    def __call__(self, *args: Any, **kwargs: Any) -> JITKernel:
        return self._kernels.get(args, kwargs, self._kernel_for)

    def _kernel_for(self, args: tuple, kwargs: dict[str, Any]) -> JITKernel:
        if Settings.from_env().disable_autotune and not self.profile_args.has_check:
            _say_once(
                "autotuning is disabled (TILEAUTO_DISABLE_AUTOTUNE=1): compiling the default "
                "config only"
            )
            factory = self.jit_impl.factory
            space = resolve_configs(self.configs, factory, args, kwargs)
            return self.jit_impl(*args, **{**default_of_space(factory, space), **kwargs})
        bind_arguments(self.jit_impl.factory, args, kwargs, partial=True)  # fails before tuning
        tkey = self._tuning_key(args, kwargs)
        result = self.results.get(tkey)
        if result is None:
            result = tune(
                self.jit_impl.factory,
                args,
                kwargs,
                self.configs,
                self.jit_impl.compile_args,
                self.profile_args,
                timer=self.timer,
                verbose=self.verbose,
                jit_impl=self.jit_impl,
                bucket=None if self.key is None else tkey,
            )
            self.results[tkey] = result
            if self.key is None or not result.cache_hit:
                return result.kernel
            # a bucket's cached entry may hold another shape: compile its config for this call
        # another call in the same tuning bucket: reuse the config, compile for these arguments
        if self.check_new_shapes:
            return self._checked_reuse(args, kwargs, result)
        return self.jit_impl(*args, **{**kwargs, **result.config})

    def _checked_reuse(
        self, args: tuple, kwargs: dict[str, Any], bucket_result: AutotuneResult
    ) -> JITKernel:
        """The bucket's winner for this call, once checked here; this call tuned if it fails.

        The check is a tuning of the one config at these arguments (against ``ref_prog``, or
        the default config's results), so it is cached on disk like any tuning.
        """
        compile_args, factory = self.jit_impl.compile_args, self.jit_impl.factory
        quick = dataclasses.replace(self.profile_args, retime_top_k=0, search=None)
        try:
            checked = tune(
                factory, args, kwargs, [bucket_result.config], compile_args, quick,
                timer=self.timer, verbose=self.verbose, jit_impl=self.jit_impl,
            )  # fmt: skip
            return checked.kernel
        except NoValidConfigError as exc:
            log.warning(
                "%s: the tuning bucket's config %s fails at these arguments (%s); tuning them",
                getattr(factory, "__name__", "kernel"),
                bucket_result.config,
                str(exc).splitlines()[-1].strip(),
            )
        return tune(
            factory, args, kwargs, self.configs, compile_args, self.profile_args,
            timer=self.timer, verbose=self.verbose, jit_impl=self.jit_impl,
        ).kernel  # fmt: skip

    def get_tuner_result(self, *args: Any, **kwargs: Any) -> AutotuneResult | None:
        """The AutotuneResult that served these arguments, if they were tuned."""
        return self.results.get(self._tuning_key(args, kwargs))

    def __repr__(self) -> str:
        return f"AutoTuneImpl({self.jit_impl!r})"


def autotune(
    func: Callable[..., Any] | None = None,
    *,
    configs: Any = None,
    warmup: int = 25,
    rep: int = 100,
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
    search: Any = None,
    backend: str = "event",
    num_threads: int | None = None,
    key: Callable[..., Any] | None = None,
    check_new_shapes: bool = False,
    timer: Any = None,
    verbose: bool = True,
) -> Any:
    """Tune a ``@jit`` factory over ``configs`` on its first call per tuning key.

    Args:
        configs: a list of dicts of tunable arguments, or a callable of the factory's
            arguments returning one.
        warmup: untimed runs before timing. rep: timed repetitions.
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
        search: which configs to measure: ``"exhaustive"`` (default, all of them) or a
            :class:`tileauto.search.SearchStrategy` such as ``RandomSearch(budget=8)``.
        num_threads: CPU threads to tune with and to run the returned kernel with (default:
            ``TILEAUTO_NUM_THREADS``, else ``TVM_NUM_THREADS``, else every core).
        key: maps the call's arguments to a tuning key; calls with equal keys share a tuning.
            By default a call whose arguments differ from the tuned ones reuses the bucket's
            config unchecked (compiled for its arguments).
        check_new_shapes: with ``key=``, check the bucket's config once per new set of
            arguments (against ``ref_prog``, or the default config's results) and tune those
            arguments on their own when it fails. The check is cached like a tuning.
        timer: a custom timer (see :mod:`tileauto.timing`), e.g. a scripted one in tests.
        verbose: print the report table and a progress bar.
    """
    profile_args = ProfileArgs(
        warmup=warmup,
        rep=rep,
        timeout=timeout,
        supply_type=supply_type,
        supply_prog=supply_prog,
        ref_prog=ref_prog,
        manual_check_prog=manual_check_prog,
        skip_check=skip_check,
        rtol=rtol,
        atol=atol,
        max_mismatched_ratio=max_mismatched_ratio,
        cache_input_tensors=cache_input_tensors,
        inplace_args=tuple(inplace_args) if inplace_args is not None else None,
        flush_cache=flush_cache,
        seed=seed,
        retime_top_k=retime_top_k,
        search=search,
        backend=backend,
        num_threads=num_threads,
    )
    resolve_search(search)  # a bad strategy fails at decoration, not at the first call

    def wrap(jit_impl: JITImpl) -> AutoTuneImpl:
        return AutoTuneImpl(jit_impl, configs, profile_args, key, timer, verbose, check_new_shapes)

    return wrap(func) if func is not None else wrap


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
            tuner.jit_impl, tuner.args, tuner.kwargs = impl, tuple(args), dict(kwargs)
            for k in list(tuner.kwargs):
                if any(
                    isinstance(c, dict) and k in c
                    for c in (tuner.configs if isinstance(tuner.configs, list) else [])
                ):
                    tuner.kwargs.pop(
                        k
                    )  # a tunable the kernel was built with: the configs decide it
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
        warmup: int = 25,
        rep: int = 100,
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

        See :func:`autotune` for each argument. Keyword-only extras: ``inplace_args``,
        ``flush_cache``, ``seed``, ``search``, ``retime_top_k`` and ``timer``.
        """
        known = ("inplace_args", "flush_cache", "seed", "search", "retime_top_k", "num_threads")
        extra = {k: more.pop(k) for k in known if k in more}
        timer = more.pop("timer", None)
        if more:
            raise TypeError(
                f"set_profile_args got unexpected arguments {sorted(more)}; it takes TileLang's "
                f"arguments and {sorted((*known, 'timer'))}"
            )
        if "inplace_args" in extra and extra["inplace_args"] is not None:
            extra["inplace_args"] = tuple(extra["inplace_args"])
        self.profile_args = ProfileArgs(
            warmup=warmup,
            rep=rep,
            timeout=timeout,
            supply_type=supply_type,
            supply_prog=supply_prog,
            ref_prog=ref_prog,
            manual_check_prog=manual_check_prog,
            skip_check=skip_check,
            rtol=rtol,
            atol=atol,
            max_mismatched_ratio=max_mismatched_ratio,
            cache_input_tensors=cache_input_tensors,
            backend=backend,
            **extra,
        )
        if timer is not None:
            self.timer = timer
        return self

    def run(
        self,
        warmup: int | None = None,
        rep: int | None = None,
        timeout: float | None = None,
        verbose: bool | None = None,
    ) -> AutotuneResult:
        """Tune and return the :class:`AutotuneResult` (with the best kernel loaded)."""
        changes = {
            k: v
            for k, v in (("warmup", warmup), ("rep", rep), ("timeout", timeout))
            if v is not None
        }
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
        )
