"""``tileauto cache ... --remote``, ``push`` and ``pull`` against a real ``redis-server``.

A machine tunes (in this process), pushes its entries, and a second machine's disk cache is
seeded with ``pull``: its tuning is then a disk hit that compiles nothing.
"""

from __future__ import annotations

import json

import pytest
from redis_server import redis_server
from test_fleet import CONFIGS, fleet_kernel, reference

import tileauto
from tileauto.cli import main
from tileauto.jit import compiler

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]


def tune(cache_dir, monkeypatch, **env):
    monkeypatch.setenv("TILEAUTO_CACHE_DIR", str(cache_dir))
    for name in ("TILEAUTO_REMOTE_CACHE", "TILEAUTO_REMOTE_CACHE_KEY"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    tuner = tileauto.AutoTuner.from_kernel(fleet_kernel, CONFIGS)
    tuner.args = (4096,)
    tuner.set_compile_args(out_idx=[-1], target="llvm")
    tuner.set_profile_args(warmup=1, rep=3, ref_prog=reference)
    return tuner.run(verbose=False)


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_push_list_show_verify_pull_clear(tmp_path, monkeypatch, capsys):
    with redis_server(tmp_path / "redis") as srv:
        tuned = tune(tmp_path / "ci", monkeypatch)  # the CI machine, no remote while tuning
        assert not tuned.cache_hit
        monkeypatch.setenv("TILEAUTO_REMOTE_CACHE_KEY", "fleet-secret")
        code, out, _ = run(capsys, "cache", "push", "--cache-dir", str(tmp_path / "ci"),
                           "--remote", srv.url)  # fmt: skip
        assert code == 0 and "pushed 1 entries" in out and "signed kernels" in out

        monkeypatch.setenv("TILEAUTO_REMOTE_CACHE", srv.url)
        code, out, _ = run(capsys, "cache", "list", "--remote", "--json")
        listed = json.loads(out)
        assert code == 0 and [e["key"] for e in listed] == [tuned.key]
        assert listed[0]["signed_kernel"] and listed[0]["problem"] is None

        code, out, _ = run(capsys, "cache", "show", tuned.key[:8], "--remote")
        assert code == 0 and json.dumps(tuned.config, sort_keys=True) in out
        assert "signed kernel (verified)" in out

        code, out, _ = run(capsys, "cache", "verify", "--remote")
        assert code == 0 and "1 remote entries checked, 0 unusable" in out

        # a push without the key would replace the signed entry by one without its kernel
        monkeypatch.delenv("TILEAUTO_REMOTE_CACHE_KEY")
        code, out, _ = run(capsys, "cache", "push", "--cache-dir", str(tmp_path / "ci"))
        assert code == 1 and f"skipped {tuned.key}: the fleet's entry is signed" in out
        assert srv.client().hexists(f"tileauto:r1:entry:{tuned.key}", "kernel")
        monkeypatch.setenv("TILEAUTO_REMOTE_CACHE_KEY", "fleet-secret")

        code, out, _ = run(capsys, "cache", "pull", "--cache-dir", str(tmp_path / "node"))
        assert code == 0 and "pulled 1 entries" in out
        before = compiler.COMPILES.count
        warm = tune(tmp_path / "node", monkeypatch, TILEAUTO_REMOTE_CACHE_KEY="fleet-secret")
        assert warm.cache_hit and warm.config == tuned.config
        assert "remote" not in warm.extra  # a disk hit: the pulled entry
        assert compiler.COMPILES.count == before
        monkeypatch.setenv("TILEAUTO_REMOTE_CACHE", srv.url)

        # a damaged entry: verify says so; clear removes it
        client = srv.client()
        client.hset(f"tileauto:r1:entry:{tuned.key}", "sha256", "0" * 64)
        code, out, _ = run(capsys, "cache", "verify", "--remote")
        assert code == 1 and "damaged" in out
        code, out, _ = run(capsys, "cache", "clear", "--remote", "--dry-run")
        assert code == 0 and "would delete 1" in out
        code, out, _ = run(capsys, "cache", "clear", "--remote")
        assert code == 0 and "deleted 1" in out
        code, out, _ = run(capsys, "cache", "list", "--remote")
        assert code == 0 and "no entries" in out


def test_remote_verbs_say_what_is_missing(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("TILEAUTO_REMOTE_CACHE", raising=False)
    code, _, err = run(capsys, "cache", "list", "--remote")
    assert code == 2 and "TILEAUTO_REMOTE_CACHE" in err
    code, _, err = run(capsys, "cache", "list", "--remote", "http://nope")
    assert code == 2 and "--remote" in err and "redis://" in err
    from redis_server import free_port, needs_redis

    needs_redis()
    code, _, err = run(capsys, "cache", "list", "--remote", f"redis://127.0.0.1:{free_port()}/0")
    assert code == 1 and "cannot reach redis://127.0.0.1" in err
    with redis_server(tmp_path / "redis") as srv:
        monkeypatch.delenv("TILEAUTO_REMOTE_CACHE_KEY", raising=False)
        code, _, err = run(capsys, "cache", "pull", "--remote", srv.url)
        assert code == 2 and "TILEAUTO_REMOTE_CACHE_KEY" in err


def test_store_option_on_the_decorator_and_the_builder(tmp_path, monkeypatch):
    from tileauto.cache.remote import RemoteCache

    monkeypatch.setenv("TILEAUTO_CACHE_DIR", str(tmp_path / "cache"))
    for name in ("TILEAUTO_REMOTE_CACHE", "TILEAUTO_REMOTE_CACHE_KEY"):
        monkeypatch.delenv(name, raising=False)
    with redis_server(tmp_path / "redis") as srv:
        remote = RemoteCache(srv.url)
        tuned = tileauto.autotune(configs=CONFIGS, store=srv.url, ref_prog=reference, warmup=1,
                                  rep=3, verbose=False)(
            tileauto.jit(out_idx=[-1], target="llvm")(fleet_kernel)
        )  # fmt: skip
        tuned(4096)
        assert len(remote.entry_keys()) == 1  # the decorator's store= published it

        def builder(n, store):
            tuner = tileauto.AutoTuner.from_kernel(fleet_kernel, CONFIGS)
            tuner.args = (n,)
            tuner.set_compile_args(out_idx=[-1], target="llvm")
            tuner.set_profile_args(warmup=1, rep=3, ref_prog=reference, store=store)
            return tuner.run(verbose=False)

        monkeypatch.setenv("TILEAUTO_REMOTE_CACHE", srv.url)
        builder(2048, "local")  # the disk cache alone, whatever the environment says
        assert len(remote.entry_keys()) == 1
        result = builder(1024, RemoteCache(srv.url))
        assert result.key in remote.entry_keys() and len(remote.entry_keys()) == 2


def test_push_refuses_a_kernel_entry_keeps_families_and_pull_fails_on_what_it_skips(
    tmp_path, monkeypatch, capsys
):
    from tileauto.cache import catalog
    from tileauto.cache.entry import KIND_KERNEL
    from tileauto.cache.remote import RemoteCache

    with redis_server(tmp_path / "redis") as srv:
        tuned = tune(tmp_path / "ci", monkeypatch)
        before = {e.key for e in catalog.list_entries(tmp_path / "ci", (KIND_KERNEL,))}
        tileauto.jit(out_idx=[-1], target="llvm")(fleet_kernel)(1000)  # a kernels/ entry
        (jit,) = [e for e in catalog.list_entries(tmp_path / "ci", (KIND_KERNEL,))
                  if e.key not in before]  # fmt: skip
        monkeypatch.setenv("TILEAUTO_REMOTE_CACHE", srv.url)
        code, out, err = run(capsys, "cache", "push", jit.key[:12])
        assert code == 2 and f"kernels/{jit.key}" in err and "not a tuned result" in err
        assert RemoteCache(srv.url).entry_keys() == []  # nothing published

        code, out, _ = run(capsys, "cache", "push", tuned.key[:12])  # no key: configs only
        assert code == 0 and "pushed 1 entries" in out
        family = catalog.find_entry(tmp_path / "ci", tuned.key).manifest["family"]
        client = srv.client()
        assert client.smembers(f"tileauto:r1:family:{family}") == {tuned.key.encode()}

        monkeypatch.setenv("TILEAUTO_REMOTE_CACHE_KEY", "fleet-secret")
        code, out, _ = run(capsys, "cache", "pull", "--cache-dir", str(tmp_path / "n1"), tuned.key)
        assert code == 1 and "skipped" in out and "no signed kernel" in out  # named: a failure
        code, out, _ = run(capsys, "cache", "pull", "--cache-dir", str(tmp_path / "n1"))
        assert code == 0 and "1 skipped" in out  # everything: a configs-only entry is no fault

        code, out, _ = run(capsys, "cache", "push", "--cache-dir", str(tmp_path / "ci"))
        assert code == 0 and "signed kernels" in out
        code, out, _ = run(capsys, "cache", "pull", "--cache-dir", str(tmp_path / "n2"))
        assert code == 0 and "pulled 1 entries" in out
        pulled = catalog.find_entry(tmp_path / "n2", tuned.key).manifest
        assert pulled["family"] == family  # the disk prior's "same problem" finds it

        client.hset(f"tileauto:r1:entry:{tuned.key}", "sha256", "0" * 64)  # damaged
        code, out, _ = run(capsys, "cache", "pull", "--cache-dir", str(tmp_path / "n3"))
        assert code == 1 and "damaged" in out
