"""The optional C++ helper (``libtileauto_native``), with a Python fallback for each use.

The helper (``src/timer.cc``, ``src/caller.cc``, built by CMake at install time) registers two
FFI functions: ``tileauto.native.time_function`` times calls with no Python in the timed region,
and ``tileauto.native.output_caller`` allocates a kernel's output in C++ for ``k(a)``. The
extension ``tileauto._kernel_call`` (``src/kernel_call.c``) is JITKernel's base class, whose
call slot reaches that caller with no Python frame between. Importing this module is cheap:
``tvm_ffi`` and ``numpy`` are imported inside the functions.
"""

from __future__ import annotations

import ctypes
import functools
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tileauto._logging import get_logger
from tileauto.errors import TileautoError

_log = get_logger(__name__)

#: Name of the global FFI function that ``src/timer.cc`` registers.
NATIVE_FUNCTION_NAME = "tileauto.native.time_function"
#: Name of the global FFI function that ``src/caller.cc`` registers (same library).
OUTPUT_CALLER_NAME = "tileauto.native.output_caller"
#: Folder, inside the package directory, that CMake installs the library into.
NATIVE_LIB_SUBDIR = "_lib"
_CACHE_LINE_BYTES = 64


def _library_names() -> tuple[str, ...]:
    if sys.platform.startswith("win"):
        return ("tileauto_native.dll",)
    if sys.platform == "darwin":
        return ("libtileauto_native.dylib", "libtileauto_native.so")
    return ("libtileauto_native.so",)


def _package_dirs() -> list[Path]:
    """Directories that make up the ``tileauto`` package, in import order, without repeats."""
    dirs: list[Path] = []
    package = sys.modules.get(__package__ or "tileauto")
    for entry in list(getattr(package, "__path__", None) or ()):
        dirs.append(Path(entry))
    dirs.append(Path(__file__).resolve().parent)
    unique: list[Path] = []
    for d in dirs:
        if d not in unique:
            unique.append(d)
    return unique


def _installed_files(wanted: Callable[[str], bool]) -> list[Path]:
    """The files whose name is ``wanted`` that the installed ``tileauto`` distribution lists in
    its RECORD."""
    from importlib import metadata

    try:
        files = metadata.distribution("tileauto").files or []
    except metadata.PackageNotFoundError:
        return []
    return [Path(f.locate()) for f in files if wanted(f.name)]


def _installed_library_files() -> list[Path]:
    """The native library files of the installed distribution's RECORD."""
    return _installed_files(set(_library_names()).__contains__)


def native_library_candidates() -> list[Path]:
    """Every path where the native library is looked for, in search order.

    A library already registered in this process is used before any of these. Then
    ``<dir>/_lib/`` for each directory of the package's ``__path__`` (a scikit-build-core
    editable install lists the source tree and ``site-packages/tileauto``, where CMake put the
    library), and last the library listed in the installed distribution's RECORD (a source
    checkout that shadows the installed package on ``sys.path``).

    Returns:
        Candidate file paths; they need not exist.
    """
    found = [d / NATIVE_LIB_SUBDIR / name for d in _package_dirs() for name in _library_names()]
    try:
        installed = _installed_library_files()
    except Exception as err:  # noqa: BLE001 - broken metadata only loses this fallback
        _log.debug("native timer: cannot read tileauto's install record (%s)", err)
        installed = []
    return found + [p for p in installed if p not in found]


@functools.cache
def _load() -> tuple[Any, Any]:
    """Find, load and look up the helper once per process: ``(function or None, dll handle)``."""
    try:
        import tvm_ffi
    except Exception as err:  # noqa: BLE001 - an absent helper is never an error here
        _log.debug("native timer unavailable: cannot import tvm_ffi (%s)", err)
        return None, None
    try:
        func = tvm_ffi.get_global_func(NATIVE_FUNCTION_NAME, allow_missing=True)
    except Exception as err:  # noqa: BLE001
        _log.debug("native timer unavailable: global registry lookup failed (%s)", err)
        return None, None
    if func is not None:
        _log.debug("native timer: %s was already registered", NATIVE_FUNCTION_NAME)
        return func, None
    candidates = native_library_candidates()
    for path in candidates:
        if not path.is_file():
            continue
        try:
            # RTLD_LOCAL is enough: loading runs a static initializer that registers the
            # function in tvm-ffi's global table; nothing else is looked up by symbol.
            handle = ctypes.CDLL(str(path), mode=ctypes.RTLD_LOCAL)
        except OSError as err:
            _log.debug("native timer: cannot load %s (%s)", path, err)
            continue
        func = tvm_ffi.get_global_func(NATIVE_FUNCTION_NAME, allow_missing=True)
        if func is not None:
            _log.debug("native timer loaded from %s", path)
            return func, handle
        _log.debug("native timer: %s loaded but registered no %s", path, NATIVE_FUNCTION_NAME)
    _log.debug(
        "native timer unavailable: no loadable library among %s",
        ", ".join(str(p) for p in candidates),
    )
    return None, None


def load_native() -> Any | None:
    """Return the native timing function, loading its library on first use.

    The result is cached for the process. This function never raises; when the helper is
    absent it logs why at debug level (logger ``tileauto._native``) and returns None.

    Returns:
        The ``tvm_ffi.Function`` registered as ``tileauto.native.time_function``, called as
        ``f(func, repeat, flush_bytes, *args) -> Array[int]`` (nanoseconds per call), or None.
    """
    try:
        return _load()[0]
    except Exception as err:  # noqa: BLE001 - documented never to raise
        _log.debug("native timer unavailable: %s", err)
        return None


@functools.cache
def output_caller() -> Any | None:
    """The native ``output_caller(f, shape, dtype, device, like) -> g`` of ``src/caller.cc``,
    or None (no helper, or an older one without it). ``g(*inputs)`` allocates the output of
    ``f`` (of ``shape``, or of ``inputs[like]``'s shape when ``like >= 0``) in C++ with the
    caller's framework allocator (torch's, for torch tensors), calls ``f(*inputs, out)`` and
    returns ``out``; it returns None when the arguments bring no allocator or ``inputs[like]``
    is not a tensor. Never raises."""
    if load_native() is None:
        return None
    try:
        import tvm_ffi

        return tvm_ffi.get_global_func(OUTPUT_CALLER_NAME, allow_missing=True)
    except Exception as err:  # noqa: BLE001 - documented never to raise
        _log.debug("native output caller unavailable: %s", err)
        return None


#: The CPython extension module of ``src/kernel_call.c``: JITKernel's C call slot.
KERNEL_CALL_MODULE = "tileauto._kernel_call"


@functools.cache
def kernel_call_base() -> type | None:
    """The class ``KernelCall`` of ``src/kernel_call.c`` (the base of JITKernel, whose call
    slot is C), or None where the extension module was not built. Looked for as a module of the
    package, then as a file the installed distribution's RECORD lists (a source checkout that
    shadows an installed tileauto). Never raises."""
    import importlib
    import importlib.machinery
    import importlib.util

    try:
        return importlib.import_module(KERNEL_CALL_MODULE).KernelCall
    except ImportError as err:
        _log.debug("native kernel call: %s not importable (%s)", KERNEL_CALL_MODULE, err)
    except Exception as err:  # noqa: BLE001 - documented never to raise
        _log.debug("native kernel call unavailable: %s", err)
        return None
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    try:
        for path in _installed_files(
            lambda name: name.startswith("_kernel_call.") and name.endswith(suffixes)
        ):
            spec = importlib.util.spec_from_file_location(KERNEL_CALL_MODULE, path)
            if spec is None or spec.loader is None:
                continue
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            sys.modules[KERNEL_CALL_MODULE] = module
            _log.debug("native kernel call loaded from %s", path)
            return module.KernelCall
    except Exception as err:  # noqa: BLE001 - documented never to raise
        _log.debug("native kernel call unavailable: %s", err)
    return None


def native_available() -> bool:
    """Whether the native timing helper could be loaded in this process."""
    return load_native() is not None


def _check_counts(repeat: int, flush_bytes: int) -> None:
    if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
        raise ValueError(f"repeat={repeat!r}: expected an integer >= 1 (the number of timed calls)")
    if isinstance(flush_bytes, bool) or not isinstance(flush_bytes, int) or flush_bytes < 0:
        raise ValueError(
            f"flush_bytes={flush_bytes!r}: expected an integer >= 0 (0 turns cache flushing off)"
        )


def _make_flusher(flush_bytes: int) -> Callable[[int], None] | None:
    """A function that writes, then reads, ``flush_bytes`` bytes to evict the CPU caches."""
    if flush_bytes == 0:
        return None
    import numpy as np

    buffer = np.empty(flush_bytes, dtype=np.uint8)

    def flush(round_index: int) -> None:
        buffer.fill(round_index & 0xFF)  # a new value each round, so every line is written
        int(buffer[::_CACHE_LINE_BYTES].sum())  # touch each cache line again

    return flush


def _time_python(
    func: Callable[..., Any], args: Sequence[Any], repeat: int, flush_bytes: int
) -> list[int]:
    flush = _make_flusher(flush_bytes)
    samples_ns: list[int] = []
    clock = time.perf_counter_ns
    for i in range(repeat):
        if flush is not None:
            flush(i + 1)
        start = clock()
        func(*args)
        samples_ns.append(clock() - start)
    return samples_ns


def time_function(
    func: Callable[..., Any],
    args: Sequence[Any],
    repeat: int,
    flush_bytes: int = 0,
    native: bool | None = None,
) -> list[int]:
    """Call ``func(*args)`` ``repeat`` times and return each call's wall time in nanoseconds.

    There is no warm-up: every call is timed, so callers discard the first samples or warm up
    themselves. The times are host wall time; a kernel on an asynchronous device must
    synchronize inside ``func`` to be measured.

    Args:
        func: The function to time, typically a compiled TVM function (``tvm_ffi.Function``,
            e.g. ``executable["main"]``). Any Python callable works on the Python path.
        args: Positional arguments for ``func``, passed unchanged on every call (torch
            tensors, numpy arrays or TVM tensors; kernels write their outputs in place).
        repeat: Number of timed calls, at least 1.
        flush_bytes: When positive, a buffer of this many bytes is written and read before each
            call, outside the timed region, to evict the CPU caches; 0 turns this off.
        native: None (default) uses the C++ helper when it is available and ``func`` is a
            ``tvm_ffi.Function``, else the Python loop. True requires the helper (a Python
            callable is then called back through FFI and sees FFI-converted arguments, e.g.
            ``tvm_ffi.Tensor`` instead of ``torch.Tensor``). False forces the Python loop.

    Returns:
        ``repeat`` non-negative integers, the nanoseconds of each call in order.

    Raises:
        ValueError: ``repeat`` or ``flush_bytes`` is out of range; the message names it.
        TileautoError: ``native=True`` but the native helper is not available.
    """
    _check_counts(repeat, flush_bytes)
    if native is False:
        return _time_python(func, args, repeat, flush_bytes)
    helper = load_native()
    if native is True and helper is None:
        raise TileautoError(
            "time_function(native=True): the native timing helper (libtileauto_native) is not "
            f"available; looked in {', '.join(str(p) for p in native_library_candidates())}. "
            "Reinstall tileauto with `pip install .` (it builds the helper with CMake and a C++17 "
            "compiler), or pass native=None to fall back to the Python timer."
        )
    if helper is None or (native is None and not _is_ffi_function(func)):
        return _time_python(func, args, repeat, flush_bytes)
    return [int(ns) for ns in helper(func, repeat, flush_bytes, *args)]


def _is_ffi_function(func: object) -> bool:
    import tvm_ffi

    return isinstance(func, tvm_ffi.Function)
