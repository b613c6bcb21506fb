"""The @jit kernel cache (``kernels/<key>/``) on real LLVM kernels."""

from __future__ import annotations

import importlib.util
import itertools
import os
import warnings
from pathlib import Path

import pytest
import torch
from cache_kernels import matmul

import tileauto
from tileauto.cache import disk
from tileauto.jit import compiler

pytestmark = pytest.mark.timeout(300)
_modules = itertools.count()


def compiles() -> int:
    return compiler.COMPILES.count


def fresh(factory=matmul):
    """A new JITImpl (an empty in-memory cache), like a new process would have."""
    return tileauto.jit(out_idx=[-1], target="llvm")(factory)


def entries(cache: Path) -> list[Path]:
    base = cache / "kernels"
    return sorted(p for p in base.iterdir() if not p.name.startswith(".")) if base.is_dir() else []


def check_matmul(kernel, n=16) -> None:
    a, b = torch.rand(n, n), torch.rand(n, n)
    torch.testing.assert_close(kernel(a, b), a @ b, atol=1e-4, rtol=1e-4)


def test_same_arguments_load_instead_of_compiling(tileauto_env):
    before = compiles()
    first = fresh()(16, 16, 16, bm=4)
    assert compiles() == before + 1 and len(entries(tileauto_env)) == 1
    impl = fresh()
    second = impl(16, 16, 16, bm=4)
    assert compiles() == before + 1 and impl.compile_count == 0
    assert second.artifact.directory == entries(tileauto_env)[0] / "kernel"
    assert second.config == first.config and second.origin[0] is impl
    check_matmul(second)
    fresh()(16, 16, 16, bm=8)  # other arguments: another entry
    assert compiles() == before + 2 and len(entries(tileauto_env)) == 2


def test_disable_cache_compiles_every_time(tileauto_env, monkeypatch):
    monkeypatch.setenv("TILEAUTO_DISABLE_CACHE", "1")
    before = compiles()
    fresh()(16, 16, 16)
    fresh()(16, 16, 16)
    assert compiles() == before + 2 and entries(tileauto_env) == []


@pytest.mark.parametrize("damage", ["truncate", "delete manifest", "world-writable"])
def test_a_bad_entry_is_one_warning_and_a_recompile(tileauto_env, damage):
    fresh()(16, 16, 16)
    (entry,) = entries(tileauto_env)
    lib = entry / "kernel" / "kernel.so"
    if damage == "truncate":
        lib.write_bytes(lib.read_bytes()[:64])
    elif damage == "delete manifest":
        (entry / "manifest.json").unlink()
    else:
        lib.chmod(0o666)
    before = compiles()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kernel = fresh()(16, 16, 16)
    assert compiles() == before + 1
    assert len([w for w in caught if "tileauto cache" in str(w.message)]) == 1
    check_matmul(kernel)
    assert disk.verify(entry) is None  # repaired
    fresh()(16, 16, 16)
    assert compiles() == before + 1


def test_an_entry_owned_by_another_user_is_not_loaded(tileauto_env):
    if os.getuid() != 0:
        pytest.skip("only root can give a file to another user")
    fresh()(16, 16, 16)
    (entry,) = entries(tileauto_env)
    os.chown(entry / "kernel" / "kernel.json", 4242, 4242)
    before = compiles()
    with pytest.warns(RuntimeWarning, match="owned by uid 4242"):
        check_matmul(fresh()(16, 16, 16))
    assert compiles() == before + 1


# -- the key follows the code, not its formatting ---------------------------------------------
KERNEL = '''
from tvm import s_tir, te


def add_one(n, block=8):
    """Adds one."""
    A = te.placeholder((n,), "float32", name="A")
    B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
    sch = s_tir.Schedule(te.create_prim_func([A, B]))
    (i,) = sch.get_loops(sch.get_sblock("B"))
    sch.split(i, [None, block])
    return sch.mod["main"]
'''

REFORMATTED = '''
from tvm import s_tir, te


def add_one(n,
            block = 8):
    """Adds one to every element (docstring reworded)."""
    # a new comment
    A = te.placeholder((n,), "float32", name = "A")
    B = te.compute(
        (n,),
        lambda i: A[i] + 1.0,   # trailing comment
        name="B",
    )

    sch = s_tir.Schedule(te.create_prim_func([A, B]))
    (i,) = sch.get_loops(sch.get_sblock("B"))
    sch.split(i, [None, block])
    return sch.mod["main"]
'''


def load_factory(tmp_path: Path, source: str):
    name = f"jitmod{next(_modules)}"
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.add_one


def test_reformatted_source_still_hits_and_edited_source_misses(tileauto_env, tmp_path):
    a = torch.rand(64)
    before = compiles()
    k1 = fresh(load_factory(tmp_path, KERNEL))(64)
    assert compiles() == before + 1
    k2 = fresh(load_factory(tmp_path, REFORMATTED))(64)
    assert compiles() == before + 1, "reformatting the file invalidated the cache"
    torch.testing.assert_close(k2(a), k1(a))
    edited = load_factory(tmp_path, KERNEL.replace("A[i] + 1.0", "A[i] + 2.0"))
    k3 = fresh(edited)(64)
    assert compiles() == before + 2, "an edited factory loaded the old kernel"
    torch.testing.assert_close(k3(a), a + 2.0)
    assert len(entries(tileauto_env)) == 2
