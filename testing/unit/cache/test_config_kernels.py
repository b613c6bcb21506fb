"""tileauto.cache.kernels.ConfigKernels: a tuning's compile keyed by what the compile depends on."""

from __future__ import annotations

from cache_fakes import DEVICE, TARGET

from tileauto.cache.kernels import ConfigKernels
from tileauto.options import CompileArgs
from tileauto.settings import Settings


def factory(n, block=16, unroll=False):
    return n * block


def other_factory(n, block=16, unroll=False):
    return n * block + 1


def kernels(settings=None, fn=factory, args=(64,), compile_args=None, **kw):
    return ConfigKernels.open(
        settings or Settings.from_env(),
        fn,
        args,
        kw.pop("kwargs", {}),
        compile_args or CompileArgs(out_idx=[-1]),
        target=kw.pop("target", TARGET),
        device=kw.pop("device", DEVICE),
    )


def key(config, **kw) -> str:
    return kernels(**kw).store(config).key


def test_one_key_per_compile_and_each_ingredient_changes_it():
    base = key({"block": 8})
    assert key({"block": 8}) == base
    assert key({"block": 32}) != base
    assert key({"block": 8}, args=(128,)) != base
    assert key({"block": 8}, fn=other_factory) != base
    assert key({"block": 8}, compile_args=CompileArgs(out_idx=[0])) != base
    assert key({"block": 8}, target='{"kind": "llvm", "mcpu": "other"}') != base
    assert key({"block": 8}, device={"kind": "cpu", "mcpu": "other"}) != base
    assert key({"block": 8, "pass_configs": {"tir.disable_vectorize": True}}) != base
    assert key({"block": 8}, compile_args=CompileArgs(out_idx=[-1], verbose=True)) == base


def test_entries_are_kernel_cache_entries():
    store = kernels().store({"block": 8})
    assert store.entry_dir.parent == Settings.from_env().cache_dir / "kernels"
    assert store.meta["kind"] == "kernels" and store.meta["kernel"] == "factory"
    # labelled MODULE:NAME in `tileauto cache list` as tuned entries are; not part of the key
    assert store.meta["module"] == "test_config_kernels"


def test_with_either_cache_off_a_tuning_keeps_no_compile(monkeypatch):
    for switch in ("TILEAUTO_DISABLE_CACHE", "TILEAUTO_AUTO_TUNING_DISABLE_CACHE"):
        with monkeypatch.context() as m:
            m.setenv(switch, "1")
            assert kernels(Settings.from_env()) is None


def test_an_unkeyable_factory_has_no_entries():
    import threading

    lock = threading.Lock()

    def locked(n, block=16):
        with lock:
            return n

    assert kernels(fn=locked) is None
