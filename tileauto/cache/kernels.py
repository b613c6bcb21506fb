"""The kernel cache: plain ``@jit`` compiles and a tuning's compiles under ``kernels/<key>/``.

The key is the factory's fingerprint, the bound arguments (tensors by shape, dtype, strides
and device), the compile arguments, the target, the device and the versions. A second process
calling a ``@jit`` factory with the same arguments loads the shared library instead of
compiling; concurrent processes compiling one key compile it once (the others wait, then load).

A tuning's compile of a config is keyed the same way, with the config (:class:`ConfigKernels`):
by what the compile depends on, never by how configs are checked or timed, so a tuning of the
same space with another reference, tolerance, warm-up or budget compiles nothing twice.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from tileauto._logging import get_logger
from tileauto.artifact import KernelArtifact
from tileauto.cache import disk
from tileauto.cache.args import bind_arguments
from tileauto.cache.entry import KIND_KERNEL, REQUIRED, read_artifact, write_kernel_dir
from tileauto.cache.key import (
    UnkeyableError,
    describe_arguments,
    digest,
    factory_module,
    function_fingerprint,
    report_unkeyable,
    versions,
)
from tileauto.cache.locks import best_effort_lock
from tileauto.options import CompileArgs
from tileauto.settings import Settings
from tileauto.space import config_id, merged_pass_configs, split_pass_configs

log = get_logger("cache")

K = TypeVar("K")


class KernelStore:
    """The cache entry of one ``@jit`` call. :meth:`open` returns None when there is none."""

    def __init__(self, settings: Settings, key: str, meta: dict[str, Any]) -> None:
        self.settings = settings
        self.root = settings.cache_dir
        self.key = key
        self.meta = meta
        self.entry_dir = self.root / KIND_KERNEL / key
        self.report = disk.OnceWarner()

    @classmethod
    def open(
        cls,
        settings: Settings,
        factory: Callable[..., Any],
        bound: dict[str, Any],
        compile_args: CompileArgs,
        *,
        target: str,
        device: dict[str, Any],
    ) -> KernelStore | None:
        """The store for ``factory`` called with ``bound`` (its arguments, defaults applied).

        None when the kernel cache is off, or when something the factory reaches cannot be
        keyed (logged once): that call compiles without the disk cache.
        """
        if not settings.kernel_cache_enabled:
            return None
        name = getattr(factory, "__qualname__", "kernel")
        try:
            key = digest(
                {
                    "versions": versions(),
                    "factory": function_fingerprint(factory),
                    "name": name,
                    "args": describe_arguments(bound),
                    "compile": compile_args.fingerprint(),
                    "target": target,
                    "device": device,
                }
            )
        except UnkeyableError as exc:
            report_unkeyable(name, exc)
            return None
        module = factory_module(factory)
        return cls.at(settings, key, name, target=target, device=device, module=module)

    @classmethod
    def at(
        cls,
        settings: Settings,
        key: str,
        name: str,
        *,
        target: str,
        device: dict[str, Any],
        module: str | None = None,
    ) -> KernelStore:
        """The store of the entry ``key`` (a kernel of ``name`` defined in ``module``, for
        ``target`` and ``device``); the module labels it as tuned entries are labelled."""
        meta = {
            **versions(),
            "kind": KIND_KERNEL,
            "key": key,
            "kernel": name,
            "target": target,
            "device": device,
        }
        if module:
            meta["module"] = module
        return cls(settings, key, meta)

    def load(self) -> KernelArtifact | None:
        """The stored kernel, or None on a miss. A bad entry is a miss with one warning."""
        try:
            os.utime(self.entry_dir)  # used now: the size limit deletes what was used longest ago
        except FileNotFoundError:
            return None
        except OSError:  # a read-only cache: served, never pruned from here
            if not self.entry_dir.exists():
                return None
        expect = {"key": self.key, "kind": KIND_KERNEL, **versions()}
        problem = disk.verify(self.entry_dir, expect, required=REQUIRED)
        if problem is None:
            try:
                return read_artifact(self.entry_dir)
            except (OSError, ValueError, KeyError, TypeError) as exc:
                problem = f"unreadable kernel.json ({type(exc).__name__}: {exc})"
        self.report(f"entry kernels/{self.key} is unusable: {problem}; compiling again")
        return None

    @contextlib.contextmanager
    def locked(self, *, wait: bool = True) -> Iterator[bool]:
        """Hold this key's lock (skipped, with a warning, where it cannot be created); yields
        whether it is held: False only with ``wait=False`` while another process holds it
        (building this kernel, most likely)."""
        with best_effort_lock(self.root / ".locks", f"{KIND_KERNEL}-{self.key}", wait=wait) as held:
            yield held

    def save(self, artifact: KernelArtifact, *, warn: bool = True) -> bool:
        """Store a compiled kernel. A failed write is a warning (a log line without ``warn``),
        not an error."""
        try:
            disk.write_entry(
                self.entry_dir,
                lambda out: write_kernel_dir(artifact, out),
                self.meta,
                self.settings.staging_dir,
            )
            disk.sweep(self.entry_dir.parent)
        except OSError as exc:
            message = f"could not write kernels/{self.key} ({exc}); the kernel is not cached"
            if warn:
                disk.warn(message)
            else:
                log.info("%s", message)
            return False
        return True

    def get_or_build(
        self, build: Callable[[], KernelArtifact], load: Callable[[KernelArtifact], K]
    ) -> tuple[K, bool]:
        """Load the stored kernel, or build, load and store it. Returns (kernel, built).

        ``load`` turns an artifact into a kernel; when it fails on a stored artifact (the
        library does not load here) that is a warned miss and the kernel is built again.
        """
        hit = self.load_with(load)
        if hit is not None:
            return hit, False
        with self.locked():
            hit = self.load_with(load)  # another process may have built it meanwhile
            if hit is not None:
                return hit, False
            artifact = build()
            kernel = load(artifact)
            self.save(artifact)
            return kernel, True

    def load_with(self, load: Callable[[KernelArtifact], K]) -> K | None:
        """The stored kernel made by ``load``, or None on a miss (a library that does not load
        here is a miss, warned once)."""
        artifact = self.load()
        if artifact is None:
            return None
        try:
            return load(artifact)
        except Exception as exc:  # noqa: BLE001 - a library that does not load is a miss
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            self.report(f"kernels/{self.key} does not load ({first}); compiling again")
            return None


class ConfigKernels:
    """A tuning's compiles in the kernel cache: one entry per config, shared by every tuning of
    the same factory, arguments, compile arguments, target and device.

    The factory is fingerprinted once (:meth:`open`); each config's key then costs a digest.
    The key holds the config as given (the kernel's description records it), its arguments
    applied to the call, and the compile arguments with the config's own ``pass_configs``.
    """

    def __init__(
        self,
        settings: Settings,
        base: dict[str, Any],
        call: tuple[Callable[..., Any], tuple, dict[str, Any]],
        compile_args: CompileArgs,
    ) -> None:
        self.settings = settings
        self.base = base
        self.base_digest = digest(base)
        self.factory, self.args, self.kwargs = call
        self.module = factory_module(self.factory)  # a label, not part of the key
        self.compile_args = compile_args

    @classmethod
    def open(
        cls,
        settings: Settings,
        factory: Callable[..., Any],
        args: tuple,
        kwargs: dict[str, Any],
        compile_args: CompileArgs,
        *,
        target: str,
        device: dict[str, Any],
    ) -> ConfigKernels | None:
        """The compiles of ``factory(*args, **kwargs, **config)``; None when either cache is
        off (a tuning that caches nothing leaves no compile behind) or the factory cannot be
        keyed (logged once: the tuning compiles every config)."""
        if not (settings.kernel_cache_enabled and settings.tuning_cache_enabled):
            return None
        name = getattr(factory, "__qualname__", "kernel")
        try:
            fingerprint = function_fingerprint(factory)
        except UnkeyableError as exc:
            report_unkeyable(name, exc)
            return None
        base = {
            "versions": versions(),
            "factory": fingerprint,
            "name": name,
            "target": target,
            "device": device,
        }
        return cls(settings, base, (factory, args, kwargs), compile_args)

    def store(self, config: dict[str, Any]) -> KernelStore | None:
        """The entry of ``config``'s compile; None when its arguments cannot be keyed."""
        arguments, own = split_pass_configs(config)
        compile_args = self.compile_args
        if own:
            merged = merged_pass_configs(compile_args.pass_configs, own)
            compile_args = dataclasses.replace(compile_args, pass_configs=merged)
        try:
            bound = bind_arguments(
                self.factory, self.args, {**self.kwargs, **arguments}, partial=True
            )
            described = describe_arguments(bound)
        except (UnkeyableError, TypeError):
            return None  # compiled as usual, and its compile error reported there
        key = digest(
            {
                "base": self.base_digest,  # the factory's fingerprint is serialized once
                "args": described,
                "compile": compile_args.fingerprint(),
                "config": config_id(config),
            }
        )
        return KernelStore.at(
            self.settings,
            key,
            self.base["name"],
            target=self.base["target"],
            device=self.base["device"],
            module=self.module,
        )
