"""tileauto.cache._installed: which distribution provides a package, remembered per environment."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch  # noqa: F401 - loaded, as in a process that tunes: library_of finds it

from tileauto.cache import _installed as I
from tileauto.settings import Settings


@pytest.fixture(autouse=True)
def fresh_process_state():
    """Each test starts as a fresh process would: nothing remembered in memory."""

    def forget() -> None:
        I._distribution.cache_clear()
        I._distributions.cache_clear()
        I._memo_at.cache_clear()
        I._state_of.cache_clear()
        I._has_dist_info.cache_clear()

    forget()
    yield
    forget()


def memo_files() -> list[Path]:
    folder = Settings.from_env().cache_dir / I.MEMO_DIR
    return sorted(folder.glob("*.json")) if folder.is_dir() else []


def refuse_scans(monkeypatch: pytest.MonkeyPatch) -> None:
    def scan() -> None:
        raise AssertionError("packages_distributions() was called: every distribution scanned")

    monkeypatch.setattr(importlib.metadata, "packages_distributions", scan)


def test_a_package_is_named_by_its_distribution_and_version():
    assert I.library_of("numpy") == f"numpy=={np.__version__}"
    assert I.library_of("numpy.linalg") == f"numpy=={np.__version__}"


def test_an_answer_is_remembered_on_disk_and_read_back_without_a_scan(monkeypatch):
    first = I.library_of("numpy")
    assert len(memo_files()) == 1
    mode = memo_files()[0].stat().st_mode & 0o777
    assert mode == 0o600, oct(mode)

    I._distribution.cache_clear()
    I._distributions.cache_clear()
    I._memo_at.cache_clear()
    refuse_scans(monkeypatch)
    assert I.library_of("numpy") == first


def test_the_scan_happens_at_most_once_per_process(monkeypatch):
    calls = []
    real = importlib.metadata.packages_distributions

    def counted():
        calls.append(1)
        return real()

    monkeypatch.setattr(importlib.metadata, "packages_distributions", counted)
    for root in ("numpy", "torch", "pytest", "numpy"):
        assert "==" in I.library_of(root)
    assert len(calls) == 1


def test_answers_found_later_are_added_to_the_memo(monkeypatch):
    I.library_of("numpy")
    I._distribution.cache_clear()
    I._memo_at.cache_clear()
    I.library_of("torch")  # another process of the same environment, another package
    I._distribution.cache_clear()
    I._distributions.cache_clear()
    I._memo_at.cache_clear()
    refuse_scans(monkeypatch)
    assert I.library_of("numpy").startswith("numpy==")
    assert I.library_of("torch").startswith("torch==")


def test_an_install_or_an_upgrade_is_another_state(tmp_path, monkeypatch):
    def state() -> str:
        I._state_of.cache_clear()  # the listing is read once per process
        return I.environment_state()

    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    before = state()
    (site / "extra-1.0.dist-info").mkdir()
    os.utime(site / "extra-1.0.dist-info", ns=(0, 0))
    installed = state()
    os.rename(site / "extra-1.0.dist-info", site / "extra-2.0.dist-info")
    upgraded = state()
    os.rename(site / "extra-2.0.dist-info", site / "extra-1.0.dist-info")
    assert state() == installed  # the same listing: the same state
    os.utime(site / "extra-1.0.dist-info", ns=(10**9, 10**9))
    reinstalled = state()
    assert len({before, installed, upgraded, reinstalled}) == 4


def test_folders_without_metadata_do_not_change_the_state(tmp_path, monkeypatch):
    """A script's own folder heads ``sys.path``: scripts in other folders share one memo."""
    before = I.environment_state()
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    (scripts / "train.py").write_text("")
    monkeypatch.syspath_prepend(str(scripts))
    I._state_of.cache_clear()
    assert I.environment_state() == before


def test_a_new_state_scans_again(tmp_path, monkeypatch):
    I.library_of("numpy")
    site = tmp_path / "site"
    (site / "extra-1.0.dist-info").mkdir(parents=True)
    monkeypatch.syspath_prepend(str(site))
    I._distribution.cache_clear()
    I._distributions.cache_clear()
    I._state_of.cache_clear()
    refuse_scans(monkeypatch)
    with pytest.raises(AssertionError, match="every distribution scanned"):
        I.library_of("numpy")


@pytest.mark.parametrize("damage", ["writable_by_others", "not_json", "wrong_format", "link"])
def test_a_memo_that_is_not_safe_or_not_whole_is_ignored(monkeypatch, tmp_path, damage):
    I.library_of("numpy")
    (path,) = memo_files()
    if damage == "writable_by_others":
        path.chmod(0o666)
    elif damage == "not_json":
        path.write_text("{not json")
    elif damage == "wrong_format":
        path.write_text('{"format": 999, "roots": {"numpy": "numpy==0"}}')
    else:
        other = tmp_path / "other.json"
        other.write_text(path.read_text())
        other.chmod(0o600)
        path.unlink()
        path.symlink_to(other)
    I._distribution.cache_clear()
    I._distributions.cache_clear()
    I._memo_at.cache_clear()
    refuse_scans(monkeypatch)
    with pytest.raises(AssertionError, match="every distribution scanned"):
        I.library_of("numpy")


def test_with_the_caches_off_nothing_is_written(monkeypatch):
    monkeypatch.setenv("TILEAUTO_DISABLE_CACHE", "1")
    assert I.library_of("numpy") == f"numpy=={np.__version__}"
    assert memo_files() == []


def test_a_package_without_a_distribution_is_not_remembered(tmp_path, monkeypatch):
    site = tmp_path / "site-packages"
    (site / "loose").mkdir(parents=True)
    (site / "loose" / "__init__.py").write_text("__version__ = '3.1'\n")
    monkeypatch.syspath_prepend(str(site))
    import loose  # noqa: F401 - a package copied in by hand: no metadata

    try:
        assert I.library_of("loose") == "loose==3.1"
        assert all('"loose"' not in p.read_text() for p in memo_files())
    finally:
        sys.modules.pop("loose", None)


def test_a_fresh_process_with_a_warm_memo_never_scans(tmp_path):
    """What a warm process does, in one: the scan, were it called, would fail the process."""
    code = textwrap.dedent(
        """
        import importlib.metadata, sys
        from tileauto.cache._installed import library_of
        if sys.argv[1] == "warm":
            def scan():
                raise SystemExit("packages_distributions() called on the warm path")
            importlib.metadata.packages_distributions = scan
        print(library_of("numpy"), library_of("torch"))
        """
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("TILEAUTO_")}
    env["TILEAUTO_CACHE_DIR"] = str(tmp_path / "cache")

    def run(mode: str) -> str:
        proc = subprocess.run(
            [sys.executable, "-c", code, mode], env=env, capture_output=True, text=True
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        return proc.stdout

    cold = run("cold")
    assert run("warm") == cold


def _library_folder(tmp_path: Path, metadata: str | None) -> Path:
    """A folder as ``pip install --target`` leaves it: a package, and its metadata beside it."""
    folder = tmp_path / "libs"
    (folder / "tileauto_fakelib").mkdir(parents=True)
    (folder / "tileauto_fakelib" / "__init__.py").write_text("VALUE = 1\n")
    if metadata == "dist-info":
        info = folder / "tileauto_fakelib-1.2.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(
            "Metadata-Version: 2.1\nName: tileauto-fakelib\nVersion: 1.2\n"
        )
        (info / "top_level.txt").write_text("tileauto_fakelib\n")
    elif metadata == "egg-info":  # what setuptools leaves beside a user's own sources
        info = folder / "tileauto_fakelib.egg-info"
        info.mkdir()
        (info / "PKG-INFO").write_text(
            "Metadata-Version: 2.1\nName: tileauto-fakelib\nVersion: 1.2\n"
        )
        (info / "top_level.txt").write_text("tileauto_fakelib\n")
    return folder


@pytest.mark.parametrize(
    "metadata, expected",
    [("dist-info", "tileauto-fakelib==1.2"), ("egg-info", None), (None, None)],
)
def test_a_package_installed_outside_site_packages_is_named_not_walked(
    tmp_path, monkeypatch, metadata, expected
):
    """``pip install --target DIR`` with DIR on PYTHONPATH (seen on a GPU machine): TVM there was
    walked as the user's code until it reached a lock, and no tuning was cached."""
    monkeypatch.syspath_prepend(str(_library_folder(tmp_path, metadata)))
    import tileauto_fakelib  # noqa: F401

    try:
        assert I.library_of("tileauto_fakelib") == expected
    finally:
        del sys.modules["tileauto_fakelib"]
