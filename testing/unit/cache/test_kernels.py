"""tileauto.cache.kernels: the @jit kernel store, with fake build and load functions."""

from __future__ import annotations

import os
import threading
import time
import warnings

import pytest
import torch
from cache_fakes import DEVICE, TARGET, fake_kernel

from tileauto.cache import disk
from tileauto.cache.kernels import KernelStore
from tileauto.options import CompileArgs
from tileauto.settings import Settings


def factory(n, block=16):
    return n * block


def open_store(bound=None, settings=None, **kw):
    return KernelStore.open(
        settings or Settings.from_env(),
        kw.pop("factory", factory),
        bound if bound is not None else {"n": 64, "block": 16},
        kw.pop("compile_args", CompileArgs(out_idx=[-1])),
        target=TARGET,
        device=DEVICE,
    )


def test_key_holds_arguments_by_layout_and_compile_args():
    base = open_store()
    assert open_store().key == base.key
    assert open_store({"n": 64, "block": 32}).key != base.key
    assert open_store(compile_args=CompileArgs(out_idx=[0])).key != base.key
    a = open_store({"x": torch.randn(4, 4)})
    assert open_store({"x": torch.randn(4, 4)}).key == a.key
    assert open_store({"x": torch.randn(4, 4).t()}).key != a.key  # strides


def test_disable_cache_turns_it_off():
    off = Settings.from_env({**os.environ, "TILEAUTO_DISABLE_CACHE": "1"})
    assert open_store(settings=off) is None
    tuning_off = Settings.from_env({**os.environ, "TILEAUTO_AUTO_TUNING_DISABLE_CACHE": "1"})
    assert open_store(settings=tuning_off) is not None


def test_get_or_build_builds_once_then_loads(tmp_path):
    built = []

    def build():
        built.append(1)
        return fake_kernel(tmp_path).artifact

    kernel, was_built = open_store().get_or_build(build, lambda a: ("kernel", a))
    assert was_built and len(built) == 1
    (_, artifact), was_built = open_store().get_or_build(build, lambda a: ("kernel", a))
    assert not was_built and len(built) == 1
    assert artifact.directory == open_store().entry_dir / "kernel"
    assert (artifact.directory / "kernel.so").read_bytes() == b"\x7fELF fake library"


def test_a_library_that_does_not_load_is_rebuilt_with_one_warning(tmp_path):
    store = open_store()
    store.get_or_build(lambda: fake_kernel(tmp_path).artifact, lambda a: a)

    def load(artifact):  # the stored library fails (e.g. built for another CPU), a fresh one loads
        if artifact.directory.is_relative_to(store.entry_dir):
            raise RuntimeError("cannot open shared object file")
        return artifact

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _, was_built = open_store().get_or_build(lambda: fake_kernel(tmp_path).artifact, load)
    assert was_built
    assert len(caught) == 1 and "does not load (cannot open shared object file)" in str(
        caught[0].message
    )


def test_a_corrupt_entry_is_rebuilt_and_repaired(tmp_path):
    store = open_store()
    store.get_or_build(lambda: fake_kernel(tmp_path).artifact, lambda a: a)
    (store.entry_dir / "kernel" / "kernel.so").write_bytes(b"junk")
    with pytest.warns(RuntimeWarning, match="kernels/.* is unusable.*sha256"):
        _, was_built = open_store().get_or_build(
            lambda: fake_kernel(tmp_path).artifact, lambda a: a
        )
    assert was_built and disk.verify(store.entry_dir) is None


def test_concurrent_builders_of_one_key_build_once(tmp_path):
    built = []

    def build():
        built.append(threading.get_ident())
        time.sleep(0.3)
        return fake_kernel(tmp_path).artifact

    results = []
    threads = [
        threading.Thread(target=lambda: results.append(open_store().get_or_build(build, str)))
        for _ in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(built) == 1
    assert sorted(was_built for _, was_built in results) == [False, False, True]


def test_a_failed_write_still_returns_the_kernel(tmp_path, monkeypatch):
    def read_only(*a, **k):
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(disk, "write_entry", read_only)
    with pytest.warns(RuntimeWarning, match="could not write kernels/.*Read-only"):
        kernel, was_built = open_store().get_or_build(
            lambda: fake_kernel(tmp_path).artifact, lambda a: "kernel"
        )
    assert kernel == "kernel" and was_built


def test_writes_are_staged_in_tileauto_tmp_dir(tmp_path, monkeypatch):
    staging = tmp_path / "elsewhere"
    monkeypatch.setenv("TILEAUTO_TMP_DIR", str(staging))
    used = []
    real = disk.stage_dir

    def spy(root):
        used.append(root)
        return real(root)

    monkeypatch.setattr(disk, "stage_dir", spy)
    store = open_store()
    store.get_or_build(lambda: fake_kernel(tmp_path).artifact, lambda a: a)
    assert used == [staging] and disk.verify(store.entry_dir) is None
    assert list(staging.iterdir()) == []  # the staged folder was moved into place
