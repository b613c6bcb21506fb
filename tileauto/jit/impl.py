"""``@tileauto.jit``: turn a kernel factory into a JITImpl that compiles and caches kernels."""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import functools
import os
import shutil
import tempfile
import threading
import uuid
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from tileauto._logging import get_logger
from tileauto.cache.args import CallCache, bind_arguments, call_key, plain_arguments
from tileauto.cache.folders import make_private_dir
from tileauto.errors import CompileError
from tileauto.options import CompileArgs, check_seconds, check_workers
from tileauto.settings import Settings

# Decorating a factory imports neither torch nor TVM: the kernel (torch), the builder and the
# compiler (TVM) are imported by the calls that need them.
if TYPE_CHECKING:
    from tileauto.cache.kernels import KernelStore
    from tileauto.jit.kernel import JITKernel
    from tileauto.records import BuildResult, BuildStatus

log = get_logger("jit")


@dataclass(frozen=True)
class CompileFailure:
    """A config of ``par_compile`` that did not compile: the config and the compiler's message."""

    index: int
    config: Any
    status: BuildStatus
    error: str

    def __bool__(self) -> bool:  # a failure is falsy, so ``[k for k in kernels if k]`` works
        return False

    def __str__(self) -> str:
        return f"config {self.config!r} failed ({self.status.value}): {self.error}"


_PROCESS_DIR_LOCK = threading.Lock()
_PROCESS_DIR: Path | None = None
_PROCESS_CLAIM: Any = None  # its open descriptor is the claim: kept for the process's life


def process_scratch_dir(settings: Settings) -> Path:
    """A staging folder private to this process, removed at exit.

    Claimed (``proc-<pid>-<id>``, see :mod:`tileauto.cache.scratch`): ``tileauto cache
    clear`` leaves it alone while this process lives and removes it once it died.
    """
    global _PROCESS_DIR, _PROCESS_CLAIM
    with _PROCESS_DIR_LOCK:
        if _PROCESS_DIR is None or not _PROCESS_DIR.exists():
            from tileauto.cache.scratch import claim_scratch_dir
            from tileauto.workers.safety import remove_on_sigterm

            base = settings.staging_dir
            try:
                make_private_dir(base)
                _PROCESS_CLAIM = claim_scratch_dir(base, "proc")
                _PROCESS_DIR = _PROCESS_CLAIM.path
                owner, claim = os.getpid(), _PROCESS_CLAIM
                # a forked child shares the claim, but only this process removes the folder
                atexit.register(lambda: os.getpid() == owner and claim.remove())
                remove_on_sigterm(claim)  # a SIGTERM while tuning skips atexit
            except OSError:  # read-only cache dir: fall back to the system temp dir
                _PROCESS_DIR = Path(tempfile.mkdtemp(prefix="tileauto-"))
                atexit.register(shutil.rmtree, _PROCESS_DIR, ignore_errors=True)
        return _PROCESS_DIR


def _check_not_wrapped(factory: Callable[..., Any]) -> None:
    """A TypeError for a factory that is itself a tileauto wrapper (``@autotune``, ``@jit``):
    ``@jit`` goes directly on the function that returns the PrimFunc.

    Its call returns a kernel, not a PrimFunc, and an ``@autotune`` under ``@jit`` would tune
    from inside the outer call's cache entry.
    """
    own = getattr(factory, "__dict__", {})  # its attributes, not what a __getattr__ makes up
    if isinstance(factory, JITImpl):
        given = "@jit"
    elif isinstance(own.get("jit_impl"), JITImpl):  # an AutoTuneImpl (the api layer's)
        given = "@autotune"
    elif isinstance(own.get("target"), JITImpl):  # a StackedParams (@autotune.param)
        given = "@autotune.param"
    else:
        return
    kind = type(factory).__name__
    name = getattr(factory, "__name__", kind)
    raise TypeError(
        f"@jit must decorate the kernel factory itself, got the {given} object {name!r} "
        f"({kind}): write @tileauto.autotune(...) above a single @tileauto.jit(...) above "
        "the factory, and drop the outer @jit"
    )


class JITImpl:
    """A kernel factory wrapped by ``@tileauto.jit``.

    Calling it elaborates the factory with the arguments, compiles the PrimFunc and returns a
    :class:`JITKernel`; the same arguments return the same kernel without compiling again.
    """

    __name__: str  # copied from the factory by functools.update_wrapper

    def __init__(self, factory: Callable[..., Any], compile_args: CompileArgs) -> None:
        if not callable(factory):
            raise TypeError(f"@jit expects a kernel factory function, got {type(factory).__name__}")
        _check_not_wrapped(factory)
        self.factory = factory
        self.compile_args = compile_args
        self._kernels = CallCache(factory)
        self.compile_count = 0
        # the factory's name, doc and __wrapped__ only: merging its __dict__ (updated=) would
        # let a wrapper's attributes replace this impl's own (its cache, its lock)
        functools.update_wrapper(self, factory, updated=())
        if not isinstance(getattr(self, "__name__", None), str):  # a functools.partial has none
            inner = getattr(factory, "func", None)
            self.__name__ = getattr(inner, "__name__", None) or type(factory).__name__

    def __call__(self, *args: Any, **kwargs: Any) -> JITKernel:
        return self._kernels.get(args, kwargs, self._compile)

    def _compile(self, args: tuple, kwargs: dict[str, Any]) -> JITKernel:
        from tileauto.jit.kernel import JITKernel

        settings = Settings.from_env()
        bound = bind_arguments(self.factory, args, kwargs)

        def build() -> Any:
            from tileauto.jit.compiler import compile_to_dir

            out_dir = process_scratch_dir(settings) / f"jit-{uuid.uuid4().hex[:12]}"
            self.compile_count += 1
            artifact = compile_to_dir(
                self.factory,
                args,
                kwargs,
                self.compile_args,
                out_dir,
                config=_tunables(self.factory, bound),
            )
            if self.compile_args.verbose:
                log.warning(
                    "compiled %s in %.3f s", self.__name__, artifact.compile_s + artifact.export_s
                )
            return artifact

        store = self._store(settings, bound)
        if store is None:
            kernel = JITKernel(build())
        else:
            kernel, _ = store.get_or_build(build, JITKernel)
        kernel.origin = (self, args, dict(kwargs))
        return kernel

    def _store(self, settings: Settings, bound: dict[str, Any]) -> KernelStore | None:
        """The disk cache entry of a call (``bound``: its arguments, defaults applied); None
        when the kernel cache is off or the call cannot be keyed (warned)."""
        from tileauto.cache import disk
        from tileauto.cache.kernels import KernelStore
        from tileauto.jit import target_memo

        if not settings.kernel_cache_enabled:
            return None
        ca = self.compile_args
        resolved = target_memo.resolve(ca.target, ca.target_host, settings)
        try:
            return KernelStore.open(
                settings,
                self.factory,
                bound,
                self.compile_args,
                target=resolved.json,
                device=resolved.device,
            )
        except Exception as exc:  # noqa: BLE001 - no key: compile without the disk cache
            disk.warn(f"cannot key {self.__name__} ({exc}); compiling without the disk cache")
            return None

    def par_compile(
        self,
        configs: Iterable[dict[str, Any] | tuple],
        num_workers: int | None = None,
        *,
        timeout_s: float | None = None,
    ) -> list[JITKernel | CompileFailure]:
        """Compile many argument sets in parallel; results are in the order of ``configs``.

        Each config is a dict of keyword arguments for the factory (or a tuple of positional
        ones). A config that fails to compile comes back as a :class:`CompileFailure`.
        ``num_workers`` (at most the CPUs this process may use) defaults to the CPU-fraction
        settings (``TILEAUTO_AUTO_TUNING_*``); ``timeout_s`` to ``TILEAUTO_COMPILE_TIMEOUT``.

        The kernels are those a call with the same arguments returns: a config already
        compiled in this process, or found in the disk cache, is not compiled again, and each
        new kernel is kept for later calls (in memory and in the disk cache). A config given
        twice is compiled once.
        """
        from tileauto.jit.kernel import JITKernel

        check_workers("num_workers", num_workers)
        check_seconds("timeout_s", timeout_s)
        settings = Settings.from_env()
        if timeout_s is not None and settings.compile_isolation == "thread":
            _warn_thread_timeout()
        items = list(configs)
        calls = [_as_call(i, cfg) for i, cfg in enumerate(items)]
        out: list[JITKernel | CompileFailure | None] = [None] * len(calls)
        todo: dict[Any, _Pending] = {}  # one compile per distinct call
        for i, (args, kwargs) in enumerate(calls):
            try:
                key: Any = call_key(self.factory, args, kwargs)
                bound = bind_arguments(self.factory, args, kwargs)
            except TypeError:  # the compile reports it, naming the factory's signature
                key, bound = ("unbound", i), None
            if key in todo:
                todo[key].indices.append(i)
                continue
            kernel = self._kernels.peek(args, kwargs) if bound is not None else None
            store = self._store(settings, bound) if bound is not None and kernel is None else None
            if kernel is None and store is not None:
                loaded = store.load_with(JITKernel)
                kernel = None if loaded is None else self._adopt(args, kwargs, loaded)
            if kernel is not None:
                out[i] = kernel
            else:
                todo[key] = _Pending([i], args, kwargs, bound, store)

        pending = list(todo.values())
        built = self._compile_pending(pending, settings, num_workers, timeout_s)
        for p, kept in zip(pending, built):
            for i in p.indices:
                out[i] = (
                    kept
                    if isinstance(kept, JITKernel)
                    else dataclasses.replace(kept, index=i, config=items[i])
                )
        missing = [i for i, k in enumerate(out) if k is None]
        if missing:  # every config is a hit, a kernel or a failure: a bug if not
            raise RuntimeError(f"par_compile lost configs {missing}")
        return cast("list[JITKernel | CompileFailure]", out)

    def _adopt(self, args: tuple, kwargs: dict[str, Any], kernel: JITKernel) -> JITKernel:
        """A kernel loaded from the disk cache, kept as the call's (the first one kept wins)."""
        kernel.origin = (self, args, dict(kwargs))
        return self._kernels.get(args, kwargs, lambda *_: kernel)

    def _compile_pending(
        self,
        pending: list[_Pending],
        settings: Settings,
        num_workers: int | None,
        timeout_s: float | None,
    ) -> list[JITKernel | CompileFailure]:
        """Build ``pending`` with the other processes that build the same kernels.

        Each config's kernel-cache lock is tried without waiting, a chunk of configs at a
        time (:func:`locks_at_once`): the configs this process holds are built in
        parallel and stored while it holds them; a config another process holds (it is
        building that kernel) is skipped, and once every chunk is done it is waited for and
        loaded, and built here only if that process stored nothing. Processes that par_compile
        the same configs at once so share the work instead of each doing all of it. A chunk
        never holds more locks (each an open file) than half the files this process may still
        open (``ulimit -n``).
        """
        out: dict[int, JITKernel | CompileFailure] = {}
        items = list(enumerate(pending))
        workers = num_workers if num_workers is not None else settings.compile_workers()
        builds = _Builds(self, settings, max(1, min(workers, len(pending))), timeout_s)
        held_elsewhere: list[tuple[int, _Pending]] = []
        try:
            size = locks_at_once(workers)
            for start in range(0, len(items), size):
                held_elsewhere += self._build_locked(items[start : start + size], out, builds)
            # waited for in one order, so that waiting processes never cycle
            held_elsewhere.sort(key=lambda item: item[1].store.key if item[1].store else "")
            for start in range(0, len(held_elsewhere), size):
                self._build_locked(held_elsewhere[start : start + size], out, builds, True)
        finally:
            builds.close()
        return [out[n] for n in range(len(pending))]

    def _build_locked(
        self,
        items: list[tuple[int, _Pending]],
        out: dict[int, JITKernel | CompileFailure],
        builds: _Builds,
        wait: bool = False,
    ) -> list[tuple[int, _Pending]]:
        """Take the lock of each of ``items`` (waiting only with ``wait``), load those another
        process stored meanwhile, build and store the rest while the locks are held; each
        kernel or failure goes to ``out`` by position. Returns the items whose lock another
        process held (none with ``wait``)."""
        from tileauto.jit.kernel import JITKernel

        elsewhere: list[tuple[int, _Pending]] = []
        mine: list[tuple[int, _Pending]] = []
        with contextlib.ExitStack() as locks:
            taken: set[str] = set()
            for n, p in items:
                if p.store is not None:
                    if p.store.key in taken or not locks.enter_context(p.store.locked(wait=wait)):
                        elsewhere.append((n, p))  # being built elsewhere (or twice here)
                        continue
                    taken.add(p.store.key)
                    loaded = p.store.load_with(JITKernel)  # stored since the first look
                    if loaded is not None:
                        out[n] = self._adopt(p.args, p.kwargs, loaded)
                        continue
                mine.append((n, p))
            if mine:
                results = self._build([p for _, p in mine], builds)
                for k, (n, p) in enumerate(mine):
                    out[n] = self._keep(p, results[k])
        if wait and elsewhere:  # one key twice: its first item is built, then loaded here
            return self._build_locked(elsewhere, out, builds, True)
        return elsewhere

    def _build(
        self, pending: list[_Pending], builds: _Builds
    ) -> dict[int, BuildResult | JITKernel]:
        """Compile each of ``pending`` in the tuner's worker processes: by position, the kernel,
        or the result of a build that gave none.

        Each kernel is stored in the disk cache as it arrives, so an interrupt (Ctrl-C, a
        SIGTERM) costs none of the compiles finished before it; one that cannot be made a
        kernel (an output whose extent no input gives) is a failure of its config, and is not
        stored."""
        from tileauto.jit.kernel import JITKernel
        from tileauto.records import BuildRequest, BuildStatus

        requests = [
            BuildRequest(index=n, config={}, args=p.args, kwargs=p.kwargs)
            for n, p in enumerate(pending)
        ]
        results: dict[int, BuildResult | JITKernel] = {}

        def collect(result: BuildResult) -> None:  # called from the build's driver threads
            p = pending[result.index]
            if not (result.ok and result.artifact is not None and p.bound is not None):
                results[result.index] = result
                return
            config = _tunables(self.factory, p.bound)
            artifact = dataclasses.replace(result.artifact, config=config)
            try:
                kernel = JITKernel(artifact)
            except Exception as exc:  # noqa: BLE001 - this config's failure, not the call's
                results[result.index] = dataclasses.replace(
                    result,
                    status=BuildStatus.ERROR,
                    artifact=None,
                    error=f"the compiled kernel cannot be called: {type(exc).__name__}: {exc}",
                )
                return
            if p.store is not None:
                p.store.save(artifact)
            results[result.index] = kernel

        builds.builder().build(requests, collect)
        self.compile_count += len(requests)
        return results

    def _keep(self, p: _Pending, result: BuildResult | JITKernel) -> JITKernel | CompileFailure:
        """The kernel of one ``par_compile`` build (stored by :meth:`_build`); or its failure."""
        from tileauto.records import BuildResult

        if isinstance(result, BuildResult):
            return CompileFailure(0, None, result.status, result.error or "")
        result.origin = (self, p.args, dict(p.kwargs))
        return self._kernels.get(p.args, p.kwargs, lambda *_: result)

    def with_compile_args(self, **changes: Any) -> JITImpl:
        """A copy of this JITImpl with some compile arguments replaced."""
        fields = {**self.compile_args.__dict__, **changes}
        return JITImpl(self.factory, CompileArgs(**fields))

    def __repr__(self) -> str:
        return (
            f"JITImpl({getattr(self.factory, '__qualname__', self.factory)}, {self.compile_args})"
        )


def _tunables(factory: Callable[..., Any], bound: dict[str, Any]) -> dict[str, Any]:
    """The keyword-with-default arguments of a call (what a config may set), JSON-friendly."""
    import inspect

    out = {}
    for name, p in inspect.signature(factory).parameters.items():
        if p.default is not inspect.Parameter.empty and name in bound:
            value = bound[name]
            out[name] = (
                value if isinstance(value, (bool, int, float, str, type(None))) else repr(value)
            )
    return out


@dataclass
class _Pending:
    """A distinct call of ``par_compile`` to build, and the indices of the configs that ask it."""

    indices: list[int]
    args: tuple
    kwargs: dict[str, Any]
    bound: dict[str, Any] | None  # None: the call does not fit the signature
    store: KernelStore | None


_LOCKS_AT_ONCE = 256  # kernel-cache locks a par_compile holds at a time (one open file each)
_LOCKS_PER_CHUNK = 32  # the fewest configs a chunk of a par_compile takes (see locks_at_once)


def locks_at_once(workers: int) -> int:
    """How many kernel-cache locks (one open file each) a ``par_compile`` takes at a time:
    eight per compile worker and at least ``_LOCKS_PER_CHUNK``, so that another process
    compiling the same configs takes the next ones, while the workers still get whole rounds
    of configs (a chunk is built to its end before the next: one per worker would leave
    workers idle at every chunk's slowest compile); at most ``_LOCKS_AT_ONCE``, and at most
    half the files this process may still open (the soft ``RLIMIT_NOFILE``, less those open
    now); at least 1."""
    import resource

    try:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):  # pragma: no cover - no such limit here
        soft = resource.RLIM_INFINITY
    room = _LOCKS_AT_ONCE
    if soft != resource.RLIM_INFINITY:
        room = (soft - _open_files()) // 2
    return max(1, min(_LOCKS_AT_ONCE, max(8 * workers, _LOCKS_PER_CHUNK), room))


def _open_files() -> int:
    """How many files this process has open now (0 where the system cannot say)."""
    for folder in ("/proc/self/fd", "/dev/fd"):
        try:
            return len(os.listdir(folder))
        except OSError:
            continue
    return 0


class _Builds:
    """The builder of one ``par_compile``: started at its first build (a call served by the
    caches starts no worker), shared by every chunk, closed at the end."""

    def __init__(
        self, impl: JITImpl, settings: Settings, workers: int, timeout_s: float | None
    ) -> None:
        self.impl = impl
        self.settings = settings
        self.workers = workers
        self.timeout_s = timeout_s
        self._builder: Any = None

    def builder(self) -> Any:
        """The started builder (a :class:`~tileauto.build.builder.Builder`)."""
        if self._builder is None:
            from tileauto.build.builder import Builder

            settings = self.settings
            builder = Builder(
                self.impl.factory,
                self.impl.compile_args,
                workers=self.workers,
                isolation=settings.compile_isolation,
                timeout_s=self.timeout_s or settings.compile_timeout_s,
                staging_dir=process_scratch_dir(settings),
            )
            builder.start()  # the workers forked from this process when that is safe
            self._builder = builder
        return self._builder

    def close(self) -> None:
        if self._builder is not None:
            self._builder.close()
            self._builder = None


_THREAD_TIMEOUT_WARNED = threading.Event()


def _warn_thread_timeout() -> None:
    """Say once per process that ``timeout_s`` does nothing with compiles in threads."""
    if _THREAD_TIMEOUT_WARNED.is_set():
        return
    _THREAD_TIMEOUT_WARNED.set()
    warnings.warn(
        "par_compile: timeout_s is ignored with TILEAUTO_COMPILE_ISOLATION=thread (a compile "
        "in a thread of this process cannot be stopped); unset it, or set it to process, for "
        "compiles limited in time",
        RuntimeWarning,
        stacklevel=3,
    )


def _as_call(i: int, cfg: Any) -> tuple[tuple, dict[str, Any]]:
    """``configs[i]`` of ``par_compile`` as a call: keyword arguments, or positional ones,
    with numpy scalars as Python numbers (as a call takes them: ``np.int64(4096)`` is 4096)."""
    if isinstance(cfg, dict):
        return plain_arguments((), dict(cfg))
    if isinstance(cfg, (tuple, list)):
        return plain_arguments(tuple(cfg), {})
    raise TypeError(
        f"configs[{i}] must be a dict of keyword arguments or a tuple, got {type(cfg).__name__}"
    )


def jit(
    func: Callable[..., Any] | None = None,
    *,
    out_idx: Any = None,
    target: Any = "auto",
    target_host: Any = None,
    execution_backend: str = "auto",
    pass_configs: dict[str, Any] | None = None,
    verbose: bool = False,
) -> Any:
    """Decorate a kernel factory: calls elaborate, compile (once per arguments) and return a JITKernel.

    Usable as ``@jit`` or ``@jit(out_idx=[-1], target="llvm")``.

    Args:
        out_idx: parameters allocated and returned by the kernel (e.g. ``[-1]``).
        target: ``"auto"`` (CUDA when a GPU is usable, else this CPU), ``"llvm"``, ``"cuda"``,
            a dict or a ``tvm.target.Target``.
        target_host: host target for device code (default: this CPU).
        execution_backend: ``"auto"`` or ``"tvm_ffi"``.
        pass_configs: TVM PassContext options.
        verbose: log each compile.
    """
    compile_args = CompileArgs(
        out_idx=out_idx,
        target=target,
        target_host=target_host,
        execution_backend=execution_backend,
        pass_configs=pass_configs,
        verbose=verbose,
    )

    def wrap(factory: Callable[..., Any]) -> JITImpl:
        return JITImpl(factory, compile_args)

    return wrap(func) if func is not None else wrap


__all__ = ["CompileError", "CompileFailure", "JITImpl", "jit"]
