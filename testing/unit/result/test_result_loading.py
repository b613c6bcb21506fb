"""load_from_disk without a compiler: the tuning's compile arguments a saved folder keeps and a
recompile builds with, and the folders it refuses before it loads anything.

The "kernel" of a result is a folder of fake files (``cache_fakes``); a recompile is caught
where it would compile (``compile_to_dir``), so nothing here compiles or loads a library.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest

from tileauto.cache import disk
from tileauto.cache.entry import KERNEL_DIR, read_result, write_kernel_dir
from tileauto.cache.key import versions
from tileauto.errors import CacheError
from tileauto.options import CompileArgs
from tileauto.result.record import AutotuneResult
from tileauto.tune._ending import stored_facts

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cache"))
from cache_fakes import factory, fake_kernel, fake_result, trial  # noqa: E402

TRIALS = [trial(0, {"block": 8}), trial(1, {"block": 16})]
TUNED_WITH = CompileArgs(
    out_idx=[-1],
    target_host={"kind": "llvm", "mcpu": "generic"},
    pass_configs={"tirx.disable_assert": True, "tirx.unroll": (4, 8)},
)


def _tuned(tmp_path: Path, compile_args: CompileArgs = TUNED_WITH) -> AutotuneResult:
    """A result with the facts a tuning with ``compile_args`` keeps (``stored_facts``)."""
    problem = SimpleNamespace(args=(64,), kwargs={}, compile_args=compile_args)
    return dataclasses.replace(
        fake_result(tmp_path, TRIALS), extra=stored_facts(problem, None, None)
    )


def _reseal(path: Path) -> None:
    """Re-hash an edited folder (as if it had been written that way elsewhere)."""
    meta = {k: v for k, v in disk.read_manifest(path).items() if k != "files"}
    disk.seal(path, meta, shared=True)


class _Compiled(Exception):
    """Raised where the recompile would compile: it carries the compile arguments."""

    def __init__(self, compile_args: CompileArgs) -> None:
        super().__init__("compiled")
        self.compile_args = compile_args


def _recompile_args(monkeypatch, saved: Path, compile_args=None) -> CompileArgs:
    """The compile arguments load_from_disk recompiles ``saved`` with (it cannot run here)."""
    from tileauto.jit import compiler

    def compile_to_dir(fn, args, kwargs, compile_args, out_dir, config=None):
        raise _Compiled(compile_args)

    monkeypatch.setattr("tileauto.result.shipping.cannot_run_here", lambda *a: "another CPU")
    monkeypatch.setattr(compiler, "compile_to_dir", compile_to_dir)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # "cannot run here; recompiling"
        with pytest.raises(_Compiled) as info:
            AutotuneResult.load_from_disk(saved, compile_args, factory=factory)
    return info.value.compile_args


# -- the tuning's compile arguments -------------------------------------------------------------
def test_a_saved_result_keeps_the_tunings_compile_args_and_saves_them_again(tmp_path):
    saved = _tuned(tmp_path).save_to_disk(tmp_path / "saved")
    recorded = {
        "target_host": {"kind": "llvm", "mcpu": "generic"},
        "execution_backend": "auto",
        "pass_configs": {"tirx.disable_assert": True, "tirx.unroll": (4, 8)},  # the tuple too
    }
    stored = read_result(saved, disk.read_manifest(saved))
    assert stored.compile_args == recorded
    assert stored.problem == {"args": [64], "kwargs": {}}  # the call, without them
    loaded = AutotuneResult.from_stored(stored, fake_kernel(tmp_path))
    again = loaded.save_to_disk(tmp_path / "again")  # a loaded result shipped on
    assert read_result(again, disk.read_manifest(again)).compile_args == recorded


def test_a_recompile_builds_with_the_tunings_compile_args(tmp_path, monkeypatch):
    """It built with the caller's compile_args only: a tuning's pass_configs were lost on
    exactly the machine the result was shipped to."""
    saved = _tuned(tmp_path).save_to_disk(tmp_path / "saved")
    args = _recompile_args(monkeypatch, saved)
    assert args.pass_configs == {"tirx.disable_assert": True, "tirx.unroll": (4, 8)}
    assert args.target_host == {"kind": "llvm", "mcpu": "generic"}
    assert args.target == "llvm" and args.out_idx == (1,)  # this machine's, the kernel's


def test_the_callers_compile_args_win_over_the_tunings(tmp_path, monkeypatch):
    saved = _tuned(tmp_path).save_to_disk(tmp_path / "saved")
    given = {"pass_configs": {"tirx.disable_assert": False}, "target_host": "llvm"}
    args = _recompile_args(monkeypatch, saved, given)
    assert args.pass_configs == {"tirx.disable_assert": False, "tirx.unroll": (4, 8)}
    assert args.target_host == "llvm"


def test_a_folder_saved_before_compile_args_were_kept_recompiles_without_them(
    tmp_path, monkeypatch
):
    saved = _tuned(tmp_path).save_to_disk(tmp_path / "saved")
    problem = json.loads((saved / "problem.json").read_text())
    del problem["compile_args"], problem["literal"]
    (saved / "problem.json").write_text(json.dumps(problem))
    _reseal(saved)
    assert read_result(saved, disk.read_manifest(saved)).compile_args is None
    args = _recompile_args(monkeypatch, saved, {"pass_configs": {"tirx.noalias": True}})
    assert args.pass_configs == {"tirx.noalias": True} and args.target_host is None


def test_a_pass_option_that_is_no_plain_value_is_not_stored(tmp_path):
    odd = CompileArgs(pass_configs={"tirx.disable_assert": True, "my.option": object()})
    saved = _tuned(tmp_path, odd).save_to_disk(tmp_path / "saved")
    stored = read_result(saved, disk.read_manifest(saved))
    assert stored.compile_args["pass_configs"] == {"tirx.disable_assert": True}


def test_malformed_compile_args_are_unreadable_records(tmp_path):
    saved = _tuned(tmp_path).save_to_disk(tmp_path / "saved")
    (saved / "problem.json").write_text(json.dumps({"compile_args": {"pass_configs": [1]}}))
    _reseal(saved)
    with pytest.raises(CacheError, match=r"unreadable records \(problem.json: pass_configs"):
        AutotuneResult.load_from_disk(saved)


# -- folders refused before anything is loaded ---------------------------------------------------
def test_a_plain_jit_cache_entry_is_named_as_such(tmp_path):
    """It said 'best_config.json is not in the manifest: an incomplete entry'."""
    entry = tmp_path / "kernels" / "abc"
    entry.mkdir(parents=True, mode=0o700)
    write_kernel_dir(fake_kernel(tmp_path).artifact, entry)
    disk.seal(entry, {**versions(), "kind": "kernels", "key": "abc"}, shared=True)
    with pytest.raises(CacheError) as info:
        AutotuneResult.load_from_disk(entry)
    message = str(info.value)
    assert message.startswith(f"load_from_disk({str(entry)!r}): it holds a plain kernel")
    assert "not a tuned result" in message and "incomplete" not in message


@pytest.mark.parametrize("out_idx", [[7], [-1], [1, 1]])
def test_an_out_idx_that_names_no_parameter_is_unreadable_records(tmp_path, out_idx):
    """It was 'the library does not load: tuple index out of range' and a recompile that
    could only fail."""
    saved = fake_result(tmp_path, TRIALS).save_to_disk(tmp_path / "saved")
    meta_path = saved / KERNEL_DIR / "kernel.json"
    meta = json.loads(meta_path.read_text())
    meta["out_idx"] = out_idx
    meta_path.write_text(json.dumps(meta))
    _reseal(saved)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "cannot run here; recompiling"
        with pytest.raises(CacheError) as info:
            AutotuneResult.load_from_disk(saved)
    message = str(info.value)
    assert "unreadable records (kernel.json: out_idx" in message
    assert "of the 2 it lists" in message
