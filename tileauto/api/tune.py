"""``tune()``: one call of either API normalized into a tuning problem, and its space.

Both the decorator and the ``AutoTuner`` builder end here: the arguments made plain, the space
resolved and pruned, the settings read once, and every stage resolved by
:func:`tileauto.tune.defaults.session` before the session runs.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable
from typing import Any

from tileauto._logging import get_logger
from tileauto.cache.args import default_config, plain_arguments
from tileauto.jit.impl import JITImpl
from tileauto.jit.kernel import JITKernel
from tileauto.options import CompileArgs, ProfileArgs
from tileauto.result.record import AutotuneResult
from tileauto.run.inputs import captured_inputs
from tileauto.settings import Settings
from tileauto.space import ProductSpace, Space, baseline_config, prune_space, resolve_configs
from tileauto.tune import defaults
from tileauto.tune._ending import tuning_off_variable
from tileauto.tune.problem import TuningProblem

log = get_logger("autotuner")


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
    pruned: bool = False,
    store: Any = None,
) -> AutotuneResult:
    """Tune ``factory(*args, **kwargs, **config)`` over ``configs``; the shared core of both APIs.

    This layer only normalizes the arguments and builds the :class:`TuningProblem`; a
    :class:`~tileauto.tune.session.TuningSession` does the rest (cache lookup and lock, search,
    pick, save). With the tuning cache on, a valid entry is returned at once; otherwise the
    key's lock is held while tuning so concurrent processes tune one key once. ``pruned``:
    ``configs`` is already the resolved space after ``prune_configs_by`` (see
    :func:`resolved_space`), so the prune functions are not called again. ``store``: see
    :func:`tileauto.tune.defaults.store_of`.
    """
    from tileauto.jit.target_memo import resolve as resolve_target  # no compiler on a memo hit

    # the thread-count rule (docs/tuning.md): the option, then the variables, then every core
    settings = Settings.from_env().with_num_threads(profile_args.num_threads)
    args, kwargs = plain_arguments(args, kwargs)  # np.int64 sizes reach TVM as Python ints
    space = configs if pruned else resolved_space(configs, factory, args, kwargs, profile_args)
    name = getattr(factory, "__name__", "kernel")
    if settings.disable_autotune:
        say_once(
            f"autotuning is disabled ({tuning_off_variable()}): running the default config "
            "only; nothing is tuned or cached"
        )
        space = [default_of_space(factory, space)]
        profile_args = dataclasses.replace(profile_args, retime_top_k=0, search="exhaustive")
        verbose = False
    captured = captured_inputs()
    target = resolve_target(compile_args.target, compile_args.target_host, settings)
    if profile_args.backend in ("cupti", "cudagraph") and target.device_type == "cuda":
        say_once(
            f"backend={profile_args.backend!r} is timed with CUDA events (tileauto has no "
            f"{profile_args.backend} timer): pass backend='event' to silence this"
        )
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
        name=name,
        device_type=target.device_type,
        jit_impl=jit_impl,
    )
    given, store = store, None
    if not settings.disable_autotune:  # a run of the default config alone is not a tuning
        store = defaults.store_of(problem, target, bucket, given)
    result = _run(problem, store)
    kernel = result.kernel  # the thread count it was tuned with (the run worker's, in the key)
    if isinstance(kernel, JITKernel) and kernel.num_threads is not None:
        kernel.use_threads(settings.run_threads())
    return result


def _run(problem: TuningProblem, store: Any) -> AutotuneResult:
    """The session's result. A tuning on a local Ray whose node died (issue 33: its raylet, or
    an agent the raylet fate-shares with) goes on with local workers, keeping every config the
    Ray run measured: the store has them, so the local run measures only the rest."""
    if defaults.executor(problem) != "ray":
        return defaults.session(problem, store=store).run()
    from tileauto.scale.ray import RayNodeLostError
    from tileauto.tune.stores import MemoryStore

    if store is None and not problem.settings.disable_autotune:
        store = MemoryStore()  # no cache: the measurements still carry over to the local run
    try:
        return defaults.session(problem, store=store).run()
    except RayNodeLostError as exc:
        warnings.warn(
            f"{exc}. This tuning goes on with executor='local' (the configs measured on Ray "
            "are kept); the next Ray tuning starts a new local Ray",
            RuntimeWarning,
            stacklevel=4,
        )
    options = dataclasses.replace(problem.profile_args, executor="local")
    return defaults.session(dataclasses.replace(problem, profile_args=options), store=store).run()


def resolved_space(
    configs: Any,
    factory: Callable[..., Any],
    args: tuple,
    kwargs: dict[str, Any],
    profile_args: ProfileArgs,
) -> list[dict[str, Any]] | ProductSpace:
    """The space of this call: ``configs`` resolved, then ``prune_configs_by`` applied."""
    space = resolve_configs(configs, factory, args, kwargs)
    return _pruned(space, profile_args, factory, args, kwargs)


def _pruned(
    space: list[dict[str, Any]] | ProductSpace,
    profile_args: ProfileArgs,
    factory: Callable[..., Any],
    args: tuple,
    kwargs: dict[str, Any],
) -> list[dict[str, Any]] | ProductSpace:
    """The space after ``prune_configs_by`` (Triton's semantics), logged when it shrank.

    Triton's pruning functions take a list, so a product is expanded only when they are given.
    """
    if not profile_args.prune_configs_by:
        return space
    kept = prune_space(list(space), profile_args.prune_configs_by, factory, args, kwargs)
    if len(kept) < len(space):
        log.info(
            "%s: prune_configs_by kept %d of %d configs",
            getattr(factory, "__name__", "kernel"),
            len(kept),
            len(space),
        )
    return kept


_said: set[str] = set()  # what this process was told once (autotuning disabled)


def say_once(message: str) -> None:
    """A warning, once per process: a RuntimeWarning, which Python shows (the ``tileauto``
    logger's records are the application's to show, and nobody saw this one)."""
    if message not in _said:
        _said.add(message)
        log.warning("%s", message)
        warnings.warn(f"tileauto: {message}", RuntimeWarning, stacklevel=3)


def default_of_space(
    factory: Callable[..., Any], space: list[dict[str, Any]] | ProductSpace
) -> dict[str, Any]:
    """The config that runs when tuning is off: the factory's defaults, else the first config.

    Every tuned key is set, a default included, so that the result and the kernel say which
    values ran (a key none of them sets, such as ``pass_configs`` without a default, is left out).
    """
    defaults = default_config(factory)
    keys = set(space.names) if isinstance(space, Space) else {k for cfg in space for k in cfg}
    chosen = baseline_config(space, defaults, keys)
    return {k: v for k, v in chosen.items() if k in defaults or v is not None}


def check_api_options(*, timer: Any, verbose: Any, check_new_shapes: Any = False) -> None:
    """The options that are not profile arguments, checked at the call (names the argument)."""
    if timer is not None and not callable(timer):
        raise TypeError(f"timer must be None or a callable timer, got {type(timer).__name__}")
    for name, value in (("verbose", verbose), ("check_new_shapes", check_new_shapes)):
        if not isinstance(value, bool):
            raise TypeError(f"{name} must be True or False, got {value!r}")
