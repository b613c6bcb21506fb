"""The winner as a callable kernel: its built library loaded, or its config compiled again.

The default :data:`~tileauto.tune.stages.KernelLoader` of a session, and the ``rebuild`` a
result keeps so that saving it still works when its cache entry was removed meanwhile.
"""

from __future__ import annotations

import dataclasses
import shutil
import uuid
from typing import Any

from tileauto.artifact import KernelArtifact
from tileauto.tune.problem import TuningProblem
from tileauto.tune.stages import KernelLoader


def kernel_loader(problem: TuningProblem) -> KernelLoader:
    """Loads a winner built in this run (copied out of the run's scratch folder, which is
    removed at its end), or compiles one an earlier run measured."""

    def load(artifact: KernelArtifact | None, config: dict[str, Any]) -> Any:
        # imported here: a session answered by its store never loads TVM's compiler
        from tileauto.jit.impl import JITImpl, process_scratch_dir
        from tileauto.jit.kernel import JITKernel

        if isinstance(artifact, KernelArtifact):
            keep = process_scratch_dir(problem.settings) / f"best-{uuid.uuid4().hex[:12]}"
            shutil.copytree(artifact.directory, keep)
            return JITKernel(artifact.moved_to(keep))
        if artifact is not None:
            raise TypeError(
                f"the default kernel loader loads KernelArtifacts, not {type(artifact).__name__}:"
                " give the session a load_kernel for what its builder makes"
            )
        impl = problem.jit_impl or JITImpl(problem.factory, problem.compile_args)
        return impl(*problem.args, **{**problem.kwargs, **config})

    return load


def rebuild_best(problem: TuningProblem, config: dict[str, Any]) -> Any:
    """Compile ``config`` of the problem's factory into this process's scratch folder."""
    from tileauto.cache.args import plain_arguments
    from tileauto.jit.compiler import compile_to_dir
    from tileauto.jit.impl import process_scratch_dir
    from tileauto.space import merged_pass_configs, split_pass_configs

    args, kwargs = plain_arguments(problem.args, problem.kwargs)
    compile_args = problem.compile_args
    out_dir = process_scratch_dir(problem.settings) / f"rebuild-{uuid.uuid4().hex[:12]}"
    arguments, own = split_pass_configs(config)
    if own:
        merged = merged_pass_configs(compile_args.pass_configs, own)
        compile_args = dataclasses.replace(compile_args, pass_configs=merged)
    return compile_to_dir(
        problem.factory, args, {**kwargs, **arguments}, compile_args, out_dir, config=dict(config)
    )
