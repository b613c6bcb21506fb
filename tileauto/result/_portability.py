"""Whether a stored kernel can run on this machine, and compiling its config again when not.

Answered from the target memo when this machine has answered it before, so that loading a
result does not import TVM's compiler (see :mod:`tileauto.jit.target_memo`); the compiler,
the kernel (torch) and the space are imported only to compile again.
"""

from __future__ import annotations

import uuid
import warnings
from dataclasses import replace
from typing import Any

from tileauto.errors import CacheError
from tileauto.options import CompileArgs


def cannot_run_here(artifact: Any, compile_args: Any) -> str | None:
    """Why the stored library cannot run on this machine, or None when it can."""
    from tileauto.jit.target_memo import cannot_run_here as memo_answer

    return memo_answer(artifact, compile_args)


def with_out_idx(artifact: Any, out_idx: tuple[int, ...]) -> Any:
    """The artifact with other outputs (``out_idx`` resolved against its parameters)."""
    from tileauto.jit.compiler import resolve_out_idx

    return replace(artifact, out_idx=resolve_out_idx(out_idx, len(artifact.params)))


def recompile_factory(factory: Any) -> Any:
    """The plain factory that ``load_from_disk(factory=...)`` compiles with, or None.

    An ``@autotune`` function stands for its ``@jit`` factory, and a ``@jit`` factory for the
    function it wraps: calling either would tune or compile with the ``@jit`` options, where
    a recompile needs the PrimFunc of one config.

    Raises:
        TypeError: ``factory`` is not callable.
    """
    if factory is None:
        return None
    plain = getattr(getattr(factory, "jit_impl", factory), "factory", factory)
    if not callable(plain):
        raise TypeError(
            "load_from_disk(factory=...) must be the kernel's @jit factory, the "
            "@tileauto.autotune function over it, or a plain function returning a tvm PrimFunc "
            f"or IRModule; got {type(factory).__name__} {factory!r:.60}"
        )
    return plain


def recompile_args(tuned: dict[str, Any] | None, given: CompileArgs | None) -> CompileArgs:
    """The compile arguments of a recompile: the tuning's (``tuned``, as the saved folder
    records them; None for an older folder), with the caller's (``given``) over them.

    A field the caller leaves at its default keeps the tuning's; ``pass_configs`` are merged,
    the caller's value winning for an option both name. ``target`` and ``out_idx`` are not
    set here (the recompile's own).
    """
    from tileauto.space import merged_pass_configs

    tuned = tuned or {}
    given = given if given is not None else CompileArgs()
    backend = given.execution_backend
    if backend == "auto" and tuned.get("execution_backend") is not None:
        backend = str(tuned["execution_backend"])
    return CompileArgs(
        target_host=given.target_host
        if given.target_host is not None
        else tuned.get("target_host"),
        execution_backend=backend,
        pass_configs=merged_pass_configs(tuned.get("pass_configs") or None, given.pass_configs),
        verbose=given.verbose,
    )


def recompile(stored: Any, artifact: Any, args: Any, factory: Any) -> Any:
    """Compile the stored best config for this machine (from its TVMScript, or the factory),
    with the tuning's compile arguments under the caller's ``args`` (:func:`recompile_args`);
    the kernel, loaded.

    ``factory``: a plain factory, an ``@autotune`` or a ``@jit`` one (see
    :func:`recompile_factory`), or None.

    Raises:
        CacheError: no factory is given and the entry holds no TVMScript.
        TypeError: ``factory`` is not callable.
    """
    from tileauto.jit.kernel import JITKernel

    return JITKernel(recompile_artifact(stored, artifact, args, factory, stacklevel=5))


def recompile_artifact(
    stored: Any, artifact: Any, args: Any, factory: Any, *, stacklevel: int = 4
) -> Any:
    """:func:`recompile`'s compile: the built :class:`~tileauto.artifact.KernelArtifact`, not
    loaded (what a save copies). ``stacklevel``: its warnings', the caller's caller's by default.
    """
    from tileauto.jit.compiler import compile_to_dir
    from tileauto.jit.impl import process_scratch_dir
    from tileauto.settings import Settings
    from tileauto.space import merged_pass_configs, split_pass_configs

    target = args.target if args is not None else "auto"
    if target is None or (isinstance(target, str) and target.strip() == "auto"):
        target = "cuda" if artifact.device_type == "cuda" else "llvm"
    compile_args = replace(
        recompile_args(getattr(stored, "compile_args", None), args),
        out_idx=artifact.out_idx or None,
        target=target,
    )
    plain = recompile_factory(factory)
    script = artifact.directory / artifact.SCRIPT
    if plain is not None and stored.problem is None:
        # the tuning's call was not recorded (an argument that is no JSON value): the factory
        # cannot be called as the tuning called it
        why = (
            f"{stored.path} does not record the arguments the factory was tuned with (one is "
            "not a JSON value), so factory= cannot be called with them"
        )
        if not script.is_file():
            raise CacheError(f"{why}, and the entry holds no TVMScript to recompile")
        message = f"{why}; recompiled from its TVMScript instead"
        warnings.warn(message, RuntimeWarning, stacklevel=stacklevel)
        plain = None
    if plain is not None:
        fn = plain
        problem = stored.problem or {}
        call_args, call_kwargs = tuple(problem.get("args", ())), dict(problem.get("kwargs", {}))
        arguments, own = split_pass_configs(stored.config)
        call_kwargs.update(arguments)
    else:
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
    return compile_to_dir(
        fn, call_args, call_kwargs, compile_args, out_dir, config=dict(stored.config)
    )
