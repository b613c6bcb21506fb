"""The fleet's Redis when things go wrong around a sound entry (against a real ``redis-server``).

A waiter whose connection drops keeps waiting; an entry of another version is left alone by
``verify``; a node of another signing key uses an entry as a keyless node does; a database
that the URL names twice or not as a number is refused; the default config is one trial.
No sleep stands in for an event: the tests wait on what the server shows (``CLIENT LIST``).
"""

from __future__ import annotations

import json
import threading
import time
import warnings

import pytest
from redis_server import RedisServer, redis_server
from test_remote import DEVICE, KEY, TARGET, caught, kernel_dir, record, trial

from tileauto.cache import _signing
from tileauto.cache.remote import RemoteCache
from tileauto.errors import SettingsError
from tileauto.settings import Settings

GUARD_S = 60.0  # a bound on each wait for the server's state, never the expected time


@pytest.fixture
def server(tmp_path):
    with redis_server(tmp_path / "redis") as srv:
        yield srv


def until(condition, what: str, timeout_s: float = GUARD_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)  # polling the server's state, not standing in for it


def subscribers(server) -> set[str]:
    """The ids of the server's pub/sub clients."""
    listed = server.client().execute_command("CLIENT", "LIST", "TYPE", "pubsub")
    text = listed.decode() if isinstance(listed, bytes) else str(listed)
    return {part[3:] for line in text.splitlines() for part in line.split() if part[:3] == "id="}


class Waiter(threading.Thread):
    """A FleetStore taking ``KEY``'s lease in a thread: its lease (None: it does not tune)."""

    def __init__(self, cache: RemoteCache) -> None:
        super().__init__(daemon=True)
        from types import SimpleNamespace

        from tileauto.tune.stores import FleetStore

        self.cache = cache
        self.seen: list = []
        local = SimpleNamespace(key=KEY, entry=SimpleNamespace(meta={}))
        self.store = FleetStore(local, cache, on_wait=self.seen.append)  # type: ignore[arg-type]
        self.lease = self.error = None

    def run(self) -> None:
        try:
            self.lease = self.store._take_lease()
        except BaseException as exc:  # noqa: BLE001 - the test reports it
            self.error = exc

    def finish(self):
        self.join(GUARD_S)
        assert not self.is_alive(), "the waiter did not return"
        assert self.error is None, self.error
        if self.lease is not None:  # it would tune: stop its renewing helper
            self.lease.stop()
        return self.lease


def waiting(server, waiter: Waiter) -> set[str]:
    """Until ``waiter`` waits on the holder, subscribed; the subscribers' ids."""
    until(lambda: waiter.seen and subscribers(server), "the waiter to subscribe and wait")
    return subscribers(server)


# -- 1: a dropped connection ----------------------------------------------------------------------
def test_a_waiter_whose_connection_is_killed_keeps_waiting_and_does_not_tune(server):
    holder = RemoteCache(server.url, lease_s=30).lease(KEY)
    assert holder.acquire()
    waiter = Waiter(RemoteCache(server.url, lease_s=30))
    waiter.start()
    before = waiting(server, waiter)
    server.client().execute_command("CLIENT", "KILL", "TYPE", "pubsub")  # a proxy's timeout
    # it subscribes again (or, before the fix, gave up and took to tuning on its own)
    until(lambda: not waiter.is_alive() or subscribers(server) - before, "a new subscription")
    RemoteCache(server.url).put(KEY, record())  # the holder publishes
    assert waiter.finish() is None  # the published entry is loaded: no tuning, no lease
    assert not waiter.cache._faulted  # and no "tuning goes on with the local cache"
    assert server.client().get(holder.name) == holder.value  # the holder kept its lease
    holder.release()


def test_a_waiter_keeps_waiting_across_a_redis_restart(tmp_path):
    with redis_server(tmp_path / "r", "--appendonly", "yes") as srv:
        holder = RemoteCache(srv.url, lease_s=30).lease(KEY)
        assert holder.acquire()
        waiter = Waiter(RemoteCache(srv.url, lease_s=30, timeout_s=1))
        waiter.start()
        waiting(srv, waiter)
        srv.stop()  # SIGTERM: the append-only file keeps the lease, as docs/scale.md advises
        restarted = RedisServer(srv.data_dir, "--appendonly", "yes")
        restarted.port = srv.port
        restarted.start()
        try:
            assert restarted.client().get(holder.name) == holder.value
            until(lambda: not waiter.is_alive() or subscribers(restarted), "a new subscription")
            RemoteCache(restarted.url).put(KEY, record())
            assert waiter.finish() is None and not waiter.cache._faulted
        finally:
            restarted.stop()


def test_a_waiter_gives_up_when_redis_stays_away_past_a_lease(tmp_path, monkeypatch):
    from tileauto.cache import remote

    monkeypatch.setattr(remote, "RECONNECT_MAX_S", 0.1)
    with redis_server(tmp_path / "r") as srv:
        holder = RemoteCache(srv.url, lease_s=6, timeout_s=1).lease(KEY)
        assert holder.acquire()
        holder.keep_renewed(RemoteCache(srv.url).connection())
        try:
            waiter = Waiter(RemoteCache(srv.url, lease_s=6, timeout_s=0.5))
            waiter.start()
            waiting(srv, waiter)
            srv.kill()  # gone for good
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the one warning: tuning goes on locally
                assert waiter.finish() is None  # None: no lease, this process tunes alone
            assert waiter.cache._faulted
        finally:
            holder.stop()


# -- 2: another version -----------------------------------------------------------------------------
def _republish(server, cache: RemoteCache, key: str, **versions: str) -> None:
    name = cache.name("entry", key)
    body = json.loads(server.client().hget(name, "record"))
    body["versions"].update(versions)
    raw = json.dumps(body, sort_keys=True).encode()
    server.client().hset(name, mapping={"record": raw, "sha256": _signing.sha256_hex(raw)})


def test_another_version_names_what_differs():
    from tileauto.cache.key import versions
    from tileauto.cache.remote import another_version

    ours = versions()
    assert another_version({"format": 1, "versions": ours}) is None
    tvm = another_version({"format": 1, "versions": {**ours, "tvm": "0.26.0"}})
    assert tvm == f"another TVM 0.26.0 (here {ours['tvm']})"
    assert "tileauto 0.0.1" in str(
        another_version({"format": 1, "versions": {**ours, "tileauto": "0.0.1"}})
    )
    assert "remote format" in str(another_version({"format": 9, "versions": ours}))


def test_verify_leaves_entries_of_another_version_alone(server, monkeypatch, capsys):
    from tileauto.cache.remote import iter_checked
    from tileauto.cli import main

    cache = RemoteCache(server.url)
    cache.put(KEY, record())
    cache.put("a" * 32, record())
    _republish(server, cache, "a" * 32, tvm="0.26.0")
    monkeypatch.delenv("TILEAUTO_REMOTE_CACHE_KEY", raising=False)
    assert main(["cache", "verify", "--remote", server.url, "--delete"]) == 0
    assert "deleted" not in capsys.readouterr().out
    assert cache.entry_keys() == sorted([KEY, "a" * 32])  # nothing deleted
    code = main(["cache", "verify", "--remote", server.url])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "another TVM 0.26.0" in out and "left alone" in out and "FAIL" not in out
    checked = {c.key: c for c in iter_checked(cache)}
    assert checked["a" * 32].problem is None and "TVM 0.26.0" in str(checked["a" * 32].other)


# -- 3: another signing key -------------------------------------------------------------------------
def test_a_node_of_another_key_uses_the_entry_as_a_keyless_node_does(server, tmp_path):
    RemoteCache(server.url, signing_key="alpha").put(KEY, record(), kernel_dir(tmp_path))
    beta = RemoteCache(server.url, signing_key="beta")
    (first, w1), (second, w2) = caught(lambda: beta.get(KEY)), caught(lambda: beta.get(KEY))
    for entry in (first, second):
        assert entry is not None and entry.config == {"block": 16}
        assert entry.kernel is None and not entry.signed  # never the unsigned kernel
    assert len(w1) == 1 and "signature does not verify" in w1[0] and not w2  # one warning
    # a waiter of another key stops at it: it loads it, never tunes it again and overwrites it
    assert RemoteCache(server.url).lease(KEY).acquire()  # the fleet's holder
    assert beta.wait_for(KEY, beta.lease(KEY)) is False


# -- 5: the database of a URL -----------------------------------------------------------------------
@pytest.mark.parametrize(
    "url, words",
    [
        ("redis://h:6390/cache", "expected the database as a number"),
        ("redis://h:6390/1?db=3", "the path names database 1 and db= names 3"),
        ("redis://h:6390/1?password=hunter2&db=3", "the path names database 1"),
        ("redis://h:6390/0?db=x", "expected db= to be one number"),
    ],
)
def test_a_database_that_is_not_one_number_is_refused(url, words):
    with pytest.raises(SettingsError, match=f"TILEAUTO_REMOTE_CACHE=.*{words}") as exc:
        Settings.from_env({"TILEAUTO_REMOTE_CACHE": url})
    assert "hunter2" not in str(exc.value)
    with pytest.raises(SettingsError, match=f"url=.*{words}"):
        RemoteCache(url)


def test_a_database_given_once_is_taken():
    for url in ("redis://h:6390/3", "redis://h:6390", "redis://h:6390/3?db=3", "redis://h/?db=2"):
        assert RemoteCache(url).url == url


# -- 6: the default config, once ------------------------------------------------------------------
def test_the_default_config_is_one_trial(server):
    body = record()
    default = trial(0, 8, 1.0)  # the default is also config 0: stored as both
    body["files"]["trials.json"]["default"] = default.to_json()
    cache = RemoteCache(server.url)
    cache.put(KEY, body, family="fam")
    cache.put("a" * 32, record(device={"kind": "cpu", "name": "other"}), family="fam")
    other = RemoteCache(server.url)
    assert [t.config for t in other.get(KEY).trials()] == [{"block": 8}, {"block": 16}]
    found = other.trials_elsewhere("fam", TARGET, {**DEVICE, "name": "x"})
    assert [len(f.trials) for f in found] == [2, 2]
    separate = record()
    separate["files"]["trials.json"]["default"] = trial(-1, 4, 2.0).to_json()
    cache.put(KEY, separate)
    assert [t.config for t in other.get(KEY).trials()] == [
        {"block": 8},
        {"block": 16},
        {"block": 4},
    ]


def test_show_remote_lists_each_config_once_with_ratios(server, monkeypatch, capsys):
    from tileauto.cli import main

    body = record()
    body["files"]["trials.json"]["default"] = trial(0, 8, 1.0).to_json()
    RemoteCache(server.url).put(KEY, body)
    monkeypatch.delenv("TILEAUTO_REMOTE_CACHE_KEY", raising=False)
    assert main(["cache", "show", KEY[:8], "--remote", server.url]) == 0
    out = capsys.readouterr().out
    assert "2 configs" in out and "1.00x" in out and "2.00x" in out, out


# -- 9: show --remote KEY ---------------------------------------------------------------------------
def test_show_takes_the_key_after_a_bare_remote(server, monkeypatch, capsys):
    from tileauto.cli import main

    RemoteCache(server.url).put(KEY, record())
    monkeypatch.setenv("TILEAUTO_REMOTE_CACHE", server.url)
    monkeypatch.delenv("TILEAUTO_REMOTE_CACHE_KEY", raising=False)
    assert main(["cache", "show", "--remote", KEY[:8]]) == 0
    assert KEY in capsys.readouterr().out
    assert main(["cache", "show", "--remote", server.url, KEY[:8]]) == 0
    assert KEY in capsys.readouterr().out
    assert main(["cache", "show", "--remote"]) == 2
    assert "expected KEY" in capsys.readouterr().err
