"""A fleet sharing one Redis: real processes, real compiles, a real ``redis-server``.

Each child is a fresh Python (:func:`child_main`) with its own ``TILEAUTO_CACHE_DIR`` (a
machine's disk); children of one group share one (processes of one machine). "Mid-tuning" is
reached through the factory, which blocks on a release file while a tuning compiles it
(:func:`_gate`), and announces it with a marker file: no sleep stands in for an event.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import tvm
from redis_server import RedisServer, redis_server
from tvm import s_tir, te

import tileauto

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
CHILD = "import test_fleet; test_fleet.child_main()"
CONFIGS = [{"block": 8}, {"block": 16}, {"block": 32, "wrong": True}]
WAITING = ("for the fleet", "another process is tuning")  # the two waits' progress lines

pytestmark = [pytest.mark.timeout(900), pytest.mark.slow]


def _gate() -> None:
    """With ``FLEET_GATE``: say that a tuning compiles, then wait for the test's release."""
    gate = os.environ.get("FLEET_GATE")
    if not gate:
        return
    Path(gate, f"started-{os.getpid()}").touch()
    while not Path(gate, "release").exists():
        time.sleep(0.01)  # polling the release file: the test decides when


def fleet_kernel(n: int, block: int = 16, wrong: bool = False):
    """``B = A * 2 + 1`` split by ``block``; ``wrong=True`` computes ``A * 2`` (fails the check)."""
    _gate()
    A = te.placeholder((n,), "float32", name="A")
    one = 0 if wrong else 1
    B = te.compute((n,), lambda i: A[i] * tvm.tirx.const(2.0, "float32") + one, name="B")
    sch = s_tir.Schedule(te.create_prim_func([A, B]))
    (i,) = sch.get_loops(sch.get_sblock("B"))
    sch.split(i, [None, block])
    return sch.mod["main"]


def fleet_tuple_kernel(n: int, tile: tuple = (16, False)):
    """:func:`fleet_kernel` with block and ``wrong`` in one tuple (JSON makes it a list)."""
    if not isinstance(tile, tuple):
        raise TypeError(f"tile must come as the tuple the configs give, got {tile!r}")
    return fleet_kernel(n, *tile)


TUPLE_CONFIGS = [{"tile": (8, False)}, {"tile": (16, False)}, {"tile": (32, True)}]


def reference(A):
    return A * 2 + 1


def child_main() -> None:
    """Tune :func:`fleet_kernel` once, with ``ref_prog``; write what happened to FLEET_OUT."""
    import torch

    from tileauto.jit import compiler

    if os.environ.get("FLEET_GRACEFUL"):  # a program that notes a Ctrl-C and tunes on
        signal.signal(signal.SIGINT, lambda *_: Path(os.environ["FLEET_GRACEFUL"]).touch())
    if os.environ.get("FLEET_TUPLES"):
        tuner = tileauto.AutoTuner.from_kernel(fleet_tuple_kernel, TUPLE_CONFIGS)
    else:
        tuner = tileauto.AutoTuner.from_kernel(fleet_kernel, CONFIGS)
    tuner.args = (4096,)
    tuner.set_compile_args(out_idx=[-1], target="llvm")
    tuner.set_profile_args(warmup=1, rep=3, ref_prog=reference)
    result = tuner.run(verbose=True)
    a = torch.rand(4096)
    out = {
        "pid": os.getpid(),
        "cache_hit": result.cache_hit,
        "config": result.config,
        "tuples": all(isinstance(v, tuple) for v in result.config.values()),
        "key": result.key,
        "remote": result.extra.get("remote"),
        "compiles": compiler.COMPILES.count,
        "ok": bool(torch.allclose(result.kernel(a), reference(a))),
    }
    Path(os.environ["FLEET_OUT"]).write_text(json.dumps(out))


_CHILDREN: list[Child] = []  # every child started, killed at the end of its test if alive


@pytest.fixture(autouse=True)
def _no_child_left():
    yield
    while _CHILDREN:
        child = _CHILDREN.pop()
        if child.proc.poll() is None:  # a failed test left it blocked at the gate
            child.kill()


class Child:
    """One child process: its own stderr file and result file."""

    def __init__(self, folder: Path, name: str, cache: Path, env: dict[str, str]) -> None:
        self.name = name
        self.out = folder / f"{name}.json"
        self.err = folder / f"{name}.err"
        full = os.environ.copy()
        full.update(env)
        full["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(HERE), str(HERE.parent), str(ROOT), full.get("PYTHONPATH", "")) if p
        )
        full["TILEAUTO_CACHE_DIR"] = str(cache)
        full["FLEET_OUT"] = str(self.out)
        with open(self.err, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", CHILD],
                env=full,
                stdout=subprocess.DEVNULL,
                stderr=err,
                start_new_session=True,  # its own process group: kill -9 takes its workers too
            )
        _CHILDREN.append(self)

    def stderr(self) -> str:
        return self.err.read_text(errors="replace")

    def waiting(self) -> bool:
        return any(w in self.stderr() for w in WAITING)

    def result(self, timeout_s: float = 600) -> dict:
        rc = self.proc.wait(timeout=timeout_s)
        assert rc == 0, f"{self.name} exited with {rc}:\n{self.stderr()[-4000:]}"
        return json.loads(self.out.read_text())

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


def until(condition, what: str, children: list[Child], timeout_s: float = 300) -> None:
    """Poll ``condition`` (files the children write) until it holds; fail with their stderr."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        for child in children:
            if child.proc.poll() not in (None, 0):
                pytest.fail(f"{child.name} died waiting for {what}:\n{child.stderr()[-4000:]}")
        if time.monotonic() > deadline:
            tails = "\n".join(f"--- {c.name}\n{c.stderr()[-1500:]}" for c in children)
            pytest.fail(f"timed out waiting for {what}\n{tails}")
        time.sleep(0.02)


def started(gate: Path) -> int:
    return len(list(gate.glob("started-*")))


@pytest.fixture
def redis(tmp_path):
    with redis_server(tmp_path / "redis") as server:
        yield server


def test_eight_processes_on_two_machines_tune_one_key_once(tmp_path, redis):
    gate = tmp_path / "gate"
    gate.mkdir()
    env = {"TILEAUTO_REMOTE_CACHE": redis.url, "FLEET_GATE": str(gate)}
    machines = [tmp_path / "machine-a", tmp_path / "machine-b"]
    children = [Child(tmp_path, f"p{k}", machines[k % 2], env) for k in range(8)]
    # one tuning compiles (blocked), and every other process waits: on the lease, or on
    # its machine's disk lock behind a process waiting on the lease
    until(lambda: started(gate) >= 1, "a tuning to start", children)
    until(lambda: sum(c.waiting() for c in children) == 7, "seven waiters", children)
    (gate / "release").touch()
    results = [c.result() for c in children]
    tuned = [r for r in results if not r["cache_hit"]]
    assert len(tuned) == 1, results
    assert all(r["ok"] for r in results)
    assert {json.dumps(r["config"], sort_keys=True) for r in results} == {
        json.dumps(tuned[0]["config"], sort_keys=True)
    }
    assert tuned[0]["config"] != {"block": 32, "wrong": True}
    # the other machine got it from Redis (its first process compiled the winner once)
    tuner = results.index(tuned[0])
    other = [r for k, r in enumerate(results) if k % 2 != tuner % 2]
    assert any(r["remote"] == {"address": redis.url, "kernel": "compiled here"} for r in other)
    waits = "".join(c.stderr() for c in children)
    assert "is tuning" in waits and "since" in waits  # who holds the key, and since when


def test_the_lease_holder_killed_mid_tuning_another_finishes(tmp_path, redis):
    gate = tmp_path / "gate"
    gate.mkdir()
    env = {
        "TILEAUTO_REMOTE_CACHE": redis.url,
        "TILEAUTO_REMOTE_CACHE_LEASE": "3",  # the shortest a lease renewed in time may be
        "TILEAUTO_REMOTE_CACHE_TIMEOUT": "1",
    }
    holder = Child(tmp_path, "holder", tmp_path / "a", {**env, "FLEET_GATE": str(gate)})
    until(lambda: started(gate) >= 1, "the holder to tune", [holder])
    waiter = Child(tmp_path, "waiter", tmp_path / "b", env)  # its compiles do not block
    until(waiter.waiting, "the waiter to wait on the lease", [holder, waiter])
    holder.kill()  # kill -9 of the holder and its compile workers: its lease expires
    result = waiter.result()
    assert not result["cache_hit"] and result["ok"]
    from tileauto.cache.remote import RemoteCache

    assert RemoteCache(redis.url).get(result["key"]) is not None  # published by the waiter


def test_a_ctrl_c_the_holder_survives_leaves_it_the_key(tmp_path, redis):
    # the terminal's Ctrl-C reached the renewing helper too, which died without a word: the
    # lease lapsed while its holder tuned on, and a waiter tuned the key as well
    gate, noted = tmp_path / "gate", tmp_path / "sigint-noted"
    gate.mkdir()
    env = {
        "TILEAUTO_REMOTE_CACHE": redis.url,
        "TILEAUTO_REMOTE_CACHE_LEASE": "3",
        "TILEAUTO_REMOTE_CACHE_TIMEOUT": "1",
    }
    holder_env = {**env, "FLEET_GATE": str(gate), "FLEET_GRACEFUL": str(noted)}
    holder = Child(tmp_path, "holder", tmp_path / "a", holder_env)
    until(lambda: started(gate) >= 1, "the holder to tune", [holder])
    waiter = Child(tmp_path, "waiter", tmp_path / "b", env)
    until(waiter.waiting, "the waiter to wait on the lease", [holder, waiter])
    client = redis.client()
    (name,) = client.keys("tileauto:r1:lease:*")
    value = client.get(name)
    os.killpg(holder.proc.pid, signal.SIGINT)  # Ctrl-C: to the holder's whole process group
    until(noted.exists, "the holder to note the Ctrl-C", [holder, waiter])
    renewals, lowest = 0, client.pttl(name)
    while renewals < 2:  # the lease is renewed on (before the fix, it lapsed within 3 s)
        assert client.get(name) == value, "the holder's lease lapsed after the Ctrl-C"
        left = client.pttl(name)
        renewals += left > lowest
        lowest = left
    (gate / "release").touch()
    tuned, loaded = holder.result(), waiter.result()
    assert not tuned["cache_hit"] and tuned["ok"]
    assert loaded["cache_hit"] and loaded["ok"] and loaded["config"] == tuned["config"]


def test_redis_killed_and_restarted_mid_tuning(tmp_path, redis):
    gate = tmp_path / "gate"
    gate.mkdir()
    env = {"TILEAUTO_REMOTE_CACHE": redis.url, "TILEAUTO_REMOTE_CACHE_TIMEOUT": "1"}
    tuner = Child(tmp_path, "tuner", tmp_path / "a", {**env, "FLEET_GATE": str(gate)})
    until(lambda: started(gate) >= 1, "the tuning to start", [tuner])
    redis.kill()  # a crash: the lease and every entry are gone
    restarted = RedisServer(redis.data_dir)
    restarted.port = redis.port
    restarted.start()
    try:
        (gate / "release").touch()
        first = tuner.result()
        assert not first["cache_hit"] and first["ok"]
        # published to the restarted server: a fresh machine gets it without tuning
        fresh = Child(tmp_path, "fresh", tmp_path / "b", env).result()
        assert fresh["cache_hit"] and fresh["remote"] is not None and fresh["ok"]
    finally:
        restarted.stop()


def test_redis_down_at_publish_keeps_the_local_entry(tmp_path, redis):
    gate = tmp_path / "gate"
    gate.mkdir()
    env = {"TILEAUTO_REMOTE_CACHE": redis.url, "TILEAUTO_REMOTE_CACHE_TIMEOUT": "1"}
    tuner = Child(tmp_path, "tuner", tmp_path / "a", {**env, "FLEET_GATE": str(gate)})
    until(lambda: started(gate) >= 1, "the tuning to start", [tuner])
    redis.kill()
    (gate / "release").touch()
    first = tuner.result()
    assert not first["cache_hit"] and first["ok"]
    err = tuner.stderr()
    assert err.count(f"remote cache {redis.url}:") == 1, err[-3000:]  # one warning
    assert "tuning goes on with the local cache" in err
    again = Child(tmp_path, "again", tmp_path / "a", env).result()  # the same machine
    assert again["cache_hit"] and again["remote"] is None and again["compiles"] == 0


def test_a_signed_kernel_is_loaded_with_the_key_and_compiled_without(tmp_path, redis):
    env = {"TILEAUTO_REMOTE_CACHE": redis.url, "TILEAUTO_REMOTE_CACHE_KEY": "fleet-secret"}
    first = Child(tmp_path, "first", tmp_path / "a", env).result()
    assert not first["cache_hit"]
    keyed = Child(tmp_path, "keyed", tmp_path / "b", env).result()
    assert keyed["cache_hit"] and keyed["ok"] and keyed["compiles"] == 0
    assert keyed["remote"]["kernel"] == "signed kernel"
    unkeyed_env = {"TILEAUTO_REMOTE_CACHE": redis.url}
    unkeyed = Child(tmp_path, "unkeyed", tmp_path / "c", unkeyed_env).result()
    assert unkeyed["cache_hit"] and unkeyed["ok"] and unkeyed["compiles"] == 1
    assert unkeyed["remote"]["kernel"] == "compiled here"
    wrong_env = {**env, "TILEAUTO_REMOTE_CACHE_KEY": "another-secret"}
    client = redis.client()
    name = f"tileauto:r1:entry:{first['key']}"
    published = client.hgetall(name)
    wrong = Child(tmp_path, "wrong", tmp_path / "d", wrong_env)
    result = wrong.result()
    # another key (a rotation, a typo): used as without a key, never tuned again and published
    # over the fleet's entry (the nodes of each key re-tuned and replaced it, in turn)
    assert result["cache_hit"] and result["ok"] and result["compiles"] == 1
    assert result["remote"]["kernel"] == "compiled here"
    assert wrong.stderr().count("signature does not verify") == 1
    assert client.hgetall(name) == published


def test_a_winner_with_tuples_is_used_by_the_other_machines(tmp_path, redis):
    # JSON makes the tuple a list: the other machines found the list in no config of their
    # space ("not a config of this space; ignored") and tuned again, every one of them
    env = {"TILEAUTO_REMOTE_CACHE": redis.url, "FLEET_TUPLES": "1"}
    first = Child(tmp_path, "first", tmp_path / "a", env).result()
    assert not first["cache_hit"] and first["ok"] and first["tuples"]
    other = Child(tmp_path, "other", tmp_path / "b", env)
    second = other.result()
    assert second["cache_hit"] and second["ok"] and second["compiles"] == 1, other.stderr()
    assert second["remote"]["kernel"] == "compiled here" and second["tuples"]
    assert second["config"] == first["config"]


def test_a_forged_winner_is_a_miss_never_a_wrong_kernel(tmp_path, redis):
    from tileauto.cache import _signing

    env = {"TILEAUTO_REMOTE_CACHE": redis.url}
    first = Child(tmp_path, "first", tmp_path / "a", env).result()
    client = redis.client()
    name = f"tileauto:r1:entry:{first['key']}"
    body = json.loads(client.hget(name, "record"))
    body["files"]["best_config.json"]["config"] = {"block": 32, "wrong": True}  # wrong results
    raw = json.dumps(body, sort_keys=True).encode()
    client.hset(name, mapping={"record": raw, "sha256": _signing.sha256_hex(raw)})
    victim = Child(tmp_path, "victim", tmp_path / "b", env)
    result = victim.result()
    assert not result["cache_hit"] and result["ok"]
    # tuned again: a passing config wins (8 or 16, whichever timed faster this time)
    assert result["config"] in ({"block": 8, "wrong": False}, {"block": 16, "wrong": False})
    assert victim.stderr().count("fails the check here") == 1
    # a winner outside the space is refused before anything is compiled
    body["files"]["best_config.json"]["config"] = {"block": 999}
    raw = json.dumps(body, sort_keys=True).encode()
    client.hset(name, mapping={"record": raw, "sha256": _signing.sha256_hex(raw)})
    other = Child(tmp_path, "other", tmp_path / "c", env)
    assert not other.result()["cache_hit"]
    assert "not a config of this space" in other.stderr()


def test_another_tileauto_version_in_redis_is_ignored(tmp_path, redis):
    from tileauto.cache import _signing

    env = {"TILEAUTO_REMOTE_CACHE": redis.url}
    first = Child(tmp_path, "first", tmp_path / "a", env).result()
    client = redis.client()
    name = f"tileauto:r1:entry:{first['key']}"
    body = json.loads(client.hget(name, "record"))
    body["versions"]["tileauto"] = "0.0.1"
    raw = json.dumps(body, sort_keys=True).encode()
    client.hset(name, mapping={"record": raw, "sha256": _signing.sha256_hex(raw)})
    skewed = Child(tmp_path, "skewed", tmp_path / "b", env)
    result = skewed.result()
    assert not result["cache_hit"] and result["ok"]
    assert "unusable" not in skewed.stderr()  # ignored quietly, then replaced
    assert json.loads(client.hget(name, "record"))["versions"]["tileauto"] != "0.0.1"
