"""A build stage in front of another: configs compiled before come from the kernel cache.

A tuning's compile depends on the factory, the call's arguments, the config, the compile
arguments and the target (:class:`tileauto.cache.kernels.ConfigKernels`), not on how configs
are checked or timed. So a config another tuning compiled (another reference, tolerance,
warm-up or budget) is loaded from ``kernels/<key>/`` instead of compiled again, and each new
compile that succeeds is stored there as it arrives.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import threading
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tileauto._logging import get_logger
from tileauto.cache.kernels import ConfigKernels, KernelStore
from tileauto.artifact import KernelArtifact
from tileauto.records import BuildRequest, BuildResult, BuildStatus

log = get_logger("builder")


class CachedBuilder:
    """The build stage ``inner``, with the kernel cache in front of it.

    Args:
        inner: the stage that compiles what the cache does not hold.
        kernels: the tuning's entries in the kernel cache.

    After a build, ``reused`` and ``compiled`` count the configs served from the cache and
    the compiles stored in it, over every build of this stage.
    """

    def __init__(
        self, inner: Any, kernels: ConfigKernels, private_dir: Path | None = None
    ) -> None:
        self.inner = inner
        self.kernels = kernels
        # where a hit's kernel folder is linked before the run loads it (the tuning's scratch
        # folder): a cache clear, verify --delete or another process's pruning may remove the
        # entry meanwhile; None: the entry's own folder is used
        self.private_dir = private_dir
        self.reused = 0
        self.compiled = 0
        self._lock = threading.Lock()
        self._storing = True  # off after a failed write (warned once): the rest is not tried

    @property
    def workers(self) -> int:
        return int(self.inner.workers)

    def start(self) -> None:
        self.inner.start()

    def cancel(self) -> None:
        self.inner.cancel()

    def close(self) -> None:
        if self.reused or self.compiled:
            log.info(
                "kernel cache: %d config(s) compiled before, %d compiled and stored",
                self.reused,
                self.compiled,
            )
        self.inner.close()

    def build(
        self,
        requests: Sequence[BuildRequest],
        on_result: Callable[[BuildResult], None] | None = None,
    ) -> None:
        """Every request's result to ``on_result`` as each is ready, hits first: loaded from
        the cache, or built by ``inner`` (and then stored)."""

        def give(result: BuildResult) -> None:
            if on_result is not None:
                on_result(result)

        misses: list[tuple[BuildRequest, KernelStore | None]] = []
        for request in requests:
            store = self.kernels.store(request.config)
            artifact = store.load() if store is not None else None
            if artifact is not None:
                artifact = self._private(artifact)
            if artifact is None:
                misses.append((request, store))
                continue
            artifact = dataclasses.replace(artifact, config=dict(request.config))
            result = BuildResult(
                index=request.index, config=request.config, status=BuildStatus.OK,
                artifact=artifact, compile_s=0.0,
            )  # fmt: skip
            with self._lock:
                self.reused += 1
            give(result)
        if not misses:
            return

        def arrived(result: BuildResult) -> None:
            request, store = misses[result.index]
            if result.ok and result.artifact is not None and store is not None and self._storing:
                stored = store.save(result.artifact, warn=False)  # the tuning's entry warns
                with self._lock:
                    self.compiled += stored
                    self._storing = self._storing and stored
            give(dataclasses.replace(result, index=request.index))

        renumbered = [dataclasses.replace(r, index=k) for k, (r, _) in enumerate(misses)]
        self.inner.build(renumbered, arrived)

    def _private(self, artifact: KernelArtifact) -> KernelArtifact | None:
        """``artifact`` with its folder linked (hard links, else copies) into the private
        folder; None, a miss, when the entry went before it was linked whole."""
        if self.private_dir is None or artifact.directory is None:
            return artifact
        own = Path(self.private_dir) / f"hit-{uuid.uuid4().hex[:12]}"
        try:
            shutil.copytree(artifact.directory, own, copy_function=_link_or_copy)
        except (OSError, shutil.Error) as exc:
            shutil.rmtree(own, ignore_errors=True)
            log.info("kernel cache: %s went while it was read (%s); compiling", own, exc)
            return None
        return dataclasses.replace(artifact, directory=own)


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)  # the same file: a delete of the entry leaves it to this tuning
    except OSError:  # another file system, or no hard links there
        shutil.copy2(src, dst)
