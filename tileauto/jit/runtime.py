"""Load and run compiled kernels with TVM's runtime alone: tvm-ffi and ``libtvm_runtime``.

A process that only calls tuned kernels (a cache hit, ``load_from_disk``) needs no compiler:
``import tvm`` loads ``libtvm_compiler`` (LLVM inside) and the whole Python compiler stack,
seconds of start-up, while a kernel library needs only the runtime. So a library is loaded with
``tvm_ffi.load_module`` after ``libtvm_runtime.so`` has been loaded with ``RTLD_GLOBAL`` (a
kernel with parallel loops calls its thread pool, and segfaults without it); a CUDA kernel also
needs ``libtvm_runtime_cuda.so``. Once ``tvm`` is imported anyway, its own loader is used; it is
imported for a CUDA kernel built where no GPU was: its library holds CUDA C, compiled at load
through TVM's NVRTC callback.
The libraries are found as ``import tvm`` finds them (``TVM_LIBRARY_PATH``, then the package's
``lib`` folder), so importing ``tvm`` later loads the very same files.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import sys
import threading
from pathlib import Path
from typing import Any

from tileauto._logging import get_logger
from tileauto.jit._elf import check_library

log = get_logger("jit")
_LOCK = threading.Lock()


def _lib_dirs() -> list[Path]:
    """Where ``import tvm`` looks for its libraries (``tvm.libinfo.package_lib_paths``)."""
    dirs = []
    if os.environ.get("TVM_LIBRARY_PATH"):
        dirs.append(Path(os.environ["TVM_LIBRARY_PATH"]))
    spec = importlib.util.find_spec("tvm")  # finds the package without importing it
    for location in (spec.submodule_search_locations or []) if spec is not None else []:
        dirs.append(Path(location) / "lib")
    return dirs


def compiler_loaded() -> bool:
    """Whether ``tvm`` (the compiler's Python package) is imported in this process."""
    return "tvm" in sys.modules


@functools.cache
def _load_lib(name: str, mode: str) -> Any:
    from tvm_ffi.libinfo import load_lib_ctypes

    return load_lib_ctypes("tvm", name, mode, extra_lib_paths=_lib_dirs())


def ensure_runtime() -> None:
    """Load ``libtvm_runtime`` (global symbols: the thread pool, device APIs), once.

    Raises:
        RuntimeError / OSError: the library cannot be found or loaded.
    """
    if compiler_loaded():
        return  # ``import tvm`` loaded it, from the same place
    with _LOCK:
        _load_lib("tvm_runtime", "RTLD_GLOBAL")


def ensure_cuda_runtime() -> bool:
    """Load TVM's CUDA runtime (``libtvm_runtime_cuda``); False when it cannot be loaded here."""
    ensure_runtime()
    if compiler_loaded():
        return True  # tvm's CUDA backend loads it, when it can
    with _LOCK:
        try:
            _load_lib("tvm_runtime_cuda", "RTLD_LOCAL")
        except (OSError, RuntimeError, FileNotFoundError):  # no driver, or a CPU-only build
            return False
    return True


def load_module(path: str | Path, device_type: str = "cpu") -> Any:
    """Load a kernel library (a ``.so`` written by ``export_library``) without the compiler.

    A file this process loaded before and that was replaced since (an export or a save to the
    same path), or a library whose name does not end in ``.so`` (TVM picks its loader by the
    suffix), is loaded through a fresh name (:func:`_load_name`): ``dlopen`` would give back
    the library it has for that path, the old code, or TVM would refuse the file.

    Raises:
        ValueError: ``path`` is not a file.
        CacheError: the file is shorter than its ELF headers declare (see :mod:`.elf`).
        RuntimeError: the library does not load.
    """
    path = os.path.realpath(path)
    if not os.path.isfile(path):
        raise ValueError(f"cannot find file {path}")
    check_library(path)  # a truncated library would SIGBUS this process once mapped
    name = _load_name(path)
    if name == path:
        return _load(path, device_type)
    try:
        return _load(name, device_type)
    finally:  # mapped once loaded: the name is not needed any more
        shutil.rmtree(os.path.dirname(name), ignore_errors=True)


# the files of the paths loaded, as they were at their first load: what dlopen holds for them
_FIRST_LOADED: dict[str, tuple[int, int, int, int]] = {}


def _load_name(path: str) -> str:
    """The name to load ``path`` under: itself, or a new ``.so`` name for the same file (a
    hard link, else a copy, in a private temp folder) where ``path`` is not named ``.so`` or
    another file was loaded from it before."""
    st = os.stat(path)
    identity = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    with _LOCK:
        first = _FIRST_LOADED.setdefault(path, identity)
    if first == identity and path.endswith(".so"):
        return path
    import tempfile

    from tileauto.utils.tmp import shared_tempdir

    folder = tempfile.mkdtemp(prefix="tileauto-load-", dir=shared_tempdir())
    name = os.path.join(folder, "kernel.so")
    try:
        try:
            os.link(path, name)
        except OSError:  # another file system, or no hard links there
            shutil.copyfile(path, name)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return name


def _load(path: str, device_type: str) -> Any:
    if not compiler_loaded():
        try:
            ensure_runtime()
        except (OSError, RuntimeError) as exc:  # an unusual install: let ``import tvm`` find it
            log.warning("loading TVM's runtime alone failed (%s); importing TVM", exc)
        else:
            import tvm_ffi

            if device_type != "cuda":
                return tvm_ffi.load_module(path)
            if not ensure_cuda_runtime():
                return tvm_ffi.load_module(path)  # raises: no CUDA here (the caller says so)
            try:
                return tvm_ffi.load_module(path)
            except RuntimeError as exc:
                # A kernel built where no GPU was holds CUDA C, not a cubin: loading it compiles
                # it through a callback that only ``import tvm`` registers (NVRTC).
                log.info("loading %s needs TVM's compiler (%s)", path, str(exc).splitlines()[0])
    import tvm  # the same loader, with TVM's Module class (time_evaluator...)

    return tvm.runtime.load_module(path)


def get_global_func(name: str) -> Any:
    """A function of TVM's runtime registry (the runtime is loaded first)."""
    ensure_runtime()
    import tvm_ffi

    return tvm_ffi.get_global_func(name)


def num_threads() -> int:
    """The size of the calling thread's TVM thread pool (``tvm.runtime.num_threads``)."""
    return int(get_global_func("runtime.NumThreads")())


def config_threadpool(mode: int, count: int) -> None:
    """Resize the calling thread's TVM thread pool (``runtime.config_threadpool``)."""
    get_global_func("runtime.config_threadpool")(mode, count)


def enabled(kind: str) -> bool:
    """Whether TVM's runtime can run ``kind`` code here (``tvm.runtime.enabled``)."""
    if kind == "cuda" and not ensure_cuda_runtime():
        return False
    return bool(get_global_func("runtime.RuntimeEnabled")(kind))
