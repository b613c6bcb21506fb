"""Elaborate a kernel factory, compile it with TVM and export it: the one place that builds.

Used in-process by ``@jit`` and inside compile workers by ``par_compile`` and the tuner, so a
kernel built anywhere ends up as the same :class:`~tileauto.artifact.KernelArtifact` on disk.
"""

from __future__ import annotations

import json
import os
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tileauto.artifact import Dim, KernelArtifact, ParamSpec
from tileauto.errors import CompileError
from tileauto.options import CompileArgs

if TYPE_CHECKING:
    import tvm

# TVM's compiler is imported by the functions that compile: a process that loads tuned kernels
# reads COMPILES and resolve_out_idx without it.


def load_compiler() -> None:
    """Import TVM's compiler now, as the first :func:`compile_to_dir` of a process would (a
    second or more): for processes that compile next and can import it ahead of time (the
    forkserver before it forks workers, a Ray compile worker's warm-up), with Python's
    garbage collector paused (:mod:`tileauto.utils.imports`)."""
    from tileauto.utils.imports import collector_paused

    with collector_paused():
        import tvm  # noqa: F401

        import tileauto.jit.target  # noqa: F401


class CompileCounter:
    """How many kernels this process compiled: what tells a cache hit (none) from a miss."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # JITImpl compiles on the caller's threads
        self._count = 0

    @property
    def count(self) -> int:
        """Calls of :func:`compile_to_dir` in this process so far."""
        return self._count

    def add(self) -> None:
        """Count one compile."""
        with self._lock:
            self._count += 1


COMPILES = CompileCounter()


def elaborate(
    factory: Callable[..., Any], args: tuple, kwargs: dict[str, Any]
) -> tvm.tirx.PrimFunc:
    """Call the factory and return its single PrimFunc (named by its ``global_symbol``)."""
    import tvm

    produced = factory(*args, **kwargs)
    if isinstance(produced, tvm.IRModule):
        funcs = [
            (gv.name_hint, f)
            for gv, f in produced.functions.items()
            if isinstance(f, tvm.tirx.PrimFunc)
        ]
        if len(funcs) != 1:
            raise CompileError(
                f"{_name(factory)} returned an IRModule with {len(funcs)} PrimFuncs: expected exactly one"
            )
        name, func = funcs[0]
        if func.attrs is None or "global_symbol" not in func.attrs:
            func = func.with_attr("global_symbol", name)
        return func
    if isinstance(produced, tvm.tirx.PrimFunc):
        if produced.attrs is None or "global_symbol" not in produced.attrs:
            produced = produced.with_attr("global_symbol", "main")
        return produced
    raise CompileError(
        f"{_name(factory)} must return a tvm PrimFunc or IRModule, got {type(produced).__name__}"
    )


def failure_text(exc: BaseException) -> str:
    """A factory's or TVM's exception as a failed compile's text: its type and message and,
    where the user's own code raised it, the file and line that did, with the source line for
    an ``assert`` or an empty message: a bare ``assert`` in a factory says nothing else, and
    two of them read alike."""
    message = str(exc)
    text = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames or not _users_file(frames[-1].filename):
        return text
    last = frames[-1]
    where = f"{os.path.basename(last.filename)}:{last.lineno}"
    if last.line and (not message or isinstance(exc, AssertionError)):  # the line says it
        where += f": {last.line.strip()[:200]}"
    head, newline, rest = text.partition("\n")  # TVM's messages run to many lines
    return f"{head} (raised at {where}){newline}{rest}"


def _users_file(filename: str) -> bool:
    """Whether a traceback's file is the user's: not tileauto's, the standard library's or an
    installed package's (those raise for reasons their own messages say)."""
    import sysconfig

    if filename.startswith("<") and filename not in ("<string>", "<stdin>"):
        return False  # frozen importlib and other generated code
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the tileauto package
    path = os.path.abspath(filename)
    if path.startswith(here + os.sep):
        return False
    parts = path.split(os.sep)
    stdlib = sysconfig.get_paths().get("stdlib", "")
    return not (
        "site-packages" in parts or "dist-packages" in parts or (stdlib and path.startswith(stdlib))
    )


def describe_params(func: tvm.tirx.PrimFunc) -> tuple[ParamSpec, ...]:
    """Parameters of a PrimFunc as plain records: buffers (symbolic extents become text) and
    scalars (an int or float passed by value, such as an alpha or a length).

    Size variables are written by a key unique to each variable (see :class:`ParamSpec`), so
    two distinct variables that are both called ``n`` stay two variables.
    """
    import tvm

    keys = _size_keys(func)
    specs = []
    for param in func.params:
        try:
            shape = param.shape  # a buffer-typed Var (TVM 0.27: no buffer_map)
        except AttributeError:
            dtype = str(getattr(param, "ty", ""))
            if not dtype or dtype == "handle" or "Buffer" in dtype:
                raise CompileError(
                    f"parameter {param} of {func.attrs['global_symbol']} is neither a buffer nor "
                    f"an int or float scalar (type {dtype or 'unknown'})"
                ) from None
            key, name = _key_of(param, keys), str(param.name)
            renamed: tuple[tuple[str, str], ...] = ((key, name),) if key != name else ()
            specs.append(ParamSpec(name, (), dtype, scalar=True, renamed=renamed))
            continue
        name = str(param.name)
        dims = tuple(_dim_text(d, d_i, name, keys) for d_i, d in enumerate(shape))
        renamed = tuple(
            dict.fromkeys(
                (key, str(v.name))
                for d in shape
                for v in tvm.tirx.analysis.undefined_vars(d)
                if (key := _key_of(v, keys)) != str(v.name)
            )
        )
        align = int(getattr(param, "data_alignment", 64) or 1)
        specs.append(ParamSpec(name, dims, str(param.dtype), renamed=renamed, align=align))
    return tuple(specs)


def _size_keys(func: tvm.tirx.PrimFunc) -> list[tuple[tvm.tirx.Var, str]]:
    """Each size variable of the parameters with its key: its name, or for a later variable of
    a name already used, ``name_1``, ``name_2``, ... (skipping names the kernel uses), as
    TVMScript numbers them: the scalar parameters first, then the extents in order."""
    import tvm

    found: list[tvm.tirx.Var] = []  # by identity: a Var's == builds an expression

    def add(var: tvm.tirx.Var) -> None:
        if not any(var.same_as(v) for v in found):
            found.append(var)

    buffers = []
    for param in func.params:
        try:
            buffers.append(param.shape)
        except AttributeError:
            add(param)
    for shape in buffers:
        for dim in shape:
            for var in tvm.tirx.analysis.undefined_vars(dim):
                add(var)
    taken = {str(v.name) for v in found}
    used: set[str] = set()
    keys = []
    for var in found:
        name = str(var.name)
        key, suffix = name, 0
        while key in used or (suffix and key in taken):  # n_1 may be a variable's own name
            suffix += 1
            key = f"{name}_{suffix}"
        used.add(key)
        keys.append((var, key))
    return keys


def _key_of(var: tvm.tirx.Var, keys: list[tuple[tvm.tirx.Var, str]]) -> str:
    return next(key for v, key in keys if v.same_as(var))


def _dim_text(dim: Any, index: int, param: str, keys: list[tuple[tvm.tirx.Var, str]]) -> Dim:
    """An extent as an int, or as text over the variables' keys."""
    import tvm

    if isinstance(dim, tvm.tirx.IntImm):
        return int(dim)
    renamed = [v for v in tvm.tirx.analysis.undefined_vars(dim) if _key_of(v, keys) != str(v.name)]
    if not renamed:
        return str(dim)  # the printer's text, as for any kernel without names used twice
    binary = (tvm.tirx.Add, tvm.tirx.Sub, tvm.tirx.Mul, tvm.tirx.FloorDiv, tvm.tirx.FloorMod)

    def rename(expr: Any) -> Any:
        if isinstance(expr, tvm.tirx.Var):
            return tvm.tirx.Var(_key_of(expr, keys), expr.ty)
        if isinstance(expr, tvm.tirx.IntImm):
            return expr
        if isinstance(expr, binary):
            return type(expr)(rename(expr.a), rename(expr.b))
        raise CompileError(
            f"parameter {param}: dimension {index} ({dim}) uses a size variable named "
            f"{str(renamed[0].name)!r} that another size variable is also named, inside a "
            f"{type(expr).__name__}: tileauto tells variables named alike apart in +, -, *, "
            "// and % of them only; give the size variables distinct names"
        )

    return str(rename(dim))


def resolve_out_idx(out_idx: tuple[int, ...] | None, n_params: int) -> tuple[int, ...]:
    """Normalize ``out_idx`` to sorted non-negative positions, checking the range."""
    if out_idx is None:
        return ()
    resolved = []
    for i in out_idx:
        j = i + n_params if i < 0 else i
        if not 0 <= j < n_params:
            raise CompileError(
                f"out_idx {i} is out of range for a kernel with {n_params} parameters"
            )
        resolved.append(j)
    if len(set(resolved)) != len(resolved):
        raise CompileError(f"out_idx {list(out_idx)} names a parameter twice")
    return tuple(sorted(resolved))


def compile_to_dir(
    factory: Callable[..., Any],
    args: tuple,
    kwargs: dict[str, Any],
    compile_args: CompileArgs,
    out_dir: Path,
    config: dict[str, Any] | None = None,
) -> KernelArtifact:
    """Elaborate ``factory(*args, **kwargs)``, compile, and export everything to ``out_dir``.

    Raises:
        CompileError: elaboration, compilation or export failed (message has TVM's first lines).
    """
    import tvm

    from tileauto.jit.target import device_type_of, resolve_target, target_json

    COMPILES.add()
    start = time.perf_counter()
    target = resolve_target(compile_args.target, compile_args.target_host)
    try:
        func = elaborate(factory, args, kwargs)
        params = describe_params(func)
        out_idx = resolve_out_idx(compile_args.out_idx, len(params))
        scalars = [params[j].name for j in out_idx if params[j].scalar]
        if scalars:
            raise CompileError(
                f"out_idx names the scalar parameter(s) {scalars}: outputs must be buffers"
            )
        with tvm.transform.PassContext(config=compile_args.pass_configs or {}):
            executable = tvm.compile(func, target=target)
    except CompileError:
        raise
    except Exception as exc:
        raise CompileError(failure_text(exc)) from exc
    device_type = device_type_of(target)
    if device_type == "cuda" and not executable.mod.imports:
        raise CompileError(
            "the kernel compiled for CUDA has no device code: bind its loops to "
            "blockIdx/threadIdx (without thread bindings TVM silently builds a host function)"
        )
    compile_s = time.perf_counter() - start
    out_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    try:
        executable.export_library(str(out_dir / KernelArtifact.LIB_NAME))
    except TypeError as exc:  # TVM's message when no C++ compiler is on PATH
        raise CompileError(f"exporting the shared library needs g++ on PATH ({exc})") from exc
    except Exception as exc:
        raise CompileError(f"export failed: {type(exc).__name__}: {exc}") from exc
    export_s = time.perf_counter() - start
    _write_sources(executable, func, device_type, out_dir)
    artifact = KernelArtifact(
        directory=out_dir,
        func_name=str(func.attrs["global_symbol"]),
        params=params,
        out_idx=out_idx,
        target=target_json(target),
        device_type=device_type,
        config=dict(config or {}),
        compile_s=compile_s,
        export_s=export_s,
    )
    (out_dir / KernelArtifact.META).write_text(
        json.dumps(artifact.to_json(), indent=1, default=str)
    )
    return artifact


def _write_sources(executable: Any, func: Any, device_type: str, out_dir: Path) -> None:
    """Write device source, host source and TVMScript next to the library."""
    host_mod = executable.mod
    host = host_mod.inspect_source("ll")
    if device_type == "cuda":
        kernel = "\n".join(m.inspect_source("cuda") for m in host_mod.imports if m.kind == "cuda")
    else:
        kernel = host  # a CPU kernel is its host module: printed once (a millisecond a compile)
    (out_dir / KernelArtifact.KERNEL_SOURCE).write_text(kernel)
    (out_dir / KernelArtifact.HOST_SOURCE).write_text(host)
    (out_dir / KernelArtifact.SCRIPT).write_text(func.script())


def _name(factory: Callable[..., Any]) -> str:
    return getattr(factory, "__qualname__", None) or repr(factory)
