"""The ``tileauto`` command: every verb on a real cache, exit codes, errors, ``python -m``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from cache_kernels import jit_matmul, ref_scale_add, tune_scale_add

import tileauto
from tileauto import cli
from tileauto.cache import disk

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def built_cache(tmp_path_factory):
    """A cache with one tuned entry and one @jit entry (built once, copied per test)."""
    cache = tmp_path_factory.mktemp("cli") / "cache"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TILEAUTO_CACHE_DIR", str(cache))
        result = tune_scale_add()
        tileauto.jit(out_idx=[-1], target="llvm")(jit_matmul.factory)(16, 16, 16)
    kernel_key = next((cache / "kernels").iterdir()).name
    return cache, result.key, kernel_key


@pytest.fixture
def cache(built_cache, tmp_path, monkeypatch):
    src, tuned, kernel = built_cache
    dest = tmp_path / "cache"
    shutil.copytree(src, dest)
    monkeypatch.setenv("TILEAUTO_CACHE_DIR", str(dest))
    return dest, tuned, kernel


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_list_shows_key_kernel_target_age_size_and_latency(cache, capsys):
    root, tuned, kernel = cache
    code, out, _ = run(capsys, "cache", "list")
    assert code == 0
    header, *rows = out.splitlines()
    assert header.split() == ["KIND", "KEY", "KERNEL", "TARGET", "AGE", "SIZE", "BEST", "MS"]
    tuned_row = next(r for r in rows if tuned in r).split()
    assert tuned_row[0] == "autotuner" and tuned_row[2] == "scale_add" and tuned_row[3] == "llvm"
    assert float(tuned_row[-1]) > 0
    kernel_row = next(r for r in rows if kernel in r).split()
    assert kernel_row[0] == "kernels" and kernel_row[2] == "matmul" and kernel_row[-1] == "-"
    assert "2 entries" in out
    code, out, _ = run(capsys, "cache", "list", "--json", "--kind", "kernels")
    data = json.loads(out)
    assert [d["key"] for d in data] == [kernel] and data[0]["size_bytes"] > 0


def test_list_an_empty_or_missing_cache(tmp_path, capsys):
    code, out, _ = run(capsys, "cache", "list", "--cache-dir", str(tmp_path / "none"))
    assert code == 0 and "no entries" in out


def test_show_prints_facts_and_the_trial_table(cache, capsys):
    root, tuned, _ = cache
    code, out, _ = run(capsys, "cache", "show", tuned[:8])
    assert code == 0
    assert f"key              {tuned}" in out or tuned in out
    assert "best config" in out and "status           ok" in out
    assert "block=8" in out and "block=16" in out and "median ms" in out
    assert "*" in out  # the winner is marked


def test_show_a_kernel_entry(cache, capsys):
    _, _, kernel = cache
    code, out, _ = run(capsys, "cache", "show", kernel)
    assert code == 0 and "signature" in out and "main(A: [16, 16] float32" in out


@pytest.mark.parametrize("key", ["ffffffffffff", ""])
def test_show_an_unknown_key_is_a_clear_error(cache, capsys, key):
    code, out, err = run(capsys, "cache", "show", key)
    assert code == 1 and out == ""
    assert err.startswith("tileauto: error:") and "tileauto cache list" in err


def test_an_ambiguous_prefix_is_a_clear_error(cache, capsys, tmp_path):
    root, tuned, _ = cache
    twin = root / "autotuner" / (tuned[:4] + "0" * 28)
    shutil.copytree(root / "autotuner" / tuned, twin)
    code, _, err = run(capsys, "cache", "show", tuned[:4])
    assert code == 1 and "matches 2 entries" in err


def test_verify_passes_then_names_each_damaged_entry(cache, capsys):
    root, tuned, kernel = cache
    code, out, _ = run(capsys, "cache", "verify", "-v")
    assert code == 0 and "2 entries checked, 0 bad" in out and out.count("ok ") == 2
    lib = root / "kernels" / kernel / "kernel" / "kernel.so"
    lib.write_bytes(lib.read_bytes()[:10])
    (root / "autotuner" / tuned / "manifest.json").unlink()
    code, out, _ = run(capsys, "cache", "verify")
    assert code == 1 and "2 entries checked, 2 bad" in out
    assert f"BAD      kernels/{kernel}: kernel/kernel.so does not match its sha256" in out
    assert f"BAD      autotuner/{tuned}: no readable manifest" in out
    code, out, _ = run(capsys, "cache", "verify", "--delete")
    assert code == 0 and "(deleted)" in out
    code, out, _ = run(capsys, "cache", "list")
    assert "no entries" in out


def test_clear_older_than_keeps_young_entries(cache, capsys):
    root, tuned, kernel = cache
    manifest_path = root / "autotuner" / tuned / "manifest.json"
    data = json.loads(manifest_path.read_text())
    data["created"] = time.time() - 10 * 86400  # ten days old (the manifest is not hashed)
    manifest_path.write_text(json.dumps(data))
    code, out, _ = run(capsys, "cache", "clear", "--older-than", "7d", "--dry-run")
    assert code == 0 and f"would delete autotuner/{tuned}" in out and kernel not in out
    assert (root / "autotuner" / tuned).exists()
    code, out, _ = run(capsys, "cache", "clear", "--older-than", "7d")
    assert code == 0 and "deleted 1 entries older than 7d" in out
    assert not (root / "autotuner" / tuned).exists() and (root / "kernels" / kernel).exists()
    code, out, _ = run(capsys, "cache", "clear")
    assert code == 0 and "deleted 1 entries" in out
    assert not any((root / "kernels").iterdir()) and not any((root / "measurements").iterdir())


def test_clear_rejects_a_bad_age(cache, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["cache", "clear", "--older-than", "soon"])
    assert exc.value.code == 2
    assert "is not an age" in capsys.readouterr().err


def test_export_then_import_into_another_cache_then_load(cache, capsys, tmp_path, monkeypatch):
    root, tuned, kernel = cache
    shipped = tmp_path / "shipped"
    code, out, _ = run(capsys, "cache", "export", tuned[:10], str(shipped))
    assert code == 0 and f"exported autotuner/{tuned}" in out
    assert disk.verify(shipped) is None
    code, _, err = run(capsys, "cache", "export", tuned, str(shipped))  # not over a folder
    assert code == 1 and "not an empty folder" in err
    # the exported folder loads directly, too
    a = torch.rand(1024)
    torch.testing.assert_close(
        tileauto.AutotuneResult.load_from_disk(shipped).kernel(a), ref_scale_add(a)
    )
    other = tmp_path / "other-cache"
    monkeypatch.setenv("TILEAUTO_CACHE_DIR", str(other))
    code, out, _ = run(capsys, "cache", "import", str(shipped))
    assert code == 0 and f"imported autotuner/{tuned}" in out and "warning" not in out
    assert disk.verify(other / "autotuner" / tuned) is None
    result = tune_scale_add()  # the imported entry answers: no tuning
    assert result.cache_hit and result.key == tuned


def test_import_a_folder_of_entries_and_reject_bad_ones(cache, capsys, tmp_path):
    root, tuned, kernel = cache
    bundle = tmp_path / "bundle"
    for key in (tuned, kernel):
        assert run(capsys, "cache", "export", key, str(bundle / key))[0] == 0
    target = tmp_path / "target-cache"
    code, out, _ = run(capsys, "cache", "import", str(bundle), "--cache-dir", str(target))
    assert code == 0 and out.count("imported") == 2
    assert (target / "kernels" / kernel).is_dir() and (target / "autotuner" / tuned).is_dir()
    (bundle / kernel / "kernel" / "kernel.json").write_text("{}")
    code, _, err = run(capsys, "cache", "import", str(bundle / kernel))
    assert code == 1 and "does not match its sha256" in err and "not imported" in err
    code, _, err = run(capsys, "cache", "import", str(tmp_path / "empty"))
    assert code == 1 and "holds no tileauto entry" in err


def test_env_prints_the_effective_settings(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("TILEAUTO_AUTO_TUNING_DISABLE_CACHE", "1")
    code, out, _ = run(capsys, "env")
    assert code == 0
    settings = tileauto.Settings.from_env()
    for name, value in settings.describe().items():
        assert f"{name}={value}" in out
    assert "# tuning cache: off" in out and "# kernel cache: on" in out
    monkeypatch.setenv("TILEAUTO_AUTO_TUNING_CPU_UTILITIES", "two")
    code, _, err = run(capsys, "env")
    assert code == 2 and "TILEAUTO_AUTO_TUNING_CPU_UTILITIES='two'" in err


def test_usage_errors_and_help(capsys):
    assert cli.main([]) == 2 and "usage: tileauto" in capsys.readouterr().err
    assert cli.main(["cache"]) == 2 and "list" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        cli.main(["cache", "frobnicate"])
    assert exc.value.code == 2 and "invalid choice" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        cli.main(["cache", "list", "--help"])
    assert exc.value.code == 0 and "--json" in capsys.readouterr().out


@pytest.mark.slow
def test_python_dash_m_tileauto_runs_the_command(cache):
    root, tuned, _ = cache
    env = os.environ.copy()
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    proc = subprocess.run(
        [sys.executable, "-m", "tileauto", "cache", "list"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0 and tuned in proc.stdout, proc.stderr
    proc = subprocess.run(
        [sys.executable, "-m", "tileauto", "cache", "show", "nope"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1 and "no cache entry" in proc.stderr


@pytest.mark.parametrize(
    "where",
    [("--cache-dir", "{dir}", "cache", "list"), ("cache", "--cache-dir", "{dir}", "list")],
    ids=["before-the-command", "before-the-verb"],
)
def test_cache_dir_works_before_the_subcommand(cache, capsys, monkeypatch, tmp_path, where):
    root, tuned, _ = cache
    monkeypatch.setenv("TILEAUTO_CACHE_DIR", str(tmp_path / "elsewhere"))  # not the one listed
    code, out, _ = run(capsys, *(a.format(dir=root) for a in where), "--json")
    assert code == 0 and tuned in [d["key"] for d in json.loads(out)]
    # the verb's own --cache-dir still wins when given last
    code, out, _ = run(
        capsys, "--cache-dir", str(root), "cache", "list", "--cache-dir", str(tmp_path / "x")
    )
    assert code == 0 and tuned not in out
