"""tileauto.utils.imports: the garbage collector paused around heavy imports, then as it was."""

from __future__ import annotations

import gc
import subprocess
import sys

import pytest

from tileauto.utils.imports import collector_paused


@pytest.fixture
def collector_state():
    was = gc.isenabled()
    yield
    if was:
        gc.enable()
    else:
        gc.disable()


def test_the_collector_is_off_inside_and_on_after(collector_state):
    gc.enable()
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_collector_the_caller_turned_off_stays_off(collector_state):
    gc.disable()
    with collector_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_the_collector_comes_back_after_an_error(collector_state):
    gc.enable()
    with pytest.raises(ImportError), collector_paused():
        import tileauto_no_such_module  # noqa: F401
    assert gc.isenabled()


def test_loading_the_compiler_leaves_the_collector_on():
    """In a fresh process: load_compiler() imports TVM with the collector paused, and the
    process's collector is on afterwards."""
    code = (
        "import gc; from tileauto.jit.compiler import load_compiler; load_compiler(); "
        "import sys; print('tvm' in sys.modules, gc.isenabled())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "True"]
