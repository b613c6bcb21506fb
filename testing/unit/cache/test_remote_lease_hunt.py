"""The fleet's lease and Redis verbs as the fleet hunt (hunt A) found them wanting.

A Ctrl-C the holder survives leaves its renewing helper alive, and a helper that dies is
reported; a holder's bound counts its batch in flight, not ``max_seconds`` alone; a lease too
short to be renewed, and seconds that are not finite, are refused; the times of a lease are
Redis's; ``clear --remote --older-than`` dates entries of another version too, and a clear
leaves no family set behind; a wrong signing key fails ``pull`` and ``verify``; the settings
shipped to Ray nodes carry none of the fleet's secrets. Against a real ``redis-server``; no
sleep stands in for an event.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import signal
import time
import warnings

import pytest
from redis_server import redis_server
from test_remote import KEY, kernel_dir, record

from tileauto.cache import _signing
from tileauto.cache._lease import OVERDUE_MARGIN_S, Holder
from tileauto.cache.remote import RemoteCache
from tileauto.errors import SettingsError
from tileauto.settings import Settings

NOWHERE = "redis://127.0.0.1:1/0"  # never connected to: the constructor alone


@pytest.fixture
def server(tmp_path):
    with redis_server(tmp_path / "redis") as srv:
        yield srv


def renewed(client, lease) -> None:
    """Until the helper has renewed ``lease`` once (its expiry moved back): it has started."""
    lowest = client.pttl(lease.name)
    while True:
        left = client.pttl(lease.name)
        assert left > 0, "the lease expired: it was not renewed"
        if left > lowest:
            return
        lowest = left


# -- 1: Ctrl-C and the renewing helper ------------------------------------------------------------
def test_a_ctrl_c_the_holder_survives_leaves_its_helper_renewing(server):
    cache = RemoteCache(server.url, lease_s=6, timeout_s=1)
    lease = cache.lease(KEY)
    assert lease.acquire()
    lease.keep_renewed(cache.connection())
    helper = lease._helper
    # a terminal's Ctrl-C goes to its foreground process group: the helper is not in it
    assert os.getpgid(helper.pid) != os.getpgrp()
    renewed(server.client(), lease)  # past its start
    os.kill(helper.pid, signal.SIGINT)  # and one sent to it by pid is ignored
    assert lease.stop() == []  # no fault: it renewed until told to stop
    assert helper.returncode == 0
    assert server.client().get(lease.name) == lease.value
    lease.release()


def test_a_helper_that_died_while_the_tuning_ran_is_a_fault(server):
    cache = RemoteCache(server.url, lease_s=3, timeout_s=1)
    lease = cache.lease(KEY)
    assert lease.acquire()
    lease.keep_renewed(cache.connection())
    lease._helper.kill()
    lease._helper.wait()
    faults = lease.stop()
    assert len(faults) == 1 and "renewing helper process ended (exit -9)" in faults[0]
    assert "was not renewed" in faults[0]


# -- 2: the holder's bound ------------------------------------------------------------------------
def test_a_holders_bound_counts_its_batch_in_flight(problem):
    from tileauto.jit.target_memo import resolve as resolve_target
    from tileauto.tune import defaults

    env = {"TILEAUTO_REMOTE_CACHE": NOWHERE, "TILEAUTO_COMPILE_TIMEOUT": "300"}
    p = problem(max_seconds=1, timeout=60)
    env["TILEAUTO_CACHE_DIR"] = str(p.settings.cache_dir)
    p = dataclasses.replace(p, settings=Settings.from_env(env))
    store = defaults.store_of(p, resolve_target("llvm"))
    bound = store.limit_s
    # the hunt's holder: 35 s into its first compile of a 1 s tuning, alive and renewing
    holder = Holder("h:1", since=1000.0, limit_s=bound, raw=b"")
    assert not holder.overdue(1000.0 + 35)
    # past max_seconds at least one compile and one run of the batch in flight may run
    assert bound >= 1 + 300 + 60 and bound == defaults.fleet_bound_s(p)
    assert holder.overdue(1000.0 + bound + OVERDUE_MARGIN_S + 1)  # a hung one is taken over
    # the whole small space in one batch (auto measures it all at once), on 1 compile worker
    one = dataclasses.replace(p, settings=dataclasses.replace(p.settings, cpu_counts=1))
    n = p.view.size_bound + 1  # the default rides with the batch
    assert defaults.fleet_bound_s(one) == 1 + (n + 1) * 300 + (n + 2 * 4 + 1) * 60
    assert defaults.fleet_bound_s(problem()) is None  # no max_seconds: never overdue


# -- 3 and 6: the lease's length and the constructor's seconds ------------------------------------
def test_a_lease_too_short_to_be_renewed_is_refused():
    with pytest.raises(SettingsError, match=r"RemoteCache\(lease_s=1\): .*at least 6 s"):
        RemoteCache(NOWHERE, lease_s=1)
    with pytest.raises(SettingsError, match=r"lease_s=0.3\): .*at least 3 s"):
        RemoteCache(NOWHERE, lease_s=0.3, timeout_s=0.5)
    assert RemoteCache(NOWHERE, lease_s=3, timeout_s=1).lease_s == 3
    for lease, timeout, least in (("0.001", None, 6), ("0.3", None, 6), ("2", "0.5", 3)):
        env = {"TILEAUTO_REMOTE_CACHE": NOWHERE, "TILEAUTO_REMOTE_CACHE_LEASE": lease}
        if timeout is not None:
            env["TILEAUTO_REMOTE_CACHE_TIMEOUT"] = timeout
        with pytest.raises(SettingsError) as exc:
            RemoteCache.from_settings(Settings.from_env(env))
        message = str(exc.value)
        assert message.startswith(f"TILEAUTO_REMOTE_CACHE_LEASE={lease}: "), message
        assert f"at least {least} s" in message and "TILEAUTO_REMOTE_CACHE_TIMEOUT" in message
        with pytest.raises(SettingsError, match="too short a lease"):
            Settings.from_env(env)  # the settings refuse it (was: only the first remote use)
    env = {"TILEAUTO_REMOTE_CACHE": NOWHERE, "TILEAUTO_REMOTE_CACHE_LEASE": "6"}
    assert RemoteCache.from_settings(Settings.from_env(env)) is not None
    # without a remote cache the lease is not used, and not refused
    assert Settings.from_env({"TILEAUTO_REMOTE_CACHE_LEASE": "1"}).remote_cache_lease_s == 1


@pytest.mark.parametrize("name", ["lease_s", "timeout_s"])
@pytest.mark.parametrize("value", [math.inf, math.nan, 1e300, 1e7, True, "5", 0, -1])
def test_seconds_the_variables_refuse_are_refused_by_the_constructor(name, value):
    with pytest.raises(SettingsError, match=rf"RemoteCache\({name}=...\): expected a positive"):
        RemoteCache(NOWHERE, **{name: value})


# -- (b): the lease's times are Redis's -----------------------------------------------------------
class _Skewed:
    """The ``time`` module of a machine whose clock is ``offset_s`` off."""

    def __init__(self, offset_s: float) -> None:
        self.offset_s = offset_s

    def time(self) -> float:
        return time.time() + self.offset_s

    def __getattr__(self, name: str):
        return getattr(time, name)


def test_clocks_of_the_holder_and_the_waiter_do_not_count(server, monkeypatch):
    from tileauto.cache import _lease, remote

    cache = RemoteCache(server.url, lease_s=30)
    holder = cache.lease(KEY, limit_s=60)
    with monkeypatch.context() as m:
        m.setattr(_lease, "time", _Skewed(-3600))  # the holder's clock: an hour behind
        assert holder.acquire()
    monkeypatch.setattr(remote, "time", _Skewed(+3600))  # the waiter's: an hour ahead
    monkeypatch.setattr(_lease, "time", _Skewed(+3600))
    seen = []

    def publish(who: Holder) -> None:  # told who holds it: the holder publishes then
        seen.append(who)
        RemoteCache(server.url).put(KEY, record())

    # not overdue (60 s + 30 s on Redis's clock): it waits, and loads the holder's entry
    assert cache.wait_for(KEY, cache.lease(KEY), publish) is False
    assert len(seen) == 1 and abs(seen[0].since - seen[0].read_at) < 60
    assert "(0 s)" in seen[0].describe() or "(1 s)" in seen[0].describe()
    assert server.client().get(holder.name) == holder.value  # the holder kept its lease


# -- 4 and 5: clear --remote ----------------------------------------------------------------------
def _put(cache: RemoteCache, key: str, created: float, family: str, **versions: str) -> None:
    """An entry published ``created``, of another version when ``versions`` differ."""
    cache.put(key, {**record(), "created": created, "family": family}, family=family)
    if versions:
        client, name = cache.client, cache.name("entry", key)
        body = json.loads(client.hget(name, "record"))
        body["versions"].update(versions)
        raw = json.dumps(body, sort_keys=True).encode()
        client.hset(name, mapping={"record": raw, "sha256": _signing.sha256_hex(raw)})


def test_clear_older_than_dates_entries_of_another_version_and_drops_families(
    server, monkeypatch, capsys
):
    from tileauto.cli import main

    monkeypatch.delenv("TILEAUTO_REMOTE_CACHE_KEY", raising=False)
    cache = RemoteCache(server.url)
    now, old = time.time(), time.time() - 2 * 86400
    _put(cache, "a" * 32, now, "fam", tvm="0.99.0")  # fresh, of another version: kept
    _put(cache, "b" * 32, old, "fam", tvm="0.99.0")  # old, of another version: deleted
    _put(cache, "c" * 32, old, "gone")  # old, this version: deleted
    _put(cache, "d" * 32, now, "fam")  # fresh, this version: kept
    assert main(["cache", "clear", "--remote", server.url, "--older-than", "1h"]) == 0
    assert "deleted 2 remote entries" in capsys.readouterr().out
    assert cache.entry_keys() == ["a" * 32, "d" * 32]
    client = server.client()
    assert client.smembers(cache.name("family", "fam")) == {b"a" * 32, b"d" * 32}
    assert not client.exists(cache.name("family", "gone"))  # its last key went: so did it
    assert main(["cache", "clear", "--remote", server.url]) == 0
    assert cache.entry_keys() == [] and client.keys("tileauto:*") == []  # nothing left behind


def test_verify_delete_drops_the_family_of_a_damaged_entry(server, monkeypatch, capsys):
    from tileauto.cli import main

    monkeypatch.delenv("TILEAUTO_REMOTE_CACHE_KEY", raising=False)
    cache = RemoteCache(server.url)
    _put(cache, KEY, time.time(), "fam")
    server.client().hset(cache.name("entry", KEY), "sha256", "0" * 64)  # damaged
    assert main(["cache", "verify", "--remote", server.url, "--delete"]) == 0
    assert "deleted" in capsys.readouterr().out
    assert server.client().keys("tileauto:*") == []


def test_a_clear_leaves_the_lease_of_a_process_tuning_the_key_again(server, monkeypatch, capsys):
    # a node tunes a published key again (its entry is of another version, say): a clear
    # deletes the entry, and the lease stays with its holder (its waiters go on waiting)
    from tileauto.cli import main

    monkeypatch.delenv("TILEAUTO_REMOTE_CACHE_KEY", raising=False)
    cache = RemoteCache(server.url)
    _put(cache, KEY, time.time(), "fam")
    lease = cache.lease(KEY)
    assert lease.acquire()
    held = server.client().get(lease.name)
    assert main(["cache", "clear", "--remote", server.url]) == 0
    assert "deleted 1 remote entries" in capsys.readouterr().out
    assert cache.entry_keys() == []
    assert server.client().get(lease.name) == held
    assert not cache.lease(KEY).acquire()  # a second process still waits for the holder


def test_an_entry_of_a_newer_version_that_this_one_cannot_read_is_left_alone(
    server, monkeypatch, capsys
):
    # a newer tileauto writes trials this one does not know: its entry is that version's,
    # listed as such, never "malformed" (verify --delete would remove it from its nodes)
    from tileauto.cli import main

    monkeypatch.delenv("TILEAUTO_REMOTE_CACHE_KEY", raising=False)
    cache = RemoteCache(server.url)
    _put(cache, KEY, time.time(), "fam", tileauto="99.0.0")
    client, name = cache.client, cache.name("entry", KEY)
    body = json.loads(client.hget(name, "record"))
    body["files"]["trials.json"]["trials"] = [{"a field of the future": True}]
    raw = json.dumps(body, sort_keys=True).encode()
    client.hset(name, mapping={"record": raw, "sha256": _signing.sha256_hex(raw)})
    assert cache.get(KEY) is None  # not for this version
    assert main(["cache", "verify", "--remote", server.url, "--delete"]) == 0
    out = capsys.readouterr().out
    assert "0 unusable" in out and "1 of another version (left alone)" in out, out
    assert cache.entry_keys() == [KEY]


# -- 7: a wrong signing key -----------------------------------------------------------------------
def test_pull_and_verify_fail_under_a_key_that_verifies_no_signature(
    server, monkeypatch, capsys, tmp_path
):
    from tileauto.cli import main

    RemoteCache(server.url, signing_key="fleet-key").put(KEY, record(), kernel_dir(tmp_path))
    monkeypatch.setenv("TILEAUTO_REMOTE_CACHE_KEY", "fleet-kee")  # a typo
    node = str(tmp_path / "node")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        code = main(["cache", "pull", "--remote", server.url, "--cache-dir", node])
    out = capsys.readouterr().out
    assert code == 1, out
    assert "signature does not verify" in out and "pulled 0 entries" in out
    code = main(["cache", "verify", "--remote", server.url])
    out = capsys.readouterr().out
    assert code == 1 and "1 whose signature does not verify" in out, out
    monkeypatch.setenv("TILEAUTO_REMOTE_CACHE_KEY", "fleet-key")  # the fleet's key: fine
    assert main(["cache", "verify", "--remote", server.url]) == 0


# -- (a): what travels to a Ray node --------------------------------------------------------------
def test_the_settings_sent_to_ray_nodes_carry_no_secret(monkeypatch):
    from tileauto.scale.ray._files import settings_env

    secrets = {
        "TILEAUTO_REMOTE_CACHE": "rediss://:hunter2@cache.internal:6380/0",
        "TILEAUTO_REMOTE_CACHE_PASSWORD": "hunter3",
        "TILEAUTO_REMOTE_CACHE_KEY": "fleet-secret",
    }
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("TILEAUTO_COMPILE_TIMEOUT", "77")
    sent = settings_env()
    assert not set(secrets) & set(sent)
    assert not any(s in json.dumps(sent) for s in ("hunter2", "hunter3", "fleet-secret"))
    assert sent["TILEAUTO_COMPILE_TIMEOUT"] == "77"  # the node's settings still travel
