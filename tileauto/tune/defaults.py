"""Every stage of a tuning, resolved before it starts (TVM MetaSchedule's ``default_config``).

Each function turns what the caller gave (None, or the stage itself) into a finished stage:
None is the problem's own (its ``executor``: local worker processes or Ray; its ``search``
option; the console and the trial log; the disk cache entry). :func:`session` calls them once
and hands the results to a :class:`~tileauto.tune.session.TuningSession`, which never learns
which builder or runner it drives.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tileauto.errors import TileautoError
from tileauto.report.console import default_reporter as console_and_log
from tileauto.report.notes import note
from tileauto.search import SearchStrategy, resolve_search
from tileauto.tune._winner import kernel_loader as jit_kernel_loader
from tileauto.tune._winner import rebuild_best
from tileauto.tune.problem import TuningProblem
from tileauto.tune.session import RunnerMaker, TuningSession
from tileauto.tune.stages import (
    BuilderMaker,
    BuildStage,
    KernelLoader,
    LoadingBuildStage,
    Reporter,
    RunStage,
    Store,
)
from tileauto.tune.stores import DiskStore, FleetStore

if TYPE_CHECKING:
    from tileauto.scale.ray import RayCluster


def session(
    problem: TuningProblem,
    *,
    builder: BuildStage | BuilderMaker | None = None,
    runner: RunStage | RunnerMaker | None = None,
    store: Store | None = None,
    search: SearchStrategy | str | None = None,
    reporter: Reporter | None = None,
    load_kernel: KernelLoader | None = None,
) -> TuningSession:
    """A session of ``problem`` with every stage given or, for None, the problem's own.

    Its result can be saved even when its files are gone (it compiles the winner again).
    """
    needs_executor = builder is None or runner is None
    cluster = _ray_cluster(problem) if needs_executor and executor(problem) == "ray" else None
    return TuningSession(
        problem,
        builder=(
            builder
            if builder is not None
            else default_builder(problem, cluster, decide_spin=runner is None)
        ),
        # made when the session tunes: a cache hit never imports the run stage (nor psutil)
        runner=(
            runner if runner is not None else functools.partial(default_runner, problem, cluster)
        ),
        store=store,
        search=with_cache_prior(
            resolve_search(problem.profile_args.search if search is None else search),
            problem,
            store,
        ),
        reporter=reporter if reporter is not None else default_reporter(problem),
        load_kernel=load_kernel if load_kernel is not None else loader_of(problem, builder),
        rebuild=rebuild_best,
    )


def with_cache_prior(
    search: SearchStrategy, problem: TuningProblem, store: Store | None = None
) -> SearchStrategy:
    """Hand a strategy that takes a prior (``use_prior``: the guided and auto searches) the
    trials of the same kernel (its name and module) tuned before on other targets, read when the search starts: from
    the disk cache, and from the fleet's Redis when the store has one (the entries of the same
    factory and call on other targets or devices). Those of the same call are handed in as
    :class:`~tileauto.search.SameProblem`. ``TILEAUTO_SEARCH_PRIOR=0`` turns this off;
    ``GuidedSearch(prior=None)`` and ``AutoSearch(prior=None)`` ignore them. Whatever the
    prior, the strategy is told the call's family (``use_family``): a record of it in a prior
    of the user's (a ``tileauto cache prior`` export) is the same problem too."""
    hand_in = getattr(search, "use_prior", None)
    s = problem.settings
    tell_family = getattr(search, "use_family", None)
    family = getattr(store, "family", None)  # this call's entries elsewhere come first
    if callable(tell_family) and family is not None:  # records of it, in any prior: the same
        tell_family(family)  # problem (a `tileauto cache prior` export's `family`)
    if callable(hand_in) and s.tuning_cache_enabled and s.search_prior:
        kernel = getattr(problem.factory, "__qualname__", problem.name)  # as the cache names it
        root = problem.settings.cache_dir
        elsewhere = getattr(store, "trials_elsewhere", None)  # a FleetStore's remote level

        def read() -> Any:  # imported when the search starts: a cache hit never pays for it
            from tileauto.cache.key import factory_module
            from tileauto.cache.priors import cache_prior
            from tileauto.search import SameProblem

            same, others = cache_prior(root, kernel, factory_module(problem.factory), family)()
            if callable(elsewhere):
                same += [list(found.trials) for found in elsewhere()]
            return [SameProblem(same), *others] if same else others

        hand_in(read)
    return search


def executor(problem: TuningProblem) -> str:
    """``executor=`` of the tuning, else ``TILEAUTO_EXECUTOR``."""
    return problem.profile_args.executor or problem.settings.executor


def default_builder(
    problem: TuningProblem, cluster: RayCluster | None = None, *, decide_spin: bool = True
) -> BuilderMaker:
    """The builder of the problem's executor, made once the session tunes: a pool of local
    worker processes, or Ray tasks on ``cluster``.

    ``decide_spin``: the local runner is this one's too, so on a CPU target the busy-machine
    rule of its thread pool is applied first (a given runner's process is its own).
    """

    def make(staging_dir: Path, configs: int) -> BuildStage:
        p = problem
        if cluster is not None:
            from tileauto.scale.ray import RayBuilder  # Ray only for a Ray tuning

            return with_kernel_cache(
                p,
                staging_dir,
                RayBuilder(
                    p.factory,
                    p.compile_args,
                    staging_dir=staging_dir,
                    timeout_s=p.settings.compile_timeout_s,
                    cluster=cluster,
                    settings=p.settings,
                ),
            )
        if decide_spin and p.device_type == "cpu":
            _decide_spin(p)
        from tileauto.build.builder import Builder  # the builder's imports wait for a miss

        builder = Builder(
            p.factory,
            p.compile_args,
            workers=max(1, min(p.settings.compile_workers(), configs + 1)),
            isolation=p.settings.compile_isolation,
            timeout_s=p.settings.compile_timeout_s,
            staging_dir=staging_dir,
        )
        return with_kernel_cache(p, staging_dir, builder)

    return make


def with_kernel_cache(
    problem: TuningProblem, staging_dir: Path | None, builder: BuildStage
) -> BuildStage:
    """``builder`` behind the kernel cache (:class:`tileauto.build.cached.CachedBuilder`): a
    config compiled by any tuning of this factory, call and target is loaded, not compiled
    again, whatever the checks or the timing; a hit's kernel is linked into ``staging_dir``
    (the tuning's scratch folder) first. ``builder`` itself when either cache is off.
    """
    from tileauto.build.cached import CachedBuilder
    from tileauto.cache.kernels import ConfigKernels
    from tileauto.jit.target_memo import resolve

    p, ca = problem, problem.compile_args
    if not (p.settings.kernel_cache_enabled and p.settings.tuning_cache_enabled):
        return builder
    try:
        target = resolve(ca.target, ca.target_host, p.settings)
    except Exception:  # noqa: BLE001 - a bad target fails in each compile, with its message
        return builder
    kernels = ConfigKernels.open(
        p.settings, p.factory, p.args, p.kwargs, ca, target=target.json, device=target.device
    )
    return builder if kernels is None else CachedBuilder(builder, kernels, staging_dir)


def _check_gpu(name: str) -> None:
    """Tuning a CUDA kernel here runs it here: a GPU torch sees, or a TileautoError before
    anything compiles (it failed after every config compiled, on making the inputs)."""
    import torch

    if not torch.cuda.is_available():
        raise TileautoError(
            f"tuning {name} for a CUDA target runs and times its configs on this machine's "
            "GPU, and torch sees none (torch.cuda.is_available() is False): tune on a machine "
            "with a GPU, or with executor='ray' on a cluster with GPU nodes; to compile "
            "without one, use the @jit factory's par_compile"
        )


# the target kinds whose kernels tileauto runs: a CPU (LLVM, C) and an NVIDIA GPU (CUDA)
RUNNABLE_KINDS = ("llvm", "c", "cuda", "nvptx")


def _check_runnable(problem: TuningProblem) -> None:
    """A TileautoError, before anything compiles, for a target tileauto cannot run (Metal,
    ROCm, Vulkan, OpenCL): each config compiled, then failed on CPU tensors it cannot take."""
    import json

    from tileauto.jit.target_memo import resolve

    ca = problem.compile_args
    try:
        kind = json.loads(resolve(ca.target, ca.target_host, problem.settings).json).get("kind")
    except Exception:  # noqa: BLE001 - a bad target fails in each compile, with its message
        return
    if kind not in RUNNABLE_KINDS:
        raise TileautoError(
            f"tuning {problem.name} for target {kind!r}: tileauto runs and times configs only "
            "on this CPU (target 'llvm') or an NVIDIA GPU (target 'cuda'), and cannot run a "
            f"{kind} kernel; tune with target='llvm' or 'cuda', or compile {kind} kernels "
            "without tuning with the @jit factory's par_compile"
        )


def default_runner(problem: TuningProblem, cluster: RayCluster | None = None) -> RunStage:
    """The runner of the problem's executor: an isolated run worker, or a Ray actor on
    ``cluster``. Nothing starts before the session calls its ``start``."""
    p = problem
    _check_runnable(p)
    if cluster is None:  # a Ray node's memory is checked there, and its GPUs found there
        p.settings.run_memory_limit_bytes()
        if p.device_type == "cuda":
            _check_gpu(p.name)
    options: dict[str, Any] = {
        "threads": p.settings.run_threads(),
        "memory_limit_mb": p.settings.run_memory_limit_mb,
        "device": p.device_type,
        "captured": p.captured_inputs,
        "timer": p.timer,
    }
    if cluster is not None:
        from tileauto.scale.ray import RayRunner  # Ray only for a Ray tuning

        return RayRunner(p.profile_args, cluster=cluster, **options)
    from tileauto.run.runner import Runner  # torch waits for a miss

    return Runner(p.profile_args, **options)


def default_reporter(problem: TuningProblem) -> Reporter:
    """The console (with ``verbose``) and a JSON-lines trial log in the settings' logs folder."""
    return console_and_log(problem.settings.logs_dir, problem.name, problem.verbose)


def loader_of(problem: TuningProblem, builder: BuildStage | BuilderMaker | None) -> KernelLoader:
    """A builder's own kernel loader when it has one (a fake's), else the ``@jit`` one."""
    if isinstance(builder, LoadingBuildStage):
        return builder.load_kernel
    return jit_kernel_loader(problem)


def check_store(store: Any) -> None:
    """``store=`` of the decorator and the builder, checked where it is given.

    Raises:
        TypeError: it is none of None, ``"local"``, a ``redis://`` URL, a
            :class:`~tileauto.cache.remote.RemoteCache` or a store object.
        SettingsError: a URL that is not ``redis://`` or ``rediss://``.
    """
    if store is None or store == "local" or isinstance(store, Store):
        return
    from tileauto.cache.remote import RemoteCache, check_url  # only where a remote is named

    if isinstance(store, RemoteCache):
        return
    if isinstance(store, str):
        check_url(store, "store")
        return
    raise TypeError(
        "store must be None (TILEAUTO_REMOTE_CACHE, else the disk cache alone), 'local' (the "
        "disk cache alone), a redis:// or rediss:// URL, a tileauto.cache.remote.RemoteCache or "
        f"a store object (load, known_trials, locked, save); got {type(store).__name__}"
    )


def store_of(
    problem: TuningProblem, target: Any, bucket: Any = None, store: Any = None
) -> Store | None:
    """The store of a tuning: ``store=`` when it is a store object; else the disk cache entry,
    with the fleet's Redis behind it when ``store=`` or ``TILEAUTO_REMOTE_CACHE`` names one
    (``"local"``: the disk cache alone). None when the tuning cache is off."""
    check_store(store)
    if isinstance(store, Store):
        return store
    local = disk_store(problem, target, bucket)
    s = problem.settings
    if local is None or store == "local" or (store is None and not s.remote_cache):
        return local  # the warm path of a machine without a fleet imports no Redis code
    from tileauto.cache.remote import RemoteCache, family_of

    if isinstance(store, RemoteCache):
        remote: RemoteCache | None = store
    else:  # a URL, or None: TILEAUTO_REMOTE_CACHE
        remote = RemoteCache.from_settings(s, store if isinstance(store, str) else None)
    if remote is None:
        return local
    p = problem

    def waiting(holder: Any) -> None:
        note(
            f"tileauto: {p.name}: {holder.describe()} is tuning {local.key} for the "
            f"fleet ({remote.address}); waiting for its result",
            show=p.verbose,
        )

    return FleetStore(
        local,
        remote,
        check=_check_once(problem),
        on_wait=waiting,
        limit_s=fleet_bound_s(problem),
        family=family_of(p.factory, p.args, p.kwargs, bucket),
    )


def fleet_bound_s(problem: TuningProblem) -> float | None:
    """The most seconds the tuning of ``problem`` may take, which its lease of the fleet's key
    tells the waiting processes (past it, and a margin, one takes the key over); None without
    ``max_seconds``: it tunes until done and is never taken over while it lives.

    The search stops only between batches, so past ``max_seconds`` the batch in flight still
    runs (the first one too, when ``max_seconds`` is shorter): its configs compiled on the
    compile workers (``TILEAUTO_COMPILE_TIMEOUT`` each) and run (``timeout=`` each). Then the
    best ``retime_top_k`` and the default are re-timed (``timeout=`` each; each alone again
    when that round fails), the reference is timed and the winner built (a compile, when an
    earlier tuning measured it). Each step counts at its time limit.
    """
    pa, s = problem.profile_args, problem.settings
    if pa.max_seconds is None:
        return None
    slots = _compile_slots(problem)
    batch = _batch_bound(problem, slots)
    rounds = -(-batch // slots) + 1  # the batch on the compile workers, then the winner
    runs = batch + 2 * (pa.retime_top_k + 1) + 1
    return pa.max_seconds + rounds * s.compile_timeout_s + runs * pa.timeout


def _compile_slots(problem: TuningProblem) -> int:
    """The compile workers of the tuning: this machine's (with Ray, the cluster's slots are
    known only once it connects: ``TILEAUTO_AUTO_TUNING_CPU_COUNTS`` when set, else this
    machine's count stands for them)."""
    s = problem.settings
    if s.cpu_counts > 0 and executor(problem) == "ray":
        return min(s.cpu_counts, s.max_cpu_count) if s.max_cpu_count > 0 else s.cpu_counts
    try:
        return s.compile_workers()
    except TileautoError:  # more workers than CPUs: the tuning says so when it starts
        return max(1, s.cpu_counts)


def _batch_bound(problem: TuningProblem, slots: int) -> int:
    """The most configs one batch of the search may hold, the default config included: the
    whole space for ``exhaustive`` and for ``auto`` on a small space (a strategy of the
    caller's: at most the space), ``max(compile workers, 8)`` for ``guided``, ``random`` and
    ``auto`` on a large space."""
    from tileauto.search.resolve import AUTO_EXHAUSTIVE_MAX

    pa = problem.profile_args
    size = problem.view.size_bound
    large = size > AUTO_EXHAUSTIVE_MAX
    if pa.search in ("guided", "random") or (pa.search == "auto" and large):
        size = min(size, max(slots, 8))
    if pa.max_trials is not None:
        size = min(size, pa.max_trials)
    return size + 1


def _check_once(problem: TuningProblem) -> Any:
    """Runs a winner compiled from a remote entry once against ``ref_prog`` (then through
    ``manual_check_prog`` too, when given); None without a ``ref_prog``: run alone, the winner
    has no reference to be checked against (the default config's results are one only in a
    tuning), and ``manual_check_prog`` is not called without one."""
    pa = problem.profile_args
    if pa.skip_check or pa.ref_prog is None:
        return None

    def check(artifact: Any, config: dict[str, Any]) -> str | None:
        runner = default_runner(problem)  # this machine's run worker, as a tuning's
        runner.start()
        try:
            runner.prepare(artifact)
            run = runner.run(artifact, config, is_reference=False, time_it=False)
        finally:
            runner.close()
        return None if run.status.ok else f"{run.status.value}: {run.error or ''}".strip()

    return check


def disk_store(problem: TuningProblem, target: Any, bucket: Any = None) -> DiskStore | None:
    """The disk cache entry of this problem, or None when the tuning cache is off."""
    from tileauto.cache.tuning import TuningStore

    p = problem
    entry = TuningStore.open(
        p.settings,
        p.factory,
        p.args,
        p.kwargs,
        p.view,
        p.compile_args,
        p.profile_args,
        p.captured_inputs,
        p.timer,
        target=target.json,
        device=target.device,
        bucket=bucket,
    )
    if entry is None:
        return None

    def waiting() -> None:
        if p.verbose:
            note(f"tileauto: another process is tuning {entry.key}; waiting for it")

    return DiskStore(entry, on_wait=waiting, rebuild=functools.partial(rebuild_best, p))


def _ray_cluster(problem: TuningProblem) -> RayCluster:
    """One cluster connection for the builder and the runner (it connects when they start)."""
    from tileauto.scale.ray import RayCluster

    return RayCluster(problem.settings.ray_address, source="TILEAUTO_RAY_ADDRESS")


def _decide_spin(problem: TuningProblem) -> None:
    """Before the run starts a process or a thread: the run worker's thread pool spins as
    this process's will (:mod:`tileauto.jit.thread_pool`)."""
    from tileauto.jit.thread_pool import decide_spin

    spin = decide_spin(problem.settings.run_threads())
    if spin.source == "busy":
        note(f"tileauto: autotune {problem.name}: {spin.describe()}", show=problem.verbose)
