"""Start-up: a process that only uses tuned kernels imports TVM's runtime, never its compiler.

Each check runs in a fresh interpreter (``sys.modules`` of the test process has everything
imported) and asserts on what that process imported: no ``tvm`` package (the compiler's Python
stack: ``tvm.tirx``, ``tvm.s_tir``, ``tvm.target``...) and no ``libtvm_compiler`` (LLVM) mapped
into it. The kernels live in ``warm_kernels.py``, a module that imports no part of TVM.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
pytestmark = pytest.mark.timeout(600)

# What a child prints last: the modules and libraries that matter, as JSON.
REPORT = textwrap.dedent(
    """
    import json as _json, sys as _sys
    def _report(**extra):
        maps = open("/proc/self/maps").read() if _sys.platform.startswith("linux") else ""
        out = {
            "tvm": sorted(m for m in _sys.modules if m == "tvm" or m.startswith("tvm.")),
            "torch": "torch" in _sys.modules,
            "compiler_lib": "libtvm_compiler" in maps,
            "runtime_lib": "libtvm_runtime" in maps,
            **extra,
        }
        print("REPORT " + _json.dumps(out))
    """
)


def child(code: str, cache: Path, *, check: bool = True) -> dict:
    """Run ``code`` in a fresh interpreter with ``cache`` as the cache; its report."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TILEAUTO_")}
    env["TILEAUTO_CACHE_DIR"] = str(cache)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(HERE)])
    proc = subprocess.run(
        [sys.executable, "-c", REPORT + textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=540,
    )
    if check:
        assert proc.returncode == 0, proc.stderr[-4000:]
    line = next((x for x in proc.stdout.splitlines() if x.startswith("REPORT ")), None)
    assert line is not None, proc.stdout[-2000:] + proc.stderr[-4000:]
    return json.loads(line[len("REPORT ") :])


def assert_no_compiler(report: dict) -> None:
    assert report["tvm"] == [], f"the warm path imported TVM's compiler: {report['tvm'][:8]}"
    assert not report["compiler_lib"], "libtvm_compiler (LLVM) was loaded"


@pytest.fixture(scope="module")
def cold(tmp_path_factory) -> tuple[Path, Path]:
    """A cache with the tuned kernel and a plain @jit kernel, and a saved result folder."""
    base = tmp_path_factory.mktemp("warm")
    cache, saved = base / "cache", base / "saved"
    report = child(
        f"""
        import torch, warm_kernels as wk
        kernel = wk.tuned_double(wk.N)
        a = torch.rand(wk.N)
        assert torch.allclose(kernel(a), 2 * a)
        wk.tuned_double.get_tuner_result(wk.N).save_to_disk({str(saved)!r})
        wk.jit_double(wk.N, block=64)
        _report()
        """,
        cache,
    )
    assert report["tvm"], "the cold process compiles: it imports TVM"
    return cache, saved


@pytest.fixture
def warm_cache(cold, tmp_path) -> Path:
    dest = tmp_path / "cache"
    shutil.copytree(cold[0], dest)
    return dest


# -- import and the command line -------------------------------------------------------------
def test_import_tileauto_imports_neither_torch_nor_tvm(tmp_path):
    report = child(
        """
        import tileauto, tileauto.language, tileauto.jit
        tileauto.Settings, tileauto.TileautoError, tileauto.Trial, tileauto.CompileArgs
        _report()
        """,
        tmp_path,
    )
    assert report["tvm"] == [] and not report["torch"] and not report["runtime_lib"]


def test_decorating_imports_no_part_of_tvm(tmp_path):
    report = child("import warm_kernels\n_report()\n", tmp_path)
    assert report["tvm"] == [] and not report["runtime_lib"]  # @autotune brings torch


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["--version"],
        ["cache", "--help"],
        ["cache", "list"],
        ["cache", "list", "--json"],
        ["cache", "show", "KEY"],
        ["cache", "verify"],
        ["cache", "clear", "--dry-run"],
        ["cache", "clear"],
        ["env"],
    ],
)
def test_the_command_imports_neither_torch_nor_tvm(warm_cache, argv):
    key = next((warm_cache / "autotuner").iterdir()).name
    argv = [key if a == "KEY" else a for a in argv]
    report = child(
        f"""
        from tileauto.cli import main
        try:
            code = main({argv!r})
        except SystemExit as exc:  # --help
            code = exc.code
        _report(code=code)
        """,
        warm_cache,
    )
    assert report["code"] == 0
    assert report["tvm"] == [] and not report["torch"] and not report["runtime_lib"]


@pytest.mark.parametrize("first", ["decorator", "submodule"])
def test_jit_is_the_decorator_and_the_subpackage_in_either_import_order(tmp_path, first):
    report = child(
        f"""
        import types
        if {first!r} == "submodule":
            import tileauto.jit.kernel
            from tileauto.jit.impl import JITImpl
        import tileauto
        from tileauto import jit

        def f(n):
            pass

        assert isinstance(tileauto.jit, types.ModuleType) and tileauto.jit is jit
        assert type(tileauto.jit(out_idx=[-1])(f)).__name__ == "JITImpl"
        assert type(tileauto.jit(f)).__name__ == "JITImpl"
        import tileauto.jit.impl, tileauto.jit.kernel
        assert tileauto.jit is jit and tileauto.jit.JITKernel is tileauto.JITKernel
        assert type(tileauto.jit(target="llvm")(f)).__name__ == "JITImpl"
        from tileauto.jit import JITImpl, jit as decorator
        assert isinstance(decorator(f), JITImpl) and isinstance(tileauto.jit(f), tileauto.JITImpl)
        _report()
        """,
        tmp_path,
    )
    assert report["tvm"] == []


# -- the warm path ---------------------------------------------------------------------------
WARM_HIT = """
    import torch, warm_kernels as wk
    from tileauto.jit import compiler
    kernel = wk.tuned_double(wk.N)
    a = torch.rand(wk.N)
    ok = bool(torch.allclose(kernel(a), 2 * a))
    result = wk.tuned_double.get_tuner_result(wk.N)
    _report(ok=ok, hit=result.cache_hit, compiles=compiler.COMPILES.count)
"""


def test_a_cache_hit_loads_the_kernel_without_the_compiler(warm_cache):
    report = child(WARM_HIT, warm_cache)
    assert report["ok"] and report["hit"] and report["compiles"] == 0
    assert report["runtime_lib"]
    assert_no_compiler(report)


def test_load_from_disk_runs_without_the_compiler(cold, warm_cache):
    report = child(
        f"""
        import torch, tileauto
        result = tileauto.AutotuneResult.load_from_disk({str(cold[1])!r})
        a = torch.rand(4096)
        _report(ok=bool(torch.allclose(result.kernel(a), 2 * a)), hit=result.cache_hit)
        """,
        warm_cache,
    )
    assert report["ok"] and report["hit"]
    assert_no_compiler(report)


def test_a_jit_cache_hit_loads_the_kernel_without_the_compiler(warm_cache):
    report = child(
        """
        import torch, warm_kernels as wk
        from tileauto.jit import compiler
        kernel = wk.jit_double(wk.N, block=64)
        a = torch.rand(wk.N)
        _report(ok=bool(torch.allclose(kernel(a), 2 * a)), compiles=compiler.COMPILES.count)
        """,
        warm_cache,
    )
    assert report["ok"] and report["compiles"] == 0
    assert_no_compiler(report)


def test_without_the_target_memo_a_hit_imports_the_compiler_and_refills_it(warm_cache):
    shutil.rmtree(warm_cache / "targets")
    report = child(WARM_HIT, warm_cache)
    assert report["ok"] and report["hit"] and report["compiles"] == 0
    assert report["tvm"], "a memo miss resolves the target with the compiler"
    assert any((warm_cache / "targets").iterdir())
    again = child(WARM_HIT, warm_cache)
    assert again["ok"] and again["hit"]
    assert_no_compiler(again)


def test_a_memo_of_another_user_or_writable_by_others_is_ignored(warm_cache):
    for path in (warm_cache / "targets").iterdir():
        path.chmod(0o666)
    report = child(WARM_HIT, warm_cache)
    assert report["ok"] and report["hit"] and report["tvm"]


def test_the_compiler_imported_after_a_warm_load_compiles_and_runs_with_it(warm_cache):
    report = child(
        """
        import torch, warm_kernels as wk
        tuned = wk.tuned_double(wk.N)
        fresh = wk.jit_double(wk.N, block=32)  # not cached: compiled here, importing TVM
        a = torch.rand(wk.N)
        ok = all(bool(torch.allclose(k(a), 2 * a)) for k in (tuned, fresh, tuned))
        _report(ok=ok)
        """,
        warm_cache,
    )
    assert report["ok"] and report["tvm"] and report["compiler_lib"]
