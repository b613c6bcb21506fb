"""tileauto.cache.key: the TVMScript a kernel is written in counts in its keys.

``T.macro`` and ``T.inline`` return a closure defined in TVM (no ``__wrapped__``) over a
``TIRMacro`` / ``TIRInline`` that holds the user's function: the key walks that function, so
two macros are two kernels, and an edit of a macro's body or of a global an inline reads is a
new kernel in a new process. Under ``from __future__ import annotations`` a prim_func's
annotations are strings (``"T.Buffer((N,), DT)"``): the globals they name count too.

The edit cases write a small project into a folder, run it in a new process with a cache
folder shared by the runs, and read back what it compiled and computed.
"""

from __future__ import annotations

import textwrap
import types

import pytest
import torch
from key_children import child_result
from tvm.script import tirx as T
from tvm.tirx.script.parser import entry

import tileauto
from tileauto.cache import walk
from tileauto.cache._code import code_names
from tileauto.cache._installed import library_of, qualname


@pytest.fixture
def no_disk_cache(monkeypatch):
    """Count compiles of this process only: the keys in memory must tell the kernels apart."""
    monkeypatch.setenv("TILEAUTO_DISABLE_CACHE", "1")


# -- macros and inlines in one process ------------------------------------------------------------
@T.macro
def relu(B, i):
    B[i] = T.max(B[i], T.float32(0))


@T.macro
def negate(B, i):
    B[i] = -B[i]


@T.inline
def double(B, i):
    B[i] = B[i] * T.float32(2)


@T.inline
def halve(B, i):
    B[i] = B[i] * T.float32(0.5)


@T.macro(hygienic=False)
def relu_late(B, i):
    B[i] = T.max(B[i], T.float32(0))


@tileauto.jit(out_idx=[-1], target="llvm")
def with_epilogue(n, epilogue):
    @T.prim_func
    def main(A: T.Buffer((n,), "float32"), B: T.Buffer((n,), "float32")):
        for i in range(n):
            B[i] = A[i]
            epilogue(B, i)

    return main


def test_two_macros_are_two_kernels_with_their_own_results(no_disk_cache):
    a = torch.tensor([1.0, -2.0, 3.0, -4.0])
    expected = {
        relu: a.clamp(min=0),
        negate: -a,
        double: a * 2,
        halve: a * 0.5,
        relu_late: a.clamp(min=0),
    }
    kernels = {epilogue: with_epilogue(4, epilogue) for epilogue in expected}
    assert len({id(k) for k in kernels.values()}) == len(expected)
    assert with_epilogue.compile_count == len(expected)
    for epilogue, kernel in kernels.items():
        torch.testing.assert_close(kernel(a), expected[epilogue])
        assert with_epilogue(4, epilogue) is kernel
    assert with_epilogue.compile_count == len(expected)


def test_a_macro_counts_by_its_function_and_hygiene():
    described = walk.Walker().walk(relu, ("argument", "epilogue"))
    assert described["fn"].endswith(".macro.<locals>._decorator.<locals>.wrapper")
    held = described["holds"]["obj"]
    assert held["hygienic"] is True and "'max'" in held["func"]["source"]
    other = walk.Walker().walk(negate, ("argument", "epilogue"))
    assert other["fn"] == described["fn"] and other["holds"] != described["holds"]
    late = walk.Walker().walk(relu_late, ("argument", "epilogue"))
    assert late["holds"]["obj"]["hygienic"] is False
    inline = walk.Walker().walk(double, ("argument", "epilogue"))
    assert inline["fn"].endswith(".inline.<locals>._decorator.<locals>.wrapper")
    assert "'double'" in inline["holds"]["obj"]["func"]["source"]


def test_a_library_closure_without_user_code_keeps_its_key():
    decorator = entry.macro(hygienic=False)  # a closure over a bool
    assert isinstance(decorator, types.FunctionType) and decorator.__closure__
    library = library_of(decorator.__module__)
    assert library is not None
    assert walk.Walker().walk(decorator, ("", "")) == {"fn": qualname(decorator), "lib": library}


# -- future annotations: the names of string annotations ------------------------------------------
ANNOTATED = """
def factory(m):
    def main(A: T.Buffer((N,), DT), B: T.Buffer((M,), "float32")) -> None:
        label = "a + b"
    return main
"""


def _factory_code(future: bool) -> types.CodeType:
    head = "from __future__ import annotations\n" if future else ""
    space: dict[str, object] = {}
    exec(compile(head + ANNOTATED, "<annotated>", "exec", dont_inherit=True), space)
    factory = space["factory"]
    assert isinstance(factory, types.FunctionType)
    return factory.__code__


def test_string_annotations_name_what_they_read():
    names = code_names(_factory_code(future=True))
    assert {"T", "N", "DT", "M"} <= names
    # strings that are no annotation parse too: a name too many is harmless (the walk keeps
    # only those that resolve), but without the flag nothing is parsed
    assert {"a", "b"} <= names
    plain = code_names(_factory_code(future=False))
    assert {"T", "N", "DT", "M"} <= plain  # evaluated when main is defined: read by name
    assert not {"a", "b"} & plain


# -- edits seen by a new process --------------------------------------------------------------------
CHILD = """
import importlib, json, sys
sys.path.insert(0, sys.argv[1])
kmod = importlib.import_module("kmod")
out = kmod.run()
print(json.dumps({"compiled": kmod.kernel.compile_count, "out": out}))
"""


def run_project(tmp_path, name: str, source: str) -> dict:
    """Run ``kmod.run()`` of a project holding ``source`` in a new process, with the cache
    folder every run of the test shares; what it compiled and returned."""
    root = tmp_path / name
    root.mkdir()
    (root / "kmod.py").write_text(textwrap.dedent(source))
    return child_result(CHILD, tmp_path / "cache", str(root))


def check_edits(tmp_path, base: str, *edits: tuple[str, str, object]) -> None:
    """The project compiles, a new process loads it (a hit: the key holds), and each edit
    (old text, new text, the new result) compiles again and computes the new result."""
    first = run_project(tmp_path, "base", base)
    assert first["compiled"] == 1
    assert run_project(tmp_path, "again", base) == {**first, "compiled": 0}
    for i, (old, new, result) in enumerate(edits):
        assert old in base
        edited = run_project(tmp_path, f"edit{i}", base.replace(old, new))
        assert edited == {"compiled": 1, "out": result}, f"edit {i}: {old!r} -> {new!r}"


MACRO_PROJECT = """
import torch
import tileauto
from tvm.script import tirx as T


@T.macro
def epilogue(B, i):
    B[i] = T.max(B[i], T.float32(0))


@tileauto.jit(out_idx=[-1], target="llvm")
def kernel(n):
    @T.prim_func
    def main(A: T.Buffer((n,), "float32"), B: T.Buffer((n,), "float32")):
        for i in range(n):
            B[i] = A[i]
            epilogue(B, i)

    return main


def run():
    return kernel(4)(torch.tensor([1.0, -2.0, 3.0, -4.0])).tolist()
"""


def test_an_edit_of_a_module_macro_body_is_a_new_kernel(tmp_path):
    check_edits(
        tmp_path,
        MACRO_PROJECT,
        ("T.max(B[i], T.float32(0))", "-B[i]", [-1.0, 2.0, -3.0, 4.0]),
    )


INLINE_PROJECT = """
import torch
import tileauto
from tvm.script import tirx as T

SCALE = 2.0


@T.inline
def scale(B, i):
    B[i] = B[i] * T.float32(SCALE)


@tileauto.jit(out_idx=[-1], target="llvm")
def kernel(n):
    @T.prim_func
    def main(A: T.Buffer((n,), "float32"), B: T.Buffer((n,), "float32")):
        for i in range(n):
            B[i] = A[i]
            scale(B, i)

    return main


def run():
    return kernel(4)(torch.tensor([1.0, -2.0, 3.0, -4.0])).tolist()
"""


def test_an_edit_of_a_global_an_inline_reads_is_a_new_kernel(tmp_path):
    check_edits(
        tmp_path,
        INLINE_PROJECT,
        ("SCALE = 2.0", "SCALE = 3.0", [3.0, -6.0, 9.0, -12.0]),
    )


FUTURE_PROJECT = """
from __future__ import annotations

import tileauto
from tvm.script import tirx as T

N = 8
DT = "float32"


@tileauto.jit(out_idx=[-1], target="llvm")
def kernel(scale):
    @T.prim_func
    def main(A: T.Buffer((N,), DT), B: T.Buffer((N,), DT)):
        for i in range(A.shape[0]):  # N and DT are read by the annotations only
            B[i] = A[i] * scale

    return main


def run():
    import torch

    a = torch.arange(N, dtype=getattr(torch, DT))
    b = kernel(2)(a)
    return [list(b.shape), str(b.dtype), b.tolist()]
"""


def test_globals_named_in_string_annotations_count(tmp_path):
    check_edits(
        tmp_path,
        FUTURE_PROJECT,
        ("N = 8", "N = 4", [[4], "torch.float32", [0.0, 2.0, 4.0, 6.0]]),
        ('DT = "float32"', 'DT = "float64"', [[8], "torch.float64", [2.0 * i for i in range(8)]]),
    )
