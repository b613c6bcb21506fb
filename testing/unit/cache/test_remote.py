"""The remote level of the tuning cache against a real ``redis-server`` (started per test).

Records round-trip; a damaged, foreign-version or foreign-format entry is a miss (one warning
for the first); a record of another key gives its configs, never its kernel (one warning); a
signed kernel is accepted under the key and refused without it;
the lease gives one holder, is taken over past the holder's limit or after its expiry; a
server that is down, paused or full is one warning naming the address.
"""

from __future__ import annotations

import json
import time
import warnings
from pathlib import Path

import pytest
from redis_server import RedisServer, free_port, redis_server

from tileauto.cache import _signing
from tileauto.cache._lease import Holder
from tileauto.cache.key import versions
from tileauto.cache.remote import FORMAT, RemoteCache, check_url, family_of, shown_address
from tileauto.errors import SettingsError
from tileauto.records import LatencyStats, Trial, TrialStatus
from tileauto.settings import Settings

KEY = "0123456789abcdef0123456789abcdef"
TARGET = '{"kind": "llvm"}'
DEVICE = {"kind": "cpu", "name": "test"}


@pytest.fixture
def server(tmp_path):
    with redis_server(tmp_path / "redis") as srv:
        yield srv


def trial(index: int, block: int, ms: float) -> Trial:
    stats = LatencyStats.from_samples_ns([ms * 1e6] * 5)
    return Trial(index, {"block": block}, TrialStatus.OK, latency=stats)


def record(config=None, target=TARGET, device=None) -> dict:
    trials = [trial(0, 8, 1.0), trial(1, 16, 0.5)]
    return {
        "kind": "autotuner",
        "kernel": "scale_add",
        "target": target,
        "device": device or DEVICE,
        "files": {
            "best_config.json": {"config": config or {"block": 16}},
            "latency.json": {"latency_ms": 0.5, "ref_latency_ms": None},
            "trials.json": {"trials": [t.to_json() for t in trials], "default": None},
        },
    }


def kernel_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "kernel"
    folder.mkdir()
    (folder / "kernel.so").write_bytes(b"\x7fELF not really a library")
    (folder / "kernel.json").write_text("{}")
    return folder


def caught(fn):
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        out = fn()
    return out, [str(w.message) for w in got]


# -- records --------------------------------------------------------------------------------------
def test_a_record_round_trips_with_its_trials(server):
    cache = RemoteCache(server.url)
    assert cache.get(KEY) is None  # a miss, no warning
    assert cache.put(KEY, record(), family="fam")
    entry = cache.get(KEY)
    assert entry is not None and entry.config == {"block": 16} and entry.latency_ms == 0.5
    assert [t.config for t in entry.trials()] == [{"block": 8}, {"block": 16}]
    assert entry.kernel is None and not entry.signed
    assert cache.entry_keys() == [KEY]


def test_a_damaged_record_is_a_miss_with_one_warning(server):
    cache = RemoteCache(server.url)
    cache.put(KEY, record())
    name = cache.name("entry", KEY)
    raw = server.client().hget(name, "record")
    server.client().hset(name, "record", raw.replace(b"0.5", b"0.1"))
    (first, w1), (second, w2) = caught(lambda: cache.get(KEY)), caught(lambda: cache.get(KEY))
    assert first is None and second is None
    assert len(w1) == 1 and "damaged" in w1[0] and "127.0.0.1" in w1[0] and not w2


def test_a_forged_record_fails_its_signature(server):
    signed = RemoteCache(server.url, signing_key="fleet-secret")
    signed.put(KEY, record())
    name = signed.name("entry", KEY)
    body = json.loads(server.client().hget(name, "record"))
    body["files"]["best_config.json"]["config"] = {"block": 8}  # the forger's pick
    raw = json.dumps(body, sort_keys=True).encode()
    forged_mac = _signing.sign(b"not the key", raw)
    server.client().hset(
        name, mapping={"record": raw, "sha256": _signing.sha256_hex(raw), "hmac": forged_mac}
    )
    entry, messages = caught(lambda: signed.get(KEY))
    # its configs only, as a keyless node reads them (its winner is compiled and checked)
    assert entry is not None and not entry.signed and entry.kernel is None
    assert len(messages) == 1 and "signature does not verify" in messages[0]


def test_a_signed_kernel_is_accepted_with_the_key_and_refused_without(server, tmp_path):
    RemoteCache(server.url, signing_key="fleet-secret").put(KEY, record(), kernel_dir(tmp_path))
    with_key = RemoteCache(server.url, signing_key="fleet-secret").get(KEY)
    assert with_key is not None and with_key.signed
    assert with_key.kernel is not None
    assert with_key.kernel["kernel.so"] == b"\x7fELF not really a library"
    without = RemoteCache(server.url).get(KEY)
    assert without is not None and without.kernel is None  # its config only: compiled locally
    other, messages = caught(lambda: RemoteCache(server.url, signing_key="other").get(KEY))
    assert other is not None and other.kernel is None and not other.signed  # as without a key
    assert "signature does not verify" in messages[0]


def test_a_swapped_kernel_fails_its_signature(server, tmp_path):
    cache = RemoteCache(server.url, signing_key="fleet-secret")
    cache.put(KEY, record(), kernel_dir(tmp_path))
    name = cache.name("entry", KEY)
    blob = json.loads(server.client().hget(name, "kernel"))
    blob["kernel.so"] = "bWFsd2FyZQ=="  # "malware"
    server.client().hset(name, "kernel", json.dumps(blob).encode())
    entry, messages = caught(lambda: cache.get(KEY))
    assert entry is None and "kernel's signature" in messages[0]


@pytest.mark.parametrize("field", ["versions", "format"])
def test_an_entry_of_another_version_or_format_is_ignored_quietly(server, field):
    cache = RemoteCache(server.url)
    cache.put(KEY, record())
    name = cache.name("entry", KEY)
    body = json.loads(server.client().hget(name, "record"))
    body[field] = {**versions(), "tileauto": "0.0.1"} if field == "versions" else FORMAT + 1
    raw = json.dumps(body, sort_keys=True).encode()
    server.client().hset(name, mapping={"record": raw, "sha256": _signing.sha256_hex(raw)})
    entry, messages = caught(lambda: cache.get(KEY))
    assert entry is None and messages == []


def test_an_entry_naming_another_key_is_refused(server):
    cache = RemoteCache(server.url)
    cache.put(KEY, record())
    other = "f" * 32
    server.client().rename(cache.name("entry", KEY), cache.name("entry", other))
    entry, messages = caught(lambda: cache.get(other))
    assert entry is None and "another key" in messages[0]


def test_trials_of_other_devices_for_the_search(server):
    cache = RemoteCache(server.url)
    cache.put(KEY, record(), family="fam")
    cache.put("a" * 32, record(device={"kind": "cpu", "name": "other"}), family="fam")
    cache.put("b" * 32, record(), family="another-problem")
    found = cache.trials_elsewhere("fam", TARGET, DEVICE)
    assert [f.key for f in found] == ["a" * 32]
    assert found[0].device == {"kind": "cpu", "name": "other"} and len(found[0].trials) == 2


def scale_add(n: int, block: int = 8) -> int:
    """A factory as the key sees it (its source and its call)."""
    return n * block


def test_a_fleet_store_gives_the_search_the_trials_of_other_devices(server):
    from types import SimpleNamespace

    from tileauto.tune.stores import FleetStore

    cache = RemoteCache(server.url)
    cache.put("a" * 32, record(device={"kind": "cpu", "name": "other"}), family="fam")
    cache.put(KEY, record(), family="fam")
    entry = SimpleNamespace(meta={"target": TARGET, "device": DEVICE})
    local = SimpleNamespace(key=KEY, entry=entry)
    store = FleetStore(local, cache, family="fam")  # type: ignore[arg-type]
    assert [f.key for f in store.trials_elsewhere()] == ["a" * 32]
    assert FleetStore(local, cache).trials_elsewhere() == []  # type: ignore[arg-type]


def test_a_fleet_tunings_search_prior_holds_the_trials_of_other_devices(server, tmp_path):
    """Issue 37, item 8: the search's transfer reads the fleet's Redis as well as the disk."""
    from types import SimpleNamespace

    from tileauto.search import GuidedSearch, SameProblem
    from tileauto.tune.defaults import with_cache_prior
    from tileauto.tune.stores import FleetStore

    cache = RemoteCache(server.url)
    cache.put("a" * 32, record(device={"kind": "cpu", "name": "other"}), family="fam")
    entry = SimpleNamespace(meta={"target": TARGET, "device": DEVICE})
    store = FleetStore(SimpleNamespace(key=KEY, entry=entry), cache, family="fam")  # type: ignore[arg-type]
    problem = SimpleNamespace(
        settings=Settings.from_env({"TILEAUTO_CACHE_DIR": str(tmp_path / "empty")}),
        factory=scale_add,
        name="scale_add",
    )
    search = GuidedSearch()
    with_cache_prior(search, problem, store)  # type: ignore[arg-type]
    (records,) = search._given()  # read when the search starts: the same call, elsewhere
    assert isinstance(records, SameProblem)
    assert [[t.config for t in r] for r in records.records] == [[{"block": 8}, {"block": 16}]]
    with_cache_prior(search, problem, None)  # no fleet: the (empty) disk cache only
    assert search._given() == []
    off = GuidedSearch()
    problem.settings = Settings.from_env(
        {"TILEAUTO_CACHE_DIR": str(tmp_path / "empty"), "TILEAUTO_SEARCH_PRIOR": "0"}
    )
    with_cache_prior(off, problem, store)  # type: ignore[arg-type]
    assert off._given is None  # TILEAUTO_SEARCH_PRIOR=0: nothing handed in


def test_family_of_ignores_the_target_but_not_the_call():
    assert family_of(scale_add, (1024,), {}) == family_of(scale_add, (1024,), {})
    assert family_of(scale_add, (1024,), {}) != family_of(scale_add, (2048,), {})


# -- faults ---------------------------------------------------------------------------------------
def test_a_server_that_is_down_is_one_warning_naming_its_address():
    cache = RemoteCache(f"redis://:pw@127.0.0.1:{free_port()}/0", timeout_s=0.5)
    (got, w1), (put, w2) = caught(lambda: cache.get(KEY)), caught(lambda: cache.put(KEY, record()))
    assert got is None and put is False
    assert len(w1) == 1 and f"redis://127.0.0.1:{cache.url.split(':')[-1]}" in w1[0]
    assert "pw" not in w1[0] and "local cache" in w1[0]
    assert w2 == []  # one warning: later faults are logged


def test_a_paused_server_times_out(server):
    # stored at the default limit: a slow first connect on a loaded machine must not spend
    # the 0.2 s client's one warning before the pause
    assert RemoteCache(server.url).put(KEY, record())
    cache = RemoteCache(server.url, timeout_s=0.2)
    pauser = server.client()
    # a server that stops answering; 4 s: UNPAUSE waits for the pause's end (the pauser's
    # socket gives up after 5)
    pauser.execute_command("CLIENT", "PAUSE", "4000", "ALL")
    try:
        start = time.monotonic()
        got, messages = caught(lambda: cache.get(KEY))
        waited = time.monotonic() - start
    finally:
        pauser.execute_command("CLIENT", "UNPAUSE")
    assert got is None and "Timeout" in messages[0], messages
    assert waited < 3.5  # the operation's limit (0.2 s), not the pause, ended it


def test_a_full_server_refuses_the_publish(tmp_path):
    with redis_server(
        tmp_path / "full", "--maxmemory", "2mb", "--maxmemory-policy", "noeviction"
    ) as srv:
        client = srv.client()
        filler = b"x" * 65536
        n = 0
        while True:  # fill it to its limit
            try:
                client.set(f"fill:{n}", filler)
            except Exception:  # noqa: BLE001 - OOM: full
                break
            n += 1
        cache = RemoteCache(srv.url)
        put, messages = caught(lambda: cache.put(KEY, record()))
        assert put is False and ("OutOfMemory" in messages[0] or "OOM" in messages[0])


def test_a_restarted_server_is_used_again(tmp_path):
    with redis_server(tmp_path / "r") as srv:
        cache = RemoteCache(srv.url, timeout_s=1)
        assert cache.put(KEY, record())
        srv.kill()
        got, messages = caught(lambda: cache.get(KEY))
        assert got is None and len(messages) == 1
        restarted = RedisServer(srv.data_dir)
        restarted.port = srv.port
        restarted.start()
        try:
            assert cache.put(KEY, record())  # the client reconnects by itself
            assert cache.get(KEY) is not None
        finally:
            restarted.stop()


# -- the lease ------------------------------------------------------------------------------------
def test_one_holder_at_a_time_and_who_it_is(server):
    cache = RemoteCache(server.url, lease_s=30)
    first, second = cache.lease(KEY, limit_s=60), cache.lease(KEY)
    assert first.acquire() and not second.acquire()
    holder = second.holder()
    assert holder is not None and holder.limit_s == 60 and not holder.overdue(time.time())
    assert ":" in holder.owner and "since" in holder.describe(time.time())
    second.release()  # not its lease: nothing happens
    assert cache.lease(KEY).holder() is not None
    assert first.renew()
    first.release()
    assert second.acquire()


def test_a_holder_past_its_limit_is_taken_over(server, monkeypatch):
    from tileauto.cache import _lease

    monkeypatch.setattr(_lease, "OVERDUE_MARGIN_S", 0.0)  # the bound alone: 1 ms
    cache = RemoteCache(server.url, lease_s=30)
    holder = cache.lease(KEY, limit_s=0.001)
    assert holder.acquire()
    seen = []
    waiter = cache.lease(KEY)
    while not holder.holder().overdue():  # a deadline of about a millisecond, Redis's clock
        pass
    assert cache.wait_for(KEY, waiter, seen.append)
    assert not holder.renew()  # the old holder learns it lost the lease


def test_overdue_leaves_a_margin_past_the_bound():
    holder = Holder("h:1", since=1000.0, limit_s=60.0, raw=b"")
    assert not holder.overdue(1000.0 + 60 + 29) and holder.overdue(1000.0 + 60 + 31)
    assert not Holder("h:1", 1000.0, None, b"").overdue(1e12)
    read = Holder("h:1", since=1000.0, limit_s=60.0, raw=b"", read_at=1000.0 + 91)
    assert read.overdue() and "(91 s)" in read.describe()  # on the clock it was read with


def test_a_dead_holder_expires_and_the_waiter_takes_it(server):
    from tileauto.cache._lease import Lease

    cache = RemoteCache(server.url, lease_s=3, timeout_s=1)
    dead = Lease(cache.client, cache.name("lease", KEY), 0.3, None)  # never renewed: kill -9
    assert dead.acquire()
    seen: list[Holder] = []
    waiter = cache.lease(KEY)
    assert cache.wait_for(KEY, waiter, seen.append)
    assert len(seen) == 1 and seen[0].raw == dead.value


def test_a_waiter_returns_when_the_entry_is_published(server):
    cache = RemoteCache(server.url, lease_s=30)
    holder = cache.lease(KEY)
    assert holder.acquire()
    cache.put(KEY, record())
    assert cache.wait_for(KEY, cache.lease(KEY)) is False


def test_a_waiter_does_not_stop_at_an_unusable_entry(server):
    cache = RemoteCache(server.url, lease_s=30)
    cache.put(KEY, record())
    server.client().hset(cache.name("entry", KEY), "sha256", "0" * 64)  # damaged
    waiter = cache.lease(KEY)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert cache.wait_for(KEY, waiter)  # it takes the lease: the key is tuned again


def test_the_holder_renews_its_lease(server):
    # the helper process must start within one lease: 1.5 s was too short at load 12
    cache = RemoteCache(server.url, lease_s=9)
    lease = cache.lease(KEY)
    assert lease.acquire()
    client = server.client()
    lowest = client.pttl(lease.name)
    lease.keep_renewed(cache.connection())  # a helper process: the tuning forks its workers
    try:
        while True:  # until a renewal has pushed the expiry back (every 3 s)
            left = client.pttl(lease.name)
            assert left > 0, "the lease expired: it was not renewed"
            if left > lowest:
                break
            lowest = left
    finally:
        assert lease.stop() == []  # no fault
    assert client.get(lease.name) == lease.value  # stopping leaves the lease to release()
    lease.release()
    assert client.get(lease.name) is None


def test_the_renewing_helper_frees_the_key_when_its_holder_dies(server):
    cache = RemoteCache(server.url, lease_s=30)
    lease = cache.lease(KEY)
    assert lease.acquire()
    lease.keep_renewed(cache.connection())
    helper = lease._helper
    helper.stdin.close()  # what the holder's death does to the pipe (no "stop" said)
    assert helper.wait(timeout=60) == 0
    assert server.client().get(lease.name) is None  # released at once, not after 30 s


def test_the_renewing_helper_reports_faults(tmp_path):
    with redis_server(tmp_path / "r") as srv:
        cache = RemoteCache(srv.url, lease_s=3, timeout_s=0.5)
        lease = cache.lease(KEY)
        assert lease.acquire()
        lease.keep_renewed(cache.connection())
        srv.kill()
        faults: list[str] = []
        while not faults:  # the helper prints its first fault of a kind at once
            line = lease._helper.stdout.readline()
            assert line, "the helper ended without reporting the fault"
            faults.append(line)
        lease.stop()
        assert "ConnectionError" in faults[0]


# -- settings and arguments -----------------------------------------------------------------------
def test_settings_read_the_remote_variables_and_hide_secrets():
    s = Settings.from_env(
        {
            "TILEAUTO_REMOTE_CACHE": "rediss://:hunter2@cache.local:6380/3",
            "TILEAUTO_REMOTE_CACHE_KEY": "k",
            "TILEAUTO_REMOTE_CACHE_LEASE": "6",
        }
    )
    shown = s.describe()
    assert "hunter2" not in json.dumps(shown)
    assert shown["TILEAUTO_REMOTE_CACHE_KEY"] == "(set)"
    cache = RemoteCache.from_settings(s)
    assert cache is not None and cache.lease_s == 6 and cache.signing_key == b"k"
    assert cache.address == "rediss://cache.local:6380/3"
    assert RemoteCache.from_settings(Settings.from_env({})) is None


def test_a_password_is_never_shown_in_a_query_or_a_refused_url():
    # redis-py reads ?password= too; a refused URL was echoed whole in the error
    s = Settings.from_env({"TILEAUTO_REMOTE_CACHE": "redis://h:6379/1?password=hunter2&db=1"})
    assert s.describe()["TILEAUTO_REMOTE_CACHE"] == "redis://h:6379/1?password=***&db=1"
    for bad in ("redis//:hunter2@cache.local:6379/0", "http://h/0?Password=hunter2"):
        with pytest.raises(SettingsError, match="expected redis://") as exc:
            Settings.from_env({"TILEAUTO_REMOTE_CACHE": bad})
        assert "hunter2" not in str(exc.value) and "***" in str(exc.value)


@pytest.mark.parametrize("bad", ["http://host:6379", "redis://", "host:6379", "redis://h:port/0"])
def test_a_bad_url_names_the_variable(bad):
    with pytest.raises(SettingsError, match="TILEAUTO_REMOTE_CACHE=.*expected redis://"):
        Settings.from_env({"TILEAUTO_REMOTE_CACHE": bad})
    with pytest.raises(SettingsError, match="store"):
        check_url(bad, "store")


def test_store_option_is_checked_where_it_is_given():
    import tileauto
    from tileauto.tune import defaults

    defaults.check_store(None)
    defaults.check_store("local")
    defaults.check_store("redis://h:1/0")
    with pytest.raises(TypeError, match="store must be"):
        tileauto.autotune(configs=[{}], store=42)
    with pytest.raises(SettingsError, match="store"):
        tileauto.AutoTuner(lambda: None, [{}]).set_profile_args(store="http://nope")


def test_shown_address_drops_the_password():
    assert shown_address("redis://user:pw@h:1/2") == "redis://h:1/2"


def test_a_password_from_the_url_or_the_variable(tmp_path):
    with redis_server(tmp_path / "pw", "--requirepass", "s3cret") as srv:
        host = f"127.0.0.1:{srv.port}/0"
        assert RemoteCache(f"redis://:s3cret@{host}").put(KEY, record())
        assert RemoteCache(f"redis://{host}", password="s3cret").get(KEY) is not None
        s = Settings.from_env(
            {"TILEAUTO_REMOTE_CACHE": f"redis://{host}", "TILEAUTO_REMOTE_CACHE_PASSWORD": "s3cret"}
        )
        cache = RemoteCache.from_settings(s)
        assert cache is not None and cache.get(KEY) is not None
        got, messages = caught(lambda: RemoteCache(f"redis://{host}").get(KEY))
        assert got is None and "Authentication" in messages[0] and "s3cret" not in messages[0]


def test_tls_with_the_fleet_ca(tmp_path):
    """``rediss://`` against a redis-server with TLS only, its certificate from a private CA:
    trusted through the URL's ``ssl_ca_certs``, refused (one warning) without it."""
    import shutil
    import subprocess

    from redis_server import needs_redis

    needs_redis()
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed: apt-get install -y openssl")

    def ssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=tmp_path, check=True, capture_output=True)

    ssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt",
        "-days", "2", "-subj", "/CN=fleet test CA")  # fmt: skip
    ssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
        "-subj", "/CN=127.0.0.1")  # fmt: skip
    (tmp_path / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    ssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "server.crt", "-days", "2", "-extfile", "ext.cnf")  # fmt: skip
    port = free_port()
    proc = subprocess.Popen(
        ["redis-server", "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1",
         "--tls-cert-file", "server.crt", "--tls-key-file", "server.key",
         "--tls-ca-cert-file", "ca.crt", "--tls-auth-clients", "no", "--save", "",
         "--dir", str(tmp_path)],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        url = f"rediss://127.0.0.1:{port}/0?ssl_ca_certs={tmp_path / 'ca.crt'}"
        cache = RemoteCache(url, timeout_s=1)
        deadline = time.monotonic() + 30
        while True:  # until it answers over TLS
            try:
                cache.ping()
                break
            except Exception:  # noqa: BLE001 - not listening yet
                assert proc.poll() is None, "redis-server exited (built without TLS?)"
                assert time.monotonic() < deadline, "redis-server never answered over TLS"
                time.sleep(0.01)
        assert cache.put(KEY, record()) and cache.get(KEY) is not None
        assert cache.address == f"rediss://127.0.0.1:{port}/0"
        untrusted = RemoteCache(f"rediss://127.0.0.1:{port}/0", timeout_s=1)
        got, messages = caught(lambda: untrusted.get(KEY))
        assert got is None and "CERTIFICATE_VERIFY_FAILED" in messages[0]
    finally:
        proc.terminate()
        proc.wait()
