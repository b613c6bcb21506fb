"""A truncated kernel library is refused before it is mapped, never loaded into a SIGBUS.

Real libraries: an LLVM kernel compiled once for the module, and TVM's own runtime library;
hand-made headers for the 32-bit and big-endian layouts this machine does not build.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import kernels
import pytest

from tileauto.errors import CacheError
from tileauto.jit import runtime
from tileauto.jit._elf import check_library
from tileauto.jit.compiler import compile_to_dir
from tileauto.options import CompileArgs

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def library(tmp_path_factory) -> Path:
    """A real kernel library (``kernel.so`` of ``C = A + B``), compiled once."""
    out = tmp_path_factory.mktemp("elf") / "add"
    artifact = compile_to_dir(
        kernels.vector_add, (64,), {}, CompileArgs(out_idx=[-1], target="llvm"), out
    )
    return artifact.lib_path


def _cut(library: Path, tmp_path: Path, size: int) -> Path:
    path = tmp_path / f"cut-{size}.so"
    path.write_bytes(library.read_bytes()[:size])
    return path


def test_complete_libraries_pass(library):
    check_library(library)
    check_library(Path(runtime._load_lib("tvm_runtime", "RTLD_GLOBAL")._name))


def test_every_truncation_of_a_real_library_is_refused(library, tmp_path):
    size = library.stat().st_size
    for cut in sorted({4, 15, 16, 63, 64, 65, *range(100, size, 509), size - 1}):
        path = _cut(library, tmp_path, cut)
        with pytest.raises(CacheError) as info:
            check_library(path)
        message = str(info.value)
        assert str(path) in message and f"the file has {cut} bytes" in message, message
        assert "truncated" in message and "compile again" in message
        path.unlink()


def test_a_file_that_is_not_elf_is_left_to_the_loader(tmp_path):
    for data in (b"", b"\x7fE", b"not a shared library"):
        path = tmp_path / "lib.so"
        path.write_bytes(data)
        check_library(path)  # dlopen refuses these with an error of its own, mapping nothing


def _elf(cls: int, order: str, segment_bytes: int, file_bytes: int) -> bytes:
    """A minimal ELF file of ``cls`` (1: 32-bit, 2: 64-bit) with one segment."""
    encoding = 1 if order == "<" else 2
    ident = b"\x7fELF" + bytes([cls, encoding, 1]) + bytes(9)
    if cls == 1:
        header = struct.pack(order + "HHIIIIIHHHHHH", 3, 3, 1, 0, 52, 0, 0, 52, 32, 1, 40, 0, 0)
        segment = struct.pack(order + "IIIIIIII", 1, 0, 0, 0, segment_bytes, segment_bytes, 5, 1)
    else:
        header = struct.pack(order + "HHIQQQIHHHHHH", 3, 62, 1, 0, 64, 0, 0, 64, 56, 1, 64, 0, 0)
        segment = struct.pack(order + "IIQQQQQQ", 1, 5, 0, 0, 0, segment_bytes, segment_bytes, 1)
    data = ident + header + segment
    return data + bytes(file_bytes - len(data))


@pytest.mark.parametrize("cls", [1, 2], ids=["32-bit", "64-bit"])
@pytest.mark.parametrize("order", ["<", ">"], ids=["little-endian", "big-endian"])
def test_each_elf_layout_is_read(tmp_path, cls, order):
    path = tmp_path / "lib.so"
    path.write_bytes(_elf(cls, order, segment_bytes=256, file_bytes=256))
    check_library(path)
    path.write_bytes(_elf(cls, order, segment_bytes=4096, file_bytes=256))
    with pytest.raises(CacheError, match="place a segment up to byte 4096, but the file has 256"):
        check_library(path)


def test_a_truncated_library_raises_in_the_caller_instead_of_killing_it(library, tmp_path):
    lib = _cut(library, tmp_path, library.stat().st_size // 2)  # past a mapped segment's end
    exported = tmp_path / "exported.so"
    exported.write_bytes(lib.read_bytes())
    (tmp_path / "exported.so.json").write_text((library.parent / "kernel.json").read_text())
    child = textwrap.dedent(
        f"""
        from tileauto.errors import CacheError
        from tileauto.jit import runtime
        from tileauto.jit.kernel import JITKernel
        for load in (lambda: runtime.load_module({str(lib)!r}),
                     lambda: JITKernel.load_library({str(exported)!r})):
            try:
                load()
            except CacheError as exc:
                print("REFUSED", exc)
            else:
                print("LOADED")
        """
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.run(
        [sys.executable, "-c", child], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, f"the child died (rc {proc.returncode}):\n{proc.stderr[-2000:]}"
    refused = [line for line in proc.stdout.splitlines() if line.startswith("REFUSED")]
    assert len(refused) == 2, proc.stdout
    assert str(lib) in refused[0] and str(exported) in refused[1]
