"""AutotuneResult: the tuned config, its latency, the loaded kernel and every trial.

It also ships a tuned kernel: :meth:`AutotuneResult.save_to_disk` writes a folder (the same
format as a cache entry) and :meth:`AutotuneResult.load_from_disk` loads it in another process
or on another machine without compiling or tuning, or recompiles the stored best config when
the stored library cannot run there.
"""

from __future__ import annotations

import shutil
import uuid
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tileauto._logging import get_logger
from tileauto.records import Trial

log = get_logger("result")

if TYPE_CHECKING:
    from tileauto.summary import TuningResult


@dataclass
class AutotuneResult:
    """What a tuning run returns (and what the cache stores).

    Attributes:
        config: the best config (the tunable arguments).
        latency: its median latency in ms.
        ref_latency: the reference program's median latency in ms (None without ref_prog).
        kernel: the best kernel, ready to call.
        trials: one record per config, index-aligned with the config list.
        default_trial: the factory's default config, always measured.
        tuning_s: wall time of the run.
        log_path: the log file of this run, if one was written.
        cache_hit: whether it came from the disk cache (or a saved folder) without tuning.
        key: the cache key of the tuning problem (None when the tuning cache was off).
        extra: more facts about the run (``"problem"``: the problem arguments, if plain).
    """

    config: dict[str, Any]
    latency: float
    ref_latency: float | None
    kernel: Any
    trials: tuple[Trial, ...] = ()
    default_trial: Trial | None = None
    tuning_s: float = 0.0
    log_path: Path | None = None
    cache_hit: bool = False
    key: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # compiles the best config again (set by the tuner; None for a loaded folder): used when
    # the kernel's files are gone (a cache entry another process removed) and must be saved
    rebuild: Callable[[], Any] | None = field(default=None, repr=False, compare=False)

    @property
    def default_latency(self) -> float | None:
        """Median latency of the default config (ms), if it ran."""
        t = self.default_trial
        return t.latency_ms if t is not None and t.ok else None

    @property
    def speedup(self) -> float | None:
        """Default latency over best latency."""
        d = self.default_latency
        return d / self.latency if d and self.latency else None

    @property
    def best_trial(self) -> Trial | None:
        for t in self.trials:
            if t.ok and t.config == self.config:
                return t
        return (
            self.default_trial
            if self.default_trial and self.default_trial.config == self.config
            else None
        )

    def table(self) -> str:
        """The per-config report table."""
        from tileauto.report import format_table

        best = self.best_trial
        return format_table(self.trials, best.index if best else None, self.default_trial)

    def as_tuning_result(self) -> TuningResult:
        """The cuTile-style view: best (mean, 95% margin, samples), successes, failures."""
        from tileauto.summary import TuningResult

        trials = list(self.trials)
        best = self.best_trial
        if best is not None and best not in trials:
            trials.append(best)  # the default config, when it won and is not in the list
        return TuningResult.from_trials(trials, self.config)

    # -- shipping ---------------------------------------------------------------------------
    def save_to_disk(self, path: str | Path, *, verbose: bool = False) -> Path:
        """Write this result to the folder ``path`` for another process or machine.

        The folder holds best_config.json, latency.json, trials.json, the kernel's shared
        library, sources and parameter description, and a manifest of sha256 hashes (see
        ``docs/cache_format.md``). It is written next to ``path`` and renamed into place, so
        ``path`` is never half-written. An existing result folder at ``path`` is replaced;
        any other non-empty folder is refused.

        Raises:
            CacheError: ``path`` is a non-empty folder that is not a saved result.
            OSError: the folder could not be written.
        """
        from tileauto.cache import disk
        from tileauto.cache.entry import KIND_TUNED, fill_result
        from tileauto.cache.key import versions
        from tileauto.errors import CacheError
        from tileauto.jit.target_memo import device_fingerprint

        path = Path(path).expanduser().absolute()
        if path.exists() and (not path.is_dir() or _foreign_folder(path)):
            raise CacheError(
                f"save_to_disk({str(path)!r}): the path exists and is not a saved tileauto "
                "result; give a new or empty folder"
            )
        artifact = self._complete_artifact(path)
        to_save = replace(self, kernel=_Saved(artifact))
        meta = {
            **versions(),
            "kind": KIND_TUNED,
            "key": self.key,
            "kernel": _kernel_name(self.kernel),
            "target": artifact.target,
            "device": device_fingerprint(artifact.device_type),
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        staging = path.parent / f".{path.name}.stage-{uuid.uuid4().hex[:8]}"
        staging.mkdir(mode=0o700)
        try:
            disk.write_entry(
                path,
                lambda out: _fill_complete(to_save, out, fill_result),
                meta,
                staging,
                shared=True,
            )
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        if verbose:
            print(f"tileauto: saved {artifact.func_name} ({self.config}) to {path}", flush=True)
        return path

    def _complete_artifact(self, path: Path) -> Any:
        """The kernel's artifact with its library on disk, recompiled if its files are gone.

        Raises:
            CacheError: the library is gone and this result cannot compile it again.
        """
        from tileauto.errors import CacheError

        artifact = self.kernel.artifact
        if artifact.lib_path.is_file():
            return artifact
        if self.rebuild is None:
            raise CacheError(
                f"save_to_disk({str(path)!r}): the kernel's library {artifact.lib_path} is gone "
                "(its cache entry was removed?) and this result cannot compile it again; tune "
                "again, or load the result with load_from_disk(..., factory=...)"
            )
        log.warning(
            "save_to_disk: the kernel's library %s is gone (its cache entry was removed?); "
            "compiling the best config %s again",
            artifact.lib_path,
            self.config,
        )
        return self.rebuild()

    @classmethod
    def load_from_disk(
        cls, path: str | Path, compile_args: Any = None, *, factory: Any = None
    ) -> AutotuneResult:
        """Load a result written by :meth:`save_to_disk` (or a cache entry) without tuning.

        The stored shared library is loaded as is: no compile, no tuning. When it cannot run
        here (another CPU architecture or instruction set, another GPU, or a library that
        does not load), the stored best config is recompiled for this machine with a warning:
        from the stored TVMScript, or with ``factory`` (a ``@jit`` factory or plain factory)
        when given.

        Args:
            path: the folder.
            compile_args: a :class:`~tileauto.options.CompileArgs` or a dict of its fields.
                ``out_idx`` overrides the stored one; ``target`` (when not ``"auto"``) and
                ``pass_configs`` are used when recompiling, and a target of another kind
                than the stored one forces a recompile.
            factory: recompile with this factory and the stored problem arguments instead of
                the stored TVMScript.

        Raises:
            CacheError: the folder is missing, incomplete, corrupt, or writable by others.
        """
        import os

        from tileauto.cache import disk
        from tileauto.cache.entry import KIND_TUNED, REQUIRED_TUNED, read_result
        from tileauto.errors import CacheError
        from tileauto.jit.kernel import JITKernel

        path = Path(path).expanduser().absolute()
        args = _compile_args(compile_args)
        # A shipped folder may belong to root (installed in an image); others must not write it.
        problem = disk.verify(path, required=REQUIRED_TUNED, trusted_uids={os.getuid(), 0})
        if problem is not None:
            raise CacheError(f"load_from_disk({str(path)!r}): {problem}")
        try:
            manifest = disk.read_manifest(path)
            if manifest.get("kind", KIND_TUNED) != KIND_TUNED:
                raise CacheError(f"{path} holds a plain kernel, not a tuned result")
            stored = read_result(path, manifest)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise CacheError(f"load_from_disk({str(path)!r}): unreadable records ({exc})") from exc
        artifact = stored.artifact
        if args is not None and args.out_idx is not None:
            artifact = _with_out_idx(artifact, args.out_idx)
        reason = _cannot_run_here(artifact, args)
        kernel = None
        if reason is None:
            try:
                kernel = JITKernel(artifact)
            except Exception as exc:  # noqa: BLE001 - any load failure: recompile instead
                reason = f"the library does not load: {_first_line(exc)}"
        if kernel is None:
            warnings.warn(
                f"tileauto: the kernel stored in {path} cannot run here ({reason}); "
                f"recompiling its best config {stored.config}",
                RuntimeWarning,
                stacklevel=2,
            )
            kernel = _recompile(stored, artifact, args, factory)
        return cls.from_stored(stored, kernel)

    @classmethod
    def from_stored(cls, stored: Any, kernel: Any) -> AutotuneResult:
        """A result from a :class:`~tileauto.cache.entry.StoredResult` and its loaded kernel."""
        return cls(
            config=dict(stored.config),
            latency=stored.latency_ms,
            ref_latency=stored.ref_latency_ms,
            kernel=kernel,
            trials=stored.trials,
            default_trial=stored.default_trial,
            tuning_s=stored.tuning_s,
            cache_hit=True,
            key=stored.manifest.get("key"),
            extra={"problem": stored.problem} if stored.problem is not None else {},
        )

    @classmethod
    def from_cache(cls, store: Any, verbose: bool = False) -> AutotuneResult | None:
        """The cached result of a :class:`~tileauto.cache.tuning.TuningStore`, or None on a miss.

        The fast path of a warm start: verify the entry, read its JSON, load its library.
        Nothing is compiled and no worker process is started. An entry whose library does
        not load is a miss with a warning.
        """
        from tileauto.jit.kernel import JITKernel

        stored = store.load()
        if stored is None:
            return None
        try:
            kernel = JITKernel(stored.artifact)
        except Exception as exc:  # noqa: BLE001 - treat as a miss: tune again
            store.report(f"autotuner/{store.key} does not load ({_first_line(exc)}); tuning again")
            return None
        result = cls.from_stored(stored, kernel)
        result.key = store.key
        if verbose:
            print(
                f"tileauto: using cached tuning {store.key} ({result.config}, "
                f"{result.latency:.4f} ms)",
                flush=True,
            )
        return result


# -- helpers of load_from_disk ----------------------------------------------------------------
def _foreign_folder(path: Path) -> bool:
    """A non-empty folder that is not a saved result (never replaced by save_to_disk)."""
    from tileauto.cache.disk import MANIFEST

    return any(path.iterdir()) and not (path / MANIFEST).is_file()


def _kernel_name(kernel: Any) -> str:
    origin = getattr(kernel, "origin", None)
    impl = origin[0] if origin else None
    return str(getattr(impl, "__qualname__", None) or kernel.artifact.func_name)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _compile_args(compile_args: Any) -> Any:
    from tileauto.options import CompileArgs

    if compile_args is None or isinstance(compile_args, CompileArgs):
        return compile_args
    if isinstance(compile_args, dict):
        return CompileArgs(**compile_args)
    raise TypeError(
        f"compile_args must be a CompileArgs, a dict of its fields or None, got "
        f"{type(compile_args).__name__}"
    )


def _with_out_idx(artifact: Any, out_idx: tuple[int, ...]) -> Any:
    from tileauto.jit.compiler import resolve_out_idx

    return replace(artifact, out_idx=resolve_out_idx(out_idx, len(artifact.params)))


def _cannot_run_here(artifact: Any, args: Any) -> str | None:
    """Why the stored library cannot run on this machine, or None when it can.

    Answered from the target memo when this machine has answered it before, so that loading
    a result does not import TVM's compiler (see :mod:`tileauto.jit.target_memo`).
    """
    from tileauto.jit.target_memo import cannot_run_here

    return cannot_run_here(artifact, args)


def _recompile(stored: Any, artifact: Any, args: Any, factory: Any) -> Any:
    """Compile the stored best config for this machine (from its TVMScript, or the factory)."""
    from tileauto.errors import CacheError
    from tileauto.jit.compiler import compile_to_dir
    from tileauto.jit.impl import process_scratch_dir
    from tileauto.jit.kernel import JITKernel
    from tileauto.options import CompileArgs
    from tileauto.settings import Settings
    from tileauto.space import merged_pass_configs, split_pass_configs

    target = args.target if args is not None else "auto"
    if target is None or (isinstance(target, str) and target.strip() == "auto"):
        target = "cuda" if artifact.device_type == "cuda" else "llvm"
    compile_args = CompileArgs(
        out_idx=artifact.out_idx or None,
        target=target,
        target_host=args.target_host if args is not None else None,
        pass_configs=args.pass_configs if args is not None else None,
    )
    if factory is not None:
        fn = getattr(factory, "factory", factory)
        problem = stored.problem or {}
        call_args, call_kwargs = tuple(problem.get("args", ())), dict(problem.get("kwargs", {}))
        arguments, own = split_pass_configs(stored.config)
        call_kwargs.update(arguments)
    else:
        script = artifact.directory / artifact.SCRIPT
        if not script.is_file():
            raise CacheError(
                f"{stored.path} cannot run here and holds no TVMScript to recompile; pass "
                "factory= (the kernel factory) to load_from_disk"
            )
        import tvm

        func = tvm.script.from_source(script.read_text())

        def fn() -> Any:
            return func

        call_args, call_kwargs = (), {}
    _, own = split_pass_configs(stored.config)
    if own:  # the best config's own TVM pass options (see the tuning guide)
        compile_args = replace(
            compile_args, pass_configs=merged_pass_configs(compile_args.pass_configs, own)
        )
    out_dir = process_scratch_dir(Settings.from_env()) / f"reload-{uuid.uuid4().hex[:12]}"
    built = compile_to_dir(
        fn, call_args, call_kwargs, compile_args, out_dir, config=dict(stored.config)
    )
    return JITKernel(built)


@dataclass(frozen=True)
class _Saved:
    """What ``fill_result`` reads of a kernel: its artifact (possibly recompiled)."""

    artifact: Any


def _fill_complete(result: AutotuneResult, out: Path, fill: Callable[[Any, Path], None]) -> None:
    """Fill a saved folder, refusing to publish one without the kernel's library."""
    from tileauto.errors import CacheError

    fill(result, out)
    lib = out / "kernel" / result.kernel.artifact.LIB_NAME
    if not lib.is_file():
        raise CacheError(f"save_to_disk: {lib.name} could not be written; nothing was published")
