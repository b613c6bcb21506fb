"""tileauto.cache.key: the modules a factory imports in its body count, and what they import.

``from pkgA import helpers`` (``helpers`` a submodule), ``from . import helpers`` and
``from nsB.helpers import factor`` (``nsB`` a namespace package, without ``__init__.py``)
inside the factory counted by ``pkgA/__init__.py``, the package's ``__init__.py`` and the
name alone: an edit of ``helpers.py`` loaded the old kernel in a new process. A module the
imported one imports itself (``helpers2`` reads ``deep.FACTOR``) did not count either.

The edit cases write a small project into a folder, run one of its kernels in a new process
with a cache folder shared by the runs, and read back what it compiled and computed.
"""

from __future__ import annotations

import importlib
import sys
import textwrap
import types
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from key_children import child_result

from tileauto.cache import _imports, walk
from tileauto.cache import key as K

HELPER = """
FACTOR = 2.0


def factor():
    return FACTOR
"""

KERNEL = """
@tileauto.jit(out_idx=[-1], target="llvm")
def {name}(n=64):
    {imports}
    a = te.placeholder((n,), "float32", name="A")
    b = te.compute((n,), lambda i: a[i] * {factor}, name="B")
    return te.create_prim_func([a, b])
"""

HEAD = "import tileauto\nfrom tvm import te\n"


def kernel(name: str, imports: str, factor: str) -> str:
    return KERNEL.format(name=name, imports=imports, factor=factor)


PROJECT = {
    "pkgA/__init__.py": "",
    "pkgA/helpers.py": HELPER,
    "pkgA/kernels.py": HEAD + kernel("scale_rel", "from . import helpers", "helpers.factor()"),
    "pkgA/chain.py": "from . import inner\n\n\ndef factor():\n    return inner.FACTOR\n",
    "pkgA/inner.py": "FACTOR = 2.0\n",
    "nsB/helpers.py": HELPER,
    "helpers2.py": "import deep\n\n\ndef factor():\n    return deep.FACTOR\n",
    "deep.py": "import helpers2  # an import cycle\n\nFACTOR = 2.0\n",
    "kmod.py": HEAD
    + "from pkgA.kernels import scale_rel\n"
    + kernel("scale_from", "from pkgA import helpers", "helpers.factor()")
    + kernel("scale_ns", "from nsB.helpers import factor", "factor()")
    + kernel("scale_deep", "from helpers2 import factor", "factor()")
    + kernel("scale_chain", "from pkgA.chain import factor", "factor()"),
}

# kernel -> the file whose FACTOR it reads
FORMS = {
    "scale_from": "pkgA/helpers.py",  # from a package import a submodule
    "scale_rel": "pkgA/helpers.py",  # the same, relative
    "scale_ns": "nsB/helpers.py",  # a module of a namespace package
    "scale_deep": "deep.py",  # a module the imported one imports (in a cycle)
    "scale_chain": "pkgA/inner.py",  # the same, imported relatively: a submodule
}
MODULES = ["kmod", "pkgA", "pkgA.helpers", "pkgA.kernels", "pkgA.chain", "pkgA.inner"]
MODULES += ["nsB", "nsB.helpers", "helpers2", "deep"]


def write_project(root: Path, files: dict[str, str]) -> None:
    for path, text in files.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(textwrap.dedent(text))


CHILD = """
import importlib, json, sys
sys.path.insert(0, sys.argv[1])
kernel = getattr(importlib.import_module("kmod"), sys.argv[2])
import torch
out = kernel()(torch.arange(4, dtype=torch.float32).repeat(16))[:4].tolist()
print(json.dumps({"compiled": kernel.compile_count, "out": out}))
"""


def run_project(tmp_path: Path, folder: str, files: dict[str, str], name: str) -> dict:
    """Run kernel ``name`` of a project of ``files`` in a new process, with the cache folder
    every run of the test shares; what it compiled and returned (its first four values)."""
    root = tmp_path / folder
    write_project(root, files)
    return child_result(CHILD, tmp_path / "cache", str(root), name)


@pytest.mark.parametrize("name", list(FORMS))
def test_an_edit_of_a_module_the_factory_imports_is_a_new_kernel(tmp_path, name):
    """Compiled once, loaded by a new process (the key holds), and an edit of the module the
    factory's import reaches compiles again and computes the new result."""
    first = run_project(tmp_path, "base", PROJECT, name)
    assert first == {"compiled": 1, "out": [0.0, 2.0, 4.0, 6.0]}
    assert run_project(tmp_path, "again", PROJECT, name) == {**first, "compiled": 0}
    path = FORMS[name]
    edited = {**PROJECT, path: PROJECT[path].replace("FACTOR = 2.0", "FACTOR = 3.0")}
    assert edited != PROJECT
    assert run_project(tmp_path, "edit", edited, name) == {
        "compiled": 1,
        "out": [0.0, 3.0, 6.0, 9.0],
    }


# -- in one process: the keys ----------------------------------------------------------------------
@pytest.fixture
def project(tmp_path: Path) -> Iterator[Callable[[dict[str, str]], types.ModuleType]]:
    """Import the project's ``kmod`` from a new folder; a function writes it again, edited."""
    roots: list[str] = []

    def load(files: dict[str, str]) -> types.ModuleType:
        root = tmp_path / f"v{len(roots)}"
        write_project(root, files)
        forget()
        sys.path.insert(0, str(root))
        roots.append(str(root))
        importlib.invalidate_caches()
        return importlib.import_module("kmod")

    yield load
    for root in roots:
        if root in sys.path:
            sys.path.remove(root)
    forget()


def forget() -> None:
    for name in MODULES:
        sys.modules.pop(name, None)


def key_of(module: types.ModuleType, name: str) -> str:
    return K.digest(K.function_fingerprint(getattr(module, name)))


def test_the_keys_are_the_same_before_and_after_the_imports(project):
    """A process that imported the helpers for another reason hits the entry of one that did
    not: the files are found without importing them."""
    module = project(PROJECT)
    before = {name: key_of(module, name) for name in FORMS}
    assert "nsB" not in sys.modules and "helpers2" not in sys.modules
    for name in FORMS:
        getattr(module, name).factory()  # runs each import
    assert {"nsB.helpers", "pkgA.helpers", "deep", "pkgA.inner"} <= set(sys.modules)
    assert {name: key_of(module, name) for name in FORMS} == before
    assert len(set(before.values())) == len(FORMS)


@pytest.mark.parametrize("name", list(FORMS))
def test_each_edit_is_a_new_key_and_other_files_do_not_count(project, name):
    base = {n: key_of(project(PROJECT), n) for n in FORMS}
    path = FORMS[name]
    edited = {**PROJECT, path: PROJECT[path].replace("FACTOR = 2.0", "FACTOR = 3.0")}
    keys = {n: key_of(project(edited), n) for n in FORMS}
    changed = {n for n in FORMS if keys[n] != base[n]}
    assert changed == {n for n, p in FORMS.items() if p == path}


def test_imports_of_installed_code_keep_their_description():
    """Installed code counts by name, as before: ``from tvm import te`` adds no ``tvm.te``."""
    space: dict[str, object] = {"__name__": "probe", "__package__": ""}
    source = "def plain(n):\n    from os import path\n    import json\n    from tvm import te\n"
    exec(compile(source, "<probe>", "exec"), space)
    plain = space["plain"]
    assert isinstance(plain, types.FunctionType)
    described = _imports.imports_described(plain.__code__, "")
    assert described == {name: _imports.imported_module(name) for name in ("os", "json", "tvm")}
    assert described["tvm"] == {"import": "tvm", "installed": True}
    assert described["os"] == {"import": "os"}  # frozen (3.11+)


def test_a_name_that_is_no_submodule_adds_nothing(project):
    files = {**PROJECT, "kmod.py": "def factory(n):\n    from helpers2 import factor\n"}
    files["helpers2.py"] = "def factor():\n    return 2.0\n"
    module = project(files)
    described = walk.Walker().walk(module.factory, ("", ""))
    assert list(described["imports"]) == ["helpers2"]
    assert set(described["imports"]["helpers2"]) == {"import", "file"}


def test_a_long_chain_of_imports_is_followed_to_a_bound(project):
    depth = _imports._MAX_IMPORT_DEPTH
    files = {"kmod.py": "def factory(n):\n    import m0\n"}
    files |= {f"m{i}.py": f"import m{i + 1}\n" for i in range(depth + 5)}
    module = project(files)
    described = walk.Walker().walk(module.factory, ("", ""))
    assert set(described["imports"]) == {f"m{i}" for i in range(depth + 1)}


def test_a_module_of_an_installed_namespace_keeps_its_description(tmp_path, monkeypatch):
    """A namespace package's module counted by its name before namespaces were read; one
    under site-packages still does (installed code is never walked), one of the user's counts
    by its file."""
    installed = tmp_path / "lib" / "site-packages"
    write_project(installed, {"nsI/mod.py": "X = 1\n"})
    write_project(tmp_path / "src", {"nsU/mod.py": "X = 1\n"})
    monkeypatch.syspath_prepend(str(installed))
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    importlib.invalidate_caches()
    assert _imports.imported_module("nsI.mod") == {"import": "nsI.mod"}
    assert _imports.imported_module("nsI") == {"import": "nsI"}
    assert _imports.imported_module("nsU") == {"import": "nsU"}
    assert set(_imports.imported_module("nsU.mod")) == {"import", "file"}
    assert _imports.imported_module("nsU.missing") == {"import": "nsU.missing"}
